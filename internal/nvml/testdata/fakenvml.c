/* A stand-in for libnvidia-ml.so.1 built by the package's tests: two H200s
 * joined by 18 NVLinks, answering through NVML's C ABI so that the shim's
 * marshaling (struct layouts, strings, handles) is checked for real.
 * -DMINIMAL leaves out the optional entry points; -DNO_COUNT leaves out a
 * required one. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

typedef struct {
	char busIdLegacy[16];
	unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
	char busId[32];
} pci_t;

typedef struct {
	unsigned char clusterUuid[16];
	int status;
	unsigned int cliqueId;
	unsigned char state;
} fabric_t;

typedef struct {
	const char *bus;
	unsigned int busnum;
	const char *uuid;
} dev_t_;

static dev_t_ devs[2] = {
	{"00000000:18:00.0", 0x18, "GPU-11111111-2222-3333-4444-555555555555"},
	{"00000000:2A:00.0", 0x2a, "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"},
};
static int inited;

static int devidx(void *d) {
	for (int i = 0; i < 2; i++)
		if (d == (void *)&devs[i]) return i;
	return -1;
}

const char *nvmlErrorString(int r) {
	switch (r) {
	case 0: return "Success";
	case 1: return "Uninitialized";
	case 2: return "Invalid Argument";
	case 3: return "Not Supported";
	case 6: return "Not Found";
	}
	return "Unknown Error";
}

int nvmlInit_v2(void) { inited++; return 0; }
int nvmlShutdown(void) { if (!inited) return 1; inited--; return 0; }

#ifndef NO_COUNT
int nvmlDeviceGetCount_v2(unsigned int *n) { if (!inited) return 1; *n = 2; return 0; }
#endif

int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **d) {
	if (!inited) return 1;
	if (i >= 2) return 2;
	*d = &devs[i];
	return 0;
}

int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, void **d) {
	for (int i = 0; i < 2; i++) {
		/* NVML accepts the 4-digit domain form as well */
		if (strcasecmp(bus, devs[i].bus) == 0 || strcasecmp(bus, devs[i].bus + 4) == 0) {
			*d = &devs[i];
			return 0;
		}
	}
	return 6;
}

int nvmlSystemGetDriverVersion(char *buf, unsigned int len) {
	snprintf(buf, len, "570.124.06");
	return 0;
}

int nvmlDeviceGetName(void *d, char *buf, unsigned int len) {
	if (devidx(d) < 0) return 2;
	snprintf(buf, len, "NVIDIA H200");
	return 0;
}

int nvmlDeviceGetUUID(void *d, char *buf, unsigned int len) {
	int i = devidx(d);
	if (i < 0) return 2;
	snprintf(buf, len, "%s", devs[i].uuid);
	return 0;
}

static void fill_pci(pci_t *p, int i) {
	memset(p, 0, sizeof *p);
	snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%s", devs[i].bus + 4);
	snprintf(p->busId, sizeof p->busId, "%s", devs[i].bus);
	p->bus = devs[i].busnum;
	p->pciDeviceId = 0x233510de;
	p->pciSubSystemId = 0x18bf10de;
}

int nvmlDeviceGetPciInfo_v3(void *d, pci_t *p) {
	int i = devidx(d);
	if (i < 0) return 2;
	fill_pci(p, i);
	return 0;
}

int nvmlDeviceGetNvLinkState(void *d, unsigned int link, unsigned int *active) {
	if (devidx(d) < 0 || link >= 18) return 2;
	*active = link != 5; /* one link down, so "active" is really read */
	return 0;
}

int nvmlDeviceGetNvLinkRemotePciInfo_v2(void *d, unsigned int link, pci_t *p) {
	int i = devidx(d);
	if (i < 0 || link >= 18) return 2;
	if (i == 1) { /* device 1 pretends its links reach a switch */
		memset(p, 0, sizeof *p);
		snprintf(p->busId, sizeof p->busId, "00000000:C0:00.0");
		p->pciDeviceId = 0x22a310de;
		return 0;
	}
	fill_pci(p, 1 - i);
	return 0;
}

#ifndef MINIMAL
int nvmlDeviceGetNvLinkRemoteDeviceType(void *d, unsigned int link, unsigned int *t) {
	int i = devidx(d);
	if (i < 0 || link >= 18) return 2;
	*t = i == 1 ? 2 : 0;
	return 0;
}

int nvmlDeviceGetGpuFabricInfo(void *d, fabric_t *f) {
	int i = devidx(d);
	if (i < 0) return 2;
	for (int k = 0; k < 16; k++) f->clusterUuid[k] = (unsigned char)(k + 1);
	f->status = 0;
	f->cliqueId = 7;
	f->state = i == 0 ? 3 : 0; /* device 1: fabric not supported */
	return 0;
}
#endif

int nvmlDeviceGetP2PStatus(void *a, void *b, unsigned int index, unsigned int *status) {
	if (devidx(a) < 0 || devidx(b) < 0) return 2;
	*status = index <= 3 ? 0 : 5;
	return 0;
}

int nvmlDeviceGetTopologyCommonAncestor(void *a, void *b, unsigned int *level) {
	if (devidx(a) < 0 || devidx(b) < 0) return 2;
	*level = a == b ? 0 : 50;
	return 0;
}

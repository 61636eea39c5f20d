#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

/* Versioned entry points where NVML has them: the unversioned names are
 * kept by the library for old binaries and may behave differently. */
static const struct {
	const char *name;
	int required;
} gn_syms[GN_NSYMS] = {
	[GN_INIT] = {"nvmlInit_v2", 1},
	[GN_SHUTDOWN] = {"nvmlShutdown", 1},
	[GN_ERROR_STRING] = {"nvmlErrorString", 1},
	[GN_DRIVER_VERSION] = {"nvmlSystemGetDriverVersion", 0},
	[GN_COUNT] = {"nvmlDeviceGetCount_v2", 1},
	[GN_BY_INDEX] = {"nvmlDeviceGetHandleByIndex_v2", 1},
	[GN_BY_BUS_ID] = {"nvmlDeviceGetHandleByPciBusId_v2", 0},
	[GN_NAME] = {"nvmlDeviceGetName", 0},
	[GN_UUID] = {"nvmlDeviceGetUUID", 0},
	[GN_PCI] = {"nvmlDeviceGetPciInfo_v3", 0},
	[GN_NVLINK_STATE] = {"nvmlDeviceGetNvLinkState", 0},
	[GN_NVLINK_REMOTE_PCI] = {"nvmlDeviceGetNvLinkRemotePciInfo_v2", 0},
	[GN_NVLINK_REMOTE_TYPE] = {"nvmlDeviceGetNvLinkRemoteDeviceType", 0},
	[GN_P2P_STATUS] = {"nvmlDeviceGetP2PStatus", 0},
	[GN_COMMON_ANCESTOR] = {"nvmlDeviceGetTopologyCommonAncestor", 0},
	[GN_FABRIC] = {"nvmlDeviceGetGpuFabricInfo", 0},
};

struct gn_lib {
	void *dl;
	void *fn[GN_NSYMS];
};

gn_lib *gn_load(const char *path, char *err, size_t errlen) {
	/* RTLD_NOW: every symbol we resolve is checked here, not at first call. */
	void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (dl == NULL) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return NULL;
	}
	gn_lib *l = calloc(1, sizeof *l);
	if (l == NULL) {
		dlclose(dl);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	l->dl = dl;
	for (int i = 0; i < GN_NSYMS; i++) {
		l->fn[i] = dlsym(dl, gn_syms[i].name);
		if (l->fn[i] == NULL && gn_syms[i].required) {
			snprintf(err, errlen, "%s: missing symbol %s", path, gn_syms[i].name);
			dlclose(dl);
			free(l);
			return NULL;
		}
	}
	return l;
}

void gn_unload(gn_lib *l) {
	if (l == NULL) return;
	dlclose(l->dl);
	free(l);
}

int gn_has(gn_lib *l, int sym) {
	return sym >= 0 && sym < GN_NSYMS && l->fn[sym] != NULL;
}

const char *gn_error_string(gn_lib *l, int code) {
	return ((const char *(*)(int))l->fn[GN_ERROR_STRING])(code);
}

/* Entry-point types, in NVML's ABI. */
typedef int (*gn_void_fn)(void);
typedef int (*gn_buf_fn)(char *, unsigned int);
typedef int (*gn_count_fn)(unsigned int *);
typedef int (*gn_by_index_fn)(unsigned int, void **);
typedef int (*gn_by_bus_fn)(const char *, void **);
typedef int (*gn_dev_buf_fn)(void *, char *, unsigned int);
typedef int (*gn_dev_pci_fn)(void *, gn_pci_info *);
typedef int (*gn_dev_link_uint_fn)(void *, unsigned int, unsigned int *);
typedef int (*gn_dev_link_pci_fn)(void *, unsigned int, gn_pci_info *);
typedef int (*gn_pair_index_fn)(void *, void *, unsigned int, unsigned int *);
typedef int (*gn_pair_uint_fn)(void *, void *, unsigned int *);
typedef int (*gn_dev_fabric_fn)(void *, gn_fabric_info *);

#define GN_FN(l, sym, type) \
	type f = (type)(l)->fn[sym]; \
	if (f == NULL) return GN_ERROR_FUNCTION_NOT_FOUND

int gn_init(gn_lib *l) {
	GN_FN(l, GN_INIT, gn_void_fn);
	return f();
}

int gn_shutdown(gn_lib *l) {
	GN_FN(l, GN_SHUTDOWN, gn_void_fn);
	return f();
}

int gn_driver_version(gn_lib *l, char *buf, unsigned int len) {
	GN_FN(l, GN_DRIVER_VERSION, gn_buf_fn);
	return f(buf, len);
}

int gn_device_count(gn_lib *l, unsigned int *n) {
	GN_FN(l, GN_COUNT, gn_count_fn);
	return f(n);
}

int gn_device_by_index(gn_lib *l, unsigned int i, uintptr_t *dev) {
	GN_FN(l, GN_BY_INDEX, gn_by_index_fn);
	void *d = NULL;
	int r = f(i, &d);
	*dev = (uintptr_t)d;
	return r;
}

int gn_device_by_bus_id(gn_lib *l, const char *bus, uintptr_t *dev) {
	GN_FN(l, GN_BY_BUS_ID, gn_by_bus_fn);
	void *d = NULL;
	int r = f(bus, &d);
	*dev = (uintptr_t)d;
	return r;
}

int gn_name(gn_lib *l, uintptr_t dev, char *buf, unsigned int len) {
	GN_FN(l, GN_NAME, gn_dev_buf_fn);
	return f((void *)dev, buf, len);
}

int gn_uuid(gn_lib *l, uintptr_t dev, char *buf, unsigned int len) {
	GN_FN(l, GN_UUID, gn_dev_buf_fn);
	return f((void *)dev, buf, len);
}

int gn_pci(gn_lib *l, uintptr_t dev, gn_pci_info *pci) {
	GN_FN(l, GN_PCI, gn_dev_pci_fn);
	return f((void *)dev, pci);
}

int gn_nvlink_state(gn_lib *l, uintptr_t dev, unsigned int link, unsigned int *active) {
	GN_FN(l, GN_NVLINK_STATE, gn_dev_link_uint_fn);
	return f((void *)dev, link, active);
}

int gn_nvlink_remote_pci(gn_lib *l, uintptr_t dev, unsigned int link, gn_pci_info *pci) {
	GN_FN(l, GN_NVLINK_REMOTE_PCI, gn_dev_link_pci_fn);
	return f((void *)dev, link, pci);
}

int gn_nvlink_remote_type(gn_lib *l, uintptr_t dev, unsigned int link, unsigned int *type) {
	GN_FN(l, GN_NVLINK_REMOTE_TYPE, gn_dev_link_uint_fn);
	return f((void *)dev, link, type);
}

int gn_p2p_status(gn_lib *l, uintptr_t a, uintptr_t b, unsigned int index, unsigned int *status) {
	GN_FN(l, GN_P2P_STATUS, gn_pair_index_fn);
	return f((void *)a, (void *)b, index, status);
}

int gn_common_ancestor(gn_lib *l, uintptr_t a, uintptr_t b, unsigned int *level) {
	GN_FN(l, GN_COMMON_ANCESTOR, gn_pair_uint_fn);
	return f((void *)a, (void *)b, level);
}

int gn_fabric(gn_lib *l, uintptr_t dev, gn_fabric_info *info) {
	GN_FN(l, GN_FABRIC, gn_dev_fabric_fn);
	return f((void *)dev, info);
}

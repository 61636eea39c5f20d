/* The C side of package nvml: libnvidia-ml.so.1 loaded with dlopen and
 * resolved into an explicit symbol table. Types are declared here from the
 * NVML ABI (no NVML headers at build time). */
#ifndef GOCCL_NVML_SHIM_H
#define GOCCL_NVML_SHIM_H

#include <stddef.h>
#include <stdint.h>

/* nvmlPciInfo_t as filled by nvmlDeviceGetPciInfo_v3 and
 * nvmlDeviceGetNvLinkRemotePciInfo_v2. */
typedef struct {
	char busIdLegacy[16];
	unsigned int domain;
	unsigned int bus;
	unsigned int device;
	unsigned int pciDeviceId;
	unsigned int pciSubSystemId;
	char busId[32];
} gn_pci_info;

/* nvmlGpuFabricInfo_t (the unversioned v1 layout). */
typedef struct {
	unsigned char clusterUuid[16];
	int status;
	unsigned int cliqueId;
	unsigned char state;
} gn_fabric_info;

typedef struct gn_lib gn_lib;

/* Codes the shim returns itself, in NVML's numbering. */
#define GN_SUCCESS 0
#define GN_ERROR_FUNCTION_NOT_FOUND 13

gn_lib *gn_load(const char *path, char *err, size_t errlen);
void gn_unload(gn_lib *l);
int gn_has(gn_lib *l, int sym);
const char *gn_error_string(gn_lib *l, int code);

int gn_init(gn_lib *l);
int gn_shutdown(gn_lib *l);
int gn_driver_version(gn_lib *l, char *buf, unsigned int len);
int gn_device_count(gn_lib *l, unsigned int *n);
int gn_device_by_index(gn_lib *l, unsigned int i, uintptr_t *dev);
int gn_device_by_bus_id(gn_lib *l, const char *bus, uintptr_t *dev);
int gn_name(gn_lib *l, uintptr_t dev, char *buf, unsigned int len);
int gn_uuid(gn_lib *l, uintptr_t dev, char *buf, unsigned int len);
int gn_pci(gn_lib *l, uintptr_t dev, gn_pci_info *pci);
int gn_nvlink_state(gn_lib *l, uintptr_t dev, unsigned int link, unsigned int *active);
int gn_nvlink_remote_pci(gn_lib *l, uintptr_t dev, unsigned int link, gn_pci_info *pci);
int gn_nvlink_remote_type(gn_lib *l, uintptr_t dev, unsigned int link, unsigned int *type);
int gn_p2p_status(gn_lib *l, uintptr_t a, uintptr_t b, unsigned int index, unsigned int *status);
int gn_common_ancestor(gn_lib *l, uintptr_t a, uintptr_t b, unsigned int *level);
int gn_fabric(gn_lib *l, uintptr_t dev, gn_fabric_info *info);

/* Symbol indices, for gn_has. */
enum {
	GN_INIT,
	GN_SHUTDOWN,
	GN_ERROR_STRING,
	GN_DRIVER_VERSION,
	GN_COUNT,
	GN_BY_INDEX,
	GN_BY_BUS_ID,
	GN_NAME,
	GN_UUID,
	GN_PCI,
	GN_NVLINK_STATE,
	GN_NVLINK_REMOTE_PCI,
	GN_NVLINK_REMOTE_TYPE,
	GN_P2P_STATUS,
	GN_COMMON_ANCESTOR,
	GN_FABRIC,
	GN_NSYMS
};

#endif

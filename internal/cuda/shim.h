// The C side of the CUDA bindings: our own declarations of the few driver
// types goccl passes (no cuda.h at build time), and one shim function per
// operation. Every shim that takes a context makes it current and performs
// the operation in the same call, because a goroutine may move to another OS
// thread between two cgo calls and CUDA contexts are per thread.
#ifndef GOCCL_CUDA_SHIM_H
#define GOCCL_CUDA_SHIM_H

#include <stddef.h>
#include <stdint.h>

typedef int gcuResult;

// Returned by a shim whose optional entry point this driver lacks; never a
// CUresult (those are >= 0).
#define GCU_UNRESOLVED (-1)

// CUmemLocation, CUmemAllocationProp, CUmemAccessDesc and
// CUmulticastObjectProp as cuda.h (CUDA 12.x) lays them out on LP64.
typedef struct {
	int type; // CUmemLocationType: 1 = device
	int id;
} gcuMemLocation;

typedef struct {
	int type;                 // CUmemAllocationType: 1 = pinned
	int requestedHandleTypes; // CUmemAllocationHandleType bits
	gcuMemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} gcuMemAllocationProp;

typedef struct {
	gcuMemLocation location;
	int flags; // CUmemAccess_flags: 3 = read-write
} gcuMemAccessDesc;

typedef struct {
	unsigned int numDevices;
	size_t size;
	unsigned long long handleTypes;
	unsigned long long flags;
} gcuMulticastObjectProp;

// Layout facts checked by the Go tests against cuda.h's documented layout.
typedef struct {
	int allocPropSize, allocPropType, allocPropHandleTypes, allocPropLocation,
	    allocPropLocationID, allocPropWin32, allocPropFlags, allocPropGDR,
	    allocPropUsage, allocPropReserved;
	int accessDescSize, accessDescFlags;
	int mcPropSize, mcPropNumDevices, mcPropSize_, mcPropHandleTypes, mcPropFlags;
} gcuLayout;

void gcu_layout(gcuLayout *out);
void gcu_fill_alloc_prop(gcuMemAllocationProp *p, int dev, int handleTypes);
void gcu_fill_mc_prop(gcuMulticastObjectProp *p, unsigned int n, size_t size, unsigned long long handleTypes);

// Loading. gcu_load returns 0 on success; 1 when dlopen failed, 2 when a
// required symbol is missing (err holds dlerror or the symbol name), 3 when
// cuInit failed (*initResult holds its CUresult).
int gcu_load(const char *lib, char *err, int errlen, int *initResult);
int gcu_resolved(const char *name);
void gcu_error_strings(int code, const char **name, const char **text);

// Versions and devices.
gcuResult gcu_driverGetVersion(int *v);
gcuResult gcu_deviceGetCount(int *n);
gcuResult gcu_deviceGet(int *dev, int ordinal);
gcuResult gcu_deviceGetName(char *buf, int len, int dev);
gcuResult gcu_deviceGetUuid(unsigned char *uuid16, int dev);
gcuResult gcu_deviceGetPCIBusId(char *buf, int len, int dev);
gcuResult gcu_deviceTotalMem(size_t *bytes, int dev);
gcuResult gcu_deviceGetAttribute(int *v, int attr, int dev);
gcuResult gcu_deviceCanAccessPeer(int *v, int dev, int peer);
gcuResult gcu_deviceGetP2PAttribute(int *v, int attr, int src, int dst);

// Contexts.
gcuResult gcu_primaryCtxRetain(uintptr_t *ctx, int dev);
gcuResult gcu_primaryCtxRelease(int dev);
gcuResult gcu_ctxSynchronize(uintptr_t ctx);
gcuResult gcu_ctxEnablePeerAccess(uintptr_t ctx, uintptr_t peer);

// Streams and events.
gcuResult gcu_streamCreate(uintptr_t ctx, uintptr_t *s, unsigned int flags);
gcuResult gcu_streamDestroy(uintptr_t ctx, uintptr_t s);
gcuResult gcu_streamSynchronize(uintptr_t ctx, uintptr_t s);
gcuResult gcu_streamQuery(uintptr_t ctx, uintptr_t s);
gcuResult gcu_eventCreate(uintptr_t ctx, uintptr_t *e, unsigned int flags);
gcuResult gcu_eventDestroy(uintptr_t ctx, uintptr_t e);
gcuResult gcu_eventRecord(uintptr_t ctx, uintptr_t e, uintptr_t s);
gcuResult gcu_eventSynchronize(uintptr_t ctx, uintptr_t e);
gcuResult gcu_eventElapsedTime(float *ms, uintptr_t start, uintptr_t end);
gcuResult gcu_streamWaitEvent(uintptr_t ctx, uintptr_t s, uintptr_t e);

// Memory.
gcuResult gcu_memAlloc(uintptr_t ctx, unsigned long long *p, size_t size);
gcuResult gcu_memFree(uintptr_t ctx, unsigned long long p);
gcuResult gcu_memHostAlloc(uintptr_t ctx, void **p, size_t size, unsigned int flags);
gcuResult gcu_memFreeHost(uintptr_t ctx, void *p);
gcuResult gcu_memHostGetDevicePointer(uintptr_t ctx, unsigned long long *d, void *p);
gcuResult gcu_memGetAddressRange(uintptr_t ctx, unsigned long long *base, size_t *size, unsigned long long p);
gcuResult gcu_memGetInfo(uintptr_t ctx, size_t *freeb, size_t *total);
gcuResult gcu_memcpyHtoD(uintptr_t ctx, unsigned long long dst, const void *src, size_t n);
gcuResult gcu_memcpyDtoH(uintptr_t ctx, void *dst, unsigned long long src, size_t n);
gcuResult gcu_memcpyAsync(uintptr_t ctx, unsigned long long dst, unsigned long long src, size_t n, uintptr_t s);
gcuResult gcu_memcpyHtoDAsync(uintptr_t ctx, unsigned long long dst, const void *src, size_t n, uintptr_t s);
gcuResult gcu_memcpyDtoHAsync(uintptr_t ctx, void *dst, unsigned long long src, size_t n, uintptr_t s);
gcuResult gcu_memsetD8Async(uintptr_t ctx, unsigned long long dst, unsigned char v, size_t n, uintptr_t s);
gcuResult gcu_memsetD32Async(uintptr_t ctx, unsigned long long dst, unsigned int v, size_t n, uintptr_t s);

// IPC.
gcuResult gcu_ipcGetMemHandle(uintptr_t ctx, unsigned char *h64, unsigned long long p);
gcuResult gcu_ipcOpenMemHandle(uintptr_t ctx, unsigned long long *p, const unsigned char *h64);
gcuResult gcu_ipcCloseMemHandle(uintptr_t ctx, unsigned long long p);

// Virtual memory management.
gcuResult gcu_memGetAllocationGranularity(size_t *g, int dev, int handleTypes, int recommended);
gcuResult gcu_memCreate(uintptr_t ctx, unsigned long long *h, size_t size, int dev, int handleTypes);
gcuResult gcu_memRelease(uintptr_t ctx, unsigned long long h);
gcuResult gcu_memExportToFD(uintptr_t ctx, int *fd, unsigned long long h);
gcuResult gcu_memImportFromFD(uintptr_t ctx, unsigned long long *h, int fd);
gcuResult gcu_memAddressReserve(uintptr_t ctx, unsigned long long *p, size_t size, size_t align);
gcuResult gcu_memAddressFree(uintptr_t ctx, unsigned long long p, size_t size);
gcuResult gcu_memMap(uintptr_t ctx, unsigned long long p, size_t size, unsigned long long h);
gcuResult gcu_memUnmap(uintptr_t ctx, unsigned long long p, size_t size);
gcuResult gcu_memSetAccess(uintptr_t ctx, unsigned long long p, size_t size, const int *devs, int ndev);
gcuResult gcu_memRetainAllocationHandle(uintptr_t ctx, unsigned long long *h, unsigned long long p);

// Multicast (resolved only; never called on the project's GPU machines).
gcuResult gcu_multicastGetGranularity(size_t *g, unsigned int n, size_t size, unsigned long long handleTypes, int recommended);
gcuResult gcu_multicastCreate(unsigned long long *mc, unsigned int n, size_t size, unsigned long long handleTypes);
gcuResult gcu_multicastAddDevice(unsigned long long mc, int dev);
gcuResult gcu_multicastBindMem(unsigned long long mc, size_t mcOff, unsigned long long mem, size_t memOff, size_t size);
gcuResult gcu_multicastUnbind(unsigned long long mc, int dev, size_t mcOff, size_t size);

// Stream memory operations.
gcuResult gcu_streamWriteValue32(uintptr_t ctx, uintptr_t s, unsigned long long addr, unsigned int v);
gcuResult gcu_streamWaitValue32(uintptr_t ctx, uintptr_t s, unsigned long long addr, unsigned int v, unsigned int flags);

// Modules and launches.
gcuResult gcu_moduleLoadData(uintptr_t ctx, uintptr_t *m, const void *image);
gcuResult gcu_moduleUnload(uintptr_t ctx, uintptr_t m);
gcuResult gcu_moduleGetFunction(uintptr_t ctx, uintptr_t *f, uintptr_t m, const char *name);
gcuResult gcu_funcSetAttribute(uintptr_t ctx, uintptr_t f, int attr, int v);
gcuResult gcu_launchKernel(uintptr_t ctx, uintptr_t f, unsigned int gx, unsigned int gy, unsigned int gz,
                           unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                           uintptr_t s, void *params, size_t nparams, int programmatic);

// Graphs.
gcuResult gcu_streamBeginCapture(uintptr_t ctx, uintptr_t s, int mode);
gcuResult gcu_streamEndCapture(uintptr_t ctx, uintptr_t s, uintptr_t *g);
gcuResult gcu_streamIsCapturing(uintptr_t ctx, uintptr_t s, int *status);
gcuResult gcu_graphInstantiate(uintptr_t ctx, uintptr_t *ge, uintptr_t g);
gcuResult gcu_graphLaunch(uintptr_t ctx, uintptr_t ge, uintptr_t s);
gcuResult gcu_graphExecDestroy(uintptr_t ctx, uintptr_t ge);
gcuResult gcu_graphDestroy(uintptr_t ctx, uintptr_t g);

#endif

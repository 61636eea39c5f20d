// Loader and per-operation shims for libcuda.so.1. See shim.h.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

typedef unsigned long long devptr;   // CUdeviceptr
typedef unsigned long long memhandle; // CUmemGenericAllocationHandle
typedef void *opaque;                 // CUcontext, CUstream, CUevent, ...

_Static_assert(sizeof(gcuMemAllocationProp) == 32, "CUmemAllocationProp is 32 bytes");
_Static_assert(sizeof(gcuMemAccessDesc) == 12, "CUmemAccessDesc is 12 bytes");
_Static_assert(sizeof(gcuMulticastObjectProp) == 32, "CUmulticastObjectProp is 32 bytes");

// Enum values from cuda.h (CUDA 12.x), declared here because no CUDA header
// is present at build time.
enum {
	CU_MEM_ALLOCATION_TYPE_PINNED = 1,
	CU_MEM_LOCATION_TYPE_DEVICE = 1,
	CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
	CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1,
	CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1,
	CU_LAUNCH_PARAM_END = 0,
	CU_LAUNCH_PARAM_BUFFER_POINTER = 1,
	CU_LAUNCH_PARAM_BUFFER_SIZE = 2,
};

// One pointer per entry point. The names carry the versioned symbol they
// hold, so that a wrong version is visible at a glance.
static gcuResult (*p_cuInit)(unsigned int);
static gcuResult (*p_cuGetErrorName)(int, const char **);
static gcuResult (*p_cuGetErrorString)(int, const char **);
static gcuResult (*p_cuDriverGetVersion)(int *);
static gcuResult (*p_cuDeviceGetCount)(int *);
static gcuResult (*p_cuDeviceGet)(int *, int);
static gcuResult (*p_cuDeviceGetName)(char *, int, int);
static gcuResult (*p_cuDeviceGetUuid_v2)(unsigned char *, int);
static gcuResult (*p_cuDeviceGetPCIBusId)(char *, int, int);
static gcuResult (*p_cuDeviceTotalMem_v2)(size_t *, int);
static gcuResult (*p_cuDeviceGetAttribute)(int *, int, int);
static gcuResult (*p_cuDeviceCanAccessPeer)(int *, int, int);
static gcuResult (*p_cuDeviceGetP2PAttribute)(int *, int, int, int);
static gcuResult (*p_cuDevicePrimaryCtxRetain)(opaque *, int);
static gcuResult (*p_cuDevicePrimaryCtxRelease_v2)(int);
static gcuResult (*p_cuCtxSetCurrent)(opaque);
static gcuResult (*p_cuCtxSynchronize)(void);
static gcuResult (*p_cuCtxEnablePeerAccess)(opaque, unsigned int);
static gcuResult (*p_cuStreamCreate)(opaque *, unsigned int);
static gcuResult (*p_cuStreamDestroy_v2)(opaque);
static gcuResult (*p_cuStreamSynchronize)(opaque);
static gcuResult (*p_cuStreamQuery)(opaque);
static gcuResult (*p_cuEventCreate)(opaque *, unsigned int);
static gcuResult (*p_cuEventDestroy_v2)(opaque);
static gcuResult (*p_cuEventRecord)(opaque, opaque);
static gcuResult (*p_cuEventSynchronize)(opaque);
static gcuResult (*p_cuEventElapsedTime)(float *, opaque, opaque);
static gcuResult (*p_cuStreamWaitEvent)(opaque, opaque, unsigned int);
static gcuResult (*p_cuMemAlloc_v2)(devptr *, size_t);
static gcuResult (*p_cuMemFree_v2)(devptr);
static gcuResult (*p_cuMemHostAlloc)(void **, size_t, unsigned int);
static gcuResult (*p_cuMemFreeHost)(void *);
static gcuResult (*p_cuMemHostGetDevicePointer_v2)(devptr *, void *, unsigned int);
static gcuResult (*p_cuMemGetAddressRange_v2)(devptr *, size_t *, devptr);
static gcuResult (*p_cuMemGetInfo_v2)(size_t *, size_t *);
static gcuResult (*p_cuMemcpyHtoD_v2)(devptr, const void *, size_t);
static gcuResult (*p_cuMemcpyDtoH_v2)(void *, devptr, size_t);
static gcuResult (*p_cuMemcpyAsync)(devptr, devptr, size_t, opaque);
static gcuResult (*p_cuMemcpyHtoDAsync_v2)(devptr, const void *, size_t, opaque);
static gcuResult (*p_cuMemcpyDtoHAsync_v2)(void *, devptr, size_t, opaque);
static gcuResult (*p_cuMemsetD8Async)(devptr, unsigned char, size_t, opaque);
static gcuResult (*p_cuMemsetD32Async)(devptr, unsigned int, size_t, opaque);
typedef struct { unsigned char reserved[64]; } ipcMemHandle;
static gcuResult (*p_cuIpcGetMemHandle)(ipcMemHandle *, devptr);
static gcuResult (*p_cuIpcOpenMemHandle_v2)(devptr *, ipcMemHandle, unsigned int);
static gcuResult (*p_cuIpcCloseMemHandle)(devptr);
static gcuResult (*p_cuMemGetAllocationGranularity)(size_t *, const gcuMemAllocationProp *, int);
static gcuResult (*p_cuMemCreate)(memhandle *, size_t, const gcuMemAllocationProp *, unsigned long long);
static gcuResult (*p_cuMemRelease)(memhandle);
static gcuResult (*p_cuMemExportToShareableHandle)(void *, memhandle, int, unsigned long long);
static gcuResult (*p_cuMemImportFromShareableHandle)(memhandle *, void *, int);
static gcuResult (*p_cuMemAddressReserve)(devptr *, size_t, size_t, devptr, unsigned long long);
static gcuResult (*p_cuMemAddressFree)(devptr, size_t);
static gcuResult (*p_cuMemMap)(devptr, size_t, size_t, memhandle, unsigned long long);
static gcuResult (*p_cuMemUnmap)(devptr, size_t);
static gcuResult (*p_cuMemSetAccess)(devptr, size_t, const gcuMemAccessDesc *, size_t);
static gcuResult (*p_cuMemRetainAllocationHandle)(memhandle *, void *);
static gcuResult (*p_cuMulticastGetGranularity)(size_t *, const gcuMulticastObjectProp *, int);
static gcuResult (*p_cuMulticastCreate)(memhandle *, const gcuMulticastObjectProp *);
static gcuResult (*p_cuMulticastAddDevice)(memhandle, int);
static gcuResult (*p_cuMulticastBindMem)(memhandle, size_t, memhandle, size_t, size_t, unsigned long long);
static gcuResult (*p_cuMulticastUnbind)(memhandle, int, size_t, size_t);
static gcuResult (*p_cuStreamWriteValue32_v2)(opaque, devptr, unsigned int, unsigned int);
static gcuResult (*p_cuStreamWaitValue32_v2)(opaque, devptr, unsigned int, unsigned int);
static gcuResult (*p_cuModuleLoadData)(opaque *, const void *);
static gcuResult (*p_cuModuleUnload)(opaque);
static gcuResult (*p_cuModuleGetFunction)(opaque *, opaque, const char *);
static gcuResult (*p_cuFuncSetAttribute)(opaque, int, int);
static gcuResult (*p_cuLaunchKernel)(opaque, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                                     unsigned int, unsigned int, opaque, void **, void **);
// cuLaunchKernelEx's configuration, laid out as cuda.h's CUlaunchConfig and
// CUlaunchAttribute (CUDA 12.0 on); only the attribute goccl sets is named.
typedef struct {
	unsigned int id;
	char pad[4];
	union {
		char bytes[64];
		int programmaticStreamSerializationAllowed;
	} value;
} gcuLaunchAttribute;
typedef struct {
	unsigned int gridDimX, gridDimY, gridDimZ;
	unsigned int blockDimX, blockDimY, blockDimZ;
	unsigned int sharedMemBytes;
	opaque hStream;
	gcuLaunchAttribute *attrs;
	unsigned int numAttrs;
} gcuLaunchConfig;
enum { GCU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6 };
static gcuResult (*p_cuLaunchKernelEx)(const gcuLaunchConfig *, opaque, void **, void **);
static gcuResult (*p_cuStreamBeginCapture_v2)(opaque, int);
static gcuResult (*p_cuStreamEndCapture)(opaque, opaque *);
static gcuResult (*p_cuStreamIsCapturing)(opaque, int *);
static gcuResult (*p_cuGraphInstantiateWithFlags)(opaque *, opaque, unsigned long long);
static gcuResult (*p_cuGraphLaunch)(opaque, opaque);
static gcuResult (*p_cuGraphExecDestroy)(opaque);
static gcuResult (*p_cuGraphDestroy)(opaque);

// The symbol table: the name looked up first, an older name with the same
// signature tried when the first is absent, and whether Load fails without it.
typedef struct {
	const char *name;
	const char *alt;
	void **slot;
	int required;
} gcuSym;

#define SYM(fn, alt, req) {#fn, alt, (void **)&p_##fn, req}

static const gcuSym syms[] = {
	SYM(cuInit, NULL, 1),
	SYM(cuGetErrorName, NULL, 1),
	SYM(cuGetErrorString, NULL, 1),
	SYM(cuDriverGetVersion, NULL, 1),
	SYM(cuDeviceGetCount, NULL, 1),
	SYM(cuDeviceGet, NULL, 1),
	SYM(cuDeviceGetName, NULL, 1),
	SYM(cuDeviceGetUuid_v2, "cuDeviceGetUuid", 1),
	SYM(cuDeviceGetPCIBusId, NULL, 1),
	SYM(cuDeviceTotalMem_v2, NULL, 1),
	SYM(cuDeviceGetAttribute, NULL, 1),
	SYM(cuDeviceCanAccessPeer, NULL, 1),
	SYM(cuDeviceGetP2PAttribute, NULL, 1),
	SYM(cuDevicePrimaryCtxRetain, NULL, 1),
	SYM(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 1),
	SYM(cuCtxSetCurrent, NULL, 1),
	SYM(cuCtxSynchronize, NULL, 1),
	SYM(cuCtxEnablePeerAccess, NULL, 1),
	SYM(cuStreamCreate, NULL, 1),
	SYM(cuStreamDestroy_v2, NULL, 1),
	SYM(cuStreamSynchronize, NULL, 1),
	SYM(cuStreamQuery, NULL, 1),
	SYM(cuEventCreate, NULL, 1),
	SYM(cuEventDestroy_v2, NULL, 1),
	SYM(cuEventRecord, NULL, 1),
	SYM(cuEventSynchronize, NULL, 1),
	SYM(cuEventElapsedTime, NULL, 1),
	SYM(cuStreamWaitEvent, NULL, 1),
	SYM(cuMemAlloc_v2, NULL, 1),
	SYM(cuMemFree_v2, NULL, 1),
	SYM(cuMemHostAlloc, NULL, 1),
	SYM(cuMemFreeHost, NULL, 1),
	SYM(cuMemHostGetDevicePointer_v2, NULL, 1),
	SYM(cuMemGetAddressRange_v2, NULL, 1),
	SYM(cuMemGetInfo_v2, NULL, 1),
	SYM(cuMemcpyHtoD_v2, NULL, 1),
	SYM(cuMemcpyDtoH_v2, NULL, 1),
	SYM(cuMemcpyAsync, NULL, 1),
	SYM(cuMemcpyHtoDAsync_v2, NULL, 1),
	SYM(cuMemcpyDtoHAsync_v2, NULL, 1),
	SYM(cuMemsetD8Async, NULL, 1),
	SYM(cuMemsetD32Async, NULL, 1),
	SYM(cuIpcGetMemHandle, NULL, 1),
	SYM(cuIpcOpenMemHandle_v2, "cuIpcOpenMemHandle", 1),
	SYM(cuIpcCloseMemHandle, NULL, 1),
	SYM(cuMemGetAllocationGranularity, NULL, 1),
	SYM(cuMemCreate, NULL, 1),
	SYM(cuMemRelease, NULL, 1),
	SYM(cuMemExportToShareableHandle, NULL, 1),
	SYM(cuMemImportFromShareableHandle, NULL, 1),
	SYM(cuMemAddressReserve, NULL, 1),
	SYM(cuMemAddressFree, NULL, 1),
	SYM(cuMemMap, NULL, 1),
	SYM(cuMemUnmap, NULL, 1),
	SYM(cuMemSetAccess, NULL, 1),
	SYM(cuMemRetainAllocationHandle, NULL, 1),
	SYM(cuMulticastGetGranularity, NULL, 0),
	SYM(cuMulticastCreate, NULL, 0),
	SYM(cuMulticastAddDevice, NULL, 0),
	SYM(cuMulticastBindMem, NULL, 0),
	SYM(cuMulticastUnbind, NULL, 0),
	SYM(cuStreamWriteValue32_v2, "cuStreamWriteValue32", 1),
	SYM(cuStreamWaitValue32_v2, "cuStreamWaitValue32", 1),
	SYM(cuModuleLoadData, NULL, 1),
	SYM(cuModuleUnload, NULL, 1),
	SYM(cuModuleGetFunction, NULL, 1),
	SYM(cuFuncSetAttribute, NULL, 1),
	SYM(cuLaunchKernel, NULL, 1),
	SYM(cuLaunchKernelEx, NULL, 0),
	SYM(cuStreamBeginCapture_v2, NULL, 1),
	SYM(cuStreamEndCapture, NULL, 1),
	SYM(cuStreamIsCapturing, NULL, 1),
	SYM(cuGraphInstantiateWithFlags, NULL, 1),
	SYM(cuGraphLaunch, NULL, 1),
	SYM(cuGraphExecDestroy, NULL, 1),
	SYM(cuGraphDestroy, NULL, 1),
};

int gcu_load(const char *lib, char *err, int errlen, int *initResult) {
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return 1;
	}
	// Resolve into a scratch table first so that a failed load leaves no
	// half-filled pointers behind.
	enum { N = sizeof(syms) / sizeof(syms[0]) };
	void *got[N];
	for (size_t i = 0; i < N; i++) {
		void *p = dlsym(h, syms[i].name);
		if (p == NULL && syms[i].alt != NULL) p = dlsym(h, syms[i].alt);
		if (p == NULL && syms[i].required) {
			snprintf(err, errlen, "%s", syms[i].name);
			dlclose(h);
			return 2;
		}
		got[i] = p;
	}
	for (size_t i = 0; i < N; i++) *syms[i].slot = got[i];
	// The library stays loaded for the life of the process, as NCCL does.
	gcuResult r = p_cuInit(0);
	if (r != 0) {
		*initResult = r;
		return 3;
	}
	return 0;
}

int gcu_resolved(const char *name) {
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
		if (strcmp(syms[i].name, name) == 0) return *syms[i].slot != NULL;
	return 0;
}

void gcu_error_strings(int code, const char **name, const char **text) {
	*name = NULL;
	*text = NULL;
	if (p_cuGetErrorName == NULL) return;
	if (p_cuGetErrorName(code, name) != 0) *name = NULL;
	if (p_cuGetErrorString(code, text) != 0) *text = NULL;
}

void gcu_layout(gcuLayout *o) {
	o->allocPropSize = sizeof(gcuMemAllocationProp);
	o->allocPropType = offsetof(gcuMemAllocationProp, type);
	o->allocPropHandleTypes = offsetof(gcuMemAllocationProp, requestedHandleTypes);
	o->allocPropLocation = offsetof(gcuMemAllocationProp, location);
	o->allocPropLocationID = offsetof(gcuMemAllocationProp, location.id);
	o->allocPropWin32 = offsetof(gcuMemAllocationProp, win32HandleMetaData);
	o->allocPropFlags = offsetof(gcuMemAllocationProp, allocFlags.compressionType);
	o->allocPropGDR = offsetof(gcuMemAllocationProp, allocFlags.gpuDirectRDMACapable);
	o->allocPropUsage = offsetof(gcuMemAllocationProp, allocFlags.usage);
	o->allocPropReserved = offsetof(gcuMemAllocationProp, allocFlags.reserved);
	o->accessDescSize = sizeof(gcuMemAccessDesc);
	o->accessDescFlags = offsetof(gcuMemAccessDesc, flags);
	o->mcPropSize = sizeof(gcuMulticastObjectProp);
	o->mcPropNumDevices = offsetof(gcuMulticastObjectProp, numDevices);
	o->mcPropSize_ = offsetof(gcuMulticastObjectProp, size);
	o->mcPropHandleTypes = offsetof(gcuMulticastObjectProp, handleTypes);
	o->mcPropFlags = offsetof(gcuMulticastObjectProp, flags);
}

void gcu_fill_alloc_prop(gcuMemAllocationProp *p, int dev, int handleTypes) {
	memset(p, 0, sizeof(*p));
	p->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p->requestedHandleTypes = handleTypes;
	p->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p->location.id = dev;
}

void gcu_fill_mc_prop(gcuMulticastObjectProp *p, unsigned int n, size_t size, unsigned long long handleTypes) {
	memset(p, 0, sizeof(*p));
	p->numDevices = n;
	p->size = size;
	p->handleTypes = handleTypes;
}

#define SETCTX(ctx)                                                  \
	do {                                                             \
		if (ctx) {                                                   \
			gcuResult r_ = p_cuCtxSetCurrent((opaque)(ctx));         \
			if (r_ != 0) return r_;                                  \
		}                                                            \
	} while (0)
#define NEED(fn)                                                     \
	do {                                                             \
		if (p_##fn == NULL) return GCU_UNRESOLVED;                   \
	} while (0)
#define O(x) ((opaque)(x))

gcuResult gcu_driverGetVersion(int *v) { return p_cuDriverGetVersion(v); }
gcuResult gcu_deviceGetCount(int *n) { return p_cuDeviceGetCount(n); }
gcuResult gcu_deviceGet(int *dev, int ordinal) { return p_cuDeviceGet(dev, ordinal); }
gcuResult gcu_deviceGetName(char *buf, int len, int dev) { return p_cuDeviceGetName(buf, len, dev); }
gcuResult gcu_deviceGetUuid(unsigned char *u, int dev) { return p_cuDeviceGetUuid_v2(u, dev); }
gcuResult gcu_deviceGetPCIBusId(char *buf, int len, int dev) { return p_cuDeviceGetPCIBusId(buf, len, dev); }
gcuResult gcu_deviceTotalMem(size_t *b, int dev) { return p_cuDeviceTotalMem_v2(b, dev); }
gcuResult gcu_deviceGetAttribute(int *v, int attr, int dev) { return p_cuDeviceGetAttribute(v, attr, dev); }
gcuResult gcu_deviceCanAccessPeer(int *v, int dev, int peer) { return p_cuDeviceCanAccessPeer(v, dev, peer); }
gcuResult gcu_deviceGetP2PAttribute(int *v, int attr, int src, int dst) {
	return p_cuDeviceGetP2PAttribute(v, attr, src, dst);
}

gcuResult gcu_primaryCtxRetain(uintptr_t *ctx, int dev) {
	opaque c = NULL;
	gcuResult r = p_cuDevicePrimaryCtxRetain(&c, dev);
	*ctx = (uintptr_t)c;
	return r;
}
gcuResult gcu_primaryCtxRelease(int dev) { return p_cuDevicePrimaryCtxRelease_v2(dev); }
gcuResult gcu_ctxSynchronize(uintptr_t ctx) {
	SETCTX(ctx);
	return p_cuCtxSynchronize();
}
gcuResult gcu_ctxEnablePeerAccess(uintptr_t ctx, uintptr_t peer) {
	SETCTX(ctx);
	return p_cuCtxEnablePeerAccess(O(peer), 0);
}

gcuResult gcu_streamCreate(uintptr_t ctx, uintptr_t *s, unsigned int flags) {
	SETCTX(ctx);
	opaque o = NULL;
	gcuResult r = p_cuStreamCreate(&o, flags);
	*s = (uintptr_t)o;
	return r;
}
gcuResult gcu_streamDestroy(uintptr_t ctx, uintptr_t s) {
	SETCTX(ctx);
	return p_cuStreamDestroy_v2(O(s));
}
gcuResult gcu_streamSynchronize(uintptr_t ctx, uintptr_t s) {
	SETCTX(ctx);
	return p_cuStreamSynchronize(O(s));
}
gcuResult gcu_streamQuery(uintptr_t ctx, uintptr_t s) {
	SETCTX(ctx);
	return p_cuStreamQuery(O(s));
}
gcuResult gcu_eventCreate(uintptr_t ctx, uintptr_t *e, unsigned int flags) {
	SETCTX(ctx);
	opaque o = NULL;
	gcuResult r = p_cuEventCreate(&o, flags);
	*e = (uintptr_t)o;
	return r;
}
gcuResult gcu_eventDestroy(uintptr_t ctx, uintptr_t e) {
	SETCTX(ctx);
	return p_cuEventDestroy_v2(O(e));
}
gcuResult gcu_eventRecord(uintptr_t ctx, uintptr_t e, uintptr_t s) {
	SETCTX(ctx);
	return p_cuEventRecord(O(e), O(s));
}
gcuResult gcu_eventSynchronize(uintptr_t ctx, uintptr_t e) {
	SETCTX(ctx);
	return p_cuEventSynchronize(O(e));
}
gcuResult gcu_eventElapsedTime(float *ms, uintptr_t start, uintptr_t end) {
	return p_cuEventElapsedTime(ms, O(start), O(end));
}
gcuResult gcu_streamWaitEvent(uintptr_t ctx, uintptr_t s, uintptr_t e) {
	SETCTX(ctx);
	return p_cuStreamWaitEvent(O(s), O(e), 0);
}

gcuResult gcu_memAlloc(uintptr_t ctx, unsigned long long *p, size_t size) {
	SETCTX(ctx);
	return p_cuMemAlloc_v2(p, size);
}
gcuResult gcu_memFree(uintptr_t ctx, unsigned long long p) {
	SETCTX(ctx);
	return p_cuMemFree_v2(p);
}
gcuResult gcu_memHostAlloc(uintptr_t ctx, void **p, size_t size, unsigned int flags) {
	SETCTX(ctx);
	return p_cuMemHostAlloc(p, size, flags);
}
gcuResult gcu_memFreeHost(uintptr_t ctx, void *p) {
	SETCTX(ctx);
	return p_cuMemFreeHost(p);
}
gcuResult gcu_memHostGetDevicePointer(uintptr_t ctx, unsigned long long *d, void *p) {
	SETCTX(ctx);
	return p_cuMemHostGetDevicePointer_v2(d, p, 0);
}
gcuResult gcu_memGetAddressRange(uintptr_t ctx, unsigned long long *base, size_t *size, unsigned long long p) {
	SETCTX(ctx);
	return p_cuMemGetAddressRange_v2(base, size, p);
}
gcuResult gcu_memGetInfo(uintptr_t ctx, size_t *freeb, size_t *total) {
	SETCTX(ctx);
	return p_cuMemGetInfo_v2(freeb, total);
}
gcuResult gcu_memcpyHtoD(uintptr_t ctx, unsigned long long dst, const void *src, size_t n) {
	SETCTX(ctx);
	return p_cuMemcpyHtoD_v2(dst, src, n);
}
gcuResult gcu_memcpyDtoH(uintptr_t ctx, void *dst, unsigned long long src, size_t n) {
	SETCTX(ctx);
	return p_cuMemcpyDtoH_v2(dst, src, n);
}
gcuResult gcu_memcpyAsync(uintptr_t ctx, unsigned long long dst, unsigned long long src, size_t n, uintptr_t s) {
	SETCTX(ctx);
	return p_cuMemcpyAsync(dst, src, n, O(s));
}
gcuResult gcu_memcpyHtoDAsync(uintptr_t ctx, unsigned long long dst, const void *src, size_t n, uintptr_t s) {
	SETCTX(ctx);
	return p_cuMemcpyHtoDAsync_v2(dst, src, n, O(s));
}
gcuResult gcu_memcpyDtoHAsync(uintptr_t ctx, void *dst, unsigned long long src, size_t n, uintptr_t s) {
	SETCTX(ctx);
	return p_cuMemcpyDtoHAsync_v2(dst, src, n, O(s));
}
gcuResult gcu_memsetD8Async(uintptr_t ctx, unsigned long long dst, unsigned char v, size_t n, uintptr_t s) {
	SETCTX(ctx);
	return p_cuMemsetD8Async(dst, v, n, O(s));
}
gcuResult gcu_memsetD32Async(uintptr_t ctx, unsigned long long dst, unsigned int v, size_t n, uintptr_t s) {
	SETCTX(ctx);
	return p_cuMemsetD32Async(dst, v, n, O(s));
}

gcuResult gcu_ipcGetMemHandle(uintptr_t ctx, unsigned char *h64, unsigned long long p) {
	SETCTX(ctx);
	ipcMemHandle h;
	gcuResult r = p_cuIpcGetMemHandle(&h, p);
	memcpy(h64, h.reserved, sizeof(h.reserved));
	return r;
}
gcuResult gcu_ipcOpenMemHandle(uintptr_t ctx, unsigned long long *p, const unsigned char *h64) {
	SETCTX(ctx);
	ipcMemHandle h;
	memcpy(h.reserved, h64, sizeof(h.reserved));
	return p_cuIpcOpenMemHandle_v2(p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
}
gcuResult gcu_ipcCloseMemHandle(uintptr_t ctx, unsigned long long p) {
	SETCTX(ctx);
	return p_cuIpcCloseMemHandle(p);
}

gcuResult gcu_memGetAllocationGranularity(size_t *g, int dev, int handleTypes, int recommended) {
	gcuMemAllocationProp prop;
	gcu_fill_alloc_prop(&prop, dev, handleTypes);
	return p_cuMemGetAllocationGranularity(g, &prop, recommended ? 1 : 0);
}
gcuResult gcu_memCreate(uintptr_t ctx, unsigned long long *h, size_t size, int dev, int handleTypes) {
	SETCTX(ctx);
	gcuMemAllocationProp prop;
	gcu_fill_alloc_prop(&prop, dev, handleTypes);
	return p_cuMemCreate(h, size, &prop, 0);
}
gcuResult gcu_memRelease(uintptr_t ctx, unsigned long long h) {
	SETCTX(ctx);
	return p_cuMemRelease(h);
}
gcuResult gcu_memExportToFD(uintptr_t ctx, int *fd, unsigned long long h) {
	SETCTX(ctx);
	*fd = -1;
	// For POSIX_FILE_DESCRIPTOR the driver writes an int through the pointer.
	return p_cuMemExportToShareableHandle(fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
}
gcuResult gcu_memImportFromFD(uintptr_t ctx, unsigned long long *h, int fd) {
	SETCTX(ctx);
	// For POSIX_FILE_DESCRIPTOR the osHandle argument is the fd itself, cast.
	return p_cuMemImportFromShareableHandle(h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
}
gcuResult gcu_memAddressReserve(uintptr_t ctx, unsigned long long *p, size_t size, size_t align) {
	SETCTX(ctx);
	return p_cuMemAddressReserve(p, size, align, 0, 0);
}
gcuResult gcu_memAddressFree(uintptr_t ctx, unsigned long long p, size_t size) {
	SETCTX(ctx);
	return p_cuMemAddressFree(p, size);
}
gcuResult gcu_memMap(uintptr_t ctx, unsigned long long p, size_t size, unsigned long long h) {
	SETCTX(ctx);
	return p_cuMemMap(p, size, 0, h, 0);
}
gcuResult gcu_memUnmap(uintptr_t ctx, unsigned long long p, size_t size) {
	SETCTX(ctx);
	return p_cuMemUnmap(p, size);
}
gcuResult gcu_memSetAccess(uintptr_t ctx, unsigned long long p, size_t size, const int *devs, int ndev) {
	SETCTX(ctx);
	enum { MAXDEV = 64 };
	if (ndev <= 0 || ndev > MAXDEV) return 1; // CUDA_ERROR_INVALID_VALUE
	gcuMemAccessDesc desc[MAXDEV];
	for (int i = 0; i < ndev; i++) {
		desc[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		desc[i].location.id = devs[i];
		desc[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	}
	return p_cuMemSetAccess(p, size, desc, (size_t)ndev);
}
gcuResult gcu_memRetainAllocationHandle(uintptr_t ctx, unsigned long long *h, unsigned long long p) {
	SETCTX(ctx);
	return p_cuMemRetainAllocationHandle(h, (void *)(uintptr_t)p);
}

gcuResult gcu_multicastGetGranularity(size_t *g, unsigned int n, size_t size, unsigned long long handleTypes,
                                      int recommended) {
	NEED(cuMulticastGetGranularity);
	gcuMulticastObjectProp prop;
	gcu_fill_mc_prop(&prop, n, size, handleTypes);
	return p_cuMulticastGetGranularity(g, &prop, recommended ? 1 : 0);
}
gcuResult gcu_multicastCreate(unsigned long long *mc, unsigned int n, size_t size, unsigned long long handleTypes) {
	NEED(cuMulticastCreate);
	gcuMulticastObjectProp prop;
	gcu_fill_mc_prop(&prop, n, size, handleTypes);
	return p_cuMulticastCreate(mc, &prop);
}
gcuResult gcu_multicastAddDevice(unsigned long long mc, int dev) {
	NEED(cuMulticastAddDevice);
	return p_cuMulticastAddDevice(mc, dev);
}
gcuResult gcu_multicastBindMem(unsigned long long mc, size_t mcOff, unsigned long long mem, size_t memOff,
                               size_t size) {
	NEED(cuMulticastBindMem);
	return p_cuMulticastBindMem(mc, mcOff, mem, memOff, size, 0);
}
gcuResult gcu_multicastUnbind(unsigned long long mc, int dev, size_t mcOff, size_t size) {
	NEED(cuMulticastUnbind);
	return p_cuMulticastUnbind(mc, dev, mcOff, size);
}

gcuResult gcu_streamWriteValue32(uintptr_t ctx, uintptr_t s, unsigned long long addr, unsigned int v) {
	SETCTX(ctx);
	return p_cuStreamWriteValue32_v2(O(s), addr, v, 0);
}
gcuResult gcu_streamWaitValue32(uintptr_t ctx, uintptr_t s, unsigned long long addr, unsigned int v,
                                unsigned int flags) {
	SETCTX(ctx);
	return p_cuStreamWaitValue32_v2(O(s), addr, v, flags);
}

gcuResult gcu_moduleLoadData(uintptr_t ctx, uintptr_t *m, const void *image) {
	SETCTX(ctx);
	opaque o = NULL;
	gcuResult r = p_cuModuleLoadData(&o, image);
	*m = (uintptr_t)o;
	return r;
}
gcuResult gcu_moduleUnload(uintptr_t ctx, uintptr_t m) {
	SETCTX(ctx);
	return p_cuModuleUnload(O(m));
}
gcuResult gcu_moduleGetFunction(uintptr_t ctx, uintptr_t *f, uintptr_t m, const char *name) {
	SETCTX(ctx);
	opaque o = NULL;
	gcuResult r = p_cuModuleGetFunction(&o, O(m), name);
	*f = (uintptr_t)o;
	return r;
}
gcuResult gcu_funcSetAttribute(uintptr_t ctx, uintptr_t f, int attr, int v) {
	SETCTX(ctx);
	return p_cuFuncSetAttribute(O(f), attr, v);
}
gcuResult gcu_launchKernel(uintptr_t ctx, uintptr_t f, unsigned int gx, unsigned int gy, unsigned int gz,
                           unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem, uintptr_t s,
                           void *params, size_t nparams, int programmatic) {
	SETCTX(ctx);
	// The driver copies the packed parameters during the call.
	size_t size = nparams;
	void *extra[] = {
	    (void *)(uintptr_t)CU_LAUNCH_PARAM_BUFFER_POINTER, params,
	    (void *)(uintptr_t)CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
	    (void *)(uintptr_t)CU_LAUNCH_PARAM_END,
	};
	if (programmatic && p_cuLaunchKernelEx) {
		gcuLaunchAttribute attr;
		memset(&attr, 0, sizeof attr);
		attr.id = GCU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
		attr.value.programmaticStreamSerializationAllowed = 1;
		gcuLaunchConfig cfg = {gx, gy, gz, bx, by, bz, shmem, O(s), &attr, 1};
		return p_cuLaunchKernelEx(&cfg, O(f), NULL, nparams ? extra : NULL);
	}
	return p_cuLaunchKernel(O(f), gx, gy, gz, bx, by, bz, shmem, O(s), NULL, nparams ? extra : NULL);
}

gcuResult gcu_streamBeginCapture(uintptr_t ctx, uintptr_t s, int mode) {
	SETCTX(ctx);
	return p_cuStreamBeginCapture_v2(O(s), mode);
}
gcuResult gcu_streamEndCapture(uintptr_t ctx, uintptr_t s, uintptr_t *g) {
	SETCTX(ctx);
	opaque o = NULL;
	gcuResult r = p_cuStreamEndCapture(O(s), &o);
	*g = (uintptr_t)o;
	return r;
}
gcuResult gcu_streamIsCapturing(uintptr_t ctx, uintptr_t s, int *status) {
	SETCTX(ctx);
	return p_cuStreamIsCapturing(O(s), status);
}
gcuResult gcu_graphInstantiate(uintptr_t ctx, uintptr_t *ge, uintptr_t g) {
	SETCTX(ctx);
	opaque o = NULL;
	gcuResult r = p_cuGraphInstantiateWithFlags(&o, O(g), 0);
	*ge = (uintptr_t)o;
	return r;
}
gcuResult gcu_graphLaunch(uintptr_t ctx, uintptr_t ge, uintptr_t s) {
	SETCTX(ctx);
	return p_cuGraphLaunch(O(ge), O(s));
}
gcuResult gcu_graphExecDestroy(uintptr_t ctx, uintptr_t ge) {
	SETCTX(ctx);
	return p_cuGraphExecDestroy(O(ge));
}
gcuResult gcu_graphDestroy(uintptr_t ctx, uintptr_t g) {
	SETCTX(ctx);
	return p_cuGraphDestroy(O(g));
}

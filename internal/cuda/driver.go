package cuda

import "unsafe"

// Handles are the driver's opaque values carried as plain integers so that
// they cross cgo and the public API without Go pointers.
type (
	Device         int32    // CUdevice
	Context        uintptr  // CUcontext
	Stream         uintptr  // CUstream; 0 is the legacy default stream
	Event          uintptr  // CUevent
	Module         uintptr  // CUmodule
	Function       uintptr  // CUfunction
	DevicePtr      uintptr  // CUdeviceptr
	Graph          uintptr  // CUgraph
	GraphExec      uintptr  // CUgraphExec
	MemHandle      uint64   // CUmemGenericAllocationHandle
	IpcMemHandle   [64]byte // CUipcMemHandle
	IpcEventHandle [64]byte // CUipcEventHandle
)

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// LaunchConfig describes one kernel launch.
type LaunchConfig struct {
	Grid, Block Dim3
	SharedMem   uint32
	Stream      Stream
	// Programmatic launches with programmatic stream serialization
	// (compute capability 9.0 on): the kernel may get onto the SMs while
	// the previous kernel on the stream still runs, so it must wait
	// (griddepcontrol.wait) before it touches memory. Where the driver
	// lacks cuLaunchKernelEx the launch is an ordinary one.
	Programmatic bool
}

// Driver is the part of the CUDA driver API goccl uses. The real
// implementation (Load) resolves it from libcuda.so.1 at run time; tests use
// fakes that embed Driver and override what they exercise.
//
// Every call that needs a current context takes it explicitly: the shim
// makes it current and performs the operation inside one cgo call, because
// goroutines migrate between OS threads and CUDA contexts are per thread.
type Driver interface {
	// Versions and devices.
	DriverVersion() (int, error)
	DeviceCount() (int, error)
	DeviceGet(ordinal int) (Device, error)
	DeviceName(dev Device) (string, error)
	DeviceUUID(dev Device) ([16]byte, error)
	DevicePCIBusID(dev Device) (string, error)
	DeviceTotalMem(dev Device) (uint64, error)
	DeviceAttribute(dev Device, attr DeviceAttribute) (int, error)
	DeviceCanAccessPeer(dev, peer Device) (bool, error)
	DeviceP2PAttribute(attr P2PAttribute, src, dst Device) (int, error)

	// Primary contexts and peer access.
	PrimaryCtxRetain(dev Device) (Context, error)
	PrimaryCtxRelease(dev Device) error
	CtxSynchronize(ctx Context) error
	CtxEnablePeerAccess(ctx, peer Context) error // ctx gains access to peer's memory

	// Streams and events.
	StreamCreate(ctx Context, nonBlocking bool) (Stream, error)
	StreamDestroy(ctx Context, s Stream) error
	StreamSynchronize(ctx Context, s Stream) error
	StreamQuery(ctx Context, s Stream) (done bool, err error)
	EventCreate(ctx Context, timing bool) (Event, error)
	EventDestroy(ctx Context, e Event) error
	EventRecord(ctx Context, e Event, s Stream) error
	EventSynchronize(ctx Context, e Event) error
	EventElapsed(start, end Event) (ms float32, err error)
	StreamWaitEvent(ctx Context, s Stream, e Event) error

	// Memory.
	MemAlloc(ctx Context, size uint64) (DevicePtr, error)
	MemFree(ctx Context, p DevicePtr) error
	MemAllocHost(ctx Context, size uint64) (unsafe.Pointer, error) // pinned, portable, device-mapped
	MemFreeHost(ctx Context, p unsafe.Pointer) error
	MemHostGetDevicePointer(ctx Context, p unsafe.Pointer) (DevicePtr, error)
	MemGetAddressRange(ctx Context, p DevicePtr) (base DevicePtr, size uint64, err error)
	MemGetInfo(ctx Context) (free, total uint64, err error)
	MemcpyHtoD(ctx Context, dst DevicePtr, src unsafe.Pointer, n uint64) error
	MemcpyDtoH(ctx Context, dst unsafe.Pointer, src DevicePtr, n uint64) error
	MemcpyAsync(ctx Context, dst, src DevicePtr, n uint64, s Stream) error // any direction under UVA
	MemcpyHtoDAsync(ctx Context, dst DevicePtr, src unsafe.Pointer, n uint64, s Stream) error
	MemcpyDtoHAsync(ctx Context, dst unsafe.Pointer, src DevicePtr, n uint64, s Stream) error
	MemsetD8Async(ctx Context, dst DevicePtr, v uint8, n uint64, s Stream) error
	MemsetD32Async(ctx Context, dst DevicePtr, v uint32, n uint64, s Stream) error

	// IPC.
	IpcGetMemHandle(ctx Context, p DevicePtr) (IpcMemHandle, error)
	IpcOpenMemHandle(ctx Context, h IpcMemHandle) (DevicePtr, error) // lazy peer access enabled
	IpcCloseMemHandle(ctx Context, p DevicePtr) error

	// Virtual memory management.
	MemGetAllocationGranularity(prop *AllocProp, recommended bool) (uint64, error)
	MemCreate(ctx Context, size uint64, prop *AllocProp) (MemHandle, error)
	MemRelease(ctx Context, h MemHandle) error
	MemExportToFD(ctx Context, h MemHandle) (fd int, err error)
	MemImportFromFD(ctx Context, fd int) (MemHandle, error)
	MemAddressReserve(ctx Context, size, align uint64) (DevicePtr, error)
	MemAddressFree(ctx Context, p DevicePtr, size uint64) error
	MemMap(ctx Context, p DevicePtr, size uint64, h MemHandle) error
	MemUnmap(ctx Context, p DevicePtr, size uint64) error
	MemSetAccess(ctx Context, p DevicePtr, size uint64, devices []Device) error // read-write for each device
	MemRetainAllocationHandle(ctx Context, p DevicePtr) (MemHandle, error)

	// Multicast (NVLS). Resolved, never called on the project's GPU machines
	// (DESIGN §8): transport/nvls guards every call behind its gate.
	MulticastGetGranularity(prop *MulticastProp, recommended bool) (uint64, error)
	MulticastCreate(prop *MulticastProp) (MemHandle, error)
	MulticastAddDevice(mc MemHandle, dev Device) error
	MulticastBindMem(mc MemHandle, mcOffset uint64, mem MemHandle, memOffset, size uint64) error
	MulticastUnbind(mc MemHandle, dev Device, mcOffset, size uint64) error

	// Stream memory operations.
	StreamWriteValue32(ctx Context, s Stream, addr DevicePtr, v uint32) error
	StreamWaitValue32(ctx Context, s Stream, addr DevicePtr, v uint32, geq bool) error

	// Modules and launches.
	ModuleLoadData(ctx Context, image []byte) (Module, error)
	ModuleUnload(ctx Context, m Module) error
	ModuleGetFunction(ctx Context, m Module, name string) (Function, error)
	FuncSetMaxDynamicSharedMem(ctx Context, f Function, bytes int) error
	// LaunchKernel passes params as one packed buffer
	// (CU_LAUNCH_PARAM_BUFFER_POINTER); build it with ParamBuffer.
	LaunchKernel(ctx Context, f Function, cfg LaunchConfig, params []byte) error

	// Graph capture.
	StreamBeginCapture(ctx Context, s Stream, mode CaptureMode) error
	StreamEndCapture(ctx Context, s Stream) (Graph, error)
	StreamIsCapturing(ctx Context, s Stream) (bool, error)
	GraphInstantiate(ctx Context, g Graph) (GraphExec, error)
	GraphLaunch(ctx Context, ge GraphExec, s Stream) error
	GraphExecDestroy(ctx Context, ge GraphExec) error
	GraphDestroy(ctx Context, g Graph) error
}

// AllocProp mirrors the fields of CUmemAllocationProp goccl sets: pinned
// device memory on Device, exportable as the given handle types.
type AllocProp struct {
	Device      Device
	HandleTypes HandleType
	// GPUDirectRDMACapable and compression are left off.
}

// MulticastProp mirrors CUmulticastObjectProp.
type MulticastProp struct {
	NumDevices  uint32
	Size        uint64
	HandleTypes HandleType
}

// HandleType is CUmemAllocationHandleType (a bit set).
type HandleType uint32

const (
	HandleNone     HandleType = 0   // CU_MEM_HANDLE_TYPE_NONE
	HandlePosixFD  HandleType = 0x1 // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
	HandleWin32    HandleType = 0x2 // CU_MEM_HANDLE_TYPE_WIN32
	HandleWin32KMT HandleType = 0x4 // CU_MEM_HANDLE_TYPE_WIN32_KMT
	HandleFabric   HandleType = 0x8 // CU_MEM_HANDLE_TYPE_FABRIC
)

// CaptureMode is CUstreamCaptureMode.
type CaptureMode uint32

const (
	CaptureGlobal      CaptureMode = 0 // CU_STREAM_CAPTURE_MODE_GLOBAL
	CaptureThreadLocal CaptureMode = 1 // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
	CaptureRelaxed     CaptureMode = 2 // CU_STREAM_CAPTURE_MODE_RELAXED
)

// DeviceAttribute is CUdevice_attribute; values are the driver's.
type DeviceAttribute int32

const (
	AttrMaxThreadsPerBlock         DeviceAttribute = 1   // CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK
	AttrMaxSharedMemPerBlock       DeviceAttribute = 8   // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK
	AttrClockRate                  DeviceAttribute = 13  // CU_DEVICE_ATTRIBUTE_CLOCK_RATE
	AttrMultiprocessorCount        DeviceAttribute = 16  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	AttrIntegrated                 DeviceAttribute = 18  // CU_DEVICE_ATTRIBUTE_INTEGRATED
	AttrCanMapHostMemory           DeviceAttribute = 19  // CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY
	AttrPCIBusID                   DeviceAttribute = 33  // CU_DEVICE_ATTRIBUTE_PCI_BUS_ID
	AttrPCIDeviceID                DeviceAttribute = 34  // CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID
	AttrMemoryClockRate            DeviceAttribute = 36  // CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE
	AttrGlobalMemoryBusWidth       DeviceAttribute = 37  // CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH
	AttrL2CacheSize                DeviceAttribute = 38  // CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE
	AttrUnifiedAddressing          DeviceAttribute = 41  // CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING
	AttrPCIDomainID                DeviceAttribute = 50  // CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID
	AttrComputeCapabilityMajor     DeviceAttribute = 75  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	AttrComputeCapabilityMinor     DeviceAttribute = 76  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
	AttrMaxSharedMemPerBlockOptin  DeviceAttribute = 97  // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
	AttrVirtualMemoryManagement    DeviceAttribute = 102 // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
	AttrHandleTypePosixFDSupported DeviceAttribute = 103 // CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
	AttrGPUDirectRDMASupported     DeviceAttribute = 116 // CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED
	AttrMemoryPoolsSupported       DeviceAttribute = 115 // CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED
	AttrHandleTypeFabricSupported  DeviceAttribute = 128 // CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED
	AttrMulticastSupported         DeviceAttribute = 132 // CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED
	AttrCanUse64BitStreamMemOps    DeviceAttribute = 122 // CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS
	AttrCanUseStreamWaitValueNor   DeviceAttribute = 123 // CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR

	// Added with the real bindings (values from cuda.h, CUDA 12.x).
	AttrECCEnabled                    DeviceAttribute = 32  // CU_DEVICE_ATTRIBUTE_ECC_ENABLED
	AttrMaxThreadsPerMultiprocessor   DeviceAttribute = 39  // CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR
	AttrAsyncEngineCount              DeviceAttribute = 40  // CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT
	AttrMaxSharedMemPerMultiprocessor DeviceAttribute = 81  // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
	AttrHostNativeAtomicSupported     DeviceAttribute = 86  // CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED
	AttrCooperativeLaunch             DeviceAttribute = 95  // CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH
	AttrCanFlushRemoteWrites          DeviceAttribute = 98  // CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES
	AttrGPUDirectRDMAWithCudaVMM      DeviceAttribute = 110 // CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED
	AttrDMABufSupported               DeviceAttribute = 124 // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
	AttrNumaConfig                    DeviceAttribute = 130 // CU_DEVICE_ATTRIBUTE_NUMA_CONFIG
	AttrNumaID                        DeviceAttribute = 131 // CU_DEVICE_ATTRIBUTE_NUMA_ID
)

// P2PAttribute is CUdevice_P2PAttribute.
type P2PAttribute int32

const (
	P2PPerformanceRank          P2PAttribute = 1 // CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK
	P2PAccessSupported          P2PAttribute = 2 // CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED
	P2PNativeAtomicSupported    P2PAttribute = 3 // CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED
	P2PCudaArrayAccessSupported P2PAttribute = 4 // CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED
	// P2POnlyPartialNativeAtomic is 1 when only some atomics work over the
	// link (CUDA 12.8+; older drivers answer CUDA_ERROR_INVALID_VALUE).
	P2POnlyPartialNativeAtomic P2PAttribute = 5
)

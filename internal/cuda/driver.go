package cuda

import "unsafe"

// Handles are the driver's opaque values carried as plain integers so that
// they cross cgo and the public API without Go pointers.
type (
	Device         int32   // CUdevice
	Context        uintptr // CUcontext
	Stream         uintptr // CUstream; 0 is the legacy default stream
	Event          uintptr // CUevent
	Module         uintptr // CUmodule
	Function       uintptr // CUfunction
	DevicePtr      uintptr // CUdeviceptr
	Graph          uintptr // CUgraph
	GraphExec      uintptr // CUgraphExec
	MemHandle      uint64  // CUmemGenericAllocationHandle
	IpcMemHandle   [64]byte
	IpcEventHandle [64]byte
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
	HandleNone     HandleType = 0
	HandlePosixFD  HandleType = 0x1
	HandleWin32    HandleType = 0x2
	HandleWin32KMT HandleType = 0x4
	HandleFabric   HandleType = 0x8
)

// CaptureMode is CUstreamCaptureMode.
type CaptureMode uint32

const (
	CaptureGlobal      CaptureMode = 0
	CaptureThreadLocal CaptureMode = 1
	CaptureRelaxed     CaptureMode = 2
)

// DeviceAttribute is CUdevice_attribute; values are the driver's.
type DeviceAttribute int32

const (
	AttrMaxThreadsPerBlock         DeviceAttribute = 1
	AttrMaxSharedMemPerBlock       DeviceAttribute = 8
	AttrClockRate                  DeviceAttribute = 13
	AttrMultiprocessorCount        DeviceAttribute = 16
	AttrIntegrated                 DeviceAttribute = 18
	AttrCanMapHostMemory           DeviceAttribute = 19
	AttrPCIBusID                   DeviceAttribute = 33
	AttrPCIDeviceID                DeviceAttribute = 34
	AttrMemoryClockRate            DeviceAttribute = 36
	AttrGlobalMemoryBusWidth       DeviceAttribute = 37
	AttrL2CacheSize                DeviceAttribute = 38
	AttrUnifiedAddressing          DeviceAttribute = 41
	AttrPCIDomainID                DeviceAttribute = 50
	AttrComputeCapabilityMajor     DeviceAttribute = 75
	AttrComputeCapabilityMinor     DeviceAttribute = 76
	AttrMaxSharedMemPerBlockOptin  DeviceAttribute = 97
	AttrVirtualMemoryManagement    DeviceAttribute = 102
	AttrHandleTypePosixFDSupported DeviceAttribute = 103
	AttrGPUDirectRDMASupported     DeviceAttribute = 116
	AttrMemoryPoolsSupported       DeviceAttribute = 115
	AttrHandleTypeFabricSupported  DeviceAttribute = 128
	AttrMulticastSupported         DeviceAttribute = 132
	AttrCanUse64BitStreamMemOps    DeviceAttribute = 122
	AttrCanUseStreamWaitValueNor   DeviceAttribute = 123

	// Added with the real bindings (values from cuda.h, CUDA 12.x).
	AttrECCEnabled                    DeviceAttribute = 32
	AttrMaxThreadsPerMultiprocessor   DeviceAttribute = 39
	AttrAsyncEngineCount              DeviceAttribute = 40
	AttrMaxSharedMemPerMultiprocessor DeviceAttribute = 81
	AttrHostNativeAtomicSupported     DeviceAttribute = 86
	AttrCooperativeLaunch             DeviceAttribute = 95
	AttrCanFlushRemoteWrites          DeviceAttribute = 98
	AttrGPUDirectRDMAWithCudaVMM      DeviceAttribute = 110
	AttrDMABufSupported               DeviceAttribute = 124
	AttrNumaConfig                    DeviceAttribute = 130
	AttrNumaID                        DeviceAttribute = 131
)

// P2PAttribute is CUdevice_P2PAttribute.
type P2PAttribute int32

const (
	P2PPerformanceRank          P2PAttribute = 1
	P2PAccessSupported          P2PAttribute = 2
	P2PNativeAtomicSupported    P2PAttribute = 3
	P2PCudaArrayAccessSupported P2PAttribute = 4
	// P2POnlyPartialNativeAtomic is 1 when only some atomics work over the
	// link (CUDA 12.8+; older drivers answer CUDA_ERROR_INVALID_VALUE).
	P2POnlyPartialNativeAtomic P2PAttribute = 5
)

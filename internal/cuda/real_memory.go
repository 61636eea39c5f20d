package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Memory, IPC, VMM and multicast of the real driver.

func dptr(p DevicePtr) C.ulonglong { return C.ulonglong(p) }

func (driver) MemAlloc(ctx Context, size uint64) (DevicePtr, error) {
	var p C.ulonglong
	if err := check("cuMemAlloc", C.gcu_memAlloc(ctxArg(ctx), &p, C.size_t(size))); err != nil {
		return 0, err
	}
	return DevicePtr(p), nil
}

func (driver) MemFree(ctx Context, p DevicePtr) error {
	return check("cuMemFree", C.gcu_memFree(ctxArg(ctx), dptr(p)))
}

// MemAllocHost allocates pinned host memory that every context can use
// (PORTABLE) and that has a device address (DEVICEMAP).
func (driver) MemAllocHost(ctx Context, size uint64) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	if err := check("cuMemHostAlloc", C.gcu_memHostAlloc(ctxArg(ctx), &p, C.size_t(size), hostAllocPortable|hostAllocDeviceMap)); err != nil {
		return nil, err
	}
	return p, nil
}

func (driver) MemFreeHost(ctx Context, p unsafe.Pointer) error {
	return check("cuMemFreeHost", C.gcu_memFreeHost(ctxArg(ctx), p))
}

func (driver) MemHostGetDevicePointer(ctx Context, p unsafe.Pointer) (DevicePtr, error) {
	var d C.ulonglong
	if err := check("cuMemHostGetDevicePointer", C.gcu_memHostGetDevicePointer(ctxArg(ctx), &d, p)); err != nil {
		return 0, err
	}
	return DevicePtr(d), nil
}

func (driver) MemGetAddressRange(ctx Context, p DevicePtr) (DevicePtr, uint64, error) {
	var base C.ulonglong
	var size C.size_t
	if err := check("cuMemGetAddressRange", C.gcu_memGetAddressRange(ctxArg(ctx), &base, &size, dptr(p))); err != nil {
		return 0, 0, err
	}
	return DevicePtr(base), uint64(size), nil
}

func (driver) MemGetInfo(ctx Context) (uint64, uint64, error) {
	var free, total C.size_t
	if err := check("cuMemGetInfo", C.gcu_memGetInfo(ctxArg(ctx), &free, &total)); err != nil {
		return 0, 0, err
	}
	return uint64(free), uint64(total), nil
}

// MemcpyHtoD copies n bytes from host memory src (Go or C memory that stays
// alive for the call) to the device.
func (driver) MemcpyHtoD(ctx Context, dst DevicePtr, src unsafe.Pointer, n uint64) error {
	return check("cuMemcpyHtoD", C.gcu_memcpyHtoD(ctxArg(ctx), dptr(dst), src, C.size_t(n)))
}

func (driver) MemcpyDtoH(ctx Context, dst unsafe.Pointer, src DevicePtr, n uint64) error {
	return check("cuMemcpyDtoH", C.gcu_memcpyDtoH(ctxArg(ctx), dst, dptr(src), C.size_t(n)))
}

func (driver) MemcpyAsync(ctx Context, dst, src DevicePtr, n uint64, s Stream) error {
	return check("cuMemcpyAsync", C.gcu_memcpyAsync(ctxArg(ctx), dptr(dst), dptr(src), C.size_t(n), C.uintptr_t(s)))
}

// MemcpyHtoDAsync: src must stay valid until the stream reaches the copy,
// so it should be pinned memory from MemAllocHost, not Go memory.
func (driver) MemcpyHtoDAsync(ctx Context, dst DevicePtr, src unsafe.Pointer, n uint64, s Stream) error {
	return check("cuMemcpyHtoDAsync", C.gcu_memcpyHtoDAsync(ctxArg(ctx), dptr(dst), src, C.size_t(n), C.uintptr_t(s)))
}

// MemcpyDtoHAsync: dst must stay valid until the stream reaches the copy.
func (driver) MemcpyDtoHAsync(ctx Context, dst unsafe.Pointer, src DevicePtr, n uint64, s Stream) error {
	return check("cuMemcpyDtoHAsync", C.gcu_memcpyDtoHAsync(ctxArg(ctx), dst, dptr(src), C.size_t(n), C.uintptr_t(s)))
}

// MemsetD8Async sets n bytes.
func (driver) MemsetD8Async(ctx Context, dst DevicePtr, v uint8, n uint64, s Stream) error {
	return check("cuMemsetD8Async", C.gcu_memsetD8Async(ctxArg(ctx), dptr(dst), C.uchar(v), C.size_t(n), C.uintptr_t(s)))
}

// MemsetD32Async sets n 32-bit words (not bytes), as cuMemsetD32Async.
func (driver) MemsetD32Async(ctx Context, dst DevicePtr, v uint32, n uint64, s Stream) error {
	return check("cuMemsetD32Async", C.gcu_memsetD32Async(ctxArg(ctx), dptr(dst), C.uint(v), C.size_t(n), C.uintptr_t(s)))
}

func (driver) IpcGetMemHandle(ctx Context, p DevicePtr) (IpcMemHandle, error) {
	var h IpcMemHandle
	if err := check("cuIpcGetMemHandle", C.gcu_ipcGetMemHandle(ctxArg(ctx), (*C.uchar)(unsafe.Pointer(&h[0])), dptr(p))); err != nil {
		return IpcMemHandle{}, err
	}
	return h, nil
}

// IpcOpenMemHandle maps a peer process's allocation with lazy peer access.
func (driver) IpcOpenMemHandle(ctx Context, h IpcMemHandle) (DevicePtr, error) {
	var p C.ulonglong
	if err := check("cuIpcOpenMemHandle", C.gcu_ipcOpenMemHandle(ctxArg(ctx), &p, (*C.uchar)(unsafe.Pointer(&h[0])))); err != nil {
		return 0, err
	}
	return DevicePtr(p), nil
}

func (driver) IpcCloseMemHandle(ctx Context, p DevicePtr) error {
	return check("cuIpcCloseMemHandle", C.gcu_ipcCloseMemHandle(ctxArg(ctx), dptr(p)))
}

func recommendedFlag(r bool) C.int {
	if r {
		return 1
	}
	return 0
}

func (driver) MemGetAllocationGranularity(prop *AllocProp, recommended bool) (uint64, error) {
	if prop == nil {
		return 0, fmt.Errorf("cuda: MemGetAllocationGranularity: nil AllocProp: %w", ErrorInvalidValue)
	}
	var g C.size_t
	if err := check("cuMemGetAllocationGranularity", C.gcu_memGetAllocationGranularity(&g, C.int(prop.Device), C.int(prop.HandleTypes), recommendedFlag(recommended))); err != nil {
		return 0, err
	}
	return uint64(g), nil
}

func (driver) MemCreate(ctx Context, size uint64, prop *AllocProp) (MemHandle, error) {
	if prop == nil {
		return 0, fmt.Errorf("cuda: MemCreate: nil AllocProp: %w", ErrorInvalidValue)
	}
	var h C.ulonglong
	if err := check("cuMemCreate", C.gcu_memCreate(ctxArg(ctx), &h, C.size_t(size), C.int(prop.Device), C.int(prop.HandleTypes))); err != nil {
		return 0, err
	}
	return MemHandle(h), nil
}

func (driver) MemRelease(ctx Context, h MemHandle) error {
	return check("cuMemRelease", C.gcu_memRelease(ctxArg(ctx), C.ulonglong(h)))
}

// MemExportToFD returns a new POSIX file descriptor for h; the caller
// closes it.
func (driver) MemExportToFD(ctx Context, h MemHandle) (int, error) {
	var fd C.int
	if err := check("cuMemExportToShareableHandle", C.gcu_memExportToFD(ctxArg(ctx), &fd, C.ulonglong(h))); err != nil {
		return -1, err
	}
	return int(fd), nil
}

// MemImportFromFD imports an allocation from fd; the caller still owns fd.
func (driver) MemImportFromFD(ctx Context, fd int) (MemHandle, error) {
	var h C.ulonglong
	if err := check("cuMemImportFromShareableHandle", C.gcu_memImportFromFD(ctxArg(ctx), &h, C.int(fd))); err != nil {
		return 0, err
	}
	return MemHandle(h), nil
}

func (driver) MemAddressReserve(ctx Context, size, align uint64) (DevicePtr, error) {
	var p C.ulonglong
	if err := check("cuMemAddressReserve", C.gcu_memAddressReserve(ctxArg(ctx), &p, C.size_t(size), C.size_t(align))); err != nil {
		return 0, err
	}
	return DevicePtr(p), nil
}

func (driver) MemAddressFree(ctx Context, p DevicePtr, size uint64) error {
	return check("cuMemAddressFree", C.gcu_memAddressFree(ctxArg(ctx), dptr(p), C.size_t(size)))
}

func (driver) MemMap(ctx Context, p DevicePtr, size uint64, h MemHandle) error {
	return check("cuMemMap", C.gcu_memMap(ctxArg(ctx), dptr(p), C.size_t(size), C.ulonglong(h)))
}

func (driver) MemUnmap(ctx Context, p DevicePtr, size uint64) error {
	return check("cuMemUnmap", C.gcu_memUnmap(ctxArg(ctx), dptr(p), C.size_t(size)))
}

// maxAccessDevices bounds MemSetAccess's device list (the shim's array).
const maxAccessDevices = 64

// MemSetAccess grants read-write access to [p, p+size) to each device.
func (driver) MemSetAccess(ctx Context, p DevicePtr, size uint64, devices []Device) error {
	if len(devices) == 0 || len(devices) > maxAccessDevices {
		return fmt.Errorf("cuda: MemSetAccess: %d devices, want 1..%d: %w", len(devices), maxAccessDevices, ErrorInvalidValue)
	}
	// Device is int32, the C int the shim reads.
	devs := (*C.int)(unsafe.Pointer(&devices[0]))
	return check("cuMemSetAccess", C.gcu_memSetAccess(ctxArg(ctx), dptr(p), C.size_t(size), devs, C.int(len(devices))))
}

func (driver) MemRetainAllocationHandle(ctx Context, p DevicePtr) (MemHandle, error) {
	var h C.ulonglong
	if err := check("cuMemRetainAllocationHandle", C.gcu_memRetainAllocationHandle(ctxArg(ctx), &h, dptr(p))); err != nil {
		return 0, err
	}
	return MemHandle(h), nil
}

// The multicast methods are bound for transport/nvls, which calls them only
// behind its opt-in gate; they are never exercised on the project's GPU machines
// (DESIGN §8).

func (driver) MulticastGetGranularity(prop *MulticastProp, recommended bool) (uint64, error) {
	if prop == nil {
		return 0, fmt.Errorf("cuda: MulticastGetGranularity: nil MulticastProp: %w", ErrorInvalidValue)
	}
	var g C.size_t
	if err := check("cuMulticastGetGranularity", C.gcu_multicastGetGranularity(&g, C.uint(prop.NumDevices), C.size_t(prop.Size), C.ulonglong(prop.HandleTypes), recommendedFlag(recommended))); err != nil {
		return 0, err
	}
	return uint64(g), nil
}

func (driver) MulticastCreate(prop *MulticastProp) (MemHandle, error) {
	if prop == nil {
		return 0, fmt.Errorf("cuda: MulticastCreate: nil MulticastProp: %w", ErrorInvalidValue)
	}
	var h C.ulonglong
	if err := check("cuMulticastCreate", C.gcu_multicastCreate(&h, C.uint(prop.NumDevices), C.size_t(prop.Size), C.ulonglong(prop.HandleTypes))); err != nil {
		return 0, err
	}
	return MemHandle(h), nil
}

func (driver) MulticastAddDevice(mc MemHandle, dev Device) error {
	return check("cuMulticastAddDevice", C.gcu_multicastAddDevice(C.ulonglong(mc), C.int(dev)))
}

func (driver) MulticastBindMem(mc MemHandle, mcOffset uint64, mem MemHandle, memOffset, size uint64) error {
	return check("cuMulticastBindMem", C.gcu_multicastBindMem(C.ulonglong(mc), C.size_t(mcOffset), C.ulonglong(mem), C.size_t(memOffset), C.size_t(size)))
}

func (driver) MulticastUnbind(mc MemHandle, dev Device, mcOffset, size uint64) error {
	return check("cuMulticastUnbind", C.gcu_multicastUnbind(C.ulonglong(mc), C.int(dev), C.size_t(mcOffset), C.size_t(size)))
}

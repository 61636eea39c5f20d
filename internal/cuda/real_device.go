package cuda

/*
#include "shim.h"
*/
import "C"

import "unsafe"

// Devices, contexts, streams and events of the real driver.

func ctxArg(c Context) C.uintptr_t { return C.uintptr_t(c) }

func (driver) DriverVersion() (int, error) {
	var v C.int
	if err := check("cuDriverGetVersion", C.gcu_driverGetVersion(&v)); err != nil {
		return 0, err
	}
	return int(v), nil
}

func (driver) DeviceCount() (int, error) {
	var n C.int
	if err := check("cuDeviceGetCount", C.gcu_deviceGetCount(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

func (driver) DeviceGet(ordinal int) (Device, error) {
	var d C.int
	if err := check("cuDeviceGet", C.gcu_deviceGet(&d, C.int(ordinal))); err != nil {
		return 0, err
	}
	return Device(d), nil
}

func (driver) DeviceName(dev Device) (string, error) {
	var buf [256]C.char
	if err := check("cuDeviceGetName", C.gcu_deviceGetName(&buf[0], C.int(len(buf)), C.int(dev))); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

func (driver) DeviceUUID(dev Device) ([16]byte, error) {
	var u [16]C.uchar
	var out [16]byte
	if err := check("cuDeviceGetUuid", C.gcu_deviceGetUuid(&u[0], C.int(dev))); err != nil {
		return out, err
	}
	for i := range u {
		out[i] = byte(u[i])
	}
	return out, nil
}

func (driver) DevicePCIBusID(dev Device) (string, error) {
	var buf [64]C.char
	if err := check("cuDeviceGetPCIBusId", C.gcu_deviceGetPCIBusId(&buf[0], C.int(len(buf)), C.int(dev))); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

func (driver) DeviceTotalMem(dev Device) (uint64, error) {
	var b C.size_t
	if err := check("cuDeviceTotalMem", C.gcu_deviceTotalMem(&b, C.int(dev))); err != nil {
		return 0, err
	}
	return uint64(b), nil
}

func (driver) DeviceAttribute(dev Device, attr DeviceAttribute) (int, error) {
	var v C.int
	if err := check("cuDeviceGetAttribute", C.gcu_deviceGetAttribute(&v, C.int(attr), C.int(dev))); err != nil {
		return 0, err
	}
	return int(v), nil
}

func (driver) DeviceCanAccessPeer(dev, peer Device) (bool, error) {
	var v C.int
	if err := check("cuDeviceCanAccessPeer", C.gcu_deviceCanAccessPeer(&v, C.int(dev), C.int(peer))); err != nil {
		return false, err
	}
	return v != 0, nil
}

func (driver) DeviceP2PAttribute(attr P2PAttribute, src, dst Device) (int, error) {
	var v C.int
	if err := check("cuDeviceGetP2PAttribute", C.gcu_deviceGetP2PAttribute(&v, C.int(attr), C.int(src), C.int(dst))); err != nil {
		return 0, err
	}
	return int(v), nil
}

func (driver) PrimaryCtxRetain(dev Device) (Context, error) {
	var c C.uintptr_t
	if err := check("cuDevicePrimaryCtxRetain", C.gcu_primaryCtxRetain(&c, C.int(dev))); err != nil {
		return 0, err
	}
	return Context(c), nil
}

func (driver) PrimaryCtxRelease(dev Device) error {
	return check("cuDevicePrimaryCtxRelease", C.gcu_primaryCtxRelease(C.int(dev)))
}

func (driver) CtxSynchronize(ctx Context) error {
	return check("cuCtxSynchronize", C.gcu_ctxSynchronize(ctxArg(ctx)))
}

func (driver) CtxEnablePeerAccess(ctx, peer Context) error {
	return check("cuCtxEnablePeerAccess", C.gcu_ctxEnablePeerAccess(ctxArg(ctx), ctxArg(peer)))
}

// Stream and event flags from cuda.h.
const (
	streamNonBlocking   = 0x1 // CU_STREAM_NON_BLOCKING
	eventDisableTiming  = 0x2 // CU_EVENT_DISABLE_TIMING
	captureStatusNone   = 0   // CU_STREAM_CAPTURE_STATUS_NONE
	waitValueGEQ        = 0x0 // CU_STREAM_WAIT_VALUE_GEQ
	waitValueEQ         = 0x1 // CU_STREAM_WAIT_VALUE_EQ
	hostAllocPortable   = 0x1 // CU_MEMHOSTALLOC_PORTABLE
	hostAllocDeviceMap  = 0x2 // CU_MEMHOSTALLOC_DEVICEMAP
	funcMaxDynSharedMem = 8   // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
)

func (driver) StreamCreate(ctx Context, nonBlocking bool) (Stream, error) {
	var flags C.uint
	if nonBlocking {
		flags = streamNonBlocking
	}
	var s C.uintptr_t
	if err := check("cuStreamCreate", C.gcu_streamCreate(ctxArg(ctx), &s, flags)); err != nil {
		return 0, err
	}
	return Stream(s), nil
}

func (driver) StreamDestroy(ctx Context, s Stream) error {
	return check("cuStreamDestroy", C.gcu_streamDestroy(ctxArg(ctx), C.uintptr_t(s)))
}

func (driver) StreamSynchronize(ctx Context, s Stream) error {
	return check("cuStreamSynchronize", C.gcu_streamSynchronize(ctxArg(ctx), C.uintptr_t(s)))
}

func (driver) StreamQuery(ctx Context, s Stream) (bool, error) {
	// Polled in loops: not-ready is an answer, not an error, and allocates nothing.
	r := C.gcu_streamQuery(ctxArg(ctx), C.uintptr_t(s))
	if Result(r) == ErrorNotReady {
		return false, nil
	}
	if err := check("cuStreamQuery", r); err != nil {
		return false, err
	}
	return true, nil
}

func (driver) EventCreate(ctx Context, timing bool) (Event, error) {
	var flags C.uint
	if !timing {
		flags = eventDisableTiming
	}
	var e C.uintptr_t
	if err := check("cuEventCreate", C.gcu_eventCreate(ctxArg(ctx), &e, flags)); err != nil {
		return 0, err
	}
	return Event(e), nil
}

func (driver) EventDestroy(ctx Context, e Event) error {
	return check("cuEventDestroy", C.gcu_eventDestroy(ctxArg(ctx), C.uintptr_t(e)))
}

func (driver) EventRecord(ctx Context, e Event, s Stream) error {
	return check("cuEventRecord", C.gcu_eventRecord(ctxArg(ctx), C.uintptr_t(e), C.uintptr_t(s)))
}

func (driver) EventSynchronize(ctx Context, e Event) error {
	return check("cuEventSynchronize", C.gcu_eventSynchronize(ctxArg(ctx), C.uintptr_t(e)))
}

func (driver) EventElapsed(start, end Event) (float32, error) {
	var ms C.float
	if err := check("cuEventElapsedTime", C.gcu_eventElapsedTime(&ms, C.uintptr_t(start), C.uintptr_t(end))); err != nil {
		return 0, err
	}
	return float32(ms), nil
}

func (driver) StreamWaitEvent(ctx Context, s Stream, e Event) error {
	return check("cuStreamWaitEvent", C.gcu_streamWaitEvent(ctxArg(ctx), C.uintptr_t(s), C.uintptr_t(e)))
}

// cbytes views a Go byte slice as a C pointer for the duration of a call.
func cbytes(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

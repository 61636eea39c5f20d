package cuda

/*
#cgo noescape gcu_launchKernel
#cgo nocallback gcu_launchKernel
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Stream memory operations, modules, launches and graphs of the real
// driver. LaunchKernel, StreamWriteValue32/WaitValue32 and GraphLaunch are
// hot: one cgo call each, no allocation unless they fail.

func (driver) StreamWriteValue32(ctx Context, s Stream, addr DevicePtr, v uint32) error {
	return check("cuStreamWriteValue32", C.gcu_streamWriteValue32(ctxArg(ctx), C.uintptr_t(s), dptr(addr), C.uint(v)))
}

// StreamWaitValue32 makes s wait until *addr >= v (geq) or *addr == v.
func (driver) StreamWaitValue32(ctx Context, s Stream, addr DevicePtr, v uint32, geq bool) error {
	var flags C.uint = waitValueEQ
	if geq {
		flags = waitValueGEQ
	}
	return check("cuStreamWaitValue32", C.gcu_streamWaitValue32(ctxArg(ctx), C.uintptr_t(s), dptr(addr), C.uint(v), flags))
}

// ModuleLoadData loads a cubin, fatbin or PTX image; the driver copies what
// it needs before returning.
func (driver) ModuleLoadData(ctx Context, image []byte) (Module, error) {
	if len(image) == 0 {
		return 0, fmt.Errorf("cuda: ModuleLoadData: empty image: %w", ErrorInvalidImage)
	}
	var m C.uintptr_t
	if err := check("cuModuleLoadData", C.gcu_moduleLoadData(ctxArg(ctx), &m, cbytes(image))); err != nil {
		return 0, err
	}
	return Module(m), nil
}

func (driver) ModuleUnload(ctx Context, m Module) error {
	return check("cuModuleUnload", C.gcu_moduleUnload(ctxArg(ctx), C.uintptr_t(m)))
}

func (driver) ModuleGetFunction(ctx Context, m Module, name string) (Function, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var f C.uintptr_t
	if err := check("cuModuleGetFunction", C.gcu_moduleGetFunction(ctxArg(ctx), &f, C.uintptr_t(m), cname)); err != nil {
		return 0, fmt.Errorf("kernel %q: %w", name, err)
	}
	return Function(f), nil
}

func (driver) FuncSetMaxDynamicSharedMem(ctx Context, f Function, bytes int) error {
	return check("cuFuncSetAttribute", C.gcu_funcSetAttribute(ctxArg(ctx), C.uintptr_t(f), funcMaxDynSharedMem, C.int(bytes)))
}

// LaunchKernel launches f with params packed by ParamBuffer, passed as
// CU_LAUNCH_PARAM_BUFFER_POINTER (the driver copies them during the call);
// a programmatic launch goes through cuLaunchKernelEx.
func (driver) LaunchKernel(ctx Context, f Function, cfg LaunchConfig, params []byte) error {
	prog := C.int(0)
	if cfg.Programmatic {
		prog = 1
	}
	return check("cuLaunchKernel", C.gcu_launchKernel(ctxArg(ctx), C.uintptr_t(f),
		C.uint(cfg.Grid.X), C.uint(cfg.Grid.Y), C.uint(cfg.Grid.Z),
		C.uint(cfg.Block.X), C.uint(cfg.Block.Y), C.uint(cfg.Block.Z),
		C.uint(cfg.SharedMem), C.uintptr_t(cfg.Stream), cbytes(params), C.size_t(len(params)), prog))
}

func (driver) StreamBeginCapture(ctx Context, s Stream, mode CaptureMode) error {
	return check("cuStreamBeginCapture", C.gcu_streamBeginCapture(ctxArg(ctx), C.uintptr_t(s), C.int(mode)))
}

func (driver) StreamEndCapture(ctx Context, s Stream) (Graph, error) {
	var g C.uintptr_t
	if err := check("cuStreamEndCapture", C.gcu_streamEndCapture(ctxArg(ctx), C.uintptr_t(s), &g)); err != nil {
		return 0, err
	}
	return Graph(g), nil
}

// StreamIsCapturing is true while s is capturing, also when the capture
// has been invalidated (it must still be ended).
func (driver) StreamIsCapturing(ctx Context, s Stream) (bool, error) {
	var st C.int
	if err := check("cuStreamIsCapturing", C.gcu_streamIsCapturing(ctxArg(ctx), C.uintptr_t(s), &st)); err != nil {
		return false, err
	}
	return st != captureStatusNone, nil
}

func (driver) GraphInstantiate(ctx Context, g Graph) (GraphExec, error) {
	var ge C.uintptr_t
	if err := check("cuGraphInstantiateWithFlags", C.gcu_graphInstantiate(ctxArg(ctx), &ge, C.uintptr_t(g))); err != nil {
		return 0, err
	}
	return GraphExec(ge), nil
}

func (driver) GraphLaunch(ctx Context, ge GraphExec, s Stream) error {
	return check("cuGraphLaunch", C.gcu_graphLaunch(ctxArg(ctx), C.uintptr_t(ge), C.uintptr_t(s)))
}

func (driver) GraphExecDestroy(ctx Context, ge GraphExec) error {
	return check("cuGraphExecDestroy", C.gcu_graphExecDestroy(ctxArg(ctx), C.uintptr_t(ge)))
}

func (driver) GraphDestroy(ctx Context, g Graph) error {
	return check("cuGraphDestroy", C.gcu_graphDestroy(ctxArg(ctx), C.uintptr_t(g)))
}

// Resolved reports whether the loaded driver exports the named entry point
// (as spelled in the symbol table, e.g. "cuMulticastCreate"). It answers
// false before a successful Load.
func Resolved(symbol string) bool {
	c := C.CString(symbol)
	defer C.free(unsafe.Pointer(c))
	return C.gcu_resolved(c) != 0
}

package cuda

/*
#cgo CFLAGS: -O2 -Wall
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"strings"
	"sync"
	"unsafe"
)

// libName is the driver library goccl loads (the runtime soname, present
// wherever an NVIDIA driver is installed; no toolkit needed).
const libName = "libcuda.so.1"

var (
	loadOnce sync.Once
	loaded   Driver
	loadErr  error
)

// Load opens libcuda.so.1, resolves the entry points goccl uses and calls
// cuInit(0). It runs once per process; later calls return the same Driver
// or the same error. Where no driver is installed the error wraps
// ErrNoDriver; where cuInit fails (no usable GPU) it is an *Error carrying
// the CUresult (e.g. ErrorNoDevice).
func Load() (Driver, error) {
	loadOnce.Do(func() { loaded, loadErr = load(libName) })
	return loaded, loadErr
}

// load is Load without the once, so tests can point it at a library that
// does not exist.
func load(lib string) (Driver, error) {
	clib := C.CString(lib)
	defer C.free(unsafe.Pointer(clib))
	var errbuf [512]C.char
	var initRes C.int
	switch rc := C.gcu_load(clib, &errbuf[0], C.int(len(errbuf)), &initRes); rc {
	case 0:
		return &driver{}, nil
	case 1:
		// dlerror usually names the library already; say it once.
		msg := strings.TrimPrefix(C.GoString(&errbuf[0]), lib+": ")
		return nil, fmt.Errorf("%w (%s: %s)", ErrNoDriver, lib, msg)
	case 2:
		return nil, fmt.Errorf("cuda: %s lacks %s, which goccl requires (driver older than CUDA 12?): %w",
			lib, C.GoString(&errbuf[0]), ErrNotSupported)
	default:
		return nil, newError("cuInit", Result(initRes), driverErrorStrings)
	}
}

// driverErrorStrings asks the loaded driver to name a code.
func driverErrorStrings(code Result) (string, string, bool) {
	var name, text *C.char
	C.gcu_error_strings(C.int(code), &name, &text)
	if name == nil {
		return "", "", false
	}
	t := ""
	if text != nil {
		t = C.GoString(text)
	}
	return C.GoString(name), t, true
}

// driver is the real Driver over the shim. It has no state: the entry
// points live in the C table, filled once by gcu_load.
type driver struct{}

var _ Driver = driver{}

// check turns a shim's return code into an error; op names the entry point.
// Only failures allocate.
func check(op string, r C.gcuResult) error {
	switch r {
	case 0:
		return nil
	case C.GCU_UNRESOLVED:
		return unresolvedError(op)
	}
	return newError(op, Result(r), driverErrorStrings)
}

// layout reports the C structs' sizes and offsets, for the layout test.
func layout() map[string]int {
	var l C.gcuLayout
	C.gcu_layout(&l)
	return map[string]int{
		"allocProp.size":                 int(l.allocPropSize),
		"allocProp.type":                 int(l.allocPropType),
		"allocProp.requestedHandleTypes": int(l.allocPropHandleTypes),
		"allocProp.location.type":        int(l.allocPropLocation),
		"allocProp.location.id":          int(l.allocPropLocationID),
		"allocProp.win32HandleMetaData":  int(l.allocPropWin32),
		"allocProp.compressionType":      int(l.allocPropFlags),
		"allocProp.gpuDirectRDMACapable": int(l.allocPropGDR),
		"allocProp.usage":                int(l.allocPropUsage),
		"allocProp.reserved":             int(l.allocPropReserved),
		"accessDesc.size":                int(l.accessDescSize),
		"accessDesc.flags":               int(l.accessDescFlags),
		"mcProp.size":                    int(l.mcPropSize),
		"mcProp.numDevices":              int(l.mcPropNumDevices),
		"mcProp.size_":                   int(l.mcPropSize_),
		"mcProp.handleTypes":             int(l.mcPropHandleTypes),
		"mcProp.flags":                   int(l.mcPropFlags),
	}
}

// allocPropBytes is the CUmemAllocationProp the shim builds for prop.
func allocPropBytes(prop *AllocProp) []byte {
	var p C.gcuMemAllocationProp
	C.gcu_fill_alloc_prop(&p, C.int(prop.Device), C.int(prop.HandleTypes))
	return C.GoBytes(unsafe.Pointer(&p), C.int(unsafe.Sizeof(p)))
}

// mcPropBytes is the CUmulticastObjectProp the shim builds for prop.
func mcPropBytes(prop *MulticastProp) []byte {
	var p C.gcuMulticastObjectProp
	C.gcu_fill_mc_prop(&p, C.uint(prop.NumDevices), C.size_t(prop.Size), C.ulonglong(prop.HandleTypes))
	return C.GoBytes(unsafe.Pointer(&p), C.int(unsafe.Sizeof(p)))
}

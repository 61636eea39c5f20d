//go:build cgo

package main

/*
#include <stdint.h>
#include "shim.h"
*/
import "C"

import (
	"unsafe"

	"github.com/goccl/goccl/comm"
)

// ncclScalarResidence_t's values and ncclNumOps (include/nccl.h).
const (
	scalarDevice        = 0
	scalarHostImmediate = 1
	numBuiltinOps       = 5
)

// goccl_redop_create is ncclRedOpCreatePreMulSum: an op handle of the
// communicator, its scalar copied now (ncclScalarHostImmediate) or read
// by every call from the device address (ncclScalarDevice).
//
//export goccl_redop_create
func goccl_redop_create(hc C.uintptr_t, scalar unsafe.Pointer, dt, residence C.int, out *C.int) C.int {
	const fn = "ncclRedOpCreatePreMulSum"
	h, c, code := lookup(fn, hc)
	if code != ncclSuccess {
		return code
	}
	defer h.mu.RUnlock()
	d := comm.DataType(dt)
	if !d.Valid() {
		return invalidArg(fn, "datatype = %d is not an NCCL datatype", int(dt))
	}
	if scalar == nil {
		return invalidArg(fn, "scalar is NULL")
	}
	var s comm.Scalar
	switch residence {
	case scalarHostImmediate:
		var err error
		if s, err = comm.ScalarFromBytes(d, unsafe.Slice((*byte)(scalar), d.Size())); err != nil {
			return fail(fn, err)
		}
	case scalarDevice:
		s = comm.ScalarAt(uintptr(scalar))
	default:
		return invalidArg(fn, "residence = %d is neither ncclScalarDevice nor ncclScalarHostImmediate", int(residence))
	}
	op, err := c.CreatePreMulSum(s, d)
	if err != nil {
		return fail(fn, err)
	}
	*out = C.int(op)
	return ncclSuccess
}

// goccl_redop_destroy is ncclRedOpDestroy.
//
//export goccl_redop_destroy
func goccl_redop_destroy(hc C.uintptr_t, op C.int) C.int {
	const fn = "ncclRedOpDestroy"
	h, c, code := lookup(fn, hc)
	if code != ncclSuccess {
		return code
	}
	defer h.mu.RUnlock()
	if op >= 0 && op < numBuiltinOps {
		return invalidArg(fn, "op = %d is a built-in operator", int(op))
	}
	if err := c.DestroyOp(comm.Op(op)); err != nil {
		return fail(fn, err)
	}
	return ncclSuccess
}

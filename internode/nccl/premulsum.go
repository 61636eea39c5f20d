package nccl

/*
#include "shim.h"
*/
import "C"

import "fmt"

// CreatePreMulSum makes a scaled-sum operator on the communicator for
// elements of type t (ncclRedOpCreatePreMulSum): each rank's input is
// multiplied by its scalar before the sum. The scalar is bits (the type's
// little-endian bytes) or, when devPtr is not 0, the element at devPtr in
// device memory, read when each collective runs. Destroy the operator with
// DestroyOp once the collectives that use it are enqueued.
func (c *Comm) CreatePreMulSum(bits uint64, devPtr uintptr, t DataType) (Op, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.gone {
		return 0, errGone
	}
	var op C.int
	switch r := C.gnccl_premulsum_create(&op, C.uint64_t(bits), ptr(devPtr), C.int(t), c.h); r {
	case -1:
		return 0, fmt.Errorf("nccl: the library has no ncclRedOpCreatePreMulSum: %w", ErrNotSupported)
	default:
		if err := check("ncclRedOpCreatePreMulSum", r, c.h); err != nil {
			return 0, err
		}
	}
	return Op(op), nil
}

// DestroyOp frees an operator CreatePreMulSum made (ncclRedOpDestroy).
func (c *Comm) DestroyOp(op Op) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.gone {
		return nil
	}
	return check("ncclRedOpDestroy", C.gnccl_premulsum_destroy(C.int(op), c.h), c.h)
}

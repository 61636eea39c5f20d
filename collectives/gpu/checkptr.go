package gpu

import (
	"fmt"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// CheckPointers checks, for GOCCL_CHECK, that every buffer a's call uses
// on this rank lies inside one allocation the driver knows in this rank's
// context (cuMemGetAddressRange): a host pointer, a freed buffer or a
// count beyond the allocation is an error naming the buffer before
// anything is launched, instead of a kernel fault or silent corruption.
// a has been validated.
func (be *Backend) CheckPointers(a *collectives.Args) error {
	return checkPointers(be.drv, be.ctx, int(be.dev), be.rank, be.nranks, a)
}

func checkPointers(drv cuda.Driver, ctx cuda.Context, device, rank, nranks int, a *collectives.Args) error {
	if a.Count == 0 {
		return nil
	}
	if !(a.Coll == collectives.Broadcast && rank != a.Root) {
		if err := inAllocation(drv, ctx, device, a, "send", a.Send, uint64(a.SendBytes(nranks))); err != nil {
			return err
		}
	}
	if !(a.Coll == collectives.Reduce && rank != a.Root) {
		if err := inAllocation(drv, ctx, device, a, "recv", a.Recv, uint64(a.RecvBytes(nranks))); err != nil {
			return err
		}
	}
	return nil
}

func inAllocation(drv cuda.Driver, ctx cuda.Context, device int, a *collectives.Args, role string, p uintptr, n uint64) error {
	base, size, err := drv.MemGetAddressRange(ctx, cuda.DevicePtr(p))
	if err != nil {
		return fmt.Errorf("%w: %s: %s buffer %#x is not device memory of device %d (%v)",
			collectives.ErrInvalidArgument, a.Coll, role, p, device, err)
	}
	off := uint64(cuda.DevicePtr(p) - base)
	if n > size-off {
		return fmt.Errorf("%w: %s: %s buffer %#x + %d bytes runs %d bytes past the end of its allocation (%#x, %d bytes)",
			collectives.ErrInvalidArgument, a.Coll, role, p, n, n-(size-off), uintptr(base), size)
	}
	return nil
}

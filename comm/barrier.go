package comm

import (
	"context"
	"unsafe"

	"github.com/goccl/goccl/collectives"
)

// Barrier returns once every rank of the communicator has called it.
//
// On the host backend it is a call like the collectives: a one-element
// AllReduce through the shared-memory steps, numbered with the other calls
// (a rank that skips it is detected as any skipped call), bounded by the
// backend's timeout, and ordered after this rank's earlier calls, which on
// the host backend have all completed when they return.
//
// On the GPU backend it is a host-side barrier over the bootstrap: it
// synchronizes no stream and takes no call number. Work enqueued before it
// may still be running on the device; synchronize the streams first when
// the barrier is meant to order device work.
//
// A context that has already ended returns ctx.Err() and does nothing.
func (c *Comm) Barrier(ctx context.Context) error {
	if err := c.callErr(ctx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.backendName == BackendGPU {
		if err := c.boot.Barrier(ctx); err != nil {
			if ab := c.Err(); ab != nil {
				return ab
			}
			return c.apiErr(err)
		}
		return nil
	}
	p := uintptr(unsafe.Pointer(&c.barrierWord))
	return c.run(ctx, collectives.AllReduce, p, p, 1, Uint8, Sum, 0, 0)
}

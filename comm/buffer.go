package comm

import (
	"context"
	"fmt"
	"math/bits"

	"github.com/goccl/goccl/collectives"
)

// DeviceBuffer is memory the caller owns, with its size: device memory
// for the GPU backend (cuMemAlloc, cudaMalloc, Alloc, a framework's
// tensor), host memory for the host backend. The *Buffer calls check that
// the elements a call reads or writes fit in the buffers before anything
// is launched; the uintptr calls stay for callers that check themselves.
type DeviceBuffer struct {
	Ptr   uintptr
	Bytes uint64
}

// Slice is the part of b from byte off, n bytes long.
func (b DeviceBuffer) Slice(off, n uint64) (DeviceBuffer, error) {
	if off > b.Bytes || n > b.Bytes-off {
		return DeviceBuffer{}, fmt.Errorf("goccl: DeviceBuffer.Slice(%d, %d) of a %d-byte buffer: %w", off, n, b.Bytes, collectives.ErrInvalidArgument)
	}
	return DeviceBuffer{Ptr: b.Ptr + uintptr(off), Bytes: n}, nil
}

// AllReduceBuffer is AllReduce on sized buffers: both hold count elements.
func (c *Comm) AllReduceBuffer(ctx context.Context, send, recv DeviceBuffer, count int, dt DataType, op Op, stream uintptr) error {
	if err := c.checkBuffers(collectives.AllReduce, send, recv, count, dt, 0); err != nil {
		return err
	}
	return c.AllReduce(ctx, send.Ptr, recv.Ptr, count, dt, op, stream)
}

// BroadcastBuffer is Broadcast on sized buffers (send is read at root
// only; elsewhere it may be the zero DeviceBuffer).
func (c *Comm) BroadcastBuffer(ctx context.Context, send, recv DeviceBuffer, count int, dt DataType, root int, stream uintptr) error {
	if err := c.checkBuffers(collectives.Broadcast, send, recv, count, dt, root); err != nil {
		return err
	}
	return c.Broadcast(ctx, send.Ptr, recv.Ptr, count, dt, root, stream)
}

// ReduceBuffer is Reduce on sized buffers (recv is written at root only).
func (c *Comm) ReduceBuffer(ctx context.Context, send, recv DeviceBuffer, count int, dt DataType, op Op, root int, stream uintptr) error {
	if err := c.checkBuffers(collectives.Reduce, send, recv, count, dt, root); err != nil {
		return err
	}
	return c.Reduce(ctx, send.Ptr, recv.Ptr, count, dt, op, root, stream)
}

// AllGatherBuffer is AllGather on sized buffers: recv holds sendcount
// times Size elements.
func (c *Comm) AllGatherBuffer(ctx context.Context, send, recv DeviceBuffer, sendcount int, dt DataType, stream uintptr) error {
	if err := c.checkBuffers(collectives.AllGather, send, recv, sendcount, dt, 0); err != nil {
		return err
	}
	return c.AllGather(ctx, send.Ptr, recv.Ptr, sendcount, dt, stream)
}

// ReduceScatterBuffer is ReduceScatter on sized buffers: send holds
// recvcount times Size elements.
func (c *Comm) ReduceScatterBuffer(ctx context.Context, send, recv DeviceBuffer, recvcount int, dt DataType, op Op, stream uintptr) error {
	if err := c.checkBuffers(collectives.ReduceScatter, send, recv, recvcount, dt, 0); err != nil {
		return err
	}
	return c.ReduceScatter(ctx, send.Ptr, recv.Ptr, recvcount, dt, op, stream)
}

// SendBuffer is Send from a sized buffer.
func (c *Comm) SendBuffer(ctx context.Context, buf DeviceBuffer, count int, dt DataType, peer int, stream uintptr) error {
	if err := c.fits("Send", "buf", buf, count, 1, dt); err != nil {
		return err
	}
	return c.Send(ctx, buf.Ptr, count, dt, peer, stream)
}

// RecvBuffer is Recv into a sized buffer.
func (c *Comm) RecvBuffer(ctx context.Context, buf DeviceBuffer, count int, dt DataType, peer int, stream uintptr) error {
	if err := c.fits("Recv", "buf", buf, count, 1, dt); err != nil {
		return err
	}
	return c.Recv(ctx, buf.Ptr, count, dt, peer, stream)
}

// checkBuffers checks the roles the call uses on this rank: the send
// buffer except at a Broadcast's non-roots, the recv buffer except at a
// Reduce's non-roots. Validation of the rest (type, op, root, nil, align)
// stays with the call.
func (c *Comm) checkBuffers(coll collectives.Collective, send, recv DeviceBuffer, count int, dt DataType, root int) error {
	if !dt.Valid() || count <= 0 {
		return nil // the call itself names the bad type or count
	}
	sendMult, recvMult := 1, 1
	switch coll {
	case collectives.AllGather:
		recvMult = c.size
	case collectives.ReduceScatter:
		sendMult = c.size
	}
	if !(coll == collectives.Broadcast && c.rank != root) {
		if err := c.fits(coll.String(), "send", send, count, sendMult, dt); err != nil {
			return err
		}
	}
	if !(coll == collectives.Reduce && c.rank != root) {
		if err := c.fits(coll.String(), "recv", recv, count, recvMult, dt); err != nil {
			return err
		}
	}
	return nil
}

// fits checks that count*mult elements of dt fit in b.
func (c *Comm) fits(call, role string, b DeviceBuffer, count, mult int, dt DataType) error {
	if count <= 0 || !dt.Valid() {
		return nil
	}
	hi, elems := bits.Mul64(uint64(count), uint64(mult))
	hi2, need := bits.Mul64(elems, uint64(dt.Size()))
	if hi != 0 || hi2 != 0 || need > b.Bytes {
		what := fmt.Sprintf("%d elements", count)
		if mult > 1 {
			what = fmt.Sprintf("%d x %d ranks elements", count, mult)
		}
		return fmt.Errorf("goccl: rank %d: %s: %s buffer holds %d bytes, the call needs %s of %s (%d B each): %w",
			c.rank, call, role, b.Bytes, what, dt, dt.Size(), collectives.ErrInvalidCount)
	}
	return nil
}

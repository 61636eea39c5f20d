package comm

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"unsafe"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/onheap"
)

// Typed calls over Go slices, for host memory (the host backend). The
// element type picks the DataType, the lengths give the counts and are
// checked against each other before anything runs, and the slices stay
// alive and in place for the whole call: no unsafe in the caller. A length
// error is returned by this rank alone, as any argument error; its peers
// then wait in the call (GOCCL_CHECK=1 makes every rank fail alike).

// Float16Bits is an IEEE 754 half-precision number, as its bits.
type Float16Bits uint16

// BFloat16Bits is a bfloat16 number (a float32's upper 16 bits).
type BFloat16Bits uint16

// Element is what a typed call can carry: the fixed-size integers and
// floats (and types defined on them), and the two 16-bit float formats.
type Element interface {
	~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64 | Float16Bits | BFloat16Bits
}

// DataTypeOf is the DataType of T.
func DataTypeOf[T Element]() DataType {
	var z T
	switch any(z).(type) {
	case Float16Bits:
		return Float16
	case BFloat16Bits:
		return BFloat16
	}
	switch reflect.TypeFor[T]().Kind() {
	case reflect.Int8:
		return Int8
	case reflect.Uint8:
		return Uint8
	case reflect.Int32:
		return Int32
	case reflect.Uint32:
		return Uint32
	case reflect.Int64:
		return Int64
	case reflect.Uint64:
		return Uint64
	case reflect.Float32:
		return Float32
	default: // reflect.Float64: Element admits nothing else
		return Float64
	}
}

// AllReduceSlice reduces every rank's send with op into every rank's recv;
// len(recv) must equal len(send). send and recv may be the same slice (in
// place) but must not otherwise overlap.
func AllReduceSlice[T Element](ctx context.Context, c *Comm, send, recv []T, op Op) error {
	if err := sliceCall(c, "AllReduceSlice", send, recv, len(send), len(send)); err != nil {
		return err
	}
	err := c.AllReduce(ctx, addr(send), addr(recv), len(send), DataTypeOf[T](), op, 0)
	keep(send, recv)
	return err
}

// BroadcastSlice copies root's send into every rank's recv. At root
// len(send) must equal len(recv); elsewhere send is unused (nil is fine).
func BroadcastSlice[T Element](ctx context.Context, c *Comm, send, recv []T, root int) error {
	if c.rank == root {
		if err := sliceCall(c, "BroadcastSlice", send, recv, len(recv), len(recv)); err != nil {
			return err
		}
	} else if err := sliceCall(c, "BroadcastSlice", []T(nil), recv, 0, len(recv)); err != nil {
		return err
	}
	err := c.Broadcast(ctx, addr(send), addr(recv), len(recv), DataTypeOf[T](), root, 0)
	keep(send, recv)
	return err
}

// ReduceSlice reduces every rank's send with op into root's recv. At root
// len(recv) must equal len(send); elsewhere recv is unused (nil is fine).
func ReduceSlice[T Element](ctx context.Context, c *Comm, send, recv []T, op Op, root int) error {
	if c.rank == root {
		if err := sliceCall(c, "ReduceSlice", send, recv, len(send), len(send)); err != nil {
			return err
		}
	} else if err := sliceCall(c, "ReduceSlice", send, []T(nil), len(send), 0); err != nil {
		return err
	}
	err := c.Reduce(ctx, addr(send), addr(recv), len(send), DataTypeOf[T](), op, root, 0)
	keep(send, recv)
	return err
}

// AllGatherSlice concatenates every rank's send, in rank order, into every
// rank's recv: len(recv) must be len(send) times Size. In place, send is
// this rank's block of recv.
func AllGatherSlice[T Element](ctx context.Context, c *Comm, send, recv []T) error {
	if err := sliceCall(c, "AllGatherSlice", send, recv, len(send), len(send)*c.size); err != nil {
		return err
	}
	err := c.AllGather(ctx, addr(send), addr(recv), len(send), DataTypeOf[T](), 0)
	keep(send, recv)
	return err
}

// ReduceScatterSlice reduces every rank's send with op and leaves block r
// of the result in rank r's recv: len(send) must be len(recv) times Size.
func ReduceScatterSlice[T Element](ctx context.Context, c *Comm, send, recv []T, op Op) error {
	if err := sliceCall(c, "ReduceScatterSlice", send, recv, len(recv)*c.size, len(recv)); err != nil {
		return err
	}
	err := c.ReduceScatter(ctx, addr(send), addr(recv), len(recv), DataTypeOf[T](), op, 0)
	keep(send, recv)
	return err
}

// SendSlice sends buf to peer (see Comm.Send).
func SendSlice[T Element](ctx context.Context, c *Comm, buf []T, peer int) error {
	if err := sliceCall(c, "SendSlice", buf, []T(nil), len(buf), 0); err != nil {
		return err
	}
	err := c.Send(ctx, addr(buf), len(buf), DataTypeOf[T](), peer, 0)
	keep(buf, []T(nil))
	return err
}

// RecvSlice receives len(buf) elements from peer into buf (see Comm.Recv).
func RecvSlice[T Element](ctx context.Context, c *Comm, buf []T, peer int) error {
	if err := sliceCall(c, "RecvSlice", []T(nil), buf, 0, len(buf)); err != nil {
		return err
	}
	err := c.Recv(ctx, addr(buf), len(buf), DataTypeOf[T](), peer, 0)
	keep([]T(nil), buf)
	return err
}

// AllToAllSlice sends block p of send to rank p and receives rank p's block
// into block p of recv: len(send) == len(recv), a multiple of Size.
func AllToAllSlice[T Element](ctx context.Context, c *Comm, send, recv []T) error {
	if len(send)%c.size != 0 {
		return fmt.Errorf("goccl: rank %d: AllToAllSlice: len(send) %d is not a multiple of the %d ranks: %w",
			c.rank, len(send), c.size, collectives.ErrInvalidCount)
	}
	if err := sliceCall(c, "AllToAllSlice", send, recv, len(send), len(send)); err != nil {
		return err
	}
	if addr(send) == addr(recv) && len(send) > 0 {
		return fmt.Errorf("goccl: rank %d: AllToAllSlice: send and recv are the same slice (no in-place all-to-all): %w",
			c.rank, collectives.ErrInvalidArgument)
	}
	err := c.AllToAll(ctx, addr(send), addr(recv), len(send)/c.size, DataTypeOf[T](), 0)
	keep(send, recv)
	return err
}

// sliceCall checks a typed call's slices: the backend must run on host
// memory, send must hold wantSend elements and recv wantRecv, and the two
// may be one slice or disjoint, never partly overlapping (the result would
// depend on the order the backend reads and writes).
func sliceCall[T Element](c *Comm, name string, send, recv []T, wantSend, wantRecv int) error {
	if c.backendName == BackendGPU {
		return fmt.Errorf("goccl: rank %d: %s: Go slices are host memory and the gpu backend reads device memory; use DeviceBuffer calls: %w",
			c.rank, name, collectives.ErrNotSupported)
	}
	if len(send) != wantSend {
		return fmt.Errorf("goccl: rank %d: %s: send has %d elements, want %d: %w", c.rank, name, len(send), wantSend, collectives.ErrInvalidCount)
	}
	if len(recv) != wantRecv {
		return fmt.Errorf("goccl: rank %d: %s: recv has %d elements, want %d: %w", c.rank, name, len(recv), wantRecv, collectives.ErrInvalidCount)
	}
	if len(send) == 0 || len(recv) == 0 {
		return nil
	}
	es := unsafe.Sizeof(send[0])
	s, r := addr(send), addr(recv)
	sn, rn := uintptr(len(send))*es, uintptr(len(recv))*es
	if s != r && s < r+rn && r < s+sn {
		// AllGather's in-place form is send at this rank's block of recv.
		inPlaceGather := name == "AllGatherSlice" && s == r+uintptr(c.rank)*sn
		if !inPlaceGather {
			return fmt.Errorf("goccl: rank %d: %s: send and recv overlap without being the same buffer: %w", c.rank, name, collectives.ErrInvalidArgument)
		}
	}
	return nil
}

// addr is the address of s's first element (0 for an empty slice), its
// backing array kept on the heap: a stack array could move when the
// goroutine's stack grows during the call, and the backend holds only its
// address.
func addr[T Element](s []T) uintptr { return onheap.Addr(s) }

// keep holds send and recv alive until the call has returned.
func keep[T Element](send, recv []T) {
	runtime.KeepAlive(send)
	runtime.KeepAlive(recv)
}

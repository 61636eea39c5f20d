package host

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/collectives"
)

// The single-copy collectives (cma.go). Every one publishes this rank's
// addresses, meets its peers at the call's first barrier (which checks the
// calls match), copies or reduces straight out of the peers' buffers, and
// meets them again at a last barrier: no rank returns, and so lets its
// caller reuse its buffers, while a peer may still read them.
//
// AllReduce is a reduce-scatter then an all-gather on the callers' own
// buffers: rank r reduces part r of the call (span's parts), reading each
// peer's part r in L2-sized chunks into its bounce buffer and reducing
// them with its own into its receive buffer; after a barrier it copies
// every peer's reduced part from that peer's receive buffer into its own.
// Each rank reads its send buffer once and writes its receive buffer once,
// and the peers' bytes cross once, where staging copies them twice. The
// middle barrier also keeps an in-place call right: a rank overwrites the
// peers' parts of its buffer only after every peer has read them.

// runCMA runs a on the single-copy path. This rank's own buffers are
// checked first (checkOwn), and a fault on them in Go code all the same
// becomes an error rather than a crash; a peer's buffer that cannot be
// read (a dead peer, an address not mapped there) aborts the call on
// every rank with an error naming that peer.
func (b *backend) runCMA(ctx context.Context, a *collectives.Args) (err error) {
	b.last.Transport = "cma"
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			re, ok := r.(runtime.Error)
			if !ok {
				panic(r)
			}
			err = b.fail(fmt.Errorf("%w: host: rank %d: a buffer of its %s of %d %s faults (%v): a count past the buffer?",
				collectives.ErrInvalidArgument, b.rank, a.Coll, a.Count, a.Type, re))
		}
	}()
	c := b.cma
	send := a.Send
	if a.Coll == collectives.Broadcast && b.rank != a.Root {
		send = 0 // not read
	}
	if err := c.checkOwn(b.rank, "send", send, a.SendBytes(b.n), false); err != nil {
		return b.fail(err)
	}
	if err := c.checkOwn(b.rank, "receive", a.Recv, a.RecvBytes(b.n), true); err != nil {
		return b.fail(err)
	}
	c.publish(b.rank, a.Send, a.Recv)
	first := true
	if err := b.sync(ctx, a, &first); err != nil {
		return err
	}
	c.collect()
	switch a.Coll {
	case collectives.AllReduce:
		err = b.cmaAllReduce(ctx, a)
	case collectives.AllGather:
		err = b.cmaAllGather(ctx, a)
	case collectives.Broadcast:
		err = b.cmaBroadcast(ctx, a)
	case collectives.ReduceScatter:
		err = b.cmaReduceScatter(a)
	}
	if err != nil {
		return b.fail(err)
	}
	return b.barrier(ctx)
}

func (b *backend) cmaAllReduce(ctx context.Context, a *collectives.Args) error {
	c := b.cma
	total := a.Count * a.Type.Size()
	send, recv := hostBytes(a.Send, total), hostBytes(a.Recv, total)
	lo, hi := span(total, b.n, b.rank)
	if lo < hi {
		if err := b.cmaReduce(recv[lo:hi], send[lo:hi], c.send, lo, a, a.Send == a.Recv); err != nil {
			return err
		}
	}
	if err := b.barrier(ctx); err != nil {
		return err
	}
	for q := 0; q < b.n; q++ {
		if q == b.rank {
			continue
		}
		qlo, qhi := span(total, b.n, q)
		if err := b.cmaCopy(ctx, q, "receive", recv[qlo:qhi], c.recv[q]+uintptr(qlo)); err != nil {
			return err
		}
	}
	return nil
}

func (b *backend) cmaAllGather(ctx context.Context, a *collectives.Args) error {
	total := a.Count * a.Type.Size()
	recv := hostBytes(a.Recv, total*b.n)
	if !a.InPlace(b.rank) {
		copy(recv[b.rank*total:(b.rank+1)*total], hostBytes(a.Send, total))
	}
	for q := 0; q < b.n; q++ {
		if q != b.rank {
			if err := b.cmaCopy(ctx, q, "send", recv[q*total:(q+1)*total], b.cma.send[q]); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b *backend) cmaBroadcast(ctx context.Context, a *collectives.Args) error {
	total := a.Count * a.Type.Size()
	recv := hostBytes(a.Recv, total)
	if b.rank == a.Root {
		if a.Send != a.Recv {
			copy(recv, hostBytes(a.Send, total))
		}
		return nil
	}
	return b.cmaCopy(ctx, a.Root, "send", recv, b.cma.send[a.Root])
}

func (b *backend) cmaReduceScatter(a *collectives.Args) error {
	total := a.Count * a.Type.Size()
	off := b.rank * total
	own := hostBytes(a.Send+uintptr(off), total)
	return b.cmaReduce(hostBytes(a.Recv, total), own, b.cma.send, off, a, a.InPlace(b.rank))
}

// cmaReduce sets dst to the reduction over the ranks of their bytes at
// off of the buffers at base[q] (own, this rank's, is read here; aliases
// dst when alias). Peers' chunks go through this rank's bounce parts, in
// rank order with own, so every rank's results are alike.
func (b *backend) cmaReduce(dst, own []byte, base []uintptr, off int, a *collectives.Args, alias bool) error {
	c := b.cma
	red := reducer(a.Type, a.Op)
	for x := 0; x < len(dst); x += c.chunk {
		m := min(c.chunk, len(dst)-x)
		srcs := b.srcs[:0]
		for q := 0; q < b.n; q++ {
			buf := c.bounce[q][:m]
			switch {
			case q != b.rank && c.direct[q]:
				buf = hostBytes(base[q]+uintptr(off+x), m)
			case q != b.rank:
				if err := b.cmaRead(q, "send", buf, base[q]+uintptr(off+x)); err != nil {
					return err
				}
			case alias && q != 0:
				// Only the first source may be the destination.
				copy(buf, own[x:x+m])
			default:
				buf = own[x : x+m]
			}
			srcs = append(srcs, buf)
		}
		red(dst[x:x+m], srcs, b.n, &b.sc)
	}
	return nil
}

// cmaCopy copies rank q's bytes at address at into dst, in pieces between
// which an abort is seen.
func (b *backend) cmaCopy(ctx context.Context, q int, what string, dst []byte, at uintptr) error {
	if b.cma.direct[q] {
		copyOut(dst, hostBytes(at, len(dst)))
		return nil
	}
	for x := 0; x < len(dst); x += cmaPiece {
		if err := b.interrupted(ctx); err != nil {
			return err
		}
		m := min(cmaPiece, len(dst)-x)
		if err := b.cmaRead(q, what, dst[x:x+m], at+uintptr(x)); err != nil {
			return err
		}
	}
	return nil
}

// copyOut copies a peer's bytes into this rank's buffer, around the
// caches when it is large (the data is not read again here).
func copyOut(dst, src []byte) {
	if len(dst) >= ntMinBytes {
		copyNT(dst, src)
		return
	}
	copy(dst, src)
}

// cmaRead reads rank q's bytes at address at (of its buffer what) into
// dst, turning a failure into an error naming q.
func (b *backend) cmaRead(q int, what string, dst []byte, at uintptr) error {
	err := b.cma.read(b.cma.pids[q], dst, at)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ESRCH):
		return &collectives.PeerError{Rank: q, Cause: fmt.Errorf("%w: host: rank %d reading rank %d's %s buffer: its process %d is gone: %w",
			collectives.ErrAborted, b.rank, q, what, b.cma.pids[q], err)}
	case errors.Is(err, unix.EFAULT):
		return &collectives.PeerError{Rank: q, Cause: fmt.Errorf("%w: host: rank %d reading %d bytes of rank %d's %s buffer at %#x into its own at %#x: %w (a count past one of them?)",
			collectives.ErrInvalidArgument, b.rank, len(dst), q, what, at, addrOf(dst), err)}
	}
	return &collectives.PeerError{Rank: q, Cause: fmt.Errorf("%w: host: rank %d reading rank %d's %s buffer (process %d): %w",
		collectives.ErrAborted, b.rank, q, what, b.cma.pids[q], err)}
}

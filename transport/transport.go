package transport

import (
	"context"
	"errors"
)

// Bootstrap is what transports need from the communicator's out-of-band
// channel. comm implements it; it is declared here so that transports never
// import comm. All ranks of this project's jobs share one node, so every
// peer can receive file descriptors.
type Bootstrap interface {
	Rank() int
	Size() int
	// AllGather contributes data and returns every rank's contribution,
	// indexed by rank (this rank's own slice included).
	AllGather(ctx context.Context, data []byte) ([][]byte, error)
	// Broadcast returns root's data on every rank; data is ignored off root.
	Broadcast(ctx context.Context, root int, data []byte) ([]byte, error)
	Barrier(ctx context.Context) error
	// SendFDs passes open file descriptors to peer over a Unix socket
	// (SCM_RIGHTS) in one message; the caller keeps its own copies.
	SendFDs(ctx context.Context, peer int, fds []int) error
	// RecvFDs receives exactly n descriptors sent by peer's SendFDs, in
	// order; the caller owns them.
	RecvFDs(ctx context.Context, peer int, n int) ([]int, error)
}

// ExchangeFDs gives every rank every other rank's descriptors: each rank
// contributes fds (the same count on every rank) and gets back out[r] for
// each rank r; out[Rank()] is fds itself, the others are new descriptors
// the caller must close.
func ExchangeFDs(ctx context.Context, b Bootstrap, fds []int) ([][]int, error) {
	me, n := b.Rank(), b.Size()
	out := make([][]int, n)
	out[me] = fds
	// Sends never block on the peer (the kernel buffers one message per
	// peer), so send to all, then receive from all.
	for p := 0; p < n; p++ {
		if p == me {
			continue
		}
		if err := b.SendFDs(ctx, p, fds); err != nil {
			closeAll(out, me)
			return nil, err
		}
	}
	for p := 0; p < n; p++ {
		if p == me {
			continue
		}
		got, err := b.RecvFDs(ctx, p, len(fds))
		if err != nil {
			closeAll(out, me)
			return nil, err
		}
		out[p] = got
	}
	return out, nil
}

// ErrClosed is returned by a transport used after Close.
var ErrClosed = errors.New("transport: closed")

// Closer is implemented by the fd owner of ExchangeFDs results.
var closeFD = func(fd int) error { return closeFDImpl(fd) }

func closeAll(out [][]int, me int) {
	for r, fds := range out {
		if r == me {
			continue
		}
		for _, fd := range fds {
			_ = closeFD(fd)
		}
	}
}

package gpu

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

// nodeBoot is the bootstrap of one node's ranks, over which the node's
// own GPU backend is built when a job spans nodes. Its exchanges run
// between the node's ranks only, so that each node's backend makes as
// many (or as few) as its own transport needs: bytes travel in a memfd
// passed over the job bootstrap's descriptor channel (a Unix socket,
// which ranks of one node share), descriptors as they are.
type nodeBoot struct {
	job     transport.Bootstrap
	members []int // the node's ranks in the job, by local rank
	lrank   int
}

var _ transport.Bootstrap = (*nodeBoot)(nil)

func (nb *nodeBoot) Rank() int { return nb.lrank }
func (nb *nodeBoot) Size() int { return len(nb.members) }

// AllGather sends data to every other rank of the node, then receives
// theirs: a send never waits for its receiver (one message per peer is
// buffered), so no order of the ranks deadlocks.
func (nb *nodeBoot) AllGather(ctx context.Context, data []byte) ([][]byte, error) {
	out := make([][]byte, len(nb.members))
	out[nb.lrank] = data
	for l := range nb.members {
		if l != nb.lrank {
			if err := nb.send(ctx, l, data); err != nil {
				return nil, err
			}
		}
	}
	for l := range nb.members {
		if l != nb.lrank {
			b, err := nb.recv(ctx, l)
			if err != nil {
				return nil, err
			}
			out[l] = b
		}
	}
	return out, nil
}

// Broadcast: root sends to every other rank of the node.
func (nb *nodeBoot) Broadcast(ctx context.Context, root int, data []byte) ([]byte, error) {
	if root < 0 || root >= len(nb.members) {
		return nil, fmt.Errorf("gpu backend: node bootstrap: root %d of %d ranks", root, len(nb.members))
	}
	if nb.lrank != root {
		return nb.recv(ctx, root)
	}
	for l := range nb.members {
		if l != root {
			if err := nb.send(ctx, l, data); err != nil {
				return nil, err
			}
		}
	}
	return data, nil
}

func (nb *nodeBoot) Barrier(ctx context.Context) error {
	_, err := nb.AllGather(ctx, nil)
	return err
}

func (nb *nodeBoot) SendFDs(ctx context.Context, peer int, fds []int) error {
	return nb.job.SendFDs(ctx, nb.members[peer], fds)
}

func (nb *nodeBoot) RecvFDs(ctx context.Context, peer int, n int) ([]int, error) {
	return nb.job.RecvFDs(ctx, nb.members[peer], n)
}

// send passes data to local rank l in a sealed memfd.
func (nb *nodeBoot) send(ctx context.Context, l int, data []byte) error {
	fd, err := unix.MemfdCreate("goccl-node-boot", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("gpu backend: node bootstrap: memfd: %w", err)
	}
	defer unix.Close(fd)
	for off := 0; off < len(data); {
		n, err := unix.Pwrite(fd, data[off:], int64(off))
		if err != nil {
			return fmt.Errorf("gpu backend: node bootstrap: write memfd: %w", err)
		}
		off += n
	}
	if err := nb.job.SendFDs(ctx, nb.members[l], []int{fd}); err != nil {
		return fmt.Errorf("gpu backend: node bootstrap: to rank %d: %w", nb.members[l], err)
	}
	return nil
}

// recv takes the next message local rank l sent.
func (nb *nodeBoot) recv(ctx context.Context, l int) ([]byte, error) {
	fds, err := nb.job.RecvFDs(ctx, nb.members[l], 1)
	if err != nil {
		return nil, fmt.Errorf("gpu backend: node bootstrap: from rank %d: %w", nb.members[l], err)
	}
	fd := fds[0]
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("gpu backend: node bootstrap: from rank %d: %w", nb.members[l], err)
	}
	if st.Size > 1<<30 {
		return nil, fmt.Errorf("gpu backend: node bootstrap: rank %d sent %d bytes", nb.members[l], st.Size)
	}
	b := make([]byte, st.Size)
	for off := 0; off < len(b); {
		n, err := unix.Pread(fd, b[off:], int64(off))
		if err == nil && n == 0 {
			err = errors.New("short read")
		}
		if err != nil {
			return nil, fmt.Errorf("gpu backend: node bootstrap: from rank %d: read memfd: %w", nb.members[l], err)
		}
		off += n
	}
	return b, nil
}

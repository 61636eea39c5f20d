package transporttest

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

// Group is the shared state of one fake job.
type Group struct {
	n int

	mu      sync.Mutex
	cond    *sync.Cond
	round   int      // completed collective rounds
	arrived int      // ranks arrived in the current round
	data    [][]byte // contributions of the current round
	result  [][]byte // results of the last completed round

	fdq map[[2]int]chan []int // (from, to) -> queued fd batches
}

// NewGroup returns a job of n ranks; Rank(r) is rank r's Bootstrap.
func NewGroup(n int) *Group {
	g := &Group{n: n, data: make([][]byte, n), fdq: map[[2]int]chan []int{}}
	g.cond = sync.NewCond(&g.mu)
	for a := 0; a < n; a++ {
		for b := 0; b < n; b++ {
			g.fdq[[2]int{a, b}] = make(chan []int, 64)
		}
	}
	return g
}

// Rank returns the bootstrap of rank r.
func (g *Group) Rank(r int) transport.Bootstrap { return &boot{g: g, rank: r} }

// Run calls f on every rank concurrently and returns the first error.
func (g *Group) Run(f func(rank int, b transport.Bootstrap) error) error {
	errs := g.each(func(r int) error { return f(r, g.Rank(r)) })
	for r, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}

type boot struct {
	g    *Group
	rank int
}

func (b *boot) Rank() int { return b.rank }
func (b *boot) Size() int { return b.g.n }

func (b *boot) AllGather(ctx context.Context, data []byte) ([][]byte, error) {
	g := b.g
	g.mu.Lock()
	defer g.mu.Unlock()
	// Wake the wait below when ctx ends, so a rank that gives up does not
	// leave the others asleep.
	stop := context.AfterFunc(ctx, func() {
		g.mu.Lock()
		g.cond.Broadcast()
		g.mu.Unlock()
	})
	defer stop()
	my := g.round
	g.data[b.rank] = append([]byte(nil), data...)
	g.arrived++
	if g.arrived == g.n {
		g.result = g.data
		g.data = make([][]byte, g.n)
		g.arrived = 0
		g.round++
		g.cond.Broadcast()
	}
	for g.round == my {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		g.cond.Wait()
	}
	out := make([][]byte, g.n)
	for i, d := range g.result {
		out[i] = append([]byte(nil), d...)
	}
	return out, nil
}

func (b *boot) Broadcast(ctx context.Context, root int, data []byte) ([]byte, error) {
	all, err := b.AllGather(ctx, data)
	if err != nil {
		return nil, err
	}
	return all[root], nil
}

func (b *boot) Barrier(ctx context.Context) error {
	_, err := b.AllGather(ctx, nil)
	return err
}

func (b *boot) SendFDs(ctx context.Context, peer int, fds []int) error {
	dup := make([]int, len(fds))
	for i, fd := range fds {
		d, err := unix.Dup(fd)
		if err != nil {
			return err
		}
		dup[i] = d
	}
	select {
	case b.g.fdq[[2]int{b.rank, peer}] <- dup:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *boot) RecvFDs(ctx context.Context, peer int, n int) ([]int, error) {
	select {
	case fds := <-b.g.fdq[[2]int{peer, b.rank}]:
		if len(fds) != n {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return nil, fmt.Errorf("transporttest: rank %d sent %d fds, want %d", peer, len(fds), n)
		}
		return fds, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

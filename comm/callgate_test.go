package comm

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
)

// seqBackend notes the number of every call it runs and how many ran at
// once.
type seqBackend struct {
	nopBackend
	running, most atomic.Int32
	mu            sync.Mutex
	seqs          []uint64
}

func (s *seqBackend) Run(context.Context, *collectives.Args) error { return nil }

func (s *seqBackend) RunGroup(_ context.Context, g *collectives.Group) error {
	n := s.running.Add(1)
	for {
		m := s.most.Load()
		if n <= m || s.most.CompareAndSwap(m, n) {
			break
		}
	}
	s.mu.Lock()
	for i := range g.Colls {
		s.seqs = append(s.seqs, g.Colls[i].Seq)
	}
	s.mu.Unlock()
	s.running.Add(-1)
	return nil
}

// TestCallGateSerializes: calls made from several goroutines at once (which
// the API does not allow) still run one at a time, every one numbered
// once, and the bootstrap's count is theirs.
func TestCallGateSerializes(t *testing.T) {
	be := &seqBackend{}
	opts := testOpts(&fakeFactory{})
	opts.NewBackend = func(context.Context, transport.Bootstrap, BackendConfig) (collectives.Backend, error) { return be, nil }
	comms := initGroup(t, 1, opts)
	c := comms[0]
	const goroutines, calls, per = 4, 300, 2
	buf := make([]float32, 16)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range calls {
				g := NewGroup()
				for range per {
					if err := g.AllReduce(c, addr(buf), addr(buf), len(buf), Float32, Sum, 0); err != nil {
						t.Error(err)
						return
					}
				}
				if err := g.Run(context.Background()); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	keep(buf, buf)
	const total = goroutines * calls * per
	require.Len(t, be.seqs, total)
	seen := make(map[uint64]bool, total)
	for _, s := range be.seqs {
		assert.False(t, seen[s], "call #%d numbered twice", s)
		assert.True(t, s >= 1 && s <= total, "call #%d out of range", s)
		seen[s] = true
	}
	assert.Equal(t, int32(1), be.most.Load(), "calls ran at once")
	assert.Equal(t, uint64(total), c.boot.callCount())
}

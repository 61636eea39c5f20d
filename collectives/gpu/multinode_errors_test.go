package gpu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internode/nccl"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// TestNodeBootExchangesWithinTheNode: the node bootstrap's gathers and
// broadcasts reach the node's ranks only, in order, whatever the sizes
// (empty included), and each node runs as many as it likes.
func TestNodeBootExchangesWithinTheNode(t *testing.T) {
	nodes := [][]int{{0, 2, 3}, {1, 4}}
	g := transporttest.NewGroup(5)
	require.NoError(t, g.Run(func(r int, b transport.Bootstrap) error {
		ctx := context.Background()
		for _, members := range nodes {
			for l, m := range members {
				if m != r {
					continue
				}
				nb := &nodeBoot{job: b, members: members, lrank: l}
				// A node of three makes one exchange more than the other.
				rounds := len(members)
				for i := range rounds {
					mine := []byte(fmt.Sprintf("r%d-i%d", r, i))
					if i == 1 {
						mine = nil
					}
					all, err := nb.AllGather(ctx, mine)
					if err != nil {
						return err
					}
					for q, got := range all {
						want := fmt.Sprintf("r%d-i%d", members[q], i)
						if i == 1 {
							want = ""
						}
						if string(got) != want {
							return fmt.Errorf("rank %d round %d: from local %d got %q want %q", r, i, q, got, want)
						}
					}
				}
				got, err := nb.Broadcast(ctx, len(members)-1, []byte(fmt.Sprintf("root-%d", r)))
				if err != nil {
					return err
				}
				if want := fmt.Sprintf("root-%d", members[len(members)-1]); string(got) != want {
					return fmt.Errorf("rank %d: broadcast got %q want %q", r, got, want)
				}
				return nb.Barrier(ctx)
			}
		}
		return errors.New("rank on no node")
	}))
}

// failingEngine fails ncclGetUniqueId or ncclCommInitRank on one rank.
type failingEngine struct {
	*fakeEngine
	badID, badInit int // ranks' node-0 rank that fails, or -1
	self           int
}

func (e *failingEngine) GetUniqueID() (nccl.UniqueID, error) {
	if e.self == e.badID {
		return nccl.UniqueID{}, errors.New("no network interface")
	}
	return e.fakeEngine.GetUniqueID()
}

func (e *failingEngine) InitRank(cuctx uintptr, nranks, rank int, id nccl.UniqueID, host string) (interComm, error) {
	if e.self == e.badInit && nranks == 4 {
		return nil, errors.New("ncclCommInitRank: remote error")
	}
	return e.fakeEngine.InitRank(cuctx, nranks, rank, id, host)
}

// TestConnectFailsOnEveryRank: a rank whose NCCL id or communicator
// cannot be made fails connect on every rank, each naming it.
func TestConnectFailsOnEveryRank(t *testing.T) {
	nodes := []string{"a", "a", "b", "b"}
	for _, tc := range []struct {
		name           string
		badID, badInit int
		want           string
	}{
		{"unique id", 1, -1, "no network interface"},
		{"flat init", -1, 3, "remote error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &fakeSpace{}
			base := &fakeEngine{s: s, hubs: map[nccl.UniqueID]*fakeHub{}, hosts: map[nccl.UniqueID]map[int]string{}}
			g := transporttest.NewGroup(4)
			errs := g.OnRanks(t, func(ctx context.Context, r int, b transport.Bootstrap) error {
				m := &multi{rank: r, n: 4, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
				m.layout(nodes)
				eng := &failingEngine{fakeEngine: base, badID: tc.badID, badInit: tc.badInit, self: r}
				return m.connect(ctx, b, eng, 0, nodes[r])
			})
			bad := max(tc.badID, tc.badInit)
			for r, err := range errs {
				require.Error(t, err, "rank %d", r)
				assert.Contains(t, err.Error(), tc.want, "rank %d", r)
				if r != bad {
					var pe *collectives.PeerError
					require.ErrorAs(t, err, &pe, "rank %d", r)
					assert.Equal(t, bad, pe.Rank, "rank %d names the rank at fault", r)
				}
			}
		})
	}
}

// abortComm is a fake communicator whose asynchronous error the test sets
// and which records its abort.
type abortComm struct {
	fakeComm
	async   atomic.Pointer[error]
	aborted atomic.Bool
}

func (c *abortComm) AsyncError() error {
	if e := c.async.Load(); e != nil {
		return *e
	}
	return nil
}
func (c *abortComm) Abort() error { c.aborted.Store(true); return nil }

type abortLocal struct {
	fakeNodeBackend
	cause atomic.Pointer[error]
}

func (b *abortLocal) Abort(err error) { b.cause.CompareAndSwap(nil, &err) }

// TestAsyncErrorAborts: an asynchronous NCCL error turns into goccl's
// abort (the node backend aborted, both NCCL communicators aborted, later
// calls fail with ErrAborted), and goccl's own Abort aborts the NCCL
// communicators.
func TestAsyncErrorAborts(t *testing.T) {
	for _, viaNCCL := range []bool{true, false} {
		t.Run(fmt.Sprintf("nccl=%v", viaNCCL), func(t *testing.T) {
			rail, flat := &abortComm{}, &abortComm{}
			local := &abortLocal{}
			m := &multi{rank: 0, n: 4, log: slog.New(slog.NewTextHandler(io.Discard, nil)), rail: rail, flat: flat,
				local: local, mem: fakeMem{&fakeSpace{}}}
			m.layout([]string{"a", "a", "b", "b"})
			m.start()
			if viaNCCL {
				e := error(&nccl.Error{Call: "asynchronous error", Result: 6, Text: "remote process exited"})
				flat.async.Store(&e)
			} else {
				m.Abort(errors.New("peer 3 died"))
			}
			require.Eventually(t, func() bool { return rail.aborted.Load() && flat.aborted.Load() }, 20*time.Second, 10*time.Millisecond)
			require.NotNil(t, local.cause.Load(), "the node backend is aborted too")
			err := m.Run(context.Background(), &collectives.Args{Coll: collectives.AllReduce, Count: 1, Type: collectives.Int32})
			require.ErrorIs(t, err, collectives.ErrAborted)
			if viaNCCL {
				assert.ErrorIs(t, err, nccl.ErrRemote)
				assert.Contains(t, err.Error(), "NCCL between nodes")
			} else {
				assert.Contains(t, err.Error(), "peer 3 died")
			}
			require.NoError(t, m.Close())
		})
	}
}

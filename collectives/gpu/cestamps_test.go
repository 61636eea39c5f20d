package gpu

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// hookStamps makes every copy-engine stamp an op "stamp" in its rank's
// fake driver (dst: the slot, val: which, rec: the call number), in order
// with the call's other work, and counts the requests.
func hookStamps(t *testing.T) *int {
	t.Helper()
	calls := new(int)
	old := ceStampLaunch
	t.Cleanup(func() { ceStampLaunch = old })
	ceStampLaunch = func(be *Backend, s cuda.Stream, seq, slot uint64, which int) error {
		*calls++
		d := be.drv.(*fakeDriver)
		d.mu.Lock()
		defer d.mu.Unlock()
		d.ops = append(d.ops, fakeOp{kind: "stamp", stream: s, dst: uintptr(slot), val: uint32(which), rec: seq})
		return nil
	}
	return calls
}

// TestCEStamps: with the recorder on, a copy-engine call of each kind
// (AllGather, Broadcast plain and landed, AllReduce and ReduceScatter)
// asks for its start stamp on the user's stream before its first
// operation and its end stamp after its last, in its call's slot; with
// the recorder off, or for an unnumbered call, nothing is asked.
func TestCEStamps(t *testing.T) {
	const n, slots = 2, 8
	cases := []struct {
		name  string
		tune  string
		coll  collectives.Collective
		count int
	}{
		{"allgather", "ce.all_gather=1M", collectives.AllGather, 1 << 18},
		{"broadcast", "ce.broadcast=1M", collectives.Broadcast, 1 << 20},
		{"broadcast landed", "celand=64,ce.broadcast=0", collectives.Broadcast, 4096},
		{"allreduce", "ce.all_reduce=1M", collectives.AllReduce, 1 << 20},
		{"reducescatter", "ce.reduce_scatter=1M", collectives.ReduceScatter, 1 << 20},
	}
	for _, tc := range cases {
		for _, rec := range []int{slots, 0} {
			t.Run(fmt.Sprintf("%s recorder=%d", tc.name, rec), func(t *testing.T) {
				t.Setenv(EnvTune, tc.tune)
				calls := hookStamps(t)
				bes, drvs, _ := newFakeBackends(t, n, Config{Stamps: rec})
				a := collectives.Args{Coll: tc.coll, Count: tc.count, Type: collectives.Float32, Op: collectives.Sum, Stream: uintptr(userStream)}
				recv, _ := allocAll(t, bes, uint64(a.RecvBytes(n))+64)
				for _, seq := range []uint64{3, 11, 0} { // 11 wraps onto slot 3
					for r, be := range bes {
						drvs[r].ops, drvs[r].launches = nil, nil
						x := a
						x.Send, x.Recv, x.Seq = rankAddr(sendBase, r), recv[r], seq
						require.NoError(t, be.Run(context.Background(), &x))
						require.Equal(t, collectives.CopyEngine, be.LastPath().Algo, "rank %d: the copy-engine path", r)
						if tc.name == "broadcast landed" {
							require.Positive(t, be.ce.landBytes, "rank %d: landing on", r)
							require.Positive(t, be.ce.lands, "rank %d: the call landed", r)
						}
						ops := drvs[r].opsOf()
						stamps := drvs[r].opsOf("stamp")
						if rec == 0 || seq == 0 {
							assert.Empty(t, stamps, "rank %d call %d: no stamp", r, seq)
							continue
						}
						slot := uintptr(bes[r].stamps.dev) + uintptr(seq%slots)*stampBytes
						require.Len(t, stamps, 2, "rank %d call %d", r, seq)
						require.Greater(t, len(ops), 2, "rank %d: the call's own work", r)
						assert.Equal(t, fakeOp{kind: "stamp", stream: userStream, dst: slot, val: ceStampStart, rec: seq}, ops[0], "rank %d call %d: first", r, seq)
						assert.Equal(t, fakeOp{kind: "stamp", stream: userStream, dst: slot, val: ceStampEnd, rec: seq}, ops[len(ops)-1], "rank %d call %d: last", r, seq)
					}
				}
				if rec == 0 {
					assert.Zero(t, *calls, "the recorder off asks for nothing")
				} else {
					assert.Equal(t, 2*2*n, *calls, "two stamps a numbered call and rank")
				}
			})
		}
	}
}

// A kernel's call stores its own stamps (its parameters): the
// copy-engine stamps are not asked for.
func TestCEStampsNotForKernels(t *testing.T) {
	calls := hookStamps(t)
	bes, drvs, _ := newFakeBackends(t, 2, Config{Stamps: 8})
	require.NoError(t, bes[0].Run(context.Background(), &collectives.Args{Coll: collectives.AllReduce, Send: 0x1000, Recv: 0x2000,
		Count: 2, Type: collectives.Float32, Op: collectives.Sum, Stream: uintptr(userStream), Seq: 5}))
	require.Len(t, drvs[0].launches, 1)
	assert.Equal(t, uint64(bes[0].stamps.dev)+5*stampBytes, u64at(drvs[0].launches[0].params, offStamp))
	assert.Zero(t, *calls)
}

package gpu

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// landTune puts Broadcast and AllGather on the copy engines at every size
// and the landing slots at 64 bytes, so that the simulation's Broadcasts
// of 32 int32 or more go through them and the smaller ones do not.
func landTune(t *testing.T) {
	t.Setenv(EnvTune, "celand=64,ce.broadcast=0,ce.all_gather=0")
}

// sameRootCalls are Broadcasts from one root back to back, landed, with
// nothing between them that waits for the other ranks: each root's next
// call may land while the owners still move the last one.
func sameRootCalls(n int) []simCall {
	var calls []simCall
	for i := range 12 {
		calls = append(calls, simCall{coll: collectives.Broadcast, count: 40 + i, root: (i / 4) % n, inPlace: i%3 == 0})
	}
	return calls
}

// landRig is n fake ranks on the copy-engine path with a receive buffer
// for the simulation's calls, and their signal stream, which the fakes
// number alike on every rank.
func landRig(t *testing.T, n int) ([]*Backend, []*fakeDriver, []uintptr, cuda.Stream) {
	t.Helper()
	bes, drvs, _ := newFakeBackends(t, n, Config{Algo: "ce"})
	recv, _ := allocAll(t, bes, uint64(n*(4096+3)*4+simGuard))
	sig := bes[0].ce.red[redSignal]
	for _, be := range bes {
		require.Equal(t, sig, be.ce.red[redSignal], "the fakes number streams alike")
	}
	return bes, drvs, recv, sig
}

func TestCELandingSimulated(t *testing.T) {
	landTune(t)
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			bes, drvs, recv, _ := landRig(t, n)
			const seeds = 20
			for seed := range uint64(seeds) {
				bad := runSim(t, bes, drvs, recv, simCalls(n), seed, nil)
				require.Empty(t, bad, "seed %d", seed)
				bad = runSim(t, bes, drvs, recv, sameRootCalls(n), seed, nil)
				require.Empty(t, bad, "seed %d, one root", seed)
			}
			// Per seed, simCalls' 4 Broadcasts of 1023 to 4098 int32 (of 10)
			// and all 12 of sameRootCalls landed.
			assert.Equal(t, uint32((4+12)*seeds), bes[0].ce.lands)
		})
	}
}

// Without each ordering the landing adds, some interleaving goes wrong:
// the side stream's wait for the data flag (it moves bytes that have not
// landed), the ready handshake (the rest of a copy overwrites a buffer its
// owner still reads), the signal stream's wait for the root's copies (it
// raises data and done before the bytes are there), the join of the side
// stream, and the second half.
func TestCELandingSimulationCatchesMissingOrdering(t *testing.T) {
	landTune(t)
	flagOff := func(o fakeOp) uintptr { return (o.dst - wsBase) & 0xffffffff }
	cases := []struct {
		name     string
		drop     func(fakeOp) bool
		sigWaits bool // drop the signal stream's event waits
	}{
		{"data waits", func(o fakeOp) bool {
			return o.kind == "wait" && flagOff(o) >= ceFlagOff+ceSigDataOff && flagOff(o) < ceFlagOff+ceSigDoneOff
		}, false},
		{"ready handshake", func(o fakeOp) bool {
			return (o.kind == "wait" || o.kind == "write") && flagOff(o) >= ceFlagOff && flagOff(o) < ceFlagOff+ceDoneOff
		}, false},
		{"signal stream's waits for the copies", nil, true},
		{"join of the side stream", func(o fakeOp) bool { return o.kind == "waitEvent" && o.stream == userStream }, false},
		{"second half", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bes, drvs, recv, sig := landRig(t, 2)
			calls, seeds := simCalls(2), uint64(20)
			if tc.sigWaits {
				tc.drop = func(o fakeOp) bool { return o.kind == "waitEvent" && o.stream == sig }
			} else if tc.drop == nil {
				// One half: a root's next Broadcast lands while the owner's
				// side stream still moves the last, which takes that stream
				// lagging for several steps: fewer interleavings show it.
				for _, be := range bes {
					be.ce.halves = 1
				}
				calls, seeds = sameRootCalls(2), 200
			}
			mustExpose(t, tc.name, seeds, func(seed uint64) []string {
				return runSim(t, bes, drvs, recv, calls, seed, tc.drop)
			})
		})
	}
}

// A Broadcast root's flags go out from its signal stream, which nothing
// joins, so no other stream may write their slots: a late write there
// would overwrite a newer value (celand.go). Every write into the slots,
// over landed and plain Broadcasts and AllGathers, comes from the signal
// stream.
func TestCESigFlagsHaveOneWriterStream(t *testing.T) {
	landTune(t)
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			bes, drvs, recv, sig := landRig(t, n)
			writers := map[cuda.Stream]int{}
			record := func(o fakeOp) bool {
				off := (o.dst - wsBase) & 0xffffffff
				if (o.kind == "write" || strings.HasPrefix(o.kind, "memset")) && off >= ceFlagOff+ceSigDataOff && off < ceFlagOff+ceFreeOff {
					writers[o.stream]++
				}
				return false
			}
			calls := append(simCalls(n), sameRootCalls(n)...)
			require.Empty(t, runSim(t, bes, drvs, recv, calls, 1, record))
			assert.Len(t, writers, 1, "streams writing the signal stream's slots: %v", writers)
			assert.Positive(t, writers[sig], "the signal stream raised the flags")
		})
	}
}

// The landed Broadcast op by op: the first bytes of the root's copy to
// every peer go into the peer's landing slot, the rest into its buffer
// after ready, all on the user's stream, each part's flag raised behind it
// from the signal stream; a non-root's side stream moves what landed;
// consecutive calls alternate the halves, and an AllGather keeps the plain
// handshake.
func TestCELandingEnqueuesCopiesAndFlags(t *testing.T) {
	t.Setenv(EnvTune, "celand=64K,ce.broadcast=1M,ce.all_gather=1M")
	const n, count = 3, 1 << 18 // float32: 1 MiB per rank
	const bytes, land = uint64(count * 4), uint64(64 << 10)
	for _, root := range []int{0, 2} {
		for _, inPlace := range []bool{false, true} {
			t.Run(fmt.Sprintf("root %d inplace=%v", root, inPlace), func(t *testing.T) {
				bes, drvs, _ := newFakeBackends(t, n, Config{})
				recv, _ := allocAll(t, bes, bytes*n+64)
				for call := uint32(1); call <= 3; call++ {
					h, rec := (call-1)%2, uint64(call) // rec: each event's records so far
					for me, be := range bes {
						send := rankAddr(sendBase, me)
						if inPlace {
							send = recv[me]
						}
						drvs[me].ops = nil
						require.NoError(t, be.Run(context.Background(), &collectives.Args{Coll: collectives.Broadcast, Send: send, Recv: recv[me],
							Count: count, Type: collectives.Float32, Root: root, Stream: uintptr(userStream)}))
						fork := []fakeOp{
							{kind: "record", stream: userStream, event: be.ce.fork, rec: rec},
							{kind: "waitEvent", stream: be.ce.side, event: be.ce.fork, rec: rec},
						}
						joinSide := []fakeOp{
							{kind: "record", stream: be.ce.side, event: be.ce.join, rec: rec},
							{kind: "waitEvent", stream: userStream, event: be.ce.join, rec: rec},
						}
						var want []fakeOp
						if me != root {
							want = append(want, fakeOp{kind: "write", stream: userStream, dst: readyFlag(root, me), val: call})
							want = append(want, fork...)
							want = append(want,
								fakeOp{kind: "wait", stream: be.ce.side, dst: sigDataFlag(me, root), val: call, geq: true},
								fakeOp{kind: "copy", stream: be.ce.side, dst: recv[me], src: be.landAt(me, root, h), n: land},
								fakeOp{kind: "wait", stream: userStream, dst: sigDoneFlag(me, root), val: call, geq: true})
							want = append(want, joinSide...)
						} else {
							peers := rotated(me, n)
							for _, p := range peers {
								want = append(want, fakeOp{kind: "copy", stream: userStream, dst: be.landAt(p, me, h), src: send, n: land})
							}
							want = append(want, signalOps(be, peers, func(p int) uintptr { return sigDataFlag(p, me) }, call, 2*rec-1)...)
							for _, p := range peers {
								want = append(want, fakeOp{kind: "wait", stream: userStream, dst: readyFlag(me, p), val: call, geq: true})
							}
							if !inPlace {
								want = append(want, forkOps(be, recv[me], send, bytes, rec)...)
							}
							for _, p := range peers {
								want = append(want, fakeOp{kind: "copy", stream: userStream,
									dst: rankAddr(regBase0, p) + uintptr(land), src: send + uintptr(land), n: bytes - land})
							}
							want = append(want, signalOps(be, peers, func(p int) uintptr { return sigDoneFlag(p, me) }, call, 2*rec)...)
							if !inPlace {
								want = append(want, joinOp(be, rec))
							}
						}
						assert.Equal(t, want, drvs[me].opsOf(), "rank %d call %d", me, call)
						assert.Empty(t, drvs[me].launches, "no kernel")
					}
				}
				// An AllGather of the same size copies straight into the
				// peers' buffers after ready.
				for me, be := range bes {
					drvs[me].ops = nil
					require.NoError(t, be.Run(context.Background(), &collectives.Args{Coll: collectives.AllGather, Send: recv[me] + uintptr(me)*uintptr(bytes)/n,
						Recv: recv[me], Count: count / n, Type: collectives.Float32, Stream: uintptr(userStream)}))
					assert.Empty(t, drvs[me].opsOf("waitEvent"), "rank %d: no fork", me)
				}
				assert.Equal(t, uint32(3), bes[0].ce.lands)
			})
		}
	}
}

// The landing area's slots: one per source and half in every owner,
// disjoint, inside the workspace, past the LL lines.
func TestCELandingLayout(t *testing.T) {
	t.Setenv(EnvTune, "celand=1M")
	for _, n := range []int{2, 3, 8} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			bes, _, _ := newFakeBackends(t, n, Config{})
			be := bes[0]
			ws := be.workspace
			require.Equal(t, uint64(signalSize)+2*uint64(n)*uint64(be.tune.grid)*uint64(be.tune.slot)+llBytes(n)+landBytes(n, 1<<20)+eagerBytes(n), ws.Size)
			for owner := range n {
				seen := map[uintptr]bool{}
				lo := ws.Peers[owner] + uintptr(ws.Size-landBytes(n, 1<<20)-eagerBytes(n))
				for src := range n {
					if src == owner {
						continue
					}
					for h := range uint32(2) {
						at := be.landAt(owner, src, h)
						assert.False(t, seen[at], "owner %d src %d half %d shares a slot", owner, src, h)
						seen[at] = true
						assert.GreaterOrEqual(t, at, lo)
						assert.LessOrEqual(t, at+1<<20, ws.Peers[owner]+uintptr(ws.Size-eagerBytes(n)))
					}
				}
				assert.Len(t, seen, 2*(n-1))
			}
		})
	}
}

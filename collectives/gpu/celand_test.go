package gpu

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// landTune puts Broadcast and AllGather on the copy engines at every size
// and their landing area at 64 bytes, so that the simulation's calls of
// 32 int32 or more per rank go through it and the smaller ones do not.
func landTune(t *testing.T) {
	t.Setenv(EnvTune, "celand=64,ce.broadcast=0,ce.all_gather=0")
}

func TestCELandingSimulated(t *testing.T) {
	landTune(t)
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			bes, drvs, _ := newFakeBackends(t, n, Config{Algo: "ce"})
			recv, _ := allocAll(t, bes, uint64(n*(4096+3)*4+simGuard))
			const seeds = 20
			for seed := range uint64(seeds) {
				bad := runSim(t, bes, drvs, recv, simCalls(n), seed, nil)
				require.Empty(t, bad, "seed %d", seed)
			}
			// Per run, the 8 calls of 1023 to 4098 int32 (of 20) landed.
			assert.Equal(t, uint32(8*seeds), bes[0].ce.lands)
		})
	}
}

// Without each ordering the landing adds, some interleaving goes wrong:
// the side stream's wait for the data flag (it moves bytes that have not
// landed), the ready handshake (the rest of a copy overwrites a buffer its
// owner still reads), the join of the side stream, and the second half.
func TestCELandingSimulationCatchesMissingOrdering(t *testing.T) {
	landTune(t)
	flagOff := func(o fakeOp) uintptr { return (o.dst - wsBase) & 0xffffffff }
	cases := []struct {
		name string
		drop func(fakeOp) bool
	}{
		{"data waits", func(o fakeOp) bool {
			return o.kind == "wait" && flagOff(o) >= ceFlagOff+ceDataOff && flagOff(o) < ceFlagOff+ceLandedOff
		}},
		{"ready handshake", func(o fakeOp) bool {
			return (o.kind == "wait" || o.kind == "write") && flagOff(o) >= ceFlagOff && flagOff(o) < ceFlagOff+ceDoneOff
		}},
		{"join of the side stream", func(o fakeOp) bool { return o.kind == "waitEvent" && o.stream == userStream }},
		{"second half", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bes, drvs, _ := newFakeBackends(t, 2, Config{Algo: "ce"})
			recv, _ := allocAll(t, bes, uint64(2*(4096+3)*4+simGuard))
			seeds := uint64(20)
			if tc.drop == nil {
				// Consecutive calls in one half: a peer's next call lands
				// while this rank's side stream still moves the last. That
				// takes the side stream lagging for a dozen steps, which
				// few interleavings do.
				for _, be := range bes {
					be.ce.halves = 1
				}
				seeds = 400
			}
			mustExpose(t, tc.name, seeds, func(seed uint64) []string {
				return runSim(t, bes, drvs, recv, simCalls(2), seed, tc.drop)
			})
		})
	}
}

// The landed protocol op by op: the first bytes of every copy go into
// the peer's landing slot on the push stream, the rest into its buffer
// after ready on the user's stream, the side stream moves what landed
// here; consecutive calls alternate the halves.
func TestCELandingEnqueuesCopiesAndFlags(t *testing.T) {
	t.Setenv(EnvTune, "celand=64K,ce.broadcast=1M,ce.all_gather=1M")
	const n, count = 3, 1 << 18 // float32: 1 MiB per rank
	const bytes, land = uint64(count * 4), uint64(64 << 10)
	for _, coll := range []collectives.Collective{collectives.AllGather, collectives.Broadcast} {
		for _, inPlace := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s inplace=%v", coll, inPlace), func(t *testing.T) {
				bes, drvs, _ := newFakeBackends(t, n, Config{})
				recv, _ := allocAll(t, bes, bytes*n+64)
				const root = 1
				for call := uint32(1); call <= 3; call++ {
					h := (call - 1) % 2
					rec := uint64(call) // each event's records so far
					for me, be := range bes {
						slot := uintptr(0)
						if coll == collectives.AllGather {
							slot = uintptr(me) * uintptr(bytes)
						}
						send := rankAddr(sendBase, me)
						if inPlace {
							send = recv[me] + slot
						}
						drvs[me].ops = nil
						require.NoError(t, be.Run(context.Background(), &collectives.Args{Coll: coll, Send: send, Recv: recv[me],
							Count: count, Type: collectives.Float32, Root: root, Stream: uintptr(userStream)}))
						local := !inPlace && (coll == collectives.AllGather || me == root)
						pushes := coll == collectives.AllGather || me == root
						var want []fakeOp
						want = append(want, fakeOp{kind: "record", stream: userStream, event: be.ce.fork, rec: rec})
						if coll == collectives.Broadcast && me != root {
							want = append([]fakeOp{{kind: "write", stream: userStream, dst: readyFlag(root, me), val: call}}, want...)
						}
						want = append(want, fakeOp{kind: "waitEvent", stream: be.ce.side, event: be.ce.fork, rec: rec})
						if pushes {
							want = append(want, fakeOp{kind: "waitEvent", stream: be.ce.red[redPush], event: be.ce.fork, rec: rec})
							for _, p := range rotated(me, n) {
								want = append(want, fakeOp{kind: "copy", stream: be.ce.red[redPush], dst: be.landAt(p, me, h), src: send, n: land})
							}
							for _, p := range rotated(me, n) {
								want = append(want, fakeOp{kind: "write", stream: be.ce.red[redPush], dst: dataFlag(p, me), val: call})
							}
						}
						if local {
							want = append(want, fakeOp{kind: "copy", stream: be.ce.side, dst: recv[me] + slot, src: send, n: bytes})
						}
						senders := rotated(me, n)
						if coll == collectives.Broadcast {
							senders = nil
							if me != root {
								senders = []int{root}
							}
						}
						for _, p := range senders {
							dst := recv[me]
							if coll == collectives.AllGather {
								dst += uintptr(p) * uintptr(bytes)
							}
							want = append(want,
								fakeOp{kind: "wait", stream: be.ce.side, dst: dataFlag(me, p), val: call, geq: true},
								fakeOp{kind: "copy", stream: be.ce.side, dst: dst, src: be.landAt(me, p, h), n: land})
						}
						if coll == collectives.AllGather {
							for _, p := range rotated(me, n) {
								want = append(want, fakeOp{kind: "write", stream: userStream, dst: readyFlag(p, me), val: call})
							}
						}
						if pushes {
							for _, p := range rotated(me, n) {
								want = append(want, fakeOp{kind: "wait", stream: userStream, dst: readyFlag(me, p), val: call, geq: true})
							}
							for _, p := range rotated(me, n) {
								want = append(want, fakeOp{kind: "copy", stream: userStream,
									dst: rankAddr(regBase0, p) + slot + uintptr(land), src: send + uintptr(land), n: bytes - land})
							}
							want = append(want,
								fakeOp{kind: "record", stream: be.ce.red[redPush], event: be.ce.redJoin[redPush], rec: rec},
								fakeOp{kind: "waitEvent", stream: userStream, event: be.ce.redJoin[redPush], rec: rec})
							for _, p := range rotated(me, n) {
								want = append(want, fakeOp{kind: "write", stream: userStream, dst: doneFlag(p, me), val: call})
							}
						}
						switch {
						case coll == collectives.AllGather:
							for _, p := range rotated(me, n) {
								want = append(want, fakeOp{kind: "wait", stream: userStream, dst: doneFlag(me, p), val: call, geq: true})
							}
						case me != root:
							want = append(want, fakeOp{kind: "wait", stream: userStream, dst: doneFlag(me, root), val: call, geq: true})
						}
						want = append(want,
							fakeOp{kind: "record", stream: be.ce.side, event: be.ce.join, rec: rec},
							fakeOp{kind: "waitEvent", stream: userStream, event: be.ce.join, rec: rec})
						assert.Equal(t, want, drvs[me].opsOf(), "rank %d call %d", me, call)
						assert.Empty(t, drvs[me].launches, "no kernel")
					}
				}
			})
		}
	}
}

func dataFlag(owner, slot int) uintptr {
	return rankAddr(wsBase, owner) + ceFlagOff + ceDataOff + 4*uintptr(slot)
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
			require.Equal(t, uint64(signalSize)+2*uint64(n)*maxBlocks*uint64(be.tune.slot)+llBytes(n)+landBytes(n, 1<<20), ws.Size)
			for owner := range n {
				seen := map[uintptr]bool{}
				lo := ws.Peers[owner] + uintptr(ws.Size-landBytes(n, 1<<20))
				for src := range n {
					if src == owner {
						continue
					}
					for h := range uint32(2) {
						at := be.landAt(owner, src, h)
						assert.False(t, seen[at], "owner %d src %d half %d shares a slot", owner, src, h)
						seen[at] = true
						assert.GreaterOrEqual(t, at, lo)
						assert.LessOrEqual(t, at+1<<20, ws.Peers[owner]+uintptr(ws.Size))
					}
				}
				assert.Len(t, seen, 2*(n-1))
			}
		})
	}
}

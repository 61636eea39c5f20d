package gpu

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// simP2PBase is where the model keeps the kernels' rendezvous words, away
// from every address the fake backends hand out.
const simP2PBase = uintptr(0x7e00) << 32

// p2pReachedAt is the model's word saying how many kernel ops of lane
// (laneSend or laneRecv) from sender to receiver have started.
func p2pReachedAt(sender, receiver, lane int) uintptr {
	return simP2PBase + uintptr((sender*maxRanks+receiver)*2+lane)*4
}

// p2pKernelModel turns rank r's goccl_p2p launch into steps of the stream
// model (simulate): every Send and Recv with another rank is taken for a
// rendezvous (as above the eager limit), and all of a launch's ops are in
// flight at once, so the launch first says how many ops of each lane it
// has reached (reached counts them across launches) and then waits for
// each peer to have reached as many of the matching lane. No data moves:
// the model is for the order of the streams, the kernels' data has tests
// of its own.
func p2pKernelModel(o fakeOp, r int, reached map[[3]int]uint32) []fakeOp {
	q := o.data
	var says, waits []fakeOp
	for i := range int(u32at(q, offP2PNLanes)) {
		at := offP2PLanes + 8*i
		cnt := uint32(q[at+2]) | uint32(q[at+3])<<8
		peer, lane := int(q[at+4]), int(q[at+5])
		if peer == r || (lane != laneSend && lane != laneRecv) {
			continue
		}
		key := [3]int{r, peer, lane}
		reached[key] += cnt
		n := reached[key]
		if lane == laneSend {
			says = append(says, fakeOp{kind: "write", stream: o.stream, dst: p2pReachedAt(r, peer, laneSend), val: n})
			waits = append(waits, fakeOp{kind: "wait", stream: o.stream, dst: p2pReachedAt(r, peer, laneRecv), val: n, geq: true})
		} else {
			says = append(says, fakeOp{kind: "write", stream: o.stream, dst: p2pReachedAt(peer, r, laneRecv), val: n})
			waits = append(waits, fakeOp{kind: "wait", stream: o.stream, dst: p2pReachedAt(peer, r, laneSend), val: n, geq: true})
		}
	}
	return append(says, waits...)
}

// Copy-engine ops and kernel ops in one group, paired on the peer with
// ops it splits over two groups (a valid program: per pair and direction
// the order is the same): the copy-engine waits must not hold up the
// kernel ops, or the two ranks' streams wait for each other for ever.
func TestP2PCEMixedGroupsDoNotDeadlock(t *testing.T) {
	pceAt1MiB(t)
	const n, size = 2, 1 << 20 // int8: at the threshold, past the eager limit
	cases := []struct {
		name string
		// groups[r]: rank r's groups, in order; ce marks the op on
		// registered memory (the copy engines), the other is the kernel's
		// (unregistered).
		groups [n][][]struct {
			send bool
			ce   bool
		}
	}{
		{"a copy-engine Send before a kernel Recv", [n][][]struct{ send, ce bool }{
			{{{true, false}}, {{false, true}}}, // rank 0: Send X (kernel); then Recv Y (copy engines)
			{{{true, true}, {false, false}}},   // rank 1: Send Y and Recv X in one group
		}},
		{"a copy-engine Recv before a kernel Send", [n][][]struct{ send, ce bool }{
			{{{false, false}}, {{true, true}}}, // rank 0: Recv X (kernel); then Send Y (copy engines)
			{{{false, true}, {true, false}}},   // rank 1: Recv Y and Send X in one group
		}},
	}
	for _, tc := range cases {
		for seed := range uint64(4) {
			t.Run(fmt.Sprintf("%s seed %d", tc.name, seed), func(t *testing.T) {
				bes, drvs, _ := newFakeBackends(t, n, Config{})
				allocAll(t, bes, n*size+simGuard)
				forgetOps(drvs)
				// Y: the copy-engine data, from the sender's own slot into
				// its slot on the receiver.
				in := make([]byte, size)
				rng := rand.New(rand.NewPCG(seed, 3))
				for i := range in {
					in[i] = byte(rng.UintN(256))
				}
				got := make([]byte, size)
				for r, be := range bes {
					p := 1 - r
					for _, ops := range tc.groups[r] {
						var g collectives.Group
						for _, op := range ops {
							buf := rankAddr(sendBase, r) // unregistered: the kernel
							if op.ce {
								buf = slotOf(regBase0, r, r, size)
								if !op.send {
									buf = slotOf(regBase0, r, p, size)
								}
							}
							if op.send {
								g.P2P = append(g.P2P, send(p, buf, size, collectives.Int8))
								if op.ce {
									require.NoError(t, drvs[r].MemcpyHtoDAsync(be.ctx, cuda.DevicePtr(buf), ptrOf(in), size, userStream))
								}
							} else {
								g.P2P = append(g.P2P, recv(p, buf, size, collectives.Int8))
							}
						}
						require.NoError(t, be.RunGroup(context.Background(), &g), "rank %d", r)
						for _, op := range ops {
							if op.ce && !op.send {
								require.NoError(t, drvs[r].MemcpyDtoHAsync(be.ctx, ptrOf(got), cuda.DevicePtr(slotOf(regBase0, r, p, size)), size, userStream))
							}
						}
					}
				}
				require.NoError(t, simulate(newSimMem(), drvs, rand.New(rand.NewPCG(seed, 9))))
				require.True(t, bytes.Equal(in, got), "the copy-engine Recv got the Send's bytes")
			})
		}
	}
}

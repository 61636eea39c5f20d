package gpu

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// TestP2PCEStamps: with the recorder on, a group of Sends and Recvs on the
// copy engines is timed by stamps on the user's stream around its
// copy-engine ops: the start before the first, the end after the last
// (in a group with kernel ops too, after the launch and the copy-engine
// ops' join and waits, the launch storing neither). With the recorder off
// nothing is asked.
func TestP2PCEStamps(t *testing.T) {
	const n, slots, seq = 2, 8, 13
	const big, small = 1 << 20, 1<<20 - 1 // int8: at and below the threshold
	cases := []struct {
		name   string
		mixed  bool // a Send and a Recv below the threshold stay on the kernel
		launch bool
	}{
		{"all on the copy engines", false, false},
		{"mixed with the kernel", true, true},
	}
	for _, tc := range cases {
		for _, rec := range []int{slots, 0} {
			t.Run(fmt.Sprintf("%s recorder=%d", tc.name, rec), func(t *testing.T) {
				pceAt1MiB(t)
				calls := hookStamps(t)
				bes, drvs, _ := newFakeBackends(t, n, Config{Stamps: rec})
				allocAll(t, bes, 4*big)
				forgetOps(drvs)
				for me, be := range bes {
					p := 1 - me
					g := &collectives.Group{Seq: seq, P2P: []collectives.P2P{
						send(p, slotOf(regBase0, me, 0, big), big, collectives.Int8),
						recv(p, slotOf(regBase0, me, 0, big), big, collectives.Int8),
					}}
					if tc.mixed {
						g.P2P = append(g.P2P,
							send(p, slotOf(regBase0, me, 1, big), small, collectives.Int8),
							recv(p, slotOf(regBase0, me, 1, big), small, collectives.Int8))
					}
					drvs[me].launches = nil
					require.NoError(t, be.RunGroup(context.Background(), g))
					ops := drvs[me].opsOf()
					require.NotEmpty(t, ops)
					if tc.launch {
						require.Len(t, drvs[me].launches, 1, "rank %d", me)
						flags := u64at(drvs[me].launches[0].params, offP2PStamp)
						assert.Equal(t, uint64(p2pStampClaim), flags&(p2pStampClaim|p2pStampStart|p2pStampEnd),
							"rank %d: the launch claims the stamp, storing neither time", me)
					} else {
						require.Empty(t, drvs[me].launches, "rank %d: no kernel", me)
					}
					stamps := drvs[me].opsOf("stamp")
					if rec == 0 {
						assert.Empty(t, stamps, "rank %d: the recorder off", me)
						continue
					}
					slot := uintptr(be.stamps.dev) + uintptr(seq%slots)*stampBytes
					start := fakeOp{kind: "stamp", stream: userStream, dst: slot, val: ceStampStart, rec: seq}
					assert.Equal(t, start, ops[0], "rank %d: the start before the first copy-engine op", me)
					end := fakeOp{kind: "stamp", stream: userStream, dst: slot, val: ceStampEnd, rec: seq}
					assert.Equal(t, end, ops[len(ops)-1], "rank %d: the end after the last", me)
					assert.Equal(t, []fakeOp{start, end}, stamps, "rank %d", me)
				}
				if rec == 0 {
					assert.Zero(t, *calls)
				}
			})
		}
	}
}

// A group whose collective's kernel stores the start gets no copy-engine
// start stamp; with every Send and Recv on the copy engines the end comes
// after them, in the slot of the group's last collective.
func TestP2PCEStampsAfterACollective(t *testing.T) {
	pceAt1MiB(t)
	hookStamps(t)
	const n, slots, seq = 2, 8, 5
	const big = 1 << 20
	bes, drvs, _ := newFakeBackends(t, n, Config{Stamps: slots})
	allocAll(t, bes, 4*big)
	forgetOps(drvs)
	for me, be := range bes {
		p := 1 - me
		g := &collectives.Group{Seq: seq,
			Colls: []collectives.Args{{Coll: collectives.AllReduce, Send: rankAddr(sendBase, me), Recv: rankAddr(sendBase, me) + 4096,
				Count: 16, Type: collectives.Float32, Op: collectives.Sum, Stream: uintptr(userStream), Seq: seq}},
			P2P: []collectives.P2P{
				send(p, slotOf(regBase0, me, 0, big), big, collectives.Int8),
				recv(p, slotOf(regBase0, me, 0, big), big, collectives.Int8),
			}}
		drvs[me].launches = nil
		require.NoError(t, be.RunGroup(context.Background(), g))
		require.Len(t, drvs[me].launches, 1, "rank %d: the collective's kernel alone", me)
		slot := uintptr(be.stamps.dev) + uintptr(seq%slots)*stampBytes
		assert.Equal(t, []fakeOp{{kind: "stamp", stream: userStream, dst: slot, val: ceStampEnd, rec: seq}}, drvs[me].opsOf("stamp"), "rank %d", me)
		ops := drvs[me].opsOf()
		assert.Equal(t, "stamp", ops[len(ops)-1].kind, "rank %d: the end last", me)
	}
}

package gpu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// The copy-engine point-to-point area, written out from its documented
// layout (signal area + 36.25 KiB, right after the copy-engine flags and
// counters: ready[8], then done[8] 128 bytes further), independent of the
// backend's constants.
func pceReady(owner, slot int) uintptr { return rankAddr(wsBase, owner) + 0x9100 + 4*uintptr(slot) }
func pceDone(owner, slot int) uintptr {
	return rankAddr(wsBase, owner) + 0x9100 + 128 + 4*uintptr(slot)
}

func TestP2PCELayout(t *testing.T) {
	assert.Equal(t, 0x9100, pceOff)
	assert.LessOrEqual(t, pceOff+pceBytes, p2pOffset, "below the kernels' p2p records")
}

// pceAt1MiB opts in from 1 MiB.
func pceAt1MiB(t *testing.T) { t.Setenv(EnvTune, "p2pce=1M") }

// slotOf is rank r's slot i of bytes in its copy of the registration at
// base: the symmetric layout, where a Send from slot i meets a Recv into
// slot i.
func slotOf(base uintptr, r, i int, bytes uint64) uintptr {
	return rankAddr(base, r) + uintptr(i)*uintptr(bytes)
}

func send(peer int, buf uintptr, count int, dt collectives.DataType) collectives.P2P {
	return collectives.P2P{Kind: collectives.SendOp, Peer: peer, Buf: buf, Count: count, Type: dt, Stream: uintptr(userStream)}
}

func recv(peer int, buf uintptr, count int, dt collectives.DataType) collectives.P2P {
	return collectives.P2P{Kind: collectives.RecvOp, Peer: peer, Buf: buf, Count: count, Type: dt, Stream: uintptr(userStream)}
}

// sendOps is one copy-engine Send's ops on s.
func sendOps(s cuda.Stream, me, p int, dst, src uintptr, n uint64, k uint32) []fakeOp {
	return []fakeOp{
		{kind: "wait", stream: s, dst: pceReady(me, p), val: k, geq: true},
		{kind: "copy", stream: s, dst: dst, src: src, n: n},
		{kind: "write", stream: s, dst: pceDone(p, me), val: k},
	}
}

func TestP2PCERingEnqueuesFlagsAndCopies(t *testing.T) {
	pceAt1MiB(t)
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			bes, drvs, _ := newFakeBackends(t, n, Config{})
			const count = 1 << 18 // float32: 1 MiB, the threshold
			bytes := uint64(count * 4)
			allocAll(t, bes, uint64(n)*bytes)
			for call := uint32(1); call <= 2; call++ {
				forgetOps(drvs)
				for me, be := range bes {
					next, prev := (me+1)%n, (me+n-1)%n
					g := &collectives.Group{P2P: []collectives.P2P{
						recv(prev, slotOf(regBase0, me, prev, bytes), count, collectives.Float32),
						send(next, slotOf(regBase0, me, me, bytes), count, collectives.Float32),
					}}
					drvs[me].launches = nil
					require.NoError(t, be.RunGroup(context.Background(), g))
					want := []fakeOp{{kind: "write", stream: userStream, dst: pceReady(prev, me), val: call}}
					want = append(want, sendOps(userStream, me, next, slotOf(regBase0, next, me, bytes), slotOf(regBase0, me, me, bytes), bytes, call)...)
					want = append(want, fakeOp{kind: "wait", stream: userStream, dst: pceDone(me, prev), val: call, geq: true})
					assert.Equal(t, want, drvs[me].opsOf(), "rank %d call %d", me, call)
					assert.Empty(t, drvs[me].launches, "no kernel")
					assert.Equal(t, collectives.CopyEngine, be.LastPath().Algo)
				}
			}
		})
	}
}

func TestP2PCEAllPairsForksPeersOntoSideStreams(t *testing.T) {
	pceAt1MiB(t)
	const n, count = 3, 1<<20 + 5 // int8
	bes, drvs, _ := newFakeBackends(t, n, Config{})
	bytes := uint64(count)
	allocAll(t, bes, n*bytes)
	forgetOps(drvs)
	for me, be := range bes {
		var g collectives.Group
		// Sends first in the group: the readies still go first.
		for _, p := range rotated(me, n) {
			g.P2P = append(g.P2P, send(p, slotOf(regBase0, me, me, bytes), count, collectives.Int8))
		}
		for _, p := range rotated(me, n) {
			g.P2P = append(g.P2P, recv(p, slotOf(regBase0, me, p, bytes), count, collectives.Int8))
		}
		require.NoError(t, be.RunGroup(context.Background(), &g))
		pc := &be.ce.p2p
		a, b := (me+1)%n, (me+2)%n
		src := slotOf(regBase0, me, me, bytes)
		want := []fakeOp{
			{kind: "write", stream: userStream, dst: pceReady(a, me), val: 1},
			{kind: "write", stream: userStream, dst: pceReady(b, me), val: 1},
			{kind: "record", stream: userStream, event: pc.fork, rec: 1},
		}
		want = append(want, sendOps(userStream, me, a, slotOf(regBase0, a, me, bytes), src, bytes, 1)...)
		want = append(want, fakeOp{kind: "waitEvent", stream: pc.side[b], event: pc.fork, rec: 1})
		want = append(want, sendOps(pc.side[b], me, b, slotOf(regBase0, b, me, bytes), src, bytes, 1)...)
		want = append(want,
			fakeOp{kind: "record", stream: pc.side[b], event: pc.joins[b], rec: 1},
			fakeOp{kind: "waitEvent", stream: userStream, event: pc.joins[b], rec: 1},
			fakeOp{kind: "wait", stream: userStream, dst: pceDone(me, a), val: 1, geq: true},
			fakeOp{kind: "wait", stream: userStream, dst: pceDone(me, b), val: 1, geq: true},
		)
		assert.Equal(t, want, drvs[me].opsOf(), "rank %d", me)
		assert.NotEqual(t, userStream, pc.side[b])
		assert.Empty(t, drvs[me].launches)
	}
}

// kernelLanes decodes a goccl_p2p launch's lanes: peer, kind and the ops'
// (src, dst, bytes).
func kernelLanes(t *testing.T, l fakeLaunch) map[[2]int][][3]uint64 {
	t.Helper()
	require.Equal(t, "goccl_p2p", l.name)
	q := l.params
	out := map[[2]int][][3]uint64{}
	for i := range int(u32at(q, offP2PNLanes)) {
		o := offP2PLanes + 8*i
		first, cnt := int(q[o])|int(q[o+1])<<8, int(q[o+2])|int(q[o+3])<<8
		key := [2]int{int(q[o+4]), int(q[o+5])}
		for k := range cnt {
			po := offP2POps + 24*(first+k)
			out[key] = append(out[key], [3]uint64{u64at(q, po), u64at(q, po+8), u64at(q, po+16)})
		}
	}
	return out
}

// A group mixing ops above and below the threshold, registered and not,
// and one to the rank itself: the copy-engine ops take their own numbers
// and go first; the kernel's lanes keep the others, in order.
func TestP2PCEMixKeepsTheKernelsOps(t *testing.T) {
	pceAt1MiB(t)
	const n = 2
	bes, drvs, _ := newFakeBackends(t, n, Config{})
	const big, small = 1 << 20, 1<<20 - 1 // int8
	allocAll(t, bes, 4*big)
	forgetOps(drvs)
	for me, be := range bes {
		p := 1 - me
		plain := rankAddr(sendBase, me)
		g := &collectives.Group{P2P: []collectives.P2P{
			send(p, slotOf(regBase0, me, 0, big), big, collectives.Int8),   // ce k=1
			send(p, slotOf(regBase0, me, 1, big), small, collectives.Int8), // kernel: below
			send(p, plain, big, collectives.Int8),                          // kernel: unregistered
			send(p, slotOf(regBase0, me, 2, big), big, collectives.Int8),   // ce k=2
			recv(p, slotOf(regBase0, me, 0, big), big, collectives.Int8),   // ce k=1
			recv(p, slotOf(regBase0, me, 1, big), small, collectives.Int8), // kernel
			recv(p, plain+big, big, collectives.Int8),                      // kernel
			recv(p, slotOf(regBase0, me, 2, big), big, collectives.Int8),   // ce k=2
			send(me, slotOf(regBase0, me, 3, big), big, collectives.Int8),  // self: kernel
			recv(me, plain+2*big, big, collectives.Int8),
		}}
		drvs[me].launches = nil
		require.NoError(t, be.RunGroup(context.Background(), g))
		// The readies, the copy-engine Sends on a side stream, the kernel
		// on the group's stream, then the join and the Recvs' wait: the
		// kernel's ops never queue behind a copy-engine wait.
		pc := &be.ce.p2p
		before := []fakeOp{
			{kind: "write", stream: userStream, dst: pceReady(p, me), val: 2},
			{kind: "record", stream: userStream, event: pc.fork, rec: 1},
			{kind: "waitEvent", stream: pc.side[p], event: pc.fork, rec: 1},
		}
		for i, k := range []uint32{1, 2} {
			at := 2 * i
			before = append(before, sendOps(pc.side[p], me, p, slotOf(regBase0, p, at, big), slotOf(regBase0, me, at, big), big, k)...)
		}
		after := []fakeOp{
			{kind: "record", stream: pc.side[p], event: pc.joins[p], rec: 1},
			{kind: "waitEvent", stream: userStream, event: pc.joins[p], rec: 1},
			{kind: "wait", stream: userStream, dst: pceDone(me, p), val: 2, geq: true},
		}
		ops := drvs[me].opsOf()
		require.Len(t, ops, len(before)+1+len(after), "rank %d: %v", me, ops)
		assert.Equal(t, before, ops[:len(before)], "rank %d: before the kernel", me)
		assert.Equal(t, "launch", ops[len(before)].kind, "rank %d: the kernel", me)
		assert.Equal(t, userStream, ops[len(before)].stream, "rank %d: the kernel on the group's stream", me)
		assert.Equal(t, after, ops[len(before)+1:], "rank %d: after the kernel", me)
		assert.NotEqual(t, userStream, pc.side[p])
		require.Len(t, drvs[me].launches, 1)
		lanes := kernelLanes(t, drvs[me].launches[0])
		assert.Len(t, lanes, 3)
		assert.Equal(t, [][3]uint64{{uint64(slotOf(regBase0, me, 1, big)), 0, small}, {uint64(plain), 0, big}}, lanes[[2]int{p, laneSend}])
		rv := lanes[[2]int{p, laneRecv}]
		require.Len(t, rv, 2)
		assert.Equal(t, []uint64{uint64(slotOf(regBase0, me, 1, big)), small}, []uint64{rv[0][1], rv[0][2]})
		assert.Equal(t, []uint64{uint64(plain + big), big}, []uint64{rv[1][1], rv[1][2]})
		assert.Equal(t, [][3]uint64{{uint64(slotOf(regBase0, me, 3, big)), uint64(plain + 2*big), big}}, lanes[[2]int{me, laneCopy}])
		assert.Equal(t, uint32(2), be.ce.p2p.sendK[p].Load())
		assert.Equal(t, uint32(2), be.ce.p2p.recvK[p].Load())
		assert.Equal(t, collectives.Algorithm(""), be.LastPath().Algo, "a mixed group reports no single path")
	}
}

// pceKind runs one group per rank and says which path its ops took on
// every rank alike: "ce" (copies and flags, no launch), "kernel", or
// "mixed" (some of each).
func pceKind(t *testing.T, bes []*Backend, drvs []*fakeDriver, group func(r int) collectives.Group) string {
	t.Helper()
	got := ""
	for r, be := range bes {
		drvs[r].ops, drvs[r].launches = nil, nil
		g := group(r)
		require.NoError(t, be.RunGroup(context.Background(), &g))
		var p string
		ce, launches := len(drvs[r].opsOf("copy", "write", "wait")) > 0, len(drvs[r].launches)
		switch {
		case ce && launches == 0:
			p = "ce"
		case !ce && launches == 1:
			p = "kernel"
		case ce && launches == 1:
			p = "mixed"
		default:
			t.Fatalf("rank %d: neither path: %d launches, %d stream ops", r, launches, len(drvs[r].opsOf()))
		}
		if r > 0 {
			require.Equal(t, got, p, "rank %d chose differently", r)
		}
		got = p
	}
	return got
}

func TestP2PCESelection(t *testing.T) {
	type tc struct {
		name      string
		tune      string
		count     int // int8 elements of the exchange
		short     uint64
		plain     bool // buffers unregistered
		capturing bool
		kind      collectives.GroupKind
		want      string
	}
	cases := []tc{
		{"at the threshold", "p2pce=1M", 1 << 20, 0, false, false, collectives.PlainGroup, "ce"},
		{"just below", "p2pce=1M", 1<<20 - 1, 0, false, false, collectives.PlainGroup, "kernel"},
		{"off by default", "", 64 << 20, 0, false, false, collectives.PlainGroup, "kernel"},
		{"turned off", "p2pce=0", 64 << 20, 0, false, false, collectives.PlainGroup, "kernel"},
		{"unregistered", "p2pce=1", 1 << 20, 0, true, false, collectives.PlainGroup, "kernel"},
		// Slot 1 runs past it: rank 1's Send to 0 and rank 0's Recv from 1
		// take the kernels alike, the other direction the copy engines.
		{"runs past the registration", "p2pce=1", 1 << 20, 1, false, false, collectives.PlainGroup, "mixed"},
		{"captured", "p2pce=1", 1 << 20, 0, false, true, collectives.PlainGroup, "kernel"},
		{"an AllToAll's group", "p2pce=1", 1 << 20, 0, false, false, collectives.AllToAllGroup, "kernel"},
		{"a Gather's group", "p2pce=1", 1 << 20, 0, false, false, collectives.GatherGroup, "kernel"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(EnvTune, c.tune+",ll.alltoall=0")
			bes, drvs, _ := newFakeBackends(t, 2, Config{})
			bytes := uint64(c.count)
			base := uintptr(0x3000_0000)
			if !c.plain {
				allocAll(t, bes, 2*bytes-c.short)
				base = regBase0
			}
			for r := range bes {
				drvs[r].capturing = map[cuda.Stream]bool{userStream: c.capturing}
			}
			got := pceKind(t, bes, drvs, func(r int) collectives.Group {
				p := 1 - r
				return collectives.Group{Kind: c.kind, P2P: []collectives.P2P{
					send(p, slotOf(base, r, r, bytes), c.count, collectives.Int8),
					recv(p, slotOf(base, r, p, bytes), c.count, collectives.Int8),
				}}
			})
			assert.Equal(t, c.want, got)
			if c.want == "kernel" {
				for r, be := range bes {
					assert.Zero(t, be.ce.p2p.sendK[1-r].Load()+be.ce.p2p.recvK[1-r].Load(), "rank %d: no number taken", r)
				}
			}
		})
	}
}

func TestP2PCETuneKey(t *testing.T) {
	tn := defaultTuning(2, 0)
	assert.Zero(t, tn.p2pCE, "off by default")
	require.NoError(t, tn.parse("p2pce=4M"))
	assert.Equal(t, int64(4<<20), tn.p2pCE)
	err := tn.parse("p2pce=-1")
	require.ErrorIs(t, err, collectives.ErrInvalidArgument)
}

func TestP2PCEAbortReleasesWaits(t *testing.T) {
	pceAt1MiB(t)
	bes, drvs, _ := newFakeBackends(t, 3, Config{})
	const bytes = 1 << 20
	allocAll(t, bes, 3*bytes)
	be, drv := bes[0], drvs[0]
	// Nothing issued: nothing to release.
	be.Abort(errors.New("early"))
	assert.Empty(t, drv.opsOf("memset32"))

	bes, drvs, _ = newFakeBackends(t, 3, Config{})
	allocAll(t, bes, 3*bytes)
	be, drv = bes[0], drvs[0]
	for range 3 { // 3 Sends to rank 1, 3 Recvs from rank 2
		require.NoError(t, be.RunGroup(context.Background(), &collectives.Group{P2P: []collectives.P2P{
			send(1, slotOf(regBase0, 0, 0, bytes), bytes, collectives.Int8),
			recv(2, slotOf(regBase0, 0, 2, bytes), bytes, collectives.Int8),
		}}))
	}
	drv.ops = nil
	cause := errors.New("rank 2 vanished")
	be.Abort(cause)
	assert.Equal(t, []fakeOp{
		{kind: "memset32", stream: be.ce.rescue, dst: pceReady(0, 1), val: 3 + 1<<30, n: 1},
		{kind: "memset32", stream: be.ce.rescue, dst: pceDone(0, 2), val: 3 + 1<<30, n: 1},
	}, drv.opsOf(), "this rank's waits on rank 1's readies and rank 2's dones released")
	drv.ops = nil
	err := be.RunGroup(context.Background(), &collectives.Group{P2P: []collectives.P2P{send(1, slotOf(regBase0, 0, 0, bytes), bytes, collectives.Int8)}})
	require.ErrorIs(t, err, collectives.ErrAborted)
	require.ErrorIs(t, err, cause)
	assert.Empty(t, drv.opsOf())
}

func TestP2PCEEnqueueFailureAborts(t *testing.T) {
	pceAt1MiB(t)
	for _, fail := range []string{"copy", "write", "wait", "record", "isCapturing"} {
		t.Run(fail, func(t *testing.T) {
			bes, drvs, _ := newFakeBackends(t, 3, Config{})
			const bytes = 1 << 20
			allocAll(t, bes, 3*bytes)
			forgetOps(drvs)
			drvs[0].failOn = fail
			var g collectives.Group
			for _, p := range []int{1, 2} {
				g.P2P = append(g.P2P, send(p, slotOf(regBase0, 0, 0, bytes), bytes, collectives.Int8))
			}
			err := bes[0].RunGroup(context.Background(), &g)
			require.ErrorIs(t, err, collectives.ErrAborted, "the peers may be waiting: the communicator must stop")
			require.ErrorIs(t, err, errFake)
			assert.Equal(t, uint32(1), atomic32(drvs[0]), "kernels see the abort flag")
		})
	}
}

// simP2PCE runs groups back to back on every rank with the model of the
// streams (sim_test.go): each call every rank poisons the slots it
// receives into, writes fresh input into its own slot, runs its group and
// reads the received slots back, on its stream with no host
// synchronization; then the random interleavings must move every byte.
// Groups are built by group(call, r, bytes) from the slots' addresses.
func simP2PCE(t *testing.T, n, calls int, size uint64, seed uint64, group func(call, r int) (g collectives.Group, from []int)) {
	t.Helper()
	bad := simP2PCEDrop(t, n, calls, size, seed, group, nil)
	require.Empty(t, bad, "slots received wrong")
}

// simP2PCEDrop is simP2PCE with the ops drop selects left out of the model;
// it returns the slots that came back wrong.
func simP2PCEDrop(t *testing.T, n, calls int, size uint64, seed uint64, group func(call, r int) (g collectives.Group, from []int), drop func(fakeOp) bool) []string {
	t.Helper()
	bes, drvs, _ := newFakeBackends(t, n, Config{})
	allocAll(t, bes, uint64(n)*size+simGuard)
	forgetOps(drvs)
	type back struct {
		call, from, r int
		got           []byte
	}
	var backs []back
	input := func(c, r int) []byte {
		b := make([]byte, size)
		rng := rand.New(rand.NewPCG(uint64(c), uint64(r)))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	}
	for c := range calls {
		for r, be := range bes {
			drv := drvs[r]
			g, from := group(c, r)
			for _, p := range from {
				require.NoError(t, drv.MemsetD8Async(be.ctx, cuda.DevicePtr(slotOf(regBase0, r, p, size)), byte(0xA0+c%16), size, userStream))
			}
			in := input(c, r)
			require.NoError(t, drv.MemcpyHtoDAsync(be.ctx, cuda.DevicePtr(slotOf(regBase0, r, r, size)), ptrOf(in), size, userStream))
			require.NoError(t, be.RunGroup(context.Background(), &g), "rank %d call %d", r, c)
			for _, p := range from {
				b := back{call: c, from: p, r: r, got: make([]byte, size)}
				require.NoError(t, drv.MemcpyDtoHAsync(be.ctx, ptrOf(b.got), cuda.DevicePtr(slotOf(regBase0, r, p, size)), size, userStream))
				backs = append(backs, b)
			}
		}
	}
	for _, d := range drvs {
		assert.Empty(t, d.launches, "every op on the copy engines")
	}
	if drop != nil {
		for _, d := range drvs {
			kept := d.ops[:0]
			for _, o := range d.ops {
				if !drop(o) {
					kept = append(kept, o)
				}
			}
			d.ops = kept
		}
	}
	require.NoError(t, simulate(newSimMem(), drvs, rand.New(rand.NewPCG(seed, 7))))
	var bad []string
	for _, b := range backs {
		if !bytes.Equal(input(b.call, b.from), b.got) {
			bad = append(bad, fmt.Sprintf("call %d: rank %d's slot from rank %d", b.call, b.r, b.from))
		}
	}
	return bad
}

// ringGroups: every rank sends its slot to the next and receives the
// previous rank's slot, the two ops in one order or the other by call.
func ringGroups(n int, size uint64) func(c, r int) (collectives.Group, []int) {
	return func(c, r int) (collectives.Group, []int) {
		next, prev := (r+1)%n, (r+n-1)%n
		ops := []collectives.P2P{
			send(next, slotOf(regBase0, r, r, size), int(size), collectives.Int8),
			recv(prev, slotOf(regBase0, r, prev, size), int(size), collectives.Int8),
		}
		if c%2 == 1 {
			ops[0], ops[1] = ops[1], ops[0]
		}
		return collectives.Group{P2P: ops}, []int{prev}
	}
}

func TestP2PCEModelMovesData(t *testing.T) {
	t.Setenv(EnvTune, "p2pce=64")
	const bytes = 4096 + 48
	ring := func(n int) func(c, r int) (collectives.Group, []int) { return ringGroups(n, bytes) }
	allPairs := func(n int) func(c, r int) (collectives.Group, []int) {
		return func(c, r int) (collectives.Group, []int) {
			var g collectives.Group
			from := rotated(r, n)
			for _, p := range from {
				g.P2P = append(g.P2P, recv(p, slotOf(regBase0, r, p, bytes), bytes/4, collectives.Float32))
			}
			for _, p := range rotated(r, n) {
				g.P2P = append(g.P2P, send(p, slotOf(regBase0, r, r, bytes), bytes/8, collectives.Float64))
			}
			return g, from
		}
	}
	for _, n := range []int{2, 3, 4} {
		for seed := range uint64(4) {
			t.Run(fmt.Sprintf("ring %d ranks seed %d", n, seed), func(t *testing.T) { simP2PCE(t, n, 4, bytes, seed, ring(n)) })
			t.Run(fmt.Sprintf("all pairs %d ranks seed %d", n, seed), func(t *testing.T) { simP2PCE(t, n, 3, bytes, seed, allPairs(n)) })
		}
	}
}

// Without the dones a receiver reads its slot before the bytes land, or
// poisons it after: dropping them must break the model (the check above
// can fail).
func TestP2PCEModelNeedsDones(t *testing.T) {
	t.Setenv(EnvTune, "p2pce=64")
	const n, size = 3, 4096
	dones := map[uintptr]bool{}
	for owner := range n {
		for slot := range n {
			dones[pceDone(owner, slot)] = true
		}
	}
	bad := 0
	for seed := range uint64(8) {
		bad += len(simP2PCEDrop(t, n, 4, size, seed, ringGroups(n, size), func(o fakeOp) bool {
			return o.kind == "wait" && dones[o.dst]
		}))
	}
	assert.NotZero(t, bad, "some interleaving reads a slot too early")
}

// Without the readies a Send may overwrite what the receiver still reads:
// dropping them must break the model.
func TestP2PCEModelNeedsReadies(t *testing.T) {
	t.Setenv(EnvTune, "p2pce=64")
	const n, bytes = 2, 4096
	bes, drvs, _ := newFakeBackends(t, n, Config{})
	allocAll(t, bes, n*bytes)
	forgetOps(drvs)
	for r, be := range bes {
		p := 1 - r
		require.NoError(t, be.RunGroup(context.Background(), &collectives.Group{P2P: []collectives.P2P{
			send(p, slotOf(regBase0, r, r, bytes), bytes, collectives.Int8),
			recv(p, slotOf(regBase0, r, p, bytes), bytes, collectives.Int8),
		}}))
	}
	// Rank 1 never writes its ready: rank 0's Send must wait forever.
	kept := drvs[1].ops[:0]
	for _, o := range drvs[1].ops {
		if !(o.kind == "write" && o.dst == pceReady(0, 1)) {
			kept = append(kept, o)
		}
	}
	drvs[1].ops = kept
	err := simulate(newSimMem(), drvs, rand.New(rand.NewPCG(1, 1)))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "deadlock")
}

func TestP2PCERunGroupAllocatesNothing(t *testing.T) {
	pceAt1MiB(t)
	const n, bytes = 4, 1 << 20
	bes, drvs, _ := newFakeBackends(t, n, Config{})
	allocAll(t, bes, n*bytes)
	for i := 0; i < 8; i++ { // registrations around the one used
		allocAll(t, bes, 4096)
	}
	be := bes[1]
	drvs[1].quiet = true
	drvs[1].capturing = map[cuda.Stream]bool{}
	g := &collectives.Group{}
	for _, p := range rotated(1, n) {
		g.P2P = append(g.P2P,
			send(p, slotOf(regBase0, 1, 1, bytes), bytes, collectives.Int8),
			recv(p, slotOf(regBase0, 1, p, bytes), bytes, collectives.Int8),
			send(p, rankAddr(sendBase, 1), 64, collectives.Float32), // kernels
			recv(p, rankAddr(sendBase, 1)+4096, 64, collectives.Float32))
	}
	ctx := context.Background()
	require.NoError(t, be.RunGroup(ctx, g))
	before := be.ce.p2p.sendK[2].Load()
	allocs := testing.AllocsPerRun(50, func() {
		if err := be.RunGroup(ctx, g); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
	assert.Equal(t, uint32(51), be.ce.p2p.sendK[2].Load()-before, "every run on the copy engines")
}

// Every rank sends every peer a run of ops alternating above and below the
// threshold, in one group whose order each rank shuffles (keeping each
// peer's and direction's own order, as NCCL's rule asks): the copy-engine
// ops in the model of the streams, the kernel's in the model of goccl_p2p
// (which pairs its lanes op by op and compares their bytes), and every
// receive buffer must hold its Send's bytes.
func TestP2PCEMixPairsLikeTheKernels(t *testing.T) {
	t.Setenv(EnvTune, "p2pce=64")
	const n, runs, slot = 3, 6, 512
	sizes := []int{128, 32, 256, 48, 64, 63} // CE, kernel, CE, kernel, CE (at the threshold), kernel
	for seed := range uint64(3) {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			bes, drvs, _ := newFakeBackends(t, n, Config{})
			allocAll(t, bes, n*n*runs*slot)
			forgetOps(drvs)
			mem := newSimMem()
			rng := rand.New(rand.NewPCG(seed, 11))
			at := func(r, src, dst, j int) uintptr { // symmetric: the same offset on every rank
				return rankAddr(regBase0, r) + uintptr(((src*n+dst)*runs+j)*slot)
			}
			type xfer struct {
				src, dst, j int
				from, to    uintptr
				data        []byte
			}
			var xs []xfer
			groups := make([][]collectives.P2P, n)
			for s := range n {
				for _, d := range rotated(s, n) {
					for j, b := range sizes {
						x := xfer{src: s, dst: d, j: j, data: make([]byte, b)}
						for i := range x.data {
							x.data[i] = byte(rng.Uint32())
						}
						if b >= 64 {
							x.from, x.to = at(s, s, d, j), at(d, s, d, j)
						} else {
							x.from, x.to = userBuf(s, 2*len(xs)), userBuf(d, 2*len(xs)+1)
						}
						mem.write(x.from, x.data)
						mem.write(x.to, bytes.Repeat([]byte{0xc3}, b+8))
						groups[s] = append(groups[s], send(d, x.from, b, collectives.Int8))
						groups[d] = append(groups[d], recv(s, x.to, b, collectives.Int8))
						xs = append(xs, x)
					}
				}
			}
			for r, be := range bes {
				ops := shuffleKeepingPairOrder(groups[r], rng)
				require.NoError(t, be.RunGroup(context.Background(), &collectives.Group{P2P: ops}), "rank %d", r)
			}
			for _, d := range drvs {
				kept := d.ops[:0]
				for _, o := range d.ops {
					if o.kind != "launch" {
						kept = append(kept, o)
					}
				}
				d.ops = kept
			}
			require.NoError(t, simulate(mem, drvs, rng))
			p2pModel(t, mem, drvs, bes[0].p2p.channels)
			for _, x := range xs {
				got := make([]byte, len(x.data)+8)
				mem.read(x.to, got)
				want := append(append([]byte(nil), x.data...), bytes.Repeat([]byte{0xc3}, 8)...)
				require.True(t, bytes.Equal(want, got), "op %d of %d->%d (%d bytes)", x.j, x.src, x.dst, len(x.data))
			}
			for r, be := range bes {
				for _, p := range rotated(r, n) {
					assert.Equal(t, uint32(3), be.ce.p2p.sendK[p].Load(), "rank %d to %d", r, p)
					assert.Equal(t, uint32(3), be.ce.p2p.recvK[p].Load(), "rank %d from %d", r, p)
				}
			}
		})
	}
}

// shuffleKeepingPairOrder shuffles ops, then puts each (peer, kind)'s ops
// back into the positions it got, in their first order.
func shuffleKeepingPairOrder(ops []collectives.P2P, rng *rand.Rand) []collectives.P2P {
	type key struct {
		peer int
		kind collectives.P2PKind
	}
	byKey := map[key][]collectives.P2P{}
	for _, o := range ops {
		k := key{o.Peer, o.Kind}
		byKey[k] = append(byKey[k], o)
	}
	out := append([]collectives.P2P(nil), ops...)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	for i, o := range out {
		k := key{o.Peer, o.Kind}
		out[i], byKey[k] = byKey[k][0], byKey[k][1:]
	}
	return out
}

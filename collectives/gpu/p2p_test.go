package gpu

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// The offsets and limits p2p.go writes are the ones kernels/p2p.cu asserts.
func TestP2PParamsMatchKernel(t *testing.T) {
	src, err := os.ReadFile("../../kernels/p2p.cu")
	require.NoError(t, err)
	for field, want := range map[string]int{"nlanes": offP2PNLanes, "channels": offP2PChannels, "lanes": offP2PLanes, "ops": offP2POps, "zcTable": offP2PZCTable} {
		m := regexp.MustCompile(`offsetof\(P2PParams, ` + field + `\) == (\d+),`).FindStringSubmatch(string(src))
		require.NotNil(t, m, "p2p.cu asserts P2PParams.%s", field)
		assert.Equal(t, strconv.Itoa(want), m[1], "P2PParams.%s", field)
	}
	m := regexp.MustCompile(`sizeof\(P2PParams\) == (\d+),`).FindStringSubmatch(string(src))
	require.NotNil(t, m)
	assert.Equal(t, strconv.Itoa(p2pParamSize), m[1])
	for name, want := range map[string]string{
		"int kP2PMaxOps": strconv.Itoa(p2pMaxOps), "int kP2PMaxLanes": strconv.Itoa(p2pMaxLanes),
		"int kP2PMaxChannels": strconv.Itoa(p2pMaxChannels), "u64 kP2POffset": "40 << 10",
		"u64 kP2PRecordBytes": strconv.Itoa(p2pRecordBytes),
		"u32 kZcSlots":        strconv.Itoa(zcSlots), "int kZcOffBits": strconv.Itoa(zcOffBits),
		"u64 kP2PStampClaim": strconv.Itoa(p2pStampClaim) + ", kP2PStampStart = " + strconv.Itoa(p2pStampStart) +
			", kP2PStampEnd = " + strconv.Itoa(p2pStampEnd),
		"u64 kP2PEagerOff":   strconv.Itoa(p2pEagerOff),
		"u32 kP2PEagerQ":     strconv.Itoa(p2pEagerQ),
		"u64 kP2PEagerEntry": strconv.Itoa(p2pEagerEntry),
		"u64 kP2PEagerData":  "256 << 10",
		"u64 kP2PMinChunk":   strconv.Itoa(p2pMinChunk),
		"int kRecEFreed":     "0, kRecEBad = 4, kRecEHead = 8, kRecPosted = 12",
		"int kRecRTag":       "48, kRecRPath = " + strconv.Itoa(p2pRecRPath) + ", kRecROff = 56",
		"P2PPath : u32 {":    "",
	} {
		if name == "P2PPath : u32 {" {
			m := regexp.MustCompile(`enum P2PPath : u32 \{ kPathStaging = (\d), kPathZc = (\d), kPathEager = (\d) \};`).FindStringSubmatch(string(src))
			require.NotNil(t, m, "p2p.cu's P2PPath")
			assert.Equal(t, []string{strconv.Itoa(p2pPathStaging), strconv.Itoa(p2pPathZC), strconv.Itoa(p2pPathEager)}, m[1:])
			continue
		}
		m := regexp.MustCompile(`constexpr ` + name + ` = ([^;]+);`).FindStringSubmatch(string(src))
		require.NotNil(t, m, name)
		assert.Equal(t, want, m[1], name)
	}
	assert.Equal(t, 40<<10, p2pOffset)
	assert.Equal(t, 256<<10, p2pEagerData)
	m = regexp.MustCompile(`kP2PEagerSrcBytes == (\d+),`).FindStringSubmatch(string(src))
	require.NotNil(t, m, "p2p.cu asserts the eager area's size")
	assert.Equal(t, strconv.Itoa(p2pEagerSrcBytes), m[1])
	m = regexp.MustCompile(`constexpr int kMbBytes = 0, kMbPath = 8, kMbAt = 12, kMbOps = 16;`).FindStringSubmatch(string(src))
	require.NotNil(t, m, "p2p.cu's mailbox entry")
	assert.LessOrEqual(t, p2pChannels, p2pMaxChannels)
	assert.LessOrEqual(t, 2*(maxRanks-1)+1, p2pMaxLanes, "every lane of 8 ranks fits one launch")
}

// The error record, its claim and the call numbers' slots are where the
// kernels put them.
func TestKernelErrorLayoutMatches(t *testing.T) {
	for _, tc := range []struct {
		file, decl, want string
	}{
		{"common.cuh", "u64 kErrOffset", strconv.Itoa(errOff)},
		{"common.cuh", "u64 kErrClaimOffset", "48 << 10"},
		{"common.cuh", "u64 kSeqOffset", "18 << 10"},
		{"ll.cu", "u64 kLLSeqOffset", "97 << 10"},
	} {
		src, err := os.ReadFile("../../kernels/" + tc.file)
		require.NoError(t, err)
		m := regexp.MustCompile(`constexpr ` + tc.decl + ` = ([^;]+);`).FindStringSubmatch(string(src))
		require.NotNil(t, m, tc.decl)
		assert.Equal(t, tc.want, m[1], tc.decl)
	}
	assert.Equal(t, 48<<10, errClaimOff)
	assert.Equal(t, 18<<10, seqOff)
	assert.Equal(t, 97<<10, llSeqOff)
	src, err := os.ReadFile("../../kernels/common.cuh")
	require.NoError(t, err)
	m := regexp.MustCompile(`enum ErrCode : u32 \{ kErrSendBytes = (\d), kErrRecvBytes = (\d), kErrCall = (\d), kErrSendTimeout = (\d), kErrRecvTimeout = (\d) \};`).FindStringSubmatch(string(src))
	require.NotNil(t, m, "common.cuh's ErrCode")
	assert.Equal(t, []string{strconv.Itoa(errSendBytes), strconv.Itoa(errRecvBytes), strconv.Itoa(errCall),
		strconv.Itoa(errSendTimeout), strconv.Itoa(errRecvTimeout)}, m[1:])
}

// ---- a model of goccl_p2p over the fake driver's launches ----

type p2pModelOp struct {
	src, dst uintptr
	bytes    uint64
	launch   int // the rank's p2p launch it came in
}

// p2pModel decodes every rank's p2p launches, checks their shape, pairs
// the k-th Send A->B with the k-th Recv on B from A as the kernel does
// (they must come in launches of the same number, or the launches would
// wait for each other, and agree on bytes), and moves the data in mem.
// It returns the launches per rank.
func p2pModel(t *testing.T, mem *simMem, drvs []*fakeDriver, channels int) []int {
	t.Helper()
	n := len(drvs)
	sends := make([][][]p2pModelOp, n) // [src][dst]
	recvs := make([][][]p2pModelOp, n) // [dst][src]
	launches := make([]int, n)
	for r, d := range drvs {
		sends[r], recvs[r] = make([][]p2pModelOp, n), make([][]p2pModelOp, n)
		L := 0
		for _, l := range d.launches {
			if l.name != "goccl_p2p" {
				continue
			}
			q := l.params
			require.Len(t, q, p2pParamSize)
			nl := int(u32at(q, offP2PNLanes))
			require.Equal(t, uint32(channels), u32at(q, offP2PChannels))
			require.Equal(t, uint32(nl*channels), l.cfg.Grid.X, "rank %d launch %d: grid", r, L)
			require.LessOrEqual(t, nl, p2pMaxLanes)
			require.Equal(t, uint32(r), u32at(q, offRank))
			seen := map[[2]int]bool{}
			for i := range nl {
				o := offP2PLanes + 8*i
				first := int(binary.LittleEndian.Uint16(q[o:]))
				cnt := int(binary.LittleEndian.Uint16(q[o+2:]))
				peer, kind := int(q[o+4]), int(q[o+5])
				require.False(t, seen[[2]int{peer, kind}], "rank %d: two lanes for peer %d kind %d", r, peer, kind)
				seen[[2]int{peer, kind}] = true
				require.LessOrEqual(t, cnt, p2pLaneOps)
				require.LessOrEqual(t, first+cnt, p2pMaxOps)
				for k := range cnt {
					po := offP2POps + 24*(first+k)
					op := p2pModelOp{src: uintptr(u64at(q, po)), dst: uintptr(u64at(q, po+8)), bytes: u64at(q, po+16), launch: L}
					switch kind {
					case laneSend:
						require.NotEqual(t, r, peer)
						sends[r][peer] = append(sends[r][peer], op)
					case laneRecv:
						require.NotEqual(t, r, peer)
						recvs[r][peer] = append(recvs[r][peer], op)
					case laneCopy:
						require.Equal(t, r, peer)
						buf := make([]byte, op.bytes)
						mem.read(op.src, buf)
						mem.write(op.dst, buf)
					default:
						t.Fatalf("rank %d: lane kind %d", r, kind)
					}
				}
			}
			L++
		}
		launches[r] = L
	}
	for a := range n {
		for b := range n {
			s, rv := sends[a][b], recvs[b][a]
			require.Len(t, rv, len(s), "Sends %d->%d against Recvs on %d from %d", a, b, b, a)
			for k := range s {
				require.Equal(t, s[k].launch, rv[k].launch, "Send %d of %d->%d and its Recv in different launches", k, a, b)
				require.Equal(t, s[k].bytes, rv[k].bytes, "Send %d of %d->%d", k, a, b)
				buf := make([]byte, s[k].bytes)
				mem.read(s[k].src, buf)
				mem.write(rv[k].dst, buf)
			}
		}
	}
	return launches
}

// transfer is one Send/Recv pair of a test group.
type transfer struct {
	src, dst, count int
	dt              collectives.DataType
	soff, roff      uintptr // bytes past a 16-byte boundary
}

const p2pGuard = 64

// userBuf is rank r's buffer number i (a made-up device address).
func userBuf(r, i int) uintptr { return 0x70_0000_0000 + uintptr(r)<<32 + uintptr(i)<<24 }

// p2pCase runs transfers as one group per rank, the ops of each rank in
// the order order gives, then the model, and checks every receive buffer
// and its guard. It returns the launches per rank.
func p2pCase(t *testing.T, bes []*Backend, drvs []*fakeDriver, ts []transfer, reverse bool) []int {
	t.Helper()
	n := len(bes)
	mem := newSimMem()
	rng := rand.New(rand.NewPCG(uint64(len(ts)), uint64(n)))
	groups := make([]collectives.Group, n)
	want := make([][]byte, len(ts))
	for i, x := range ts {
		b := x.count * x.dt.Size()
		data := make([]byte, b)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		want[i] = data
		mem.write(userBuf(x.src, 2*i)+x.soff, data)
		mem.write(userBuf(x.dst, 2*i+1), bytes.Repeat([]byte{0xc3}, int(x.roff)+b+p2pGuard))
		groups[x.src].P2P = append(groups[x.src].P2P, collectives.P2P{Kind: collectives.SendOp, Peer: x.dst,
			Buf: userBuf(x.src, 2*i) + x.soff, Count: x.count, Type: x.dt})
		groups[x.dst].P2P = append(groups[x.dst].P2P, collectives.P2P{Kind: collectives.RecvOp, Peer: x.src,
			Buf: userBuf(x.dst, 2*i+1) + x.roff, Count: x.count, Type: x.dt})
	}
	for r, be := range bes {
		drvs[r].launches = nil
		g := &groups[r]
		if reverse {
			for i, j := 0, len(g.P2P)-1; i < j; i, j = i+1, j-1 {
				g.P2P[i], g.P2P[j] = g.P2P[j], g.P2P[i]
			}
			// Reversing swaps the order of a pair's repeats too, which
			// NCCL's rule forbids: keep each (peer, kind)'s order.
			restorePairOrder(g.P2P)
		}
		require.NoError(t, be.RunGroup(context.Background(), g), "rank %d", r)
	}
	launches := p2pModel(t, mem, drvs, bes[0].p2p.channels)
	for i, x := range ts {
		b := x.count * x.dt.Size()
		got := make([]byte, int(x.roff)+b+p2pGuard)
		mem.read(userBuf(x.dst, 2*i+1), got)
		exp := bytes.Repeat([]byte{0xc3}, len(got))
		copy(exp[x.roff:], want[i])
		require.True(t, bytes.Equal(exp, got), "transfer %d (%d->%d, %d x %s): received bytes or guard wrong", i, x.src, x.dst, x.count, x.dt)
	}
	return launches
}

// restorePairOrder puts each (peer, kind)'s ops back in ascending buffer
// order (userBuf numbers them in transfer order), keeping the slots the
// reversal gave each (peer, kind).
func restorePairOrder(ops []collectives.P2P) {
	type key struct {
		peer int
		kind collectives.P2PKind
	}
	slots := map[key][]int{}
	for i, o := range ops {
		k := key{o.Peer, o.Kind}
		slots[k] = append(slots[k], i)
	}
	for _, idx := range slots {
		sorted := make([]collectives.P2P, len(idx))
		for j, i := range idx {
			sorted[j] = ops[i]
		}
		for a := range sorted {
			for b := a + 1; b < len(sorted); b++ {
				if sorted[b].Buf < sorted[a].Buf {
					sorted[a], sorted[b] = sorted[b], sorted[a]
				}
			}
		}
		for j, i := range idx {
			ops[i] = sorted[j]
		}
	}
}

func TestP2PGroupsPairAndMoveData(t *testing.T) {
	dts := []collectives.DataType{collectives.Int8, collectives.Float16, collectives.Float32, collectives.Float64}
	ring := func(n, cnt int, dt collectives.DataType, both, self bool) []transfer {
		var ts []transfer
		for r := range n {
			ts = append(ts, transfer{src: r, dst: (r + 1) % n, count: cnt, dt: dt, roff: uintptr(dt.Size() * (r % 2))})
			if both {
				ts = append(ts, transfer{src: r, dst: (r + n - 1) % n, count: cnt + 1, dt: dt, soff: uintptr(dt.Size())})
			}
			if self {
				ts = append(ts, transfer{src: r, dst: r, count: cnt, dt: dt})
			}
		}
		return ts
	}
	allPairs := func(n int, rng *rand.Rand) []transfer {
		var ts []transfer
		for a := range n {
			for b := range n {
				c := rng.IntN(3000)
				if rng.IntN(4) == 0 {
					c = 0
				}
				ts = append(ts, transfer{src: a, dst: b, count: c, dt: dts[rng.IntN(len(dts))]})
			}
		}
		return ts
	}
	rng := rand.New(rand.NewPCG(7, 7))
	repeats := func(n, k int) []transfer {
		ts := allPairs(n, rng)
		for i := range k {
			ts = append(ts, transfer{src: 0, dst: n - 1, count: 100 + i, dt: collectives.Uint8},
				transfer{src: n - 1, dst: 0, count: 50 + i, dt: collectives.Int32})
		}
		return ts
	}
	cases := []struct {
		name     string
		n        int
		ts       []transfer
		reverse  bool
		launches int
	}{
		{"ring 2 f32 x 1Mi+3", 2, ring(2, 1<<20+3, collectives.Float32, false, false), false, 1},
		{"ring 3 both ways int8 x 7", 3, ring(3, 7, collectives.Int8, true, false), false, 1},
		{"ring 4 both ways, self, f16 x 4095", 4, ring(4, 4095, collectives.Float16, true, true), true, 1},
		{"ring 2 count 0", 2, ring(2, 0, collectives.Float64, true, true), false, 1},
		{"all pairs 3", 3, allPairs(3, rng), false, 1},
		{"all pairs 4 reversed", 4, allPairs(4, rng), true, 1},
		{"all pairs 8", 8, allPairs(8, rng), false, 1},
		{"19 repeats of a pair at 2 ranks", 2, repeats(2, 19), false, 3},
		{"9 repeats of a pair at 8 ranks, reversed", 8, repeats(8, 9), true, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bes, drvs, _ := newFakeBackends(t, tc.n, Config{})
			launches := p2pCase(t, bes, drvs, tc.ts, tc.reverse)
			assert.Equal(t, tc.launches, launches[0], "launches of rank 0")
		})
	}
}

// A group on several streams launches on its first op's stream, after the
// work already on the others and before their later work.
func TestP2PGroupOrdersStreams(t *testing.T) {
	bes, drvs, _ := newFakeBackends(t, 2, Config{})
	be, drv := bes[0], drvs[0]
	const s1, s2 = cuda.Stream(0x11), cuda.Stream(0x22)
	g := &collectives.Group{P2P: []collectives.P2P{
		{Kind: collectives.SendOp, Peer: 1, Buf: 0x1000, Count: 4, Type: collectives.Float32, Stream: uintptr(s1)},
		{Kind: collectives.RecvOp, Peer: 1, Buf: 0x2000, Count: 4, Type: collectives.Float32, Stream: uintptr(s2)},
		{Kind: collectives.RecvOp, Peer: 1, Buf: 0x3000, Count: 4, Type: collectives.Float32, Stream: uintptr(s1)},
	}}
	require.NoError(t, be.RunGroup(context.Background(), g))
	var got []string
	for _, o := range drv.opsOf() {
		got = append(got, fmt.Sprintf("%s@%#x", o.kind, o.stream))
	}
	assert.Equal(t, []string{"record@0x22", "waitEvent@0x11", "launch@0x11", "record@0x11", "waitEvent@0x22"}, got)
	ops := drv.opsOf("record", "waitEvent")
	assert.Equal(t, ops[0].event, ops[1].event)
	assert.Equal(t, ops[0].rec, ops[1].rec, "the launch waits for the record made on the other stream")
	assert.Equal(t, ops[2].rec, ops[3].rec)
	require.NoError(t, be.Close())
	assert.Equal(t, 0, drv.events, "events destroyed at Close")
}

func TestP2PGroupWithCollectives(t *testing.T) {
	bes, drvs, _ := newFakeBackends(t, 2, Config{})
	g := &collectives.Group{
		Colls: []collectives.Args{
			{Coll: collectives.AllReduce, Send: 1 << 30, Recv: 2 << 30, Count: 1000, Type: collectives.Float32, Op: collectives.Sum},
			{Coll: collectives.Broadcast, Send: 1 << 30, Recv: 2 << 30, Count: 1000, Type: collectives.Uint8, Root: 1},
		},
		P2P: []collectives.P2P{{Kind: collectives.SendOp, Peer: 1, Buf: 0x1000, Count: 4, Type: collectives.Float32}},
	}
	require.NoError(t, bes[0].RunGroup(context.Background(), g))
	var names []string
	for _, l := range drvs[0].launches {
		names = append(names, l.name)
	}
	assert.Equal(t, []string{"goccl_allreduce_ll_f32_sum", "goccl_broadcast_oneshot", "goccl_p2p"}, names)
}

// What one rank can see alone fails before anything is launched.
func TestP2PGroupLocalErrors(t *testing.T) {
	bes, drvs, _ := newFakeBackends(t, 3, Config{})
	op := func(k collectives.P2PKind, peer, count int) collectives.P2P {
		return collectives.P2P{Kind: k, Peer: peer, Buf: 0x1000, Count: count, Type: collectives.Float32}
	}
	for _, tc := range []struct {
		name string
		ops  []collectives.P2P
		want error
		text string
	}{
		{"self counts differ", []collectives.P2P{op(collectives.SendOp, 1, 5), op(collectives.RecvOp, 1, 6)},
			collectives.ErrInvalidCount, "Send 0 to itself has 20 bytes, its Recv 0 from itself 24"},
		{"self send without recv", []collectives.P2P{op(collectives.SendOp, 1, 5), op(collectives.SendOp, 0, 5)},
			collectives.ErrInvalidArgument, "1 Sends to itself and 0 Recvs"},
		{"peer out of range", []collectives.P2P{op(collectives.SendOp, 3, 5)}, collectives.ErrInvalidPeer, "peer 3 not in [0,3)"},
		{"second self pair differs", []collectives.P2P{op(collectives.RecvOp, 1, 5), op(collectives.SendOp, 1, 5),
			op(collectives.SendOp, 1, 7), op(collectives.SendOp, 0, 7), op(collectives.RecvOp, 1, 8)},
			collectives.ErrInvalidCount, "Send 1 to itself has 28 bytes, its Recv 1 from itself 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			drvs[1].launches = nil
			// The group's collective is not enqueued either.
			err := bes[1].RunGroup(context.Background(), &collectives.Group{P2P: tc.ops, Colls: []collectives.Args{
				{Coll: collectives.AllReduce, Send: 1 << 30, Recv: 2 << 30, Count: 1000, Type: collectives.Float32}}})
			require.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), tc.text)
			assert.Empty(t, drvs[1].launches, "nothing launched")
			assert.False(t, bes[1].aborted.Load())
		})
	}
}

// What a kernel records beside the abort flag (a pair whose counts
// disagreed, ranks in calls of different numbers) fails the next call of
// either kind, naming the peer and both values, and nothing is launched.
func TestKernelErrorsReported(t *testing.T) {
	for _, tc := range []struct {
		name         string
		word         uint32
		mine, theirs uint64
		want         error
		peer         bool // a PeerError naming the peer
		text         string
	}{
		{"send bytes", 1 | errSendBytes<<1 | 2<<8, 400, 404, collectives.ErrInvalidCount, true,
			"rank 1's Send to rank 2 has 400 bytes, rank 2's matching Recv from rank 1 has 404"},
		{"recv bytes", 1 | errRecvBytes<<1 | 0<<8, 400, 404, collectives.ErrInvalidCount, true,
			"rank 1's Recv from rank 0 has 400 bytes, rank 0's matching Send to rank 1 has 404"},
		{"call numbers", 1 | errCall<<1 | 2<<8, 7, 8, collectives.ErrCallMismatch, false,
			"rank 1's call 7 met rank 2 in its call 8"},
		{"send timeout", 1 | errSendTimeout<<1 | 2<<8, 5, 2_500_000_000, collectives.ErrTimeout, true,
			"rank 1's Send to rank 2 (its Send number 5 to it) waited 2.5s for rank 2, past the timeout of 2s"},
		{"recv timeout", 1 | errRecvTimeout<<1 | 0<<8, 1, 2_000_400_000, collectives.ErrTimeout, true,
			"rank 1's Recv from rank 0 (its Recv number 1 from it) waited 2s for rank 0, past the timeout of 2s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bes, drvs, _ := newFakeBackends(t, 3, Config{Timeout: 2 * time.Second})
			be := bes[1]
			h := be.abortHost
			*(*uint64)(unsafe.Add(h, errOff+8)) = tc.mine
			*(*uint64)(unsafe.Add(h, errOff+16)) = tc.theirs
			*(*uint32)(unsafe.Add(h, errOff)) = tc.word
			args := collectives.Args{Coll: collectives.AllReduce, Send: 1 << 30, Recv: 2 << 30, Count: 10, Type: collectives.Float32}
			err := be.Run(context.Background(), &args)
			require.ErrorIs(t, err, tc.want)
			require.ErrorIs(t, err, collectives.ErrAborted)
			var pe *collectives.PeerError
			assert.Equal(t, tc.peer, errors.As(err, &pe))
			assert.Contains(t, err.Error(), tc.text)
			err = be.RunGroup(context.Background(), &collectives.Group{P2P: []collectives.P2P{
				{Kind: collectives.SendOp, Peer: 0, Buf: 0x1000, Count: 1, Type: collectives.Float32}}})
			require.ErrorIs(t, err, tc.want)
			assert.Empty(t, drvs[1].launches)
		})
	}
}

// The call's number reaches the kernels (Params.seq), which compare it
// between ranks.
func TestCallNumberReachesKernels(t *testing.T) {
	bes, drvs, _ := newFakeBackends(t, 2, Config{})
	for _, seq := range []uint64{1, 2, 1 << 40} {
		drvs[0].launches = nil
		args := collectives.Args{Coll: collectives.AllReduce, Send: 1 << 30, Recv: 2 << 30, Count: 1 << 20,
			Type: collectives.Float32, Seq: seq}
		require.NoError(t, bes[0].Run(context.Background(), &args))
		require.Len(t, drvs[0].launches, 1)
		assert.Equal(t, seq, u64at(drvs[0].launches[0].params, offSeq))
	}
}

// A warm group allocates nothing on its way to the launch.
func TestP2PGroupAllocatesNothing(t *testing.T) {
	bes, drvs, _ := newFakeBackends(t, 4, Config{})
	be := bes[1]
	drvs[1].quiet = true
	g := &collectives.Group{}
	for p := range 4 {
		g.P2P = append(g.P2P,
			collectives.P2P{Kind: collectives.SendOp, Peer: p, Buf: 0x1000, Count: 64, Type: collectives.Float32},
			collectives.P2P{Kind: collectives.RecvOp, Peer: p, Buf: 0x2000, Count: 64, Type: collectives.Float32})
	}
	ctx := context.Background()
	require.NoError(t, be.RunGroup(ctx, g))
	allocs := testing.AllocsPerRun(100, func() {
		if err := be.RunGroup(ctx, g); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}

func BenchmarkP2PGroupHost(b *testing.B) {
	bes, drvs, _ := newFakeBackends(b, 2, Config{})
	drvs[0].quiet = true
	g := &collectives.Group{P2P: []collectives.P2P{
		{Kind: collectives.SendOp, Peer: 1, Buf: 0x1000, Count: 1 << 20, Type: collectives.Float32},
		{Kind: collectives.RecvOp, Peer: 1, Buf: 0x2000, Count: 1 << 20, Type: collectives.Float32},
	}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := bes[0].RunGroup(ctx, g); err != nil {
			b.Fatal(err)
		}
	}
}

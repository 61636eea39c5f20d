package gpu

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// A small model of the GPUs for the copy-engine path: one address space
// (the fake mapper's), sparse memory, every rank's streams as queues of the
// ops the fake driver recorded, executed one op at a time in a random
// interleaving (the copy-engine reductions' kernel as the steps of
// ceReduceModel). A stream's head op runs only when CUDA would let it: a
// value wait when the word satisfies it (cyclic >= as
// CU_STREAM_WAIT_VALUE_GEQ), an event wait when that record has run.
// Copies are atomic, which is enough to expose ordering bugs: a peer
// writing our buffer before our stream reached the call lands before our
// own poison or after our read-back, and the check sees it.

type simMem struct{ pages map[uintptr]*[4096]byte }

func newSimMem() *simMem { return &simMem{pages: map[uintptr]*[4096]byte{}} }

func (m *simMem) page(a uintptr) *[4096]byte {
	p := m.pages[a>>12]
	if p == nil {
		p = new([4096]byte)
		m.pages[a>>12] = p
	}
	return p
}

func (m *simMem) write(a uintptr, b []byte) {
	for len(b) > 0 {
		off := int(a & 4095)
		n := copy(m.page(a)[off:], b)
		a, b = a+uintptr(n), b[n:]
	}
}

func (m *simMem) read(a uintptr, b []byte) {
	for len(b) > 0 {
		off := int(a & 4095)
		n := copy(b, m.page(a)[off:])
		a, b = a+uintptr(n), b[n:]
	}
}

func (m *simMem) u32(a uintptr) uint32 {
	var b [4]byte
	m.read(a, b[:])
	return binary.LittleEndian.Uint32(b[:])
}

func ptrOf(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }

type simStream struct {
	rank int
	s    cuda.Stream
	ops  []fakeOp
}

type eventKey struct {
	rank int
	e    cuda.Event
	rec  uint64
}

// simulate runs every rank's recorded ops to completion and returns an
// error describing the stuck heads if they deadlock.
func simulate(mem *simMem, drvs []*fakeDriver, rng *rand.Rand) error {
	var streams []*simStream
	byKey := map[[2]uintptr]*simStream{}
	p2pReached := map[[3]int]uint32{}
	for r, d := range drvs {
		for _, o := range d.opsOf() {
			k := [2]uintptr{uintptr(r), uintptr(o.stream)}
			st := byKey[k]
			if st == nil {
				st = &simStream{rank: r, s: o.stream}
				byKey[k] = st
				streams = append(streams, st)
			}
			if o.kind == "launch" && o.name == "goccl_p2p" {
				st.ops = append(st.ops, p2pKernelModel(o, r, p2pReached)...)
				continue
			}
			if o.kind == "launch" && strings.HasPrefix(o.name, "goccl_cereduce_") {
				steps, err := ceReduceModel(o)
				if err != nil {
					return fmt.Errorf("rank %d: %w", r, err)
				}
				st.ops = append(st.ops, steps...)
				continue
			}
			st.ops = append(st.ops, o)
		}
		d.ops = nil
	}
	recorded := map[eventKey]bool{}
	ready := func(st *simStream) bool {
		o := st.ops[0]
		switch o.kind {
		case "wait":
			v := mem.u32(o.dst)
			if o.geq {
				return int32(v-o.val) >= 0
			}
			return v == o.val
		case "waitEvent":
			return o.rec == 0 || recorded[eventKey{st.rank, o.event, o.rec}]
		}
		return true
	}
	for {
		var runnable []*simStream
		pending := false
		for _, st := range streams {
			if len(st.ops) == 0 {
				continue
			}
			pending = true
			if ready(st) {
				runnable = append(runnable, st)
			}
		}
		if !pending {
			return nil
		}
		if len(runnable) == 0 {
			var heads []string
			for _, st := range streams {
				if len(st.ops) > 0 {
					o := st.ops[0]
					heads = append(heads, fmt.Sprintf("rank %d stream %#x: %s %#x (has %d, wants %d)", st.rank, st.s, o.kind, o.dst, mem.u32(o.dst), o.val))
				}
			}
			return fmt.Errorf("deadlock: %s", strings.Join(heads, "; "))
		}
		st := runnable[rng.IntN(len(runnable))]
		o := st.ops[0]
		st.ops = st.ops[1:]
		switch o.kind {
		case "copy":
			b := make([]byte, o.n)
			mem.read(o.src, b)
			mem.write(o.dst, b)
		case "write":
			mem.write(o.dst, binary.LittleEndian.AppendUint32(nil, o.val))
		case "memset8":
			mem.write(o.dst, bytes.Repeat([]byte{byte(o.val)}, int(o.n)))
		case "memset32":
			for i := uint64(0); i < o.n; i++ {
				mem.write(o.dst+uintptr(4*i), binary.LittleEndian.AppendUint32(nil, o.val))
			}
		case "htod":
			mem.write(o.dst, o.data)
		case "dtoh":
			mem.read(o.src, o.host)
		case "record":
			recorded[eventKey{st.rank, o.event, o.rec}] = true
		case "run":
			if err := o.run(mem); err != nil {
				return fmt.Errorf("rank %d: %w", st.rank, err)
			}
		case "wait", "waitEvent":
		default:
			return fmt.Errorf("rank %d: the model cannot run %q (%s)", st.rank, o.kind, o.name)
		}
	}
}

// simCall is one collective in a back-to-back sequence: every rank poisons
// its receive buffer, writes fresh input, runs the call and reads the
// receive buffer back, all on its stream with no host synchronization.
type simCall struct {
	coll    collectives.Collective
	count   int // int32 elements
	root    int
	inPlace bool
}

const simGuard = 64

// runSim enqueues calls on every rank, runs the model with seed and checks
// every read-back against the expected output (and the guard bytes).
func runSim(t *testing.T, bes []*Backend, drvs []*fakeDriver, recv []uintptr, calls []simCall, seed uint64, drop func(fakeOp) bool) []string {
	t.Helper()
	return runSimSend(t, bes, drvs, recv, nil, calls, seed, drop)
}

// runSimSend is runSim with the out-of-place inputs in sends[r] (nil: in
// unregistered memory at sendBase).
func runSimSend(t *testing.T, bes []*Backend, drvs []*fakeDriver, recv, sends []uintptr, calls []simCall, seed uint64, drop func(fakeOp) bool) []string {
	t.Helper()
	n := len(bes)
	mem := newSimMem()
	type readback struct {
		call int
		want []byte
		got  []byte
	}
	backs := make([][]readback, n)
	inputs := func(c int, r int, size int) []byte {
		b := make([]byte, size)
		rng := rand.New(rand.NewPCG(uint64(c), uint64(r)))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	}
	for ci, c := range calls {
		bytesPer := c.count * 4
		sendBytes, span := bytesPer, bytesPer
		switch c.coll {
		case collectives.AllGather:
			span *= n
		case collectives.ReduceScatter:
			sendBytes *= n
		}
		for r, be := range bes {
			drv := drvs[r]
			poison := byte(0xA0 + ci%16)
			require.NoError(t, drv.MemsetD8Async(be.ctx, cuda.DevicePtr(recv[r]), poison, uint64(span+simGuard), userStream))
			send := rankAddr(sendBase, r)
			if sends != nil {
				send = sends[r]
			}
			if c.inPlace {
				// NCCL's in-place layouts: AllGather's input is the rank's
				// slot of the output, ReduceScatter's output its slot of the
				// input.
				switch send = recv[r]; c.coll {
				case collectives.AllGather:
					send += uintptr(r * bytesPer)
				case collectives.ReduceScatter:
					send -= uintptr(r * bytesPer)
				}
			}
			if c.coll != collectives.Broadcast || r == c.root {
				in := inputs(ci, r, sendBytes)
				require.NoError(t, drv.MemcpyHtoDAsync(be.ctx, cuda.DevicePtr(send), ptrOf(in), uint64(len(in)), userStream))
			}
			require.NoError(t, be.Run(context.Background(), &collectives.Args{Coll: c.coll, Send: send, Recv: recv[r],
				Count: c.count, Type: collectives.Int32, Op: collectives.Sum, Root: c.root, Stream: uintptr(userStream)}))
			var want []byte
			switch c.coll {
			case collectives.AllGather:
				for q := range n {
					want = append(want, inputs(ci, q, bytesPer)...)
				}
			case collectives.Broadcast:
				want = inputs(ci, c.root, bytesPer)
			default:
				ins := make([][]byte, n)
				for q := range n {
					ins[q] = inputs(ci, q, sendBytes)
					if c.coll == collectives.ReduceScatter {
						ins[q] = ins[q][r*bytesPer : (r+1)*bytesPer]
					}
				}
				want = sumInt32(ins)
			}
			guard := bytes.Repeat([]byte{poison}, simGuard)
			if c.inPlace && c.coll == collectives.ReduceScatter {
				// The rest of the input follows the output, unchanged.
				copy(guard, inputs(ci, r, sendBytes)[(r+1)*bytesPer:])
			}
			want = append(want, guard...)
			got := make([]byte, len(want))
			require.NoError(t, drv.MemcpyDtoHAsync(be.ctx, ptrOf(got), cuda.DevicePtr(recv[r]), uint64(len(got)), userStream))
			backs[r] = append(backs[r], readback{call: ci, want: want, got: got})
		}
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
	require.NoError(t, simulate(mem, drvs, rand.New(rand.NewPCG(seed, 7))))
	var bad []string
	for r := range n {
		for _, b := range backs[r] {
			if !bytes.Equal(b.want, b.got) {
				i := 0
				for i < len(b.want) && b.want[i] == b.got[i] {
					i++
				}
				bad = append(bad, fmt.Sprintf("rank %d call %d (%+v): first wrong byte at %d", r, b.call, calls[b.call], i))
			}
		}
	}
	return bad
}

func simCalls(n int) []simCall {
	var calls []simCall
	for i, count := range []int{1, 7, 1023, 4096, 3} {
		calls = append(calls,
			simCall{coll: collectives.AllGather, count: count, inPlace: i%2 == 0},
			simCall{coll: collectives.Broadcast, count: count, root: i % n, inPlace: i%2 == 1},
			simCall{coll: collectives.AllGather, count: count + 1, inPlace: i%2 == 1},
			simCall{coll: collectives.Broadcast, count: count + 2, root: (i + 1) % n},
		)
	}
	return calls
}

func TestCESimulatedDataBackToBack(t *testing.T) {
	for _, n := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			bes, drvs, _ := newFakeBackends(t, n, Config{Algo: "ce"})
			recv, _ := allocAll(t, bes, uint64(n*(4096+3)*4+simGuard))
			for seed := range uint64(20) {
				bad := runSim(t, bes, drvs, recv, simCalls(n), seed, nil)
				require.Empty(t, bad, "seed %d", seed)
			}
		})
	}
}

// The model must be able to fail: without the ready handshake a fast rank
// writes into a peer's buffer before the peer's stream reached the call;
// without the done waits a rank reads its buffer before the peers' copies
// land; without the join it reads before its own local copy. Some
// interleaving shows each.
func TestCESimulationCatchesMissingOrdering(t *testing.T) {
	flagOff := func(o fakeOp) uintptr { return (o.dst - wsBase) & 0xffffffff }
	cases := []struct {
		name string
		drop func(fakeOp) bool
	}{
		{"ready handshake", func(o fakeOp) bool {
			return (o.kind == "wait" || o.kind == "write") && flagOff(o) >= 0x8000 && flagOff(o) < 0x8000+128
		}},
		{"done waits", func(o fakeOp) bool {
			return o.kind == "wait" && flagOff(o) >= 0x8000+128 && flagOff(o) < 0x8000+256
		}},
		{"join of the local copy", func(o fakeOp) bool { return o.kind == "waitEvent" && o.stream == userStream }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bes, drvs, _ := newFakeBackends(t, 2, Config{Algo: "ce"})
			recv, _ := allocAll(t, bes, uint64(2*(4096+3)*4+simGuard))
			mustExpose(t, tc.name, 20, func(seed uint64) []string {
				return runSim(t, bes, drvs, recv, simCalls(2), seed, tc.drop)
			})
		})
	}
}

// mustExpose runs seeds interleavings of a model with one ordering
// dropped and fails the test unless at least one of them goes wrong.
func mustExpose(t *testing.T, missing string, seeds uint64, run func(seed uint64) []string) {
	t.Helper()
	failed := 0
	for seed := range seeds {
		if len(run(seed)) > 0 {
			failed++
		}
	}
	assert.Positive(t, failed, "no interleaving exposed the missing %s", missing)
	t.Logf("%d of %d interleavings failed without the %s", failed, seeds, missing)
}

// A rank that never arrives leaves its peer's stream waiting (a wait does
// not poll the abort flag); Abort releases it.
func TestCESimulatedAbortReleasesWaits(t *testing.T) {
	bes, drvs, _ := newFakeBackends(t, 2, Config{Algo: "ce"})
	recv, _ := allocAll(t, bes, 2*4096)
	for range 2 {
		require.NoError(t, bes[0].Run(context.Background(), &collectives.Args{Coll: collectives.AllGather,
			Send: rankAddr(sendBase, 0), Recv: recv[0], Count: 16, Type: collectives.Int32, Stream: uintptr(userStream)}))
	}
	recorded := drvs[0].opsOf()
	mem := newSimMem()
	err := simulate(mem, drvs, rand.New(rand.NewPCG(1, 2)))
	require.ErrorContains(t, err, "deadlock", "rank 1 never ran the call")

	drvs[0].ops = recorded
	bes[0].Abort(fmt.Errorf("rank 1 is gone"))
	require.NoError(t, simulate(newSimMem(), drvs, rand.New(rand.NewPCG(1, 2))), "the rescue write releases both calls")
}

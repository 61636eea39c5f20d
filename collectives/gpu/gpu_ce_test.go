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

// registeredRecv allocates a registered receive buffer of size bytes on
// every rank of the rig (collective) and frees it at cleanup.
func (r *rig) registeredRecv(t *testing.T, size uint64) []cuda.DevicePtr {
	t.Helper()
	ptrs, regs := allocAll(t, r.bes, size)
	t.Cleanup(func() {
		r.sync(t)
		for i, err := range together(len(r.bes), func(i int) error { return regs[i].Close(context.Background()) }) {
			require.NoError(t, err, "rank %d: close registration", i)
		}
	})
	out := make([]cuda.DevicePtr, len(ptrs))
	for i, p := range ptrs {
		out[i] = cuda.DevicePtr(p)
	}
	return out
}

// requireCE fails the test where the copy-engine path is off.
func (r *rig) requireCE(t *testing.T) {
	t.Helper()
	for rank, be := range r.bes {
		if !be.ce.ok {
			t.Fatalf("rank %d: copy-engine path off on this machine (stream memory ops probe failed; see the log)", rank)
		}
	}
}

// sendRandom fills every rank's send buffer with count random elements of
// dt (for a Sum) and returns what it wrote.
func (r *rig) sendRandom(t *testing.T, rng *rand.Rand, dt collectives.DataType, count int) [][]byte {
	ins := make([][]byte, len(r.bes))
	for rank := range r.bes {
		ins[rank] = make([]byte, count*dt.Size())
		fill(rng, dt, collectives.Sum, ins[rank])
		r.put(t, rank, r.send[rank], ins[rank])
	}
	return ins
}

// ceCase runs one Broadcast or AllGather into the registered buffers and
// checks every rank's output and guard; it returns how many copy-engine
// calls the backends issued for it.
func (r *rig) ceCase(t *testing.T, rng *rand.Rand, recv []cuda.DevicePtr, capBytes int, c collectives.Collective, dt collectives.DataType, count int, inPlace bool, root int) (uint32, error) {
	n := len(r.bes)
	es := dt.Size()
	bytesPer := count * es
	span := bytesPer
	if c == collectives.AllGather {
		span *= n
	}
	if span+guard > capBytes {
		return 0, fmt.Errorf("case needs %d bytes, buffers hold %d", span+guard, capBytes)
	}
	before := r.bes[0].ce.seq
	ins := make([][]byte, n)
	for rank, be := range r.bes {
		ins[rank] = make([]byte, bytesPer)
		fill(rng, dt, collectives.Sum, ins[rank])
		require.NoError(t, r.drv.MemsetD8Async(be.ctx, recv[rank], 0xA5, uint64(span+guard), r.streams[rank]))
		require.NoError(t, r.drv.StreamSynchronize(be.ctx, r.streams[rank]))
		send := uintptr(r.send[rank])
		if inPlace {
			send = uintptr(recv[rank])
			if c == collectives.AllGather {
				send += uintptr(rank * bytesPer)
			}
		}
		r.put(t, rank, cuda.DevicePtr(send), ins[rank])
		a := collectives.Args{Coll: c, Send: send, Recv: uintptr(recv[rank]), Count: count, Type: dt, Root: root, Stream: uintptr(r.streams[rank])}
		if err := be.Run(context.Background(), &a); err != nil {
			return 0, fmt.Errorf("rank %d: %w", rank, err)
		}
	}
	r.sync(t)
	for rank := range r.bes {
		got := r.get(t, rank, recv[rank], span+guard)
		if !bytes.Equal(got[span:], bytes.Repeat([]byte{0xA5}, guard)) {
			return 0, fmt.Errorf("rank %d: wrote past the end of recv", rank)
		}
		if c == collectives.Broadcast {
			if !bytes.Equal(got[:span], ins[root]) {
				return 0, fmt.Errorf("rank %d: broadcast output differs from root %d's input", rank, root)
			}
			continue
		}
		for s := range n {
			if !bytes.Equal(got[s*bytesPer:(s+1)*bytesPer], ins[s]) {
				return 0, fmt.Errorf("rank %d: allgather slot %d differs", rank, s)
			}
		}
	}
	return r.bes[0].ce.seq - before, nil
}

// TestGPUCopyEngine runs Broadcast and AllGather into registered buffers on
// the copy-engine path (forced at small sizes, by size from 1 MiB: the test
// lowers the thresholds), then a back-to-back mix with kernel collectives on
// the same stream.
func TestGPUCopyEngine(t *testing.T) {
	ceAt1MiB(t)
	n := rigRanks(t)
	const capBytes = 8 << 20
	r := newRig(t, n, uint64(capBytes))
	r.requireCE(t)
	recv := r.registeredRecv(t, uint64(capBytes))
	rng := rand.New(rand.NewPCG(11, 12))
	for _, forced := range []collectives.Algorithm{"", collectives.CopyEngine} {
		for _, be := range r.bes {
			be.forced = forced
		}
		for _, c := range []collectives.Collective{collectives.Broadcast, collectives.AllGather} {
			for _, dt := range []collectives.DataType{collectives.Int8, collectives.Float32, collectives.Float64} {
				for _, count := range []int{1, 7, 4095, (1<<20 + 3) / dt.Size()} {
					if c == collectives.AllGather && count*dt.Size()*n+guard > capBytes {
						count = (capBytes - guard) / n / dt.Size()
					}
					for _, inPlace := range []bool{false, true} {
						root := (count + int(dt)) % n
						issued, err := r.ceCase(t, rng, recv, capBytes, c, dt, count, inPlace, root)
						if err != nil {
							t.Errorf("%s %s count=%d inplace=%v root=%d forced=%q: %v", c, dt, count, inPlace, root, forced, err)
							continue
						}
						wantCE := forced == collectives.CopyEngine || int64(count*dt.Size()) >= r.bes[0].tune.th.CopyEngine[c]
						if (issued == 1) != wantCE {
							t.Errorf("%s %s count=%d forced=%q: %d copy-engine calls, want copy engines=%v", c, dt, count, forced, issued, wantCE)
						}
					}
				}
			}
		}
	}
	for _, be := range r.bes {
		be.forced = ""
	}

	// Back to back, no host synchronization: copy-engine AllGather and
	// Broadcast into the registered buffer interleaved with kernel
	// AllReduces, 300 calls; the last of each decides what is checked.
	const count = 1 << 18 // int32: 1 MiB per rank, copy engines by size
	if count*4*n+guard > capBytes {
		t.Skipf("%d ranks need more than %d bytes", n, capBytes)
	}
	ins := r.sendRandom(t, rng, collectives.Int32, count)
	before := r.bes[0].ce.seq
	var last collectives.Collective
	lastRoot := 0
	for i := range 300 {
		for rank, be := range r.bes {
			a := collectives.Args{Send: uintptr(r.send[rank]), Count: count, Type: collectives.Int32, Op: collectives.Sum, Stream: uintptr(r.streams[rank])}
			switch i % 3 {
			case 0:
				a.Coll, a.Recv = collectives.AllGather, uintptr(recv[rank])
			case 1:
				a.Coll, a.Recv, a.Root = collectives.Broadcast, uintptr(recv[rank]), i%n
			default:
				a.Coll, a.Recv = collectives.AllReduce, uintptr(r.recv[rank])
			}
			require.NoError(t, be.Run(context.Background(), &a))
			if a.Coll != collectives.AllReduce {
				last, lastRoot = a.Coll, a.Root
			}
		}
	}
	r.sync(t)
	require.Equal(t, uint32(200), r.bes[0].ce.seq-before, "copy-engine calls")
	for rank := range r.bes {
		got := r.get(t, rank, recv[rank], count*4*n)
		if last == collectives.Broadcast {
			require.True(t, bytes.Equal(got[:count*4], ins[lastRoot]), "rank %d: last broadcast", rank)
		}
		require.NoError(t, checkReduced(collectives.Int32, collectives.Sum, ins, 0, r.get(t, rank, r.recv[rank], count*4), count), "rank %d: allreduce", rank)
	}
}

// mixCall is one kind of call in a back-to-back mix: the collective,
// where a rank's output goes, and the count.
type mixCall struct {
	coll  collectives.Collective
	recv  func(rank int) uintptr
	count int
}

// ceRigBytes is the size of a ceRig's buffers.
const ceRigBytes = 8 << 20

// ceRig is a rig of ceRigBytes buffers on GPUs with the copy-engine path, its
// receive buffers (and with send, its send buffers too) swapped for
// registered ones; it returns the plain buffers it replaced.
func ceRig(t *testing.T, send bool) (r *rig, plainSend, plainRecv []cuda.DevicePtr) {
	t.Helper()
	n := rigRanks(t)
	if n < 2 {
		t.Skipf("the copy-engine reductions move data between ranks: needs 2 GPUs, have %d", n)
	}
	r = newRig(t, n, ceRigBytes)
	r.requireCE(t)
	plainSend, plainRecv = r.send, r.recv
	if send {
		r.send = r.registeredRecv(t, ceRigBytes+guard)
	}
	r.recv = r.registeredRecv(t, ceRigBytes+guard)
	t.Cleanup(func() { r.send, r.recv = plainSend, plainRecv }) // before the rig frees them: cleanups run last-in first-out
	return r, plainSend, plainRecv
}

// runMix enqueues calls float32 sums of r.send, the kinds taking turns, on
// every rank's stream with no host synchronization in between.
func (r *rig) runMix(t *testing.T, calls int, kinds []mixCall) {
	t.Helper()
	for i := range calls {
		k := kinds[i%len(kinds)]
		for rank, be := range r.bes {
			a := collectives.Args{Coll: k.coll, Send: uintptr(r.send[rank]), Recv: k.recv(rank), Count: k.count,
				Type: collectives.Float32, Op: collectives.Sum, Stream: uintptr(r.streams[rank])}
			require.NoError(t, be.Run(context.Background(), &a))
		}
	}
}

// checkMix checks every rank's last result of each kind of a mix run on
// ins: the whole sum (AllReduce) or the rank's slice of it (ReduceScatter).
func (r *rig) checkMix(t *testing.T, ins [][]byte, kinds []mixCall) {
	t.Helper()
	for rank := range r.bes {
		for i, k := range kinds {
			base := 0
			if k.coll == collectives.ReduceScatter {
				base = rank * k.count
			}
			got := r.get(t, rank, cuda.DevicePtr(k.recv(rank)), k.count*4)
			require.NoError(t, checkReduced(collectives.Float32, collectives.Sum, ins, base, got, k.count), "rank %d: call kind %d (%s)", rank, i, k.coll)
		}
	}
}

// TestGPUCopyEngineReductions runs AllReduce into registered buffers and
// ReduceScatter on the copy-engine reductions (forced at small sizes, by
// size from 1 MiB), with staging small enough (slot=4K: 2 MiB per rank at 2
// ranks) and chunks of 64 KiB so that a 4 MiB message reuses every staging
// slot, then a back-to-back mix with kernel AllReduces on the same stream.
func TestGPUCopyEngineReductions(t *testing.T) {
	t.Setenv(EnvTune, "slot=4K,cechunk=64K,ce.all_reduce=1M,ce.reduce_scatter=1M")
	r, _, plain := ceRig(t, false)
	n, capBytes := len(r.bes), ceRigBytes
	rng := rand.New(rand.NewPCG(21, 22))
	for _, forced := range []collectives.Algorithm{"", collectives.CopyEngine} {
		for _, be := range r.bes {
			be.forced = forced
		}
		for _, c := range []collectives.Collective{collectives.AllReduce, collectives.ReduceScatter} {
			for _, dt := range []collectives.DataType{collectives.Int8, collectives.Int32, collectives.Float32, collectives.BFloat16, collectives.Float64} {
				for _, op := range []collectives.Op{collectives.Sum, collectives.Max, collectives.Avg} {
					for i, count := range []int{1, 7, 4095, (1<<20 + 3) / dt.Size(), (4<<20 - 5) / dt.Size()} {
						if c == collectives.ReduceScatter {
							count = min(count, (capBytes-dt.Size())/n/dt.Size())
						}
						inPlace, misalign := i%2 == 1, i == 2
						before := r.bes[0].ce.seq
						if err := r.gpuCase(t, rng, c, dt, op, count, inPlace, misalign, 0); err != nil {
							t.Errorf("%s %s %s count=%d inplace=%v misalign=%v forced=%q: %v", c, dt, op, count, inPlace, misalign, forced, err)
							continue
						}
						wantCE := forced == collectives.CopyEngine || int64(count*dt.Size()) >= 1<<20
						if gotCE := r.bes[0].ce.seq != before; gotCE != wantCE {
							t.Errorf("%s %s count=%d forced=%q: copy engines %v, want %v", c, dt, count, forced, gotCE, wantCE)
						}
					}
				}
			}
		}
	}
	for _, be := range r.bes {
		be.forced = ""
	}

	// Back to back, no host synchronization: copy-engine AllReduce (into
	// the registered buffer) and ReduceScatter interleaved with kernel
	// AllReduces, 300 calls; then every last result is checked.
	const count = 1 << 20 // float32: 4 MiB per rank, 32 chunks of 64 KiB
	ins := r.sendRandom(t, rng, collectives.Float32, count)
	before := r.bes[0].ce.seq
	rsCount := count / n
	mix := []mixCall{
		{collectives.AllReduce, func(rank int) uintptr { return uintptr(r.recv[rank]) }, count},
		{collectives.ReduceScatter, func(rank int) uintptr { return uintptr(r.recv[rank]) + count*4 }, rsCount},
		{collectives.AllReduce, func(rank int) uintptr { return uintptr(plain[rank]) }, count}, // the kernels
	}
	r.runMix(t, 300, mix)
	r.sync(t)
	require.Greater(t, r.bes[0].ce.seq-before, uint32(200*16), "copy-engine calls of many chunks each")
	r.checkMix(t, ins, mix)
}

// TestGPURegisteredReductions runs AllReduce and ReduceScatter with both
// buffers registered: the kernels below 1 MiB, and from there (the test
// lowers the thresholds, and the floors so that 4 MiB already makes several
// halving chunks) the copy engines' direct mode out of place and their
// staging mode in place. Then a back-to-back mix of the three on one stream.
func TestGPURegisteredReductions(t *testing.T) {
	t.Setenv(EnvTune, "ce.all_reduce=1M,ce.reduce_scatter=1M,cefloor.all_reduce=128K,cefloor.reduce_scatter=64K")
	r, _, plainRecv := ceRig(t, true)
	n, capBytes := len(r.bes), ceRigBytes
	rng := rand.New(rand.NewPCG(31, 32))
	for _, c := range []collectives.Collective{collectives.AllReduce, collectives.ReduceScatter} {
		for _, dt := range []collectives.DataType{collectives.Int8, collectives.Int32, collectives.Float16, collectives.Float32, collectives.BFloat16, collectives.Float64} {
			for _, op := range []collectives.Op{collectives.Sum, collectives.Prod, collectives.Min, collectives.Max, collectives.Avg} {
				for i, count := range []int{1, 7, 4095, 65537, (1<<20 + 3) / dt.Size(), (4<<20 - 5) / dt.Size()} {
					if c == collectives.ReduceScatter {
						count = min(count, (capBytes-dt.Size())/n/dt.Size())
					}
					for _, inPlace := range []bool{false, true} {
						misalign := i == 2
						if err := r.gpuCase(t, rng, c, dt, op, count, inPlace, misalign, 0); err != nil {
							t.Errorf("%s %s %s count=%d inplace=%v misalign=%v: %v", c, dt, op, count, inPlace, misalign, err)
						}
					}
				}
			}
		}
	}

	// Back to back, no host synchronization: direct copy-engine AllReduce
	// and ReduceScatter, a kernel AllReduce below the threshold on the same
	// buffers and one into unregistered memory, 400 calls; then every last
	// result.
	const count = 1 << 20 // float32: 4 MiB per rank
	ins := r.sendRandom(t, rng, collectives.Float32, count)
	before := r.bes[0].ce.seq
	rsCount, smallCount := count/n, 1<<16
	mix := []mixCall{
		{collectives.AllReduce, func(rank int) uintptr { return uintptr(r.recv[rank]) }, count},
		{collectives.ReduceScatter, func(rank int) uintptr { return uintptr(r.recv[rank]) + count*4 }, rsCount},
		{collectives.AllReduce, func(rank int) uintptr { return uintptr(r.recv[rank]) + count*4 + uintptr(rsCount*4) }, smallCount}, // the kernels
		{collectives.AllReduce, func(rank int) uintptr { return uintptr(plainRecv[rank]) }, count},                                  // the kernels
	}
	r.runMix(t, 400, mix)
	r.sync(t)
	// 100 calls each of the two copy-engine reductions, a flag value per
	// chunk as planned.
	var perRound uint32
	for _, a := range []collectives.Args{
		{Coll: collectives.AllReduce, Count: count, Type: collectives.Float32},
		{Coll: collectives.ReduceScatter, Count: rsCount, Type: collectives.Float32},
	} {
		pl, ok := r.bes[0].planCEReduce(&a, n == 2)
		require.True(t, ok)
		perRound += pl.chunks
	}
	require.Equal(t, 100*perRound, r.bes[0].ce.seq-before, "copy-engine flag values")
	r.checkMix(t, ins, mix)
}

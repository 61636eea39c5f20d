package gpu

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// TestGPUPreMulSum runs the scaled sums on the GPUs: each rank its own
// scalar, by value and from device memory (rewritten between the calls, so
// that a kernel reading a stale value fails), against the reference sum of
// each rank's input times its scalar rounded to the type.
func TestGPUPreMulSum(t *testing.T) {
	n := rigRanks(t)
	const big = 1<<20 + 3
	r := newRig(t, n, uint64(big*8*n)+64)
	cells := make([]cuda.DevicePtr, n)
	for rank, be := range r.bes {
		var err error
		cells[rank], err = r.drv.MemAlloc(be.ctx, 8)
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.drv.MemFree(be.ctx, cells[rank]) })
	}
	factors := []float64{0.5, -1.5, 2, 0.75, 3, -0.25, 1.25, 2.5}
	rng := rand.New(rand.NewPCG(5, 6))
	types := []collectives.DataType{collectives.Float32, collectives.Float16, collectives.BFloat16, collectives.Float64,
		collectives.Float8E4M3, collectives.Float8E5M2, collectives.Int32, collectives.Uint8, collectives.Int64}
	for _, c := range []collectives.Collective{collectives.AllReduce, collectives.Reduce, collectives.ReduceScatter} {
		for _, dt := range types {
			for _, count := range []int{1, 7, 4095, big} {
				for _, byAddr := range []bool{false, true} {
					name := fmt.Sprintf("%s %s count=%d device-scalar=%v", c, dt, count, byAddr)
					err := r.premulCase(t, rng, c, dt, count, byAddr, cells, factors)
					if errors.Is(err, collectives.ErrNotSupported) {
						t.Skipf("%s: %v", name, err) // a fatbin built before these kernels
					}
					require.NoError(t, err, name)
				}
			}
		}
	}
}

func (r *rig) premulCase(t *testing.T, rng *rand.Rand, c collectives.Collective, dt collectives.DataType, count int,
	byAddr bool, cells []cuda.DevicePtr, factors []float64) error {
	n := len(r.bes)
	a := collectives.Args{Coll: c, Count: count, Type: dt, Op: collectives.PreMulSum, Root: n - 1}
	sendBytes, recvBytes := a.SendBytes(n), a.RecvBytes(n)
	ins, scaled := make([][]byte, n), make([][]byte, n)
	for rank := 0; rank < n; rank++ {
		ins[rank] = make([]byte, sendBytes)
		fill(rng, dt, collectives.Sum, ins[rank])
		f := factors[rank%len(factors)]
		if !dt.IsFloat() {
			f = float64(int(f*2) | 1) // odd integers: products wrap, never vanish
		}
		s, err := collectives.ScalarOf(dt, f)
		if err != nil {
			return err
		}
		// The reference's inputs: each element times the rank's scalar,
		// rounded to the type (the float product is exact in float64 and
		// float32 rounds it as the kernels' float32 product does).
		scaled[rank] = make([]byte, sendBytes)
		for i := 0; i < sendBytes/dt.Size(); i++ {
			if dt.IsFloat() {
				p := getFloat(dt, ins[rank], i) * s.Float(dt)
				if dt != collectives.Float64 {
					p = float64(float32(p))
				}
				putFloat(dt, scaled[rank], i, p)
			} else {
				putInt(dt, scaled[rank], i, getInt(dt, ins[rank], i)*int64(f))
			}
		}
		ctx := r.bes[rank].ctx
		require.NoError(t, r.drv.MemsetD8Async(ctx, r.recv[rank], 0xA5, r.cap+guard, r.streams[rank]))
		require.NoError(t, r.drv.StreamSynchronize(ctx, r.streams[rank]))
		r.put(t, rank, r.send[rank], ins[rank])
		a.Scalar = s
		if byAddr {
			var cell [8]byte
			for i := range cell {
				cell[i] = byte(s.Bits >> (8 * i))
			}
			r.put(t, rank, cells[rank], cell[:])
			a.Scalar = collectives.ScalarAt(uintptr(cells[rank]))
		}
		a.Send, a.Recv, a.Stream = uintptr(r.send[rank]), uintptr(r.recv[rank]), uintptr(r.streams[rank])
		if err := r.bes[rank].Run(context.Background(), &a); err != nil {
			return err
		}
	}
	r.sync(t)
	for rank := 0; rank < n; rank++ {
		if c == collectives.Reduce && rank != a.Root {
			continue
		}
		got := r.get(t, rank, r.recv[rank], recvBytes)
		off := 0
		if c == collectives.ReduceScatter {
			off = rank * count
		}
		if err := checkReduced(dt, collectives.Sum, scaled, off, got, count); err != nil {
			return fmt.Errorf("rank %d: %w", rank, err)
		}
	}
	return nil
}

package gpu

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/half"
)

// TestGPUPairSum16Exact: at 2 ranks the kernels add 16-bit floats packed,
// two lanes an instruction (common.cuh's Pair). The sum of two such values
// must be the correctly rounded one, bit for bit: what float32 gives when
// rounded back, as float32 holds more than twice their precision. The
// inputs are random finite bit patterns, subnormals and sums that overflow
// included, which a tolerance would not catch.
func TestGPUPairSum16Exact(t *testing.T) {
	r := newRig(t, 2, 8<<20)
	rng := rand.New(rand.NewPCG(7, 8))
	for _, algo := range []collectives.Algorithm{collectives.OneShot, collectives.TwoShot} {
		for _, be := range r.bes {
			be.forced = algo
		}
		for _, dt := range []collectives.DataType{collectives.BFloat16, collectives.Float16} {
			for _, count := range []int{1<<20 + 3, 4 << 20} {
				for _, inPlace := range []bool{false, true} {
					ins := [][]byte{finite16(rng, dt, count), finite16(rng, dt, count)}
					for rank, be := range r.bes {
						require.NoError(t, r.drv.MemsetD8Async(be.ctx, r.recv[rank], 0xA5, uint64(2*count), r.streams[rank]))
						require.NoError(t, r.drv.StreamSynchronize(be.ctx, r.streams[rank]))
						send := r.send[rank]
						if inPlace {
							send = r.recv[rank]
						}
						r.put(t, rank, send, ins[rank])
						a := collectives.Args{Coll: collectives.AllReduce, Send: uintptr(send), Recv: uintptr(r.recv[rank]),
							Count: count, Type: dt, Op: collectives.Sum, Stream: uintptr(r.streams[rank])}
						require.NoError(t, be.Run(context.Background(), &a))
					}
					r.sync(t)
					want := sum16(dt, ins[0], ins[1])
					for rank := range r.bes {
						got := r.get(t, rank, r.recv[rank], 2*count)
						for i := 0; i < count; i++ {
							g, w := binary.LittleEndian.Uint16(got[2*i:]), binary.LittleEndian.Uint16(want[2*i:])
							if g != w {
								t.Fatalf("%s %s count=%d inplace=%v rank %d element %d: %#04x + %#04x gave %#04x, want %#04x",
									algo, dt, count, inPlace, rank, i, binary.LittleEndian.Uint16(ins[0][2*i:]),
									binary.LittleEndian.Uint16(ins[1][2*i:]), g, w)
							}
						}
					}
				}
			}
		}
	}
}

// finite16 returns count random finite values of the 16-bit type dt.
func finite16(rng *rand.Rand, dt collectives.DataType, count int) []byte {
	b := make([]byte, 2*count)
	for i := 0; i < count; i++ {
		for {
			v := uint16(rng.Uint32())
			if dt == collectives.BFloat16 && v&0x7f80 != 0x7f80 || dt == collectives.Float16 && v&0x7c00 != 0x7c00 {
				binary.LittleEndian.PutUint16(b[2*i:], v)
				break
			}
		}
	}
	return b
}

// sum16 adds x and y element by element in float32 and rounds each sum
// back to dt.
func sum16(dt collectives.DataType, x, y []byte) []byte {
	widen, narrow := half.BFloat16ToFloat32, half.Float32ToBFloat16
	if dt == collectives.Float16 {
		widen, narrow = half.Float16ToFloat32, half.Float32ToFloat16
	}
	out := make([]byte, len(x))
	for i := 0; i+1 < len(x); i += 2 {
		s := widen(binary.LittleEndian.Uint16(x[i:])) + widen(binary.LittleEndian.Uint16(y[i:]))
		binary.LittleEndian.PutUint16(out[i:], narrow(s))
	}
	return out
}

package host

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/onheap"
)

// premulRef is rank q's input times its scalar s, element by element, as
// documented: the product taken in float64 (exact for these inputs) and
// rounded to float32 and then to the type (float64 kept for Float64);
// integers multiply wrapping.
func premulRef(dt collectives.DataType, in []byte, s collectives.Scalar) []byte {
	es := dt.Size()
	out := make([]byte, len(in))
	sf := s.Float(dt)
	for i := 0; i < len(in)/es; i++ {
		if dt.IsFloat() {
			prod := elemFloat(dt, in[i*es:]) * sf
			if dt != collectives.Float64 {
				prod = float64(float32(prod))
			}
			putFloat(dt, out[i*es:], prod)
			continue
		}
		var w [8]byte
		copy(w[:], in[i*es:(i+1)*es])
		binary.LittleEndian.PutUint64(w[:], binary.LittleEndian.Uint64(w[:])*s.Bits)
		copy(out[i*es:], w[:es])
	}
	return out
}

// TestDirectPreMulSum checks PreMulSum's AllReduce, Reduce (at every root)
// and ReduceScatter on buffers from Alloc, every type, in and out of
// place, each rank with its own scalar (rank 1's passed by address),
// against the reference products (premulRef) summed by checkReduced, and that the call took the
// direct path.
func TestDirectPreMulSum(t *testing.T) {
	directAlways(t)
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			j := newJob(t, n, Config{StagingBytes: 64 << 10})
			j.allocArenas(t, 2*n*(8<<20)+4096)
			for _, count := range directCounts {
				dts := collectives.AllDataTypes()
				if count > 1<<20 {
					dts = []collectives.DataType{collectives.Float32, collectives.BFloat16, collectives.Int64, collectives.Float8E5M2}
				}
				for _, dt := range dts {
					for _, coll := range []collectives.Collective{collectives.AllReduce, collectives.Reduce, collectives.ReduceScatter} {
						roots := []int{0}
						if coll == collectives.Reduce {
							roots = []int{0, n - 1}
						}
						for _, root := range roots {
							for _, inPlace := range []bool{false, true} {
								c := call{coll: coll, dt: dt, op: collectives.PreMulSum, count: count, root: root, inPlace: inPlace}
								require.NoError(t, j.verifyPreMul(c))
								if count > 0 {
									require.Equal(t, same(n, "shm-direct"), j.lastTransports(), "%v", c)
								}
							}
						}
					}
				}
			}
		})
	}
}

// verifyPreMul runs the PreMulSum call c with random inputs, per-rank
// scalars and poisoned outputs, and checks every output element.
func (j *job) verifyPreMul(c call) error {
	n := j.n
	floats := []float64{0.5, -3, 1.0 / 3}
	ints := []float64{3, 5, 7}
	a := collectives.Args{Coll: c.coll, Count: c.count, Type: c.dt, Op: c.op, Root: c.root}
	sendBytes, recvBytes := a.SendBytes(n), a.RecvBytes(n)
	ins, outs, sends := make([][]byte, n), make([][]byte, n), make([][]byte, n)
	prods := make([][]byte, n)
	args := make([]collectives.Args, n)
	bits := onheap.Slice(make([]uint64, n)) // the ranks read the scalars from other goroutines
	j.resetArenas()
	for r := 0; r < n; r++ {
		v := ints[r]
		if c.dt.IsFloat() {
			v = floats[r]
		}
		s, err := collectives.ScalarOf(c.dt, v)
		if err != nil {
			return err
		}
		ins[r] = alloc(sendBytes)
		fill(j.rng, c.dt, collectives.Sum, ins[r])
		prods[r] = premulRef(c.dt, ins[r], s)
		args[r] = a
		args[r].Scalar = s
		if r == 1 {
			bits[r] = s.Bits
			args[r].Scalar = collectives.ScalarAt(uintptr(unsafe.Pointer(&bits[r])))
		}
		switch {
		case !c.inPlace:
			sends[r] = j.cloneFor(r, ins[r])
			outs[r] = j.buf(r, recvBytes)
			poison(c.dt, outs[r])
			args[r].Send, args[r].Recv = addr(sends[r]), addr(outs[r])
		case c.coll == collectives.ReduceScatter:
			outs[r] = j.cloneFor(r, ins[r])
			args[r].Send = addr(outs[r])
			args[r].Recv = args[r].Send + uintptr(r*recvBytes)
		default:
			outs[r] = j.cloneFor(r, ins[r])
			args[r].Send, args[r].Recv = addr(outs[r]), addr(outs[r])
		}
		if c.count == 0 {
			args[r].Send, args[r].Recv = 0, 0
		}
	}
	before := make([][]byte, n)
	for r := range outs {
		before[r] = clone(outs[r])
	}
	for r, err := range j.run(context.Background(), args) {
		if err != nil {
			return fmt.Errorf("%v: rank %d: %w", c, r, err)
		}
	}
	if c.count == 0 {
		return nil
	}
	for r := 0; r < n; r++ {
		if !c.inPlace && string(sends[r]) != string(ins[r]) {
			return fmt.Errorf("%v: rank %d's send buffer changed", c, r)
		}
		switch {
		case c.coll == collectives.Reduce && r != c.root:
			if string(outs[r]) != string(before[r]) {
				return fmt.Errorf("%v: non-root %d's receive buffer was written", c, r)
			}
			continue
		case c.coll == collectives.ReduceScatter:
			at := 0
			if c.inPlace {
				at = r * c.count
			}
			for i := 0; i < c.count; i++ {
				if err := checkReduced(c.dt, collectives.Sum, outs[r], at+i, prods, r*c.count+i); err != nil {
					return fmt.Errorf("%v: rank %d: element %d: %w", c, r, i, err)
				}
			}
		default:
			for i := 0; i < c.count; i++ {
				if err := checkReduced(c.dt, collectives.Sum, outs[r], i, prods, i); err != nil {
					return fmt.Errorf("%v: rank %d: element %d: %w", c, r, i, err)
				}
			}
		}
	}
	return nil
}

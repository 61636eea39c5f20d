package host

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/fp8"
	"github.com/goccl/goccl/internal/half"
)

// elemFloat is a float element's value.
func elemFloat(t collectives.DataType, b []byte) float64 {
	le := binary.LittleEndian
	switch t {
	case collectives.Float8E4M3:
		return float64(fp8.E4M3ToFloat32(b[0]))
	case collectives.Float8E5M2:
		return float64(fp8.E5M2ToFloat32(b[0]))
	case collectives.Float16:
		return float64(half.Float16ToFloat32(le.Uint16(b)))
	case collectives.BFloat16:
		return float64(half.BFloat16ToFloat32(le.Uint16(b)))
	case collectives.Float32:
		return float64(math.Float32frombits(le.Uint32(b)))
	}
	return math.Float64frombits(le.Uint64(b))
}

func putFloat(t collectives.DataType, b []byte, v float64) {
	le := binary.LittleEndian
	switch t {
	case collectives.Float8E4M3:
		b[0] = fp8.Float32ToE4M3(float32(v))
	case collectives.Float8E5M2:
		b[0] = fp8.Float32ToE5M2(float32(v))
	case collectives.Float16:
		le.PutUint16(b, half.Float32ToFloat16(float32(v)))
	case collectives.BFloat16:
		le.PutUint16(b, half.Float32ToBFloat16(float32(v)))
	case collectives.Float32:
		le.PutUint32(b, math.Float32bits(float32(v)))
	default:
		le.PutUint64(b, math.Float64bits(v))
	}
}

// refReduce is the documented arithmetic written out element by element:
// floats accumulate in float32 (float64 for Float64) in source order and
// round once.
func refReduce(t collectives.DataType, op collectives.Op, srcs [][]byte, nranks int) []byte {
	es := t.Size()
	n := len(srcs[0]) / es
	out := make([]byte, len(srcs[0]))
	r32 := func(v float64) float64 {
		if t == collectives.Float64 {
			return v
		}
		return float64(float32(v))
	}
	for i := 0; i < n; i++ {
		{
			var acc float64
			for k, src := range srcs {
				x := elemFloat(t, src[i*es:])
				switch {
				case k == 0:
					acc = x
				case op == collectives.Sum || op == collectives.Avg:
					acc = r32(acc + x)
				case op == collectives.Prod:
					acc = r32(acc * x)
				case op == collectives.Min:
					if x < acc {
						acc = x
					}
				case op == collectives.Max:
					if x > acc {
						acc = x
					}
				}
			}
			if op == collectives.Avg {
				acc = r32(acc / float64(nranks))
			}
			putFloat(t, out[i*es:], acc)
			continue
		}
	}
	return out
}

func fp8Specials(rng *rand.Rand, t collectives.DataType, count int) []byte {
	b := make([]byte, count*t.Size())
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	if t.IsFloat8() { // zeros, NaNs, the extremes
		for i := range b {
			if rng.IntN(8) == 0 {
				b[i] = []byte{0x00, 0x80, 0x7f, 0xff, 0x7e, 0xfe, 0x7b, 0x7c, 0xfc, 0x01}[rng.IntN(10)]
			}
		}
	}
	return b
}

func sameElems(t *testing.T, dt collectives.DataType, want, got []byte, what string) {
	t.Helper()
	es := dt.Size()
	for i := 0; i < len(want)/es; i++ {
		w, g := want[i*es:(i+1)*es], got[i*es:(i+1)*es]
		if dt.IsFloat() && math.IsNaN(elemFloat(dt, w)) {
			require.True(t, math.IsNaN(elemFloat(dt, g)), "%s: element %d: want NaN, got %x", what, i, g)
			continue
		}
		require.Equal(t, w, g, "%s: element %d", what, i)
	}
}

func TestFP8Reductions(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, dt := range []collectives.DataType{collectives.Float8E4M3, collectives.Float8E5M2} {
		for _, op := range collectives.AllOps() {
			for _, nsrc := range []int{2, 3, 5, 8} {
				for _, count := range []int{1, 7, blk + 5} {
					srcs := make([][]byte, nsrc)
					for k := range srcs {
						srcs[k] = fp8Specials(rng, dt, count)
					}
					want := refReduce(dt, op, srcs, nsrc)
					got := make([]byte, count)
					for i := range got {
						got[i] = 0xa5 // poison
					}
					reducer(dt, op)(got, srcs, nsrc, &scratch{})
					sameElems(t, dt, want, got, dt.String()+" "+op.String())
				}
			}
		}
	}
}

// scaledArgs scales this rank's input, by value or by address, into a
// Sum of the products rounded to the type; the reference takes each
// product in float64 (exact for these inputs), rounds it to float32 (a
// correctly rounded float32 product is that) and then to the type.
func TestPreMulSumScalesInput(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, dt := range collectives.AllDataTypes() {
		for _, v := range []float64{0.5, -3, 1.0 / 3} {
			s, err := collectives.ScalarOf(dt, v)
			require.NoError(t, err)
			for _, byAddr := range []bool{false, true} {
				for _, count := range []int{1, 9, blk + 3} {
					in := fp8Specials(rng, dt, count)
					a := &collectives.Args{Coll: collectives.AllReduce, Op: collectives.PreMulSum, Type: dt, Count: count,
						Send: uintptr(unsafe.Pointer(&in[0])), Scalar: s}
					bits := []uint64{s.Bits}
					if byAddr {
						a.Scalar = collectives.ScalarAt(addr64(bits))
					}
					var p premul
					sa := scaledArgs(&p, a, 3)
					runtime.KeepAlive(bits)
					require.Equal(t, collectives.Sum, sa.Op)
					require.Equal(t, collectives.PreMulSum, a.Op, "the caller's Args are left alone")
					got := hostBytes(sa.Send, count*dt.Size())
					es := dt.Size()
					want := make([]byte, len(got))
					sf := s.Float(dt)
					for i := 0; i < count; i++ {
						if dt.IsFloat() {
							prod := elemFloat(dt, in[i*es:]) * sf
							if dt != collectives.Float64 {
								prod = float64(float32(prod))
							}
							putFloat(dt, want[i*es:], prod)
							continue
						}
						var w [8]byte
						copy(w[:], in[i*es:(i+1)*es])
						binary.LittleEndian.PutUint64(w[:], binary.LittleEndian.Uint64(w[:])*s.Bits)
						copy(want[i*es:], w[:es])
					}
					sameElems(t, dt, want, got, dt.String()+" mulsum")
				}
			}
		}
	}
}

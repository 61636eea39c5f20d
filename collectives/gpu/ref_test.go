package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/fp8"
	"github.com/goccl/goccl/internal/half"
)

// Reference arithmetic for the GPU tests, independent of the kernels:
// integers as wrapped two's-complement values, floats in float64.

func isSigned(t collectives.DataType) bool {
	return t == collectives.Int8 || t == collectives.Int32 || t == collectives.Int64
}

// getInt reads element i as a sign- or zero-extended integer.
func getInt(t collectives.DataType, b []byte, i int) int64 {
	switch t {
	case collectives.Int8:
		return int64(int8(b[i]))
	case collectives.Uint8:
		return int64(b[i])
	case collectives.Int32:
		return int64(int32(binary.LittleEndian.Uint32(b[4*i:])))
	case collectives.Uint32:
		return int64(binary.LittleEndian.Uint32(b[4*i:]))
	default:
		return int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
}

func putInt(t collectives.DataType, b []byte, i int, v int64) {
	switch t.Size() {
	case 1:
		b[i] = byte(v)
	case 4:
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	default:
		binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
	}
}

func getFloat(t collectives.DataType, b []byte, i int) float64 {
	switch t {
	case collectives.Float16:
		return float64(half.Float16ToFloat32(binary.LittleEndian.Uint16(b[2*i:])))
	case collectives.BFloat16:
		return float64(half.BFloat16ToFloat32(binary.LittleEndian.Uint16(b[2*i:])))
	case collectives.Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	case collectives.Float8E4M3:
		return float64(fp8.E4M3ToFloat32(b[i]))
	case collectives.Float8E5M2:
		return float64(fp8.E5M2ToFloat32(b[i]))
	default:
		return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
}

func putFloat(t collectives.DataType, b []byte, i int, v float64) {
	switch t {
	case collectives.Float16:
		binary.LittleEndian.PutUint16(b[2*i:], half.Float32ToFloat16(float32(v)))
	case collectives.BFloat16:
		binary.LittleEndian.PutUint16(b[2*i:], half.Float32ToBFloat16(float32(v)))
	case collectives.Float32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	case collectives.Float8E4M3:
		b[i] = fp8.Float32ToE4M3(float32(v))
	case collectives.Float8E5M2:
		b[i] = fp8.Float32ToE5M2(float32(v))
	default:
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
	}
}

// fill writes random values suited to op (products stay finite).
func fill(rng *rand.Rand, t collectives.DataType, op collectives.Op, b []byte) {
	n := len(b) / t.Size()
	for i := 0; i < n; i++ {
		if t.IsFloat() {
			v := rng.Float64()*2 - 1
			if op == collectives.Prod {
				v = 0.5 + rng.Float64()
			}
			putFloat(t, b, i, v)
		} else {
			putInt(t, b, i, int64(rng.Uint64()))
		}
	}
}

// wrap truncates v to t's width with t's signedness.
func wrap(t collectives.DataType, v int64) int64 {
	var b [8]byte
	putInt(t, b[:], 0, v)
	return getInt(t, b[:], 0)
}

// reduceRef reduces element i of every input.
func reduceInt(t collectives.DataType, op collectives.Op, ins [][]byte, off, i int) int64 {
	acc := getInt(t, ins[0][off:], i)
	for _, in := range ins[1:] {
		v := getInt(t, in[off:], i)
		switch op {
		case collectives.Sum, collectives.Avg:
			acc = wrap(t, acc+v)
		case collectives.Prod:
			acc = wrap(t, int64(uint64(acc)*uint64(v)))
		case collectives.Min:
			if less(t, v, acc) {
				acc = v
			}
		case collectives.Max:
			if less(t, acc, v) {
				acc = v
			}
		}
	}
	if op == collectives.Avg {
		if isSigned(t) {
			acc = acc / int64(len(ins))
		} else {
			acc = int64(uint64(acc) / uint64(len(ins)))
		}
		acc = wrap(t, acc)
	}
	return acc
}

func less(t collectives.DataType, a, b int64) bool {
	if isSigned(t) {
		return a < b
	}
	return uint64(a) < uint64(b)
}

func reduceFloat(t collectives.DataType, op collectives.Op, ins [][]byte, off, i int) float64 {
	acc := getFloat(t, ins[0][off:], i)
	for _, in := range ins[1:] {
		v := getFloat(t, in[off:], i)
		switch op {
		case collectives.Sum, collectives.Avg:
			acc += v
		case collectives.Prod:
			acc *= v
		case collectives.Min:
			acc = math.Min(acc, v)
		case collectives.Max:
			acc = math.Max(acc, v)
		}
	}
	if op == collectives.Avg {
		acc /= float64(len(ins))
	}
	return acc
}

func tolerance(t collectives.DataType, nranks int) float64 {
	switch t {
	case collectives.Float16:
		return 2e-3 * float64(nranks)
	case collectives.BFloat16:
		return 1.6e-2 * float64(nranks)
	case collectives.Float32:
		return 1e-6 * float64(nranks)
	case collectives.Float8E4M3: // one rounding of an exact float32 result: half of 2^-3
		return 1.0/16 + 1e-6
	case collectives.Float8E5M2: // half of 2^-2
		return 1.0/8 + 1e-6
	}
	return 1e-13 * float64(nranks)
}

// checkReduced compares got[0:count] with the reduction of ins at element
// offset off; returns a description of the first mismatch.
func checkReduced(t collectives.DataType, op collectives.Op, ins [][]byte, off int, got []byte, count int) error {
	boff := off * t.Size()
	for i := 0; i < count; i++ {
		if t.IsFloat() {
			want := reduceFloat(t, op, ins, boff, i)
			g := getFloat(t, got, i)
			// (A NaN compares false: it must be asked for.)
			if math.IsNaN(g) != math.IsNaN(want) || math.Abs(g-want) > tolerance(t, len(ins))*math.Max(1, math.Abs(want)) {
				return fmt.Errorf("element %d: got %v want %v", i, g, want)
			}
		} else {
			want := reduceInt(t, op, ins, boff, i)
			if g := getInt(t, got, i); g != want {
				return fmt.Errorf("element %d: got %d want %d", i, g, want)
			}
		}
	}
	return nil
}

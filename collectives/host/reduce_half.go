package host

import (
	"math"
	"unsafe"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/half"
)

// Half types (float16, bfloat16) are widened to float32, reduced there
// across all ranks, and rounded once per output element.

func setHalf(t collectives.DataType, widen func([]float32, []uint16), narrow func([]uint16, []float32)) {
	kernels[t][collectives.Sum] = halfReduce(widen, narrow, sumIn[float32], false)
	kernels[t][collectives.Prod] = halfReduce(widen, narrow, prodIn[float32], false)
	kernels[t][collectives.Min] = halfReduce(widen, narrow, minIn[float32], false)
	kernels[t][collectives.Max] = halfReduce(widen, narrow, maxIn[float32], false)
	kernels[t][collectives.Avg] = halfReduce(widen, narrow, sumIn[float32], true)
}

func halfReduce(widen func([]float32, []uint16), narrow func([]uint16, []float32), in func(d, x []float32), avg bool) reduceFunc {
	return func(dst []byte, srcs [][]byte, nranks int, sc *scratch) {
		d := as[uint16](dst)
		for lo := 0; lo < len(d); lo += blk {
			hi := min(lo+blk, len(d))
			acc, t := sc.fa[:hi-lo], sc.fb[:hi-lo]
			widen(acc, as[uint16](srcs[0])[lo:hi])
			for k := 1; k < len(srcs); k++ {
				widen(t, as[uint16](srcs[k])[lo:hi])
				in(acc, t)
			}
			if avg {
				divBy(acc, nranks)
			}
			narrow(d[lo:hi], acc)
		}
	}
}

// The float16 conversions are branch-light versions of internal/half's
// (same results, checked by TestHalfConversionsMatch): the common, normal
// case takes one predictable branch.

func widenF16(d []float32, s []uint16) {
	d = d[:len(s)]
	for i, h := range s {
		d[i] = f16to32(h)
	}
}

func f16to32(h uint16) float32 {
	const shiftedExp = 0x7c00 << 13
	o := uint32(h&0x7fff) << 13
	exp := o & shiftedExp
	o += (127 - 15) << 23
	switch exp {
	case shiftedExp: // Inf or NaN: exponent all ones
		o += (128 - 16) << 23
	case 0: // zero or subnormal: renormalize through a float subtract
		o += 1 << 23
		o = math.Float32bits(math.Float32frombits(o) - math.Float32frombits(113<<23))
	}
	return math.Float32frombits(o | uint32(h&0x8000)<<16)
}

func narrowF16(d []uint16, s []float32) {
	d = d[:len(s)]
	for i, f := range s {
		d[i] = f32to16(f)
	}
}

func f32to16(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	u &= 0x7fffffff
	switch {
	case u >= (127+16)<<23: // overflow, Inf or NaN
		if u > 0x7f800000 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case u < 113<<23: // subnormal or zero in binary16: let the FPU round
		const magic = ((127 - 15) + (23 - 10) + 1) << 23
		v := math.Float32bits(math.Float32frombits(u) + math.Float32frombits(magic))
		return sign | uint16(v-magic)
	}
	odd := (u >> 13) & 1
	u = u - (127-15)<<23 + 0xfff + odd // rebias the exponent, round to nearest even
	return sign | uint16(u>>13)
}

func widenBF16(d []float32, s []uint16) {
	d = d[:len(s)]
	for i, v := range s {
		d[i] = half.BFloat16ToFloat32(v)
	}
}

func narrowBF16(d []uint16, s []float32) {
	d = d[:len(s)]
	for i, v := range s {
		d[i] = half.Float32ToBFloat16(v)
	}
}

// asBytes views a uint64 slice as bytes (for the generic accumulators).
func asBytes(w []uint64) []byte {
	if len(w) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), len(w)*8)
}

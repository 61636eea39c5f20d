package host

import (
	"encoding/binary"

	"github.com/goccl/goccl/collectives"
)

// PreMulSum: every source element is multiplied by the call's scalar, in
// the type's arithmetic, before the sum: floats in float32 (float64 for
// Float64) and rounded once at the end, integers in their own wrapping
// arithmetic. Every source is a rank's own input (the algorithms reduce
// nothing twice), so multiplying each one is exact NCCL semantics.

// premul is the scalar of the call being run, set by setScalar.
type premul struct {
	f32 float32
	f64 float64
	u   uint64 // the integer types: the value, truncated by each kernel
}

// setScalar resolves a's scalar for the reduction kernels: by value, or
// read from host memory now (the host backend runs calls synchronously,
// so "when the call runs" is now).
func setScalar(p *premul, a *collectives.Args) {
	if a.Op != collectives.PreMulSum || !a.Coll.Reduces() {
		return
	}
	bits := a.Scalar.Bits
	if a.Scalar.Ptr != 0 {
		var w [8]byte
		copy(w[:], hostBytes(a.Scalar.Ptr, a.Type.Size()))
		bits = binary.LittleEndian.Uint64(w[:])
	}
	s := collectives.Scalar{Bits: bits}
	p.u = bits
	p.f64 = s.Float(a.Type)
	p.f32 = float32(p.f64)
}

func setPreMulSum() {
	kernels[collectives.Int8][collectives.PreMulSum] = premulInt[int8]
	kernels[collectives.Uint8][collectives.PreMulSum] = premulInt[uint8]
	kernels[collectives.Int32][collectives.PreMulSum] = premulInt[int32]
	kernels[collectives.Uint32][collectives.PreMulSum] = premulInt[uint32]
	kernels[collectives.Int64][collectives.PreMulSum] = premulInt[int64]
	kernels[collectives.Uint64][collectives.PreMulSum] = premulInt[uint64]
	kernels[collectives.Float32][collectives.PreMulSum] = premulF32
	kernels[collectives.Float64][collectives.PreMulSum] = premulF64
	kernels[collectives.Float16][collectives.PreMulSum] = premulWide(widenF16, narrowF16)
	kernels[collectives.BFloat16][collectives.PreMulSum] = premulWide(widenBF16, narrowBF16)
	kernels[collectives.Float8E4M3][collectives.PreMulSum] = premulFP8(e4m3)
	kernels[collectives.Float8E5M2][collectives.PreMulSum] = premulFP8(e5m2)
}

// premulInt: d = s*x0 + s*x1 + ... with T's wrapping product and sum.
func premulInt[T ~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64](dst []byte, srcs [][]byte, _ int, sc *scratch) {
	s := T(sc.mul.u)
	d := as[T](dst)
	x := as[T](srcs[0])[:len(d)]
	for i, v := range x {
		d[i] = v * s
	}
	for k := 1; k < len(srcs); k++ {
		x := as[T](srcs[k])[:len(d)]
		for i, v := range x {
			d[i] += v * s
		}
	}
}

// The float forms convert each product to its type explicitly, so that
// the compiler fuses no multiply-add: the same bits on every machine.
func premulF32(dst []byte, srcs [][]byte, _ int, sc *scratch) {
	s := sc.mul.f32
	d := as[float32](dst)
	x := as[float32](srcs[0])[:len(d)]
	for i, v := range x {
		d[i] = float32(v * s)
	}
	for k := 1; k < len(srcs); k++ {
		x := as[float32](srcs[k])[:len(d)]
		for i, v := range x {
			d[i] += float32(v * s)
		}
	}
}

func premulF64(dst []byte, srcs [][]byte, _ int, sc *scratch) {
	s := sc.mul.f64
	d := as[float64](dst)
	x := as[float64](srcs[0])[:len(d)]
	for i, v := range x {
		d[i] = float64(v * s)
	}
	for k := 1; k < len(srcs); k++ {
		x := as[float64](srcs[k])[:len(d)]
		for i, v := range x {
			d[i] += float64(v * s)
		}
	}
}

// scaleIn is acc[i] += x[i]*s in float32.
func scaleIn(acc, x []float32, s float32) {
	x = x[:len(acc)]
	for i, v := range x {
		acc[i] += float32(v * s)
	}
}

func scale(acc []float32, s float32) {
	for i, v := range acc {
		acc[i] = float32(v * s)
	}
}

func premulWide(widen func([]float32, []uint16), narrow func([]uint16, []float32)) reduceFunc {
	return func(dst []byte, srcs [][]byte, _ int, sc *scratch) {
		s := sc.mul.f32
		d := as[uint16](dst)
		for lo := 0; lo < len(d); lo += blk {
			hi := min(lo+blk, len(d))
			acc, t := sc.fa[:hi-lo], sc.fb[:hi-lo]
			widen(acc, as[uint16](srcs[0])[lo:hi])
			scale(acc, s)
			for k := 1; k < len(srcs); k++ {
				widen(t, as[uint16](srcs[k])[lo:hi])
				scaleIn(acc, t, s)
			}
			narrow(d[lo:hi], acc)
		}
	}
}

func premulFP8(f fp8Format) reduceFunc {
	return func(dst []byte, srcs [][]byte, _ int, sc *scratch) {
		s := sc.mul.f32
		for lo := 0; lo < len(dst); lo += blk {
			hi := min(lo+blk, len(dst))
			acc, t := sc.fa[:hi-lo], sc.fb[:hi-lo]
			f.widenTo(acc, srcs[0][lo:hi])
			scale(acc, s)
			for k := 1; k < len(srcs); k++ {
				f.widenTo(t, srcs[k][lo:hi])
				scaleIn(acc, t, s)
			}
			f.narrowTo(dst[lo:hi], acc)
		}
	}
}

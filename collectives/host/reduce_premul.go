package host

import (
	"encoding/binary"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/half"
)

// PreMulSum, as NCCL defines it: each rank multiplies its own input by
// its own scalar, the products are rounded to the type, and the rounded
// products are summed like any Sum. The product is taken in the type's
// arithmetic: float32 for the float types (float64 for Float64), the
// type's wrapping product for integers. So a call scales this rank's send
// buffer into scratch and runs as a Sum of that (scaledArgs); ranks may
// pass different scalars.

// premul is the scalar of the call being run and the scaled input.
type premul struct {
	f32 float32
	f64 float64
	u   uint64 // the integer types: the value, truncated by each kernel
	buf []byte // the scaled input, grown as needed and kept
}

// scaledArgs returns a for any op but PreMulSum. For PreMulSum it scales
// this rank's input into p.buf and returns a copy of a that sums it: the
// scalar by value, or read from host memory now (the host backend runs
// calls synchronously, so "when the call runs" is now).
func scaledArgs(p *premul, a *collectives.Args, nranks int) *collectives.Args {
	if a.Op != collectives.PreMulSum || !a.Coll.Reduces() || a.Count == 0 {
		return a
	}
	p.set(scalarBits(a), a.Type)
	n := a.SendBytes(nranks)
	if cap(p.buf) < n {
		p.buf = make([]byte, n)
	}
	p.buf = p.buf[:n]
	scalers[a.Type](p.buf, hostBytes(a.Send, n), p)
	sa := *a
	sa.Send, sa.Op = addrOf(p.buf), collectives.Sum
	return &sa
}

// scalarBits is a's scalar as bits: by value, or read from host memory
// now (the host backend runs calls synchronously, so "when the call runs"
// is now).
func scalarBits(a *collectives.Args) uint64 {
	if a.Scalar.Ptr == 0 {
		return a.Scalar.Bits
	}
	var w [8]byte
	copy(w[:], hostBytes(a.Scalar.Ptr, a.Type.Size()))
	return binary.LittleEndian.Uint64(w[:])
}

// set makes p's scalar bits, a value of t.
func (p *premul) set(bits uint64, t collectives.DataType) {
	p.u = bits
	p.f64 = collectives.Scalar{Bits: bits}.Float(t)
	p.f32 = float32(p.f64)
}

// scalers[t] sets dst = src*scalar element by element.
var scalers = [collectives.NumDataTypes]func(dst, src []byte, p *premul){
	collectives.Int8:       scaleInt[int8],
	collectives.Uint8:      scaleInt[uint8],
	collectives.Int32:      scaleInt[int32],
	collectives.Uint32:     scaleInt[uint32],
	collectives.Int64:      scaleInt[int64],
	collectives.Uint64:     scaleInt[uint64],
	collectives.Float32:    scaleF32,
	collectives.Float64:    scaleF64,
	collectives.Float16:    func(d, s []byte, p *premul) { scaleHalf(d, s, p, f16to32, f32to16) },
	collectives.BFloat16:   func(d, s []byte, p *premul) { scaleHalf(d, s, p, half.BFloat16ToFloat32, half.Float32ToBFloat16) },
	collectives.Float8E4M3: func(d, s []byte, p *premul) { scaleFP8(d, s, p, e4m3) },
	collectives.Float8E5M2: func(d, s []byte, p *premul) { scaleFP8(d, s, p, e5m2) },
}

func scaleInt[T ~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64](dst, src []byte, p *premul) {
	s := T(p.u)
	d, x := as[T](dst), as[T](src)
	d = d[:len(x)]
	for i, v := range x {
		d[i] = v * s
	}
}

// The float forms convert each product to its type explicitly, so that
// the compiler fuses nothing with it.
func scaleF32(dst, src []byte, p *premul) {
	d, x := as[float32](dst), as[float32](src)
	d = d[:len(x)]
	for i, v := range x {
		d[i] = float32(v * p.f32)
	}
}

func scaleF64(dst, src []byte, p *premul) {
	d, x := as[float64](dst), as[float64](src)
	d = d[:len(x)]
	for i, v := range x {
		d[i] = float64(v * p.f64)
	}
}

func scaleHalf(dst, src []byte, p *premul, widen func(uint16) float32, narrow func(float32) uint16) {
	d, x := as[uint16](dst), as[uint16](src)
	d = d[:len(x)]
	for i, v := range x {
		d[i] = narrow(float32(widen(v) * p.f32))
	}
}

func scaleFP8(dst, src []byte, p *premul, f fp8Format) {
	if !scaleFP8Vec(fp8ISA, f, dst, src, p.f32) {
		scaleFP8Go(dst, src, p.f32, f)
	}
}

// scaleFP8Go is the Go form of scaleFP8, the vector one's reference.
func scaleFP8Go(dst, src []byte, c float32, f fp8Format) {
	var w [blk]float32
	for lo := 0; lo < len(src); lo += blk {
		hi := min(lo+blk, len(src))
		t := w[:hi-lo]
		f.widenTo(t, src[lo:hi])
		scale(t, c)
		f.narrowTo(dst[lo:hi], t)
	}
}

func scale(d []float32, s float32) {
	for i, v := range d {
		d[i] = float32(v * s)
	}
}

package host

import (
	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/fp8"
)

// The 8-bit float types are widened to float32 (exactly, by table),
// reduced there across all ranks in rank order, and rounded once per
// output element, saturating to the largest finite value as the GPU's
// conversions do (internal/fp8).

// fp8Format is one 8-bit float type: its widening table, and which
// narrowing (the loops test it once, outside the element loop).
type fp8Format struct {
	table *[256]float32
	e5m2  bool
}

var (
	e4m3 = fp8Format{fp8.E4M3Table(), false}
	e5m2 = fp8Format{fp8.E5M2Table(), true}
)

func fp8FormatOf(t collectives.DataType) fp8Format {
	if t == collectives.Float8E5M2 {
		return e5m2
	}
	return e4m3
}

func setFP8(t collectives.DataType) {
	f := fp8FormatOf(t)
	kernels[t][collectives.Sum] = fp8Reduce(f, sumIn[float32], false)
	kernels[t][collectives.Prod] = fp8Reduce(f, prodIn[float32], false)
	kernels[t][collectives.Min] = fp8Reduce(f, minIn[float32], false)
	kernels[t][collectives.Max] = fp8Reduce(f, maxIn[float32], false)
	kernels[t][collectives.Avg] = fp8Reduce(f, sumIn[float32], true)
}

func (f fp8Format) widenTo(d []float32, s []uint8) {
	d = d[:len(s)]
	t := f.table
	for i, b := range s {
		d[i] = t[b]
	}
}

func (f fp8Format) narrowTo(d []uint8, s []float32) {
	d = d[:len(s)]
	if f.e5m2 {
		for i, v := range s {
			d[i] = fp8.Float32ToE5M2(v)
		}
		return
	}
	for i, v := range s {
		d[i] = fp8.Float32ToE4M3(v)
	}
}

func fp8Reduce(f fp8Format, in func(d, x []float32), avg bool) reduceFunc {
	return func(dst []byte, srcs [][]byte, nranks int, sc *scratch) {
		for lo := 0; lo < len(dst); lo += blk {
			hi := min(lo+blk, len(dst))
			acc, t := sc.fa[:hi-lo], sc.fb[:hi-lo]
			f.widenTo(acc, srcs[0][lo:hi])
			for k := 1; k < len(srcs); k++ {
				f.widenTo(t, srcs[k][lo:hi])
				in(acc, t)
			}
			if avg {
				divBy(acc, nranks)
			}
			f.narrowTo(dst[lo:hi], acc)
		}
	}
}

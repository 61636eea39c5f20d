package host

import (
	"github.com/goccl/goccl/collectives"
)

// A reduceFunc sets dst[i] = op(srcs[0][i], ..., srcs[k-1][i]) over the
// elements of dst (every source has dst's length; only srcs[0] may alias
// dst). nranks is the divisor of avg. Work goes in blocks of blk elements
// so that the destination block stays in L1 while each source streams
// through once.
type reduceFunc func(dst []byte, srcs [][]byte, nranks int, sc *scratch)

const blk = 2048

// scratch is per-backend working memory for the wide accumulators of
// half types and of integer averages.
type scratch struct {
	fa, fb [blk]float32
	w      [blk]uint64
	//lint:ignore U1000 only the vector kernels use it (amd64 with cgo, reduce_simd.go)
	ptrs []uintptr // the vector kernels' source addresses
	mul  premul    // PreMulSum's scalar (reduce_premul.go)
}

type native interface {
	~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// scalarKernels are the Go kernels, the reference of the vector ones;
// kernels are what runs: the vector kernels of the widest instruction set
// this CPU has, falling back to the Go ones for small calls.
var scalarKernels, kernels [collectives.NumDataTypes][collectives.NumOps]reduceFunc

func init() {
	setNative[int8](collectives.Int8)
	setNative[uint8](collectives.Uint8)
	setNative[int32](collectives.Int32)
	setNative[uint32](collectives.Uint32)
	setNative[int64](collectives.Int64)
	setNative[uint64](collectives.Uint64)
	setNative[float32](collectives.Float32)
	setNative[float64](collectives.Float64)
	kernels[collectives.Int8][collectives.Avg] = wideAvg[int8, int64]
	kernels[collectives.Uint8][collectives.Avg] = wideAvg[uint8, uint64]
	kernels[collectives.Int32][collectives.Avg] = wideAvg[int32, int64]
	kernels[collectives.Uint32][collectives.Avg] = wideAvg[uint32, uint64]
	kernels[collectives.Int64][collectives.Avg] = nativeReduce(sum2[int64], sumIn[int64], divBy[int64])
	kernels[collectives.Uint64][collectives.Avg] = nativeReduce(sum2[uint64], sumIn[uint64], divBy[uint64])
	kernels[collectives.Float32][collectives.Avg] = nativeReduce(sum2[float32], sumIn[float32], divBy[float32])
	kernels[collectives.Float64][collectives.Avg] = nativeReduce(sum2[float64], sumIn[float64], divBy[float64])
	kernels[collectives.Int8][collectives.Sum] = nativeReduce(sumBytes2, sumBytesIn, nil)
	kernels[collectives.Uint8][collectives.Sum] = kernels[collectives.Int8][collectives.Sum]
	setHalf(collectives.Float16, widenF16, narrowF16)
	setHalf(collectives.BFloat16, widenBF16, narrowBF16)
	setFP8(collectives.Float8E4M3)
	setFP8(collectives.Float8E5M2)
	scalarKernels = kernels
	kernels = kernelsFor(bestISA())
}

// kernelsFor is the kernel table of one instruction set.
func kernelsFor(isa int) (k [collectives.NumDataTypes][collectives.NumOps]reduceFunc) {
	for t := range scalarKernels {
		for op, f := range scalarKernels[t] {
			if f != nil {
				k[t][op] = vectorize(collectives.DataType(t), collectives.Op(op), isa, f)
			}
		}
	}
	return k
}

// reducer returns the kernel of (t, op); both have been validated.
func reducer(t collectives.DataType, op collectives.Op) reduceFunc { return kernels[t][op] }

func setNative[T native](t collectives.DataType) {
	kernels[t][collectives.Sum] = nativeReduce(sum2[T], sumIn[T], nil)
	kernels[t][collectives.Prod] = nativeReduce(prod2[T], prodIn[T], nil)
	kernels[t][collectives.Min] = nativeReduce(min2[T], minIn[T], nil)
	kernels[t][collectives.Max] = nativeReduce(max2[T], maxIn[T], nil)
}

func nativeReduce[T native](two func(d, x, y []T), in func(d, x []T), post func(d []T, n int)) reduceFunc {
	return func(dst []byte, srcs [][]byte, nranks int, _ *scratch) {
		d := as[T](dst)
		for lo := 0; lo < len(d); lo += blk {
			hi := min(lo+blk, len(d))
			two(d[lo:hi], as[T](srcs[0])[lo:hi], as[T](srcs[1])[lo:hi])
			for k := 2; k < len(srcs); k++ {
				in(d[lo:hi], as[T](srcs[k])[lo:hi])
			}
			if post != nil {
				post(d[lo:hi], nranks)
			}
		}
	}
}

// wideAvg averages 8- and 32-bit integers exactly: the sum is taken in 64
// bits, then divided (truncating, as NCCL does) and narrowed.
func wideAvg[T ~int8 | ~uint8 | ~int32 | ~uint32, W ~int64 | ~uint64](dst []byte, srcs [][]byte, nranks int, sc *scratch) {
	d := as[T](dst)
	for lo := 0; lo < len(d); lo += blk {
		hi := min(lo+blk, len(d))
		acc := as[W](asBytes(sc.w[:hi-lo]))
		s0 := as[T](srcs[0])[lo:hi]
		for i, v := range s0 {
			acc[i] = W(v)
		}
		for k := 1; k < len(srcs); k++ {
			s := as[T](srcs[k])[lo:hi]
			s = s[:len(acc)]
			for i, v := range s {
				acc[i] += W(v)
			}
		}
		dd := d[lo:hi]
		dd = dd[:len(acc)]
		n := W(nranks)
		for i, v := range acc {
			dd[i] = T(v / n)
		}
	}
}

func divBy[T native](d []T, n int) {
	m := T(n)
	for i := range d {
		d[i] /= m
	}
}

// The element loops: two-source form and accumulate form, per op. The
// reslicing lets the compiler drop bounds checks.

func sum2[T native](d, x, y []T) {
	y, d = y[:len(x)], d[:len(x)]
	i := 0
	for ; i+4 <= len(x); i += 4 {
		d[i] = x[i] + y[i]
		d[i+1] = x[i+1] + y[i+1]
		d[i+2] = x[i+2] + y[i+2]
		d[i+3] = x[i+3] + y[i+3]
	}
	for ; i < len(x); i++ {
		d[i] = x[i] + y[i]
	}
}

func sumIn[T native](d, x []T) {
	d = d[:len(x)]
	i := 0
	for ; i+4 <= len(x); i += 4 {
		d[i] += x[i]
		d[i+1] += x[i+1]
		d[i+2] += x[i+2]
		d[i+3] += x[i+3]
	}
	for ; i < len(x); i++ {
		d[i] += x[i]
	}
}

func prod2[T native](d, x, y []T) {
	y, d = y[:len(x)], d[:len(x)]
	for i := range x {
		d[i] = x[i] * y[i]
	}
}

func prodIn[T native](d, x []T) {
	d = d[:len(x)]
	for i := range x {
		d[i] *= x[i]
	}
}

func min2[T native](d, x, y []T) {
	y, d = y[:len(x)], d[:len(x)]
	for i := range x {
		a, b := x[i], y[i]
		if b < a {
			a = b
		}
		d[i] = a
	}
}

func minIn[T native](d, x []T) {
	d = d[:len(x)]
	for i := range x {
		if x[i] < d[i] {
			d[i] = x[i]
		}
	}
}

func max2[T native](d, x, y []T) {
	y, d = y[:len(x)], d[:len(x)]
	for i := range x {
		a, b := x[i], y[i]
		if b > a {
			a = b
		}
		d[i] = a
	}
}

func maxIn[T native](d, x []T) {
	d = d[:len(x)]
	for i := range x {
		if x[i] > d[i] {
			d[i] = x[i]
		}
	}
}

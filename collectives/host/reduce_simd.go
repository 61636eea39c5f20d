//go:build amd64 && cgo

package host

/*
#cgo CFLAGS: -O2 -fno-fast-math -fno-strict-aliasing -Wall
#include "reduce_simd.h"
*/
import "C"

import (
	"runtime"
	"unsafe"

	"github.com/klauspost/cpuid/v2"

	"github.com/goccl/goccl/collectives"
)

// The instruction sets of the vector kernels (reduce_simd.c).
const (
	isaScalar = 0 // the Go kernels only
	isaSSE2   = C.GR_SSE2
	isaAVX2   = C.GR_AVX2
	isaAVX512 = C.GR_AVX512
)

// vecMinBytes: below this a reduction stays in Go, where it costs less
// than the cgo call. The 8-bit floats' Go kernels cost several times
// more per byte, so theirs is lower.
const (
	vecMinBytes    = 512
	fp8VecMinBytes = 64
)

// bestISA is the widest instruction set this CPU and OS run.
func bestISA() int {
	switch {
	case cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VL, cpuid.AVX512DQ):
		return isaAVX512
	case cpuid.CPU.Supports(cpuid.AVX2):
		return isaAVX2
	}
	return isaSSE2 // the x86-64 baseline
}

// isas lists the instruction sets this machine can run, narrowest first
// (for tests and benchmarks).
func isas() []int {
	out := []int{isaScalar, isaSSE2}
	if b := bestISA(); b >= isaAVX2 {
		out = append(out, isaAVX2)
		if b == isaAVX512 {
			out = append(out, isaAVX512)
		}
	}
	return out
}

func isaName(isa int) string {
	return [...]string{"go", "sse2", "avx2", "avx512"}[isa]
}

// vecKernels maps (type, op) to a vector kernel, -1 where the Go kernel
// stays.
var vecKernels = func() (k [collectives.NumDataTypes][collectives.NumOps]int) {
	for t := range k {
		for o := range k[t] {
			k[t][o] = -1
		}
	}
	set := func(t collectives.DataType, sum, prod, mn, mx, avg int) {
		k[t] = [collectives.NumOps]int{collectives.Sum: sum, collectives.Prod: prod, collectives.Min: mn, collectives.Max: mx, collectives.Avg: avg,
			collectives.PreMulSum: -1}
	}
	set(collectives.Int8, C.GR_U8_SUM, C.GR_U8_PROD, C.GR_I8_MIN, C.GR_I8_MAX, C.GR_I8_AVG)
	set(collectives.Uint8, C.GR_U8_SUM, C.GR_U8_PROD, C.GR_U8_MIN, C.GR_U8_MAX, C.GR_U8_AVG)
	set(collectives.Int32, C.GR_U32_SUM, C.GR_U32_PROD, C.GR_I32_MIN, C.GR_I32_MAX, C.GR_I32_AVG)
	set(collectives.Uint32, C.GR_U32_SUM, C.GR_U32_PROD, C.GR_U32_MIN, C.GR_U32_MAX, C.GR_U32_AVG)
	set(collectives.Int64, C.GR_U64_SUM, C.GR_U64_PROD, C.GR_I64_MIN, C.GR_I64_MAX, C.GR_I64_AVG)
	set(collectives.Uint64, C.GR_U64_SUM, C.GR_U64_PROD, C.GR_U64_MIN, C.GR_U64_MAX, C.GR_U64_AVG)
	set(collectives.Float32, C.GR_F32_SUM, C.GR_F32_PROD, C.GR_F32_MIN, C.GR_F32_MAX, C.GR_F32_AVG)
	set(collectives.Float64, C.GR_F64_SUM, C.GR_F64_PROD, C.GR_F64_MIN, C.GR_F64_MAX, C.GR_F64_AVG)
	set(collectives.BFloat16, C.GR_BF16_SUM, C.GR_BF16_PROD, C.GR_BF16_MIN, C.GR_BF16_MAX, C.GR_BF16_AVG)
	set(collectives.Float16, C.GR_F16_SUM, C.GR_F16_PROD, C.GR_F16_MIN, C.GR_F16_MAX, C.GR_F16_AVG)
	set(collectives.Float8E4M3, C.GR_E4M3_SUM, C.GR_E4M3_PROD, C.GR_E4M3_MIN, C.GR_E4M3_MAX, C.GR_E4M3_AVG)
	set(collectives.Float8E5M2, C.GR_E5M2_SUM, C.GR_E5M2_PROD, C.GR_E5M2_MIN, C.GR_E5M2_MAX, C.GR_E5M2_AVG)
	return k
}()

// vectorize wraps the Go kernel of (t, op) with the vector kernel of isa
// where there is one; it runs calls of at least vecMinBytes with two or
// more sources.
func vectorize(t collectives.DataType, op collectives.Op, isa int, scalar reduceFunc) reduceFunc {
	kernel := vecKernels[t][op]
	if kernel < 0 || isa == isaScalar {
		return scalar
	}
	es := t.Size()
	minBytes := vecMinBytes
	if t.IsFloat8() {
		minBytes = fp8VecMinBytes
	}
	return func(dst []byte, srcs [][]byte, nranks int, sc *scratch) {
		if len(dst) < minBytes || len(srcs) < 2 {
			scalar(dst, srcs, nranks, sc)
			return
		}
		// Addresses, not Go pointers, cross into C: the sources are mapped
		// shared memory or the caller's buffers, all live for the call.
		ptrs := sc.ptrs[:0]
		for _, s := range srcs {
			ptrs = append(ptrs, uintptr(unsafe.Pointer(unsafe.SliceData(s))))
		}
		sc.ptrs = ptrs
		C.gr_reduce(C.int(isa), C.int(kernel), C.uintptr_t(uintptr(unsafe.Pointer(unsafe.SliceData(dst)))),
			(*C.uintptr_t)(unsafe.Pointer(unsafe.SliceData(ptrs))), C.int(len(srcs)), C.size_t(len(dst)/es), C.int(nranks))
		runtime.KeepAlive(dst)
		runtime.KeepAlive(srcs)
	}
}

// fp8ISA is the instruction set of scaleFP8Vec's callers.
var fp8ISA = bestISA()

// scaleFP8Vec sets dst to src's codes times c, as scaleFP8 does, with
// the vector conversions of isa; false where it leaves that to Go.
func scaleFP8Vec(isa int, f fp8Format, dst, src []byte, c float32) bool {
	if isa == isaScalar || len(src) < fp8VecMinBytes {
		return false
	}
	fn := C.GR_FP8_SCALE_E4M3
	if f.e5m2 {
		fn = C.GR_FP8_SCALE_E5M2
	}
	C.gr_fp8(C.int(isa), C.int(fn), C.uintptr_t(uintptr(unsafe.Pointer(unsafe.SliceData(dst)))),
		C.uintptr_t(uintptr(unsafe.Pointer(unsafe.SliceData(src)))), C.size_t(len(src)), C.float(c))
	runtime.KeepAlive(dst)
	runtime.KeepAlive(src)
	return true
}

// narrowFP8Vec rounds src to codes in dst with the vector conversion of
// isa (the Go one for isaScalar): for tests of the rounding alone.
func narrowFP8Vec(isa int, f fp8Format, dst []byte, src []float32) {
	fn := C.GR_FP8_NARROW_E4M3
	if f.e5m2 {
		fn = C.GR_FP8_NARROW_E5M2
	}
	if isa == isaScalar || len(src) == 0 {
		f.narrowTo(dst, src)
		return
	}
	dst = dst[:len(src)]
	C.gr_fp8(C.int(isa), C.int(fn), C.uintptr_t(uintptr(unsafe.Pointer(unsafe.SliceData(dst)))),
		C.uintptr_t(uintptr(unsafe.Pointer(unsafe.SliceData(src)))), C.size_t(len(src)), 0)
	runtime.KeepAlive(dst)
	runtime.KeepAlive(src)
}

// copyISA is the instruction set of copyNT.
var copyISA = bestISA()

// copyNT copies src into dst (the same length, not overlapping) with
// stores that bypass the caches: for results the backend does not read
// again, large enough to push its staging out of the caches otherwise.
func copyNT(dst, src []byte) {
	if len(dst) < vecMinBytes {
		copy(dst, src)
		return
	}
	C.gr_copy_nt(C.int(copyISA), C.uintptr_t(uintptr(unsafe.Pointer(unsafe.SliceData(dst)))),
		C.uintptr_t(uintptr(unsafe.Pointer(unsafe.SliceData(src)))), C.size_t(len(src)))
	runtime.KeepAlive(dst)
	runtime.KeepAlive(src)
}

// reduceOut reduces n bytes of the sources at srcs (every rank's, in rank
// order) into every output at outs, through tmp chunk by chunk
// (gr_reduce_out), with stores around the caches when nt; false where
// (t, op) has no vector kernel or there are fewer than two sources, and
// the caller reduces in Go.
func reduceOut(t collectives.DataType, op collectives.Op, outs, srcs []uintptr, n, nranks int, tmp []byte, chunk int, flags int) bool {
	kernel := vecKernels[t][op]
	if kernel < 0 || copyISA == isaScalar || len(srcs) < 2 || n == 0 {
		return false
	}
	C.gr_reduce_out(C.int(copyISA), C.int(kernel),
		(*C.uintptr_t)(unsafe.Pointer(unsafe.SliceData(outs))), C.int(len(outs)),
		(*C.uintptr_t)(unsafe.Pointer(unsafe.SliceData(srcs))), C.int(len(srcs)),
		C.size_t(n), C.size_t(t.Size()), C.int(nranks), C.uintptr_t(uintptr(unsafe.Pointer(unsafe.SliceData(tmp)))),
		C.size_t(chunk), C.int(flags))
	runtime.KeepAlive(outs)
	runtime.KeepAlive(srcs)
	runtime.KeepAlive(tmp)
	return true
}

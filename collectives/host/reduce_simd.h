// The vector reduction kernels (reduce_simd.c), called from reduce_simd.go.
#include <stddef.h>
#include <stdint.h>

// Instruction sets.
enum { GR_SSE2 = 1, GR_AVX2 = 2, GR_AVX512 = 3 };

// Kernels: (lane type, op). Signed sums and products use the unsigned
// kernels, which wrap alike.
enum {
	GR_U8_SUM, GR_U32_SUM, GR_U64_SUM, GR_F32_SUM, GR_F64_SUM,
	GR_U8_PROD, GR_U32_PROD, GR_U64_PROD, GR_F32_PROD, GR_F64_PROD,
	GR_I8_MIN, GR_U8_MIN, GR_I32_MIN, GR_U32_MIN, GR_I64_MIN, GR_U64_MIN, GR_F32_MIN, GR_F64_MIN,
	GR_I8_MAX, GR_U8_MAX, GR_I32_MAX, GR_U32_MAX, GR_I64_MAX, GR_U64_MAX, GR_F32_MAX, GR_F64_MAX,
	GR_I64_AVG, GR_U64_AVG, GR_F32_AVG, GR_F64_AVG,
	GR_BF16_SUM, GR_BF16_PROD, GR_BF16_MIN, GR_BF16_MAX, GR_BF16_AVG,
	GR_F16_SUM, GR_F16_PROD, GR_F16_MIN, GR_F16_MAX, GR_F16_AVG,
	GR_I8_AVG, GR_U8_AVG, GR_I32_AVG, GR_U32_AVG,
	GR_E4M3_SUM, GR_E4M3_PROD, GR_E4M3_MIN, GR_E4M3_MAX, GR_E4M3_AVG,
	GR_E5M2_SUM, GR_E5M2_PROD, GR_E5M2_MIN, GR_E5M2_MAX, GR_E5M2_AVG,
	GR_NKERNELS
};

// gr_reduce sets dst[i] = op(srcs[0][i], ..., srcs[nsrc-1][i]) for n
// elements (nsrc >= 2; only srcs[0] may be dst), then for avg divides by
// nranks.
void gr_reduce(int isa, int kernel, uintptr_t dst, const uintptr_t *srcs, int nsrc, size_t n, int nranks);

// The 8-bit float conversions of gr_fp8: scale sets the n codes of dst
// to the codes of src times c (PreMulSum's products); narrow rounds n
// floats at src to codes (for tests).
enum { GR_FP8_SCALE_E4M3, GR_FP8_SCALE_E5M2, GR_FP8_NARROW_E4M3, GR_FP8_NARROW_E5M2 };

void gr_fp8(int isa, int fn, uintptr_t dst, uintptr_t src, size_t n, float c);

// gr_copy_nt copies n bytes from src to dst (not overlapping) with stores
// that bypass the caches, then fences them.
void gr_copy_nt(int isa, uintptr_t dst, uintptr_t src, size_t n);

// gr_reduce_out reduces nbytes (elements of es bytes) of the nsrc
// sources into outs[0..nout-1], chunk bytes at a time through tmp (chunk
// a multiple of 256 and of es): per chunk, gr_reduce into tmp, then tmp
// to every output, around the caches with GR_OUT_NT (fenced at the end),
// prefetching the next chunk's sources meanwhile with GR_OUT_PREFETCH.
enum { GR_OUT_NT = 1, GR_OUT_PREFETCH = 2 };

void gr_reduce_out(int isa, int kernel, const uintptr_t *outs, int nout, const uintptr_t *srcs, int nsrc,
                   size_t nbytes, size_t es, int nranks, uintptr_t tmp, size_t chunk, int flags);

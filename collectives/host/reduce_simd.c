//go:build amd64 && cgo

// Vector reduction kernels of the host backend, one copy per instruction
// set (SSE2, the x86-64 baseline; AVX2; AVX-512), chosen at run time.
//
// They must give exactly the scalar Go kernels' results: each output
// element is ((s0 op s1) op s2) op ... in rank order, one IEEE operation
// at a time (built with -ffp-contract=off and without -ffast-math, so no
// fused or reassociated arithmetic), min and max keep the scalar kernels'
// choice of operand (b < a ? b : a), and integer sums and products are
// computed unsigned, which wraps as Go's signed arithmetic does.

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <immintrin.h>

#include "reduce_simd.h"

// No fused multiply-add or other contraction, whatever the flags: the
// build's CFLAGS cannot carry -ffp-contract=off through cgo's allowlist.
// O3 lets the compiler vectorize the half types' conversion loops; it
// changes no floating-point semantics (that would take -ffast-math).
#pragma GCC optimize("O3", "fp-contract=off")
#if defined(__FAST_MATH__)
#error "reduce_simd.c must not be built with -ffast-math: results must match the Go kernels bit for bit"
#endif

// Elements of dst reduced per pass over the sources: 8 KiB of dst stays
// in L1 while each source streams through once.
#define BLOCK_BYTES 8192

#define LOAD(V, p) (*(const V *)(p))
#define STORE(V, p, v) (*(V *)(p) = (v))

// KERNELS defines, for one instruction set ISA (function attribute ATTR,
// vector bytes VS), one element type T (mask lane type M, name N), the
// two-source and accumulate loops of one op.
#define ARITH(ISA, ATTR, VS, T, N, OPN, OP)                                            \
	ATTR static void N##_##OPN##2_##ISA(T *d, const T *x, const T *y, size_t n) {      \
		typedef T V __attribute__((vector_size(VS), aligned(1), may_alias));          \
		const size_t w = VS / sizeof(T);                                               \
		size_t i = 0;                                                                  \
		for (; i + w <= n; i += w) {                                                   \
			V a = LOAD(V, x + i), b = LOAD(V, y + i);                                  \
			STORE(V, d + i, a OP b);                                                   \
		}                                                                              \
		for (; i < n; i++) d[i] = (T)(x[i] OP y[i]);                                  \
	}                                                                                  \
	ATTR static void N##_##OPN##in_##ISA(T *d, const T *x, size_t n) {                 \
		typedef T V __attribute__((vector_size(VS), aligned(1), may_alias));          \
		const size_t w = VS / sizeof(T);                                               \
		size_t i = 0;                                                                  \
		for (; i + w <= n; i += w) {                                                   \
			V a = LOAD(V, d + i), b = LOAD(V, x + i);                                  \
			STORE(V, d + i, a OP b);                                                   \
		}                                                                              \
		for (; i < n; i++) d[i] = (T)(d[i] OP x[i]);                                  \
	}

// Float sums and products: which NaN comes out of two NaN operands is the
// instruction's choice of operand (x86: the first), and compilers may swap
// the operands of a commutative op. The Go kernels give the first
// operand's NaN (x in the two-source form, d in the accumulate form), so
// the result is set to that NaN, quieted, wherever the first operand is
// one; elsewhere the operation's result stands.
#define FARITH(ISA, ATTR, VS, T, M, N, OPN, OP, QB)                                    \
	ATTR static inline T N##_##OPN##1_##ISA(T a, T b) {                                \
		T r = a OP b;                                                                  \
		if (a != a) {                                                                  \
			M bits;                                                                    \
			memcpy(&bits, &a, sizeof bits);                                            \
			bits |= (M)(QB);                                                           \
			memcpy(&r, &bits, sizeof r);                                               \
		}                                                                              \
		return r;                                                                      \
	}                                                                                  \
	ATTR static void N##_##OPN##2_##ISA(T *d, const T *x, const T *y, size_t n) {      \
		typedef T V __attribute__((vector_size(VS), aligned(1), may_alias));          \
		typedef M VM __attribute__((vector_size(VS), aligned(1), may_alias));         \
		const size_t w = VS / sizeof(T);                                               \
		size_t i = 0;                                                                  \
		for (; i + w <= n; i += w) {                                                   \
			V a = LOAD(V, x + i), b = LOAD(V, y + i);                                  \
			VM nan = (VM)(a != a);                                                     \
			VM r = (VM)(a OP b);                                                       \
			STORE(V, d + i, (V)((((VM)a | (M)(QB)) & nan) | (r & ~nan)));              \
		}                                                                              \
		for (; i < n; i++) d[i] = N##_##OPN##1_##ISA(x[i], y[i]);                      \
	}                                                                                  \
	ATTR static void N##_##OPN##in_##ISA(T *d, const T *x, size_t n) {                 \
		typedef T V __attribute__((vector_size(VS), aligned(1), may_alias));          \
		typedef M VM __attribute__((vector_size(VS), aligned(1), may_alias));         \
		const size_t w = VS / sizeof(T);                                               \
		size_t i = 0;                                                                  \
		for (; i + w <= n; i += w) {                                                   \
			V a = LOAD(V, d + i), b = LOAD(V, x + i);                                  \
			VM nan = (VM)(a != a);                                                     \
			VM r = (VM)(a OP b);                                                       \
			STORE(V, d + i, (V)((((VM)a | (M)(QB)) & nan) | (r & ~nan)));              \
		}                                                                              \
		for (; i < n; i++) d[i] = N##_##OPN##1_##ISA(d[i], x[i]);                      \
	}

// pick(a, b) = b CMP a ? b : a, lane by lane, through a compare mask.
#define PICK(ISA, ATTR, VS, T, M, N, OPN, CMP)                                         \
	ATTR static void N##_##OPN##2_##ISA(T *d, const T *x, const T *y, size_t n) {      \
		typedef T V __attribute__((vector_size(VS), aligned(1), may_alias));          \
		typedef M VM __attribute__((vector_size(VS), aligned(1), may_alias));         \
		const size_t w = VS / sizeof(T);                                               \
		size_t i = 0;                                                                  \
		for (; i + w <= n; i += w) {                                                   \
			V a = LOAD(V, x + i), b = LOAD(V, y + i);                                  \
			VM m = (VM)(b CMP a);                                                      \
			STORE(V, d + i, (V)(((VM)b & m) | ((VM)a & ~m)));                          \
		}                                                                              \
		for (; i < n; i++) d[i] = y[i] CMP x[i] ? y[i] : x[i];                         \
	}                                                                                  \
	ATTR static void N##_##OPN##in_##ISA(T *d, const T *x, size_t n) {                 \
		typedef T V __attribute__((vector_size(VS), aligned(1), may_alias));          \
		typedef M VM __attribute__((vector_size(VS), aligned(1), may_alias));         \
		const size_t w = VS / sizeof(T);                                               \
		size_t i = 0;                                                                  \
		for (; i + w <= n; i += w) {                                                   \
			V a = LOAD(V, d + i), b = LOAD(V, x + i);                                  \
			VM m = (VM)(b CMP a);                                                      \
			STORE(V, d + i, (V)(((VM)b & m) | ((VM)a & ~m)));                          \
		}                                                                              \
		for (; i < n; i++) d[i] = x[i] CMP d[i] ? x[i] : d[i];                         \
	}

// The driver of one (type, op): blocks of dst, sources in rank order
// through the loops of LN (on lanes of LT: integer sums and products run
// unsigned), and for avg a division by nranks of each finished element.
#define DRIVER(ISA, ATTR, T, N, OPN, LT, LN, LOOP, DIV)                                  \
	ATTR static void N##_##OPN##_##ISA(void *dv, const uintptr_t *srcs, int nsrc,        \
	                                   size_t n, int nranks) {                         \
		T *d = (T *)dv;                                                                \
		const size_t blk = BLOCK_BYTES / sizeof(T);                                    \
		for (size_t lo = 0; lo < n; lo += blk) {                                       \
			size_t m = n - lo < blk ? n - lo : blk;                                    \
			LN##_##LOOP##2_##ISA((LT *)(d + lo), (const LT *)((const T *)srcs[0] + lo), \
			                     (const LT *)((const T *)srcs[1] + lo), m);            \
			for (int k = 2; k < nsrc; k++)                                             \
				LN##_##LOOP##in_##ISA((LT *)(d + lo), (const LT *)((const T *)srcs[k] + lo), m); \
			DIV(T, d + lo, m, nranks);                                                 \
		}                                                                              \
	}

#define NODIV(T, d, m, n) ((void)0)
#define DIVBY(T, d, m, n)                                                              \
	do {                                                                               \
		T q = (T)(n);                                                                  \
		for (size_t j = 0; j < (m); j++) (d)[j] /= q;                                  \
	} while (0)


// The 16-bit float types: each block is widened to float32, reduced there
// across all sources with the float32 accumulate loops (the accumulator's
// NaN wins, as in the Go kernels), divided for avg, and narrowed once.
// The conversions are branch-free forms of the Go kernels' (reduce_half.go)
// with the same results, so that the compiler vectorizes them.

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

#define HALF_CONV(ISA, ATTR)                                                           \
	ATTR static void widen_bf16_##ISA(float *d, const uint16_t *s, size_t n) {         \
		for (size_t i = 0; i < n; i++) d[i] = u2f((uint32_t)s[i] << 16);               \
	}                                                                                  \
	ATTR static void narrow_bf16_##ISA(uint16_t *d, const float *s, size_t n) {        \
		for (size_t i = 0; i < n; i++) {                                               \
			uint32_t b = f2u(s[i]);                                                    \
			uint16_t nan = (uint16_t)((b >> 16) | 0x40);                               \
			uint16_t r = (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16);              \
			d[i] = (b & 0x7fffffff) > 0x7f800000 ? nan : r;                            \
		}                                                                              \
	}                                                                                  \
	ATTR static void widen_f16_##ISA(float *d, const uint16_t *s, size_t n) {          \
		const uint32_t shexp = 0x7c00u << 13;                                          \
		for (size_t i = 0; i < n; i++) {                                               \
			uint32_t h = s[i];                                                         \
			uint32_t o = (h & 0x7fff) << 13;                                           \
			uint32_t e = o & shexp;                                                    \
			o += (127 - 15) << 23;                                                     \
			uint32_t inf = o + ((128 - 16) << 23);                                     \
			uint32_t sub = f2u(u2f(o + (1u << 23)) - u2f(113u << 23));                 \
			o = e == shexp ? inf : (e == 0 ? sub : o);                                 \
			d[i] = u2f(o | (h & 0x8000) << 16);                                        \
		}                                                                              \
	}                                                                                  \
	ATTR static void narrow_f16_##ISA(uint16_t *d, const float *s, size_t n) {         \
		const uint32_t magic = ((127 - 15) + (23 - 10) + 1) << 23;                     \
		for (size_t i = 0; i < n; i++) {                                               \
			uint32_t u = f2u(s[i]);                                                    \
			uint16_t sign = (uint16_t)(u >> 16) & 0x8000;                              \
			u &= 0x7fffffff;                                                           \
			uint16_t big = u > 0x7f800000 ? 0x7e00 : 0x7c00;                           \
			uint16_t small = (uint16_t)(f2u(u2f(u) + u2f(magic)) - magic);             \
			uint16_t norm = (uint16_t)((u - ((127u - 15) << 23) + 0xfff + ((u >> 13) & 1)) >> 13); \
			uint16_t r = u >= (127u + 16) << 23 ? big : (u < 113u << 23 ? small : norm); \
			d[i] = sign | r;                                                           \
		}                                                                              \
	}

// A reduction of a type F narrower than float32 (elements of type ET):
// each block is widened to float32, reduced there, divided for avg and
// narrowed once.
#define WIDE_DRIVER(ISA, ATTR, F, ET, OPN, LOOP, AVG)                                    \
	ATTR static void F##_##OPN##_##ISA(void *dv, const uintptr_t *srcs, int nsrc,        \
	                                   size_t n, int nranks) {                         \
		enum { blk = BLOCK_BYTES / sizeof(float) };                                    \
		float acc[blk], t[blk];                                                        \
		ET *d = (ET *)dv;                                                              \
		for (size_t lo = 0; lo < n; lo += blk) {                                       \
			size_t m = n - lo < blk ? n - lo : blk;                                    \
			widen_##F##_##ISA(acc, (const ET *)srcs[0] + lo, m);                       \
			for (int k = 1; k < nsrc; k++) {                                           \
				widen_##F##_##ISA(t, (const ET *)srcs[k] + lo, m);                     \
				f32_##LOOP##in_##ISA(acc, t, m);                                       \
			}                                                                          \
			if (AVG) DIVBY(float, acc, m, nranks);                                     \
			narrow_##F##_##ISA(d + lo, acc, m);                                        \
		}                                                                              \
	}

// The five ops of such a type.
#define WIDE_OPS(ISA, ATTR, F, ET)                                                     \
	WIDE_DRIVER(ISA, ATTR, F, ET, sum, sum, 0)                                         \
	WIDE_DRIVER(ISA, ATTR, F, ET, prod, prod, 0)                                       \
	WIDE_DRIVER(ISA, ATTR, F, ET, min, min, 0)                                         \
	WIDE_DRIVER(ISA, ATTR, F, ET, max, max, 0)                                         \
	WIDE_DRIVER(ISA, ATTR, F, ET, avg, sum, 1)

// The 8-bit float types, as the 16-bit ones: each block is widened to
// float32, reduced there, divided for avg and narrowed once. Widening is
// bit arithmetic giving internal/fp8's table exactly (every NaN code
// becomes the positive quiet NaN, as there); subnormals are scaled by
// subtracting a power of two whose last mantissa bit is the format's
// smallest step. Narrowing is internal/fp8's: normals rebias the exponent
// and round the mantissa to nearest even, saturating at the largest
// finite value (infinities too); subnormals round by adding that power
// of two, which leaves the step count in the sum's low bits, rounded to
// nearest even by the addition itself; NaNs keep their sign.
#define E4M3_MAGIC (141u << 23) /* 2^14: its ulp is 2^-9, E4M3's step */
#define E5M2_MAGIC (134u << 23) /* 2^7: its ulp is 2^-16, E5M2's step */

// The conversions of one 8-bit float type F: vector loops over lanes of
// 32 bits (VS bytes), then the same arithmetic one element at a time.
// WIDEN(b) and NARROW(u) are the lane formulas, written once for both.
#define FP8_CONV1(ISA, ATTR, VS, F, WIDEN, NARROW)                                     \
	ATTR static void widen_##F##_##ISA(float *d, const uint8_t *s, size_t n) {         \
		typedef uint32_t VU __attribute__((vector_size(VS)));                          \
		typedef int32_t VI __attribute__((vector_size(VS)));                           \
		typedef float VF __attribute__((vector_size(VS)));                             \
		typedef float VFS __attribute__((vector_size(VS), aligned(1), may_alias));    \
		size_t i = 0;                                                                  \
		for (; i + VS / 4 <= n; i += VS / 4) {                                         \
			VU b = (VU)FP8_LOAD_##ISA(s + i);                                          \
			VU o;                                                                      \
			WIDEN(VU, VI, VF, b, o);                                                   \
			STORE(VFS, d + i, (VF)o);                                                  \
		}                                                                              \
		for (; i < n; i++) {                                                           \
			typedef uint32_t VU1 __attribute__((vector_size(4)));                     \
			typedef int32_t VI1 __attribute__((vector_size(4)));                      \
			typedef float VF1 __attribute__((vector_size(4)));                        \
			VU1 b = {s[i]}, o;                                                         \
			WIDEN(VU1, VI1, VF1, b, o);                                                \
			d[i] = u2f(o[0]);                                                          \
		}                                                                              \
	}                                                                                  \
	ATTR static void narrow_##F##_##ISA(uint8_t *d, const float *s, size_t n) {        \
		typedef uint32_t VU __attribute__((vector_size(VS)));                          \
		typedef int32_t VI __attribute__((vector_size(VS)));                           \
		typedef float VF __attribute__((vector_size(VS)));                             \
		typedef uint32_t VUS __attribute__((vector_size(VS), aligned(1), may_alias)); \
		size_t i = 0;                                                                  \
		for (; i + VS <= n; i += VS) {                                                 \
			VU u0 = LOAD(VUS, s + i), u1 = LOAD(VUS, s + i + VS / 4);                  \
			VU u2 = LOAD(VUS, s + i + VS / 2), u3 = LOAD(VUS, s + i + 3 * VS / 4);     \
			VU r0, r1, r2, r3;                                                         \
			NARROW(VU, VI, VF, u0, r0);                                                \
			NARROW(VU, VI, VF, u1, r1);                                                \
			NARROW(VU, VI, VF, u2, r2);                                                \
			NARROW(VU, VI, VF, u3, r3);                                                \
			FP8_STORE_##ISA(d + i, r0, r1, r2, r3);                                    \
		}                                                                              \
		for (; i < n; i++) {                                                           \
			typedef uint32_t VU1 __attribute__((vector_size(4)));                     \
			typedef int32_t VI1 __attribute__((vector_size(4)));                      \
			typedef float VF1 __attribute__((vector_size(4)));                        \
			VU1 u = {f2u(s[i])}, r;                                                    \
			NARROW(VU1, VI1, VF1, u, r);                                               \
			d[i] = (uint8_t)r[0];                                                      \
		}                                                                              \
	}

// FP8_LOAD_isa(p) zero-extends the bytes at p to the 32-bit lanes of one
// vector; FP8_STORE_isa(p, r0, r1, r2, r3) stores the low bytes of four
// vectors' lanes (each 0..255) in order. Compilers do neither well alone.
static inline __m128i FP8_LOAD_sse2(const uint8_t *p) {
	int32_t v;
	memcpy(&v, p, 4);
	__m128i z = _mm_setzero_si128();
	return _mm_unpacklo_epi16(_mm_unpacklo_epi8(_mm_cvtsi32_si128(v), z), z);
}
#define FP8_STORE_sse2(p, r0, r1, r2, r3)                                              \
	_mm_storeu_si128((__m128i *)(p), _mm_packus_epi16(_mm_packs_epi32((__m128i)(r0), (__m128i)(r1)), \
	                                                  _mm_packs_epi32((__m128i)(r2), (__m128i)(r3))))
#define FP8_LOAD_avx2(p) _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p)))
#define FP8_STORE_avx2(p, r0, r1, r2, r3)                                              \
	_mm256_storeu_si256((__m256i *)(p),                                                \
	                    _mm256_permutevar8x32_epi32(                                   \
	                        _mm256_packus_epi16(_mm256_packs_epi32((__m256i)(r0), (__m256i)(r1)), \
	                                            _mm256_packs_epi32((__m256i)(r2), (__m256i)(r3))), \
	                        _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)))
#define FP8_LOAD_avx512(p) _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p)))
#define FP8_STORE_avx512(p, r0, r1, r2, r3)                                            \
	do {                                                                               \
		_mm_storeu_si128((__m128i *)(p), _mm512_cvtepi32_epi8((__m512i)(r0)));         \
		_mm_storeu_si128((__m128i *)(p) + 1, _mm512_cvtepi32_epi8((__m512i)(r1)));     \
		_mm_storeu_si128((__m128i *)(p) + 2, _mm512_cvtepi32_epi8((__m512i)(r2)));     \
		_mm_storeu_si128((__m128i *)(p) + 3, _mm512_cvtepi32_epi8((__m512i)(r3)));     \
	} while (0)

// sel(m, x, y): x in the lanes where the compare mask m is set, else y.
#define SEL(VU, m, x, y) ((((VU)(m)) & (x)) | (~((VU)(m)) & (y)))

// E4M3: codes 0x08.. are normal (exponent bias 7, 3 mantissa bits), 0x7f
// the NaN. Narrowing: magnitudes from 2^-6 up are normal.
#define E4M3_WIDEN(VU, VI, VF, b, o)                                                   \
	do {                                                                               \
		VU m_ = (b) & 0x7f;                                                            \
		VU norm_ = (m_ << 20) + (120u << 23);                                          \
		VU sub_ = (VU)((VF)(m_ | E4M3_MAGIC) - u2f(E4M3_MAGIC));                       \
		VU v_ = SEL(VU, (VI)m_ >= 8, norm_, sub_) | ((b) & 0x80) << 24;                \
		(o) = SEL(VU, (VI)m_ == 0x7f, (VU){0} + 0x7fc00000u, v_);                      \
	} while (0)
#define E4M3_NARROW(VU, VI, VF, u, r)                                                  \
	do {                                                                               \
		VU a_ = (u) & 0x7fffffff;                                                      \
		VU v_ = a_ - (120u << 23);                                                     \
		VU norm_ = (v_ + ((1u << 19) - 1) + ((v_ >> 20) & 1)) >> 20;                   \
		norm_ = SEL(VU, (VI)norm_ > 0x7e, (VU){0} + 0x7e, norm_);                      \
		VU sub_ = (VU)((VF)a_ + u2f(E4M3_MAGIC)) - E4M3_MAGIC;                         \
		VU fin_ = SEL(VU, (VI)a_ < (int32_t)(121u << 23), sub_, norm_);                     \
		(r) = SEL(VU, (VI)a_ > 0x7f800000, (VU){0} + 0x7f, fin_) | (((u) >> 24) & 0x80); \
	} while (0)

// E5M2: codes 0x04.. are normal (bias 15, 2 mantissa bits), 0x7c the
// infinity, 0x7d..0x7f NaNs. Narrowing: magnitudes from 2^-14 up are normal.
#define E5M2_WIDEN(VU, VI, VF, b, o)                                                   \
	do {                                                                               \
		VU m_ = (b) & 0x7f;                                                            \
		VU norm_ = SEL(VU, (VI)m_ == 0x7c, (VU){0} + 0x7f800000u, (m_ << 21) + (112u << 23)); \
		VU sub_ = (VU)((VF)(m_ | E5M2_MAGIC) - u2f(E5M2_MAGIC));                       \
		VU v_ = SEL(VU, (VI)m_ >= 4, norm_, sub_) | ((b) & 0x80) << 24;                \
		(o) = SEL(VU, (VI)m_ > 0x7c, (VU){0} + 0x7fc00000u, v_);                       \
	} while (0)
#define E5M2_NARROW(VU, VI, VF, u, r)                                                  \
	do {                                                                               \
		VU a_ = (u) & 0x7fffffff;                                                      \
		VU v_ = a_ - (112u << 23);                                                     \
		VU norm_ = (v_ + ((1u << 20) - 1) + ((v_ >> 21) & 1)) >> 21;                   \
		norm_ = SEL(VU, (VI)norm_ > 0x7b, (VU){0} + 0x7b, norm_);                      \
		VU sub_ = (VU)((VF)a_ + u2f(E5M2_MAGIC)) - E5M2_MAGIC;                         \
		VU fin_ = SEL(VU, (VI)a_ < (int32_t)(113u << 23), sub_, norm_);                     \
		(r) = SEL(VU, (VI)a_ > 0x7f800000, (VU){0} + 0x7f, fin_) | (((u) >> 24) & 0x80); \
	} while (0)

// PreMulSum's scaling of one 8-bit float type F, through float32.
#define FP8_SCALE(ISA, ATTR, F)                                                        \
	ATTR static void scale_##F##_##ISA(uint8_t *d, const uint8_t *s, size_t n, float c) { \
		enum { blk = BLOCK_BYTES / sizeof(float) };                                    \
		float t[blk];                                                                  \
		for (size_t lo = 0; lo < n; lo += blk) {                                       \
			size_t m = n - lo < blk ? n - lo : blk;                                    \
			widen_##F##_##ISA(t, s + lo, m);                                           \
			for (size_t j = 0; j < m; j++) t[j] = t[j] * c;                            \
			narrow_##F##_##ISA(d + lo, t, m);                                          \
		}                                                                              \
	}

#define FP8_CONV(ISA, ATTR, VS)                                                        \
	FP8_CONV1(ISA, ATTR, VS, e4m3, E4M3_WIDEN, E4M3_NARROW)                            \
	FP8_CONV1(ISA, ATTR, VS, e5m2, E5M2_WIDEN, E5M2_NARROW)                            \
	FP8_SCALE(ISA, ATTR, e4m3)                                                         \
	FP8_SCALE(ISA, ATTR, e5m2)

#define FP8_ALL(ISA, ATTR, VS)                                                         \
	FP8_CONV(ISA, ATTR, VS)                                                            \
	WIDE_OPS(ISA, ATTR, e4m3, uint8_t)                                                 \
	WIDE_OPS(ISA, ATTR, e5m2, uint8_t)

// The 8- and 32-bit integer averages. The Go kernels divide the exact
// sum, taken in 64 bits, truncating. Here the sum is taken in float (8-bit
// lanes) or double (32-bit lanes), exact while it stays below 2^24 or 2^53
// in magnitude, which at most IAVG_F_SRCS or IAVG_D_SRCS sources
// guarantee; and the division rounds to nearest, which cannot cross an
// integer: s/n is an integer or at least 1/n from one, and the rounding
// error is below |s/n| 2^-24 (2^-53), less than 1/n while |s| < 2^24
// (2^53). Truncating the quotient then gives the integer quotient exactly.
// With more sources, or a divisor the float type does not hold exactly,
// the sums and divisions are 64-bit integer ones, as in Go. The quotient narrows to the lane type through 32 or 64 bits,
// wrapping as Go's conversion does.
#define IAVG_F_SRCS 65536   /* 255 * 65536 < 2^24 */
#define IAVG_D_SRCS 1048576 /* 2^32 * 2^20 < 2^53 */

#define IAVG_DRIVER(ISA, ATTR, T, N, F, Q, W, MAXSRC)                                    \
	ATTR static void N##_avg_##ISA(void *dv, const uintptr_t *srcs, int nsrc,        \
	                               size_t n, int nranks) {                           \
		enum { blk = BLOCK_BYTES / sizeof(F) };                                        \
		F acc[blk];                                                                    \
		T *d = (T *)dv;                                                                \
		if (nsrc > (MAXSRC) || (long long)(F)nranks != (long long)nranks) {                            \
			for (size_t i = 0; i < n; i++) {                                           \
				W s = 0;                                                               \
				for (int k = 0; k < nsrc; k++) s += (W)((const T *)srcs[k])[i];        \
				d[i] = (T)(s / (W)nranks);                                             \
			}                                                                          \
			return;                                                                    \
		}                                                                              \
		const F q = (F)nranks;                                                         \
		for (size_t lo = 0; lo < n; lo += blk) {                                       \
			size_t m = n - lo < blk ? n - lo : blk;                                    \
			const T *s0 = (const T *)srcs[0] + lo;                                     \
			for (size_t j = 0; j < m; j++) acc[j] = (F)s0[j];                          \
			for (int k = 1; k < nsrc; k++) {                                           \
				const T *s = (const T *)srcs[k] + lo;                                  \
				for (size_t j = 0; j < m; j++) acc[j] += (F)s[j];                      \
			}                                                                          \
			for (size_t j = 0; j < m; j++) d[lo + j] = (T)(Q)(acc[j] / q);             \
		}                                                                              \
	}

#define IAVG_ALL(ISA, ATTR)                                                            \
	IAVG_DRIVER(ISA, ATTR, int8_t, i8, float, int32_t, int64_t, IAVG_F_SRCS)           \
	IAVG_DRIVER(ISA, ATTR, uint8_t, u8, float, int32_t, uint64_t, IAVG_F_SRCS)         \
	IAVG_DRIVER(ISA, ATTR, int32_t, i32, double, int64_t, int64_t, IAVG_D_SRCS)        \
	IAVG_DRIVER(ISA, ATTR, uint32_t, u32, double, int64_t, uint64_t, IAVG_D_SRCS)

#define HALF_ALL(ISA, ATTR)                                                            \
	HALF_CONV(ISA, ATTR)                                                               \
	WIDE_OPS(ISA, ATTR, bf16, uint16_t)                                                \
	WIDE_OPS(ISA, ATTR, f16, uint16_t)

#define ALL(ISA, ATTR, VS)                                                             \
	ARITH(ISA, ATTR, VS, uint8_t, u8, sum, +)                                          \
	ARITH(ISA, ATTR, VS, uint32_t, u32, sum, +)                                        \
	ARITH(ISA, ATTR, VS, uint64_t, u64, sum, +)                                        \
	FARITH(ISA, ATTR, VS, float, int32_t, f32, sum, +, 0x00400000)                     \
	FARITH(ISA, ATTR, VS, double, int64_t, f64, sum, +, 0x0008000000000000LL)          \
	ARITH(ISA, ATTR, VS, uint8_t, u8, prod, *)                                         \
	ARITH(ISA, ATTR, VS, uint32_t, u32, prod, *)                                       \
	ARITH(ISA, ATTR, VS, uint64_t, u64, prod, *)                                       \
	FARITH(ISA, ATTR, VS, float, int32_t, f32, prod, *, 0x00400000)                    \
	FARITH(ISA, ATTR, VS, double, int64_t, f64, prod, *, 0x0008000000000000LL)         \
	PICK(ISA, ATTR, VS, int8_t, int8_t, i8, min, <)                                    \
	PICK(ISA, ATTR, VS, uint8_t, int8_t, u8, min, <)                                   \
	PICK(ISA, ATTR, VS, int32_t, int32_t, i32, min, <)                                 \
	PICK(ISA, ATTR, VS, uint32_t, int32_t, u32, min, <)                                \
	PICK(ISA, ATTR, VS, int64_t, int64_t, i64, min, <)                                 \
	PICK(ISA, ATTR, VS, uint64_t, int64_t, u64, min, <)                                \
	PICK(ISA, ATTR, VS, float, int32_t, f32, min, <)                                   \
	PICK(ISA, ATTR, VS, double, int64_t, f64, min, <)                                  \
	PICK(ISA, ATTR, VS, int8_t, int8_t, i8, max, >)                                    \
	PICK(ISA, ATTR, VS, uint8_t, int8_t, u8, max, >)                                   \
	PICK(ISA, ATTR, VS, int32_t, int32_t, i32, max, >)                                 \
	PICK(ISA, ATTR, VS, uint32_t, int32_t, u32, max, >)                                \
	PICK(ISA, ATTR, VS, int64_t, int64_t, i64, max, >)                                 \
	PICK(ISA, ATTR, VS, uint64_t, int64_t, u64, max, >)                                \
	PICK(ISA, ATTR, VS, float, int32_t, f32, max, >)                                   \
	PICK(ISA, ATTR, VS, double, int64_t, f64, max, >)                                  \
	DRIVER(ISA, ATTR, uint8_t, u8, sum, uint8_t, u8, sum, NODIV)                                         \
	DRIVER(ISA, ATTR, uint32_t, u32, sum, uint32_t, u32, sum, NODIV)                                       \
	DRIVER(ISA, ATTR, uint64_t, u64, sum, uint64_t, u64, sum, NODIV)                                       \
	DRIVER(ISA, ATTR, float, f32, sum, float, f32, sum, NODIV)                                          \
	DRIVER(ISA, ATTR, double, f64, sum, double, f64, sum, NODIV)                                         \
	DRIVER(ISA, ATTR, uint8_t, u8, prod, uint8_t, u8, prod, NODIV)                                        \
	DRIVER(ISA, ATTR, uint32_t, u32, prod, uint32_t, u32, prod, NODIV)                                      \
	DRIVER(ISA, ATTR, uint64_t, u64, prod, uint64_t, u64, prod, NODIV)                                      \
	DRIVER(ISA, ATTR, float, f32, prod, float, f32, prod, NODIV)                                         \
	DRIVER(ISA, ATTR, double, f64, prod, double, f64, prod, NODIV)                                        \
	DRIVER(ISA, ATTR, int8_t, i8, min, int8_t, i8, min, NODIV)                                          \
	DRIVER(ISA, ATTR, uint8_t, u8, min, uint8_t, u8, min, NODIV)                                         \
	DRIVER(ISA, ATTR, int32_t, i32, min, int32_t, i32, min, NODIV)                                        \
	DRIVER(ISA, ATTR, uint32_t, u32, min, uint32_t, u32, min, NODIV)                                       \
	DRIVER(ISA, ATTR, int64_t, i64, min, int64_t, i64, min, NODIV)                                        \
	DRIVER(ISA, ATTR, uint64_t, u64, min, uint64_t, u64, min, NODIV)                                       \
	DRIVER(ISA, ATTR, float, f32, min, float, f32, min, NODIV)                                          \
	DRIVER(ISA, ATTR, double, f64, min, double, f64, min, NODIV)                                         \
	DRIVER(ISA, ATTR, int8_t, i8, max, int8_t, i8, max, NODIV)                                          \
	DRIVER(ISA, ATTR, uint8_t, u8, max, uint8_t, u8, max, NODIV)                                         \
	DRIVER(ISA, ATTR, int32_t, i32, max, int32_t, i32, max, NODIV)                                        \
	DRIVER(ISA, ATTR, uint32_t, u32, max, uint32_t, u32, max, NODIV)                                       \
	DRIVER(ISA, ATTR, int64_t, i64, max, int64_t, i64, max, NODIV)                                        \
	DRIVER(ISA, ATTR, uint64_t, u64, max, uint64_t, u64, max, NODIV)                                       \
	DRIVER(ISA, ATTR, float, f32, max, float, f32, max, NODIV)                                          \
	DRIVER(ISA, ATTR, double, f64, max, double, f64, max, NODIV)                                         \
	DRIVER(ISA, ATTR, int64_t, i64, avg, uint64_t, u64, sum, DIVBY)                                        \
	DRIVER(ISA, ATTR, uint64_t, u64, avg, uint64_t, u64, sum, DIVBY)                                       \
	DRIVER(ISA, ATTR, float, f32, avg, float, f32, sum, DIVBY)                                          \
	DRIVER(ISA, ATTR, double, f64, avg, double, f64, sum, DIVBY)                                         \
	HALF_ALL(ISA, ATTR)                                                                \
	FP8_ALL(ISA, ATTR, VS)                                                             \
	IAVG_ALL(ISA, ATTR)                                                                \
	static void (*const table_##ISA[GR_NKERNELS])(void *, const uintptr_t *, int, size_t, int) = { \
		[GR_U8_SUM] = u8_sum_##ISA, [GR_U32_SUM] = u32_sum_##ISA, [GR_U64_SUM] = u64_sum_##ISA, \
		[GR_F32_SUM] = f32_sum_##ISA, [GR_F64_SUM] = f64_sum_##ISA,                     \
		[GR_U8_PROD] = u8_prod_##ISA, [GR_U32_PROD] = u32_prod_##ISA, [GR_U64_PROD] = u64_prod_##ISA, \
		[GR_F32_PROD] = f32_prod_##ISA, [GR_F64_PROD] = f64_prod_##ISA,                 \
		[GR_I8_MIN] = i8_min_##ISA, [GR_U8_MIN] = u8_min_##ISA, [GR_I32_MIN] = i32_min_##ISA, \
		[GR_U32_MIN] = u32_min_##ISA, [GR_I64_MIN] = i64_min_##ISA, [GR_U64_MIN] = u64_min_##ISA, \
		[GR_F32_MIN] = f32_min_##ISA, [GR_F64_MIN] = f64_min_##ISA,                     \
		[GR_I8_MAX] = i8_max_##ISA, [GR_U8_MAX] = u8_max_##ISA, [GR_I32_MAX] = i32_max_##ISA, \
		[GR_U32_MAX] = u32_max_##ISA, [GR_I64_MAX] = i64_max_##ISA, [GR_U64_MAX] = u64_max_##ISA, \
		[GR_F32_MAX] = f32_max_##ISA, [GR_F64_MAX] = f64_max_##ISA,                     \
		[GR_I64_AVG] = i64_avg_##ISA, [GR_U64_AVG] = u64_avg_##ISA,                     \
		[GR_F32_AVG] = f32_avg_##ISA, [GR_F64_AVG] = f64_avg_##ISA,                     \
		[GR_BF16_SUM] = bf16_sum_##ISA, [GR_BF16_PROD] = bf16_prod_##ISA,               \
		[GR_BF16_MIN] = bf16_min_##ISA, [GR_BF16_MAX] = bf16_max_##ISA,                 \
		[GR_BF16_AVG] = bf16_avg_##ISA,                                                \
		[GR_F16_SUM] = f16_sum_##ISA, [GR_F16_PROD] = f16_prod_##ISA,                   \
		[GR_F16_MIN] = f16_min_##ISA, [GR_F16_MAX] = f16_max_##ISA,                     \
		[GR_F16_AVG] = f16_avg_##ISA,                                                  \
		[GR_I8_AVG] = i8_avg_##ISA, [GR_U8_AVG] = u8_avg_##ISA,                         \
		[GR_I32_AVG] = i32_avg_##ISA, [GR_U32_AVG] = u32_avg_##ISA,                     \
		[GR_E4M3_SUM] = e4m3_sum_##ISA, [GR_E4M3_PROD] = e4m3_prod_##ISA,               \
		[GR_E4M3_MIN] = e4m3_min_##ISA, [GR_E4M3_MAX] = e4m3_max_##ISA,                 \
		[GR_E4M3_AVG] = e4m3_avg_##ISA,                                                \
		[GR_E5M2_SUM] = e5m2_sum_##ISA, [GR_E5M2_PROD] = e5m2_prod_##ISA,               \
		[GR_E5M2_MIN] = e5m2_min_##ISA, [GR_E5M2_MAX] = e5m2_max_##ISA,                 \
		[GR_E5M2_AVG] = e5m2_avg_##ISA,                                                \
	};                                                                                 \
	ATTR static void fp8_##ISA(int fn, uint8_t *d, const void *s, size_t n, float c) { \
		switch (fn) {                                                                  \
		case GR_FP8_SCALE_E4M3: scale_e4m3_##ISA(d, (const uint8_t *)s, n, c); break;  \
		case GR_FP8_SCALE_E5M2: scale_e5m2_##ISA(d, (const uint8_t *)s, n, c); break;  \
		case GR_FP8_NARROW_E4M3: narrow_e4m3_##ISA(d, (const float *)s, n); break;     \
		case GR_FP8_NARROW_E5M2: narrow_e5m2_##ISA(d, (const float *)s, n); break;     \
		}                                                                              \
	}

ALL(sse2, , 16)
ALL(avx2, __attribute__((target("avx2"))), 32)
ALL(avx512, __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))), 64)

void gr_reduce(int isa, int kernel, uintptr_t dst, const uintptr_t *srcs, int nsrc, size_t n, int nranks) {
	switch (isa) {
	case GR_AVX512:
		table_avx512[kernel]((void *)dst, srcs, nsrc, n, nranks);
		break;
	case GR_AVX2:
		table_avx2[kernel]((void *)dst, srcs, nsrc, n, nranks);
		break;
	default:
		table_sse2[kernel]((void *)dst, srcs, nsrc, n, nranks);
	}
}

void gr_fp8(int isa, int fn, uintptr_t dst, uintptr_t src, size_t n, float c) {
	switch (isa) {
	case GR_AVX512:
		fp8_avx512(fn, (uint8_t *)dst, (const void *)src, n, c);
		break;
	case GR_AVX2:
		fp8_avx2(fn, (uint8_t *)dst, (const void *)src, n, c);
		break;
	default:
		fp8_sse2(fn, (uint8_t *)dst, (const void *)src, n, c);
	}
}

// Copies out of the backend into a caller's buffer that the backend will
// not read again: stores that bypass the caches, so that a large result
// neither costs a read of the destination's old lines nor evicts the
// staging the ranks still exchange. The fence orders them before the
// arrival that follows.

#define COPY_NT(ISA, ATTR, VS, VT, LOADU, STREAM)                                      \
	ATTR static void copy_nt_##ISA(char *d, const char *s, size_t n) {                 \
		size_t head = (VS - ((uintptr_t)d & (VS - 1))) & (VS - 1);                     \
		if (head > n) head = n;                                                        \
		memcpy(d, s, head);                                                            \
		d += head, s += head, n -= head;                                               \
		for (; n >= 4 * VS; d += 4 * VS, s += 4 * VS, n -= 4 * VS) {                   \
			VT a = LOADU((const void *)s), b = LOADU((const void *)(s + VS));          \
			VT c = LOADU((const void *)(s + 2 * VS)), e = LOADU((const void *)(s + 3 * VS)); \
			STREAM((void *)d, a);                                                      \
			STREAM((void *)(d + VS), b);                                               \
			STREAM((void *)(d + 2 * VS), c);                                           \
			STREAM((void *)(d + 3 * VS), e);                                           \
		}                                                                              \
		for (; n >= VS; d += VS, s += VS, n -= VS) STREAM((void *)d, LOADU((const void *)s)); \
		memcpy(d, s, n);                                                               \
		_mm_sfence();                                                                  \
	}

#define SSE_LOADU(p) _mm_loadu_si128((const __m128i *)(p))
#define SSE_STREAM(p, v) _mm_stream_si128((__m128i *)(p), v)
#define AVX_LOADU(p) _mm256_loadu_si256((const __m256i *)(p))
#define AVX_STREAM(p, v) _mm256_stream_si256((__m256i *)(p), v)
#define AVX512_LOADU(p) _mm512_loadu_si512(p)
#define AVX512_STREAM(p, v) _mm512_stream_si512((void *)(p), v)

COPY_NT(sse2, , 16, __m128i, SSE_LOADU, SSE_STREAM)
COPY_NT(avx2, __attribute__((target("avx2"))), 32, __m256i, AVX_LOADU, AVX_STREAM)
COPY_NT(avx512, __attribute__((target("avx512f"))), 64, __m512i, AVX512_LOADU, AVX512_STREAM)

void gr_copy_nt(int isa, uintptr_t dst, uintptr_t src, size_t n) {
	switch (isa) {
	case GR_AVX512:
		copy_nt_avx512((char *)dst, (const char *)src, n);
		break;
	case GR_AVX2:
		copy_nt_avx2((char *)dst, (const char *)src, n);
		break;
	default:
		copy_nt_sse2((char *)dst, (const char *)src, n);
	}
}

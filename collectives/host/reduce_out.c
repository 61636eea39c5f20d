//go:build amd64 && cgo

// The direct path's reduction (direct.go): chunk by chunk, every source
// reduced into a buffer that stays in the caches, then that buffer
// written to every output, with the next chunk's sources prefetched
// while the writes go out, so that the core reads and writes at once as
// a memcpy does rather than in turns. One call does the whole part, where
// a call per chunk from Go paid cgo's crossing three times a chunk.
//
// Measured (docs/perf.md, "buffers from Alloc"): at 64 MiB between two
// processes the prefetches took the fastest calls from 2.5-2.7 to 1.1-1.3
// memcpys; without them this loop was no faster than the Go one, and
// T1/NTA hints and 16-128 KiB chunks no better than T0 and 64 KiB.

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <immintrin.h>

#include "reduce_simd.h"

// Prefetches of the next chunk's sources: lines [at, end) of the list
// made of each source's next chunk in turn.
typedef struct {
	const uintptr_t *srcs;
	size_t off, lines, at, end; // lines: a source's lines in the next chunk
} gr_pf;

static inline void pf_some(gr_pf *p, size_t k) {
	for (; k > 0 && p->at < p->end; k--, p->at++) {
		size_t j = p->at / p->lines, l = p->at % p->lines;
		_mm_prefetch((const char *)(p->srcs[j] + p->off + l * 64), _MM_HINT_T0);
	}
}

// OUT_COPY defines out_ISA(d, s, n, nt, pf, per): n bytes from s to d,
// with stores around the caches when nt, and per prefetches each 256
// bytes stored.
#define OUT_COPY(ISA, ATTR, VS, VT, LOADU, STOREU, STREAM)                             \
	ATTR static void out_##ISA(char *d, const char *s, size_t n, int nt, gr_pf *pf, size_t per) { \
		size_t head = (VS - ((uintptr_t)d & (VS - 1))) & (VS - 1);                     \
		if (head > n) head = n;                                                        \
		memcpy(d, s, head);                                                            \
		d += head, s += head, n -= head;                                               \
		if (nt) {                                                                      \
			for (; n >= 256; d += 256, s += 256, n -= 256) {                          \
				for (int k = 0; k < 256 / VS; k++)                                     \
					STREAM((void *)(d + k * VS), LOADU((const void *)(s + k * VS)));   \
				pf_some(pf, per);                                                      \
			}                                                                          \
		} else {                                                                       \
			for (; n >= 256; d += 256, s += 256, n -= 256) {                          \
				for (int k = 0; k < 256 / VS; k++)                                     \
					STOREU((void *)(d + k * VS), LOADU((const void *)(s + k * VS)));   \
				pf_some(pf, per);                                                      \
			}                                                                          \
		}                                                                              \
		memcpy(d, s, n);                                                               \
	}

#define SSE_LOADU(p) _mm_loadu_si128((const __m128i *)(p))
#define SSE_STOREU(p, v) _mm_storeu_si128((__m128i *)(p), v)
#define SSE_STREAM(p, v) _mm_stream_si128((__m128i *)(p), v)
#define AVX_LOADU(p) _mm256_loadu_si256((const __m256i *)(p))
#define AVX_STOREU(p, v) _mm256_storeu_si256((__m256i *)(p), v)
#define AVX_STREAM(p, v) _mm256_stream_si256((__m256i *)(p), v)
#define AVX512_LOADU(p) _mm512_loadu_si512(p)
#define AVX512_STOREU(p, v) _mm512_storeu_si512((void *)(p), v)
#define AVX512_STREAM(p, v) _mm512_stream_si512((void *)(p), v)

OUT_COPY(sse2, , 16, __m128i, SSE_LOADU, SSE_STOREU, SSE_STREAM)
OUT_COPY(avx2, __attribute__((target("avx2"))), 32, __m256i, AVX_LOADU, AVX_STOREU, AVX_STREAM)
OUT_COPY(avx512, __attribute__((target("avx512f"))), 64, __m512i, AVX512_LOADU, AVX512_STOREU, AVX512_STREAM)

static void out_isa(int isa, char *d, const char *s, size_t n, int nt, gr_pf *pf, size_t per) {
	switch (isa) {
	case GR_AVX512:
		out_avx512(d, s, n, nt, pf, per);
		break;
	case GR_AVX2:
		out_avx2(d, s, n, nt, pf, per);
		break;
	default:
		out_sse2(d, s, n, nt, pf, per);
	}
}

void gr_reduce_out(int isa, int kernel, const uintptr_t *outs, int nout, const uintptr_t *srcs, int nsrc,
                   size_t nbytes, size_t es, int nranks, uintptr_t tmp, size_t chunk, int flags) {
	uintptr_t at[nsrc];
	int nt = flags & GR_OUT_NT, prefetch = flags & GR_OUT_PREFETCH;
	for (size_t x = 0; x < nbytes; x += chunk) {
		size_t m = nbytes - x < chunk ? nbytes - x : chunk;
		for (int k = 0; k < nsrc; k++) at[k] = srcs[k] + x;
		gr_reduce(isa, kernel, tmp, at, nsrc, m / es, nranks);
		size_t next = x + m, mn = nbytes - next < chunk ? nbytes - next : chunk;
		gr_pf pf = {srcs, next, (mn + 63) / 64, 0, 0};
		if (prefetch) pf.end = pf.lines * (size_t)nsrc;
		// Each output's writes carry an equal share of the prefetches.
		size_t stores = (m / 256) * (size_t)nout, per = stores ? (pf.end + stores - 1) / stores : 0;
		for (int i = 0; i < nout; i++) out_isa(isa, (char *)(outs[i] + x), (const char *)tmp, m, nt, &pf, per);
		pf_some(&pf, pf.end);
	}
	if (nt) _mm_sfence();
}

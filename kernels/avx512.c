/*
 * avx512.c - AVX-512 (F, BW, VL, DQ, VNNI, BF16) versions of the kernels
 * in scalar.c.  Compiled with KFLAGS_avx512; only reached through the
 * dispatch table after CPUID said yes.
 *
 * The weight layouts put 16 output rows in the 16 lanes of a vector, so a
 * row-set is one accumulator per activation row and no horizontal sums
 * are needed: q4 and q8 use vpdpbusd with the weights as the unsigned
 * operand and the activation's 4 int8 values broadcast (embedded {1to16});
 * bf16 uses vdpbf16ps the same way.  A tile is one row-set times up to TT
 * activation rows, so each weight vector loaded feeds TT dot products.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "x86.h"

#define TT_MAX 6   /* activation rows per tile (register budget) */
/* bytes of weights prefetched ahead when one activation row streams them */
#define PF_AHEAD 4096
#define PF_HINT _MM_HINT_T0

AI __m512i bcast32(const void *p)
{
	int32_t v;

	memcpy(&v, p, 4);
	return _mm512_set1_epi32(v);
}

/* Masked loads and stores, plain ones for whole vectors: the masked forms
 * are slower on some cores (docs/perf.md, 2026-12-02). */
AI __m512 ldm(__mmask16 m, const void *p)
{
	return m == 0xffff ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}

AI void stm(void *p, __mmask16 m, __m512 v)
{
	if (m == 0xffff)
		_mm512_storeu_ps(p, v);
	else
		_mm512_mask_storeu_ps(p, m, v);
}

AI __m256i ld16m(__mmask16 m, const void *p)
{
	return m == 0xffff ? _mm256_loadu_si256(p) : _mm256_maskz_loadu_epi16(m, p);
}

AI __mmask16 row_mask(const ds_mat *w, size_t rs)
{
	uint64_t left = w->n - rs * DS_ROWSET;

	return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}

/* x = n ln2 + r, |r| <= ln2/2: n rounded, ln2 in two parts so that r
 * is exact to float's precision. */
AI __m512 exp_reduce(__m512 x, __m512 *n)
{
	*n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
				  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	return _mm512_fnmadd_ps(*n, _mm512_set1_ps(1.42860677e-6f),
				_mm512_fnmadd_ps(*n, _mm512_set1_ps(0.693145752f), x));
}

/* The Taylor polynomial's steps from r^4/4! down, p the higher terms'
 * sum so far (with r^5's coefficient), times 2^n. */
AI __m512 exp_finish(__m512 p, __m512 r, __m512 n)
{
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	return _mm512_scalef_ps(p, n);
}

/* e^x, |relative error| < 2e-7 (degree-7 Taylor on |r| <= ln2/2). */
AI __m512 exp512(__m512 x)
{
	__m512 n, r, p;

	x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
	x = _mm512_min_ps(x, _mm512_set1_ps(88.7f));
	r = exp_reduce(x, &n);
	p = _mm512_set1_ps(1.0f / 5040);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
	return exp_finish(p, r, n);
}

/* e^x for x <= 0 whose result is rounded to bf16 next (the softmax
 * weights of attn_blk): |relative error| < 3e-6 (degree-5 Taylor on
 * |r| <= ln2/2), far under bf16's 2^-9, in three operations fewer than
 * exp512. */
AI __m512 exp512_bf(__m512 x)
{
	__m512 n, r;

	x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
	r = exp_reduce(x, &n);
	return exp_finish(_mm512_set1_ps(1.0f / 120), r, n);
}

/* ---- q4 (w = S (q - Z)) and q8 (w = S (u - 128)) ----------------------- */

/* R row-sets (1 or 2) by TT activation rows from t0 (see scalar.c
 * qrow_dot): per 32-block the exact integer dot products, one conversion
 * and one FMA by the block scale; per group the weight scale and zero
 * (q8g32: the zero's term the block FMA's addend, kernels.h DS_Q8_FOLD).
 * Two row-sets share each activation broadcast between two vpdpbusd; one
 * row-set keeps two integer chains per row so the vpdpbusd latency stays
 * hidden.  The float operations are the same in every variant, so a
 * row's result does not depend on the tile it was computed in.  Tiles
 * are for more rows than VEC_MAX, whose arithmetic outweighs streaming
 * the weights: no software prefetches. */
AI void q_tile(const ds_mat *w, const uint8_t *rs, const ds_act *x, size_t t0,
	       float *y, size_t ldy, __mmask16 m0, __mmask16 m1, const int is4,
	       const int R, const int TT)
{
	const size_t kp = w->kp, G = w->type.group, ng = kp / G, rsb = w->rs_bytes;
	const size_t nb = x->ldq / DS_QBLOCK, ldq = x->ldq;
	const int8_t *xq = x->q + t0 * ldq;
	const float *xd = x->qd + t0 * nb, *xs = x->qs + t0 * nb;
	const __m512i m4 = _mm512_set1_epi8(15);
	const int fold = DS_Q8_FOLD(is4, G);
	__m512 acc[2][TT_MAX];
	size_t g, k;
	int t, c, r;

#pragma GCC unroll 8
	for (t = 0; t < TT; t++)
		acc[0][t] = acc[1][t] = _mm512_setzero_ps();
	for (g = 0; g < ng; g++) {
		const uint8_t *gw = rs + ds_qgrp_w(is4, G, ng, g) - (is4 ? 8 : 16) * g * G;
		__m512 A[2][TT_MAX];
		float S[TT_MAX];

#pragma GCC unroll 8
		for (t = 0; t < TT; t++) {
			A[0][t] = A[1][t] = fold ? _mm512_set1_ps(DS_Q8_ADDEND(xs[t * nb + g]))
						 : _mm512_setzero_ps();
			S[t] = 0;
		}
		for (k = g * G; k < (g + 1) * G; k += DS_QBLOCK) {
			__m512i d0[2][TT_MAX], d1[TT_MAX];

#pragma GCC unroll 8
			for (t = 0; t < TT; t++)
				d0[0][t] = d0[1][t] = d1[t] = _mm512_setzero_si512();
			if (is4) {
#pragma GCC unroll 4
				for (c = 0; c < 4; c++) {
					__m512i lo[2], hi[2];

#pragma GCC unroll 2
					for (r = 0; r < R; r++) {
						__m512i v = _mm512_loadu_si512(gw + r * rsb + 8 * k + 64 * c);

						lo[r] = _mm512_and_si512(v, m4);
						hi[r] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
					}
#pragma GCC unroll 8
					for (t = 0; t < TT; t++) {
						__m512i bl = bcast32(xq + t * ldq + k + 8 * c);
						__m512i bh = bcast32(xq + t * ldq + k + 8 * c + 4);

						if (R == 1) {
							d0[0][t] = _mm512_dpbusd_epi32(d0[0][t], lo[0], bl);
							d1[t] = _mm512_dpbusd_epi32(d1[t], hi[0], bh);
							continue;
						}
#pragma GCC unroll 2
						for (r = 0; r < R; r++)
							d0[r][t] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(
								d0[r][t], lo[r], bl), hi[r], bh);
					}
				}
			} else {
#pragma GCC unroll 8
				for (c = 0; c < 8; c++) {
					__m512i v[2];

#pragma GCC unroll 2
					for (r = 0; r < R; r++)
						v[r] = _mm512_loadu_si512(gw + r * rsb + 16 * k + 64 * c);
#pragma GCC unroll 8
					for (t = 0; t < TT; t++) {
						__m512i b = bcast32(xq + t * ldq + k + 4 * c);

						if (R == 1 && (c & 1))
							d1[t] = _mm512_dpbusd_epi32(d1[t], v[0], b);
						else if (R == 1)
							d0[0][t] = _mm512_dpbusd_epi32(d0[0][t], v[0], b);
						else
#pragma GCC unroll 2
							for (r = 0; r < R; r++)
								d0[r][t] = _mm512_dpbusd_epi32(d0[r][t], v[r], b);
					}
				}
			}
#pragma GCC unroll 8
			for (t = 0; t < TT; t++) {
				__m512 db = _mm512_set1_ps(xd[t * nb + k / DS_QBLOCK]);

				if (R == 1)
					d0[0][t] = _mm512_add_epi32(d0[0][t], d1[t]);
#pragma GCC unroll 2
				for (r = 0; r < R; r++)
					A[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0[r][t]), db, A[r][t]);
				S[t] += xs[t * nb + k / DS_QBLOCK];
			}
		}
#pragma GCC unroll 2
		for (r = 0; r < R; r++) {
			__m512 s = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(rs + r * rsb +
										     ds_qgrp_s(is4, G, g))));
			__m512 z = is4 ? _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
					 (const void *)(rs + r * rsb + ds_qgrp_z(G, ng, g)))))
				       : _mm512_set1_ps(128.0f);

#pragma GCC unroll 8
			for (t = 0; t < TT; t++)
				acc[r][t] = _mm512_fmadd_ps(s, fold ? A[r][t] : _mm512_fnmadd_ps(z,
							    _mm512_set1_ps(S[t]), A[r][t]), acc[r][t]);
		}
	}
#pragma GCC unroll 8
	for (t = 0; t < TT; t++) {
		stm(y + (t0 + t) * ldy, m0, acc[0][t]);
		if (R == 2)
			stm(y + (t0 + t) * ldy + DS_ROWSET, m1, acc[1][t]);
	}
}

/* ---- decode: one activation row ----------------------------------------------
 * Decode streams every weight from memory once, and a core reaches the
 * read bandwidth only with enough of the stream in flight: two row-sets
 * (two streams; four on the AMX table, below) at a time, each with a
 * software prefetch, and as few instructions per weight byte as possible
 * (the ROB window then covers more bytes).  Hence a q4 high nibble is
 * masked in place (16 q, no shift) in a chain of its own, the factor 16
 * divided out exactly once per block.  The activation's 4 bytes enter
 * q8's vpdpbusd as an embedded {1to16} broadcast (one instruction, not
 * two, but a load in each row-set); q4 loads each broadcast once for
 * all the streams' row-sets.  (q8 with shared broadcasts ran faster
 * from cache but streamed slower from memory: docs/perf.md, 2026-12-05
 * 12:38.)  The float operations are those of q_tile, so a row's result
 * does not depend on the path. */

/* Bytes prefetched ahead in each of the streams: VEC_STREAMS x PF_VEC
 * in flight per thread.  On the EPYC this was tuned on, two streams
 * reach the read bandwidth where four (the same bytes in flight) fall
 * short even as plain loads, and 3072 bytes ahead beat 4096 and 6144
 * (docs/perf.md, 2026-12-05 07:42). */
#define VEC_STREAMS 2
#define PF_VEC 3072
/* ... and on the Xeons with AMX (the AMX table's decode, sp = 1): four
 * streams 1024 bytes ahead, where four streams read faster than two
 * (docs/perf.md, 2026-12-06 00:58). */
#define STREAMS(sp) ((sp) ? 4 : VEC_STREAMS)
#define PF(sp) ((sp) ? 1024 : PF_VEC)

typedef struct { char b[4]; } b4;

/* acc + the u8 x s8 dot products of w with the 4 bytes at p, broadcast */
AI __m512i dp_bc(__m512i acc, __m512i w, const void *p)
{
	__asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const b4 *)p));
	return acc;
}

/* acc + the u8 x s8 dot products of w with x, in place: through the
 * intrinsic GCC copies a sum to another register and back around each
 * step of a loop that carries 16 of them. */
AI __m512i dp_ip(__m512i acc, __m512i w, __m512i x)
{
	__asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(x));
	return acc;
}

/* acc + the u8 x s8 dot products of w with activation bytes p: as an
 * embedded broadcast, or (shared) the broadcast b already loaded. */
AI __m512i dp_x(__m512i acc, __m512i w, const int8_t *p, __m512i b, const int shared)
{
	return shared ? _mm512_dpbusd_epi32(acc, w, b) : dp_bc(acc, w, p);
}

/* A few activation rows (2 .. VEC_MAX: a verification, a handful of
 * decoding requests) take the decode path too, VEC_ROWS at a time: each
 * weight vector loaded feeds every row's vpdpbusd, the activations as
 * embedded broadcasts (T rows' shared ones would not fit the registers),
 * over VEC_STREAMS_N streams.  In q_tile's tiles, whose per-group work
 * pays over many rows, a pass of two tokens of a dense 1.5B model cost
 * 1.4-2.0 passes of one; this way 1.1 (docs/perf.md, 2026-12-07 12:37). */
#define VEC_ROWS 4
#define VEC_MAX 16
#define VEC_STREAMS_N 2

/* One 32-block of R row-sets rsb bytes apart, at k (wp = row-set 0's
 * weights of the block), for T rows ldq bytes (xq) and nb block scales
 * (d) apart: A[r][t] += d * (exact integer dot product). */
AI void vec_blk(const uint8_t *wp, size_t rsb, const int8_t *xq, size_t ldq,
		const float *d, size_t nb, __m512 A[][VEC_ROWS], const int is4,
		const int R, const int T, const int sp)
{
	const __m512i m0 = _mm512_set1_epi8(0x0f), m1 = _mm512_set1_epi8((char)0xf0);
	const int shared = is4 && R > 1 && T == 1;
	__m512i l[4][VEC_ROWS], h[4][VEC_ROWS], xb[8];
	int c, r, t;

#pragma GCC unroll 4
	for (r = 0; r < R; r++) {
#pragma GCC unroll 4
		for (t = 0; t < T; t++)
			l[r][t] = h[r][t] = _mm512_setzero_si512();
#pragma GCC unroll 8
		for (c = 0; c < 8; c++)
			if (is4 == 0 || c < 4)
				_mm_prefetch((const char *)wp + r * rsb + 64 * c + PF(sp), _MM_HINT_T0);
	}
#pragma GCC unroll 8
	for (c = 0; c < 8; c++)
		xb[c] = shared ? bcast32(xq + 4 * c) : _mm512_setzero_si512();
#pragma GCC unroll 8
	for (c = 0; c < 8; c++)
#pragma GCC unroll 4
		for (r = 0; r < R; r++) {
			__m512i v;

			if (is4 && c >= 4)
				continue;
			v = _mm512_loadu_si512(wp + r * rsb + 64 * c);
#pragma GCC unroll 4
			for (t = 0; t < T; t++) {
				const int8_t *xt = xq + t * ldq;

				if (is4) {
					l[r][t] = dp_x(l[r][t], _mm512_and_si512(v, m0), xt + 8 * c,
						       xb[2 * c], shared);
					h[r][t] = dp_x(h[r][t], _mm512_and_si512(v, m1), xt + 8 * c + 4,
						       xb[2 * c + 1], shared);
				} else if (c & 1) {
					h[r][t] = dp_bc(h[r][t], v, xt + 4 * c);
				} else {
					l[r][t] = dp_bc(l[r][t], v, xt + 4 * c);
				}
			}
		}
#pragma GCC unroll 4
	for (r = 0; r < R; r++)
#pragma GCC unroll 4
		for (t = 0; t < T; t++) {
			__m512i s = is4 ? _mm512_add_epi32(l[r][t], _mm512_srai_epi32(h[r][t], 4))
					: _mm512_add_epi32(l[r][t], h[r][t]);

			A[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(d[t * nb]),
						  A[r][t]);
		}
}

/* No code moves across it: after each q4 block of a decode row, it keeps
 * GCC from interleaving consecutive blocks' instructions, without which
 * the q4g32 segments below stream slower than the plain group loop.
 * Not in q_vec: q8 and q4g32 there no better with it, q4g128 worse
 * (docs/perf.md, 2026-12-05 12:38). */
#define SCHED_FENCE() __asm__ volatile("" ::: "memory")

/* acc[r][t] += a group's contribution to row-set r and activation row t:
 * A[r][t] its blocks' sums, S[t] the sum of row t's activation block
 * sums, scales and (q4) zeros at sc, zp (row-set 0); fold: q8g32's A
 * holds its zero's term already (kernels.h). */
AI void q_grp_end(const uint8_t *sc, const uint8_t *zp, size_t rsb,
		  __m512 A[][VEC_ROWS], const float *S, __m512 acc[][VEC_ROWS],
		  const int is4, const int R, const int T, const int fold)
{
	int r, t;

#pragma GCC unroll 4
	for (r = 0; r < R; r++) {
		__m512 s = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(sc + r * rsb)));
		__m512 z = is4 ? _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
				 (const void *)(zp + r * rsb))))
			       : _mm512_set1_ps(128.0f);

#pragma GCC unroll 4
		for (t = 0; t < T; t++)
			acc[r][t] = _mm512_fmadd_ps(s, fold ? A[r][t] : _mm512_fnmadd_ps(z,
						    _mm512_set1_ps(S[t]), A[r][t]), acc[r][t]);
	}
}

/* q4g32 decode: the whole segments of DS_QSEG groups, each group at a
 * constant offset in its segment (a whole segment is laid out as a row of
 * DS_QSEG groups, so ds_qgrp_* of its groups fold to constants, where
 * per group in q_vec they are computed); returns the groups done.  For
 * q4g32 only: q4g128 and q8 streamed slower so (docs/perf.md,
 * 2026-12-05 12:38). */
AI size_t q4g32_vec_segs(const uint8_t *rs, size_t rsb, size_t ng, const ds_act *x,
			 __m512 acc[][VEC_ROWS], const int R, const int T, const int sp)
{
	const size_t G = 32, SEGB = ds_qseg_off(1, G, DS_QSEG), nseg = ng / DS_QSEG;
	/* read once: the fence's memory clobber would reload them each group */
	const int8_t *xq = x->q;
	const float *xd = x->qd, *xs = x->qs;
	const size_t ldq = x->ldq, nb = ldq / DS_QBLOCK;
	size_t s;
	int j, r, t;

	for (s = 0; s < nseg; s++) {
		const uint8_t *sg = rs + s * SEGB;
		const size_t k0 = s * DS_QSEG * G;

		ds_qseg_fetch(sg, rsb, G, 0, 1, R, PF(sp));
#pragma GCC unroll 4
		for (j = 0; j < DS_QSEG; j++) {
			const size_t k = k0 + (size_t)j * G;
			__m512 A[4][VEC_ROWS];
			float S[VEC_ROWS];

#pragma GCC unroll 4
			for (t = 0; t < T; t++) {
#pragma GCC unroll 4
				for (r = 0; r < R; r++)
					A[r][t] = _mm512_setzero_ps();
				S[t] = 0;       /* as q_tile: -0 enters as +0 */
				S[t] += xs[t * nb + k / DS_QBLOCK];
			}
			vec_blk(sg + ds_qgrp_w(1, G, DS_QSEG, j), rsb, xq + k, ldq,
				xd + k / DS_QBLOCK, nb, A, 1, R, T, sp);
			SCHED_FENCE();
			q_grp_end(sg + ds_qgrp_s(1, G, j), sg + ds_qgrp_z(G, DS_QSEG, j), rsb, A,
				  S, acc, 1, R, T, 0);
		}
	}
	return nseg * DS_QSEG;
}

/* R row-sets from rs (q4 or q8) for T activation rows, y their 16 R
 * outputs of row 0, the other rows ldy floats apart; GC the group size
 * when it is a compile-time constant (0: w's). */
AI void q_vec(const ds_mat *w, const uint8_t *rs, size_t sets, const ds_act *x,
	      float *y, size_t ldy, const __mmask16 *m, const int is4, const int R,
	      const int T, const int GC, const int sp)
{
	const size_t kp = w->kp, G = GC ? (size_t)GC : w->type.group, ng = kp / G;
	const size_t rsb = sets * w->rs_bytes, nb = x->ldq / DS_QBLOCK;
	const int fold = DS_Q8_FOLD(is4, G);
	__m512 acc[4][VEC_ROWS], A[4][VEC_ROWS];
	float S[VEC_ROWS];
	size_t g, k;
	int r, t;

#pragma GCC unroll 4
	for (r = 0; r < R; r++)
#pragma GCC unroll 4
		for (t = 0; t < T; t++)
			acc[r][t] = _mm512_setzero_ps();
	g = 0;
	if (is4 && GC == 32)
		g = q4g32_vec_segs(rs, rsb, ng, x, acc, R, T, sp);
	for (; g < ng; g++) {
		const uint8_t *gw = rs + ds_qgrp_w(is4, G, ng, g) - (is4 ? 8 : 16) * g * G;

		if (g % DS_QSEG == 0)
			ds_qseg_fetch(rs, rsb, G, g, is4, R, PF(sp));
#pragma GCC unroll 4
		for (t = 0; t < T; t++) {
#pragma GCC unroll 4
			for (r = 0; r < R; r++)
				A[r][t] = fold ? _mm512_set1_ps(DS_Q8_ADDEND(x->qs[t * nb + g]))
					       : _mm512_setzero_ps();
			S[t] = 0;
		}
#pragma GCC unroll 4
		for (k = g * G; k < (g + 1) * G; k += DS_QBLOCK) {
			vec_blk(gw + (is4 ? 8 : 16) * k, rsb, x->q + k, x->ldq, x->qd + k / DS_QBLOCK,
				nb, A, is4, R, T, sp);
#pragma GCC unroll 4
			for (t = 0; t < T; t++)
				S[t] += x->qs[t * nb + k / DS_QBLOCK];
		}
		q_grp_end(rs + ds_qgrp_s(is4, G, g), rs + (is4 ? ds_qgrp_z(G, ng, g) : 0), rsb,
			  A, S, acc, is4, R, T, fold);
	}
#pragma GCC unroll 4
	for (r = 0; r < R; r++)
#pragma GCC unroll 4
		for (t = 0; t < T; t++)
			stm(y + DS_ROWSET * sets * r + t * ldy, m[r], acc[r][t]);
}

AI void bf16_vec(const ds_mat *w, const uint8_t *rs, size_t sets, const ds_act *x,
		 float *y, const __mmask16 *m, const int R);

/* R row-sets for T activation rows (bf16: one), the first at row-set rs,
 * the others `sets` row-sets apart: kind 0 q8, 1 q4, 2 bf16. */
AI void vec_call(const ds_mat *w, size_t rs, size_t sets, const ds_act *x,
		 float *y, size_t ldy, const int kind, const int R, const int T,
		 const int sp)
{
	const uint8_t *p = w->data + rs * w->rs_bytes;
	__mmask16 m[4];
	int r;

	y += rs * DS_ROWSET;
	for (r = 0; r < R; r++)
		m[r] = row_mask(w, rs + r * sets);
	if (kind == 2) {
		bf16_vec(w, p, sets, x, y, m, R);
		return;
	}
	/* a few rows: g32's group loop compiled for its size, the others
	 * general (g128 measured no faster compiled; each compiled variant
	 * costs its code and 10 s of compile time) */
	switch (T > 1 && w->type.group != 32 ? 0 : w->type.group) {
	case 32: q_vec(w, p, sets, x, y, ldy, m, kind, R, T, 32, sp); break;
	case 64: q_vec(w, p, sets, x, y, ldy, m, kind, R, T, 64, sp); break;
	case 128: q_vec(w, p, sets, x, y, ldy, m, kind, R, T, 128, sp); break;
	default: q_vec(w, p, sets, x, y, ldy, m, kind, R, T, 0, sp); break;
	}
}

/* vec_call over the rows of x, VEC_ROWS at a time (the first reads the
 * row-sets from memory, the others from the cache). */
AI void vec_chunks(const ds_mat *w, size_t rs, size_t sets, const ds_act *x,
		   float *y, size_t ldy, const int kind, const int R, const int sp)
{
	size_t t0;

	for (t0 = 0; t0 < x->t; t0 += VEC_ROWS) {
		ds_act a = ds_act_rows(x, t0, x->t - t0 < VEC_ROWS ? x->t - t0 : VEC_ROWS);
		float *yt = y + t0 * ldy;

		switch (a.t) {
		case 1: vec_call(w, rs, sets, &a, yt, ldy, kind, R, 1, sp); break;
		case 2: vec_call(w, rs, sets, &a, yt, ldy, kind, R, 2, sp); break;
		case 3: vec_call(w, rs, sets, &a, yt, ldy, kind, R, 3, sp); break;
		default: vec_call(w, rs, sets, &a, yt, ldy, kind, R, 4, sp); break;
		}
	}
}

/* Row-sets rs0 .. rs1-1 for one activation row (many 0, STREAMS(sp)
 * streams) or a few (many 1, q4 and q8: VEC_STREAMS_N streams through
 * vec_chunks): the range in parts, each walked in address order (a stream
 * continues where the hardware prefetcher already is), then the row-sets
 * left alone.  Adjacent row-sets at a time instead (streams one row-set
 * apart), or no per-block prefetches (the hardware prefetcher alone),
 * made decode slower (docs/perf.md, 2026-12-05 06:20 and 07:42). */
AI void vecs(const ds_mat *w, const ds_act *x, float *y, size_t ldy, size_t rs0,
	     size_t rs1, const int kind, const int many, const int sp)
{
	const int ns = many ? VEC_STREAMS_N : STREAMS(sp);
	size_t q = (rs1 - rs0) / (size_t)ns, rs;

	if (q > 0)      /* the streams' first PF(sp) bytes: a claim starts cold */
		ds_fetch_streams(w->data + rs0 * w->rs_bytes, q * w->rs_bytes, ns, PF(sp));
	for (rs = rs0; rs < rs0 + q; rs++)
		if (many)
			vec_chunks(w, rs, q, x, y, ldy, kind, ns, sp);
		else
			vec_call(w, rs, q, x, y, ldy, kind, ns, 1, sp);
	for (rs = rs0 + (size_t)ns * q; rs < rs1; rs++)
		if (many)
			vec_chunks(w, rs, 1, x, y, ldy, kind, 1, sp);
		else
			vec_call(w, rs, 1, x, y, ldy, kind, 1, 1, sp);
}

/* q_tile with its tile of nt rows a compile-time constant: two row-sets
 * by up to 4 rows, or one by up to TT_MAX. */
AI void q_tile_n(const ds_mat *w, const uint8_t *p, const ds_act *x, size_t t,
		 float *yr, size_t ldy, __mmask16 m, __mmask16 m1, const int is4,
		 const int R, size_t nt)
{
	switch (nt < (R == 2 ? 4u : (size_t)TT_MAX) ? nt : R == 2 ? 4 : TT_MAX) {
	case 1: q_tile(w, p, x, t, yr, ldy, m, m1, is4, R, 1); break;
	case 2: q_tile(w, p, x, t, yr, ldy, m, m1, is4, R, 2); break;
	case 3: q_tile(w, p, x, t, yr, ldy, m, m1, is4, R, 3); break;
	case 4: q_tile(w, p, x, t, yr, ldy, m, m1, is4, R, 4); break;
	case 5: q_tile(w, p, x, t, yr, ldy, m, m1, is4, 1, 5); break;
	default: q_tile(w, p, x, t, yr, ldy, m, m1, is4, 1, 6); break;
	}
}

/* A few rows (2 .. VEC_MAX), one copy for both tables (the AMX table's
 * decode streams are for one row). */
static void q4_few(const ds_mat *w, const ds_act *x, float *y, size_t ldy, size_t rs0,
		   size_t rs1)
{
	vecs(w, x, y, ldy, rs0, rs1, 1, 1, 0);
}

static void q8_few(const ds_mat *w, const ds_act *x, float *y, size_t ldy, size_t rs0,
		   size_t rs1)
{
	vecs(w, x, y, ldy, rs0, rs1, 0, 1, 0);
}

/* Row-sets in pairs while there are two, activation rows in tiles; sp:
 * the decode streams' profile (STREAMS, PF). */
AI void q_mm(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
	     size_t rs0, size_t rs1, const int is4, const int sp)
{
	size_t rs, t;

	if (x->t == 1) {
		vecs(w, x, y, ldy, rs0, rs1, is4, 0, sp);
		return;
	}
	if (x->t <= VEC_MAX) {
		(is4 ? q4_few : q8_few)(w, x, y, ldy, rs0, rs1);
		return;
	}
	for (rs = rs0; rs < rs1; rs++) {
		const uint8_t *p = w->data + rs * w->rs_bytes;
		float *yr = y + rs * DS_ROWSET;
		__mmask16 m = row_mask(w, rs);

		if (rs + 1 < rs1) {
			__mmask16 m1 = row_mask(w, rs + 1);

			for (t = 0; t < x->t; t += 4)
				q_tile_n(w, p, x, t, yr, ldy, m, m1, is4, 2, x->t - t);
			rs++;
			continue;
		}
		for (t = 0; t < x->t; t += TT_MAX)
			q_tile_n(w, p, x, t, yr, ldy, m, 0, is4, 1, x->t - t);
	}
}

/* ---- bf16 ------------------------------------------------------------------- */

AI __m512 dpbf16(__m512 acc, __m512i w, __m512i x)
{
	return _mm512_dpbf16_ps(acc, (__m512bh)w, (__m512bh)x);
}

/* R row-sets (1, or 2 by up to 4 rows: the decode of a few rows, two
 * streams with prefetches) by TT activation rows from t0; m[r] the
 * row-sets' masks.  Each row's sums are the same in either form. */
AI void bf16_tile(const ds_mat *w, const uint8_t *rs, const ds_act *x,
		  size_t t0, float *y, size_t ldy, const __mmask16 *m, const int R,
		  const int TT)
{
	const size_t rsb = w->rs_bytes;
	const uint16_t *xb[TT_MAX];
	__m512 a0[2][TT_MAX], a1[2][TT_MAX];
	size_t c;
	int t, r;

	#pragma GCC unroll 8
	for (t = 0; t < TT; t++) {
		xb[t] = x->b + (t0 + t) * x->ldq;
		a0[0][t] = a1[0][t] = a0[1][t] = a1[1][t] = _mm512_setzero_ps();
	}
	for (c = 0; c < w->kp / 2; c += 2) {
		__m512i w0[2], w1[2];

		#pragma GCC unroll 2
		for (r = 0; r < R; r++) {
			if (R == 2 && c % 16 == 0)
				_mm_prefetch((const char *)rs + r * rsb + 64 * c + PF_AHEAD, PF_HINT);
			w0[r] = _mm512_loadu_si512(rs + r * rsb + 64 * c);
			w1[r] = _mm512_loadu_si512(rs + r * rsb + 64 * c + 64);
		}
		#pragma GCC unroll 8
		for (t = 0; t < TT; t++) {
			__m512i b0 = bcast32(xb[t] + 2 * c), b1 = bcast32(xb[t] + 2 * c + 2);

			#pragma GCC unroll 2
			for (r = 0; r < R; r++) {
				a0[r][t] = dpbf16(a0[r][t], w0[r], b0);
				a1[r][t] = dpbf16(a1[r][t], w1[r], b1);
			}
		}
	}
	#pragma GCC unroll 8
	for (t = 0; t < TT; t++)
		#pragma GCC unroll 2
		for (r = 0; r < R; r++)
			stm(y + (t0 + t) * ldy + r * DS_ROWSET, m[r],
			    _mm512_add_ps(a0[r][t], a1[r][t]));
}

AI __m512 dpbf16_bc(__m512 acc, __m512i w, const void *p)
{
	__asm__("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const b4 *)p));
	return acc;
}

/* Decode (see q_vec): R row-sets, R streams, the operations of bf16_tile. */
AI void bf16_vec(const ds_mat *w, const uint8_t *rs, size_t sets, const ds_act *x,
		 float *y, const __mmask16 *m, const int R)
{
	const size_t rsb = sets * w->rs_bytes;
	__m512 a0[4], a1[4];
	size_t c;
	int r;

#pragma GCC unroll 4
	for (r = 0; r < R; r++)
		a0[r] = a1[r] = _mm512_setzero_ps();
	for (c = 0; c < w->kp / 2; c += 2) {
		const uint16_t *xb = x->b + 2 * c;

#pragma GCC unroll 4
		for (r = 0; r < R; r++) {
			a0[r] = dpbf16_bc(a0[r], _mm512_loadu_si512(rs + r * rsb + 64 * c), xb);
			a1[r] = dpbf16_bc(a1[r], _mm512_loadu_si512(rs + r * rsb + 64 * c + 64), xb + 2);
		}
	}
#pragma GCC unroll 4
	for (r = 0; r < R; r++)
		stm(y + DS_ROWSET * sets * r, m[r], _mm512_add_ps(a0[r], a1[r]));
}

/* bf16_tile with nt a compile-time constant 1..TT_MAX (R 1), 1..4 (R 2). */
AI void bf16_tile_n(const ds_mat *w, const uint8_t *p, const ds_act *x, size_t t,
		    float *yr, size_t ldy, const __mmask16 *m, const int R, size_t nt)
{
	switch (nt) {
	case 1: bf16_tile(w, p, x, t, yr, ldy, m, R, 1); break;
	case 2: bf16_tile(w, p, x, t, yr, ldy, m, R, 2); break;
	case 3: bf16_tile(w, p, x, t, yr, ldy, m, R, 3); break;
	case 4: bf16_tile(w, p, x, t, yr, ldy, m, R, 4); break;
	case 5: bf16_tile(w, p, x, t, yr, ldy, m, 1, 5); break;
	default: bf16_tile(w, p, x, t, yr, ldy, m, 1, 6); break;
	}
}

/* One activation row as decode (vecs); up to VEC_MAX as two row-sets at
 * a time by 4 rows, two streams (one row-set at a time, a single stream,
 * two rows of a 16384 x 11008 matrix from memory cost 1.9 times one,
 * docs/perf.md); more in tiles of one row-set by up to TT_MAX rows. */
AI void bf16_mm(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		size_t rs0, size_t rs1, const int sp)
{
	size_t rs, t;

	if (x->t == 1) {
		vecs(w, x, y, ldy, rs0, rs1, 2, 0, sp);
		return;
	}
	for (rs = rs0; rs < rs1; rs++) {
		const uint8_t *p = w->data + rs * w->rs_bytes;
		__mmask16 m[2] = { row_mask(w, rs), rs + 1 < rs1 ? row_mask(w, rs + 1) : 0 };

		if (x->t <= VEC_MAX && rs + 1 < rs1) {
			for (t = 0; t < x->t; t += 4)
				bf16_tile_n(w, p, x, t, y + rs * DS_ROWSET, ldy, m, 2,
					    x->t - t < 4 ? x->t - t : 4);
			rs++;
			continue;
		}
		for (t = 0; t < x->t; t += TT_MAX)
			bf16_tile_n(w, p, x, t, y + rs * DS_ROWSET, ldy, m, 1, x->t - t);
	}
}

/* The q4, q8 and bf16 products of this table (static) and of the AMX
 * table (ds_avx512x_*: decode with the AMX Xeons' streams). */
static void mm_q4(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		  size_t rs0, size_t rs1)
{
	q_mm(w, x, y, ldy, rs0, rs1, 1, 0);
}

static void mm_q8(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		  size_t rs0, size_t rs1)
{
	q_mm(w, x, y, ldy, rs0, rs1, 0, 0);
}

static void mm_bf16(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		    size_t rs0, size_t rs1)
{
	bf16_mm(w, x, y, ldy, rs0, rs1, 0);
}

void ds_avx512x_mm_q4(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		      size_t rs0, size_t rs1)
{
	q_mm(w, x, y, ldy, rs0, rs1, 1, 1);
}

void ds_avx512x_mm_q8(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		      size_t rs0, size_t rs1)
{
	q_mm(w, x, y, ldy, rs0, rs1, 0, 1);
}

void ds_avx512x_mm_bf16(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
			size_t rs0, size_t rs1)
{
	bf16_mm(w, x, y, ldy, rs0, rs1, 1);
}

/* ---- f32 / f16, row-major: dot products, 4 rows by up to 4 x rows ------- */

AI __m512 load_w(const uint8_t *base, int f16, size_t i, __mmask16 m)
{
	if (f16)
		return _mm512_cvtph_ps(ld16m(m, base + 2 * i));
	return ldm(m, base + 4 * i);
}

AI void rm_tile(const ds_mat *w, const ds_act *x, size_t n0, size_t t0,
		float *y, size_t ldy, const int f16, const int R, const int TT)
{
	const size_t k = w->k, es = f16 ? 2 : 4;
	const uint8_t *wr[4];
	const float *xr[4];
	__m512 acc[4][4];
	size_t i;
	int r, t;

	#pragma GCC unroll 8
	for (r = 0; r < R; r++) {
		wr[r] = w->data + (n0 + r) * k * es;
		#pragma GCC unroll 8
		for (t = 0; t < TT; t++)
			acc[r][t] = _mm512_setzero_ps();
	}
	#pragma GCC unroll 8
	for (t = 0; t < TT; t++)
		xr[t] = x->f + (t0 + t) * x->ldf;
	for (i = 0; i < k; i += 16) {
		__mmask16 m = k - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k - i)) - 1);
		__m512 xv[4];

		#pragma GCC unroll 8
		for (t = 0; t < TT; t++)
			xv[t] = ldm(m, xr[t] + i);
		#pragma GCC unroll 8
		for (r = 0; r < R; r++) {
			__m512 wv = load_w(wr[r], f16, i, m);

			#pragma GCC unroll 8
			for (t = 0; t < TT; t++)
				acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
		}
	}
	#pragma GCC unroll 8
	for (r = 0; r < R; r++)
		#pragma GCC unroll 8
		for (t = 0; t < TT; t++)
			y[(t0 + t) * ldy + n0 + r] = _mm512_reduce_add_ps(acc[r][t]);
}

AI void mm_rowmajor(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		    size_t rs0, size_t rs1, const int f16)
{
	size_t n = rs0 * DS_ROWSET, n1 = rs1 * DS_ROWSET < w->n ? rs1 * DS_ROWSET : w->n;
	size_t t;

	for (; n < n1; n += 4) {
		int R = n1 - n >= 4 ? 4 : (int)(n1 - n);

		for (t = 0; t < x->t; t += 4) {
			size_t nt = x->t - t >= 4 ? 4 : x->t - t;

			if (R == 4 && nt == 4)
				rm_tile(w, x, n, t, y, ldy, f16, 4, 4);
			else if (R == 4 && nt == 1)
				rm_tile(w, x, n, t, y, ldy, f16, 4, 1);
			else {
				int r;
				size_t u;

				/* edges: one row by one x row at a time */
				#pragma GCC unroll 8
				for (r = 0; r < R; r++)
					for (u = 0; u < nt; u++)
						rm_tile(w, x, n + r, t + u, y, ldy, f16, 1, 1);
			}
		}
	}
}

static void mm_f32(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		   size_t rs0, size_t rs1)
{
	mm_rowmajor(w, x, y, ldy, rs0, rs1, 0);
}

static void mm_f16(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		   size_t rs0, size_t rs1)
{
	mm_rowmajor(w, x, y, ldy, rs0, rs1, 1);
}

/* ---- activation preparation (bit-identical to scalar.c) ------------------- */

AI __m512 act_load(const float *x, size_t i, size_t k, const int32_t *perm,
		   const float *nw, float nscale)
{
	__mmask16 m = i >= k ? 0 : k - i >= 16 ? (__mmask16)0xffff
					       : (__mmask16)((1u << (k - i)) - 1);
	__m512 v, sv = _mm512_set1_ps(nscale);

	if (perm) {
		__m512i idx = _mm512_maskz_loadu_epi32(m, perm + i);

		v = _mm512_mul_ps(_mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, x, 4), sv);
		if (nw)
			v = _mm512_mul_ps(v, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, nw, 4));
		return v;
	}
	v = _mm512_mul_ps(ldm(m, x + i), sv);
	if (nw)
		v = _mm512_mul_ps(v, ldm(m, nw + i));
	return v;
}

static void quant_row(const float *x, size_t k, size_t kp,
		      const int32_t *perm, const float *nw, float nscale,
		      int8_t *q, float *d, float *s)
{
	const __m512 lim = _mm512_set1_ps(127.0f);
	size_t b;

	for (b = 0; b < kp / DS_QBLOCK; b++) {
		size_t i = b * DS_QBLOCK;
		__m512 v0 = act_load(x, i, k, perm, nw, nscale);
		__m512 v1 = act_load(x, i + 16, k, perm, nw, nscale);
		float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
		__m512 id = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
		__m512i q0, q1;

		v0 = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v0, id), _mm512_sub_ps(_mm512_setzero_ps(), lim)), lim);
		v1 = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v1, id), _mm512_sub_ps(_mm512_setzero_ps(), lim)), lim);
		q0 = _mm512_cvtps_epi32(v0);
		q1 = _mm512_cvtps_epi32(v1);
		_mm_storeu_si128((void *)(q + i), _mm512_cvtepi32_epi8(q0));
		_mm_storeu_si128((void *)(q + i + 16), _mm512_cvtepi32_epi8(q1));
		d[b] = amax / 127.0f;
		s[b] = d[b] * (float)_mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
	}
}

/* fp32 -> bf16 bits, round to nearest even, NaN kept quiet (as util.h) */
AI __m256i to_bf16(__m512 v)
{
	__m512i u = _mm512_castps_si512(v);
	__m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
		_mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
	__mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);

	r = _mm512_srli_epi32(r, 16);
	r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
	return _mm512_cvtepi32_epi16(r);
}

static void bf16_row(const float *x, size_t k, size_t kp,
		     const int32_t *perm, const float *nw, float nscale,
		     uint16_t *out)
{
	size_t i;

	for (i = 0; i < kp; i += 16)
		_mm256_storeu_si256((void *)(out + i),
				    to_bf16(act_load(x, i, k, perm, nw, nscale)));
}

/* ---- element-wise ---------------------------------------------------------- */

AI __mmask16 tail(size_t n, size_t i)
{
	return n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
}

/* fp32 -> fp16 bits, round to nearest even; a NaN becomes the quiet NaN
 * of its sign with no payload, as util.h's ds_f32_to_f16 */
AI __m256i to_f16(__m512 v)
{
	__m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);

	return _mm256_mask_blend_epi16(nan, h, _mm256_or_si256(_mm256_and_si256(h,
			_mm256_set1_epi16((short)0x8000)), _mm256_set1_epi16(0x7e00)));
}

/* A cache row (scalar.c kv_store): fp16 and bf16 16 values at a time,
 * q8 blocks through quant_row. */
static void kv_store(enum ds_kvtype t, const float *x, size_t n, void *dst)
{
	uint8_t *p = dst;
	size_t i;

	switch (t) {
	case DS_KV_F32:
		memcpy(p, x, 4 * n);
		break;
	case DS_KV_F16:
	case DS_KV_BF16:
		for (i = 0; i < n; i += 16) {
			__mmask16 m = tail(n, i);
			__m512 v = ldm(m, x + i);
			__m256i h = t == DS_KV_F16 ? to_f16(v) : to_bf16(v);

			/* plain for whole vectors: a masked store to a line
			 * not in the cache costs more (docs/perf.md,
			 * 2026-12-05 03:33) */
			if (m == 0xffff)
				_mm256_storeu_si256((__m256i *)(p + 2 * i), h);
			else
				_mm256_mask_storeu_epi16(p + 2 * i, m, h);
		}
		break;
	case DS_KV_Q8:
		for (i = 0; i < n / DS_QBLOCK; i++) {
			float d, s;

			quant_row(x + i * DS_QBLOCK, DS_QBLOCK, DS_QBLOCK, NULL, NULL, 1.0f,
				  (int8_t *)p + 36 * i + 4, &d, &s);
			memcpy(p + 36 * i, &d, 4);
		}
		break;
	}
}

static float sumsq(const float *x, size_t n)
{
	__m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
	size_t i = 0;

	for (; i + 32 <= n; i += 32) {
		__m512 u = _mm512_loadu_ps(x + i), v = _mm512_loadu_ps(x + i + 16);

		a = _mm512_fmadd_ps(u, u, a);
		b = _mm512_fmadd_ps(v, v, b);
	}
	for (; i < n; i += 16) {
		__m512 u = ldm(tail(n, i), x + i);

		a = _mm512_fmadd_ps(u, u, a);
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(a, b));
}

static void rmsnorm(const float *x, const float *w, size_t n, float eps,
		    float *y)
{
	__m512 r = _mm512_set1_ps((float)(1.0 / sqrt((double)sumsq(x, n) / (double)n + eps)));
	size_t i;

	for (i = 0; i < n; i += 16) {
		__mmask16 m = tail(n, i);

		stm(y + i, m, _mm512_mul_ps(_mm512_mul_ps(
			ldm(m, x + i), r), ldm(m, w + i)));
	}
}

static void softmax(float *x, size_t n)
{
	__m512 mv = _mm512_set1_ps(-INFINITY), sv = _mm512_setzero_ps();
	size_t i;
	float inv;

	for (i = 0; i < n; i += 16)
		mv = _mm512_mask_max_ps(mv, tail(n, i), mv, ldm(tail(n, i), x + i));
	mv = _mm512_set1_ps(_mm512_reduce_max_ps(mv));
	for (i = 0; i < n; i += 16) {
		__mmask16 m = tail(n, i);
		__m512 e = exp512(_mm512_sub_ps(ldm(m, x + i), mv));

		e = _mm512_maskz_mov_ps(m, e);
		sv = _mm512_add_ps(sv, e);
		stm(x + i, m, e);
	}
	inv = 1.0f / _mm512_reduce_add_ps(sv);
	for (i = 0; i < n; i += 16) {
		__mmask16 m = tail(n, i);

		stm(x + i, m, _mm512_mul_ps(ldm(m, x + i),
							       _mm512_set1_ps(inv)));
	}
}

static void silu_mul(const float *g, const float *u, size_t n, float *h)
{
	const __m512 one = _mm512_set1_ps(1.0f);
	size_t i;

	for (i = 0; i < n; i += 16) {
		__mmask16 m = tail(n, i);
		__m512 gv = ldm(m, g + i);
		__m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), gv));

		stm(h + i, m, _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)),
							      ldm(m, u + i)));
	}
}

static void add(const float *a, const float *b, size_t n, float *y)
{
	size_t i;

	for (i = 0; i < n; i += 16) {
		__mmask16 m = tail(n, i);

		stm(y + i, m, _mm512_add_ps(ldm(m, a + i),
							      ldm(m, b + i)));
	}
}

static void axpy(float a, const float *x, size_t n, float *y)
{
	__m512 av = _mm512_set1_ps(a);
	size_t i;

	for (i = 0; i < n; i += 16) {
		__mmask16 m = tail(n, i);

		stm(y + i, m, _mm512_fmadd_ps(av, ldm(m, x + i),
								ldm(m, y + i)));
	}
}

static void rope(float *x, size_t nh, size_t hs, size_t dim, const float *cs,
		 enum ds_rope_style style)
{
	const size_t half = dim / 2;
	/* interleaved: lane 2i and 2i+1 use pair i's cos and sin */
	const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
	size_t h, i;

	for (h = 0; h < nh; h++) {
		float *p = x + h * hs;

		if (style == DS_ROPE_NEOX) {
			for (i = 0; i < half; i += 16) {
				__mmask16 m = tail(half, i);
				__m512 a = ldm(m, p + i);
				__m512 b = ldm(m, p + half + i);
				__m512 c = ldm(m, cs + i);
				__m512 s = ldm(m, cs + half + i);

				stm(p + i, m, _mm512_fmsub_ps(a, c, _mm512_mul_ps(b, s)));
				stm(p + half + i, m,
						      _mm512_fmadd_ps(a, s, _mm512_mul_ps(b, c)));
			}
			continue;
		}
		for (i = 0; i < half; i += 8) {
			__mmask16 m = tail(dim, 2 * i);
			__mmask16 mh = (__mmask16)(tail(half, i) & 0xff);
			__m512 v = ldm(m, p + 2 * i);
			__m512 c = _mm512_permutexvar_ps(dup, ldm(mh, cs + i));
			__m512 s = _mm512_permutexvar_ps(dup, ldm(mh, cs + half + i));
			__m512 sw = _mm512_permute_ps(v, 0xb1); /* (b, a) per pair */

			stm(p + 2 * i, m,
					      _mm512_fmaddsub_ps(v, c, _mm512_mul_ps(sw, s)));
		}
	}
}

/* ---- attention ----------------------------------------------------------------- */

/* Values d .. d+15 of a cache row as floats (lanes past m zero). */
AI __m512 kv_load(enum ds_kvtype t, const uint8_t *row, size_t d, __mmask16 m)
{
	if (t == DS_KV_F32)
		return ldm(m, row + 4 * d);
	if (t == DS_KV_F16)
		return _mm512_cvtph_ps(ld16m(m, row + 2 * d));
	if (t == DS_KV_BF16)
		return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(
			ld16m(m, row + 2 * d)), 16));
	{
		const uint8_t *b = row + 36 * (d / 32);
		float sc;

		memcpy(&sc, b, 4);
		return _mm512_mul_ps(_mm512_set1_ps(sc), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
			_mm_maskz_loadu_epi8(m, b + 4 + d % 32))));
	}
}

static void kv_load_row(enum ds_kvtype t, const void *src, size_t n, float *out)
{
	size_t i;

	for (i = 0; i < n; i += 16)
		stm(out + i, tail(n, i), kv_load(t, src, i, tail(n, i)));
}

/* The largest of s[0..n-1] and m. */
static float row_max(const float *s, size_t n, float m)
{
	__m512 v = _mm512_set1_ps(m);
	size_t i;

	for (i = 0; i < n; i += 16)
		v = _mm512_mask_max_ps(v, tail(n, i), ldm(tail(n, i), s + i), v);
	return _mm512_reduce_max_ps(v);
}

static float exp_sub_sum(float *s, size_t n, float m)
{
	__m512 sum = _mm512_setzero_ps();
	size_t i;

	for (i = 0; i < n; i += 16) {
		__mmask16 mk = tail(n, i);
		__m512 e = exp512(_mm512_sub_ps(ldm(mk, s + i), _mm512_set1_ps(m)));

		e = _mm512_maskz_mov_ps(mk, e);
		stm(s + i, mk, e);
		sum = _mm512_add_ps(sum, e);
	}
	return _mm512_reduce_add_ps(sum);
}

static void scale_row(float *o, size_t n, float c)
{
	size_t i;

	for (i = 0; i < n; i += 16) {
		__mmask16 m = tail(n, i);

		stm(o + i, m, _mm512_mul_ps(ldm(m, o + i),
							      _mm512_set1_ps(c)));
	}
}

#include "attn_softmax.h"

/* The sums of a[0..15] as one vector, r[i] = sum of a[i]'s lanes: pairs
 * summed within 128-bit lanes, then across them (15 adds in all, where
 * sixteen separate reductions take about 60). */
AI __m512 hsum16(__m512 *a)
{
	__m512 b[8], c[4], d[2];
	int i;

#pragma GCC unroll 8
	for (i = 0; i < 8; i++)
		b[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
				     _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
#pragma GCC unroll 4
	for (i = 0; i < 4; i++) {
		__m512d x = _mm512_castps_pd(b[2 * i]), y = _mm512_castps_pd(b[2 * i + 1]);

		c[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
				     _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
	}
#pragma GCC unroll 2
	for (i = 0; i < 2; i++)
		d[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0x88),
				     _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0xdd));
	return _mm512_add_ps(_mm512_shuffle_f32x4(d[0], d[1], 0x88),
			     _mm512_shuffle_f32x4(d[0], d[1], 0xdd));
}

/* One 16-value step at d of the NH x NK dot products: the query and key
 * vectors under mask m (a constant 0xffff for whole steps, so their
 * loads take no test), each key vector converted once for the NH rows. */
AI void attn_qk_step(__m512 *acc, const float *const *qr, const uint8_t *const *kr,
		     size_t d, __mmask16 m, const int NH, const int NK, enum ds_kvtype KT)
{
	__m512 qv[4];
	int h, k;

#pragma GCC unroll 4
	for (h = 0; h < NH; h++)
		qv[h] = ldm(m, qr[h] + d);
#pragma GCC unroll 16
	for (k = 0; k < NK; k++) {
		__m512 kv = kv_load(KT, kr[k], d, m);

#pragma GCC unroll 4
		for (h = 0; h < NH; h++)
			acc[h * NK + k] = _mm512_fmadd_ps(qv[h], kv, acc[h * NK + k]);
	}
}

/* Scores of nh <= NH heads (from h0) against nk <= NK keys (from j0) in
 * an NH x NK tile (NH x NK = 16; the missing ones repeat the last head and
 * key, and are not stored): sixteen dot products over the key width, each
 * key vector converted once for the NH heads, reduced together (hsum16).
 * A score's arithmetic is the same in any tile, so it does not depend on
 * how the heads are split over threads or where a chunk ends. */
AI void attn_qk(const ds_attn_job *a, size_t h0, size_t nh, size_t j0, size_t nk,
		size_t jc, float *sc, const int NH, const int NK, enum ds_kvtype KT)
{
	const size_t kd = a->k.dim, C = DS_ATTN_CHUNK;
	const int full = nh == (size_t)NH && nk == (size_t)NK;
	const float *qr[4];
	const uint8_t *kr[16];
	__m512 acc[16], r;
	float out[16];
	size_t d;
	int h, k;

	/* the rows' addresses once, not per step of the dot products */
#pragma GCC unroll 4
	for (h = 0; h < NH; h++)
		qr[h] = a->q + (h0 + (full || (size_t)h < nh ? (size_t)h : nh - 1)) * a->q_ld;
#pragma GCC unroll 16
	for (k = 0; k < NK; k++)
		kr[k] = a->k.data + (j0 + (full || (size_t)k < nk ? (size_t)k : nk - 1)) * a->k.ld;
#pragma GCC unroll 16
	for (h = 0; h < 16; h++)
		acc[h] = _mm512_setzero_ps();
	for (d = 0; d + 16 <= kd; d += 16)
		attn_qk_step(acc, qr, kr, d, 0xffff, NH, NK, KT);
	if (d < kd)
		attn_qk_step(acc, qr, kr, d, tail(kd, d), NH, NK, KT);
	r = _mm512_mul_ps(hsum16(acc), _mm512_set1_ps(a->scale));
	_mm512_storeu_ps(out, r);
	for (h = 0; (size_t)h < nh; h++)
		memcpy(sc + (h0 + h) * C + jc, out + h * NK, nk * sizeof(float));
}

/* One NH x NK tile of scores: a whole one by a copy of attn_qk where nh
 * and nk are constants (no clamped indices), a partial one by another. */
AI void attn_tile(const ds_attn_job *a, size_t h, size_t nh, size_t j0, size_t nk,
		  size_t jc, float *sc, const int NH, const int NK, enum ds_kvtype KT)
{
	if (nh == (size_t)NH && nk == (size_t)NK)
		attn_qk(a, h, (size_t)NH, j0, (size_t)NK, jc, sc, NH, NK, KT);
	else
		attn_qk(a, h, nh, j0, nk, jc, sc, NH, NK, KT);
}

/* Scores of heads h .. h+nh-1 (nh <= 4) against the chunk's nj keys. */
AI void attn_scores(const ds_attn_job *a, size_t h, size_t nh, size_t j0, size_t nj,
		    float *sc, enum ds_kvtype KT)
{
	size_t j, step = nh > 2 ? 4 : nh == 2 ? 8 : 16;

	for (j = 0; j < nj; j += step) {
		size_t nk = nj - j < step ? nj - j : step;

		if (nh > 2)
			attn_tile(a, h, nh, j0 + j, nk, j, sc, 4, 4, KT);
		else if (nh == 2)
			attn_tile(a, h, nh, j0 + j, nk, j, sc, 2, 8, KT);
		else
			attn_tile(a, h, nh, j0 + j, nk, j, sc, 1, 16, KT);
	}
}

/* One 64-value block at d of attn_pv; WHOLE (a constant) when the block
 * lies inside the row, so its loads take no test. */
AI void attn_pv_blk(const ds_attn_job *a, size_t h0, size_t j0, size_t nj,
		    const float *sc, size_t d, const int NH, enum ds_kvtype VT,
		    const int WHOLE)
{
	const size_t vd = a->v.dim, C = DS_ATTN_CHUNK;
	size_t j;
	int h, i;

	{
		__mmask16 m[4];
		__m512 o[4][4];

#pragma GCC unroll 4
		for (i = 0; i < 4; i++)
			m[i] = WHOLE ? 0xffff : d + 16 * i < vd ? tail(vd, d + 16 * i) : 0;
#pragma GCC unroll 4
		for (h = 0; h < NH; h++)
#pragma GCC unroll 4
			for (i = 0; i < 4; i++)
				o[h][i] = ldm(m[i], a->o + (h0 + h) * a->o_ld + d + 16 * i);
		const uint8_t *row = a->v.data + j0 * a->v.ld;

		for (j = 0; j < nj; j++, row += a->v.ld) {
			__m512 v[4];

#pragma GCC unroll 4
			for (i = 0; i < 4; i++)
				v[i] = m[i] ? kv_load(VT, row, d + 16 * i, m[i]) : _mm512_setzero_ps();
#pragma GCC unroll 4
			for (h = 0; h < NH; h++) {
				__m512 p = _mm512_set1_ps(sc[(h0 + h) * C + j]);

#pragma GCC unroll 4
				for (i = 0; i < 4; i++)
					o[h][i] = _mm512_fmadd_ps(p, v[i], o[h][i]);
			}
		}
#pragma GCC unroll 4
		for (h = 0; h < NH; h++)
#pragma GCC unroll 4
			for (i = 0; i < 4; i++)
				stm(a->o + (h0 + h) * a->o_ld + d + 16 * i, m[i], o[h][i]);
	}
}

/* o[h] += sum_j p[h][j] v_j for up to 4 heads over the chunk's nj keys,
 * a 4-head by 64-value tile of o held in registers while the keys pass. */
AI void attn_pv(const ds_attn_job *a, size_t h0, size_t j0, size_t nj,
		const float *sc, const int NH, enum ds_kvtype VT)
{
	size_t d;

	for (d = 0; d + 64 <= a->v.dim; d += 64)
		attn_pv_blk(a, h0, j0, nj, sc, d, NH, VT, 1);
	if (d < a->v.dim)
		attn_pv_blk(a, h0, j0, nj, sc, d, NH, VT, 0);
}

/* The online softmax over chunks of DS_ATTN_CHUNK keys (attn_softmax.h),
 * with the two products register-tiled over 4 heads; KT and VT the cache
 * types (constants where attn() calls it, so no load tests them). */
AI void attn_t(const ds_attn_job *a, float *scratch, enum ds_kvtype KT, enum ds_kvtype VT)
{
	const size_t g = a->g, C = DS_ATTN_CHUNK;
	float *sc = scratch, *mx = sc + g * C, *l = mx + g;
	size_t h, j0, nj;

	attn_begin(a, mx, l);
	attn_fetch(a, 0, 2 * C);
	for (j0 = 0; j0 < a->n; j0 += C) {
		nj = a->n - j0 < C ? a->n - j0 : C;
		attn_fetch(a, j0 + 2 * C, C);   /* two chunks ahead */
		for (h = 0; h < g; h += 4) {
			size_t nh = g - h < 4 ? g - h : 4;

			attn_scores(a, h, nh, j0, nj, sc, KT);
		}
		attn_weights(a, sc, mx, l, j0, nj);
		for (h = 0; h < g; h += 4) {
			switch (g - h < 4 ? g - h : 4) {
			case 1: attn_pv(a, h, j0, nj, sc, 1, VT); break;
			case 2: attn_pv(a, h, j0, nj, sc, 2, VT); break;
			case 3: attn_pv(a, h, j0, nj, sc, 3, VT); break;
			default: attn_pv(a, h, j0, nj, sc, 4, VT); break;
			}
		}
	}
	attn_end(a, mx, l);
}

static void attn(const ds_attn_job *a, float *scratch)
{
	if (a->k.type != a->v.type)
		attn_t(a, scratch, a->k.type, a->v.type);
	else if (a->k.type == DS_KV_F16)
		attn_t(a, scratch, DS_KV_F16, DS_KV_F16);
	else if (a->k.type == DS_KV_BF16)
		attn_t(a, scratch, DS_KV_BF16, DS_KV_BF16);
	else if (a->k.type == DS_KV_Q8)
		attn_t(a, scratch, DS_KV_Q8, DS_KV_Q8);
	else
		attn_t(a, scratch, DS_KV_F32, DS_KV_F32);
}

/* ---- MHA over a packed block (kernels.h ds_attn_blk) ------------------------ */

/* The keys row t of a block sees. */
AI size_t blk_seen(const ds_attn_blk *a, size_t t)
{
	return a->diag && a->diag + t < a->nk ? a->diag + t : a->nk;
}

/* Scores of rows t0 .. t0+nt-1 (nt <= 4; the missing rows repeat the
 * last and are not stored) against the NG key groups from g0, into sc
 * (rows DS_ATTN_BLK apart): a 4-row by 16 NG-key tile in registers, each
 * group's vector of 16 keys' value pairs loaded once for the four rows,
 * each row's pair broadcast from memory. */
AI void blk_qk(const ds_attn_blk *a, size_t t0, size_t nt, size_t g0, float *sc,
	       const int NG)
{
	const size_t kp2 = a->kd / 2 + a->kd % 2;
	const uint16_t *q[4], *k = a->k + g0 * kp2 * 32;
	const __m512 scale = _mm512_set1_ps(a->scale);
	__m512 acc[4][4];
	size_t i;
	int t, g;

#pragma GCC unroll 4
	for (t = 0; t < 4; t++) {
		q[t] = a->q + (t0 + ((size_t)t < nt ? (size_t)t : nt - 1)) * a->q_ld;
#pragma GCC unroll 4
		for (g = 0; g < NG; g++)
			acc[t][g] = _mm512_setzero_ps();
	}
	for (i = 0; i < kp2; i++) {
		__m512i kv[4];

#pragma GCC unroll 4
		for (g = 0; g < NG; g++)
			kv[g] = _mm512_loadu_si512(k + (g * kp2 + i) * 32);
#pragma GCC unroll 4
		for (t = 0; t < 4; t++) {
			__m512i qb = bcast32(q[t] + 2 * i);

#pragma GCC unroll 4
			for (g = 0; g < NG; g++)
				acc[t][g] = dpbf16(acc[t][g], kv[g], qb);
		}
	}
	/* constant indices, so that acc stays in registers */
#pragma GCC unroll 4
	for (t = 0; t < 4; t++)
#pragma GCC unroll 4
		for (g = 0; g < NG; g++)
			if ((size_t)t < nt)
				_mm512_storeu_ps(sc + (t0 + t) * DS_ATTN_BLK + (g0 + g) * 16,
						 _mm512_mul_ps(acc[t][g], scale));
}

/* blk_qk over int8 keys (kernels.h K8, Q8): per block of 32 values a
 * 4-row by 16 NG-key tile of vpdpbusd sums in registers, each quad of the
 * 16 keys loaded once for the four rows, each row's quad broadcast once
 * for the NG groups; then each sum scaled into the row's scores, which
 * stay in registers too (NG 3 at most: 24 of the 32). */
AI void blk_qk8(const ds_attn_blk *a, size_t t0, size_t nt, size_t g0, float *sc,
		const int NG)
{
	const size_t gs = a->kb * DS_ATTN_Q8_BYTES;
	const int8_t *q[4];
	const float *dq[4];
	__m512 f[4][3];
	size_t b, i;
	int t, g;

#pragma GCC unroll 4
	for (t = 0; t < 4; t++) {
		q[t] = a->q8 + (t0 + ((size_t)t < nt ? (size_t)t : nt - 1)) * a->q8_ld;
		dq[t] = (const float *)(const void *)(q[t] + a->kb * 32);
#pragma GCC unroll 3
		for (g = 0; g < NG; g++)
			f[t][g] = _mm512_setzero_ps();
	}
	for (b = 0; b < a->kb; b++) {
		const uint8_t *k = a->k8 + (g0 * a->kb + b) * DS_ATTN_Q8_BYTES;
		__m512i acc[4][3];

#pragma GCC unroll 4
		for (t = 0; t < 4; t++)
#pragma GCC unroll 3
			for (g = 0; g < NG; g++)
				acc[t][g] = _mm512_setzero_si512();
		/* not unrolled: GCC would then run each sum's 8 steps as one chain */
#pragma GCC unroll 1
		for (i = 0; i < 8; i++) {
			__m512i kv[3];

#pragma GCC unroll 3
			for (g = 0; g < NG; g++)
				kv[g] = _mm512_loadu_si512(k + g * gs + i * 64);
#pragma GCC unroll 4
			for (t = 0; t < 4; t++) {
				__m512i qb = bcast32(q[t] + b * 32 + i * 4);

#pragma GCC unroll 3
				for (g = 0; g < NG; g++)
					acc[t][g] = dp_ip(acc[t][g], kv[g], qb);
			}
			/* each sum stays in its register from step to step */
#pragma GCC unroll 4
			for (t = 0; t < 4; t++)
#pragma GCC unroll 3
				for (g = 0; g < NG; g++)
					__asm__("" : "+v"(acc[t][g]));
		}
#pragma GCC unroll 4
		for (t = 0; t < 4; t++) {
			__m512 d = _mm512_set1_ps(dq[t][b]);
			__m512 c = _mm512_set1_ps(dq[t][a->kb + b] * 128.0f);

#pragma GCC unroll 3
			for (g = 0; g < NG; g++)
				f[t][g] = _mm512_fmadd_ps(_mm512_fmsub_ps(_mm512_cvtepi32_ps(acc[t][g]), d, c),
							  _mm512_loadu_ps(k + g * gs + 512), f[t][g]);
		}
	}
#pragma GCC unroll 4
	for (t = 0; t < 4; t++)
#pragma GCC unroll 3
		for (g = 0; g < NG; g++)
			if ((size_t)t < nt)
				_mm512_storeu_ps(sc + (t0 + t) * DS_ATTN_BLK + (g0 + g) * 16,
						 _mm512_mul_ps(f[t][g], _mm512_set1_ps(a->scale)));
}

/* Row t's n scores s into weights rounded to bf16 (pb, zero from n to
 * np, a multiple of 16), the carried maximum and sum updated; returns
 * the factor c of the outputs so far. */
static float blk_weights(const ds_attn_blk *a, size_t t, const float *s, uint16_t *pb,
			 size_t n, size_t np)
{
	float *ml = a->ml + t * a->ml_ld, m = row_max(s, n, a->first ? -INFINITY : ml[0]), c;
	__m512 sum = _mm512_setzero_ps();
	size_t j;

	for (j = 0; j < np; j += 16) {
		__mmask16 mk = j < n ? tail(n, j) : 0;
		__m512 e = exp512_bf(_mm512_sub_ps(ldm(mk, s + j), _mm512_set1_ps(m)));
		/* vcvtneps2bf16: to_bf16's rounding in one instruction (the
		 * weights are never NaN) */
		__m256i b = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_mov_ps(mk, e));

		_mm256_storeu_si256((void *)(pb + j), b);
		sum = _mm512_add_ps(sum, _mm512_castsi512_ps(_mm512_slli_epi32(
			_mm512_cvtepu16_epi32(b), 16)));
	}
	c = a->first ? 0.0f : expf(ml[0] - m);
	ml[1] = (a->first ? 0.0f : ml[1] * c) + _mm512_reduce_add_ps(sum);
	ml[0] = m;
	return c;
}

/* Outputs of rows t0 .. t0+nt-1 (nt <= 4; as blk_qk), values d0 ..
 * d0+16 NV-1: scaled by their rows' c, plus the weights times the
 * values over the first np2 pairs of keys, each pair's vector of values
 * loaded once for the four rows, each row's pair of weights broadcast. */
AI void blk_pv(const ds_attn_blk *a, size_t t0, size_t nt, size_t d0, size_t np2,
	       const uint16_t *pb, const float *c, const int NV)
{
	const size_t vdp = (a->vd + 15) / 16 * 16;
	const uint16_t *p[4], *v = a->v + d0 * 2;
	__mmask16 m[4];
	__m512 acc[4][4];
	size_t jp;
	int t, i;

#pragma GCC unroll 4
	for (i = 0; i < NV; i++)
		m[i] = d0 + 16 * i < a->vd ? tail(a->vd, d0 + 16 * i) : 0;
#pragma GCC unroll 4
	for (t = 0; t < 4; t++) {
		size_t r = (size_t)t < nt ? (size_t)t : nt - 1;
		const float *o = a->o + (t0 + r) * a->o_ld + d0;

		p[t] = pb + r * DS_ATTN_BLK;
#pragma GCC unroll 4
		for (i = 0; i < NV; i++)
			acc[t][i] = a->first ? _mm512_setzero_ps()
				  : _mm512_mul_ps(ldm(m[i], o + 16 * i), _mm512_set1_ps(c[r]));
	}
	for (jp = 0; jp < np2; jp++) {
		__m512i vv[4];

#pragma GCC unroll 4
		for (i = 0; i < NV; i++)
			vv[i] = _mm512_loadu_si512(v + (jp * vdp + 16 * i) * 2);
#pragma GCC unroll 4
		for (t = 0; t < 4; t++) {
			__m512i pp = bcast32(p[t] + 2 * jp);

#pragma GCC unroll 4
			for (i = 0; i < NV; i++)
				acc[t][i] = dpbf16(acc[t][i], vv[i], pp);
		}
	}
#pragma GCC unroll 4
	for (t = 0; t < 4; t++)
#pragma GCC unroll 4
		for (i = 0; i < NV; i++)
			if ((size_t)t < nt)
				stm(a->o + (t0 + t) * a->o_ld + d0 + 16 * i, m[i], acc[t][i]);
}

/* Groups g .. of the scores of a tile of up to 4 rows from t0, as many
 * as its last row sees of the next 3 (int8 keys) or 4 (bf16); 0 when
 * it sees none of them. */
static size_t blk_group(const ds_attn_blk *a, size_t t0, size_t nt, size_t g, float *sc)
{
	size_t ng = (blk_seen(a, t0 + nt - 1) + 15) / 16, k = a->k8 ? 3 : 4;
	size_t m = g >= ng ? 0 : ng - g < k ? ng - g : k;

	switch (a->k8 ? m : 4 + m) {
	case 1: blk_qk8(a, t0, nt, g, sc, 1); break;
	case 2: blk_qk8(a, t0, nt, g, sc, 2); break;
	case 3: blk_qk8(a, t0, nt, g, sc, 3); break;
	case 5: blk_qk(a, t0, nt, g, sc, 1); break;
	case 6: blk_qk(a, t0, nt, g, sc, 2); break;
	case 7: blk_qk(a, t0, nt, g, sc, 3); break;
	case 8: blk_qk(a, t0, nt, g, sc, 4); break;
	default: break;         /* none of them seen */
	}
	return m;
}

/* The tile's outputs d .. d+63 (fewer at the end of the row). */
static void blk_values(const ds_attn_blk *a, size_t t0, size_t nt, size_t d,
		       const uint16_t *pb, const float *c)
{
	size_t np2 = (blk_seen(a, t0 + nt - 1) + 1) / 2, vdp = (a->vd + 15) / 16 * 16;

	pb += t0 * DS_ATTN_BLK;
	switch ((vdp - d) / 16 < 4 ? (vdp - d) / 16 : 4) {
	case 1: blk_pv(a, t0, nt, d, np2, pb, c + t0, 1); break;
	case 2: blk_pv(a, t0, nt, d, np2, pb, c + t0, 2); break;
	case 3: blk_pv(a, t0, nt, d, np2, pb, c + t0, 3); break;
	default: blk_pv(a, t0, nt, d, np2, pb, c + t0, 4); break;
	}
}

/* The rows' scores a few groups of keys at a time over all the tiles,
 * their weights, then their outputs 64 values at a time over all the
 * tiles: a few groups of keys (at V2-Lite's widths 48 int8 keys, 10 KiB,
 * or 64 bf16 keys, 24 KiB) and the values for 64 outputs (256 keys by 64,
 * 32 KiB) stay in L1 from one tile to the next, where the block's keys
 * and values (120-160 KiB) would be read from L2 for every tile. */
static void attn_blk(const ds_attn_blk *a, float *scratch)
{
	uint16_t *pb = (uint16_t *)(scratch + DS_ATTN_TOKENS * DS_ATTN_BLK);
	size_t vdp = (a->vd + 15) / 16 * 16, t, d, g, m = 1;
	float c[DS_ATTN_TOKENS];

	for (g = 0; m; g += a->k8 ? 3 : 4)
		for (t = 0, m = 0; t < a->nt; t += 4)
			m |= blk_group(a, t, a->nt - t < 4 ? a->nt - t : 4, g, scratch);
	/* each row's weights to its tile's last group, which its values read */
	for (t = 0; t < a->nt; t++)
		c[t] = blk_weights(a, t, scratch + t * DS_ATTN_BLK, pb + t * DS_ATTN_BLK,
				   blk_seen(a, t), (blk_seen(a, (t | 3) < a->nt ? t | 3 : a->nt - 1)
						    + 15) / 16 * 16);
	for (d = 0; d < vdp; d += 64)
		for (t = 0; t < a->nt; t += 4)
			blk_values(a, t, a->nt - t < 4 ? a->nt - t : 4, d, pb, c);
}

/* ---- probes ------------------------------------------------------------------- */

static uint64_t read_probe(const uint8_t *p, size_t n)
{
	__m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
	size_t i;

	for (i = 0; i < n; i += 256) {
		a = _mm512_add_epi64(a, _mm512_load_si512(p + i));
		b = _mm512_add_epi64(b, _mm512_load_si512(p + i + 64));
		c = _mm512_add_epi64(c, _mm512_load_si512(p + i + 128));
		d = _mm512_add_epi64(d, _mm512_load_si512(p + i + 192));
	}
	/* or, not add: the intrinsic's reduction is signed C arithmetic */
	return (uint64_t)_mm512_reduce_or_epi64(_mm512_xor_si512(_mm512_xor_si512(a, b),
								 _mm512_xor_si512(c, d)));
}

/* The peaks: x86.h's loop over 512-bit steps. */
typedef __m512i peak_i512_fn(__m512i acc, __m512i w, __m512i x);
typedef __m512 peak_f512_fn(__m512 acc, __m512 w, __m512 x);

AI void keep_i512(__m512i *v)
{
	__asm__ volatile("" : "+v"(*v));
}

AI void keep_f512(__m512 *v)
{
	__asm__ volatile("" : "+v"(*v));
}

AI void peak_i512(uint64_t iters, peak_i512_fn *op, __m512i w, __m512i x)
{
	__m512i a0 = _mm512_set1_epi32(1), a1 = a0, a2 = a0, a3 = a0, a4 = a0;
	__m512i a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0;
	__m512i *acc[PEAK_ACC] = { &a0, &a1, &a2, &a3, &a4, &a5, &a6, &a7, &a8, &a9 };
	uint64_t i;
	int j;

	for (i = 0; i < iters; i++)
		#pragma GCC unroll 10
		for (j = 0; j < PEAK_ACC; j++) {
			*acc[j] = op(*acc[j], w, x);
			keep_i512(acc[j]);
		}
}

AI void peak_f512(uint64_t iters, peak_f512_fn *op, __m512 w, __m512 x)
{
	__m512 a0 = _mm512_set1_ps(1.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0;
	__m512 a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0;
	__m512 *acc[PEAK_ACC] = { &a0, &a1, &a2, &a3, &a4, &a5, &a6, &a7, &a8, &a9 };
	uint64_t i;
	int j;

	for (i = 0; i < iters; i++)
		#pragma GCC unroll 10
		for (j = 0; j < PEAK_ACC; j++) {
			*acc[j] = op(*acc[j], w, x);
			keep_f512(acc[j]);
		}
}

AI __m512i dpbusd512(__m512i acc, __m512i w, __m512i x)
{
	return _mm512_dpbusd_epi32(acc, w, x);
}

AI __m512 dpbf16_512(__m512 acc, __m512 w, __m512 x)
{
	return _mm512_dpbf16_ps(acc, (__m512bh)w, (__m512bh)x);
}

AI __m512 fma512(__m512 acc, __m512 w, __m512 x)
{
	return _mm512_fmadd_ps(acc, w, x);
}

uint64_t ds_avx512_peak_probe(int kind, uint64_t iters)
{
	__m512i w = _mm512_set1_epi8(3), x = _mm512_set1_epi8(5);

	if (kind == DS_PEAK_INT8) {
		peak_i512(iters, dpbusd512, w, x);
		return iters * PEAK_ACC * 64;
	}
	if (kind == DS_PEAK_BF16) {
		peak_f512(iters, dpbf16_512, _mm512_castsi512_ps(w), _mm512_castsi512_ps(x));
		return iters * PEAK_ACC * 32;
	}
	peak_f512(iters, fma512, _mm512_set1_ps(1.0f), _mm512_set1_ps(1e-9f));
	return iters * PEAK_ACC * 16;
}

void ds_kernels_fill_avx512(ds_kernels *k)
{
	k->name = "avx512";
	k->isa = DS_ISA_AVX512;
	k->mm[DS_F32] = mm_f32;
	k->mm[DS_F16] = mm_f16;
	k->mm[DS_BF16] = mm_bf16;
	k->mm[DS_Q8] = mm_q8;
	k->mm[DS_Q4] = mm_q4;
	k->quant_row = quant_row;
	k->bf16_row = bf16_row;
	k->kv_store = kv_store;
	k->kv_load = kv_load_row;
	k->sumsq = sumsq;
	k->rmsnorm = rmsnorm;
	k->softmax = softmax;
	k->silu_mul = silu_mul;
	k->add = add;
	k->axpy = axpy;
	k->rope = rope;
	k->attn = attn;
	k->attn_blk = attn_blk;
	k->attn_q8 = 1;
	k->read_probe = read_probe;
	k->peak_probe = ds_avx512_peak_probe;
}

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

#define AI static inline __attribute__((always_inline))
#define TT_MAX 6   /* activation rows per tile (register budget) */
#ifndef PF_AHEAD
#define PF_AHEAD 2048
#endif

AI __m512i bcast32(const void *p)
{
	int32_t v;

	memcpy(&v, p, 4);
	return _mm512_set1_epi32(v);
}

AI __mmask16 row_mask(const ds_mat *w, size_t rs)
{
	uint64_t left = w->n - rs * DS_ROWSET;

	return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}

/* Call fn(..., nt) with nt a compile-time constant 1..TT_MAX. */
#define TILE_SWITCH(nt, call)                                               \
	switch (nt) {                                                       \
	case 1: call(1); break;                                             \
	case 2: call(2); break;                                             \
	case 3: call(3); break;                                             \
	case 4: call(4); break;                                             \
	case 5: call(5); break;                                             \
	default: call(6); break;                                            \
	}

/* e^x, |relative error| < 2e-7 (degree-7 Taylor on |r| <= ln2/2). */
AI __m512 exp512(__m512 x)
{
	__m512 n, r, p;

	x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
	x = _mm512_min_ps(x, _mm512_set1_ps(88.7f));
	n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
				 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
	p = _mm512_set1_ps(1.0f / 5040);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	return _mm512_scalef_ps(p, n);
}

/* ---- q4: w = S (q - Z) ------------------------------------------------------ */

/* One row-set by TT activation rows t0.. (see scalar.c qrow_dot). */
AI void q4_tile(const ds_mat *w, const uint8_t *rs, const ds_act *x,
		size_t t0, float *y, size_t ldy, __mmask16 m, const int TT)
{
	const size_t kp = w->kp, G = w->type.group, ng = kp / G;
	const size_t nb = x->ldq / DS_QBLOCK;
	const uint8_t *sc = rs + 8 * kp, *zp = sc + 32 * ng;
	const __m512i m4 = _mm512_set1_epi8(15);
	const int8_t *xq[TT_MAX];
	const float *xd[TT_MAX], *xs[TT_MAX];
	__m512 acc[TT_MAX];
	size_t g, k;
	int t, c;

	#pragma GCC unroll 8
	for (t = 0; t < TT; t++) {
		xq[t] = x->q + (t0 + t) * x->ldq;
		xd[t] = x->qd + (t0 + t) * nb;
		xs[t] = x->qs + (t0 + t) * nb;
		acc[t] = _mm512_setzero_ps();
	}
	for (g = 0; g < ng; g++) {
		__m512 s = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(sc + 32 * g)));
		__m512 z = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
			_mm_loadu_si128((const void *)(zp + 16 * g))));
		__m512 A[TT_MAX];
		float S[TT_MAX];

		#pragma GCC unroll 8
		for (t = 0; t < TT; t++) {
			A[t] = _mm512_setzero_ps();
			S[t] = 0;
		}
		for (k = g * G; k < (g + 1) * G; k += DS_QBLOCK) {
			const uint8_t *wp = rs + 8 * k;
			__m512i lo[TT_MAX], hi[TT_MAX];

			#pragma GCC unroll 8
			for (t = 0; t < TT; t++)
				lo[t] = hi[t] = _mm512_setzero_si512();
			#pragma GCC unroll 8
			for (c = 0; c < 4; c++) {
				__m512i wv = _mm512_loadu_si512(wp + 64 * c);
				__m512i wl = _mm512_and_si512(wv, m4);
				__m512i wh = _mm512_and_si512(_mm512_srli_epi16(wv, 4), m4);

				#pragma GCC unroll 8
				for (t = 0; t < TT; t++) {
					lo[t] = _mm512_dpbusd_epi32(lo[t], wl,
						bcast32(xq[t] + k + 8 * c));
					hi[t] = _mm512_dpbusd_epi32(hi[t], wh,
						bcast32(xq[t] + k + 8 * c + 4));
				}
			}
			#pragma GCC unroll 8
			for (t = 0; t < TT; t++) {
				__m512 dot = _mm512_cvtepi32_ps(_mm512_add_epi32(lo[t], hi[t]));

				A[t] = _mm512_fmadd_ps(dot, _mm512_set1_ps(xd[t][k / DS_QBLOCK]), A[t]);
				S[t] += xs[t][k / DS_QBLOCK];
			}
		}
		#pragma GCC unroll 8
		for (t = 0; t < TT; t++)
			acc[t] = _mm512_fmadd_ps(s, _mm512_fnmadd_ps(z, _mm512_set1_ps(S[t]), A[t]),
						 acc[t]);
	}
	#pragma GCC unroll 8
	for (t = 0; t < TT; t++)
		_mm512_mask_storeu_ps(y + (t0 + t) * ldy, m, acc[t]);
}

/* Decode: one activation row.  Four integer accumulators per block keep
 * the vpdpbusd dependency chains short. */
static void q4_vec(const ds_mat *w, const uint8_t *rs, const ds_act *x,
		   float *y, __mmask16 m)
{
	const size_t kp = w->kp, G = w->type.group, ng = kp / G;
	const uint8_t *sc = rs + 8 * kp, *zp = sc + 32 * ng;
	const __m512i m4 = _mm512_set1_epi8(15);
	__m512 acc = _mm512_setzero_ps();
	size_t g, k;

	for (g = 0; g < ng; g++) {
		__m512 s = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(sc + 32 * g)));
		__m512 z = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
			_mm_loadu_si128((const void *)(zp + 16 * g))));
		__m512 A = _mm512_setzero_ps();
		float S = 0;

		for (k = g * G; k < (g + 1) * G; k += DS_QBLOCK) {
			const uint8_t *wp = rs + 8 * k;
			const int8_t *xq = x->q + k;
			__m512i w0, w1;

			/* decode streams from memory: keep PF_AHEAD bytes in flight */
			_mm_prefetch((const char *)wp + PF_AHEAD, _MM_HINT_T0);
			_mm_prefetch((const char *)wp + PF_AHEAD + 64, _MM_HINT_T0);
			_mm_prefetch((const char *)wp + PF_AHEAD + 128, _MM_HINT_T0);
			_mm_prefetch((const char *)wp + PF_AHEAD + 192, _MM_HINT_T0);
			w0 = _mm512_loadu_si512(wp);
			w1 = _mm512_loadu_si512(wp + 64);
			__m512i w2 = _mm512_loadu_si512(wp + 128), w3 = _mm512_loadu_si512(wp + 192);
			__m512i a0, a1, a2, a3;

			a0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(w0, m4), bcast32(xq));
			a1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
				_mm512_and_si512(_mm512_srli_epi16(w0, 4), m4), bcast32(xq + 4));
			a2 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(w1, m4), bcast32(xq + 8));
			a3 = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
				_mm512_and_si512(_mm512_srli_epi16(w1, 4), m4), bcast32(xq + 12));
			a0 = _mm512_dpbusd_epi32(a0, _mm512_and_si512(w2, m4), bcast32(xq + 16));
			a1 = _mm512_dpbusd_epi32(a1, _mm512_and_si512(_mm512_srli_epi16(w2, 4), m4),
						 bcast32(xq + 20));
			a2 = _mm512_dpbusd_epi32(a2, _mm512_and_si512(w3, m4), bcast32(xq + 24));
			a3 = _mm512_dpbusd_epi32(a3, _mm512_and_si512(_mm512_srli_epi16(w3, 4), m4),
						 bcast32(xq + 28));
			a0 = _mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3));
			A = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0),
					    _mm512_set1_ps(x->qd[k / DS_QBLOCK]), A);
			S += x->qs[k / DS_QBLOCK];
		}
		acc = _mm512_fmadd_ps(s, _mm512_fnmadd_ps(z, _mm512_set1_ps(S), A), acc);
	}
	_mm512_mask_storeu_ps(y, m, acc);
}

static void mm_q4(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		  size_t rs0, size_t rs1)
{
	size_t rs, t;

	for (rs = rs0; rs < rs1; rs++) {
		const uint8_t *p = w->data + rs * w->rs_bytes;
		float *yr = y + rs * DS_ROWSET;
		__mmask16 m = row_mask(w, rs);

		if (x->t == 1) {
			q4_vec(w, p, x, yr, m);
			continue;
		}
		for (t = 0; t < x->t; t += TT_MAX) {
#define CALL(n) q4_tile(w, p, x, t, yr, ldy, m, n)
			TILE_SWITCH(x->t - t, CALL)
#undef CALL
		}
	}
}

/* ---- q8: w = S (u - 128) ---------------------------------------------------- */

AI void q8_tile(const ds_mat *w, const uint8_t *rs, const ds_act *x,
		size_t t0, float *y, size_t ldy, __mmask16 m, const int TT)
{
	const size_t kp = w->kp, G = w->type.group, ng = kp / G;
	const size_t nb = x->ldq / DS_QBLOCK;
	const uint8_t *sc = rs + 16 * kp;
	const int8_t *xq[TT_MAX];
	const float *xd[TT_MAX], *xs[TT_MAX];
	__m512 acc[TT_MAX];
	size_t g, k;
	int t, c;

	#pragma GCC unroll 8
	for (t = 0; t < TT; t++) {
		xq[t] = x->q + (t0 + t) * x->ldq;
		xd[t] = x->qd + (t0 + t) * nb;
		xs[t] = x->qs + (t0 + t) * nb;
		acc[t] = _mm512_setzero_ps();
	}
	for (g = 0; g < ng; g++) {
		__m512 s = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(sc + 32 * g)));
		__m512 A[TT_MAX];
		float S[TT_MAX];

		#pragma GCC unroll 8
		for (t = 0; t < TT; t++) {
			A[t] = _mm512_setzero_ps();
			S[t] = 0;
		}
		for (k = g * G; k < (g + 1) * G; k += DS_QBLOCK) {
			const uint8_t *wp = rs + 16 * k;
			__m512i e[TT_MAX], o[TT_MAX];

			#pragma GCC unroll 8
			for (t = 0; t < TT; t++)
				e[t] = o[t] = _mm512_setzero_si512();
			#pragma GCC unroll 8
			for (c = 0; c < 8; c += 2) {
				__m512i w0 = _mm512_loadu_si512(wp + 64 * c);
				__m512i w1 = _mm512_loadu_si512(wp + 64 * c + 64);

				#pragma GCC unroll 8
				for (t = 0; t < TT; t++) {
					e[t] = _mm512_dpbusd_epi32(e[t], w0, bcast32(xq[t] + k + 4 * c));
					o[t] = _mm512_dpbusd_epi32(o[t], w1, bcast32(xq[t] + k + 4 * c + 4));
				}
			}
			#pragma GCC unroll 8
			for (t = 0; t < TT; t++) {
				__m512 dot = _mm512_cvtepi32_ps(_mm512_add_epi32(e[t], o[t]));

				A[t] = _mm512_fmadd_ps(dot, _mm512_set1_ps(xd[t][k / DS_QBLOCK]), A[t]);
				S[t] += xs[t][k / DS_QBLOCK];
			}
		}
		#pragma GCC unroll 8
		for (t = 0; t < TT; t++)
			acc[t] = _mm512_fmadd_ps(s, _mm512_sub_ps(A[t], _mm512_set1_ps(128.0f * S[t])),
						 acc[t]);
	}
	#pragma GCC unroll 8
	for (t = 0; t < TT; t++)
		_mm512_mask_storeu_ps(y + (t0 + t) * ldy, m, acc[t]);
}

static void q8_vec(const ds_mat *w, const uint8_t *rs, const ds_act *x,
		   float *y, __mmask16 m)
{
	const size_t kp = w->kp, G = w->type.group, ng = kp / G;
	const uint8_t *sc = rs + 16 * kp;
	__m512 acc = _mm512_setzero_ps();
	size_t g, k;
	int c;

	for (g = 0; g < ng; g++) {
		__m512 s = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(sc + 32 * g)));
		__m512 A = _mm512_setzero_ps();
		float S = 0;

		for (k = g * G; k < (g + 1) * G; k += DS_QBLOCK) {
			const uint8_t *wp = rs + 16 * k;
			const int8_t *xq = x->q + k;
			__m512i a[4];

			#pragma GCC unroll 8
			for (c = 0; c < 4; c++)
				a[c] = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
					_mm512_loadu_si512(wp + 64 * c), bcast32(xq + 4 * c));
			#pragma GCC unroll 8
			for (c = 0; c < 4; c++)
				a[c] = _mm512_dpbusd_epi32(a[c], _mm512_loadu_si512(wp + 256 + 64 * c),
							   bcast32(xq + 16 + 4 * c));
			a[0] = _mm512_add_epi32(_mm512_add_epi32(a[0], a[1]),
						_mm512_add_epi32(a[2], a[3]));
			A = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[0]),
					    _mm512_set1_ps(x->qd[k / DS_QBLOCK]), A);
			S += x->qs[k / DS_QBLOCK];
		}
		acc = _mm512_fmadd_ps(s, _mm512_sub_ps(A, _mm512_set1_ps(128.0f * S)), acc);
	}
	_mm512_mask_storeu_ps(y, m, acc);
}

static void mm_q8(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		  size_t rs0, size_t rs1)
{
	size_t rs, t;

	for (rs = rs0; rs < rs1; rs++) {
		const uint8_t *p = w->data + rs * w->rs_bytes;
		float *yr = y + rs * DS_ROWSET;
		__mmask16 m = row_mask(w, rs);

		if (x->t == 1) {
			q8_vec(w, p, x, yr, m);
			continue;
		}
		for (t = 0; t < x->t; t += TT_MAX) {
#define CALL(n) q8_tile(w, p, x, t, yr, ldy, m, n)
			TILE_SWITCH(x->t - t, CALL)
#undef CALL
		}
	}
}

/* ---- bf16 ------------------------------------------------------------------- */

AI __m512 dpbf16(__m512 acc, __m512i w, __m512i x)
{
	return _mm512_dpbf16_ps(acc, (__m512bh)w, (__m512bh)x);
}

AI void bf16_tile(const ds_mat *w, const uint8_t *rs, const ds_act *x,
		  size_t t0, float *y, size_t ldy, __mmask16 m, const int TT)
{
	const uint16_t *xb[TT_MAX];
	__m512 a0[TT_MAX], a1[TT_MAX];
	size_t c;
	int t;

	#pragma GCC unroll 8
	for (t = 0; t < TT; t++) {
		xb[t] = x->b + (t0 + t) * x->ldq;
		a0[t] = a1[t] = _mm512_setzero_ps();
	}
	for (c = 0; c < w->kp / 2; c += 2) {
		__m512i w0 = _mm512_loadu_si512(rs + 64 * c);
		__m512i w1 = _mm512_loadu_si512(rs + 64 * c + 64);

		#pragma GCC unroll 8
		for (t = 0; t < TT; t++) {
			a0[t] = dpbf16(a0[t], w0, bcast32(xb[t] + 2 * c));
			a1[t] = dpbf16(a1[t], w1, bcast32(xb[t] + 2 * c + 2));
		}
	}
	#pragma GCC unroll 8
	for (t = 0; t < TT; t++)
		_mm512_mask_storeu_ps(y + (t0 + t) * ldy, m, _mm512_add_ps(a0[t], a1[t]));
}

static void mm_bf16(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		    size_t rs0, size_t rs1)
{
	size_t rs, t;

	for (rs = rs0; rs < rs1; rs++) {
		const uint8_t *p = w->data + rs * w->rs_bytes;
		float *yr = y + rs * DS_ROWSET;
		__mmask16 m = row_mask(w, rs);

		for (t = 0; t < x->t; t += TT_MAX) {
#define CALL(n) bf16_tile(w, p, x, t, yr, ldy, m, n)
			TILE_SWITCH(x->t - t, CALL)
#undef CALL
		}
	}
}

/* ---- f32 / f16, row-major: dot products, 4 rows by up to 4 x rows ------- */

AI __m512 load_w(const uint8_t *base, int f16, size_t i, __mmask16 m)
{
	if (f16)
		return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, base + 2 * i));
	return _mm512_maskz_loadu_ps(m, base + 4 * i);
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
			xv[t] = _mm512_maskz_loadu_ps(m, xr[t] + i);
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
	v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), sv);
	if (nw)
		v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, nw + i));
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
		__m512 u = _mm512_maskz_loadu_ps(tail(n, i), x + i);

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

		_mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_mul_ps(
			_mm512_maskz_loadu_ps(m, x + i), r), _mm512_maskz_loadu_ps(m, w + i)));
	}
}

static void softmax(float *x, size_t n)
{
	__m512 mv = _mm512_set1_ps(-INFINITY), sv = _mm512_setzero_ps();
	size_t i;
	float inv;

	for (i = 0; i < n; i += 16)
		mv = _mm512_mask_max_ps(mv, tail(n, i), mv, _mm512_maskz_loadu_ps(tail(n, i), x + i));
	mv = _mm512_set1_ps(_mm512_reduce_max_ps(mv));
	for (i = 0; i < n; i += 16) {
		__mmask16 m = tail(n, i);
		__m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mv));

		e = _mm512_maskz_mov_ps(m, e);
		sv = _mm512_add_ps(sv, e);
		_mm512_mask_storeu_ps(x + i, m, e);
	}
	inv = 1.0f / _mm512_reduce_add_ps(sv);
	for (i = 0; i < n; i += 16) {
		__mmask16 m = tail(n, i);

		_mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i),
							       _mm512_set1_ps(inv)));
	}
}

static void silu_mul(const float *g, const float *u, size_t n, float *h)
{
	const __m512 one = _mm512_set1_ps(1.0f);
	size_t i;

	for (i = 0; i < n; i += 16) {
		__mmask16 m = tail(n, i);
		__m512 gv = _mm512_maskz_loadu_ps(m, g + i);
		__m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), gv));

		_mm512_mask_storeu_ps(h + i, m, _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)),
							      _mm512_maskz_loadu_ps(m, u + i)));
	}
}

static void add(const float *a, const float *b, size_t n, float *y)
{
	size_t i;

	for (i = 0; i < n; i += 16) {
		__mmask16 m = tail(n, i);

		_mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i),
							      _mm512_maskz_loadu_ps(m, b + i)));
	}
}

static void axpy(float a, const float *x, size_t n, float *y)
{
	__m512 av = _mm512_set1_ps(a);
	size_t i;

	for (i = 0; i < n; i += 16) {
		__mmask16 m = tail(n, i);

		_mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i),
								_mm512_maskz_loadu_ps(m, y + i)));
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
				__m512 a = _mm512_maskz_loadu_ps(m, p + i);
				__m512 b = _mm512_maskz_loadu_ps(m, p + half + i);
				__m512 c = _mm512_maskz_loadu_ps(m, cs + i);
				__m512 s = _mm512_maskz_loadu_ps(m, cs + half + i);

				_mm512_mask_storeu_ps(p + i, m, _mm512_fmsub_ps(a, c, _mm512_mul_ps(b, s)));
				_mm512_mask_storeu_ps(p + half + i, m,
						      _mm512_fmadd_ps(a, s, _mm512_mul_ps(b, c)));
			}
			continue;
		}
		for (i = 0; i < half; i += 8) {
			__mmask16 m = tail(dim, 2 * i);
			__mmask16 mh = (__mmask16)(tail(half, i) & 0xff);
			__m512 v = _mm512_maskz_loadu_ps(m, p + 2 * i);
			__m512 c = _mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(mh, cs + i));
			__m512 s = _mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(mh, cs + half + i));
			__m512 sw = _mm512_permute_ps(v, 0xb1); /* (b, a) per pair */

			_mm512_mask_storeu_ps(p + 2 * i, m,
					      _mm512_fmaddsub_ps(v, c, _mm512_mul_ps(sw, s)));
		}
	}
}

/* ---- attention ----------------------------------------------------------------- */

/* Cache row -> dim floats (dim rounded up to 16 with zeros). */
static void kv_row_f32(enum ds_kvtype t, const uint8_t *row, size_t dim,
		       float *out)
{
	size_t i;

	if (t == DS_KV_Q8) {
		for (i = 0; i < dim; i += 32) {
			const uint8_t *b = row + 36 * (i / 32);
			float df;
			__m512 d;

			memcpy(&df, b, 4);
			d = _mm512_set1_ps(df);
			__m256i q = _mm256_loadu_si256((const void *)(b + 4));

			_mm512_storeu_ps(out + i, _mm512_mul_ps(d, _mm512_cvtepi32_ps(
				_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q)))));
			_mm512_storeu_ps(out + i + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(
				_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1)))));
		}
		return;
	}
	for (i = 0; i < dim; i += 16) {
		__mmask16 m = tail(dim, i);
		__m512 v;

		if (t == DS_KV_F32)
			v = _mm512_maskz_loadu_ps(m, row + 4 * i);
		else if (t == DS_KV_F16)
			v = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * i));
		else
			v = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(
				_mm256_maskz_loadu_epi16(m, row + 2 * i)), 16));
		_mm512_storeu_ps(out + i, v);
	}
}

static float dot(const float *a, const float *b, size_t n)
{
	__m512 s = _mm512_setzero_ps();
	size_t i;

	for (i = 0; i < n; i += 16) {
		__mmask16 m = tail(n, i);

		s = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s);
	}
	return _mm512_reduce_add_ps(s);
}

static void scale_row(float *o, size_t n, float c)
{
	size_t i;

	for (i = 0; i < n; i += 16) {
		__mmask16 m = tail(n, i);

		_mm512_mask_storeu_ps(o + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, o + i),
							      _mm512_set1_ps(c)));
	}
}

static float exp_sub_sum(float *s, size_t n, float m)
{
	__m512 sum = _mm512_setzero_ps();
	size_t i;

	for (i = 0; i < n; i += 16) {
		__mmask16 mk = tail(n, i);
		__m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, s + i), _mm512_set1_ps(m)));

		e = _mm512_maskz_mov_ps(mk, e);
		_mm512_mask_storeu_ps(s + i, mk, e);
		sum = _mm512_add_ps(sum, e);
	}
	return _mm512_reduce_add_ps(sum);
}

#include "attn_online.h"

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
	return (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a, b),
								  _mm512_add_epi64(c, d)));
}

/* PEAK_ACC independent accumulators in named registers (an array would
 * be kept in memory) hide each instruction's latency. */
#define PEAK_ACC 10
#define KEEP(v) __asm__ volatile("" : "+v"(v))
#define STEP(A) A = OP(A); KEEP(A)
#define PEAK_LOOP(T, init)                                                  \
	do {                                                                \
		T a0 = init, a1 = init, a2 = init, a3 = init, a4 = init;     \
		T a5 = init, a6 = init, a7 = init, a8 = init, a9 = init;     \
		for (i = 0; i < iters; i++) {                               \
			STEP(a0); STEP(a1); STEP(a2); STEP(a3); STEP(a4);    \
			STEP(a5); STEP(a6); STEP(a7); STEP(a8); STEP(a9);    \
		}                                                           \
	} while (0)

static uint64_t peak_probe(int kind, uint64_t iters)
{
	__m512i w = _mm512_set1_epi8(3), x = _mm512_set1_epi8(5);
	__m512 fw = _mm512_set1_ps(1.0f), fx = _mm512_set1_ps(1e-9f);
	uint64_t i;

	if (kind == DS_PEAK_INT8) {
#define OP(A) _mm512_dpbusd_epi32(A, w, x)
		PEAK_LOOP(__m512i, _mm512_set1_epi32(1));
#undef OP
		return iters * PEAK_ACC * 64;
	}
	if (kind == DS_PEAK_BF16) {
#define OP(A) _mm512_dpbf16_ps(A, (__m512bh)w, (__m512bh)x)
		PEAK_LOOP(__m512, _mm512_set1_ps(1.0f));
#undef OP
		return iters * PEAK_ACC * 32;
	}
#define OP(A) _mm512_fmadd_ps(A, fw, fx)
	PEAK_LOOP(__m512, _mm512_set1_ps(1.0f));
#undef OP
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
	k->sumsq = sumsq;
	k->rmsnorm = rmsnorm;
	k->softmax = softmax;
	k->silu_mul = silu_mul;
	k->add = add;
	k->axpy = axpy;
	k->rope = rope;
	k->attn = attn;
	k->read_probe = read_probe;
	k->peak_probe = peak_probe;
}

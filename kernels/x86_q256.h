/*
 * x86_q256.h - the 256-bit q4 and q8 matrix kernels, shared by avx2.c
 * (int8 dot products by vpmaddubsw + vpmaddwd) and avxvnni.c (vpdpbusd).
 * The includer defines, before including this file:
 *   q_dot(acc, u, s)   acc + the sum of 4 u8 x s8 products per 32-bit lane
 *                      (u in 0..15 here, so vpmaddubsw cannot saturate)
 *   q8_dot(acc, u, s)  acc + sum (u - q8_bias) products per lane for the
 *                      biased q8 weights u in 1..255
 *   q8_bias            128 if q8_dot leaves the bias in (it is then
 *                      removed through the block sums), 0 if it takes
 *                      it out itself
 *   Q_ANY_U8           1 if q_dot takes any u8 (vpdpbusd: no 16-bit
 *                      intermediate to saturate)
 *   Q_DOT16            1 to sum a q4 block's vpmaddubsw pairs in 16 bits
 *                      and widen once per block (q4_dot16)
 * A row-set's 64-byte chunk is two vectors: rows 0-7 and rows 8-15.
 */
#include "x86.h"

#define QTT_MAX 2   /* activation rows per tile: 16 ymm registers */

/* A q4 block, in decode and in the tile, where Q_DOT16: vpmaddubsw's
 * pair sums (at most 2*15*127 = 3810) added in 16 bits over the block's
 * eight nibble vectors (at most 30480, no saturation), then widened by
 * one vpmaddwd: 2 instructions per vector instead of 3, the same sum. */
AI __m256i q4_dot16(__m256i acc, __m256i u, __m256i s)
{
	return _mm256_add_epi16(acc, _mm256_maddubs_epi16(u, s));
}

AI __m256i q4_widen(__m256i acc)
{
	return _mm256_madd_epi16(acc, _mm256_set1_epi16(1));
}

/* A q4 chunk's high nibbles for q_dot, and their sum as the low nibbles'
 * scale: in place (16 q: one AND, the factor divided out of the exact
 * sum) where q_dot takes any u8, shifted down where it must stay small. */
AI __m256i q4_hi(__m256i v)
{
	if (Q_ANY_U8)
		return _mm256_and_si256(v, _mm256_set1_epi8((char)0xf0));
	return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(15));
}

AI __m256i q4_hi_sum(__m256i d)
{
	return Q_ANY_U8 ? _mm256_srai_epi32(d, 4) : d;
}

/* A q4 block's dot products: q4t accumulates, q4t_sum the tile's one sum
 * per row as 32 bits, q4_sum the block total of decode's two (low and
 * high nibbles, each at most 4 x 3810 with Q_DOT16: their 16-bit sum
 * cannot saturate). */
AI __m256i q4t(__m256i acc, __m256i u, __m256i s)
{
	return Q_DOT16 ? q4_dot16(acc, u, s) : q_dot(acc, u, s);
}

AI __m256i q4t_sum(__m256i acc)
{
	return Q_DOT16 ? q4_widen(acc) : acc;
}

AI __m256i q4_sum(__m256i lo, __m256i hi)
{
	if (Q_DOT16)
		return q4_widen(_mm256_add_epi16(lo, hi));
	return _mm256_add_epi32(lo, q4_hi_sum(hi));
}

AI __m256i q_bcast32(const void *p)
{
	int32_t v;

	memcpy(&v, p, 4);
	return _mm256_set1_epi32(v);
}

/* lanes of rows 8h .. 8h+7 that exist */
AI __m256i q_rowmask(const ds_mat *w, size_t rs, int h)
{
	int64_t left = (int64_t)(w->n - rs * DS_ROWSET) - 8 * h;
	const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);

	return _mm256_cmpgt_epi32(_mm256_set1_epi32(left > 8 ? 8 : (int)left), lane);
}

AI __m256 q_zero8(const uint8_t *p)
{
	return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)p)));
}

/* One row-set (two halves) by TT activation rows; is4 selects q4 or q8. */
AI void q_tile(const ds_mat *w, const uint8_t *rs, const ds_act *x, size_t t0,
	       float *y, size_t ldy, const __m256i *rm, const int is4,
	       const int TT, const int GC)
{
	const size_t kp = w->kp, G = GC ? (size_t)GC : w->type.group, ng = kp / G;
	const size_t nb = x->ldq / DS_QBLOCK;
	const __m256i m4 = _mm256_set1_epi8(15);
	__m256 acc[QTT_MAX][2];
	size_t g, kb;
	int t, c, h;

	#pragma GCC unroll 8
	for (t = 0; t < TT; t++)
		acc[t][0] = acc[t][1] = _mm256_setzero_ps();
	for (g = 0; g < ng; g++) {
		const uint8_t *gw = rs + ds_qgrp_w(is4, G, ng, g) - (is4 ? 8 : 16) * g * G;
		__m256 A[QTT_MAX][2];
		float S[QTT_MAX];

		#pragma GCC unroll 8
		for (t = 0; t < TT; t++) {
			A[t][0] = A[t][1] = _mm256_setzero_ps();
			S[t] = 0;
		}
		#pragma GCC unroll 4
		for (kb = 0; kb < G; kb += DS_QBLOCK) {
			const size_t k = g * G + kb;
			__m256i d[QTT_MAX][2];

			#pragma GCC unroll 8
			for (t = 0; t < TT; t++)
				d[t][0] = d[t][1] = _mm256_setzero_si256();
						for (c = 0; c < (is4 ? 4 : 8); c++) {
				const uint8_t *wp = gw + (is4 ? 8 : 16) * k + 64 * c;

				#pragma GCC unroll 8
				for (h = 0; h < 2; h++) {
					__m256i wv = _mm256_loadu_si256((const void *)(wp + 32 * h));

					#pragma GCC unroll 8
					for (t = 0; t < TT; t++) {
						const int8_t *xq = x->q + (t0 + t) * x->ldq + k;

						if (is4) {
							d[t][h] = q4t(d[t][h], _mm256_and_si256(wv, m4),
								      q_bcast32(xq + 8 * c));
							d[t][h] = q4t(d[t][h],
								_mm256_and_si256(_mm256_srli_epi16(wv, 4), m4),
								q_bcast32(xq + 8 * c + 4));
						} else {
							d[t][h] = q8_dot(d[t][h], wv, q_bcast32(xq + 4 * c));
						}
					}
				}
			}
			#pragma GCC unroll 8
			for (t = 0; t < TT; t++) {
				size_t b = (t0 + t) * nb + k / DS_QBLOCK;
				__m256 db = _mm256_set1_ps(x->qd[b]);

				#pragma GCC unroll 8
				for (h = 0; h < 2; h++)
					A[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is4 ? q4t_sum(d[t][h])
											  : d[t][h]), db, A[t][h]);
				S[t] += x->qs[b];
			}
		}
		#pragma GCC unroll 8
		for (h = 0; h < 2; h++) {
			__m256 s = _mm256_cvtph_ps(_mm_loadu_si128((const void *)(rs + ds_qgrp_s(is4, G, g) +
										 16 * h)));
			__m256 z = is4 ? q_zero8(rs + ds_qgrp_z(G, ng, g) + 8 * h) : _mm256_set1_ps(q8_bias);

			#pragma GCC unroll 8
			for (t = 0; t < TT; t++)
				acc[t][h] = _mm256_fmadd_ps(s, _mm256_fnmadd_ps(z, _mm256_set1_ps(S[t]),
										A[t][h]), acc[t][h]);
		}
	}
	#pragma GCC unroll 8
	for (t = 0; t < TT; t++)
		#pragma GCC unroll 8
		for (h = 0; h < 2; h++)
			_mm256_maskstore_ps(y + (t0 + t) * ldy + 8 * h, rm[h], acc[t][h]);
}

/* q_tile with the group size a compile-time constant for g32 (see
 * q_vec_g): with a variable G the block loop's sums spilled to the
 * stack.  g128 measured alike either way (docs/perf.md, 2026-12-05
 * 11:09). */
AI void q_tile_g(const ds_mat *w, const uint8_t *rs, const ds_act *x, size_t t0,
		 float *y, size_t ldy, const __m256i *rm, const int is4,
		 const int TT)
{
	if (w->type.group == 32)
		q_tile(w, rs, x, t0, y, ldy, rm, is4, TT, 32);
	else
		q_tile(w, rs, x, t0, y, ldy, rm, is4, TT, 0);
}

/* ---- decode: one activation row ----------------------------------------
 * As avx512.c's q_vec: the weights stream from memory, and a core reaches
 * the read bandwidth only with more than one stream in flight.  Two
 * row-sets at a time (the 16 registers hold no more), `sets` row-sets
 * apart, each with a short software prefetch; the operations per row
 * are q_tile's, so the result does not depend on the path. */

/* Bytes prefetched ahead in each stream: as avx512.c's two streams, 3072
 * (measured with these kernels forced on the AVX-512 machine, against
 * 1024, 2048 and 4096: docs/perf.md, 2026-12-05 08:38). */
#define Q_PF 3072

AI void q_vec(const ds_mat *w, size_t rs0, size_t sets, const ds_act *x,
	      float *y, const int is4, const int R, const int GC)
{
	const size_t kp = w->kp, G = GC ? (size_t)GC : w->type.group, ng = kp / G;
	const size_t rsb = sets * w->rs_bytes, wb = is4 ? 8 : 16;
	const uint8_t *rs = w->data + rs0 * w->rs_bytes;
	const __m256i m4 = _mm256_set1_epi8(15);
	__m256 acc[2][2], A[2][2];
	size_t g, kb;
	int c, r, h;

	#pragma GCC unroll 2
	for (r = 0; r < R; r++)
		acc[r][0] = acc[r][1] = _mm256_setzero_ps();
	for (g = 0; g < ng; g++) {
		const uint8_t *gw = rs + ds_qgrp_w(is4, G, ng, g) - wb * g * G;
		float S = 0;

		if (g % DS_QSEG == 0)
			ds_qseg_fetch(rs, rsb, G, g, is4, R, Q_PF);
		#pragma GCC unroll 2
		for (r = 0; r < R; r++)
			A[r][0] = A[r][1] = _mm256_setzero_ps();
		#pragma GCC unroll 4
		for (kb = 0; kb < G; kb += DS_QBLOCK) {
			const size_t k = g * G + kb;
			const int8_t *xq = x->q + k;

			#pragma GCC unroll 2
			for (r = 0; r < R; r++)
				#pragma GCC unroll 8
				for (c = 0; c < 8; c++)
					if (!is4 || c < 4)
						_mm_prefetch((const char *)gw + r * rsb + wb * k + 64 * c + Q_PF,
							     _MM_HINT_T0);
			/* the half-chunks of rows 0-7, then of rows 8-15 (two
			 * integer sums per row-set live, not four), q4's low and
			 * high nibbles in sums of their own (two chains of four
			 * dot products, not one of eight) */
			#pragma GCC unroll 2
			for (h = 0; h < 2; h++) {
				__m256i dl[2], dh[2];

				#pragma GCC unroll 2
				for (r = 0; r < R; r++)
					dl[r] = dh[r] = _mm256_setzero_si256();
				#pragma GCC unroll 8
				for (c = 0; c < 8; c++) {
					__m256i b0, b1;

					if (is4 && c >= 4)
						continue;
					b0 = q_bcast32(xq + (is4 ? 8 : 4) * c);
					b1 = is4 ? q_bcast32(xq + 8 * c + 4) : b0;
					#pragma GCC unroll 2
					for (r = 0; r < R; r++) {
						__m256i wv = _mm256_loadu_si256((const void *)
							(gw + r * rsb + wb * k + 64 * c + 32 * h));

						if (is4) {
							dl[r] = q4t(dl[r], _mm256_and_si256(wv, m4), b0);
							dh[r] = q4t(dh[r], q4_hi(wv), b1);
						} else {
							dl[r] = q8_dot(dl[r], wv, b0);
						}
					}
				}
				#pragma GCC unroll 2
				for (r = 0; r < R; r++)
					A[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is4 ? q4_sum(dl[r], dh[r]) : dl[r]),
						_mm256_set1_ps(x->qd[k / DS_QBLOCK]), A[r][h]);
			}
			S += x->qs[k / DS_QBLOCK];
		}
		#pragma GCC unroll 2
		for (r = 0; r < R; r++)
			#pragma GCC unroll 2
			for (h = 0; h < 2; h++) {
				__m256 s = _mm256_cvtph_ps(_mm_loadu_si128((const void *)
					(rs + r * rsb + ds_qgrp_s(is4, G, g) + 16 * h)));
				__m256 z = is4 ? q_zero8(rs + r * rsb + ds_qgrp_z(G, ng, g) + 8 * h)
					       : _mm256_set1_ps(q8_bias);

				acc[r][h] = _mm256_fmadd_ps(s, _mm256_fnmadd_ps(z, _mm256_set1_ps(S),
										A[r][h]), acc[r][h]);
			}
	}
	#pragma GCC unroll 2
	for (r = 0; r < R; r++)
		#pragma GCC unroll 2
		for (h = 0; h < 2; h++)
			_mm256_maskstore_ps(y + (rs0 + r * sets) * DS_ROWSET + 8 * h,
					    q_rowmask(w, rs0 + r * sets, h), acc[r][h]);
}

/* q_vec with the group size a compile-time constant for the common ones:
 * the block loop then has a known count (one block for G = 32), and its
 * float partial sums no longer spill to the stack.  Without this and the
 * block order above, q4 decode was bound by the arithmetic, not by memory
 * (docs/perf.md, 2026-12-05 10:04). */
AI void q_vec_g(const ds_mat *w, size_t rs0, size_t sets, const ds_act *x,
		float *y, const int is4, const int R)
{
	switch (w->type.group) {
	case 32: q_vec(w, rs0, sets, x, y, is4, R, 32); break;
	case 128: q_vec(w, rs0, sets, x, y, is4, R, 128); break;
	default: q_vec(w, rs0, sets, x, y, is4, R, 0); break;
	}
}

/* Row-sets rs0 .. rs1-1 for one row: the range in halves, each walked in
 * address order, then the odd one. */
AI void q_vecs(const ds_mat *w, const ds_act *x, float *y, size_t rs0,
	       size_t rs1, const int is4)
{
	size_t half = (rs1 - rs0) / 2, rs;

	if (half > 0)   /* the streams' first Q_PF bytes: a claim starts cold */
		ds_fetch_streams(w->data + rs0 * w->rs_bytes, half * w->rs_bytes, 2, Q_PF);
	for (rs = rs0; rs < rs0 + half; rs++)
		q_vec_g(w, rs, half, x, y, is4, 2);
	if (rs0 + 2 * half < rs1)
		q_vec_g(w, rs1 - 1, 1, x, y, is4, 1);
}

AI void q_mm(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
	     size_t rs0, size_t rs1, const int is4)
{
	size_t rs, t;

	if (x->t == 1) {
		q_vecs(w, x, y, rs0, rs1, is4);
		return;
	}
	for (rs = rs0; rs < rs1; rs++) {
		const uint8_t *p = w->data + rs * w->rs_bytes;
		__m256i rm[2] = { q_rowmask(w, rs, 0), q_rowmask(w, rs, 1) };

		for (t = 0; t < x->t; t += QTT_MAX) {
			if (x->t - t >= 2)
				q_tile_g(w, p, x, t, y + rs * DS_ROWSET, ldy, rm, is4, 2);
			else
				q_tile_g(w, p, x, t, y + rs * DS_ROWSET, ldy, rm, is4, 1);
		}
	}
}

static void mm_q4(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		  size_t rs0, size_t rs1)
{
	q_mm(w, x, y, ldy, rs0, rs1, 1);
}

static void mm_q8(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		  size_t rs0, size_t rs1)
{
	q_mm(w, x, y, ldy, rs0, rs1, 0);
}

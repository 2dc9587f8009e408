/*
 * i8mm.c - prefill's q4 and q8 products with FEAT_I8MM (smmla) and the
 * bf16 products with FEAT_BF16 (bfdot), for the AArch64 CPUs that have
 * both (ARMv8.6-A; Neoverse V1, N2, V2, Graviton3/4, AmpereOne, Apple M2
 * and later); decode's q4/q8 products are dotprod.c's, the rest neon.c's.
 * Compiled with KFLAGS_i8mm.
 *
 * smmla multiplies a 2x8 int8 matrix by another's transpose into a 2x2
 * block of int32 sums: here two weight rows by two activation rows, 8
 * inputs deep, 32 products an instruction where sdot does 16.  A
 * row-set's vector holds 4 rows by 4 inputs (neon_q.h), so two vectors of
 * the same rows zipped by 32-bit lanes give two rows by 8 inputs: q4's
 * low and high nibbles of one vector (inputs 8c..8c+3 and 8c+4..8c+7), or
 * q8's chunks c and c+1.  A tile is half a row-set by four activation
 * rows, so that each pair of zips feeds four smmla (with two activation
 * rows the zips cost what smmla saves).  The 2x2 sums are unzipped into
 * each activation row's four rows per block, and from there the float
 * steps are neon_q.h's, so a row's result is the one dotprod.c's decode
 * gives.
 */
#include <arm_neon.h>
#include <string.h>

#include "kernels.h"
#include "arm.h"

#define Q_SDOT 1
#define Q_BF16 2

/* R row-sets `sets` apart by TT activation rows (neon_q.h's bf16_mm calls
 * it): one bfdot chain per row, the pair of chunk c the lane c % 4 of the
 * activations' vector of 8.  bfdot rounds to odd and flushes subnormals
 * (FPCR.EBF clear), two roundings a pair: the test's budget for it. */
static inline __attribute__((always_inline)) void
bf16_tile(const ds_mat *w, size_t rs, size_t sets, const ds_act *x, size_t t0, float *y,
	  size_t ldy, const int R, const int TT, const int pf);

#include "neon_q.h"

/* ---- bf16 (bfdot: lane r of the weights' vector holds w[r][2c..2c+1]) ---- */

AI float32x4_t bfdot(float32x4_t acc, uint16x8_t w, uint16x8_t x, const int L)
{
	bfloat16x8_t a = vreinterpretq_bf16_u16(w), b = vreinterpretq_bf16_u16(x);

	switch (L) {
	case 0: return vbfdotq_laneq_f32(acc, a, b, 0);
	case 1: return vbfdotq_laneq_f32(acc, a, b, 1);
	case 2: return vbfdotq_laneq_f32(acc, a, b, 2);
	default: return vbfdotq_laneq_f32(acc, a, b, 3);
	}
}

AI void bf16_tile(const ds_mat *w, size_t rs, size_t sets, const ds_act *x, size_t t0,
		  float *y, size_t ldy, const int R, const int TT, const int pf)
{
	const size_t rsb = sets * w->rs_bytes;
	const uint8_t *p = w->data + rs * w->rs_bytes;
	float32x4_t acc[2][QTT][4];
	size_t c;
	int r, t, j, l;

#pragma GCC unroll 2
	for (r = 0; r < R; r++)
#pragma GCC unroll 2
		for (t = 0; t < TT; t++)
#pragma GCC unroll 4
			for (j = 0; j < 4; j++)
				acc[r][t][j] = vdupq_n_f32(0);
	for (c = 0; c < w->kp / 2; c += 4) {
		uint16x8_t X[QTT];

#pragma GCC unroll 2
		for (t = 0; t < TT; t++)
			X[t] = vld1q_u16(x->b + (t0 + t) * x->ldq + 2 * c);
#pragma GCC unroll 4
		for (l = 0; l < 4; l++)
#pragma GCC unroll 2
			for (r = 0; r < R; r++) {
				const uint8_t *wp = p + r * rsb + 64 * (c + l);

				if (pf)
					__builtin_prefetch(wp + Q_PF, 0, 3);
#pragma GCC unroll 4
				for (j = 0; j < 4; j++) {
					uint16x8_t v = vld1q_u16((const uint16_t *)(const void *)(wp + 16 * j));

#pragma GCC unroll 2
					for (t = 0; t < TT; t++)
						acc[r][t][j] = bfdot(acc[r][t][j], v, X[t], l);
				}
			}
	}
#pragma GCC unroll 2
	for (r = 0; r < R; r++)
#pragma GCC unroll 2
		for (t = 0; t < TT; t++)
			q_store(y + t * ldy + r * sets * DS_ROWSET, acc[r][t], q_rows(w, rs + r * sets));
}

static void mm_bf16(const ds_mat *w, const ds_act *x, float *y, size_t ldy, size_t rs0,
		    size_t rs1)
{
	bf16_mm(w, x, y, ldy, rs0, rs1);
}

/* ---- q4 and q8 by smmla: half a row-set by four activation rows -------- */

/* The 2x2 sums of rows (4j, 4j+1) [m0] and (4j+2, 4j+3) [m1] by an
 * activation pair as each activation row's four: .val[0], .val[1]. */
AI int32x4x2_t mm_rows(int32x4_t m0, int32x4_t m1)
{
	return (int32x4x2_t){ { vuzp1q_s32(m0, m1), vuzp2q_s32(m0, m1) } };
}

/* Activation rows r0 and r1's inputs k .. k+31 as four smmla operands,
 * P[i] = their inputs 8i .. 8i+7 side by side. */
AI void mm_pair(const int8_t *r0, const int8_t *r1, size_t k, int8x16_t *P)
{
	int64x2_t a0 = vreinterpretq_s64_s8(vld1q_s8(r0 + k));
	int64x2_t a1 = vreinterpretq_s64_s8(vld1q_s8(r1 + k));
	int64x2_t c0 = vreinterpretq_s64_s8(vld1q_s8(r0 + k + 16));
	int64x2_t c1 = vreinterpretq_s64_s8(vld1q_s8(r1 + k + 16));

	P[0] = vreinterpretq_s8_s64(vzip1q_s64(a0, a1));
	P[1] = vreinterpretq_s8_s64(vzip2q_s64(a0, a1));
	P[2] = vreinterpretq_s8_s64(vzip1q_s64(c0, c1));
	P[3] = vreinterpretq_s8_s64(vzip2q_s64(c0, c1));
}

/* One 32-block at k of rows 8h .. 8h+7 (the row-set's vectors 2h, 2h+1):
 * M[p][u][e] += weight rows 4(2h+u)+2e and +1 by activation pair p.  A
 * pair of zipped weight vectors feeds both pairs: 4 smmla to 2 zips. */
AI void mm_blk(const uint8_t *gw, size_t k, size_t h, int8x16_t P[2][4], int32x4_t M[2][2][2],
	       const int is4)
{
	const uint8x16_t m4 = vdupq_n_u8(15), bias = vdupq_n_u8(0x80);
	const uint8_t *wh = gw + 32 * h;
	int i, u, p;

#pragma GCC unroll 4
	for (i = 0; i < 4; i++)
#pragma GCC unroll 2
		for (u = 0; u < 2; u++) {
			int8x16_t za, zb;
			int32x4_t a, b;

			if (is4) {
				/* chunk i: its low and high nibbles, inputs 8i.. */
				uint8x16_t v = vld1q_u8(wh + 8 * k + 64 * i + 16 * u);

				a = vreinterpretq_s32_u8(vandq_u8(v, m4));
				b = vreinterpretq_s32_u8(vshrq_n_u8(v, 4));
			} else {
				/* chunks 2i and 2i+1: inputs 8i..8i+3, 8i+4.. */
				const uint8_t *c = wh + 16 * k + 128 * i + 16 * u;

				a = vreinterpretq_s32_u8(veorq_u8(vld1q_u8(c), bias));
				b = vreinterpretq_s32_u8(veorq_u8(vld1q_u8(c + 64), bias));
			}
			za = vreinterpretq_s8_s32(vzip1q_s32(a, b));
			zb = vreinterpretq_s8_s32(vzip2q_s32(a, b));
#pragma GCC unroll 2
			for (p = 0; p < 2; p++) {
				M[p][u][0] = vmmlaq_s32(M[p][u][0], za, P[p][i]);
				M[p][u][1] = vmmlaq_s32(M[p][u][1], zb, P[p][i]);
			}
		}
}

/* The first `rows` (up to 8) outputs of v to y. */
AI void mm_store8(float *y, const float32x4_t *v, size_t rows)
{
	float tmp[8];

	if (rows >= 8) {
		vst1q_f32(y, v[0]);
		vst1q_f32(y + 4, v[1]);
		return;
	}
	vst1q_f32(tmp, v[0]);
	vst1q_f32(tmp + 4, v[1]);
	memcpy(y, tmp, rows * sizeof(float));
}

/* Rows 8h .. 8h+7 of row-set rs by activation rows t0 .. t0+nt-1 (nt <=
 * 4: the last one stands in for the missing ones, which are not stored);
 * y is row-set rs's first output of row t0.  GC as in neon_q.h's q_tile. */
AI void mm_tile(const ds_mat *w, size_t rs, size_t h, const ds_act *x, size_t t0, size_t nt,
		float *y, size_t ldy, const int is4, const int GC)
{
	const size_t G = GC ? (size_t)GC : w->type.group, ng = w->kp / G;
	const size_t nb = x->ldq / DS_QBLOCK, wb = is4 ? 8 : 16;
	const uint8_t *p = w->data + rs * w->rs_bytes;
	const size_t rows = q_rows(w, rs) - 8 * h;
	float32x4_t acc[4][2];
	size_t g, k, tt[4];
	int t, u, q;

#pragma GCC unroll 4
	for (t = 0; t < 4; t++) {
		tt[t] = t0 + ((size_t)t < nt ? (size_t)t : nt - 1);
		acc[t][0] = acc[t][1] = vdupq_n_f32(0);
	}
	for (g = 0; g < ng; g++) {
		const uint8_t *gw = p + ds_qgrp_w(is4, G, ng, g) - wb * g * G;
		float32x4_t A[4][2];
		float S[4] = { 0, 0, 0, 0 };

#pragma GCC unroll 4
		for (t = 0; t < 4; t++)
			A[t][0] = A[t][1] = vdupq_n_f32(0);
		for (k = g * G; k < (g + 1) * G; k += DS_QBLOCK) {
			const size_t b = k / DS_QBLOCK;
			int8x16_t P[2][4];
			int32x4_t M[2][2][2];

#pragma GCC unroll 2
			for (q = 0; q < 2; q++) {
				mm_pair(x->q + tt[2 * q] * x->ldq, x->q + tt[2 * q + 1] * x->ldq, k, P[q]);
				M[q][0][0] = M[q][0][1] = M[q][1][0] = M[q][1][1] = vdupq_n_s32(0);
			}
			mm_blk(gw, k, h, P, M, is4);
#pragma GCC unroll 2
			for (q = 0; q < 2; q++)
#pragma GCC unroll 2
				for (u = 0; u < 2; u++) {
					int32x4x2_t I = mm_rows(M[q][u][0], M[q][u][1]);

					A[2 * q][u] = q_blk_fma(A[2 * q][u], I.val[0], x->qd[tt[2 * q] * nb + b]);
					A[2 * q + 1][u] = q_blk_fma(A[2 * q + 1][u], I.val[1],
								    x->qd[tt[2 * q + 1] * nb + b]);
				}
#pragma GCC unroll 4
			for (t = 0; t < 4; t++)
				S[t] += x->qs[tt[t] * nb + b];
		}
#pragma GCC unroll 4
		for (t = 0; t < 4; t++)
#pragma GCC unroll 2
			for (u = 0; u < 2; u++)
				acc[t][u] = q_grp_end(acc[t][u], A[t][u], p + ds_qgrp_s(is4, G, g),
						      p + (is4 ? ds_qgrp_z(G, ng, g) : 0), S[t],
						      (int)(2 * h) + u, is4);
	}
	for (t = 0; (size_t)t < nt; t++)
		mm_store8(y + t * ldy + 8 * h, acc[t], rows);
}

AI void mm_tile_g(const ds_mat *w, size_t rs, size_t h, const ds_act *x, size_t t0, size_t nt,
		  float *y, size_t ldy, const int is4)
{
	switch (w->type.group) {
	case 32: mm_tile(w, rs, h, x, t0, nt, y, ldy, is4, 32); break;
	case 64: mm_tile(w, rs, h, x, t0, nt, y, ldy, is4, 64); break;
	case 128: mm_tile(w, rs, h, x, t0, nt, y, ldy, is4, 128); break;
	default: mm_tile(w, rs, h, x, t0, nt, y, ldy, is4, 0); break;
	}
}

/* Each row-set in halves by tiles of four activation rows (its weights
 * from L1 after the first tile); one activation row: dotprod.c's decode. */
AI void mm_q(const ds_mat *w, const ds_act *x, float *y, size_t ldy, size_t rs0, size_t rs1,
	     const int is4)
{
	size_t rs, t, h;

	if (x->t == 1) {
		(is4 ? ds_dotprod_mm_q4 : ds_dotprod_mm_q8)(w, x, y, ldy, rs0, rs1);
		return;
	}
	for (rs = rs0; rs < rs1; rs++)
		for (t = 0; t < x->t; t += 4)
			for (h = 0; h < 2 && 8 * h < q_rows(w, rs); h++)
				mm_tile_g(w, rs, h, x, t, x->t - t < 4 ? x->t - t : 4,
					  y + t * ldy + rs * DS_ROWSET, ldy, is4);
}

static void mm_q4(const ds_mat *w, const ds_act *x, float *y, size_t ldy, size_t rs0,
		  size_t rs1)
{
	mm_q(w, x, y, ldy, rs0, rs1, 1);
}

static void mm_q8(const ds_mat *w, const ds_act *x, float *y, size_t ldy, size_t rs0,
		  size_t rs1)
{
	mm_q(w, x, y, ldy, rs0, rs1, 0);
}

/* ---- peaks: smmla (32 products), bfdot (8 pairs' 16) ---------------------- */

AI int32x4_t smmla_step(int32x4_t acc, int8x16_t w, int8x16_t x)
{
	return vmmlaq_s32(acc, w, x);
}

/* w and x carry bf16 pairs in fp32 lanes (arm.h's float step type). */
AI float32x4_t bfdot_step(float32x4_t acc, float32x4_t w, float32x4_t x)
{
	return vbfdotq_f32(acc, vreinterpretq_bf16_f32(w), vreinterpretq_bf16_f32(x));
}

static uint64_t peak_probe(int kind, uint64_t iters)
{
	uint16x8_t one = vdupq_n_u16(0x3f80);
	float32x4_t bw;

	if (kind == DS_PEAK_INT8) {
		peak_s32(iters, smmla_step, vdupq_n_s8(3), vdupq_n_s8(5), 0);
		return iters * PEAK_ACC * 32;
	}
	if (kind == DS_PEAK_BF16) {
		/* bf16 1.0 from a register: GCC 12 would load the constant
		 * with an FP16 fmov, which needs FEAT_FP16 */
		__asm__ volatile("" : "+w"(one));
		bw = vreinterpretq_f32_u16(one);
		peak_f32(iters, bfdot_step, bw, bw);
		return iters * PEAK_ACC * 8;
	}
	return ds_dotprod_peak_probe(kind, iters);
}

void ds_kernels_fill_i8mm(ds_kernels *k)
{
	k->name = "dotprod+i8mm";
	k->isa = DS_ISA_I8MM;
	k->mm[DS_BF16] = mm_bf16;
	k->mm[DS_Q8] = mm_q8;
	k->mm[DS_Q4] = mm_q4;
	k->peak_probe = peak_probe;
}

/*
 * neon_q.h - the AArch64 q4, q8 and bf16 matrix products over ds-model(5)
 * row-sets, shared by neon.c (Q_SDOT 0: int8 products by smull, addp, sadalp),
 * dotprod.c and i8mm.c (Q_SDOT 1: sdot by element).  The includer defines
 * Q_SDOT, and Q_BF16: 0 no bf16 products, 1 neon.c's (bf16 widened to
 * fp32, FMA), 2 the includer's bf16_tile (i8mm.c's bfdot) under bf16_mm.
 *
 * A row-set's 64-byte chunk is four 128-bit vectors, rows 4j .. 4j+3 in
 * vector j, each row's 32-bit lane its 4 bytes.  sdot by element takes
 * the 4 activation bytes of one 32-bit lane of a vector of 16 and adds
 * the four 4-byte dot products to the four rows' sums: a whole chunk
 * without horizontal sums, as vpdpbusd's {1to16} broadcast on AVX-512.
 * sdot multiplies signed bytes, so q8's biased u is taken as u - 128 (one
 * eor) and q4's nibbles are 0..15 (one and, one shift): the zero of q8
 * never enters the float steps.
 *
 * The float steps of a row (every path here and in i8mm.c's smmla tiles
 * takes them, so a row's result does not depend on the path):
 *   per 32-block   A += d * I            (one conversion, one FMA)
 *   per group      q4: acc += S * (A - Z sum(d q))    (fms, FMA)
 *                  q8: acc += S * A, I of u - 128      (FMA)
 * with A = 0 at each group's start.
 */
#define AI static inline __attribute__((always_inline))
#define QTT 2          /* activation rows per tile: 4 x 2 accumulators of
			  each kind per row-set take 24 of the 32 vectors */
/* Bytes requested ahead in each of decode's streams.  To be tuned on a
 * real core with `ds-bench --kernels` (decode rows against the read
 * probe): Neoverse cores' own prefetchers follow a forward stream, the
 * software requests cover a claim's start and the segment headers. */
#define Q_PF 2048
#define Q_STREAMS 2    /* row-sets streamed at once in decode */

/* ---- a 32-block's integer sums of four rows (32-bit lanes) -------------- */

/* The four bytes of lane L of x in every lane (L a constant: the switch
 * folds). */
AI int8x16_t q_lane(int8x16_t x, const int L)
{
	int32x4_t v = vreinterpretq_s32_s8(x);

	switch (L) {
	case 0: return vreinterpretq_s8_s32(vdupq_laneq_s32(v, 0));
	case 1: return vreinterpretq_s8_s32(vdupq_laneq_s32(v, 1));
	case 2: return vreinterpretq_s8_s32(vdupq_laneq_s32(v, 2));
	default: return vreinterpretq_s8_s32(vdupq_laneq_s32(v, 3));
	}
}

/* s + the dot products of w's four rows (4 signed bytes each) with the 4
 * activation bytes of lane L of x, s the four rows' 32-bit sums. */
AI int32x4_t qdot(int32x4_t s, int8x16_t w, int8x16_t x, const int L)
{
#if Q_SDOT
	switch (L) {
	case 0: return vdotq_laneq_s32(s, w, x, 0);
	case 1: return vdotq_laneq_s32(s, w, x, 1);
	case 2: return vdotq_laneq_s32(s, w, x, 2);
	default: return vdotq_laneq_s32(s, w, x, 3);
	}
#else
	int8x16_t b = q_lane(x, L);
	/* the products in 16 bits, adjacent ones added (at most 2 x 128 x 127:
	 * no overflow), each row's two pairs added into its 32-bit lane */
	int16x8_t p = vpaddq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(b)), vmull_high_s8(w, b));

	return vpadalq_s16(s, p);
#endif
}

/* ---- the float steps (the top of this file) ------------------------------- */

AI float32x4_t q_blk_fma(float32x4_t A, int32x4_t I, float d)
{
	return vfmaq_n_f32(A, vcvtq_f32_s32(I), d);
}

/* A group's 16 scales at p (fp16), rows 4j .. 4j+3 */
AI float32x4_t q_scale(const uint8_t *p, int j)
{
	return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)(const void *)p + 4 * j)));
}

/* A q4 group's 16 zero points at p (u8), rows 4j .. 4j+3 */
AI float32x4_t q_zero(const uint8_t *p, int j)
{
	uint32_t z;

	memcpy(&z, p + 4 * j, 4);
	return vcvtq_f32_u32(vmovl_u16(vget_low_u16(vmovl_u8(vreinterpret_u8_u32(vdup_n_u32(z))))));
}

/* acc + a group's contribution to rows 4j .. 4j+3: A its blocks' sum, S
 * the sum of its activation block sums (q4). */
AI float32x4_t q_grp_end(float32x4_t acc, float32x4_t A, const uint8_t *sc, const uint8_t *zp,
			 float S, int j, const int is4)
{
	if (is4)
		A = vfmsq_n_f32(A, q_zero(zp, j), S);
	return vfmaq_f32(acc, q_scale(sc, j), A);
}

/* ---- stores of a row-set's outputs -------------------------------------- */

/* The 16 outputs v of a row-set to y, the first `rows` of them. */
AI void q_store(float *y, const float32x4_t *v, size_t rows)
{
	float tmp[16];
	int j;

	if (rows >= 16) {
#pragma GCC unroll 4
		for (j = 0; j < 4; j++)
			vst1q_f32(y + 4 * j, v[j]);
		return;
	}
#pragma GCC unroll 4
	for (j = 0; j < 4; j++)
		vst1q_f32(tmp + 4 * j, v[j]);
	memcpy(y, tmp, rows * sizeof(float));
}

AI size_t q_rows(const ds_mat *w, size_t rs)
{
	uint64_t left = w->n - rs * DS_ROWSET;

	return left >= DS_ROWSET ? DS_ROWSET : (size_t)left;
}

/* ---- q4 and q8: R row-sets by TT activation rows ------------------------ */

/* One 32-block at k of R row-sets rsb bytes apart (gw: row-set 0's group
 * base, as in ds_qgrp_w less the group's own offset) by TT activation
 * rows from xq (rows ldq apart): I[r][t][j] += the exact integer sums. */
AI void q_blk(const uint8_t *gw, size_t rsb, size_t k, const int8_t *xq, size_t ldq,
	      int32x4_t I[2][QTT][4], const int is4, const int R, const int TT)
{
	const uint8x16_t m4 = vdupq_n_u8(15), bias = vdupq_n_u8(0x80);
	int8x16_t X[QTT][2];
	int c, r, t, j;

#pragma GCC unroll 2
	for (t = 0; t < TT; t++) {
		X[t][0] = vld1q_s8(xq + t * ldq + k);
		X[t][1] = vld1q_s8(xq + t * ldq + k + 16);
	}
	if (is4) {
		/* chunk c: inputs 8c..8c+3 in the low nibbles (lane 2c of the
		 * activations' 8 lanes), 8c+4..8c+7 in the high ones */
#pragma GCC unroll 4
		for (c = 0; c < 4; c++)
#pragma GCC unroll 2
			for (r = 0; r < R; r++)
#pragma GCC unroll 4
				for (j = 0; j < 4; j++) {
					uint8x16_t v = vld1q_u8(gw + r * rsb + 8 * k + 64 * c + 16 * j);
					int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(v, m4));
					int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));

#pragma GCC unroll 2
					for (t = 0; t < TT; t++) {
						I[r][t][j] = qdot(I[r][t][j], lo, X[t][c >> 1], 2 * (c & 1));
						I[r][t][j] = qdot(I[r][t][j], hi, X[t][c >> 1], 2 * (c & 1) + 1);
					}
				}
		return;
	}
	/* q8 chunk c: inputs 4c..4c+3, lane c of the activations' 8 */
#pragma GCC unroll 8
	for (c = 0; c < 8; c++)
#pragma GCC unroll 2
		for (r = 0; r < R; r++)
#pragma GCC unroll 4
			for (j = 0; j < 4; j++) {
				int8x16_t v = vreinterpretq_s8_u8(veorq_u8(
					vld1q_u8(gw + r * rsb + 16 * k + 64 * c + 16 * j), bias));

#pragma GCC unroll 2
				for (t = 0; t < TT; t++)
					I[r][t][j] = qdot(I[r][t][j], v, X[t][c >> 2], c & 3);
			}
}

/* R row-sets from rs, `sets` row-sets apart, by TT activation rows from
 * t0; y is row-set rs's first output of row t0.  GC: the group size when
 * a compile-time constant (0: w's).  pf: decode, which streams the
 * weights from memory and requests them Q_PF bytes ahead. */
AI void q_tile(const ds_mat *w, size_t rs, size_t sets, const ds_act *x, size_t t0,
	       float *y, size_t ldy, const int is4, const int R, const int TT, const int GC,
	       const int pf)
{
	const size_t G = GC ? (size_t)GC : w->type.group, ng = w->kp / G;
	const size_t nb = x->ldq / DS_QBLOCK, ldq = x->ldq, wb = is4 ? 8 : 16;
	const size_t rsb = sets * w->rs_bytes;
	const uint8_t *p = w->data + rs * w->rs_bytes;
	const int8_t *xq = x->q + t0 * ldq;
	const float *xd = x->qd + t0 * nb, *xs = x->qs + t0 * nb;
	float32x4_t acc[2][QTT][4];
	size_t g, k;
	int r, t, j, c;

#pragma GCC unroll 2
	for (r = 0; r < R; r++)
#pragma GCC unroll 2
		for (t = 0; t < TT; t++)
#pragma GCC unroll 4
			for (j = 0; j < 4; j++)
				acc[r][t][j] = vdupq_n_f32(0);
	for (g = 0; g < ng; g++) {
		const uint8_t *gw = p + ds_qgrp_w(is4, G, ng, g) - wb * g * G;
		float32x4_t A[2][QTT][4];
		float S[QTT];

		if (pf && g % DS_QSEG == 0)
			ds_qseg_fetch(p, rsb, G, g, is4, R, Q_PF);
#pragma GCC unroll 2
		for (t = 0; t < TT; t++) {
			S[t] = 0;
#pragma GCC unroll 2
			for (r = 0; r < R; r++)
#pragma GCC unroll 4
				for (j = 0; j < 4; j++)
					A[r][t][j] = vdupq_n_f32(0);
		}
		for (k = g * G; k < (g + 1) * G; k += DS_QBLOCK) {
			int32x4_t I[2][QTT][4];

			if (pf)
#pragma GCC unroll 2
				for (r = 0; r < R; r++)
#pragma GCC unroll 8
					for (c = 0; c < 8; c++)
						if (!is4 || c < 4)
							__builtin_prefetch(gw + r * rsb + wb * k + 64 * c + Q_PF, 0, 3);
#pragma GCC unroll 2
			for (r = 0; r < R; r++)
#pragma GCC unroll 2
				for (t = 0; t < TT; t++)
#pragma GCC unroll 4
					for (j = 0; j < 4; j++)
						I[r][t][j] = vdupq_n_s32(0);
			q_blk(gw, rsb, k, xq, ldq, I, is4, R, TT);
#pragma GCC unroll 2
			for (t = 0; t < TT; t++) {
#pragma GCC unroll 2
				for (r = 0; r < R; r++)
#pragma GCC unroll 4
					for (j = 0; j < 4; j++)
						A[r][t][j] = q_blk_fma(A[r][t][j], I[r][t][j],
								       xd[t * nb + k / DS_QBLOCK]);
				S[t] += xs[t * nb + k / DS_QBLOCK];
			}
		}
#pragma GCC unroll 2
		for (r = 0; r < R; r++)
#pragma GCC unroll 2
			for (t = 0; t < TT; t++)
#pragma GCC unroll 4
				for (j = 0; j < 4; j++)
					acc[r][t][j] = q_grp_end(acc[r][t][j], A[r][t][j],
								 p + r * rsb + ds_qgrp_s(is4, G, g),
								 p + r * rsb + (is4 ? ds_qgrp_z(G, ng, g) : 0),
								 S[t], j, is4);
	}
#pragma GCC unroll 2
	for (r = 0; r < R; r++)
#pragma GCC unroll 2
		for (t = 0; t < TT; t++)
			q_store(y + t * ldy + r * sets * DS_ROWSET, acc[r][t], q_rows(w, rs + r * sets));
}

/* q_tile with the common group sizes as compile-time constants (the block
 * loop's count known, its sums kept in registers). */
AI void q_tile_g(const ds_mat *w, size_t rs, size_t sets, const ds_act *x, size_t t0,
		 float *y, size_t ldy, const int is4, const int R, const int TT, const int pf)
{
	switch (w->type.group) {
	case 32: q_tile(w, rs, sets, x, t0, y, ldy, is4, R, TT, 32, pf); break;
	case 64: q_tile(w, rs, sets, x, t0, y, ldy, is4, R, TT, 64, pf); break;
	case 128: q_tile(w, rs, sets, x, t0, y, ldy, is4, R, TT, 128, pf); break;
	default: q_tile(w, rs, sets, x, t0, y, ldy, is4, R, TT, 0, pf); break;
	}
}

/* Decode: row-sets rs0 .. rs1-1 for one activation row as Q_STREAMS
 * streams, the range in parts each walked in address order (a stream
 * goes on where the core's prefetcher already is), then the row-sets
 * left alone, as avx512.c's vecs. */
AI void q_vecs(const ds_mat *w, const ds_act *x, float *y, size_t rs0, size_t rs1,
	       const int is4)
{
	size_t q = (rs1 - rs0) / Q_STREAMS, rs;

	if (q > 0)      /* the streams' first Q_PF bytes: a claim starts cold */
		ds_fetch_streams(w->data + rs0 * w->rs_bytes, q * w->rs_bytes, Q_STREAMS, Q_PF);
	for (rs = rs0; rs < rs0 + q; rs++)
		q_tile_g(w, rs, q, x, 0, y + rs * DS_ROWSET, 0, is4, Q_STREAMS, 1, 1);
	for (rs = rs0 + Q_STREAMS * q; rs < rs1; rs++)
		q_tile_g(w, rs, 1, x, 0, y + rs * DS_ROWSET, 0, is4, 1, 1, 1);
}

/* Prefill: each row-set by tiles of QTT activation rows (its weights read
 * from L1 for all but the first). */
AI void q_mm_tiles(const ds_mat *w, const ds_act *x, float *y, size_t ldy, size_t rs0,
		   size_t rs1, const int is4)
{
	size_t rs, t;

	for (rs = rs0; rs < rs1; rs++)
		for (t = 0; t < x->t; t += QTT) {
			float *yt = y + t * ldy + rs * DS_ROWSET;

			if (x->t - t >= 2)
				q_tile_g(w, rs, 1, x, t, yt, ldy, is4, 1, 2, 0);
			else
				q_tile_g(w, rs, 1, x, t, yt, ldy, is4, 1, 1, 0);
		}
}

/* ---- bf16: lane r of a chunk holds (w[r][2c], w[r][2c+1]) ----------------- */

#if Q_BF16 == 1
/* The even and odd weights of 4 rows as floats (bf16 is fp32's top half). */
AI float32x4_t bf_even(uint32x4_t v)
{
	return vreinterpretq_f32_u32(vshlq_n_u32(v, 16));
}

AI float32x4_t bf_odd(uint32x4_t v)
{
	return vreinterpretq_f32_u32(vandq_u32(v, vdupq_n_u32(0xffff0000u)));
}

/* R row-sets `sets` apart by TT activation rows: per row the even and the
 * odd products in two FMA chains, added at the end (as avx2.c). */
AI void bf16_tile(const ds_mat *w, size_t rs, size_t sets, const ds_act *x, size_t t0,
		  float *y, size_t ldy, const int R, const int TT, const int pf)
{
	const size_t rsb = sets * w->rs_bytes;
	const uint8_t *p = w->data + rs * w->rs_bytes;
	float32x4_t ae[2][QTT][4], ao[2][QTT][4];
	size_t c;
	int r, t, j;

#pragma GCC unroll 2
	for (r = 0; r < R; r++)
#pragma GCC unroll 2
		for (t = 0; t < TT; t++)
#pragma GCC unroll 4
			for (j = 0; j < 4; j++)
				ae[r][t][j] = ao[r][t][j] = vdupq_n_f32(0);
	for (c = 0; c < w->kp / 2; c++) {
		float xe[QTT], xo[QTT];

#pragma GCC unroll 2
		for (t = 0; t < TT; t++) {
			const uint16_t *xb = x->b + (t0 + t) * x->ldq + 2 * c;

			xe[t] = ds_bf16_to_f32(xb[0]);
			xo[t] = ds_bf16_to_f32(xb[1]);
		}
#pragma GCC unroll 2
		for (r = 0; r < R; r++) {
			if (pf)
				__builtin_prefetch(p + r * rsb + 64 * c + Q_PF, 0, 3);
#pragma GCC unroll 4
			for (j = 0; j < 4; j++) {
				uint32x4_t v = vld1q_u32((const uint32_t *)(const void *)
							 (p + r * rsb + 64 * c + 16 * j));
				float32x4_t we = bf_even(v), wo = bf_odd(v);

#pragma GCC unroll 2
				for (t = 0; t < TT; t++) {
					ae[r][t][j] = vfmaq_n_f32(ae[r][t][j], we, xe[t]);
					ao[r][t][j] = vfmaq_n_f32(ao[r][t][j], wo, xo[t]);
				}
			}
		}
	}
#pragma GCC unroll 2
	for (r = 0; r < R; r++)
#pragma GCC unroll 2
		for (t = 0; t < TT; t++) {
			float32x4_t v[4];

#pragma GCC unroll 4
			for (j = 0; j < 4; j++)
				v[j] = vaddq_f32(ae[r][t][j], ao[r][t][j]);
			q_store(y + t * ldy + r * sets * DS_ROWSET, v, q_rows(w, rs + r * sets));
		}
}
#endif

#if Q_BF16
/* bf16 products: decode as Q_STREAMS streams, prefill by tiles (the
 * widening bf16_tile above, or i8mm.c's bfdot one). */
AI void bf16_mm(const ds_mat *w, const ds_act *x, float *y, size_t ldy, size_t rs0,
		size_t rs1)
{
	size_t rs, t, q;

	if (x->t == 1) {
		q = (rs1 - rs0) / Q_STREAMS;
		if (q > 0)
			ds_fetch_streams(w->data + rs0 * w->rs_bytes, q * w->rs_bytes, Q_STREAMS,
					 Q_PF);
		for (rs = rs0; rs < rs0 + q; rs++)
			bf16_tile(w, rs, q, x, 0, y + rs * DS_ROWSET, 0, Q_STREAMS, 1, 1);
		for (rs = rs0 + Q_STREAMS * q; rs < rs1; rs++)
			bf16_tile(w, rs, 1, x, 0, y + rs * DS_ROWSET, 0, 1, 1, 1);
		return;
	}
	for (rs = rs0; rs < rs1; rs++)
		for (t = 0; t < x->t; t += QTT) {
			float *yt = y + t * ldy + rs * DS_ROWSET;

			if (x->t - t >= 2)
				bf16_tile(w, rs, 1, x, t, yt, ldy, 1, 2, 0);
			else
				bf16_tile(w, rs, 1, x, t, yt, ldy, 1, 1, 0);
		}
}
#endif

/* awq.c - AutoAWQ GEMM packing -> q4gG row-sets (docs/formats/awq.md §1). */
#include <stdlib.h>
#include <string.h>

#include "quant.h"

/* Nibble slot i of an AWQ word holds column 8c + AWQ_ORDER[i]. */
static const uint8_t AWQ_ORDER[8] = { 0, 2, 4, 6, 1, 3, 5, 7 };

#define PREFETCH_CHUNKS 4 /* 32 rows ahead */

static inline void st32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

/* Transpose an 8x8 matrix of nibbles: nibble i of w[t] <-> nibble t of
 * w[i], by swapping 4x4, 2x2 and 1x1 blocks. */
static inline void transpose8(uint32_t w[8])
{
	uint32_t a, b;
	int t;

	for (t = 0; t < 4; t++) {
		a = w[t], b = w[t + 4];
		w[t] = (a & 0x0000ffffu) | (b << 16);
		w[t + 4] = (a >> 16) | (b & 0xffff0000u);
	}
	for (t = 0; t < 6; t += t == 1 ? 3 : 1) { /* pairs (0,2) (1,3) (4,6) (5,7) */
		a = w[t], b = w[t + 2];
		w[t] = (a & 0x00ff00ffu) | ((b & 0x00ff00ffu) << 8);
		w[t + 2] = ((a >> 8) & 0x00ff00ffu) | (b & 0xff00ff00u);
	}
	for (t = 0; t < 8; t += 2) {
		a = w[t], b = w[t + 1];
		w[t] = (a & 0x0f0f0f0fu) | ((b & 0x0f0f0f0fu) << 4);
		w[t + 1] = ((a >> 4) & 0x0f0f0f0fu) | (b & 0xf0f0f0f0u);
	}
}

/*
 * Chunk c (inputs 8c..8c+7) of the 8 columns of word column wc, into the
 * 8 lanes starting at `out`.  The runtime byte j of a lane is
 * q[8c+j] | q[8c+4+j] << 4, i.e. nibble order k = 0,4,1,5,2,6,3,7: load
 * the rows in that order and the transposed word of slot i is the lane of
 * column 8 wc + AWQ_ORDER[i] as is.
 */
static inline void chunk8(uint8_t *out, const uint8_t *qw, uint64_t rowb,
			  uint64_t c, uint64_t wc)
{
	const uint8_t *p = qw + 8 * c * rowb + 4 * wc;
	uint32_t w[8];
	int i;

	w[0] = ds_st_ld32(p);
	w[1] = ds_st_ld32(p + 4 * rowb);
	w[2] = ds_st_ld32(p + 1 * rowb);
	w[3] = ds_st_ld32(p + 5 * rowb);
	w[4] = ds_st_ld32(p + 2 * rowb);
	w[5] = ds_st_ld32(p + 6 * rowb);
	w[6] = ds_st_ld32(p + 3 * rowb);
	w[7] = ds_st_ld32(p + 7 * rowb);
	transpose8(w);
	for (i = 0; i < 8; i++)
		st32(out + 4 * AWQ_ORDER[i], w[i]);
}

/*
 * The same for 4 word columns at once (two full row-sets), in portable
 * vector code (SSE2 on x86-64, NEON on ARM): each 32-bit lane is its own
 * 8x8 transpose; then a 4x4 transpose of words turns "slot i of 4
 * columns" into "lanes 0-3 (4-7) of one column", two 16-byte stores.
 */
typedef uint32_t v4u __attribute__((vector_size(16)));

static inline v4u ldv(const uint8_t *p)
{
	v4u v;

	memcpy(&v, p, 16);
	return v;
}

static inline void stv(uint8_t *p, v4u v)
{
	memcpy(p, &v, 16);
}

/* r[l] = (a[0][l], a[1][l], a[2][l], a[3][l]); __builtin_shufflevector is
 * in both GCC (12 on) and clang, __builtin_shuffle only in GCC */
static inline void transpose4(const v4u a[4], v4u r[4])
{
	v4u t0 = __builtin_shufflevector(a[0], a[1], 0, 4, 1, 5);
	v4u t1 = __builtin_shufflevector(a[0], a[1], 2, 6, 3, 7);
	v4u t2 = __builtin_shufflevector(a[2], a[3], 0, 4, 1, 5);
	v4u t3 = __builtin_shufflevector(a[2], a[3], 2, 6, 3, 7);

	r[0] = __builtin_shufflevector(t0, t2, 0, 1, 4, 5);
	r[1] = __builtin_shufflevector(t0, t2, 2, 3, 6, 7);
	r[2] = __builtin_shufflevector(t1, t3, 0, 1, 4, 5);
	r[3] = __builtin_shufflevector(t1, t3, 2, 3, 6, 7);
}

/* chunk c of word columns wc..wc+3 into row-sets at out and out + rsb
 * (out at the chunk's place in the row-set) */
static inline void chunk8x4(uint8_t *out, uint64_t rsb, const uint8_t *qw,
			    uint64_t rowb, uint64_t c, uint64_t wc)
{
	const uint8_t *p = qw + 8 * c * rowb + 4 * wc;
	v4u w[8], a[4], b[4], ra[4], rb[4], x, y;
	int t, l;

	w[0] = ldv(p);
	w[1] = ldv(p + 4 * rowb);
	w[2] = ldv(p + 1 * rowb);
	w[3] = ldv(p + 5 * rowb);
	w[4] = ldv(p + 2 * rowb);
	w[5] = ldv(p + 6 * rowb);
	w[6] = ldv(p + 3 * rowb);
	w[7] = ldv(p + 7 * rowb);
	for (t = 0; t < 4; t++) {
		x = w[t], y = w[t + 4];
		w[t] = (x & 0x0000ffffu) | (y << 16);
		w[t + 4] = (x >> 16) | (y & 0xffff0000u);
	}
	for (t = 0; t < 6; t += t == 1 ? 3 : 1) {
		x = w[t], y = w[t + 2];
		w[t] = (x & 0x00ff00ffu) | ((y & 0x00ff00ffu) << 8);
		w[t + 2] = ((x >> 8) & 0x00ff00ffu) | (y & 0xff00ff00u);
	}
	for (t = 0; t < 8; t += 2) {
		x = w[t], y = w[t + 1];
		w[t] = (x & 0x0f0f0f0fu) | ((y & 0x0f0f0f0fu) << 4);
		w[t + 1] = ((x >> 4) & 0x0f0f0f0fu) | (y & 0xf0f0f0f0u);
	}
	/* lanes 0..7 of a column are slots 0 4 1 5 2 6 3 7 (AWQ_ORDER) */
	a[0] = w[0], a[1] = w[4], a[2] = w[1], a[3] = w[5];
	b[0] = w[2], b[1] = w[6], b[2] = w[3], b[3] = w[7];
	transpose4(a, ra);
	transpose4(b, rb);
	for (l = 0; l < 4; l++) {
		uint8_t *o = out + (uint64_t)(l / 2) * rsb + 32 * (l % 2);

		stv(o, ra[l]);
		stv(o + 16, rb[l]);
	}
}

/* Scales and zeros of row-set s, their segment headers' padding zeroed:
 * runtime group gi uses source group gi * gr / gsrc (0 when there is one
 * group). */
static void groups(uint8_t *rs, const uint8_t *qz, const uint8_t *sc,
		   uint64_t n, uint64_t kp, uint64_t ngsrc, uint64_t gsrc,
		   uint32_t gr, uint64_t s, uint64_t lanes)
{
	uint64_t ng = kp / gr, gi, r, src;

	for (gi = 0; gi < ng; gi++) {
		uint8_t *zd = rs + ds_qgrp_z(gr, ng, gi);

		if (gi % DS_QSEG == 0)
			memset(rs + ds_qseg_off(1, gr, gi), 0, ds_qseg_hdr(1, ds_qseg_n(ng, gi)));
		src = ngsrc == 1 ? 0 : gi * gr / gsrc;
		memcpy(rs + ds_qgrp_s(1, gr, gi), sc + 2 * (src * n + 16 * s), 2 * lanes);
		for (r = 0; r < lanes; r += 8) {
			uint32_t z = ds_st_ld32(qz + 4 * (src * (n / 8) + 2 * s + r / 8));
			int i;

			for (i = 0; i < 8; i++)
				zd[r + AWQ_ORDER[i]] = (z >> (4 * i)) & 15;
		}
	}
}

/* Row-sets [s0, s1) when k is a multiple of gr (no column padding). */
static void fast_rowsets(uint8_t *dst, const uint8_t *qw, const uint8_t *qz,
			 const uint8_t *sc, uint64_t n, uint64_t k,
			 uint64_t gsrc, uint32_t gr, uint64_t s0, uint64_t s1)
{
	ds_ttype t = { DS_Q4, gr };
	uint64_t rsb = ds_rowset_bytes(t, k), rowb = 4 * (n / 8);
	uint64_t ngsrc = (k + gsrc - 1) / gsrc, ng = k / gr;
	uint64_t s, c;

	for (s = s0; s < s1; s++) {
		uint64_t lanes = n - 16 * s >= 16 ? 16 : 8;
		uint8_t *rs = dst + s * rsb;

		if (lanes < 16)
			memset(rs, 0, rsb);
		groups(rs, qz, sc, n, k, ngsrc, gsrc, gr, s, lanes);
	}
	/* one cache line of qweight holds 16 words: the 8 row-sets of a
	 * block read one line of each of 8 rows per chunk, going down the
	 * rows, a page apart: prefetch a few chunks ahead by hand */
	for (c = 0; c < k / 8; c++) {
		if (c + PREFETCH_CHUNKS < k / 8) {
			const uint8_t *p = qw + 8 * (c + PREFETCH_CHUNKS) * rowb + 8 * s0;
			int t;

			for (t = 0; t < 8; t++)
				__builtin_prefetch(p + t * rowb);
		}
		for (s = s0; s + 1 < s1 && 16 * (s + 2) <= n; s += 2)
			chunk8x4(dst + s * rsb + ds_qchunk(1, gr, ng, c), rsb, qw, rowb, c, 2 * s);
		for (; s < s1; s++) {
			uint8_t *out = dst + s * rsb + ds_qchunk(1, gr, ng, c);

			chunk8(out, qw, rowb, c, 2 * s);
			if (n - 16 * s >= 16)
				chunk8(out + 32, qw, rowb, c, 2 * s + 1);
		}
	}
}

/* Any k: unpack to plain arrays and use ds_pack_q4 (pads with q = z). */
static int plain_repack(uint8_t *dst, const uint8_t *qw, const uint8_t *qz,
			const uint8_t *sc, uint64_t n, uint64_t k, uint64_t gsrc,
			uint32_t gr)
{
	static const uint8_t REV[8] = { 0, 4, 1, 5, 2, 6, 3, 7 };
	uint64_t kp = (k + gr - 1) / gr * gr, ng = kp / gr, r, i, gi, src;
	uint64_t ngsrc = (k + gsrc - 1) / gsrc;
	uint8_t *q = malloc(n * k + 1), *z = malloc(n * ng + 1);
	uint16_t *s = malloc(2 * n * ng + 2);

	if (q == NULL || z == NULL || s == NULL) {
		free(q), free(z), free(s);
		return -1;
	}
	for (i = 0; i < k; i++)
		for (r = 0; r < n; r++)
			q[r * k + i] = (ds_st_ld32(qw + 4 * (i * (n / 8) + r / 8)) >>
					(4 * REV[r % 8])) & 15;
	for (r = 0; r < n; r++)
		for (gi = 0; gi < ng; gi++) {
			src = ngsrc == 1 ? 0 : gi * gr / gsrc;
			s[r * ng + gi] = ds_st_ld16(sc + 2 * (src * n + r));
			z[r * ng + gi] = (ds_st_ld32(qz + 4 * (src * (n / 8) + r / 8)) >>
					  (4 * REV[r % 8])) & 15;
		}
	ds_pack_q4(dst, q, s, z, n, k, gr);
	free(q), free(z), free(s);
	return 0;
}

int ds_awq_repack(uint8_t *dst, const uint8_t *qweight,
		  const uint8_t *qzeros, const uint8_t *scales, uint64_t n,
		  uint64_t k, uint64_t gsrc, uint32_t gr, int threads)
{
	uint64_t sets = (n + 15) / 16, blocks = (sets + 7) / 8;
	int64_t b;

	if (k % gr != 0)
		return plain_repack(dst, qweight, qzeros, scales, n, k, gsrc, gr);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
	for (b = 0; b < (int64_t)blocks; b++) {
		uint64_t s1 = 8 * (uint64_t)b + 8;

		fast_rowsets(dst, qweight, qzeros, scales, n, k, gsrc, gr,
			     8 * (uint64_t)b, s1 < sets ? s1 : sets);
	}
	return 0;
}

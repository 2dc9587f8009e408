/*
 * amx.c - q4 and q8 matrix products of 8 activation rows or more on
 * Intel AMX (AMX-TILE, AMX-INT8), above the AVX-512 table.  Compiled with
 * KFLAGS_amx; reached only after CPUID said yes and the OS granted the
 * process the tile data state (kernels.c).
 *
 * One tdpbsud takes 16 activation rows of a 32-block (tmm0: 16 x 32 int8,
 * the signed operand) against a row-set's 16 rows of the block (tmm1: 8 x
 * 64 bytes, 4 inputs of each of the 16 rows per tile row, the unsigned
 * operand) into tmm2, 16 x 16 int32: the exact integer dot products of
 * the block, row t of tmm2 being activation row t's 16 output rows, the
 * lanes of the AVX-512 kernels' accumulators.  q8's chunks are that tile
 * as they lie; q4's are split into their low and high nibbles first.
 * From the integers on, the float operations are q_tile's (avx512.c),
 * one conversion and one FMA per block and the group's scale and zero
 * (q8g32's zero folded into the block's FMA: kernels.h DS_Q8_FOLD), in
 * the same order, so a row's result is bit for bit the AVX-512 one and
 * does not depend on the tile.  A last tile of 8-15 rows runs with the
 * tiles configured for its rows; fewer rows left (decode, a short
 * prompt's or a MoE expert's tail) go to the AVX-512 kernels (TAIL_MIN).
 *
 * Tile and vector instructions overlap only when woven finely
 * (round_step), and then only in part: a product takes about the tile
 * work's time plus the float work's.  The float work per block (kept for
 * bit-identity with decode) and the tile work each bound it (measured:
 * docs/perf.md, 2026-12-05 20:07 and 23:20).
 */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "x86.h"

#define TM 16   /* activation rows per tile */

/* GCC 12's _tile_loadconfig and _tile_loadd do not tell the compiler
 * they read memory (it dropped the configuration's stores as dead), so
 * these do: TILE_LOAD of memory nothing here writes (weights,
 * activations), TILE_LOAD_W of the 512 bytes of a q4 block as unpack_q4
 * stored them. */
#define TILE_LOAD(T, p, stride)                                               \
	__asm__ volatile("tileloadd (%0,%1,1), %%tmm" #T                       \
			 : : "r"((const void *)(p)), "r"((long)(stride)))
#define TILE_LOAD_W(T, buf)                                                   \
	__asm__ volatile("tileloadd (%0,%1,1), %%tmm" #T                       \
			 : : "r"((const void *)(buf)), "r"(64L),                 \
			   "m"(*(const uint8_t(*)[DS_QBLOCK / 4 * 64])(buf)))

/* The tile configuration, palette 1 (Intel SDM, LDTILECFG). */
struct tilecfg {
	uint8_t palette, start_row;
	uint8_t reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
};

static void tiles_config(int n)
{
	struct tilecfg c;

	memset(&c, 0, sizeof c);
	c.palette = 1;
	/* activations, 16 rows of one 32-block: tmm0, tmm3; weights, 4
	 * inputs of 16 rows a tile row: tmm1, tmm4; int32 [activation row]
	 * [output row]: tmm2, tmm5, tmm6, tmm7; n activation rows (TM, or
	 * fewer for a last tile: the tiles' other rows are zero) */
	c.rows[0] = c.rows[3] = (uint8_t)n;
	c.colsb[0] = c.colsb[3] = DS_QBLOCK;
	c.rows[1] = c.rows[4] = DS_QBLOCK / 4;
	c.colsb[1] = c.colsb[4] = 64;
	c.rows[2] = c.rows[5] = c.rows[6] = c.rows[7] = (uint8_t)n;
	c.colsb[2] = c.colsb[5] = c.colsb[6] = c.colsb[7] = 64;
	__asm__ volatile("ldtilecfg %0" : : "m"(c));
}

#define NBR 4   /* 32-blocks per round of tile products */

/* An activation tile's block scales d and sums s, block b of row t at
 * [t ts + b]: ds_act's qd and qs.  q8g32 reads ds_act.qt instead, d and
 * -128 s (the term its block FMA adds, DS_Q8_FOLD) at [b bs + t]. */
typedef struct tscales {
	const float *d, *s;
	size_t ts, bs;
} tscales;

/* p (sc->d or sc->s) of row t, block b; qt: the block-by-block layout */
AI float sc_at(const tscales *sc, const float *p, int t, size_t b, const int qt)
{
	return qt ? p[b * sc->bs + (size_t)t] : p[(size_t)t * sc->ts + b];
}

/* q4's ring of split blocks (one tile of rows): a round's blocks take the
 * slots from k / 32 mod 2 NBR on, so a round may run past slot 2 NBR - 1
 * (a group of 96 has rounds of 3 blocks, one from slot 6), hence 3 NBR -
 * 1 slots; the next round starts at its own slot, clear of this one's. */
#define RING (3 * NBR - 1)

/* A round: nbk 32-blocks from input k, within one segment (G = 32) or one
 * group (larger G), so their weights lie back to back from pk, and q4's
 * split ones from wu (at block k / 32 of u, masked by um for a ring). */
typedef struct round {
	size_t k, nbk;
	const uint8_t *pk;        /* its weights (q8's: the tiles) */
	uint8_t *wu;              /* q4: its tiles, split from pk */
	int carry_in, carry_out;  /* a group goes on from before, past it */
	int start[NBR], end[NBR]; /* block b starts, ends a group */
	int j[NBR];               /* block b's group, from the round's first */
} round;

AI round round_at(const ds_mat *w, const uint8_t *rs, uint8_t *u, size_t um, size_t k,
		       const int is4, const int GC)
{
	const size_t G = GC ? (size_t)GC : w->type.group, ng = w->kp / G, g = k / G;
	round r;
	size_t b;

	r.k = k;
	r.nbk = (w->kp - k) / DS_QBLOCK < NBR ? (w->kp - k) / DS_QBLOCK : NBR;
	if (G > DS_QBLOCK && (G - k % G) / DS_QBLOCK < r.nbk)
		r.nbk = (G - k % G) / DS_QBLOCK;
	r.pk = rs + ds_qgrp_w(is4, G, ng, g) + (is4 ? 8 : 16) * (k - g * G);
	r.wu = u + (k / DS_QBLOCK & um) * 512;
	if (GC)         /* round_row knows the rest */
		return r;
	r.carry_in = k % G != 0;
	r.carry_out = (k + DS_QBLOCK * r.nbk) % G != 0;
	for (b = 0; b < NBR; b++) {
		const size_t kb = k + DS_QBLOCK * b;

		r.start[b] = kb % G == 0;
		r.end[b] = (kb + DS_QBLOCK) % G == 0;
		r.j[b] = (int)(kb / G - g);
	}
	return r;
}

/* q4's blocks as the tiles they load, 512 bytes a 32-block (r->wu): a
 * chunk c holds inputs 8c..8c+3 in its low nibbles, 8c+4..8c+7 in its
 * high ones (types.h), tile rows 2c and 2c+1.  (q8's chunks are the tiles
 * as they lie.) */
AI void unpack_q4(const round *r)
{
	const __m512i m4 = _mm512_set1_epi8(15);
	uint8_t *d = r->wu;
	size_t b;
	int c;

	for (b = 0; b < r->nbk; b++)
#pragma GCC unroll 4
		for (c = 0; c < 4; c++) {
			__m512i v = _mm512_loadu_si512(r->pk + 256 * b + 64 * c);

			_mm512_store_si512(d + 512 * b + 128 * c, _mm512_and_si512(v, m4));
			_mm512_store_si512(d + 512 * b + 128 * c + 64,
					   _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
		}
}

/* Block b of round r, if it has one: the weights (q4's split, q8's own) into
 * tile TB, the activations into TA, their products into TC, stored to
 * dot[b].  Blocks in turn use tiles of their own, so none waits for a
 * tile the one before still reads. */
#define TILE_BLOCK(b, TA, TB, TC)                                             \
	do {                                                                  \
		if (r->nbk <= (b))                                            \
			break;                                                \
		if (is4)                                                      \
			TILE_LOAD_W(TB, r->wu + 512 * (b));                   \
		else                                                          \
			TILE_LOAD(TB, r->pk + 512 * (b), 64);                 \
		TILE_LOAD(TA, xq + r->k + DS_QBLOCK * (b), ldq);              \
		_tile_zero(TC);                                               \
		_tile_dpbsud(TC, TA, TB);                                     \
		_tile_stored(TC, dot[b], 64);                                 \
	} while (0)

/* The float work of a round for activation row t, as q_tile does it, for
 * G = 128 (GC: a round is one group) or any G (GC = 0: a group that goes
 * on past the round leaves its A and S in Ab, Sb). */
AI void round_row(const round *r, const int32_t (*dot)[TM][16], int t, const tscales *sc,
		  const __m512 *sv, const __m512 *zv, float (*Ab)[16],
		  float *Sb, __m512 *acc, const int GC)
{
	const size_t b0 = r->k / DS_QBLOCK;
	__m512 A = _mm512_setzero_ps();
	float S = 0;
	size_t b;

	if (GC == 0 && r->carry_in) {
		A = _mm512_load_ps(Ab[t]);
		S = Sb[t];
	}
#pragma GCC unroll 4
	for (b = 0; b < NBR; b++) {
		if (b >= r->nbk)
			break;
		if (GC == 0 && r->start[b] && b > 0) {
			A = _mm512_setzero_ps();
			S = 0;
		}
		A = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(dot[b][t])),
				    _mm512_set1_ps(sc_at(sc, sc->d, t, b0 + b, 0)), A);
		S += sc_at(sc, sc->s, t, b0 + b, 0);
		if (GC ? b == NBR - 1 : r->end[b]) {
			const int j = GC ? 0 : r->j[b];

			*acc = _mm512_fmadd_ps(sv[j], _mm512_fnmadd_ps(zv[j], _mm512_set1_ps(S), A),
					       *acc);
		}
	}
	if (GC == 0 && r->carry_out) {
		_mm512_store_ps(Ab[t], A);
		Sb[t] = S;
	}
}

/* round_row for G = 32 (a group per block), block b: the 16 rows'
 * independent chains side by side, the same operations per row in the
 * same order (a row at a time waits on each FMA's latency; for G = 128
 * rows side by side gain nothing).  S is read as s, not 0 + s: two
 * instructions fewer a row and block.  q8 folds its zero into the
 * block's FMA (sc holds -128 s for it; q_tile's q8g32 form): one FMA a
 * row and block fewer.  (docs/perf.md, 2026-12-05 19:43-21:20) */
AI void block_rows32(const round *r, const int32_t (*dot)[TM][16], size_t b,
		     const tscales *sc, const __m512 *sv, const __m512 *zv,
		     __m512 *acc, const int is4, const int n)
{
	const size_t bk = r->k / DS_QBLOCK + b;
	const int qt = DS_Q8_FOLD(is4, DS_QBLOCK);  /* sc: ds_act.qt's layout */
	int t;

	if (b >= r->nbk)
		return;
#pragma GCC unroll 16
	for (t = 0; t < TM; t++) {
		if (t >= n)
			break;
		const __m512 i = _mm512_cvtepi32_ps(_mm512_load_si512(dot[b][t]));
		const __m512 d = _mm512_set1_ps(sc_at(sc, sc->d, t, bk, qt));
		/* q_tile's S = 0 + s is s itself: s is never -0 (d >= 0 times
		 * an integer sum; kernels.h, tested) */
		const __m512 S = _mm512_set1_ps(sc_at(sc, sc->s, t, bk, qt));

		if (is4)
			acc[t] = _mm512_fmadd_ps(sv[b], _mm512_fnmadd_ps(zv[b], S,
				 _mm512_fmadd_ps(i, d, _mm512_setzero_ps())), acc[t]);
		else
			acc[t] = _mm512_fmadd_ps(sv[b], _mm512_fmadd_ps(i, d, S), acc[t]);
	}
}

/* The scales and zeros of the groups a round touches. */
AI void round_scales(const ds_mat *w, const uint8_t *rs, const round *r, __m512 *sv,
		     __m512 *zv, const int is4, const int GC)
{
	const size_t G = GC ? (size_t)GC : w->type.group, ng = w->kp / G;
	size_t g, j;

	for (j = 0, g = r->k / G; g * G < r->k + r->nbk * DS_QBLOCK; g++, j++) {
		sv[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(rs + ds_qgrp_s(is4, G, g))));
		zv[j] = is4 ? _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
				(const void *)(rs + ds_qgrp_z(G, ng, g)))))
			    : _mm512_set1_ps(128.0f);
	}
}

/* Round r's tile products into dot, and the float work of round p (the
 * one before, its products in pdot; none if p is NULL) woven in between:
 * a tile product's work waits on its loads and its store, and vector work
 * after it overlaps that wait only if little lies between.  For G = 32
 * each block's tiles are followed by the float work of p's same block
 * (16 independent chains), not a round's tiles and then the whole float
 * work of the round before, nor four rows of p after each block (each
 * row's chain of four blocks is latency-bound).  Larger groups chain a
 * row's blocks, so take p's rows by halves after two blocks each (by
 * quarters measured slower).  (docs/perf.md, 2026-12-05 23:20) */
AI void round_step(const ds_mat *w, const uint8_t *rs, const round *r,
		   const int8_t *xq, size_t ldq,
		   int32_t (*dot)[TM][16], const round *p, const int32_t (*pdot)[TM][16],
		   const tscales *sc, float (*Ab)[16], float *Sb, __m512 *acc,
		   const int is4, const int GC, const int n)
{
	__m512 sv[NBR], zv[NBR];
	int t;

	if (p)
		round_scales(w, rs, p, sv, zv, is4, GC);
/* block b's tiles, then the float work of p's block b */
#define TILE_BLOCK32(b, TA, TB, TC)                                           \
	do {                                                                  \
		TILE_BLOCK(b, TA, TB, TC);                                    \
		if (p)                                                        \
			block_rows32(p, pdot, b, sc, sv, zv, acc, is4, n);    \
	} while (0)

	if (GC == DS_QBLOCK) {
		TILE_BLOCK32(0, 0, 1, 2);
		TILE_BLOCK32(1, 3, 4, 5);
		TILE_BLOCK32(2, 0, 1, 6);
		TILE_BLOCK32(3, 3, 4, 7);
		return;
	}
#undef TILE_BLOCK32
	TILE_BLOCK(0, 0, 1, 2);
	TILE_BLOCK(1, 3, 4, 5);
#pragma GCC unroll 16
	for (t = 0; p && t < TM / 2; t++)
		if (t < n)
			round_row(p, pdot, t, sc, sv, zv, Ab, Sb, &acc[t], GC);
	TILE_BLOCK(2, 0, 1, 6);
	TILE_BLOCK(3, 3, 4, 7);
#pragma GCC unroll 16
	for (t = TM / 2; p && t < TM; t++)
		if (t < n)
			round_row(p, pdot, t, sc, sv, zv, Ab, Sb, &acc[t], GC);
}

/* One row-set (rows masked by m) times activation rows t0 .. t0+15, in
 * rounds of tile products, each round's float work woven into the next
 * round's tiles: a vector load of a tile just stored waits for the store
 * to reach the cache.  q4's weights are split a round ahead (a tile load
 * of a block split just before it waits for the split's stores) into u,
 * the row-set's part of amx_mm's buffer, by the first tile (t0 = 0; the
 * later tiles load u as it is), or with u NULL into a ring. */
AI void amx_tile(const ds_mat *w, const uint8_t *rs, uint8_t *u, const ds_act *x, size_t t0, const tscales *sc, float *y, size_t ldy, __mmask16 m,
		 const int is4, const int GC, const int n)
{
	const size_t kp = w->kp;
	const size_t ldq = x->ldq;
	const int8_t *xq = x->q + t0 * ldq;
	int32_t dot[2][NBR][TM][16] __attribute__((aligned(64)));
	uint8_t ring[RING][512] __attribute__((aligned(64)));
	uint8_t *ub = u ? u : ring[0];          /* q4's tiles: the ring, or u */
	const size_t um = u ? SIZE_MAX : 2 * NBR - 1;
	const int split = u == NULL || t0 == 0;
	float Ab[TM][16] __attribute__((aligned(64))), Sb[TM];
	__m512 acc[TM];
	round cur, prev;
	int t, i;

#pragma GCC unroll 16
	for (t = 0; t < TM; t++)
		acc[t] = _mm512_setzero_ps();
	if (GC == 0) {  /* read only where a group spans rounds */
		memset(Ab, 0, sizeof Ab);
		memset(Sb, 0, sizeof Sb);
	}
	cur = prev = round_at(w, rs, ub, um, 0, is4, GC);
	if (is4 && split)
		unpack_q4(&cur);
	for (i = 0;; i++) {
		const int last = cur.k + cur.nbk * DS_QBLOCK == kp;
		round next = cur;

		if (!last) {
			next = round_at(w, rs, ub, um, cur.k + cur.nbk * DS_QBLOCK, is4, GC);
			if (is4 && split)
				unpack_q4(&next);
		}
		if (i == 0)
			round_step(w, rs, &cur, xq, ldq, dot[0], NULL, NULL, sc, Ab, Sb,
				   acc, is4, GC, n);
		else
			round_step(w, rs, &cur, xq, ldq, dot[i & 1], &prev,
				   (const int32_t (*)[TM][16])dot[(i - 1) & 1], sc, Ab, Sb, acc,
				   is4, GC, n);
		prev = cur;
		if (last)
			break;
		cur = next;
	}
	/* the last round's float work, with no tiles (a round of no blocks) */
	round_step(w, rs, &(round){ .nbk = 0 }, xq, ldq, dot[0], &prev,
		   (const int32_t (*)[TM][16])dot[i & 1], sc, Ab, Sb, acc, is4, GC, n);
#pragma GCC unroll 16
	for (t = 0; t < TM; t++) {
		if (t >= n)
			break;
		if (m == 0xffff)
			_mm512_storeu_ps(y + (t0 + t) * ldy, acc[t]);
		else
			_mm512_mask_storeu_ps(y + (t0 + t) * ldy, m, acc[t]);
	}
}

/* One row-set times the tile of activation rows from t0. */
AI void amx_rowset(const ds_mat *w, size_t rs, uint8_t *u, const ds_act *x, size_t t0,
		   const tscales *sc, float *y, size_t ldy, const int is4, const int n)
{
	const uint64_t left = w->n - rs * DS_ROWSET;
	const __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
	const uint8_t *p = w->data + rs * w->rs_bytes;
	float *yr = y + rs * DS_ROWSET;

	if (w->type.group == 32)
		amx_tile(w, p, u, x, t0, sc, yr, ldy, m, is4, 32, n);
	else if (w->type.group == 128)
		amx_tile(w, p, u, x, t0, sc, yr, ldy, m, is4, 128, n);
	else
		amx_tile(w, p, u, x, t0, sc, yr, ldy, m, is4, 0, n);
}

/* Tiles of 16 activation rows here (and a last one of TAIL_MIN rows or
 * more, below), the rest on AVX-512; each tile through RS_BLK row-sets
 * in turn, so that both stay in the core's L2 (a row-set by all the rows
 * does not).  16 row-sets by one tile beat 16 by 32 or 64 rows; 8 or 32
 * row-sets measured as 16 (docs/perf.md, 2026-12-05 20:28). */
#define RS_BLK 16

/* n bytes 64-aligned, from malloc (free *base): a call's scratch.  glibc's
 * aligned_alloc left the blocks it freed unused for the next call's, so
 * the peak RSS grew with the threads (docs/perf.md, 2026-12-06 02:35). */
static void *alloc64(size_t n, void **base)
{
	*base = n > SIZE_MAX - 63 ? NULL : malloc(n + 63);
	return *base ? (void *)(uintptr_t)ds_round_up((uintptr_t)*base, 64) : NULL;
}

/* q8g32's float work reads its activation scales block by block
 * (ds_act.qt), each block's 16 at one pointer and constant offsets, not
 * at t * nb + b: that index arithmetic took as long as an FMA.  Where the
 * caller gave no qt, it is made here for the call (free *base); NULL if
 * there is no memory for it (the product then runs on AVX-512). */
static float *own_qt(const ds_act *x, size_t ld, void **base)
{
	const size_t nb = x->ldq / DS_QBLOCK, n = ds_act_qt_floats(ld, x->ldq);
	float *qt;
	size_t t;

	*base = NULL;
	if (n == 0 || n > SIZE_MAX / sizeof(float))
		return NULL;
	qt = alloc64(n * sizeof(float), base);
	if (qt == NULL)
		return NULL;
	for (t = 0; t < x->t; t++)
		ds_act_qt_row(qt, ld, x->ldq, t, x->qd + t * nb, x->qs + t * nb);
	return qt;
}

/* A last tile of fewer than 16 rows runs on the tiles too (configured
 * for its rows; the tile work is a whole tile's) if it has TAIL_MIN rows
 * or more, fewer on AVX-512: a MoE expert's rows are any number.  From
 * 8 rows on the tiles beat AVX-512's products, by 4 or 6 rows they lose
 * (docs/perf.md, 2026-12-06 00:22). */
#define TAIL_MIN 8

/* q4's split weights of a row-set: 512 bytes a 32-block. */
#define SPLIT_SET(w) ((w)->kp * 16)

/* Row-sets r0 .. r1-1 by the tile of n activation rows from t0; q4's
 * split weights at u (if not NULL), SPLIT_SET bytes a row-set, stored by
 * the first tile. */
AI void amx_block(const ds_mat *w, size_t r0, size_t r1, uint8_t *u,
		  const ds_act *x, size_t t0, const tscales *sc, float *y, size_t ldy,
		  const int is4, const int n)
{
	size_t rs;

	for (rs = r0; rs < r1; rs++)
		amx_rowset(w, rs, u ? u + (rs - r0) * SPLIT_SET(w) : NULL, x, t0, sc, y, ldy, is4, n);
}

/* q4 products of more than one tile split the weights once, in the first
 * tile's rounds, into a buffer of a block of row-sets that the next tiles
 * load as they are, not once a tile.  The split is woven into the first
 * tile's rounds, not done whole before the tiles, where no tile work
 * would overlap it (products of one tile would then be much slower).
 * The block is RS_BLK row-sets or as many as SPLIT_MAX bytes hold (at
 * least one); larger buffers measured slower.  With one tile, the
 * weights go through a ring (amx_tile).  (docs/perf.md, 2026-12-06
 * 02:26) */
#define SPLIT_MAX ((size_t)1 << 19)

static size_t split_sets(const ds_mat *w)
{
	const size_t n = SPLIT_MAX / SPLIT_SET(w);

	return n < 1 ? 1 : n > RS_BLK ? RS_BLK : n;
}

AI void amx_mm(const ds_mat *w, const ds_act *x, float *y, size_t ldy, size_t rs0,
	       size_t rs1, const int is4)
{
	const size_t nb = x->ldq / DS_QBLOCK;
	const int fold = DS_Q8_FOLD(is4, w->type.group);
	const size_t tiled = x->t / TM * TM + (x->t % TM >= TAIL_MIN ? x->t % TM : 0);
	const size_t ld = x->qt ? x->ldqt : ds_act_qt_ld(x->t);
	void *ob = NULL;
	float *own = fold && tiled > 0 && x->qt == NULL ? own_qt(x, ld, &ob) : NULL;
	const float *qt = x->qt ? x->qt : own;
	const size_t on = fold && qt == NULL ? 0 : tiled;
	const size_t sets = is4 && on > TM ? split_sets(w) : 0;
	void *ua = NULL;
	uint8_t *u = sets ? alloc64(sets * SPLIT_SET(w), &ua) : NULL;
	const size_t blk = u ? sets : RS_BLK;
	size_t r0, r1, t0;
	int rows = 0;   /* the tiles' configuration */

	for (r0 = rs0; r0 < rs1 && on > 0; r0 = r1) {
		r1 = rs1 - r0 < blk ? rs1 : r0 + blk;
		for (t0 = 0; t0 < on; t0 += TM) {
			const int n = on - t0 < TM ? (int)(on - t0) : TM;
			const tscales sc = fold ? (tscales){ qt + t0, qt + nb * ld + t0, 0, ld }
						: (tscales){ x->qd + t0 * nb, x->qs + t0 * nb, nb, 0 };

			if (n != rows)
				tiles_config(rows = n);
			if (n == TM)
				amx_block(w, r0, r1, u, x, t0, &sc, y, ldy, is4, TM);
			else
				amx_block(w, r0, r1, u, x, t0, &sc, y, ldy, is4, n);
		}
	}
	if (rows)
		_tile_release();
	free(ob);
	free(ua);
	if (on < x->t) {
		ds_act r = ds_act_rows(x, on, x->t - on);

		(is4 ? ds_avx512x_mm_q4 : ds_avx512x_mm_q8)(w, &r, y + on * ldy, ldy, rs0, rs1);
	}
}

static void mm_q4(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		  size_t rs0, size_t rs1)
{
	amx_mm(w, x, y, ldy, rs0, rs1, 1);
}

static void mm_q8(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		  size_t rs0, size_t rs1)
{
	amx_mm(w, x, y, ldy, rs0, rs1, 0);
}

/* The int8 peak: tdpbsud on whole 16 x 64-byte tiles, four products
 * into four accumulators in turn (each is 16 x 16 x 64 multiply-adds). */
static uint64_t peak_probe(int kind, uint64_t iters)
{
	static const int8_t a[TM][64];
	static const uint8_t b[16][64];
	struct tilecfg c;
	uint64_t i;
	int t;

	if (kind != DS_PEAK_INT8)
		return ds_avx512_peak_probe(kind, iters);
	memset(&c, 0, sizeof c);
	c.palette = 1;
	for (t = 0; t < 8; t++) {
		c.rows[t] = 16;
		c.colsb[t] = 64;
	}
	__asm__ volatile("ldtilecfg %0" : : "m"(c));
	TILE_LOAD(0, a, 64);
	TILE_LOAD(1, b, 64);
	_tile_zero(4);
	_tile_zero(5);
	_tile_zero(6);
	_tile_zero(7);
	for (i = 0; i < iters; i++) {
		_tile_dpbsud(4, 0, 1);
		_tile_dpbsud(5, 0, 1);
		_tile_dpbsud(6, 0, 1);
		_tile_dpbsud(7, 0, 1);
	}
	_tile_release();
	return iters * 4 * 16 * 16 * 64;
}

void ds_kernels_fill_amx(ds_kernels *k)
{
	k->name = "avx512+amx";
	k->isa = DS_ISA_AMX;
	k->mm_rows = 16;
	k->act_qt = TAIL_MIN;
	k->mm[DS_Q8] = mm_q8;
	k->mm[DS_Q4] = mm_q4;
	k->mm[DS_BF16] = ds_avx512x_mm_bf16;
	k->peak_probe = peak_probe;
}

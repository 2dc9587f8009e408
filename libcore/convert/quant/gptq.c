/* gptq.c - AutoGPTQ / GPTQModel packing -> q4gG / q8gG (docs/formats/gptq.md). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"

static inline void st32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

/* Field `i` (b bits) of a packed word. */
static inline uint32_t field(uint32_t w, uint32_t bits, uint64_t i)
{
	return (w >> (bits * i)) & ((1u << bits) - 1);
}

/* The zero point of column col in source group src; "gptq" (v1) stores
 * z - 1, wrapped to the field width. */
static inline uint32_t zero_at(const uint8_t *qz, uint64_t n, uint32_t bits,
			       int v2, uint64_t src, uint64_t col)
{
	uint64_t per = 32 / bits;
	uint32_t w = ds_st_ld32(qz + 4 * (src * (n / per) + col / per));
	uint32_t z = field(w, bits, col % per);

	return v2 ? z : (z + 1) & ((1u << bits) - 1);
}

int ds_gptq_perm(const int32_t *g_idx, uint64_t k, uint64_t gsrc,
		 uint64_t ngroups, int32_t *perm)
{
	uint64_t *start = calloc(ngroups + 1, sizeof *start), i, g;
	int ident = 1;

	if (start == NULL)
		return -1;
	for (i = 0; i < k; i++) {
		if (g_idx[i] < 0 || (uint64_t)g_idx[i] >= ngroups) {
			free(start);
			return -1;
		}
		start[g_idx[i] + 1]++;
	}
	for (g = 0; g < ngroups; g++) {
		uint64_t want = g + 1 < ngroups ? gsrc : k - gsrc * (ngroups - 1);

		if (start[g + 1] != want) {
			free(start);
			return -1;
		}
		start[g + 1] += start[g];
	}
	for (i = 0; i < k; i++) {
		uint64_t pos = start[g_idx[i]]++;

		perm[pos] = (int32_t)i;
		ident &= pos == i;
	}
	free(start);
	return ident;
}

/* [a0 a1 a2 a3 a4 a5 a6 a7] -> [a0 a4 a1 a5 a2 a6 a3 a7] (nibbles): the
 * GPTQ word of inputs 8c..8c+7 becomes the runtime lane, whose byte j is
 * q[8c+j] | q[8c+4+j] << 4. */
static inline uint32_t shuffle_nibbles(uint32_t x)
{
	x = (x & 0xff0000ffu) | ((x >> 8) & 0x0000ff00u) | ((x << 8) & 0x00ff0000u);
	return (x & 0xf00ff00fu) | ((x >> 4) & 0x00f000f0u) |
	       ((x << 4) & 0x0f000f00u);
}

/* The same on 4 words (portable vector code). */
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

static inline v4u shuffle_v(v4u x)
{
	x = (x & 0xff0000ffu) | ((x >> 8) & 0x0000ff00u) | ((x << 8) & 0x00ff0000u);
	return (x & 0xf00ff00fu) | ((x >> 4) & 0x00f000f0u) |
	       ((x << 4) & 0x0f000f00u);
}

/* 4-bit, inputs in order, k a multiple of gr: row-set s. */
static void fast_rowset(uint8_t *dst, const uint8_t *qw, const uint8_t *qz,
			const uint8_t *sc, uint64_t n, uint64_t k, uint64_t gsrc,
			uint32_t gr, int v2, uint64_t s)
{
	ds_ttype t = { DS_Q4, gr };
	uint64_t rsb = ds_rowset_bytes(t, k), ng = k / gr, c, r, gi;
	uint64_t ngsrc = (k + gsrc - 1) / gsrc;
	uint64_t lanes = n - 16 * s >= 16 ? 16 : n - 16 * s;
	uint8_t *rs = dst + s * rsb;

	if (lanes < 16)
		memset(rs, 0, rsb);
	for (c = 0; c < k / 8; c++) {
		const uint8_t *p = qw + 4 * (c * n + 16 * s);
		uint8_t *o = rs + ds_qchunk(1, gr, ng, c);

		for (r = 0; r + 4 <= lanes; r += 4)
			stv(o + 4 * r, shuffle_v(ldv(p + 4 * r)));
		for (; r < lanes; r++)
			st32(o + 4 * r, shuffle_nibbles(ds_st_ld32(p + 4 * r)));
	}
	for (gi = 0; gi < ng; gi++) {
		uint64_t src = ngsrc == 1 ? 0 : gi * gr / gsrc;
		uint8_t *zd = rs + ds_qgrp_z(gr, ng, gi);

		if (gi % DS_QSEG == 0 && lanes == 16)   /* the header's padding */
			memset(rs + ds_qseg_off(1, gr, gi), 0, ds_qseg_hdr(1, ds_qseg_n(ng, gi)));
		memcpy(rs + ds_qgrp_s(1, gr, gi), sc + 2 * (src * n + 16 * s), 2 * lanes);
		for (r = 0; r < lanes; r++)
			zd[r] = (uint8_t)zero_at(qz, n, 4, v2, src, 16 * s + r);
	}
}

/* Plain unpacked form: q [n][k] (inputs in perm order), s, z [n][ng]. */
typedef struct plain {
	uint8_t *q, *z;
	uint16_t *s;
	uint64_t ng;
} plain;

static int unpack(plain *pl, const uint8_t *qw, const uint8_t *qz,
		  const uint8_t *sc, const int32_t *perm, uint64_t n, uint64_t k,
		  uint64_t gsrc, uint32_t gr, uint32_t bits, int v2)
{
	uint64_t per = 32 / bits, kp = (k + gr - 1) / gr * gr, i, r, gi;
	uint64_t ngsrc = (k + gsrc - 1) / gsrc;

	pl->ng = kp / gr;
	pl->q = malloc(n * k + 1);
	pl->z = malloc(n * pl->ng + 1);
	pl->s = malloc(2 * n * pl->ng + 2);
	if (pl->q == NULL || pl->z == NULL || pl->s == NULL)
		return -1;
	for (i = 0; i < k; i++) {
		uint64_t src = perm ? (uint64_t)perm[i] : i;
		const uint8_t *row = qw + 4 * (src / per) * n;

		for (r = 0; r < n; r++)
			pl->q[r * k + i] = (uint8_t)field(ds_st_ld32(row + 4 * r), bits,
							  src % per);
	}
	for (r = 0; r < n; r++)
		for (gi = 0; gi < pl->ng; gi++) {
			uint64_t src = ngsrc == 1 ? 0 : gi * gr / gsrc;

			pl->s[r * pl->ng + gi] = ds_st_ld16(sc + 2 * (src * n + r));
			pl->z[r * pl->ng + gi] = (uint8_t)zero_at(qz, n, bits, v2, src, r);
		}
	return 0;
}

/*
 * 8-bit: q8 is symmetric with u in [1, 255] (w = s (u - 128)).  A
 * symmetric group (z = 128) is carried over as is, except that q = 0
 * (-128 s, which GPTQ's grid gives the extreme weight of many groups)
 * becomes 1 (-127 s): one step on one weight, far closer than
 * re-quantizing the group.  An asymmetric group is re-quantized from its
 * exact values s (q - z) by the ds_quantize_q8 rule.  Writes q8 and
 * counts both cases in stats.
 */
static void to_q8(const plain *pl, int8_t *q8, uint64_t n, uint64_t k,
		  uint32_t gr, ds_qstats *stats)
{
	uint64_t r, gi, i;

	for (r = 0; r < n; r++)
		for (gi = 0; gi < pl->ng; gi++) {
			uint64_t k0 = gi * gr, k1 = k0 + gr < k ? k0 + gr : k;
			const uint8_t *q = pl->q + r * k;
			uint16_t *s16 = &pl->s[r * pl->ng + gi];
			int z = pl->z[r * pl->ng + gi];
			float s = ds_f16_to_f32(*s16), amax = 0, ns;

			if (z == 128) {
				for (i = k0; i < k1; i++) {
					stats->clamped += q[i] == 0;
					q8[r * k + i] = (int8_t)((q[i] ? q[i] : 1) - 128);
				}
				continue;
			}
			stats->requantized++;
			for (i = k0; i < k1; i++)
				amax = fmaxf(amax, fabsf(s * (float)(q[i] - z)));
			*s16 = ds_f32_to_f16(amax / 127.0f);
			ns = ds_f16_to_f32(*s16);
			for (i = k0; i < k1; i++) {
				float v = ns > 0 ? nearbyintf(s * (float)(q[i] - z) / ns) : 0;

				q8[r * k + i] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
			}
		}
}

static int plain_repack(uint8_t *dst, const uint8_t *qw, const uint8_t *qz,
			const uint8_t *sc, const int32_t *perm, uint64_t n,
			uint64_t k, uint64_t gsrc, uint32_t gr, uint32_t bits,
			int v2, ds_qstats *stats)
{
	plain pl = { NULL, NULL, NULL, 0 };
	int8_t *q8 = NULL;
	int rc = -1;

	if (unpack(&pl, qw, qz, sc, perm, n, k, gsrc, gr, bits, v2))
		goto out;
	if (bits == 4) {
		ds_pack_q4(dst, pl.q, pl.s, pl.z, n, k, gr);
	} else {
		q8 = malloc(n * k + 1);
		if (q8 == NULL)
			goto out;
		to_q8(&pl, q8, n, k, gr, stats);
		ds_pack_q8(dst, q8, pl.s, n, k, gr);
	}
	stats->groups += n * pl.ng;
	rc = 0;
out:
	free(pl.q), free(pl.z), free(pl.s), free(q8);
	return rc;
}

int ds_gptq_repack(uint8_t *dst, const uint8_t *qweight,
		   const uint8_t *qzeros, const uint8_t *scales,
		   const int32_t *perm, uint64_t n, uint64_t k, uint64_t gsrc,
		   uint32_t gr, uint32_t bits, int v2, int threads,
		   ds_qstats *stats)
{
	uint64_t sets = (n + 15) / 16;
	int64_t s;

	if (bits != 4 || perm != NULL || k % gr != 0)
		return plain_repack(dst, qweight, qzeros, scales, perm, n, k, gsrc,
				    gr, bits, v2, stats);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 8) if (threads > 1)
	for (s = 0; s < (int64_t)sets; s++)
		fast_rowset(dst, qweight, qzeros, scales, n, k, gsrc, gr, v2,
			    (uint64_t)s);
	stats->groups += n * (k / gr);
	return 0;
}

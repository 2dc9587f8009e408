/*
 * test_quant.c - AWQ / GPTQ re-packing and RTN quantization.
 *
 * The packers here are written from docs/formats/awq.md and gptq.md (what
 * AutoAWQ's WQLinear_GEMM.from_linear and AutoGPTQ's QuantLinear.pack do),
 * independently of libcore/convert/quant.  Random integers q, z and fp16 scales
 * are packed, re-packed by the library, and every weight read back with
 * ds_dequant_row (the definition of the runtime layout) must equal
 * s * (q - z) computed here from the integers: exactly, since fp16 times a
 * small integer is exact in float.
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "convert/quant/quant.h"

static uint64_t seed;

static uint32_t rnd(uint32_t n)
{
	return (uint32_t)(t_rand(&seed) % n);
}

/* A random fp16 scale in about [2^-10, 2^-4], either sign never zero. */
static uint16_t rnd_scale(void)
{
	return ds_f32_to_f16((float)(0.001 + 0.05 * (double)rnd(1000) / 1000.0));
}

/* The integers of one layer, nn.Linear orientation. */
typedef struct layer {
	uint64_t n, k, g, G;  /* g: group size (k for one group) */
	uint8_t *q;           /* [n][k] */
	uint8_t *z;           /* [n][G] */
	uint16_t *s;          /* [n][G] */
	int32_t *gidx;        /* [k]: the group of each input channel */
} layer;

static void layer_init(layer *L, uint64_t n, uint64_t k, uint64_t g,
		       uint32_t maxq)
{
	uint64_t i;

	L->n = n, L->k = k, L->g = g, L->G = (k + g - 1) / g;
	L->q = malloc(n * k);
	L->z = malloc(n * L->G);
	L->s = malloc(2 * n * L->G);
	L->gidx = malloc(4 * k);
	for (i = 0; i < n * k; i++)
		L->q[i] = (uint8_t)rnd(maxq + 1);
	for (i = 0; i < n * L->G; i++) {
		L->z[i] = (uint8_t)rnd(maxq + 1);
		L->s[i] = rnd_scale();
	}
	for (i = 0; i < k; i++)
		L->gidx[i] = (int32_t)(i / g);
}

static void layer_free(layer *L)
{
	free(L->q), free(L->z), free(L->s), free(L->gidx);
}

/* Act-order: a random processing order; g_idx[c] = invperm[c] / g. */
static void layer_act_order(layer *L)
{
	uint64_t *order = malloc(8 * L->k), i;

	for (i = 0; i < L->k; i++)
		order[i] = i;
	for (i = L->k - 1; i > 0; i--) {
		uint64_t j = rnd((uint32_t)i + 1), t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	/* order[pos] = channel processed at pos, so invperm[channel] = pos */
	for (i = 0; i < L->k; i++)
		L->gidx[order[i]] = (int32_t)(i / L->g);
	free(order);
}

static float ref_w(const layer *L, uint64_t r, uint64_t c)
{
	uint64_t gi = (uint64_t)L->gidx[c];

	return ds_f16_to_f32(L->s[r * L->G + gi]) *
	       (float)((int)L->q[r * L->k + c] - (int)L->z[r * L->G + gi]);
}

static void put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

/* AutoAWQ GEMM: qweight [k][n/8], qzeros [G][n/8], scales [G][n]. */
static void awq_pack(const layer *L, uint8_t *qw, uint8_t *qz, uint8_t *sc)
{
	static const int order[8] = { 0, 2, 4, 6, 1, 3, 5, 7 };
	uint64_t c, kk, g, i;

	for (kk = 0; kk < L->k; kk++)
		for (c = 0; c < L->n / 8; c++) {
			uint32_t w = 0;

			for (i = 0; i < 8; i++)
				w |= (uint32_t)L->q[(8 * c + order[i]) * L->k + kk] << (4 * i);
			put32(qw + 4 * (kk * (L->n / 8) + c), w);
		}
	for (g = 0; g < L->G; g++) {
		for (c = 0; c < L->n / 8; c++) {
			uint32_t w = 0;

			for (i = 0; i < 8; i++)
				w |= (uint32_t)L->z[(8 * c + order[i]) * L->G + g] << (4 * i);
			put32(qz + 4 * (g * (L->n / 8) + c), w);
		}
		for (c = 0; c < L->n; c++)
			memcpy(sc + 2 * (g * L->n + c), &L->s[c * L->G + g], 2);
	}
}

/*
 * AutoGPTQ pack: qweight [k b/32][n] along inputs, qzeros [G][n b/32]
 * along outputs, with v1's stored z - 1 cast to uint32 before shifting
 * (a zero point of 0 sets every higher field of its word).
 */
static void gptq_pack(const layer *L, uint32_t bits, int v2, uint8_t *qw,
		      uint8_t *qz, uint8_t *sc)
{
	uint64_t per = 32 / bits, r, c, g, i;

	for (r = 0; r < L->k / per; r++)
		for (c = 0; c < L->n; c++) {
			uint32_t w = 0;

			for (i = 0; i < per; i++)
				w |= (uint32_t)L->q[c * L->k + r * per + i] << (bits * i);
			put32(qw + 4 * (r * L->n + c), w);
		}
	for (g = 0; g < L->G; g++) {
		for (c = 0; c < L->n / per; c++) {
			uint32_t w = 0;

			for (i = 0; i < per; i++) {
				uint32_t z = L->z[(c * per + i) * L->G + g];

				w |= (v2 ? z : (uint32_t)((int)z - 1)) << (bits * i);
			}
			put32(qz + 4 * (g * (L->n / per) + c), w);
		}
		for (c = 0; c < L->n; c++)
			memcpy(sc + 2 * (g * L->n + c), &L->s[c * L->G + g], 2);
	}
}

/* What a v1 reader gets back: (field + 1) & maxq of the packed words. */
static void gptq_v1_effective_zeros(layer *L, uint32_t bits, const uint8_t *qz)
{
	uint64_t per = 32 / bits, g, c;
	uint32_t maxq = (1u << bits) - 1;

	for (g = 0; g < L->G; g++)
		for (c = 0; c < L->n; c++) {
			uint32_t w;

			memcpy(&w, qz + 4 * (g * (L->n / per) + c / per), 4);
			L->z[c * L->G + g] =
				(uint8_t)((((w >> (bits * (c % per))) & maxq) + 1) & maxq);
		}
}

static uint8_t *alloc_dst(ds_ttype t, uint64_t n, uint64_t k)
{
	uint64_t shape[2] = { n, k }, bytes;

	T_CHECK(ds_tensor_bytes(t, 2, shape, &bytes) == 0);
	return ds_aligned_alloc(64, bytes, NULL);
}

/* Every weight of dst equals the reference, in perm order if given. */
static int matches(ds_ttype t, const uint8_t *dst, const layer *L,
		   const int32_t *perm)
{
	float *row = malloc(4 * L->k);
	uint64_t r, c, bad = 0;

	for (r = 0; r < L->n; r++) {
		ds_dequant_row(t, dst, L->k, r, row);
		for (c = 0; c < L->k; c++)
			if (row[c] != ref_w(L, r, perm ? (uint64_t)perm[c] : c)) {
				if (bad++ < 3)
					printf("#   row %llu col %llu: %g, want %g\n",
					       (unsigned long long)r,
					       (unsigned long long)c, row[c],
					       ref_w(L, r, perm ? (uint64_t)perm[c] : c));
			}
	}
	free(row);
	return bad == 0;
}

/* The bytes ds_pack_q4 makes from the same integers (runtime groups of
 * gr with the source groups repeated when there is one group). */
static uint8_t *pack_q4_ref(const layer *L, uint32_t gr)
{
	ds_ttype t = { DS_Q4, gr };
	uint64_t ng = ds_kpad(t, L->k) / gr, r, gi;
	uint8_t *z = malloc(L->n * ng), *dst = alloc_dst(t, L->n, L->k);
	uint16_t *s = malloc(2 * L->n * ng);

	for (r = 0; r < L->n; r++)
		for (gi = 0; gi < ng; gi++) {
			uint64_t src = L->G == 1 ? 0 : gi;

			z[r * ng + gi] = L->z[r * L->G + src];
			s[r * ng + gi] = L->s[r * L->G + src];
		}
	ds_pack_q4(dst, L->q, s, z, L->n, L->k, gr);
	free(z), free(s);
	return dst;
}

static uint64_t q4_bytes(uint32_t gr, uint64_t n, uint64_t k)
{
	uint64_t shape[2] = { n, k }, b = 0;

	ds_tensor_bytes((ds_ttype){ DS_Q4, gr }, 2, shape, &b);
	return b;
}

/* ---- AWQ --------------------------------------------------------------------------- */

static void awq_case(uint64_t n, uint64_t k, uint64_t g, uint32_t gr,
		     int threads)
{
	ds_ttype t = { DS_Q4, gr };
	uint8_t *qw, *qz, *sc, *dst, *ref;
	layer L;

	layer_init(&L, n, k, g, 15);
	qw = malloc(4 * k * n / 8);
	qz = malloc(4 * L.G * n / 8);
	sc = malloc(2 * L.G * n);
	awq_pack(&L, qw, qz, sc);
	dst = alloc_dst(t, n, k);
	memset(dst, 0xa5, q4_bytes(gr, n, k)); /* every byte must be written */
	T_CHECK(ds_awq_repack(dst, qw, qz, sc, n, k, g, gr, threads) == 0);
	T_CHECKF(matches(t, dst, &L, NULL), "AWQ n %llu k %llu g %llu",
		 (unsigned long long)n, (unsigned long long)k,
		 (unsigned long long)g);
	ref = pack_q4_ref(&L, gr);
	T_CHECKF(memcmp(dst, ref, q4_bytes(gr, n, k)) == 0,
		 "AWQ bytes differ from ds_pack_q4 (n %llu k %llu)",
		 (unsigned long long)n, (unsigned long long)k);
	free(qw), free(qz), free(sc), free(dst), free(ref);
	layer_free(&L);
}

static void test_awq(void)
{
	static const uint32_t gs[3] = { 32, 64, 128 };
	int i;

	for (i = 0; i < 3; i++) {
		uint64_t g = gs[i];

		/* n: one row-set, a half one, several row-set blocks */
		awq_case(8, g, g, (uint32_t)g, 1);
		awq_case(16 * (1 + rnd(3)) + 8, g * (1 + rnd(4)), g, (uint32_t)g, 1);
		awq_case(8 * (17 + rnd(20)), g * (2 + rnd(3)), g, (uint32_t)g, 2);
	}
	/* one group over all inputs (group_size -1) */
	awq_case(24, 256, 256, 128, 1);
	awq_case(40, 40, 40, 32, 1);   /* k not a multiple of 32: padded */
	awq_case(16, 200, 200, 32, 2);
}

/* ---- GPTQ ------------------------------------------------------------------------- */

static void gptq_case(uint64_t n, uint64_t k, uint64_t g, uint32_t gr,
		      uint32_t bits, int v2, int act, int threads)
{
	ds_ttype t = { bits == 8 ? DS_Q8 : DS_Q4, gr };
	uint64_t per = 32 / bits;
	uint8_t *qw, *qz, *sc, *dst;
	int32_t *perm = malloc(4 * k);
	ds_qstats st = { 0, 0, 0 };
	int r = 1;
	layer L;

	layer_init(&L, n, k, g, (1u << bits) - 1);
	if (bits == 8) { /* exactly representable: symmetric, q >= 1 */
		uint64_t i;

		for (i = 0; i < n * L.G; i++)
			L.z[i] = 128;
		for (i = 0; i < n * k; i++)
			L.q[i] = (uint8_t)(1 + rnd(255));
	}
	if (act)
		layer_act_order(&L);
	qw = malloc(4 * (k / per) * n);
	qz = malloc(4 * L.G * (n / per));
	sc = malloc(2 * L.G * n);
	gptq_pack(&L, bits, v2, qw, qz, sc);
	if (!v2)
		gptq_v1_effective_zeros(&L, bits, qz);
	if (act) {
		uint64_t i;

		r = ds_gptq_perm(L.gidx, k, g, L.G, perm);
		T_CHECK(r == 0);
		for (i = 0; i < k; i++) /* groups are now contiguous */
			T_CHECK((uint64_t)L.gidx[perm[i]] == i / g);
	}
	dst = alloc_dst(t, n, k);
	T_CHECK(ds_gptq_repack(dst, qw, qz, sc, act ? perm : NULL, n, k, g, gr,
			       bits, v2, threads, &st) == 0);
	T_CHECKF(matches(t, dst, &L, act ? perm : NULL),
		 "GPTQ %u-bit v%d act %d n %llu k %llu g %llu", bits, v2 + 1, act,
		 (unsigned long long)n, (unsigned long long)k,
		 (unsigned long long)g);
	T_CHECK(st.requantized == 0 && st.clamped == 0 &&
		st.groups == n * (ds_kpad(t, k) / gr));
	if (bits == 4 && !act) {
		uint8_t *ref = pack_q4_ref(&L, gr);

		T_CHECK(memcmp(dst, ref, q4_bytes(gr, n, k)) == 0);
		free(ref);
	}
	free(qw), free(qz), free(sc), free(dst), free(perm);
	layer_free(&L);
}

static void test_gptq4(void)
{
	static const uint32_t gs[3] = { 32, 64, 128 };
	int i, v2;

	for (i = 0; i < 3; i++)
		for (v2 = 0; v2 < 2; v2++) {
			uint64_t g = gs[i];

			gptq_case(8 * (1 + rnd(6)), g * (1 + rnd(3)), g, gs[i], 4, v2, 0, 1);
			gptq_case(16 * (2 + rnd(4)), g * (2 + rnd(3)), g, gs[i], 4, v2, 0, 2);
			/* act-order, and a last group that is short */
			gptq_case(8 * (1 + rnd(6)), g * (2 + rnd(3)), g, gs[i], 4, v2, 1, 1);
			gptq_case(24, 2 * g + 8 * (1 + rnd(3)), g, gs[i], 4, v2, 1, 1);
		}
	gptq_case(32, 96, 96, 32, 4, 1, 0, 1); /* group_size -1 */
	gptq_case(16, 40, 40, 32, 4, 0, 0, 1); /* ... and k padded */
}

static void test_gptq8_exact(void)
{
	gptq_case(16, 128, 32, 32, 8, 0, 0, 1);
	gptq_case(40, 256, 128, 128, 8, 1, 0, 2);
	gptq_case(24, 192, 64, 64, 8, 0, 1, 1);
}

/* q8 holds u in [1, 255]: a symmetric group's q = 0 (-128 s) becomes
 * -127 s and nothing else changes; an asymmetric group is re-quantized,
 * within half a step of its new scale. */
static void test_gptq8_requant(void)
{
	uint64_t n = 16, k = 128, g = 32, r, c;
	ds_ttype t = { DS_Q8, 32 };
	uint8_t *qw, *qz, *sc, *dst;
	ds_qstats st = { 0, 0, 0 };
	float row[128];
	layer L;

	layer_init(&L, n, k, g, 255);
	for (c = 0; c < n * L.G; c++)
		L.z[c] = 128;
	for (c = 0; c < n * k; c++)
		L.q[c] = (uint8_t)(1 + rnd(255));
	L.z[3] = 100;                 /* row 0, group 3: asymmetric */
	L.q[5 * k + 70] = 0;          /* row 5, group 2: one q = 0 */
	for (c = 0; c < k; c++)       /* row 7: all q = 0 but one */
		L.q[7 * k + c] = c == 9 ? 255 : 0;
	qw = malloc(4 * (k / 4) * n);
	qz = malloc(4 * L.G * (n / 4));
	sc = malloc(2 * L.G * n);
	gptq_pack(&L, 8, 1, qw, qz, sc);
	dst = alloc_dst(t, n, k);
	T_CHECK(ds_gptq_repack(dst, qw, qz, sc, NULL, n, k, g, 32, 8, 1, 1, &st) == 0);
	T_CHECKF(st.requantized == 1 && st.clamped == 1 + 127 && st.groups == n * 4,
		 "requantized %llu clamped %llu", (unsigned long long)st.requantized,
		 (unsigned long long)st.clamped);
	for (r = 0; r < n; r++) {
		ds_dequant_row(t, dst, k, r, row);
		for (c = 0; c < k; c++) {
			float want = ref_w(&L, r, c), amax = 0;
			uint64_t i, g0 = c / g * g;

			if (L.z[r * L.G + c / g] == 128) {
				if (L.q[r * k + c] == 0)
					want = ds_f16_to_f32(L.s[r * L.G + c / g]) * -127.0f;
				T_CHECKF(row[c] == want, "row %llu col %llu: %g vs %g",
					 (unsigned long long)r, (unsigned long long)c,
					 row[c], want);
				continue;
			}
			for (i = g0; i < g0 + g; i++)
				amax = fmaxf(amax, fabsf(ref_w(&L, r, i)));
			T_CHECKF(fabsf(row[c] - want) <= (amax / 127) * 0.5f * (1 + 1e-3f),
				 "row %llu col %llu: %g vs %g", (unsigned long long)r,
				 (unsigned long long)c, row[c], want);
		}
	}
	free(qw), free(qz), free(sc), free(dst);
	layer_free(&L);
}

/* v1's asymmetric overflow, as AutoGPTQ has it: a zero point of 0 is
 * stored as -1, whose sign bits spill into the higher fields. */
static void test_gptq_v1_overflow(void)
{
	layer L;
	uint8_t qz[4 * 2];
	uint8_t qw[4 * 8 * 16], sc[2 * 16];

	layer_init(&L, 16, 8, 8, 15);
	memset(L.z, 5, 16);
	L.z[2] = 0; /* column 2 of word 0 */
	gptq_pack(&L, 4, 0, qw, qz, sc);
	gptq_v1_effective_zeros(&L, 4, qz);
	T_CHECK(L.z[0] == 5 && L.z[1] == 5);
	T_CHECK(L.z[2] == 0 && L.z[3] == 0 && L.z[7] == 0); /* spilled */
	T_CHECK(L.z[8] == 5); /* the next word is untouched */
	layer_free(&L);
}

static void test_perm(void)
{
	int32_t g[8] = { 1, 0, 1, 0, 2, 2, 1, 0 }, p[8];
	int32_t bad[8] = { 0, 0, 0, 1, 1, 1, 1, 2 }, trivial[8] = { 0, 0, 0, 1,
								     1, 1, 2, 2 };
	int32_t range[8] = { 0, 0, 0, 1, 1, 1, 2, 3 };

	T_CHECK(ds_gptq_perm(g, 8, 3, 3, p) == 0);
	T_CHECK(p[0] == 1 && p[1] == 3 && p[2] == 7 && p[3] == 0 && p[4] == 2 &&
		p[5] == 6 && p[6] == 4 && p[7] == 5);
	T_CHECK(ds_gptq_perm(bad, 8, 3, 3, p) == -1);
	T_CHECK(ds_gptq_perm(trivial, 8, 3, 3, p) == 1);
	T_CHECK(ds_gptq_perm(range, 8, 3, 3, p) == -1);
}

/* ---- RTN ------------------------------------------------------------------------------ */

/* Error budgets: half a quantization step, plus what rounding the scale
 * to fp16 (relative 2^-11) can add over the 15 or 127 steps of a group. */
#define Q4_ERR_STEPS (0.5 + 16.0 / 2048)
#define Q8_ERR_STEPS (0.5 + 128.0 / 2048)

static void rtn_case(enum ds_dtype dt, uint64_t n, uint64_t k, uint32_t g,
		     int threads)
{
	ds_ttype t = { dt, g };
	float *w = malloc(4 * n * k), row[512];
	uint8_t *dst = alloc_dst(t, n, k);
	uint64_t r, c;
	double worst = 0;

	for (r = 0; r < n * k; r++)
		w[r] = t_randf(&seed) * (1 + (float)(r % 7));
	T_CHECK(ds_rtn_matrix(dst, t, (const uint8_t *)w, DS_ST_F32, n, k,
			      threads, NULL) == 0);
	for (r = 0; r < n; r++) {
		ds_dequant_row(t, dst, k, r, row);
		for (c = 0; c < k; c++) {
			uint64_t g0 = c / g * g, g1 = g0 + g < k ? g0 + g : k, i;
			float lo = 0, hi = 0, amax = 0, step;
			const float *x = w + r * k;

			lo = hi = x[g0];
			for (i = g0; i < g1; i++) {
				lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]);
				amax = fmaxf(amax, fabsf(x[i]));
			}
			step = dt == DS_Q4 ? (fmaxf(hi, 0) - fminf(lo, 0)) / 15
					   : amax / 127;
			worst = fmax(worst, fabs(row[c] - x[c]) / step);
			T_CHECKF(fabsf(row[c] - x[c]) <=
				 step * (dt == DS_Q4 ? Q4_ERR_STEPS : Q8_ERR_STEPS) + 1e-6f,
				 "row %llu col %llu: %g vs %g (step %g)",
				 (unsigned long long)r, (unsigned long long)c, row[c], x[c],
				 step);
		}
	}
	printf("# %s g%u %llux%llu: worst error %.3f steps\n",
	       dt == DS_Q4 ? "q4" : "q8", g, (unsigned long long)n,
	       (unsigned long long)k, worst);
	free(w), free(dst);
}

static void test_rtn(void)
{
	rtn_case(DS_Q4, 40, 256, 32, 1);
	rtn_case(DS_Q4, 17, 200, 64, 2);
	rtn_case(DS_Q4, 16, 384, 128, 1);
	rtn_case(DS_Q8, 33, 256, 32, 2);
	rtn_case(DS_Q8, 8, 136, 64, 1);
	rtn_case(DS_Q8, 48, 512, 128, 1);
}

/* bf16 and f32 keep the values; bf16 from f32 rounds to nearest even. */
static void test_rtn_float(void)
{
	uint64_t n = 21, k = 70, i, r;
	float *w = malloc(4 * n * k), row[70];
	uint16_t *b = malloc(2 * n * k);
	ds_ttype tb = { DS_BF16, 0 }, tf = { DS_F32, 0 };
	uint8_t *d1 = alloc_dst(tb, n, k), *d2 = alloc_dst(tb, n, k);
	uint8_t *d3 = alloc_dst(tf, n, k);
	int ok = 1;

	for (i = 0; i < n * k; i++) {
		w[i] = t_randf(&seed);
		b[i] = ds_f32_to_bf16(w[i]);
	}
	T_CHECK(ds_rtn_matrix(d1, tb, (uint8_t *)b, DS_ST_BF16, n, k, 2, NULL) == 0);
	T_CHECK(ds_rtn_matrix(d2, tb, (uint8_t *)w, DS_ST_F32, n, k, 1, NULL) == 0);
	T_CHECK(ds_rtn_matrix(d3, tf, (uint8_t *)b, DS_ST_BF16, n, k, 1, NULL) == 0);
	T_CHECK(memcmp(d1, d2, 32 * 96 * 2) == 0);
	for (r = 0; r < n; r++) {
		ds_dequant_row(tb, d1, k, r, row);
		for (i = 0; i < k; i++)
			ok &= row[i] == ds_bf16_to_f32(b[r * k + i]);
		ds_dequant_row(tf, d3, k, r, row);
		for (i = 0; i < k; i++)
			ok &= row[i] == ds_bf16_to_f32(b[r * k + i]);
	}
	T_CHECK(ok);
	T_CHECK(ds_rtn_matrix(d1, tb, (uint8_t *)b, DS_ST_F16, n, k, 1, NULL) == -1);
	free(w), free(b), free(d1), free(d2), free(d3);
}

/* ---- settings and module checks ------------------------------------------------- */

static char dir[64];

static int detect_text(const char *file, const char *text, enum ds_qformat want,
		       ds_qconfig *q, ds_err *err)
{
	char p[128];
	FILE *f;
	int rc;

	snprintf(p, sizeof p, "%s/%s", dir, file);
	f = fopen(p, "w");
	fputs(text, f);
	fclose(f);
	rc = ds_qconfig_detect(q, dir, NULL, want, err);
	unlink(p);
	return rc;
}

static void refuse_q(const char *file, const char *text, const char *what)
{
	ds_err err = { "" };
	ds_qconfig q;

	T_CHECKF(detect_text(file, text, DS_QF_AUTO, &q, &err) == -1, "accepted %s",
		 text);
	T_CHECKF(strstr(err.msg, what) != NULL, "\"%s\" lacks \"%s\"", err.msg, what);
	T_CHECKF(strstr(err.msg, file) != NULL, "\"%s\" lacks \"%s\"", err.msg, file);
}

static void test_detect(void)
{
	ds_qconfig q;
	ds_err err;
	json_t *cfg;

	T_CHECK(ds_qconfig_detect(&q, dir, NULL, DS_QF_AUTO, &err) == 0 &&
		q.method == DS_QM_NONE);
	T_CHECK(detect_text("quant_config.json", "{\"zero_point\":true,"
			    "\"q_group_size\":64,\"w_bit\":4,\"version\":\"GEMM\"}",
			    DS_QF_AUTO, &q, &err) == 0);
	T_CHECK(q.method == DS_QM_AWQ && q.group_size == 64 && q.bits == 4);
	T_CHECK(detect_text("quantize_config.json", "{\"bits\":8,\"group_size\":128,"
			    "\"desc_act\":true,\"sym\":false}", DS_QF_GPTQ, &q,
			    &err) == 0);
	T_CHECK(q.method == DS_QM_GPTQ && q.bits == 8 && q.desc_act && !q.sym &&
		!q.v2);
	T_CHECK(detect_text("quantize_config.json", "{\"quant_method\":\"gptq\","
			    "\"bits\":4,\"group_size\":-1,\"checkpoint_format\":"
			    "\"gptq_v2\"}", DS_QF_AUTO, &q, &err) == 0 && q.v2 &&
		q.group_size == -1);
	cfg = json_loads("{\"quantization_config\":{\"quant_method\":\"awq\","
			 "\"bits\":4,\"group_size\":128,\"version\":\"gemm\","
			 "\"zero_point\":true,\"modules_to_not_convert\":null}}",
			 0, NULL);
	T_CHECK(ds_qconfig_detect(&q, dir, cfg, DS_QF_AWQ, &err) == 0 &&
		q.method == DS_QM_AWQ && q.group_size == 128);
	T_CHECK(ds_qconfig_detect(&q, dir, cfg, DS_QF_GPTQ, &err) == -1 &&
		strstr(err.msg, "--quant-format gptq, but config.json") != NULL);
	T_CHECK(ds_qconfig_detect(&q, dir, cfg, DS_QF_NONE, &err) == -1);
	json_decref(cfg);
	T_CHECK(ds_qconfig_detect(&q, dir, NULL, DS_QF_AWQ, &err) == -1 &&
		strstr(err.msg, "no quantization settings") != NULL);
}

static void test_detect_refusals(void)
{
	const char *f = "quantize_config.json";

	refuse_q(f, "{\"quant_method\":\"awq\",\"bits\":4,\"group_size\":128,"
		 "\"version\":\"gemv\"}", "AWQ version \"gemv\"");
	refuse_q(f, "{\"quant_method\":\"awq\",\"bits\":4,\"group_size\":128,"
		 "\"version\":\"gemv_fast\"}", "\"gemv_fast\"");
	refuse_q(f, "{\"quant_method\":\"awq\",\"bits\":4,\"group_size\":128,"
		 "\"version\":\"marlin\"}", "\"marlin\"");
	refuse_q(f, "{\"quant_method\":\"awq\",\"bits\":4,\"group_size\":128,"
		 "\"zero_point\":false}", "zero_point false");
	refuse_q(f, "{\"quant_method\":\"awq\",\"bits\":8,\"group_size\":128}",
		 "AWQ with other than 4 bits");
	refuse_q(f, "{\"quant_method\":\"awq\",\"bits\":4,\"group_size\":16}",
		 "group size 16");
	refuse_q(f, "{\"quant_method\":\"awq\",\"bits\":4,\"group_size\":64,"
		 "\"backend\":\"llm-awq\"}", "backend \"llm-awq\"");
	refuse_q(f, "{\"quant_method\":\"gptq\",\"bits\":3,\"group_size\":128}",
		 "GPTQ 3-bit");
	refuse_q(f, "{\"quant_method\":\"gptq\",\"bits\":2,\"group_size\":128}",
		 "GPTQ 2-bit");
	refuse_q(f, "{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128,"
		 "\"checkpoint_format\":\"marlin\"}", "Marlin");
	refuse_q(f, "{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128,"
		 "\"is_marlin_format\":true}", "Marlin");
	refuse_q(f, "{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128,"
		 "\"dynamic\":{\"-:.*mlp.*\":{}}}", "\"dynamic\"");
	refuse_q(f, "{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128,"
		 "\"pack_dtype\":\"int16\"}", "pack_dtype");
	refuse_q(f, "{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128,"
		 "\"format\":\"gptq_p\"}", "\"gptq_p\"");
	refuse_q(f, "{\"quant_method\":\"fp8\",\"fmt\":\"e4m3\"}", "fp8");
	refuse_q(f, "{\"quant_method\":\"exl2\"}", "quant_method \"exl2\"");
	refuse_q(f, "{\"quant_method\":\"bitsandbytes\"}", "\"bitsandbytes\"");
	refuse_q(f, "{\"bits\":4", "line 1");
}

/* A fake checkpoint module whose tensors only need names and shapes. */
static ds_st_tensor mk(const char *name, enum ds_st_dtype dt, uint64_t a,
		       uint64_t b)
{
	ds_st_tensor t;

	memset(&t, 0, sizeof t);
	t.name = name;
	t.dtype = dt;
	t.ndim = 2;
	t.shape[0] = a;
	t.shape[1] = b;
	return t;
}

static void check_fails(const ds_qconfig *q, ds_qlinear *l, const char *what)
{
	ds_err err = { "" };
	ds_ttype rt;
	int np;

	T_CHECK(ds_quant_check(q, l, &rt, &np, &err) == -1);
	T_CHECKF(strstr(err.msg, what) != NULL, "\"%s\" lacks \"%s\"", err.msg, what);
}

static void test_module_checks(void)
{
	ds_st_file file = { (char *)"m.safetensors", "m.safetensors",
			    { NULL, 0, -1, -1 } };
	ds_st st = { &file, 1, NULL, 0, NULL, 0 };
	ds_qconfig q = { .method = DS_QM_AWQ, .bits = 4, .group_size = 64,
			  .zero_point = 1, .file = "config.json", .variant = "gemm" };
	ds_st_tensor w = mk("p.qweight", DS_ST_I32, 256, 16);
	ds_st_tensor z = mk("p.qzeros", DS_ST_I32, 4, 16);
	ds_st_tensor s = mk("p.scales", DS_ST_F16, 4, 128);
	ds_qlinear l = { &st, "p", &w, &z, &s, NULL, 128, 256 };
	ds_ttype rt;
	ds_err err;
	int np;

	T_CHECK(ds_quant_check(&q, &l, &rt, &np, &err) == 0 && rt.dt == DS_Q4 &&
		rt.group == 64 && !np);
	s.dtype = DS_ST_BF16;
	check_fails(&q, &l, "m.safetensors: tensor p.scales: dtype BF16, AWQ GEMM "
		    "needs F16");
	s.dtype = DS_ST_F16;
	z.shape[0] = 2;
	check_fails(&q, &l, "tensor p.qzeros: shape [2, 16], AWQ GEMM needs [4, 16]");
	z.shape[0] = 4;
	w = mk("p.qweight", DS_ST_I32, 128, 32); /* [N, K/8]: GEMV */
	check_fails(&q, &l, "GEMV");
	w.dtype = DS_ST_I16;
	check_fails(&q, &l, "GEMV-fast");
	w = mk("p.qweight", DS_ST_I32, 256, 16);
	l.k = 250;
	check_fails(&q, &l, "not a multiple of the AWQ group size");
	l.k = 256;
	l.qzeros = NULL;
	check_fails(&q, &l, "p.qzeros missing");

	/* GPTQ 4-bit [K/8, N] */
	q.method = DS_QM_GPTQ;
	w = mk("p.qweight", DS_ST_I32, 32, 128);
	z = mk("p.qzeros", DS_ST_I32, 4, 16);
	l.qzeros = &z;
	T_CHECK(ds_quant_check(&q, &l, &rt, &np, &err) == 0);
	q.bits = 8;
	check_fails(&q, &l, "tensor p.qweight: shape [32, 128], GPTQ needs [64, 128]");
	q.bits = 4;
	q.desc_act = 1;
	check_fails(&q, &l, "desc_act is set but p.g_idx is missing");
}

/* ---- FP8 ------------------------------------------------------------------------ */

/* Every code against the OFP8 E4M3 definition, written out independently:
 * the 8 subnormals, the extremes, NaN only at S.1111.111. */
static void test_fp8_values(void)
{
	int c, nan = 0;

	for (c = 0; c < 256; c++) {
		float v = ds_fp8_e4m3_value((uint8_t)c);
		int e = (c >> 3) & 15, m = c & 7;
		double want = e ? (1 + m / 8.0) * ldexp(1, e - 7) : m / 8.0 * ldexp(1, -6);

		if ((c & 0x7f) == 0x7f) {
			nan += isnan(v) != 0;
			continue;
		}
		if (c & 0x80)
			want = -want;
		T_CHECKF(v == (float)want && !signbit(v) == !(c & 0x80),
			 "code 0x%02x: %g, want %g", c, v, want);
	}
	T_CHECK(nan == 2);
	T_CHECK(ds_fp8_e4m3_value(0x7e) == 448.0f && ds_fp8_e4m3_value(0xfe) == -448.0f);
	T_CHECK(ds_fp8_e4m3_value(0x01) == 0x1p-9f && ds_fp8_e4m3_value(0x08) == 0x1p-6f);
	T_CHECK(ds_fp8_e4m3_value(0x38) == 1.0f);
	{
		/* every finite code through the row path, scale 0.75 */
		uint8_t w[254];
		float out[254], sc = 0.75f;
		ds_fp8_src s = { .w = w, .scale = (const uint8_t *)&sc, .n = 1,
				 .k = 254, .bo = 128, .bi = 254 };
		uint64_t br, bc;
		int i, bad = 0;

		for (c = 0, i = 0; c < 256; c++)
			if ((c & 0x7f) != 0x7f)
				w[i++] = (uint8_t)c;
		T_CHECK(ds_fp8_rows(out, &s, 0, 1, &br, &bc) == 0);
		for (i = 0; i < 254; i++)
			bad += out[i] != ds_fp8_e4m3_value(w[i]) * 0.75f;
		T_CHECK(bad == 0);
	}
}

/* A [n, k] FP8 matrix of random non-NaN codes and random scales over
 * blocks (bo, bi) that do not divide n and k: rows give code * scale of
 * the right block, and the q8 / q4 / bf16 conversions are those of the
 * same f32 matrix. */
static void test_fp8_matrix(void)
{
	const uint64_t n = 45, k = 200;
	const uint32_t bo = 16, bi = 64;
	uint64_t R = (n + bo - 1) / bo, C = (k + bi - 1) / bi, i, r, c, br, bc;
	uint8_t *w = malloc(n * k), *a, *b;
	float *sc = malloc(R * C * 4), *f = malloc(n * k * 4);
	uint16_t *h = malloc(n * k * 2);
	ds_fp8_src s = { .w = w, .scale = (const uint8_t *)sc, .n = n, .k = k,
			 .bo = bo, .bi = bi };
	ds_ttype ts[3] = { { DS_Q8, 32 }, { DS_Q4, 64 }, { DS_BF16, 0 } };
	ds_err err;
	int t, bad = 0;

	for (i = 0; i < n * k; i++) {
		w[i] = (uint8_t)(t_rand(&seed) & 0xff);
		if ((w[i] & 0x7f) == 0x7f)
			w[i] ^= 1;
	}
	for (i = 0; i < R * C; i++)
		sc[i] = 1e-3f * (1 + t_randf(&seed));
	T_CHECK(ds_fp8_rows(f, &s, 0, n, &br, &bc) == 0);
	for (r = 0; r < n; r++)
		for (c = 0; c < k; c++)
			bad += f[r * k + c] != ds_fp8_e4m3_value(w[r * k + c]) *
					       sc[(r / bo) * C + c / bi];
	T_CHECK(bad == 0);
	for (t = 0; t < 3; t++) {
		uint64_t bytes;

		T_CHECK(ds_tensor_bytes(ts[t], 2, (uint64_t[]){ n, k }, &bytes) == 0);
		a = malloc(bytes);
		b = malloc(bytes);
		T_CHECK(ds_fp8_matrix(a, ts[t], &s, 3, &err) == 0);
		if (ts[t].dt == DS_BF16) {
			for (i = 0; i < n * k; i++)
				h[i] = ds_f32_to_bf16(f[i]);
			ds_pack_bf16(b, h, n, k);
		} else {
			T_CHECK((ts[t].dt == DS_Q8 ? ds_quantize_q8 : ds_quantize_q4)(
					b, f, n, k, ts[t].group) == 0);
		}
		T_CHECKF(memcmp(a, b, bytes) == 0, "type %d differs", t);
		free(a);
		free(b);
	}
	/* a NaN code and a scale that is not finite are named by position */
	a = malloc(n * 1024);
	w[33 * k + 150] = 0xff;
	w[40 * k + 3] = 0x7f;
	T_CHECK(ds_fp8_matrix(a, ts[0], &s, 2, &err) == -1);
	T_CHECKF(strcmp(err.msg, "NaN code 0xff at [33, 150]") == 0, "%s", err.msg);
	w[33 * k + 150] = 0;
	w[40 * k + 3] = 0;
	sc[1 * C + 2] = INFINITY;
	T_CHECK(ds_fp8_matrix(a, ts[0], &s, 1, &err) == -1);
	T_CHECKF(strcmp(err.msg, "scale of block [1, 2] is not finite") == 0, "%s",
		 err.msg);
	free(a);
	free(w);
	free(sc);
	free(f);
	free(h);
}

static void test_fp8_detect(void)
{
	ds_qconfig q;
	ds_err err;

	T_CHECK(detect_text("quantize_config.json", "{\"quant_method\":\"fp8\","
			    "\"fmt\":\"e4m3\",\"weight_block_size\":[128,64],"
			    "\"activation_scheme\":\"dynamic\"}", DS_QF_FP8, &q,
			    &err) == 0);
	T_CHECK(q.method == DS_QM_FP8 && q.block[0] == 128 && q.block[1] == 64);
	T_CHECK(detect_text("quantize_config.json", "{\"quant_method\":\"fp8\","
			    "\"fmt\":\"e4m3\",\"weight_block_size\":[128,128],"
			    "\"scale_fmt\":\"ue8m0\"}", DS_QF_AUTO, &q, &err) == 0);
	refuse_q("quantize_config.json", "{\"quant_method\":\"fp8\",\"fmt\":"
		 "\"e4m3\",\"weight_block_size\":[0,128]}", "weight_block_size[0]");
	refuse_q("quantize_config.json", "{\"quant_method\":\"fp8\",\"fmt\":"
		 "\"e4m3\",\"weight_block_size\":[128]}", "not two integers");
	refuse_q("quantize_config.json", "{\"quant_method\":\"fp8\",\"fmt\":"
		 "\"e4m3\",\"weight_block_size\":[128,128],\"scale_fmt\":\"x\"}",
		 "scale_fmt");
	T_CHECK(detect_text("quantize_config.json", "{\"quant_method\":\"fp8\","
			    "\"fmt\":\"e4m3\",\"weight_block_size\":[128,128]}",
			    DS_QF_GPTQ, &q, &err) == -1 &&
		strstr(err.msg, "describes fp8 quantization") != NULL);
}

int main(void)
{
	char cmd[96];

	seed = t_seed();
	strcpy(dir, "/tmp/ds-test-quant-XXXXXX");
	if (mkdtemp(dir) == NULL)
		return 1;
	T_RUN(test_awq);
	T_RUN(test_gptq4);
	T_RUN(test_gptq8_exact);
	T_RUN(test_gptq8_requant);
	T_RUN(test_gptq_v1_overflow);
	T_RUN(test_perm);
	T_RUN(test_rtn);
	T_RUN(test_rtn_float);
	T_RUN(test_detect);
	T_RUN(test_detect_refusals);
	T_RUN(test_module_checks);
	T_RUN(test_fp8_values);
	T_RUN(test_fp8_matrix);
	T_RUN(test_fp8_detect);
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd) != 0)
		return 1;
	return t_done();
}

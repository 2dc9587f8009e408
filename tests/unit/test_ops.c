/*
 * test_ops.c - the op layer on 1 and 2 threads: products (strided, many
 * outputs, fused norm, act-order permutations, chunks of max_rows), the
 * fused FFN, routed experts, attention (GQA, MLA views), RoPE tables,
 * top-k and routing, embedding.
 *
 * The ops must compute exactly what the kernels compute: the thread
 * split, the fusions and the chunking never change a value, so most
 * checks are bit-exact against the kernels or the unfused ops; the
 * kernels themselves are held to scalar.c and double references in
 * test_kernels.c.  Where an op adds in a different order (MoE) the
 * tolerance is a few roundings of the terms' magnitude.
 */
#include <math.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "ops/ops.h"
#include "ops/ops_int.h"

#define U 0x1p-24

static uint64_t seed;
static ds_pool *pools[2];
static ds_ctx ctxs[2];
static ds_ctx wide;   /* 2 threads, max_k so large that a block is 12 rows */
static const ds_ttype types[] = {
	{ DS_Q4, 32 }, { DS_Q4, 128 }, { DS_Q8, 64 }, { DS_BF16, 0 },
	{ DS_F16, 0 }, { DS_F32, 0 },
	{ DS_Q8, 32 },  /* its products read ds_act.qt on AMX */
};
#define NTYPES (sizeof types / sizeof types[0])

/* ---- helpers ------------------------------------------------------------- */

static float *rnd(size_t n, float scale)
{
	float *p = malloc((n ? n : 1) * sizeof(float));
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = t_randf(&seed) * scale;
	return p;
}

/* A random matrix [ne][n][k] of type t (RTN-quantized random weights). */
typedef struct tmat {
	ds_mat m;
	uint8_t *buf;
	int32_t *perm;
} tmat;

static void tmat_init(tmat *w, ds_ttype t, size_t ne, size_t n, size_t k, int permuted)
{
	uint64_t shape[3] = { ne, n, k }, bytes, eb;
	float *f = rnd(n * k, 0.5f);
	size_t e, i;
	ds_err err;
	int nd = ne > 1 ? 3 : 2;

	T_CHECK(ds_tensor_bytes(t, nd, shape + (3 - nd), &bytes) == 0);
	w->buf = malloc(bytes);
	eb = bytes / ne;
	for (e = 0; e < ne; e++) {
		uint8_t *d = w->buf + e * eb;

		for (i = 0; i < n * k; i++)
			f[i] = t_randf(&seed) * 0.5f;
		if (t.dt == DS_Q4)
			ds_quantize_q4(d, f, n, k, t.group);
		else if (t.dt == DS_Q8)
			ds_quantize_q8(d, f, n, k, t.group);
		else if (t.dt == DS_F32)
			memcpy(d, f, n * k * 4);
		else {
			uint16_t *h = malloc(n * k * 2);

			for (i = 0; i < n * k; i++)
				h[i] = t.dt == DS_F16 ? ds_f32_to_f16(f[i]) : ds_f32_to_bf16(f[i]);
			if (t.dt == DS_BF16)
				ds_pack_bf16(d, h, n, k);
			else
				memcpy(d, h, n * k * 2);
			free(h);
		}
	}
	free(f);
	w->perm = NULL;
	if (permuted) {
		w->perm = malloc(ne * k * sizeof(int32_t));
		for (e = 0; e < ne; e++) {
			int32_t *p = w->perm + e * k;

			for (i = 0; i < k; i++)
				p[i] = (int32_t)i;
			for (i = k; i > 1; i--) {
				size_t j = t_rand(&seed) % i;
				int32_t tmp = p[i - 1];

				p[i - 1] = p[j];
				p[j] = tmp;
			}
		}
	}
	T_CHECK(ds_mat_init(&w->m, t, w->buf, bytes, nd, shape + (3 - nd), w->perm, &err) == 0);
}

static void tmat_free(tmat *w)
{
	free(w->buf);
	free(w->perm);
}

static int same(const float *a, const float *b, size_t n)
{
	return memcmp(a, b, n * sizeof(float)) == 0;
}

/* y [t][ldy] by the kernel directly (one thread), x prepared by hand. */
static void direct_mm(const ds_kernels *K, const ds_mat *w, const float *x,
		      size_t ldx, size_t t, float *y, size_t ldy)
{
	size_t ldq = ds_round_up(w->kp, 64), r, i;
	int8_t *q = malloc(t * ldq);
	float *qd = malloc(t * ldq / 8), *qs = malloc(t * ldq / 8), *xp = malloc(t * w->k * 4);
	uint16_t *b = malloc(t * ldq * 2);
	ds_act a = { t, xp, w->k, b, q, qd, qs, ldq, NULL, 0 };

	for (r = 0; r < t; r++) {
		for (i = 0; i < w->k; i++)
			xp[r * w->k + i] = x[r * ldx + (w->perm ? (size_t)w->perm[i] : i)];
		K->quant_row(x + r * ldx, w->k, w->kp, w->perm, NULL, 1.0f, q + r * ldq,
			     qd + r * ldq / 32, qs + r * ldq / 32);
		K->bf16_row(x + r * ldx, w->k, w->kp, w->perm, NULL, 1.0f, b + r * ldq);
	}
	K->mm[w->type.dt](w, &a, y, ldy, 0, (w->n + 15) / 16);
	free(q); free(qd); free(qs); free(xp); free(b);
}

/* ---- products -------------------------------------------------------------- */

static void test_matmul(void)
{
	static const size_t ts[] = { 1, 3, 37, 80 };
	size_t ti, ci, i;
	int p;

	for (ti = 0; ti < NTYPES; ti++)
		for (ci = 0; ci < 4; ci++) {
			size_t n = 16 * (ci + 1) + ci, k = 96 + 40 * ci, t = ts[ci];
			size_t ldx = k + 7, ldy = n + 5;
			int perm = ds_ttype_interleaved(types[ti]) && ci % 2;
			float *x = rnd(t * ldx, 2), *y0 = malloc(t * ldy * 4), *y1 = malloc(t * ldy * 4);
			tmat w;

			tmat_init(&w, types[ti], 1, n, k, perm);
			direct_mm(ctxs[0].kern, &w.m, x, ldx, t, y0, ldy);
			for (p = 0; p < 2; p++) {
				ds_in in = { x, ldx, t, NULL, 0 };
				ds_mm_out o = { &w.m, y1, ldy, NULL, 0 };
				int bad = 0;

				for (i = 0; i < t * ldy; i++)
					y1[i] = -7;
				ds_matmul_many(&ctxs[p], &in, &o, 1);
				for (i = 0; i < t; i++) {
					bad += !same(y0 + i * ldy, y1 + i * ldy, n);
					bad += y1[i * ldy + n] != -7;
				}
				T_CHECKF(bad == 0, "threads %d type %d n=%zu k=%zu t=%zu perm=%d", p + 1,
					 (int)ti, n, k, t, perm);
			}
			/* dense form */
			if (ldx == k + 7) {
				float *xd = malloc(t * k * 4), *yd = malloc(t * n * 4);

				for (i = 0; i < t; i++)
					memcpy(xd + i * k, x + i * ldx, k * 4);
				ds_matmul(&ctxs[1], &w.m, xd, t, yd);
				for (i = 0; i < t; i++)
					T_CHECK(same(yd + i * n, y0 + i * ldy, n));
				free(xd);
				free(yd);
			}
			tmat_free(&w);
			free(x); free(y0); free(y1);
		}
}

/* q, k, v of different types from one input, with the norm fused: equal
 * to RMSNorm then one product each. */
static void test_matmul_many(void)
{
	size_t k = 200, t = 9, i;
	float *x = rnd(t * k, 3), *nw = rnd(k, 1), *xn = malloc(t * k * 4);
	tmat w[4];
	float *y[4], *ref[4];
	int p, o;

	for (o = 0; o < 4; o++) {
		tmat_init(&w[o], types[o + 1], 1, 24 + 9 * o, k, 0);
		y[o] = malloc(t * w[o].m.n * 4);
		ref[o] = malloc(t * w[o].m.n * 4);
	}
	ds_rmsnorm(&ctxs[0], x, 0, nw, 1e-5f, t, k, xn, 0);
	for (o = 0; o < 4; o++)
		ds_matmul(&ctxs[0], &w[o].m, xn, t, ref[o]);
	for (p = 0; p < 2; p++) {
		ds_in in = { x, 0, t, nw, 1e-5f };
		ds_mm_out outs[4];
		int bad = 0;

		for (o = 0; o < 4; o++)
			outs[o] = (ds_mm_out){ &w[o].m, y[o], 0, NULL, 0 };
		ds_matmul_many(&ctxs[p], &in, outs, 4);
		for (o = 0; o < 4; o++)
			bad += !same(y[o], ref[o], t * w[o].m.n);
		T_CHECKF(bad == 0, "threads %d: %d outputs differ", p + 1, bad);
	}
	/* the norm itself: 1 and 2 threads agree with the kernel */
	{
		float *a = malloc(t * k * 4);

		for (i = 0; i < t; i++)
			ctxs[0].kern->rmsnorm(x + i * k, nw, k, 1e-5f, a + i * k);
		T_CHECK(same(a, xn, t * k));
		ds_rmsnorm(&ctxs[1], x, 0, nw, 1e-5f, t, k, xn, 0);
		T_CHECK(same(a, xn, t * k));
		free(a);
	}
	for (o = 0; o < 4; o++) {
		tmat_free(&w[o]);
		free(y[o]);
		free(ref[o]);
	}
	free(x); free(nw); free(xn);
}

/* A residual in the product (ds_mm_out.res; ds_ffn's res) is the
 * product added to it afterwards, for one row (decode) and several, on
 * 1 and 2 threads; y still holds the product. */
static void test_matmul_res(void)
{
	static const size_t ts[2] = { 1, 7 };
	size_t k = 96, n = 72, i, ti;
	tmat w, g, u, d;
	int p;

	tmat_init(&w, types[0], 1, n, k, 0);
	tmat_init(&g, types[0], 1, 64, k, 0);
	tmat_init(&u, types[0], 1, 64, k, 0);
	tmat_init(&d, types[0], 1, k, 64, 0);
	for (ti = 0; ti < 2; ti++) {
		size_t t = ts[ti];
		float *x = rnd(t * k, 5), *base = rnd(t * n, 6), *ref = malloc(t * n * 4);
		float *y = malloc(t * n * 4), *r = malloc(t * n * 4);
		float *fb = rnd(t * k, 7), *fref = malloc(t * k * 4), *fy = malloc(t * k * 4);
		float *fr = malloc(t * k * 4);
		ds_in in = { x, 0, t, NULL, 0 };

		ds_matmul(&ctxs[0], &w.m, x, t, ref);
		ds_ffn(&ctxs[0], &g.m, &u.m, &d.m, &in, fref, 0, NULL);
		for (p = 0; p < 2; p++) {
			ds_mm_out o = { &w.m, y, 0, r, 0 };
			int bad = 0;

			memcpy(r, base, t * n * 4);
			ds_matmul_many(&ctxs[p], &in, &o, 1);
			for (i = 0; i < t * n; i++)
				bad += r[i] != base[i] + ref[i] || y[i] != ref[i];
			memcpy(fr, fb, t * k * 4);
			ds_ffn(&ctxs[p], &g.m, &u.m, &d.m, &in, fy, 0, fr);
			for (i = 0; i < t * k; i++)
				bad += fr[i] != fb[i] + fref[i] || fy[i] != fref[i];
			T_CHECKF(bad == 0, "t %zu, threads %d: %d values differ", t, p + 1, bad);
		}
		free(x); free(base); free(ref); free(y); free(r);
		free(fb); free(fref); free(fy); free(fr);
	}
	tmat_free(&w); tmat_free(&g); tmat_free(&u); tmat_free(&d);
}

/* An act-order matrix computes x[perm[i]] against column i. */
static void test_perm(void)
{
	size_t n = 40, k = 256, t = 3, i, r;
	float *x = rnd(t * k, 2), *xp = malloc(t * k * 4), *y0 = malloc(t * n * 4), *y1 = malloc(t * n * 4);
	tmat w;
	ds_mat plain;
	int ti;

	for (ti = 0; ti < 4; ti++) {
		tmat_init(&w, types[ti], 1, n, k, 1);
		plain = w.m;
		plain.perm = NULL;
		for (r = 0; r < t; r++)
			for (i = 0; i < k; i++)
				xp[r * k + i] = x[r * k + (size_t)w.perm[i]];
		ds_matmul(&ctxs[1], &w.m, x, t, y0);
		ds_matmul(&ctxs[1], &plain, xp, t, y1);
		T_CHECK(same(y0, y1, t * n));
		tmat_free(&w);
	}
	free(x); free(xp); free(y0); free(y1);
}

/* ds_ffn on more rows than its hidden layer holds (ops_ffn_rows: 96 for
 * an int8 down of 8192 inputs) is the gate/up op and a product over all
 * rows at once, bit for bit. */
/* ds_ffn in passes of its hidden rows, for the widest FFN the context was
 * made for and a narrower one (a shared expert beside a dense layer: its
 * passes take more rows, as many as fit in the same buffer). */
static void test_ffn_chunks(void)
{
	ds_ctx_cfg cfg = { .max_rows = 128, .max_k = 8192, .max_ff = 8192 };
	size_t k = 96, t = 100, n = 40, ffs[2] = { 8192, 1040 }, f;
	float *x = rnd(t * k, 2), *nw = rnd(k, 1), *h = malloc(t * 8192 * 4);
	float *y0 = malloc(t * n * 4), *y1 = malloc(t * n * 4);
	ds_in in = { x, 0, t, nw, 1e-6f };
	ds_ctx c;
	ds_err err;

	T_CHECK(ds_ctx_init(&c, pools[1], &cfg, &err) == 0);
	T_CHECK(ops_ffn_rows(&c, NULL) == 96);
	for (f = 0; f < 2; f++) {
		size_t ff = ffs[f];
		tmat wg, wu, wd;

		tmat_init(&wg, types[0], 1, ff, k, 0);
		tmat_init(&wu, types[0], 1, ff, k, 0);
		tmat_init(&wd, types[2], 1, n, ff, 0);
		T_CHECK(ff == 8192 || ops_ffn_rows(&c, &wd.m) > t);
		ds_ffn_gate_up(&c, &wg.m, &wu.m, &in, h, 0);
		ds_matmul(&c, &wd.m, h, t, y0);
		ds_ffn(&c, &wg.m, &wu.m, &wd.m, &in, y1, 0, NULL);
		T_CHECKF(same(y0, y1, t * n), "ff %zu", ff);
		tmat_free(&wg); tmat_free(&wu); tmat_free(&wd);
	}
	ds_ctx_free(&c);
	free(x); free(nw); free(h); free(y0); free(y1);
}

/* The fused FFN against the separate products and the gating, bit for
 * bit: n_ff a multiple of 16 and not, and of 18 row-sets (products of
 * FFN_RS = 16 row-sets a call, then 2); gate and up without a permutation,
 * with one they share and with two; one row (decode: each thread its own
 * copy of the input, gate's row-sets and up's claimed as one range unless
 * the permutations differ), three and eleven; 1 and 2 threads. */
static void test_ffn(void)
{
	size_t k = 160, n = 56, t, i, f, ffs[3] = { 72, 96, 280 }, ts[3] = { 1, 3, 11 }, tt;
	float *x = rnd(11 * k, 2), *nw = rnd(k, 1), *xn = malloc(11 * k * 4);
	float *g = malloc(11 * 280 * 4), *u = malloc(11 * 280 * 4), *h0 = malloc(11 * 280 * 4);
	float *h1 = malloc(11 * 280 * 4), *y0 = malloc(11 * n * 4), *y1 = malloc(11 * n * 4);
	int ti, p, perm;

	for (f = 0; f < 3; f++)
		for (tt = 0; tt < 3; tt++)
			for (ti = 0; ti < 4; ti++)
				for (perm = 0; perm < 3; perm++) {
					size_t ff = ffs[f];
					tmat wg, wu, wd;

					t = ts[tt];
					tmat_init(&wg, types[ti], 1, ff, k, perm > 0);
					tmat_init(&wu, types[ti], 1, ff, k, perm > 0);
					if (perm == 1)
						wu.m.perm = wg.m.perm;
					tmat_init(&wd, types[(ti + 2) % 4], 1, n, ff, 0);
					ds_rmsnorm(&ctxs[0], x, 0, nw, 1e-6f, t, k, xn, 0);
					ds_matmul(&ctxs[0], &wg.m, xn, t, g);
					ds_matmul(&ctxs[0], &wu.m, xn, t, u);
					for (i = 0; i < t; i++)
						ctxs[0].kern->silu_mul(g + i * ff, u + i * ff, ff, h0 + i * ff);
					ds_matmul(&ctxs[0], &wd.m, h0, t, y0);
					for (p = 0; p < 2; p++) {
						ds_in in = { x, 0, t, nw, 1e-6f };

						ds_ffn_gate_up(&ctxs[p], &wg.m, &wu.m, &in, h1, 0);
						T_CHECKF(same(h0, h1, t * ff), "ff %zu t %zu type %d perm %d threads %d",
							 ff, t, ti, perm, p + 1);
						ds_ffn(&ctxs[p], &wg.m, &wu.m, &wd.m, &in, y1, 0, NULL);
						T_CHECK(same(y0, y1, t * n));
					}
					tmat_free(&wg); tmat_free(&wu); tmat_free(&wd);
				}
	free(x); free(nw); free(xn); free(g); free(u); free(h0); free(h1); free(y0); free(y1);
}

/* Routed experts against one dense FFN per (token, expert): experts of
 * 3 row-sets (the last partial) and of 18 (gate/up over FFN_RS = 16
 * row-sets a call, then 2). */
static void test_moe(void)
{
	size_t ne = 6, used = 3, k = 64, ffs[2] = { 40, 280 }, fi, t, i, j;
	int ti, p, perm;

	/* q8g32 too (types[6]), and 61 tokens: experts of 16 tokens or
	 * more (AMX's tiles), starting anywhere in the gathered rows */
	for (fi = 0; fi < 2; fi++)
	for (ti = 0; ti < 5; ti++)
		for (perm = 0; perm < 2; perm++)
			for (t = 1; t <= 61; t += t == 1 ? 20 : 40) {
				const size_t ff = ffs[fi];
				const ds_ttype tg = types[ti < 4 ? ti : 6];
				tmat g, u, d;
				float *x = rnd(t * k, 2), *y0 = rnd(t * k, 1), *y1 = malloc(t * k * 4);
				float *w = malloc(t * used * 4), *tmp = malloc(k * 4), *mag = calloc(t * k, 8);
				int32_t *ids = malloc(t * used * 4);

				tmat_init(&g, tg, ne, ff, k, perm);
				tmat_init(&u, tg, ne, ff, k, perm && ti % 2);
				tmat_init(&d, ti < 4 ? types[(ti + 1) % 4] : tg, ne, k, ff, perm);
				for (i = 0; i < t; i++)
					for (j = 0; j < used; j++) {
						/* distinct experts, expert 5 never used */
						ids[i * used + j] = (int32_t)((i + 2 * j) % 5);
						w[i * used + j] = 0.2f + 0.3f * (float)j;
					}
				for (p = 0; p < 2; p++) {
					int bad = 0;
					size_t q;

					memcpy(y1, y0, t * k * 4);
					ds_moe(&ctxs[p], &g.m, &u.m, &d.m, x, 0, t, ids, w, used, y1, 0);
					for (i = 0; i < t; i++) {
						double *m = (double *)mag + i * k;
						float want[64];

						memcpy(want, y0 + i * k, k * 4);
						for (q = 0; q < k; q++)
							m[q] = fabs(want[q]);
						for (j = 0; j < used; j++) {
							ds_mat eg = ds_mat_expert(&g.m, (uint64_t)ids[i * used + j]);
							ds_mat eu = ds_mat_expert(&u.m, (uint64_t)ids[i * used + j]);
							ds_mat ed = ds_mat_expert(&d.m, (uint64_t)ids[i * used + j]);
							ds_in in = { x + i * k, 0, 1, NULL, 0 };

							ds_ffn(&ctxs[0], &eg, &eu, &ed, &in, tmp, 0, NULL);
							for (q = 0; q < k; q++) {
								want[q] += w[i * used + j] * tmp[q];
								m[q] += fabs(w[i * used + j] * tmp[q]);
							}
						}
						for (q = 0; q < k; q++)
							bad += !(fabs(y1[i * k + q] - want[q]) <= 8 * U * m[q]);
					}
					T_CHECKF(bad == 0, "type %d perm %d t=%zu threads %d: %d values off",
						 ti, perm, t, p + 1, bad);
				}
				tmat_free(&g); tmat_free(&u); tmat_free(&d);
				free(x); free(y0); free(y1); free(w); free(tmp); free(mag); free(ids);
			}
}

/* y[t] += w x[r] for token t's assignments in ascending expert order:
 * how the forward adds the rows of ds_moe_part (model/ep.c). */
static void add_rows(const ds_kernels *K, const float *rows, const int32_t *ids,
		     const float *w, size_t t, size_t used, size_t k, float *y)
{
	size_t i, j, a, b;

	for (i = 0; i < t; i++) {
		size_t ord[8];

		for (j = 0; j < used; j++)
			ord[j] = i * used + j;
		for (a = 1; a < used; a++)
			for (b = a; b > 0 && ids[ord[b - 1]] > ids[ord[b]]; b--) {
				size_t s = ord[b];

				ord[b] = ord[b - 1];
				ord[b - 1] = s;
			}
		for (j = 0; j < used; j++)
			K->axpy(w[ord[j]], rows + ord[j] * k, k, y + i * k);
	}
}

/* Expert parallelism's op: the experts split in ranges (one, three equal,
 * uneven with an empty one), each range's unweighted rows written where
 * dst says and no others, then weighed and added in expert order: ds_moe's
 * result bit for bit, whatever the split, the threads or the chunks
 * (61 tokens are two chunks of max_rows 40). */
static void test_moe_part(void)
{
	static const uint32_t splits[4][5] = {
		{ 0, 6 }, { 0, 2, 4, 6 }, { 0, 1, 5, 5, 6 }, { 0, 3, 6 },
	};
	static const int nsplit[4] = { 1, 3, 4, 2 };
	size_t ne = 6, used = 3, k = 64, ffs[2] = { 40, 280 }, fi, t, i, s;
	int ti, p, q;

	for (fi = 0; fi < 2; fi++)
	for (ti = 0; ti < (int)NTYPES; ti++)
		for (t = 1; t <= 61; t += t == 1 ? 20 : 40) {
			const size_t ff = ffs[fi];
			tmat g, u, d;
			float *x = rnd(t * k, 2), *y0 = rnd(t * k, 1), *y1 = malloc(t * k * 4);
			float *y2 = malloc(t * k * 4), *w = malloc(t * used * 4);
			float *rows = malloc(t * used * k * 4), *back = malloc(t * used * k * 4);
			int32_t *ids = malloc(t * used * 4), *dst = malloc(t * used * 4);

			tmat_init(&g, types[ti], ne, ff, k, ti == 0);
			tmat_init(&u, types[ti], ne, ff, k, ti == 0);
			tmat_init(&d, types[(ti + 1) % NTYPES], ne, k, ff, 0);
			for (i = 0; i < t * used; i++) {
				ids[i] = (int32_t)((i / used + 2 * (i % used)) % 5);
				w[i] = 0.2f + 0.3f * (float)(i % used);
				dst[i] = (int32_t)(t * used - 1 - i);   /* reversed */
			}
			for (p = 0; p < 2; p++) {
				memcpy(y1, y0, t * k * 4);
				ds_moe(&ctxs[p], &g.m, &u.m, &d.m, x, 0, t, ids, w, used, y1, 0);
				for (s = 0; s < 4; s++) {
					int bad = 0;

					memset(rows, 0xff, t * used * k * 4);   /* NaNs */
					for (q = 0; q < nsplit[s]; q++) {
						uint32_t e0 = splits[s][q], e1 = splits[s][q + 1];

						ds_moe_part(&ctxs[p], &g.m, &u.m, &d.m, x, 0, t, ids,
							    used, e0, e1, dst, rows, 0);
						for (i = 0; i < t * used; i++) {
							const float *r = rows + (size_t)dst[i] * k;
							int done = (uint32_t)ids[i] < e1;

							bad += done == isnan(r[0]) || done == isnan(r[k - 1]);
						}
					}
					/* back in assignment order, then added */
					for (i = 0; i < t * used; i++)
						memcpy(back + i * k, rows + (size_t)dst[i] * k, k * 4);
					memcpy(y2, y0, t * k * 4);
					add_rows(ctxs[p].kern, back, ids, w, t, used, k, y2);
					T_CHECKF(bad == 0 && same(y1, y2, t * k),
						 "ff %zu type %d t=%zu threads %d split %zu: %d rows "
						 "written wrongly", ff, ti, t, p + 1, s, bad);
				}
			}
			tmat_free(&g); tmat_free(&u); tmat_free(&d);
			free(x); free(y0); free(y1); free(y2); free(w); free(rows); free(back);
			free(ids); free(dst);
		}
}

/* Blocks of activation rows (the op layer's cache blocking: with this k,
 * 12 to 24 rows per block) and tiles change no value: all 40 rows at
 * once equal each row alone. */
static void test_blocks(void)
{
	size_t k = 32768, n = 40, ff = 24, t = 40, ne = 2, used = 2, i;
	float *x = rnd(t * k, 2), *y0 = malloc(t * n * 4), *y1 = malloc(t * n * 4);
	float *h0 = malloc(t * ff * 4), *h1 = malloc(t * ff * 4);
	float *m0 = rnd(t * k, 1), *m1 = malloc(t * k * 4), *m2 = malloc(t * k * 4), *w = malloc(t * used * 4);
	int32_t *ids = malloc(t * used * 4);
	int ti;

	for (i = 0; i < t * used; i++) {
		ids[i] = (int32_t)(i % used);
		w[i] = 0.5f;
	}
	for (ti = 0; ti < 6; ti++) {
		tmat a, g, u, eg, eu, ed;
		ds_in in = { x, 0, t, NULL, 0 };
		int bad = 0;

		tmat_init(&a, types[ti], 1, n, k, 0);
		tmat_init(&g, types[ti], 1, ff, k, 0);
		tmat_init(&u, types[ti], 1, ff, k, 0);
		tmat_init(&eg, types[ti], ne, ff, k, 0);
		tmat_init(&eu, types[ti], ne, ff, k, 0);
		tmat_init(&ed, types[ti], ne, k, ff, 0);
		ds_matmul(&wide, &a.m, x, t, y0);
		ds_ffn_gate_up(&wide, &g.m, &u.m, &in, h0, 0);
		memcpy(m1, m0, t * k * 4);
		ds_moe(&wide, &eg.m, &eu.m, &ed.m, x, 0, t, ids, w, used, m1, 0);
		for (i = 0; i < t; i++) {
			ds_in one = { x + i * k, 0, 1, NULL, 0 };

			ds_matmul(&wide, &a.m, x + i * k, 1, y1 + i * n);
			ds_ffn_gate_up(&wide, &g.m, &u.m, &one, h1 + i * ff, 0);
			memcpy(m2 + i * k, m0 + i * k, k * 4);
			ds_moe(&wide, &eg.m, &eu.m, &ed.m, x + i * k, 0, 1, ids + i * used, w + i * used,
			       used, m2 + i * k, 0);
		}
		bad += !same(y0, y1, t * n);
		bad += 2 * !same(h0, h1, t * ff);
		bad += 4 * !same(m1, m2, t * k);
		T_CHECKF(bad == 0, "type %d: %d (1 matmul, 2 gate/up, 4 moe)", ti, bad);
		tmat_free(&a); tmat_free(&g); tmat_free(&u);
		tmat_free(&eg); tmat_free(&eu); tmat_free(&ed);
	}
	free(x); free(y0); free(y1); free(h0); free(h1); free(m0); free(m1); free(m2); free(w); free(ids);
}

/* Per-head products equal one product per head, for expert views of a
 * 3-D tensor and row views of a 2-D one (MLA's W_UK^T and W_UV). */
static void test_heads(void)
{
	size_t nh = 4, n = 40, k = 96, t, h, i;
	int ti, p;

	for (ti = 0; ti < 6; ti++)
		for (t = 1; t <= 9; t += 8) {
			tmat w3, w2;
			ds_mat v3[4], v2[4];
			size_t ldx = nh * k + 3, ldy = nh * n + 5;
			float *x = rnd(t * ldx, 1), *y = malloc(t * ldy * 4), *ref = malloc(t * n * 4);
			float *xh = malloc(t * k * 4);
			int bad = 0;

			tmat_init(&w3, types[ti], nh, n, k, ti == 0);
			tmat_init(&w2, types[ti], 1, nh * 48, k, 0);
			for (h = 0; h < nh; h++) {
				v3[h] = ds_mat_expert(&w3.m, h);
				v2[h] = ds_mat_rows(&w2.m, h * 48, n);
			}
			for (p = 0; p < 2; p++) {
				ds_mat *v = p ? v2 : v3;
				ds_heads hd = { .w = v, .nh = nh, .x = x, .ldx = ldx, .hsx = k,
						.y = y, .ldy = ldy, .hsy = n };

				ds_matmul_heads(&ctxs[p], &hd, t);
				for (h = 0; h < nh; h++) {
					for (i = 0; i < t; i++)
						memcpy(xh + i * k, x + i * ldx + h * k, k * 4);
					ds_matmul(&ctxs[0], &v[h], xh, t, ref);
					for (i = 0; i < t; i++)
						bad += !same(y + i * ldy + h * n, ref + i * n, n);
				}
			}
			T_CHECKF(bad == 0, "type %d t=%zu: %d rows differ", ti, t, bad);
			tmat_free(&w3); tmat_free(&w2);
			free(x); free(y); free(ref); free(xh);
		}
}

/* ---- attention ---------------------------------------------------------------- */

static float kv_val(const ds_kv *kv, size_t p, size_t h, size_t i)
{
	const uint8_t *r = kv->data + p * kv->ld + h * kv->head_stride;
	uint16_t v;
	float f, d;

	switch (kv->type) {
	case DS_KV_F32: memcpy(&f, r + 4 * i, 4); return f;
	case DS_KV_Q8:
		memcpy(&d, r + 36 * (i / 32), 4);
		return d * (float)(int8_t)r[36 * (i / 32) + 4 + i % 32];
	default:
		memcpy(&v, r + 2 * i, 2);
		return kv->type == DS_KV_F16 ? ds_f16_to_f32(v) : ds_bf16_to_f32(v);
	}
}

/* Causal attention over a cache filled by ds_kv_write: against a double
 * reference, and 1 thread bit-equal to 2. */
static void check_attention(enum ds_kvtype type, size_t nh, size_t nkv,
			    size_t kd, size_t vd, int mla, size_t t, size_t pos0)
{
	size_t npos = pos0 + t, krow = ds_kv_row_bytes(type, kd), vrow = ds_kv_row_bytes(type, vd);
	size_t ld = nkv * (krow + (mla ? 0 : vrow)), tt, h, i, j, p;
	uint8_t *cache = calloc(npos * ld + 64, 1);
	float *kin = rnd(npos * nkv * kd, 1), *vin = rnd(npos * nkv * vd, 1);
	float *q = rnd(t * nh * kd, 1), *o[2];
	ds_kv kc = { type, cache, ld, krow, kd }, vc = { type, cache + nkv * krow, ld, vrow, vd };
	ds_attn a;
	int bad = 0, pp;

	if (mla) {
		vc = kc;
		vc.dim = vd;
	}
	/* the cache written token by token as decode would, then all at once */
	for (p = 0; p < npos; p++)
		ds_kv_write(&ctxs[0], &kc, kin + p * nkv * kd, 0, kd, nkv, 1, p);
	if (!mla)
		ds_kv_write(&ctxs[1], &vc, vin, 0, vd, nkv, npos, 0);
	memset(&a, 0, sizeof a);
	a.n_head = nh;
	a.n_kv_head = nkv;
	a.q = q;
	a.q_ld = nh * kd;
	a.q_hs = kd;
	a.k = kc;
	a.v = vc;
	a.o_ld = nh * vd + 3;
	a.o_hs = vd;
	a.scale = 1.0f / sqrtf((float)kd);
	a.pos0 = pos0;
	for (pp = 0; pp < 2; pp++) {
		o[pp] = malloc(t * a.o_ld * 4);
		a.o = o[pp];
		ds_attention(&ctxs[pp], &a, t);
	}
	for (tt = 0; tt < t; tt++)
		T_CHECK(same(o[0] + tt * a.o_ld, o[1] + tt * a.o_ld, nh * vd));
	for (tt = 0; tt < t; tt++)
		for (h = 0; h < nh; h++) {
			size_t kvh = h / (nh / nkv), n = pos0 + tt + 1;
			double *s = malloc(n * sizeof(double)), m = -1e300, l = 0;

			for (j = 0; j < n; j++) {
				double d = 0;

				for (i = 0; i < kd; i++)
					d += (double)q[tt * a.q_ld + h * kd + i] * kv_val(&kc, j, kvh, i);
				s[j] = d * a.scale;
				m = fmax(m, s[j]);
			}
			for (j = 0; j < n; j++)
				l += exp(s[j] - m);
			for (i = 0; i < vd; i++) {
				double want = 0;

				for (j = 0; j < n; j++)
					want += exp(s[j] - m) / l * kv_val(&vc, j, kvh, i);
				bad += !(fabs(o[0][tt * a.o_ld + h * vd + i] - want) <= 2e-5);
			}
			free(s);
		}
	T_CHECKF(bad == 0, "type %d heads %zu/%zu dims %zu/%zu t=%zu pos0=%zu: %d off", type, nh,
		 nkv, kd, vd, t, pos0, bad);
	/* the stored rows are the inputs in the cache's type */
	for (p = 0, bad = 0; p < npos; p++)
		for (h = 0; h < nkv; h++)
			bad += !(fabs(kv_val(&kc, p, h, 5) - kin[(p * nkv + h) * kd + 5]) <= 0.01);
	T_CHECK(bad == 0);
	free(cache); free(kin); free(vin); free(q); free(o[0]); free(o[1]);
}

static void test_attention(void)
{
	int t;

	for (t = DS_KV_F32; t <= DS_KV_Q8; t++) {
		check_attention((enum ds_kvtype)t, 8, 2, 64, 64, 0, 5, 3);
		check_attention((enum ds_kvtype)t, 4, 4, 128, 128, 0, 1, 70);
		check_attention((enum ds_kvtype)t, 6, 1, 64, 64, 0, 3, 0);
	}
	/* MLA absorbed decode and a short prefill */
	check_attention(DS_KV_BF16, 16, 1, 576, 512, 1, 1, 40);
	check_attention(DS_KV_Q8, 16, 1, 576, 512, 1, 4, 9);
}

/* ds_attention_rows (RoPE, cache rows and attention in one job) against
 * ds_rope_apply, ds_kv_write and ds_attention, bit for bit: nh query heads
 * over nkv KV heads of width hd, t new rows at pos0 after pos0 cached. */
static void check_attention_rows(enum ds_kvtype kt, size_t nh, size_t nkv, size_t hd,
				 size_t t, size_t pos0, enum ds_rope_style st)
{
	ds_hparams hp;
	ds_rope r;
	ds_err err;
	size_t n = pos0 + t, kvw = nkv * hd, rb = ds_kv_row_bytes(kt, hd);
	float *qs = rnd(t * nh * hd, 1), *ks = rnd(n * kvw, 1), *v = rnd(n * kvw, 1);
	float *q = malloc(t * nh * hd * 4), *k = malloc(n * kvw * 4);
	float *q1 = malloc(t * nh * hd * 4), *k1 = malloc(n * kvw * 4);
	float *o0 = malloc(t * nh * hd * 4), *o1 = malloc(t * nh * hd * 4);
	uint8_t *c0 = calloc(n, nkv * rb * 2), *c1 = calloc(n, nkv * rb * 2);
	int p;

	memset(&hp, 0, sizeof hp);
	hp.rope_style = st;
	hp.rope_theta = 10000;
	T_CHECK(ds_rope_init(&r, &hp, (uint32_t)hd, &err) == 0);
	for (p = 0; p < 2; p++) {
		ds_ctx *c = &ctxs[p];
		ds_kv kc[2], vc[2];
		ds_attn a[2];
		ds_attn_rows in = { &r, q1, k1 + pos0 * kvw, v + pos0 * kvw, 0, hd, NULL };
		int m;

		for (m = 0; m < 2; m++) {
			uint8_t *cache = m ? c1 : c0;

			kc[m] = (ds_kv){ kt, cache, 2 * nkv * rb, rb, hd };
			vc[m] = (ds_kv){ kt, cache + nkv * rb, 2 * nkv * rb, rb, hd };
			a[m] = (ds_attn){ .n_head = nh, .n_kv_head = nkv, .q = m ? q1 : q,
					  .q_ld = nh * hd, .q_hs = hd, .k = kc[m], .v = vc[m],
					  .o = m ? o1 : o0, .o_ld = nh * hd, .o_hs = hd,
					  .scale = 0.125f, .pos0 = pos0 };
		}
		/* both from the same rows: RoPE rotates q and k in place */
		memcpy(q, qs, t * nh * hd * 4);
		memcpy(q1, qs, t * nh * hd * 4);
		memcpy(k, ks, n * kvw * 4);
		memcpy(k1, ks, n * kvw * 4);
		memset(c0, 0, n * nkv * rb * 2);
		memset(c1, 0, n * nkv * rb * 2);
		/* the earlier positions, cached alike */
		ds_kv_write(c, &kc[0], k, 0, hd, nkv, pos0, 0);
		ds_kv_write(c, &vc[0], v, 0, hd, nkv, pos0, 0);
		ds_kv_write(c, &kc[1], k, 0, hd, nkv, pos0, 0);
		ds_kv_write(c, &vc[1], v, 0, hd, nkv, pos0, 0);
		ds_rope_apply(c, &r, q, 0, t, nh, hd, NULL, pos0);
		ds_rope_apply(c, &r, k + pos0 * kvw, 0, t, nkv, hd, NULL, pos0);
		ds_kv_write(c, &kc[0], k + pos0 * kvw, 0, hd, nkv, t, pos0);
		ds_kv_write(c, &vc[0], v + pos0 * kvw, 0, hd, nkv, t, pos0);
		ds_attention(c, &a[0], t);
		ds_attention_rows(c, &a[1], &in, t);
		T_CHECKF(same(q, q1, t * nh * hd) && same(k, k1, n * kvw), "kv %d threads %d", kt, p + 1);
		T_CHECKF(memcmp(c0, c1, n * nkv * rb * 2) == 0, "kv %d threads %d: caches", kt, p + 1);
		T_CHECKF(same(o0, o1, t * nh * hd), "kv %d t %zu threads %d", kt, t, p + 1);
	}
	free(qs); free(ks); free(q); free(k); free(v); free(q1); free(k1);
	free(o0); free(o1); free(c0); free(c1);
}

static void test_attention_rows(void)
{
	int t;

	for (t = DS_KV_F32; t <= DS_KV_Q8; t++) {
		check_attention_rows((enum ds_kvtype)t, 8, 2, 64, 1, 37, DS_ROPE_NEOX);
		check_attention_rows((enum ds_kvtype)t, 4, 4, 32, 6, 0, DS_ROPE_INTERLEAVED);
	}
	check_attention_rows(DS_KV_F16, 6, 1, 64, 3, 5, DS_ROPE_NEOX);
}

/* ---- RoPE ------------------------------------------------------------------------- */

static ds_hparams rope_hp(enum ds_rope_style st, double theta, enum ds_rope_scaling type,
			  double factor, uint32_t l0)
{
	ds_hparams hp;

	memset(&hp, 0, sizeof hp);
	hp.rope_style = st;
	hp.rope_theta = theta;
	hp.rope_scaling.type = type;
	hp.rope_scaling.factor = factor;
	hp.rope_scaling.original_ctx = l0;
	return hp;
}

static void test_rope_tables(void)
{
	ds_hparams y = rope_hp(DS_ROPE_INTERLEAVED, 10000, DS_ROPE_SCALING_YARN, 40, 4096);
	ds_hparams l3 = rope_hp(DS_ROPE_NEOX, 500000, DS_ROPE_SCALING_LLAMA3, 8, 8192);
	ds_hparams bad = rope_hp(DS_ROPE_NEOX, 0.5, DS_ROPE_SCALING_NONE, 0, 0);
	ds_rope r;
	ds_err err;
	double orig;
	int i;

	y.rope_scaling.beta_fast = 32;
	y.rope_scaling.beta_slow = 1;
	y.rope_scaling.mscale = y.rope_scaling.mscale_all_dim = 0.707;
	l3.rope_scaling.low_freq_factor = 1;
	l3.rope_scaling.high_freq_factor = 4;
	/* DeepSeek YaRN: pairs 0-10 keep their frequency, 23-31 are divided
	 * by the factor, 11-22 are blended (docs/deepseek.md 4.2) */
	T_CHECK(ds_rope_init(&r, &y, 64, &err) == 0);
	T_CHECK(r.style == DS_ROPE_INTERLEAVED && r.dim == 64);
	for (i = 0; i < 32; i++) {
		orig = pow(10000, -2.0 * i / 64);
		if (i <= 10)
			T_NEAR(r.inv_freq[i], orig, 1e-15);
		else if (i >= 23)
			T_NEAR(r.inv_freq[i], orig / 40, 1e-15);
		else
			T_CHECK(r.inv_freq[i] < orig && r.inv_freq[i] > orig / 40);
	}
	T_NEAR(r.inv_freq[16], pow(10000, -32.0 / 64) * (1 - 6.0 / 13 + 6.0 / 13 / 40), 1e-15);
	T_NEAR(r.attn_factor, 1.0, 1e-12);
	/* the softmax scale factors the specification lists for V2 and V3 */
	T_NEAR(ds_rope_attn_scale(&y), 1.589626, 1e-6);
	y.rope_scaling.mscale = y.rope_scaling.mscale_all_dim = 1.0;
	T_NEAR(ds_rope_attn_scale(&y), 1.873854, 1e-6);
	T_NEAR(ds_rope_attn_scale(&l3), 1.0, 0);
	/* Llama 3.1: high frequencies kept, low divided by 8 */
	T_CHECK(ds_rope_init(&r, &l3, 128, &err) == 0);
	T_NEAR(r.inv_freq[0], 1.0, 1e-15);
	T_NEAR(r.inv_freq[63], pow(500000, -126.0 / 128) / 8, 1e-18);
	for (i = 0; i < 64; i++) {
		double f = pow(500000, -2.0 * i / 128), wl = 2 * M_PI / f;

		if (wl < 8192 / 4.0)
			T_NEAR(r.inv_freq[i], f, 1e-15);
		else if (wl > 8192)
			T_NEAR(r.inv_freq[i], f / 8, 1e-15);
		else
			T_CHECK(r.inv_freq[i] < f && r.inv_freq[i] > f / 8);
	}
	T_CHECK(ds_rope_init(&r, &l3, 63, &err) == -1);
	T_CHECK(ds_rope_init(&r, &bad, 64, &err) == -1);
	l3.rope_scaling.high_freq_factor = 0.5;
	T_CHECK(ds_rope_init(&r, &l3, 64, &err) == -1);
}

/* At large positions the angle is formed in double. */
static void test_rope_apply(void)
{
	size_t nh = 3, hs = 80, dim = 64, t = 4, i, h, tt;
	int32_t pos[4] = { 0, 7, 100000, 163839 };
	int st, p;

	for (st = 0; st < 2; st++) {
		ds_hparams lin = rope_hp((enum ds_rope_style)st, 10000, DS_ROPE_SCALING_LINEAR, 4, 0);
		ds_rope r;
		ds_err err;
		float *x = rnd(t * nh * hs, 1), *y = malloc(t * nh * hs * 4);
		int bad = 0;

		T_CHECK(ds_rope_init(&r, &lin, dim, &err) == 0);
		for (p = 0; p < 2; p++) {
			memcpy(y, x, t * nh * hs * 4);
			ds_rope_apply(&ctxs[p], &r, y, 0, t, nh, hs, pos, 0);
			for (tt = 0; tt < t; tt++)
				for (h = 0; h < nh; h++)
					for (i = 0; i < dim / 2; i++) {
						size_t i0 = st == DS_ROPE_NEOX ? i : 2 * i;
						size_t i1 = st == DS_ROPE_NEOX ? i + dim / 2 : 2 * i + 1;
						const float *xs = x + (tt * nh + h) * hs;
						const float *ys = y + (tt * nh + h) * hs;
						double a = pos[tt] * pow(10000, -2.0 * i / dim) / 4;

						bad += !(fabs(ys[i0] - (xs[i0] * cos(a) - xs[i1] * sin(a))) < 1e-6);
						bad += !(fabs(ys[i1] - (xs[i0] * sin(a) + xs[i1] * cos(a))) < 1e-6);
					}
		}
		T_CHECKF(bad == 0, "style %d: %d values off", st, bad);
		free(x);
		free(y);
	}
}

/* ---- top-k, routing, embedding, element-wise ---------------------------------------- */

static void test_topk(void)
{
	float x[300];
	int32_t idx[20];
	float val[20];
	int r, i, bad = 0;

	for (r = 0; r < 50; r++) {
		size_t n = 1 + t_rand(&seed) % 300, k = 1 + t_rand(&seed) % (n < 20 ? n : 20), j;

		for (i = 0; i < (int)n; i++)
			x[i] = (float)(t_rand(&seed) % 40); /* many ties */
		ds_topk(x, n, k, idx, val);
		for (j = 0; j < k; j++) {
			/* idx[j] has exactly j elements ranked before it */
			int before = 0;

			for (i = 0; i < (int)n; i++)
				before += x[i] > x[idx[j]] || (x[i] == x[idx[j]] && i < idx[j]);
			bad += before != (int)j || val[j] != x[idx[j]];
		}
	}
	T_CHECK(bad == 0);
}

/* The router on DeepSeek-V2-Lite, V2 and V3 settings, against a
 * reference written from the specification with sorting. */
static int cmp_desc(const void *a, const void *b)
{
	const double *x = a, *y = b;

	return x[0] < y[0] ? 1 : x[0] > y[0] ? -1 : x[1] < y[1] ? -1 : 1;
}

static void route_ref(const ds_router *r, const float *l, int32_t *ids, float *w)
{
	size_t ne = r->n_expert, e, g, ng = r->n_group ? r->n_group : 1, per = ne / ng, i;
	double s[64], pr[64][2], gsc[8][2], m = -1e300, sum = 0;
	int keep[8] = { 0 };

	for (e = 0; e < ne; e++)
		m = fmax(m, l[e]);
	for (e = 0; e < ne; e++)
		sum += exp(l[e] - m);
	for (e = 0; e < ne; e++)
		s[e] = r->score == DS_ROUTE_SOFTMAX ? exp(l[e] - m) / sum : 1 / (1 + exp(-(double)l[e]));
	for (g = 0; g < ng; g++) {
		double v[64][2];

		for (e = 0; e < per; e++) {
			v[e][0] = s[g * per + e] + (r->bias ? r->bias[g * per + e] : 0);
			v[e][1] = (double)e;
		}
		qsort(v, per, sizeof v[0], cmp_desc);
		gsc[g][0] = r->method == DS_ROUTE_NOAUX_TC ? v[0][0] + v[1][0] : v[0][0];
		gsc[g][1] = (double)g;
	}
	qsort(gsc, ng, sizeof gsc[0], cmp_desc);
	for (g = 0; g < (r->method == DS_ROUTE_GREEDY ? ng : r->topk_group); g++)
		keep[(int)gsc[g][1]] = 1;
	for (e = 0; e < ne; e++) {
		pr[e][0] = keep[e / per] ? s[e] + (r->bias ? r->bias[e] : 0) : -1e300;
		pr[e][1] = (double)e;
	}
	qsort(pr, ne, sizeof pr[0], cmp_desc);
	for (i = 0, sum = 0; i < r->n_used; i++) {
		ids[i] = (int32_t)pr[i][1];
		sum += s[ids[i]];
	}
	for (i = 0; i < r->n_used; i++) {
		double v = s[ids[i]];

		if (r->norm_topk_prob)
			v /= sum + 1e-20;
		if (r->score == DS_ROUTE_SIGMOID || !r->norm_topk_prob)
			v *= r->routed_scaling_factor;
		w[i] = (float)v;
	}
}

static void test_route(void)
{
	float bias[64];
	ds_router rs[3] = {
		{ 64, 6, DS_ROUTE_SOFTMAX, DS_ROUTE_GREEDY, 1, 1, NULL, 0, 1.0f },
		{ 64, 6, DS_ROUTE_SOFTMAX, DS_ROUTE_GROUP_LIMITED, 8, 3, NULL, 0, 16.0f },
		{ 64, 8, DS_ROUTE_SIGMOID, DS_ROUTE_NOAUX_TC, 8, 4, bias, 1, 2.5f },
	};
	int i, c, bad = 0;

	for (i = 0; i < 64; i++)
		bias[i] = 0.1f * t_randf(&seed);
	for (c = 0; c < 3; c++) {
		float l[5 * 64], l0[5 * 64], w[5 * 8], wr[8];
		int32_t ids[5 * 8], ir[8];
		size_t t, j;

		for (i = 0; i < 5 * 64; i++)
			l[i] = l0[i] = 3 * t_randf(&seed);
		ds_route(&ctxs[0], &rs[c], l, 5, ids, w);
		for (t = 0; t < 5; t++) {
			route_ref(&rs[c], l0 + t * 64, ir, wr);
			for (j = 0; j < rs[c].n_used; j++)
				bad += ids[t * rs[c].n_used + j] != ir[j] ||
				       !(fabs(w[t * rs[c].n_used + j] - wr[j]) <= 1e-5 * fabs(wr[j]));
		}
		T_CHECKF(bad == 0, "router %d: %d differences", c, bad);
	}
}

static void test_embed(void)
{
	int32_t ids[5] = { 3, 0, 40, 3, 17 };
	size_t k = 100, i, ti;
	float row[100], *y = malloc(5 * (k + 2) * 4);
	ds_err err;

	for (ti = 0; ti < NTYPES; ti++) {
		tmat w;
		int bad = 0, p;

		tmat_init(&w, types[ti], 1, 41, k, 0);
		for (p = 0; p < 2; p++) {
			T_CHECK(ds_embed(&ctxs[p], &w.m, ids, 5, y, k + 2, &err) == 0);
			for (i = 0; i < 5; i++) {
				ds_dequant_row(w.m.type, w.m.data, k, (uint64_t)ids[i], row);
				bad += !same(row, y + i * (k + 2), k);
			}
		}
		T_CHECK(bad == 0);
		ids[2] = 41;
		T_CHECK(ds_embed(&ctxs[1], &w.m, ids, 5, y, 0, &err) == -1 &&
			strstr(err.msg, "id 41") != NULL);
		ids[2] = 40;
		tmat_free(&w);
	}
	free(y);
}

static void test_elementwise(void)
{
	size_t n = 70000, t = 7, m = 33, i;
	float *a = rnd(n, 1), *b = rnd(n, 1), *y = malloc(n * 4), *z = malloc(n * 4);
	int p;

	ctxs[0].kern->add(a, b, n, z);
	for (p = 0; p < 2; p++) {
		ds_add(&ctxs[p], a, b, n, y);
		T_CHECK(same(y, z, n));
	}
	memcpy(y, a, t * m * 4);
	ds_add_bias(&ctxs[1], y, m, t, b, m);
	for (i = 0; i < t * m; i++)
		T_CHECK(y[i] == a[i] + b[i % m]);
	free(a); free(b); free(y); free(z);
}

static void test_mat_init(void)
{
	uint64_t shape[2] = { 20, 64 }, bytes;
	ds_ttype q4 = { DS_Q4, 32 }, f16 = { DS_F16, 0 };
	uint8_t *buf;
	int32_t perm[64];
	ds_mat m;
	ds_err err;
	int i;

	ds_tensor_bytes(q4, 2, shape, &bytes);
	buf = calloc(bytes, 1);
	for (i = 0; i < 64; i++)
		perm[i] = 63 - i;
	T_CHECK(ds_mat_init(&m, q4, buf, bytes, 2, shape, perm, &err) == 0);
	T_CHECK(m.n == 20 && m.k == 64 && m.kp == 64 && m.ne == 1);
	T_CHECK(ds_mat_init(&m, q4, buf, bytes - 64, 2, shape, NULL, &err) == -1 &&
		strstr(err.msg, "bytes") != NULL);
	perm[5] = 7;
	T_CHECK(ds_mat_init(&m, q4, buf, bytes, 2, shape, perm, &err) == -1 &&
		strstr(err.msg, "permutation") != NULL);
	perm[5] = 64;
	T_CHECK(ds_mat_init(&m, q4, buf, bytes, 2, shape, perm, &err) == -1);
	T_CHECK(ds_mat_init(&m, f16, buf, 20 * 64 * 2, 2, shape, NULL, &err) == 0);
	perm[5] = 58;
	T_CHECK(ds_mat_init(&m, f16, buf, 20 * 64 * 2, 2, shape, perm, &err) == -1);
	T_CHECK(ds_mat_init(&m, q4, buf, bytes, 1, shape, NULL, &err) == -1);
	free(buf);
}

/* ---- work stealing -------------------------------------------------------- */

struct steal_job {
	ds_ctx *c;
	size_t n, min;
	_Atomic int claimed[1000];  /* times each unit was claimed */
	_Atomic int by[2][2];       /* units thread t took from share s */
	int slow;                   /* this thread waits before claiming */
};

static void steal_fn(void *arg, int ith, int nth)
{
	struct steal_job *j = arg;
	size_t lo, hi, u, b, e;

	if (ith == j->slow) {
		struct timespec ts = { 0, 20 * 1000 * 1000 };

		nanosleep(&ts, NULL);
	}
	while (ops_steal_next(j->c, ith, nth, j->min, &lo, &hi)) {
		T_CHECK(lo < hi && hi <= j->n);
		for (u = lo; u < hi; u++) {
			ds_split(j->n, 1, 2, &b, &e);
			atomic_fetch_add(&j->claimed[u], 1);
			atomic_fetch_add(&j->by[ith][u >= b], 1);
		}
	}
}

/* Every unit is claimed exactly once, whatever the threads' speeds; a
 * thread that stalls has its share's tail taken by the other, `min` units
 * at a time, and claims of its own run first from the front. */
static void test_steal(void)
{
	static struct steal_job j;
	size_t ns[] = { 1, 7, 64, 999 }, i, u;
	int slow, bad;

	for (i = 0; i < sizeof ns / sizeof ns[0]; i++)
		for (slow = 0; slow < 2; slow++) {
			memset(&j, 0, sizeof j);
			j.c = &ctxs[1];
			j.n = ns[i];
			j.min = 1 + (size_t)(t_rand(&seed) % 5);
			j.slow = slow;
			ops_steal_init(j.c, j.n);
			ds_pool_run(pools[1], steal_fn, &j);
			for (u = 0, bad = 0; u < j.n; u++)
				bad += j.claimed[u] != 1;
			T_CHECKF(bad == 0, "n=%zu min=%zu: %d units not claimed once", j.n, j.min, bad);
			/* the slow thread started late: the other took its share */
			if (j.n >= 64)
				T_CHECKF(j.by[!slow][slow] >= (int)j.n / 4,
					 "n=%zu: thread %d took %d of the slow thread's units", j.n,
					 !slow, j.by[!slow][slow]);
		}
	/* one thread: its share is everything, claimed 7/8 of it, then half
	 * of what is left, at least min */
	memset(&j, 0, sizeof j);
	j.c = &ctxs[0];
	j.n = 100;
	ops_steal_init(j.c, j.n);
	{
		size_t lo, hi;

		T_CHECK(ops_steal_next(j.c, 0, 1, 4, &lo, &hi) && lo == 0 && hi == 88);
		T_CHECK(ops_steal_next(j.c, 0, 1, 4, &lo, &hi) && lo == 88 && hi == 94);
		T_CHECK(ops_steal_next(j.c, 0, 1, 4, &lo, &hi) && lo == 94 && hi == 98);
		T_CHECK(ops_steal_next(j.c, 0, 1, 4, &lo, &hi) && lo == 98 && hi == 100);
		T_CHECK(!ops_steal_next(j.c, 0, 1, 4, &lo, &hi));
	}
}

int main(void)
{
	ds_ctx_cfg cfg = { .max_rows = 40, .max_k = 512, .max_ff = 288, .moe_experts = 64,
			   .moe_used = 3, .moe_k = 128, .moe_ff = 384, .max_group = 16,
			   .max_head = 576, .max_rope = 64, .head_rows = 64, .head_k = 512 };
	ds_err err;
	int p;

	seed = t_seed();
	for (p = 0; p < 2; p++) {
		ds_pool_opts o = { p + 1, NULL, 0 };

		if (ds_pool_init(&pools[p], &o, &err) != 0 ||
		    ds_ctx_init(&ctxs[p], pools[p], &cfg, &err) != 0) {
			printf("Bail out! %s\n", err.msg);
			return 1;
		}
	}
	{
		ds_ctx_cfg wcfg = cfg;

		wcfg.max_k = wcfg.moe_k = 65536;

		if (ds_ctx_init(&wide, pools[1], &wcfg, &err) != 0) {
			printf("Bail out! %s\n", err.msg);
			return 1;
		}
	}
	printf("# kernels %s\n", ds_kernels_name());
	T_RUN(test_mat_init);
	T_RUN(test_steal);
	T_RUN(test_matmul);
	T_RUN(test_matmul_many);
	T_RUN(test_matmul_res);
	T_RUN(test_perm);
	T_RUN(test_ffn);
	T_RUN(test_ffn_chunks);
	T_RUN(test_moe);
	T_RUN(test_moe_part);
	T_RUN(test_blocks);
	T_RUN(test_heads);
	T_RUN(test_attention);
	T_RUN(test_attention_rows);
	T_RUN(test_rope_tables);
	T_RUN(test_rope_apply);
	T_RUN(test_topk);
	T_RUN(test_route);
	T_RUN(test_embed);
	T_RUN(test_elementwise);
	ds_ctx_free(&wide);
	for (p = 0; p < 2; p++) {
		ds_ctx_free(&ctxs[p]);
		ds_pool_free(pools[p]);
	}
	return t_done();
}

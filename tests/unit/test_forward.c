/*
 * test_forward.c - the forward passes (forward.h) on tiny random models of
 * every architecture and weight type:
 *   - RoPE tables and softmax scales against the numbers of
 *     docs/deepseek.md (YaRN V2/V3, llama3);
 *   - one batch of a whole prompt vs one token per batch vs chunks;
 *   - several sequences interleaved in one batch vs each alone;
 *   - 1 thread vs 2 (bit-exact), the scalar kernels vs the fastest;
 *   - q8 and f32 caches vs f16, and the batch rules' errors;
 *   - expert parallelism: parts (threads here, MPI ranks in ds-run
 *     --mpi) each holding a range of the routed experts vs one process,
 *     bit-exact.
 * Agreement with the PyTorch reference is tests/cli/ds-run.bats' part
 * (the golden logits).
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "model/arch.h"
#include "budget.h"
#include "harness.h"
#include "tmodel.h"

static uint64_t seed;
static char dir[64];

typedef struct fwd_tm {
	ds_model m;
	ds_pool *pool;
	ds_fwd *f;
	ds_kvcache kv;
} tm;

/* Reopen the model written last (same weights) with these settings, as
 * one part of an expert-parallel group when ep is not NULL. */
static int tm_reopen_mha(tm *t, int threads, uint32_t slots, uint32_t ctx,
			 enum ds_kvtype kt, const ds_fwd_ep *ep, int form)
{
	ds_pool_opts po = { threads, NULL, 0 };
	ds_fwd_opts fo = { .max_batch = 64, .ep = ep, .mla_form = form };
	ds_err err;

	memset(t, 0, sizeof *t);
	if (ds_model_load(&t->m, dir, DS_LOAD_POPULATE, &err) ||
	    ds_pool_init(&t->pool, &po, &err) ||
	    ds_fwd_init(&t->f, &t->m, t->pool, &fo, &err) ||
	    ds_kvcache_init(&t->kv, &t->m.hp, slots, ctx, kt, &err)) {
		printf("# tm_reopen: %s\n", err.msg);
		return -1;
	}
	return 0;
}

static int tm_reopen_ep(tm *t, int threads, uint32_t slots, uint32_t ctx,
			enum ds_kvtype kt, const ds_fwd_ep *ep)
{
	return tm_reopen_mha(t, threads, slots, ctx, kt, ep, 0);
}

static int tm_reopen(tm *t, int threads, uint32_t slots, uint32_t ctx,
		     enum ds_kvtype kt)
{
	return tm_reopen_ep(t, threads, slots, ctx, kt, NULL);
}

/* A fresh random model of config cfg and matrix type `type`. */
static int tm_open(tm *t, const char *cfg, const char *type, int threads,
		   uint32_t slots, uint32_t ctx, enum ds_kvtype kt)
{
	memset(t, 0, sizeof *t);
	if (tm_write(dir, cfg, type, &seed))
		return -1;
	return tm_reopen(t, threads, slots, ctx, kt);
}

static void tm_close(tm *t)
{
	ds_kvcache_free(&t->kv);
	ds_fwd_free(t->f);
	if (t->pool)
		ds_pool_free(t->pool);
	ds_model_free(&t->m);
}

/* Feed ids[0..n) to slot `slot` in batches of `chunk`, all logits out
 * into lg [n][V]. */
static int feed(tm *t, uint32_t slot, const int32_t *ids, size_t n,
		size_t chunk, float *lg)
{
	int32_t pos[64], seq[64];
	uint8_t want[64];
	size_t V = t->m.hp.n_vocab, p0, i;
	ds_err err;

	for (p0 = 0; p0 < n; p0 += chunk) {
		size_t m = n - p0 < chunk ? n - p0 : chunk;
		ds_batch b = { m, ids + p0, pos, seq, want, NULL };

		for (i = 0; i < m; i++) {
			pos[i] = (int32_t)(p0 + i);
			seq[i] = (int32_t)slot;
			want[i] = 1;
		}
		if (ds_fwd_decode(t->f, &t->kv, &b, &err)) {
			printf("# feed: %s\n", err.msg);
			return -1;
		}
		for (i = 0; i < m; i++)
			memcpy(lg + (p0 + i) * V, ds_fwd_logits(t->f, i), V * sizeof *lg);
	}
	return 0;
}

static void rand_ids(int32_t *ids, size_t n, uint32_t vocab)
{
	size_t i;

	for (i = 0; i < n; i++)
		ids[i] = (int32_t)(t_rand(&seed) % vocab);
}

/* The logits' scale: their root mean square. */
static double rms(const float *a, size_t n)
{
	double s = 0;
	size_t i;

	for (i = 0; i < n; i++)
		s += (double)a[i] * a[i];
	return sqrt(s / (double)n);
}

static double mean_diff(const float *a, const float *b, size_t n)
{
	double s = 0;
	size_t i;

	for (i = 0; i < n; i++)
		s += fabs((double)a[i] - b[i]);
	return s / (double)n;
}

static double max_diff(const float *a, const float *b, size_t n)
{
	double m = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]);

		if (!(d <= m))
			m = d;   /* NaN counts as the largest */
	}
	return m;
}

/* ---- RoPE tables and softmax scales (docs/deepseek.md section 4) ------------------- */

static void yarn_hp(ds_hparams *hp, double mscale)
{
	memset(hp, 0, sizeof *hp);
	hp->arch = DS_ARCH_DEEPSEEK2;
	hp->rope_style = DS_ROPE_INTERLEAVED;
	hp->rope_theta = 10000;
	hp->qk_nope_head_dim = 128;
	hp->qk_rope_head_dim = 64;
	hp->rope_scaling.type = DS_ROPE_SCALING_YARN;
	hp->rope_scaling.factor = 40;
	hp->rope_scaling.original_ctx = 4096;
	hp->rope_scaling.beta_fast = 32;
	hp->rope_scaling.beta_slow = 1;
	hp->rope_scaling.mscale = mscale;
	hp->rope_scaling.mscale_all_dim = mscale;
}

static void test_rope_yarn(void)
{
	ds_hparams hp;
	ds_rope r;
	double scale;
	ds_err err;
	int i;

	/* V2 / V2-Lite: mscale 0.707 -> softmax scale 0.114721 */
	yarn_hp(&hp, 0.707);
	T_CHECK(ds_fwd_rope_init(&hp, &r, &scale, &err) == 0);
	T_NEAR(scale, 0.114721, 5e-7);
	T_NEAR(r.attn_factor, 1.0, 1e-12);
	T_CHECK(r.dim == 64 && r.style == DS_ROPE_INTERLEAVED);
	/* pairs 0-10 keep base^(-2i/64), pairs >= 23 are divided by 40 */
	for (i = 0; i <= 10; i++)
		T_NEAR(r.inv_freq[i] / pow(10000, -2.0 * i / 64), 1.0, 1e-12);
	for (i = 23; i < 32; i++)
		T_NEAR(r.inv_freq[i] * 40 / pow(10000, -2.0 * i / 64), 1.0, 1e-12);
	/* blended in between: ramp (i - 10) / 13 */
	for (i = 11; i < 23; i++) {
		double f = pow(10000, -2.0 * i / 64), ramp = (i - 10) / 13.0;

		T_NEAR(r.inv_freq[i] / (f / 40 * ramp + f * (1 - ramp)), 1.0, 1e-12);
		T_CHECK(r.inv_freq[i] < f && r.inv_freq[i] > f / 40);
	}
	/* V3: mscale 1.0 -> 0.135234 */
	yarn_hp(&hp, 1.0);
	T_CHECK(ds_fwd_rope_init(&hp, &r, &scale, &err) == 0);
	T_NEAR(scale, 0.135234, 5e-7);
	/* without scaling: 1/sqrt(192) */
	hp.rope_scaling.type = DS_ROPE_SCALING_NONE;
	T_CHECK(ds_fwd_rope_init(&hp, &r, &scale, &err) == 0);
	T_NEAR(scale, 1 / sqrt(192.0), 1e-9);
	T_NEAR(r.inv_freq[31], pow(10000, -62.0 / 64), 1e-15);
}

static void test_rope_llama3(void)
{
	ds_hparams hp;
	ds_rope r;
	double scale;
	ds_err err;
	int i;

	/* Llama 3.1 8B: theta 500000, factor 8, low 1, high 4, L0 8192 */
	memset(&hp, 0, sizeof hp);
	hp.arch = DS_ARCH_LLAMA;
	hp.rope_style = DS_ROPE_NEOX;
	hp.head_dim = 128;
	hp.rope_theta = 500000;
	hp.rope_scaling.type = DS_ROPE_SCALING_LLAMA3;
	hp.rope_scaling.factor = 8;
	hp.rope_scaling.low_freq_factor = 1;
	hp.rope_scaling.high_freq_factor = 4;
	hp.rope_scaling.original_ctx = 8192;
	T_CHECK(ds_fwd_rope_init(&hp, &r, &scale, &err) == 0);
	T_NEAR(scale, 1 / sqrt(128.0), 1e-12);
	T_CHECK(r.style == DS_ROPE_NEOX && r.dim == 128);
	for (i = 0; i < 64; i++) {
		double f = pow(500000, -2.0 * i / 128), wl = 2 * M_PI / f;

		if (wl < 2048)          /* short wavelengths unchanged */
			T_NEAR(r.inv_freq[i] / f, 1.0, 1e-12);
		else if (wl > 8192)     /* long ones slowed 8x */
			T_NEAR(r.inv_freq[i] * 8 / f, 1.0, 1e-12);
		else
			T_CHECK(r.inv_freq[i] < f && r.inv_freq[i] > f / 8);
	}
	/* the first pair keeps frequency 1, the last is 500000^(-126/128)/8 */
	T_NEAR(r.inv_freq[0], 1.0, 0);
	T_NEAR(r.inv_freq[63] * 8, pow(500000, -126.0 / 128), 1e-18);
}

/* ---- batching ----------------------------------------------------------------------- */

static const char *const cfgs[] = { tm_llama, tm_qwen2, tm_dsv2, tm_dsv3 };
static const char *const cfg_names[] = { "llama", "qwen2", "dsv2", "dsv3" };
static const char *const types[] = { "bf16", "q8g32", "q4g32", "f32" };

/* The whole prompt in one batch, one token per batch, chunks of 7: the
 * same logits (each row is computed the same way whatever the batch). */
static void test_batch_vs_decode(void)
{
	size_t ci, ti, n = 40;
	int32_t ids[40];
	int form;

	/* MLA: each form (all absorbed; all in the MHA form, decode too) */
	for (ci = 0; ci < 4; ci++) {
		for (ti = 0; ti < 8; ti++) {
			tm t;
			size_t V;
			float *a, *b, *c;
			double d1, d2;

			form = ti >= 4;
			if (form && strstr(cfg_names[ci], "ds") == NULL)
				continue;
			if (tm_write(dir, cfgs[ci], types[ti % 4], &seed) ||
			    tm_reopen_mha(&t, 2, 1, 128, DS_KV_F16, NULL, form ? DS_MLA_MHA : DS_MLA_ABSORBED)) {
				T_CHECK(0);
				continue;
			}
			V = t.m.hp.n_vocab;
			a = malloc(n * V * sizeof *a);
			b = malloc(n * V * sizeof *b);
			c = malloc(n * V * sizeof *c);
			rand_ids(ids, n, (uint32_t)V);
			T_CHECK(feed(&t, 0, ids, n, n, a) == 0);
			ds_kvcache_seq_keep(&t.kv, 0, 0);
			T_CHECK(feed(&t, 0, ids, n, 1, b) == 0);
			ds_kvcache_seq_keep(&t.kv, 0, 0);
			T_CHECK(feed(&t, 0, ids, n, 7, c) == 0);
			d1 = max_diff(a, b, n * V);
			d2 = max_diff(a, c, n * V);
			T_CHECKF(d1 <= 1e-5 && d2 <= 1e-5, "%s %s%s: batch vs decode %g, "
				 "vs chunks %g", cfg_names[ci], types[ti % 4],
				 form ? " MHA" : "", d1, d2);
			free(a);
			free(b);
			free(c);
			tm_close(&t);
		}
	}
}

/* Two sequences in one batch, entries interleaved, vs each alone. */
static void test_interleaved(void)
{
	size_t ci, i, n = 24;
	int32_t ids[2][24], tok[48], pos[48], seq[48];
	uint8_t want[48];

	for (ci = 0; ci < 4; ci++) {
		tm t;
		size_t V;
		float *a, *b;
		ds_batch bt = { 2 * n, tok, pos, seq, want, NULL };
		ds_err err;

		if (tm_open(&t, cfgs[ci], "q8g32", 2, 2, 64, DS_KV_F16)) {
			T_CHECK(0);
			continue;
		}
		V = t.m.hp.n_vocab;
		a = malloc(2 * n * V * sizeof *a);
		b = malloc(2 * n * V * sizeof *b);
		rand_ids(ids[0], n, (uint32_t)V);
		rand_ids(ids[1], n, (uint32_t)V);
		T_CHECK(feed(&t, 0, ids[0], n, n, a) == 0);
		T_CHECK(feed(&t, 1, ids[1], n, 5, a + n * V) == 0);
		ds_kvcache_seq_keep(&t.kv, 0, 0);
		ds_kvcache_seq_keep(&t.kv, 1, 0);
		for (i = 0; i < 2 * n; i++) {
			tok[i] = ids[i % 2][i / 2];
			pos[i] = (int32_t)(i / 2);
			seq[i] = (int32_t)(i % 2);
			want[i] = 1;
		}
		T_CHECK(ds_fwd_decode(t.f, &t.kv, &bt, &err) == 0);
		for (i = 0; i < 2 * n; i++)
			memcpy(b + ((i % 2) * n + i / 2) * V, ds_fwd_logits(t.f, i),
			       V * sizeof *b);
		T_CHECKF(max_diff(a, b, 2 * n * V) <= 1e-5, "%s: %g", cfg_names[ci],
			 max_diff(a, b, 2 * n * V));
		T_CHECK(t.kv.len[0] == n && t.kv.len[1] == n);
		free(a);
		free(b);
		tm_close(&t);
	}
}

/* 1 thread vs 2: bit-exact (each value is computed by one thread, the
 * same way whatever the split). */
static void test_threads(void)
{
	size_t ci, n = 30;
	int32_t ids[30];

	for (ci = 0; ci < 4; ci++) {
		tm t1, t2;
		size_t V;
		float *a, *b;

		if (tm_open(&t1, cfgs[ci], types[ci], 1, 1, 64, DS_KV_F16) ||
		    tm_reopen(&t2, 2, 1, 64, DS_KV_F16)) {
			T_CHECK(0);
			continue;
		}
		V = t1.m.hp.n_vocab;
		a = malloc(n * V * sizeof *a);
		b = malloc(n * V * sizeof *b);
		rand_ids(ids, n, (uint32_t)V);
		T_CHECK(feed(&t1, 0, ids, n, 9, a) == 0);
		T_CHECK(feed(&t2, 0, ids, n, 9, b) == 0);
		T_CHECKF(memcmp(a, b, n * V * sizeof *a) == 0, "%s %s: %g",
			 cfg_names[ci], types[ci], max_diff(a, b, n * V));
		free(a);
		free(b);
		tm_close(&t1);
		tm_close(&t2);
	}
}

/* Positions of the n where one draw of token ids gives logits of the
 * fastest kernels and of the scalar ones (sc) more than tol apart, tol
 * the fraction frac of the logits' rms (*lrms). */
static size_t isa_over(tm *t, const ds_kernels *sc, size_t n, double frac,
		       double *tol, double *lrms)
{
	size_t V = t->m.hp.n_vocab, p, over = 0;
	float *a = malloc(n * V * sizeof *a), *b = malloc(n * V * sizeof *b);
	const ds_kernels *best = t->f->kern;
	int32_t ids[64];

	rand_ids(ids, n, (uint32_t)V);
	ds_kvcache_seq_keep(&t->kv, 0, 0);
	T_CHECK(feed(t, 0, ids, n, 8, a) == 0);
	t->f->kern = t->f->ctx.kern = sc;
	ds_kvcache_seq_keep(&t->kv, 0, 0);
	T_CHECK(feed(t, 0, ids, n, 8, b) == 0);
	t->f->kern = t->f->ctx.kern = best;
	*lrms = rms(a, n * V);
	*tol = frac * *lrms;
	for (p = 0; p < n; p++)
		over += max_diff(a + p * V, b + p * V, V) > *tol;
	free(a);
	free(b);
	return over;
}

/* The scalar kernels (the definition) vs the fastest this CPU has: the
 * same int8 / bf16 products, fp32 sums in another order.
 * f32 weights: fp32 sums in another order.  Others: the same, but a sum
 * that lands on the other side of an activation's int8 / bf16 rounding
 * boundary moves that value by a step, which the later layers carry on:
 * up to the size of the activation rounding itself, the weight type's
 * budget against the reference (budget.h), far below where a wrong kernel
 * lands.  The MoE models' routers can also flip a near tie between two
 * experts at a position, which moves that position (and, through
 * attention, a few after it) by much more: BUDGET_FLIP_SHARE of the
 * positions of the DeepSeek configurations may do so, in one of
 * BUDGET_DRAWS draws of tokens (one draw met three such positions in 20,
 * DeepSeek-V2 q4g32 at seed 11256517891969219833; no draw of 300 random
 * seeds did).  A wrong kernel moves every position in every draw. */
static void test_isa(void)
{
	const ds_kernels *sc = ds_kernels_isa(DS_ISA_SCALAR);
	size_t ci, ti, over, allow, n = 20;
	int d;

	for (ci = 0; ci < 4; ci++) {
		for (ti = 0; ti < 4; ti++) {
			const ds_budget *b = ds_budget_of(types[ti]);
			double tol, lrms;
			tm t;

			if (tm_open(&t, cfgs[ci], types[ti], 2, 1, 64, DS_KV_F32)) {
				T_CHECK(0);
				continue;
			}
			allow = ci >= 2 && b->flips ? (size_t)ceil(n * BUDGET_FLIP_SHARE) : 0;
			for (d = 0; d < (allow ? BUDGET_DRAWS : 1); d++)
				if ((over = isa_over(&t, sc, n, b->max, &tol, &lrms)) <= allow)
					break;
			T_CHECKF(over <= allow,
				 "%s %s (%s vs scalar): %zu of %zu positions over %g "
				 "(logits rms %g)", cfg_names[ci], types[ti],
				 t.f->kern->name, over, n, tol, lrms);
			tm_close(&t);
		}
	}
}

/* Cache types: q8 and f32 near f16; q8 refused where widths are not
 * multiples of 32.  f16: 2^-11 relative per cached value, q8: up to
 * 1/254 of a block's largest; means over the logits.  The MoE model's
 * routing may sit at a near tie that a cache's rounding flips, a
 * discrete change that later positions carry (4 of 300 random draws
 * moved the f16 mean to 0.002-0.007): the bounds must hold for one of
 * three draws of tokens, which a systematic error would fail in all. */
static void test_cache_types(void)
{
	size_t ci, n = 32;
	int32_t ids[32];
	ds_err err;

	for (ci = 0; ci < 3; ci++) {
		tm t1, t2, t3;
		size_t V;
		float *a, *b, *c;
		double d16 = 0, d8 = 0;
		int draw, ok = 0;

		if (tm_open(&t1, cfgs[ci], "f32", 2, 1, 64, DS_KV_F16) ||
		    tm_reopen(&t2, 2, 1, 64, DS_KV_Q8) ||
		    tm_reopen(&t3, 2, 1, 64, DS_KV_F32)) {
			T_CHECK(0);
			continue;
		}
		V = t1.m.hp.n_vocab;
		a = malloc(n * V * sizeof *a);
		b = malloc(n * V * sizeof *b);
		c = malloc(n * V * sizeof *c);
		for (draw = 0; draw < 3 && !ok; draw++) {
			rand_ids(ids, n, (uint32_t)V);
			T_CHECK(feed(&t1, 0, ids, n, 5, a) == 0);
			T_CHECK(feed(&t2, 0, ids, n, 5, b) == 0);
			T_CHECK(feed(&t3, 0, ids, n, 5, c) == 0);
			d16 = mean_diff(a, c, n * V);
			d8 = mean_diff(b, c, n * V);
			ok = d16 <= 1e-3 && d8 <= 3e-2;
			T_CHECK(max_diff(b, c, n * V) > 0);
			ds_kvcache_seq_keep(&t1.kv, 0, 0);
			ds_kvcache_seq_keep(&t2.kv, 0, 0);
			ds_kvcache_seq_keep(&t3.kv, 0, 0);
		}
		T_CHECKF(d16 <= 1e-3, "%s f16 vs f32 %g", cfg_names[ci], d16);
		T_CHECKF(d8 <= 3e-2, "%s q8 vs f32 %g", cfg_names[ci], d8);
		free(a);
		free(b);
		free(c);
		tm_close(&t1);
		tm_close(&t2);
		tm_close(&t3);
	}
	{
		tm t;
		ds_kvcache kv;

		T_CHECK(tm_open(&t, tm_dsv3, "bf16", 1, 1, 16, DS_KV_F16) == 0);
		T_CHECK(ds_kvcache_init(&kv, &t.m.hp, 1, 16, DS_KV_Q8, &err) == -1);
		T_CHECK(strstr(err.msg, "multiples of 32") != NULL);
		tm_close(&t);
	}
}

/* The batch rules (forward.h): each violation is an error naming the
 * entry, and nothing is changed. */
static void test_batch_rules(void)
{
	tm t;
	int32_t tok[4] = { 5, 6, 7, 8 }, pos[4], seq[4] = { 0, 0, 0, 0 };
	ds_batch b = { 4, tok, pos, seq, NULL, NULL };
	ds_err err;
	int i;

	if (tm_open(&t, tm_llama, "q4g32", 2, 2, 16, DS_KV_F16)) {
		T_CHECK(0);
		return;
	}
	for (i = 0; i < 4; i++)
		pos[i] = i;
	T_CHECK(ds_fwd_decode(t.f, &t.kv, &b, &err) == 0 && t.kv.len[0] == 4);
	/* a gap */
	pos[0] = 6;
	b.n = 1;
	T_CHECK(ds_fwd_decode(t.f, &t.kv, &b, &err) == -1 &&
		strstr(err.msg, "gap") && t.kv.len[0] == 4);
	/* not consecutive within the batch */
	pos[0] = 4;
	pos[1] = 6;
	b.n = 2;
	T_CHECK(ds_fwd_decode(t.f, &t.kv, &b, &err) == -1 &&
		strstr(err.msg, "entry 1") && t.kv.len[0] == 4);
	/* a token outside the vocabulary */
	pos[1] = 5;
	tok[1] = 320;
	T_CHECK(ds_fwd_decode(t.f, &t.kv, &b, &err) == -1 &&
		strstr(err.msg, "entry 1: token id 320") && t.kv.len[0] == 4);
	tok[1] = -1;
	T_CHECK(ds_fwd_decode(t.f, &t.kv, &b, &err) == -1);
	tok[1] = 6;
	/* a slot the cache lacks; a position past the context */
	seq[1] = 2;
	T_CHECK(ds_fwd_decode(t.f, &t.kv, &b, &err) == -1 &&
		strstr(err.msg, "slot 2"));
	seq[1] = 0;
	pos[0] = 16;
	b.n = 1;
	T_CHECK(ds_fwd_decode(t.f, &t.kv, &b, &err) == -1 &&
		strstr(err.msg, "context"));
	/* more entries than max_batch */
	b.n = 65;
	T_CHECK(ds_fwd_decode(t.f, &t.kv, &b, &err) == -1 &&
		strstr(err.msg, "at most 64"));
	/* rewinding: starting inside what the slot holds cuts it there */
	pos[0] = 2;
	b.n = 1;
	T_CHECK(ds_fwd_decode(t.f, &t.kv, &b, &err) == 0 && t.kv.len[0] == 3);
	tm_close(&t);
}

/* ---- expert parallelism, parts as threads of this process ---------------- */

#define EP_MAX 4

typedef struct ep_world {
	pthread_barrier_t bar;
	float *stage;               /* every part's rows */
	uint32_t first[EP_MAX + 1];
	const int32_t *ids;
	size_t n;
} ep_world;

typedef struct ep_part {
	ep_world *w;
	ds_fwd_ep ep;
	tm t;
	float *lg;
	int rc;
} ep_part;

/* Each part's rows through the stage: written, then everyone reads all. */
static void ep_exchange(void *arg, float *buf, size_t width, const int *cnt,
			const int *off)
{
	ep_part *p = arg;
	uint32_t me = p->ep.part, last = p->ep.n_part - 1;
	size_t rows = (size_t)(off[last] + cnt[last]);

	memcpy(p->w->stage + (size_t)off[me] * width, buf + (size_t)off[me] * width,
	       (size_t)cnt[me] * width * sizeof *buf);
	pthread_barrier_wait(&p->w->bar);
	memcpy(buf, p->w->stage, rows * width * sizeof *buf);
	pthread_barrier_wait(&p->w->bar);
}

/* A part's run: the prompt in chunks of 9 (prefill and a decode-sized
 * last chunk), all logits. */
static void *ep_main(void *arg)
{
	ep_part *p = arg;

	p->rc = feed(&p->t, 0, p->w->ids, p->w->n, 9, p->lg);
	return NULL;
}

/* A part's weights: all but the other parts' experts. */
static int share_ok(const tm *t, uint32_t here)
{
	uint64_t exps = 0;
	ds_fwd_info fi;
	size_t i;

	for (i = 0; i < t->m.n_tensors; i++)
		if (strstr(t->m.tensors[i].name, "_exps") != NULL)
			exps += t->m.tensors[i].size;
	ds_fwd_get_info(t->f, &fi);
	return fi.share_bytes == fi.weight_bytes - exps / 8 * (8 - here);
}

/* The logits of parts of one model, each holding a range of the routed
 * experts (two, three, four parts; uneven, one of them empty), equal one
 * process's bit for bit, as do those of one part holding every expert. */
static void test_ep(void)
{
	static const uint32_t splits[5][EP_MAX + 1] = {
		{ 0, 8 }, { 0, 4, 8 }, { 0, 3, 6, 8 }, { 0, 1, 1, 7, 8 }, { 0, 7, 8 },
	};
	static const uint32_t nparts[5] = { 1, 2, 3, 4, 2 };
	size_t ci, si, n = 30, V, q;
	int32_t ids[30];

	for (ci = 2; ci < 4; ci++) {
		tm one;
		float *ref;

		if (tm_open(&one, cfgs[ci], types[ci], 1, 1, 64, DS_KV_F16)) {
			T_CHECK(0);
			continue;
		}
		V = one.m.hp.n_vocab;
		ref = malloc(n * V * sizeof *ref);
		rand_ids(ids, n, (uint32_t)V);
		T_CHECK(feed(&one, 0, ids, n, 9, ref) == 0);
		for (si = 0; si < 5; si++) {
			ep_world w = { .ids = ids, .n = n };
			ep_part parts[EP_MAX];
			pthread_t th[EP_MAX];
			uint32_t np = nparts[si];
			int bad = 0;

			memcpy(w.first, splits[si], sizeof w.first);
			w.stage = malloc(64 * 8 * 128 * sizeof *w.stage);
			pthread_barrier_init(&w.bar, NULL, np);
			for (q = 0; q < np; q++) {
				ep_part *p = &parts[q];

				p->w = &w;
				p->ep = (ds_fwd_ep){ .n_part = np, .part = (uint32_t)q,
						     .first = w.first, .exchange = ep_exchange,
						     .arg = p };
				p->lg = malloc(n * V * sizeof *p->lg);
				bad += tm_reopen_ep(&p->t, 1, 1, 64, DS_KV_F16, &p->ep) != 0;
				if (bad == 0)
					bad += !share_ok(&p->t, w.first[q + 1] - w.first[q]);
			}
			for (q = 0; q < np && !bad; q++)
				pthread_create(&th[q], NULL, ep_main, &parts[q]);
			for (q = 0; q < np && !bad; q++) {
				pthread_join(th[q], NULL);
				bad += parts[q].rc != 0 ||
				       memcmp(parts[q].lg, ref, n * V * sizeof *ref) != 0;
			}
			T_CHECKF(bad == 0, "%s %s, %u parts (split %zu): %d differ",
				 cfg_names[ci], types[ci], np, si, bad);
			for (q = 0; q < np; q++) {
				tm_close(&parts[q].t);
				free(parts[q].lg);
			}
			pthread_barrier_destroy(&w.bar);
			free(w.stage);
		}
		free(ref);
		tm_close(&one);
	}
}

/* What a forward reports about itself. */
static void test_info(void)
{
	tm t;
	ds_fwd_info fi;

	if (tm_open(&t, tm_dsv2, "q4g32", 1, 1, 16, DS_KV_F16)) {
		T_CHECK(0);
		return;
	}
	ds_fwd_get_info(t.f, &fi);
	T_CHECK(fi.n_vocab == 288 && fi.max_batch == 64);
	T_NEAR(fi.softmax_scale, 0.1 * 0.707 * log(4.0) + 1, 1);
	T_NEAR(fi.softmax_scale, pow(0.1 * 0.707 * log(4.0) + 1, 2) / sqrt(64.0), 1e-6);
	/* bf16 W_UK^T: 4 heads x [64, 32] per layer, 3 layers */
	T_CHECK(fi.derived_bytes >= 3 * 4 * 64 * 32 * 2);
	T_CHECK(fi.active_bytes < fi.weight_bytes + fi.derived_bytes);
	T_CHECK(fi.weight_bytes > 0 && fi.scratch_bytes > 0);
	tm_close(&t);
}

int main(void)
{
	seed = t_seed();
	snprintf(dir, sizeof dir, "/tmp/ds-test-fwd-%d", (int)getpid());
	T_RUN(test_rope_yarn);
	T_RUN(test_rope_llama3);
	T_RUN(test_batch_vs_decode);
	T_RUN(test_interleaved);
	T_RUN(test_threads);
	T_RUN(test_isa);
	T_RUN(test_cache_types);
	T_RUN(test_batch_rules);
	T_RUN(test_info);
	T_RUN(test_ep);
	ds_remove_tree(dir);
	return t_done();
}

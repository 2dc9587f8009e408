/*
 * test_spec.c - speculative decoding: the n-gram drafter's matching; with
 * drafts that are kept, rejected or mixed, greedy output and every logits
 * row equal plain decoding's on each architecture, one slot or three;
 * sampled output follows plain sampling's distribution (two-sample
 * chi-square over a fixed set of seeds) and is reproducible whatever runs
 * beside it; the draft-model drafter refuses another vocabulary; the MTP
 * module's pass and its drafts against the reference (model/ref.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "harness.h"
#include "model/forward.h"
#include "model/ref.h"
#include "runtime/sched.h"
#include "spec/drafter.h"
#include "tmodel.h"

static uint64_t seed;

/* ---- the n-gram drafter --------------------------------------------------------------- */

static void ngram(ds_drafter *d, const int32_t *tok, size_t n, uint32_t k,
		  ds_spec_seq *q)
{
	ds_spec_seq *one = q;
	ds_err err;

	memset(q, 0, sizeof *q);
	q->tok = tok;
	q->n_tok = n;
	q->n_final = n - 1;
	q->k = k;
	T_CHECK(d->propose(d, NULL, &one, 1, &err) == 0);
}

static void test_ngram(void)
{
	/* the last 4 (7 8 9 10) occur at 1; after them 11 12 */
	const int32_t a[] = { 5, 7, 8, 9, 10, 11, 12, 3, 7, 8, 9, 10 };
	/* the last 2 (4 5) twice: the latest wins (then 9) */
	const int32_t b[] = { 4, 5, 6, 1, 4, 5, 9, 2, 4, 5 };
	/* a loop of period 2: drafted k ahead over the drafts themselves */
	const int32_t c[] = { 1, 2, 1, 2, 1 };
	/* nothing repeats */
	const int32_t e[] = { 1, 2, 3, 4, 5, 6 };
	ds_drafter *d;
	ds_spec_seq q;
	ds_err err;

	T_CHECK(ds_ngram_open(&d, &err) == 0);
	ngram(d, a, 12, 3, &q);
	T_CHECK(q.n_draft == 3 && q.draft[0] == 11 && q.draft[1] == 12 && q.draft[2] == 3);
	ngram(d, b, 10, 2, &q);
	T_CHECK(q.n_draft == 2 && q.draft[0] == 9 && q.draft[1] == 2);
	ngram(d, c, 5, 6, &q);
	T_CHECK(q.n_draft == 6 && q.draft[0] == 2 && q.draft[1] == 1 && q.draft[5] == 1);
	ngram(d, e, 6, 4, &q);
	T_CHECK(q.n_draft == 0);
	ngram(d, a, 12, 0, &q);
	T_CHECK(q.n_draft == 0);
	d->free(d);
}

/* The drafts' penalty is the sampler's over the same recent tokens. */
static void test_penalize(void)
{
	const int32_t tok[] = { 3, 5, 5, 7 }, extra[] = { 2, 3 };
	ds_sampler_params p;
	ds_sampler s;
	float a[10], b[10];
	int i;

	ds_sampler_defaults(&p);
	p.temp = 0;
	p.repeat_penalty = 1.7f;
	p.repeat_last_n = 4;
	for (i = 0; i < 10; i++)
		a[i] = b[i] = (float)(i % 3) - 0.7f;
	ds_sampler_init(&s, &p, 10, NULL);
	for (i = 0; i < 4; i++)
		ds_sampler_accept(&s, tok[i]);
	for (i = 0; i < 2; i++)
		ds_sampler_accept(&s, extra[i]);
	ds_sampler_sample(&s, a);
	ds_spec_penalize(b, 10, &p, tok, 4, extra, 2);
	T_CHECK(memcmp(a, b, sizeof a) == 0);
	ds_sampler_free(&s);
}

/* ---- a scripted drafter ---------------------------------------------------------------- */

enum mode { KEEP, REJECT, MIX, TAIL };

/* Drafts from the reference continuations (KEEP), wrong ones (REJECT),
 * every third one wrong (MIX), or the sequence's own tail reversed
 * (TAIL, for sampled runs: drafts that are sometimes kept). */
typedef struct script {
	ds_drafter base;
	enum mode mode;
	uint32_t n_vocab;
	const int32_t *const *ref;  /* [n_ref] prompt + greedy continuation */
	const size_t *n_ref;
	size_t nr;
} script;

static const int32_t *find_ref(const script *sc, const ds_spec_seq *q, size_t *n)
{
	size_t i;

	for (i = 0; i < sc->nr; i++)
		if (sc->n_ref[i] >= q->n_tok &&
		    memcmp(sc->ref[i], q->tok, q->n_tok * sizeof *q->tok) == 0) {
			*n = sc->n_ref[i];
			return sc->ref[i];
		}
	return NULL;
}

static int script_propose(ds_drafter *d, const ds_fwd *target,
			  ds_spec_seq *const *seqs, size_t n, ds_err *err)
{
	script *sc = (script *)d;
	size_t i, nr = 0;
	uint32_t j;

	(void)target;
	(void)err;
	for (i = 0; i < n; i++) {
		ds_spec_seq *q = seqs[i];
		const int32_t *ref = sc->mode == TAIL ? NULL : find_ref(sc, q, &nr);

		for (j = 0; j < q->k; j++) {
			size_t at = q->n_tok + j;
			int32_t good = ref && at < nr ? ref[at] : 0;
			int32_t bad = (good + 1 + (int32_t)j) % (int32_t)sc->n_vocab;

			if (sc->mode == TAIL)
				q->draft[j] = q->tok[q->n_tok - 1 - j % q->n_tok];
			else
				q->draft[j] = sc->mode == KEEP || (sc->mode == MIX && at % 3) ?
					      good : bad;
		}
		q->n_draft = q->k;
	}
	return 0;
}

static void script_none(ds_drafter *d, uint32_t slot)
{
	(void)d;
	(void)slot;
}

static void script_free(ds_drafter *d)
{
	(void)d;
}

/* ---- running requests ------------------------------------------------------------------ */

#define NP 4
#define GEN 20

typedef struct out {
	int32_t tok[64];
	size_t n_tok;
	float *rows;               /* every logits row, by position */
	size_t n_rows, cap_rows;
	uint32_t n_vocab;
	ds_req_stats st;
} out;

static void on_logits(void *u, size_t pos, const float *l, uint32_t n)
{
	out *o = u;

	(void)pos;
	o->n_vocab = n;
	if (ds_grow((void **)&o->rows, &o->cap_rows, (o->n_rows + 1) * n, sizeof *l) == 0)
		memcpy(o->rows + o->n_rows++ * n, l, n * sizeof *l);
}

static int on_token(void *u, int32_t t)
{
	out *o = u;

	if (o->n_tok < 64)
		o->tok[o->n_tok++] = t;
	return 0;
}

static void on_done(void *u, enum ds_finish why, const ds_req_stats *st)
{
	out *o = u;

	(void)why;
	o->st = *st;
}

typedef struct eng {
	ds_pool *pool;
	ds_fwd *f;
	ds_kvcache kv;
	ds_sched *s;
} eng;

static int eng_open(eng *e, const ds_model *m, uint32_t slots, ds_drafter *d,
		    uint32_t k)
{
	ds_pool_opts po = { .threads = 2 };
	ds_fwd_opts fo = { .max_batch = 128 };
	ds_sched_opts so = { .n_batch = 24, .drafter = d, .spec_k = k };
	ds_err err;

	memset(e, 0, sizeof *e);
	if (ds_pool_init(&e->pool, &po, &err) ||
	    ds_fwd_init(&e->f, m, e->pool, &fo, &err) ||
	    ds_kvcache_init(&e->kv, &m->hp, slots, 256, DS_KV_F16, &err) ||
	    ds_sched_init(&e->s, e->f, &e->kv, &so, &err)) {
		printf("# eng_open: %s\n", err.msg);
		return -1;
	}
	return 0;
}

static void eng_close(eng *e)
{
	ds_sched_free(e->s);
	ds_kvcache_free(&e->kv);
	ds_fwd_free(e->f);
	ds_pool_free(e->pool);
}

static void submit(eng *e, const int32_t *p, size_t n, int64_t gen,
		   const ds_sampler_params *sp, int all_logits, out *o)
{
	ds_req r = {
		.prompt = p, .n_prompt = n, .sp = *sp, .n_predict = gen,
		.all_logits = all_logits,
		.cb = { .on_logits = on_logits, .on_token = on_token,
			.on_done = on_done, .user = o },
	};
	ds_err err;

	T_CHECK(ds_sched_submit(e->s, &r, NULL, &err) == 0);
}

static void submit_one(ds_sched *s, const int32_t *p, size_t n, int64_t gen,
		       const ds_sampler_params *sp, out *o)
{
	ds_req r = {
		.prompt = p, .n_prompt = n, .sp = *sp, .n_predict = gen,
		.cb = { .on_token = on_token, .on_done = on_done, .user = o },
	};
	ds_err err;

	T_CHECK(ds_sched_submit(s, &r, NULL, &err) == 0);
}

/* NP prompts (lengths 3 to 30, the last repeating itself) through a
 * scheduler of `slots` slots, greedy with a repetition penalty, every
 * logits row kept. */
static int run_greedy(const ds_model *m, int32_t (*pr)[32], const size_t *len,
		      uint32_t slots, ds_drafter *d, uint32_t k, out *o)
{
	ds_sampler_params sp;
	ds_err err;
	eng e;
	size_t i;

	ds_sampler_defaults(&sp);
	sp.temp = 0;
	sp.repeat_penalty = 1.2f;
	sp.repeat_last_n = 8;
	if (eng_open(&e, m, slots, d, k))
		return -1;
	for (i = 0; i < NP; i++) {
		memset(&o[i], 0, sizeof o[i]);
		submit(&e, pr[i], len[i], GEN, &sp, 1, &o[i]);
	}
	T_CHECK(ds_sched_drain(e.s, &err) == 0);
	eng_close(&e);
	return 0;
}

static void outs_free(out *o)
{
	size_t i;

	for (i = 0; i < NP; i++)
		free(o[i].rows);
}

/* Every drafter mode, K fixed at 1 and 4 and adaptive, 1 and 3 slots:
 * the same tokens and bit-identical logits rows as plain decoding. */
static void greedy_arch(const char *cfg, const char *mt)
{
	static int32_t prompts[NP][32];
	static int32_t refs[NP][64];
	const int32_t *refp[NP];
	size_t len[NP] = { 3, 30, 11, 24 }, nref[NP], i, j;
	const enum mode modes[3] = { KEEP, REJECT, MIX };
	const uint32_t ks[3] = { 1, 4, 0 };
	out plain[NP], sp[NP];
	char dir[64];
	ds_model m;
	ds_err err;
	int mi, ki;
	uint32_t slots;

	snprintf(dir, sizeof dir, "/tmp/ds-test-spec-%d", (int)getpid());
	if (tm_write(dir, cfg, mt, &seed) || ds_model_load(&m, dir, DS_LOAD_POPULATE, &err)) {
		T_CHECK(0);
		return;
	}
	for (i = 0; i < NP; i++)
		for (j = 0; j < len[i]; j++)
			prompts[i][j] = i == 3 ? (int32_t)(10 + j % 5) :
					(int32_t)(t_rand(&seed) % m.hp.n_vocab);
	if (run_greedy(&m, prompts, len, 1, NULL, 0, plain)) {
		T_CHECK(0);
		goto out;
	}
	for (i = 0; i < NP; i++) {
		T_CHECK(plain[i].n_tok == GEN);
		memcpy(refs[i], prompts[i], len[i] * sizeof **prompts);
		memcpy(refs[i] + len[i], plain[i].tok, GEN * sizeof **refs);
		refp[i] = refs[i];
		nref[i] = len[i] + GEN;
	}
	for (mi = 0; mi < 3; mi++)
		for (ki = 0; ki < 3; ki++)
			for (slots = 1; slots <= 3; slots += 2) {
				script sc = {
					.base = { .name = "script", .propose = script_propose,
						  .release = script_none, .free = script_free },
					.mode = modes[mi], .n_vocab = m.hp.n_vocab,
					.ref = refp, .n_ref = nref, .nr = NP,
				};
				size_t drafted = 0, kept = 0;

				if (run_greedy(&m, prompts, len, slots, &sc.base, ks[ki], sp)) {
					T_CHECK(0);
					continue;
				}
				for (i = 0; i < NP; i++) {
					T_CHECKF(sp[i].n_tok == GEN && memcmp(sp[i].tok, plain[i].tok,
						 GEN * sizeof *sp[i].tok) == 0,
						 "%s mode %d k %u slots %u request %zu: tokens",
						 mt, mi, ks[ki], slots, i);
					T_CHECKF(sp[i].n_rows == plain[i].n_rows &&
						 memcmp(sp[i].rows, plain[i].rows, plain[i].n_rows *
						 plain[i].n_vocab * sizeof(float)) == 0,
						 "%s mode %d k %u slots %u request %zu: logits",
						 mt, mi, ks[ki], slots, i);
					drafted += sp[i].st.spec_drafted;
					kept += sp[i].st.spec_accepted;
				}
				/* the drafts were there, and kept as the mode says */
				T_CHECK(drafted > 0);
				T_CHECK(modes[mi] != KEEP || kept == drafted);
				T_CHECK(modes[mi] != REJECT || kept == 0);
				T_CHECK(modes[mi] != MIX || (kept > 0 && kept < drafted));
				outs_free(sp);
			}
	outs_free(plain);
out:
	ds_model_free(&m);
	ds_remove_tree(dir);
}

static void test_greedy_llama(void) { greedy_arch(tm_llama, "q8g32"); }
static void test_greedy_qwen2(void) { greedy_arch(tm_qwen2, "bf16"); }
static void test_greedy_dsv2(void) { greedy_arch(tm_dsv2, "q4g32"); }
static void test_greedy_dsv3(void) { greedy_arch(tm_dsv3, "f16"); }

/* ---- sampled output ------------------------------------------------------------------ */

#define NSEED 3000
#define SGEN 4

typedef struct samp {
	int32_t tok[SGEN];
	size_t n;
	ds_req_stats st;
} samp;

static int samp_token(void *u, int32_t t)
{
	samp *o = u;

	if (o->n < SGEN)
		o->tok[o->n++] = t;
	return 0;
}

static void samp_done(void *u, enum ds_finish why, const ds_req_stats *st)
{
	samp *o = u;

	(void)why;
	o->st = *st;
}

/* NSEED requests of one prompt, seeds 1 .. NSEED, SGEN tokens each at
 * temperature 1 over the top 6 with a light repetition penalty. */
static int run_sampled(const ds_model *m, ds_pool *pool, ds_drafter *d, uint32_t k,
		       uint32_t slots, samp *o)
{
	const int32_t prompt[6] = { 7, 19, 7, 19, 7, 19 };
	ds_fwd_opts fo = { .max_batch = 128 };
	ds_sched_opts so = { .n_batch = 40, .drafter = d, .spec_k = k };
	ds_fwd *f = NULL;
	ds_kvcache kv;
	ds_sched *s = NULL;
	ds_err err;
	size_t i;
	int rc = -1;

	memset(&kv, 0, sizeof kv);
	if (ds_fwd_init(&f, m, pool, &fo, &err) ||
	    ds_kvcache_init(&kv, &m->hp, slots, 64, DS_KV_F16, &err) ||
	    ds_sched_init(&s, f, &kv, &so, &err)) {
		printf("# run_sampled: %s\n", err.msg);
		goto out;
	}
	for (i = 0; i < NSEED; i++) {
		ds_req r = {
			.prompt = prompt, .n_prompt = 6, .n_predict = SGEN,
			.cb = { .on_token = samp_token, .on_done = samp_done,
				.user = &o[i] },
		};

		memset(&o[i], 0, sizeof o[i]);
		ds_sampler_defaults(&r.sp);
		r.sp.temp = 1;
		r.sp.top_k = 6;
		r.sp.top_p = 1;
		r.sp.min_p = 0;
		r.sp.repeat_penalty = 1.1f;
		r.sp.seed = i + 1;
		if (ds_sched_submit(s, &r, NULL, &err))
			goto out;
		/* a few at a time, so that requests share steps */
		if (i % 16 == 15 && ds_sched_drain(s, &err))
			goto out;
	}
	rc = ds_sched_drain(s, &err);
out:
	ds_sched_free(s);
	if (kv.data)
		ds_kvcache_free(&kv);
	ds_fwd_free(f);
	return rc;
}

/* The two-sample chi-square statistic of the tokens at index g, cells of
 * fewer than 10 draws in all pooled into one; its upper tail
 * probability by the Wilson-Hilferty approximation. */
static double two_sample_p(const samp *a, const samp *b, size_t g, uint32_t nv,
			   double *x2_out, int *df_out)
{
	int *ca = calloc(nv + 1, sizeof *ca), *cb = calloc(nv + 1, sizeof *cb);
	double x2 = 0, z;
	int df = -1, ra = 0, rb = 0;
	size_t i;

	for (i = 0; i < NSEED; i++) {
		ca[a[i].tok[g]]++;
		cb[b[i].tok[g]]++;
	}
	for (i = 0; i < nv; i++) {
		if (ca[i] + cb[i] < 10) {
			ra += ca[i];
			rb += cb[i];
			continue;
		}
		x2 += (double)(ca[i] - cb[i]) * (ca[i] - cb[i]) / (ca[i] + cb[i]);
		df++;
	}
	if (ra + rb > 0) {
		x2 += (double)(ra - rb) * (ra - rb) / (ra + rb);
		df++;
	}
	free(ca);
	free(cb);
	*x2_out = x2;
	*df_out = df;
	if (df < 1)
		return 1;
	z = (pow(x2 / df, 1.0 / 3) - (1 - 2.0 / (9 * df))) / sqrt(2.0 / (9 * df));
	return 0.5 * erfc(z / sqrt(2));
}

/*
 * Sampled speculative decoding draws from the target's distribution: the
 * tokens at generation indices 1-3 (index 0 follows the prompt, drafted
 * by nobody) of NSEED requests with seeds 1..NSEED, plain against
 * speculative with point drafts (the target's own argmax, K 3: kept with
 * probability p(argmax)) and with drafts sampled from a q close to p (the
 * same weights in q4 instead of q8, K 2).  Tolerance: each index's
 * two-sample chi-square has an upper tail probability above 1e-4 (a
 * correct rule fails one of the six with probability under 1e-3 over
 * seed sets; the seeds and models are fixed, so the outcome is too).  A
 * rule that always kept the draft, or drew the replacement from p
 * instead of the residual, gives tail probabilities far below it.  The
 * same requests with 1 slot and 3 give the same tokens (nothing beside a
 * request changes its draws).
 */
static void test_sampled_distribution(void)
{
	static samp plain[NSEED], spec[NSEED], spec1[NSEED];
	uint64_t ms = 1811, ms2 = 1811;   /* fixed models: a fixed outcome */
	char dir[64], dir2[64];
	ds_pool_opts po = { .threads = 2 };
	ds_pool *pool = NULL;
	ds_model m;
	ds_err err;
	int pass, g;

	snprintf(dir, sizeof dir, "/tmp/ds-test-spec-%d", (int)getpid());
	snprintf(dir2, sizeof dir2, "/tmp/ds-test-spec2-%d", (int)getpid());
	if (tm_write(dir, tm_dsv2, "q8g32", &ms) || tm_write(dir2, tm_dsv2, "q4g32", &ms2) ||
	    ds_model_load(&m, dir, DS_LOAD_POPULATE, &err) ||
	    ds_pool_init(&pool, &po, &err)) {
		T_CHECK(0);
		return;
	}
	T_CHECK(run_sampled(&m, pool, NULL, 0, 3, plain) == 0);
	for (pass = 0; pass < 2; pass++) {
		const char *what = pass ? "sampled drafts" : "point drafts";
		ds_draft_opts o = {
			.dir = pass ? dir2 : dir, .pool = pool, .n_slot = 3, .n_ctx = 64,
			.kv_type = DS_KV_F16, .target_vocab = m.hp.n_vocab,
			.target_dir = dir, .point = !pass,
		};
		ds_drafter *d = NULL;
		size_t drafted = 0, kept = 0, i;

		if (ds_draft_open(&d, &o, &err)) {
			T_CHECK(0);
			continue;
		}
		T_CHECK(run_sampled(&m, pool, d, pass ? 2 : 3, 3, spec) == 0);
		for (g = 1; g < SGEN; g++) {
			double x2, p;
			int df;

			p = two_sample_p(plain, spec, (size_t)g, m.hp.n_vocab, &x2, &df);
			printf("# %s, token %d: chi2 %.1f, %d df, p %.3g\n", what, g, x2, df, p);
			T_CHECKF(p > 1e-4, "%s token %d: chi2 %.1f df %d", what, g, x2, df);
		}
		for (i = 0; i < NSEED; i++) {
			drafted += spec[i].st.spec_drafted;
			kept += spec[i].st.spec_accepted;
		}
		printf("# %s: %zu drafted, %zu kept\n", what, drafted, kept);
		/* both branches of the rule taken often */
		T_CHECK(kept > drafted / 10 && kept < drafted - drafted / 20);
		d->free(d);
		/* one slot: the same draws */
		T_CHECK(ds_draft_open(&d, &o, &err) == 0);
		T_CHECK(run_sampled(&m, pool, d, pass ? 2 : 3, 1, spec1) == 0);
		for (i = 0; i < NSEED; i++)
			T_CHECKF(memcmp(spec[i].tok, spec1[i].tok, sizeof spec[i].tok) == 0,
				 "seed %zu", i + 1);
		d->free(d);
	}
	ds_pool_free(pool);
	ds_model_free(&m);
	ds_remove_tree(dir);
	ds_remove_tree(dir2);
}

/* A draft model of another vocabulary is refused, naming it. */
static void test_draft_vocab(void)
{
	char dir[64], dir2[64];
	ds_pool_opts po = { .threads = 1 };
	ds_pool *pool = NULL;
	ds_drafter *d = NULL;
	ds_model m;
	ds_err err;
	ds_draft_opts o = { .pool = NULL, .n_slot = 1, .n_ctx = 32, .kv_type = DS_KV_F16 };

	snprintf(dir, sizeof dir, "/tmp/ds-test-spec-%d", (int)getpid());
	snprintf(dir2, sizeof dir2, "/tmp/ds-test-spec2-%d", (int)getpid());
	if (tm_write(dir, tm_dsv2, "q8g32", &seed) || tm_write(dir2, tm_llama, "q8g32", &seed) ||
	    ds_model_load(&m, dir, DS_LOAD_POPULATE, &err) || ds_pool_init(&pool, &po, &err)) {
		T_CHECK(0);
		return;
	}
	o.dir = dir2;
	o.pool = pool;
	o.target_vocab = m.hp.n_vocab;
	o.target_dir = dir;
	T_CHECK(ds_draft_open(&d, &o, &err) == -1 && d == NULL);
	T_CHECKF(strstr(err.msg, "vocabulary") && strstr(err.msg, dir2), "%s", err.msg);
	o.dir = dir;
	T_CHECK(ds_draft_open(&d, &o, &err) == 0 && d != NULL);
	if (d)
		d->free(d);
	ds_pool_free(pool);
	ds_model_free(&m);
	ds_remove_tree(dir);
	ds_remove_tree(dir2);
}

/* ---- the MTP module ---------------------------------------------------------------- */

/* tm_dsv3 with one multi-token-prediction layer (its own embedding and
 * head, as tm_write writes them). */
static const char *mtp_cfg(void)
{
	static char cfg[sizeof tm_dsv3 + 64];
	const char *at = strchr(tm_dsv3, '{');

	snprintf(cfg, sizeof cfg, "{\"num_nextn_predict_layers\": 1, %s", at + 1);
	return cfg;
}

static double rms_of(const float *x, size_t n)
{
	double s = 0;
	size_t i;

	for (i = 0; i < n; i++)
		s += (double)x[i] * x[i];
	return sqrt(s / (double)n);
}

/* The module's pass (ds_fwd_mtp over the main pass's ds_fwd_hidden rows)
 * gives the reference's logits (ds_ref_mtp) within f32's budget (1e-5 of
 * the logits' rms, budget.h), prompt in one batch. */
static void test_mtp_pass(void)
{
	enum { N = 12 };
	char dir[64];
	int32_t tok[N], pos[N], seq[N] = { 0 };
	uint8_t want[N];
	uint32_t rows[N];
	ds_pool_opts po = { .threads = 2 };
	ds_fwd_opts mo = { .max_batch = 32, .mtp = 1 };
	ds_fwd_opts dro = { .max_batch = 32, .mtp = 1, .draft_head = 1 };
	ds_pool *pool = NULL;
	ds_fwd *f = NULL, *g = NULL, *d = NULL;
	ds_kvcache kv, kv1;
	ds_hparams one;
	ds_model m;
	ds_err err;
	float *ref = NULL, *hid = NULL;
	size_t V, H, i;
	double worst = 0, r;

	snprintf(dir, sizeof dir, "/tmp/ds-test-spec-%d", (int)getpid());
	if (tm_write(dir, mtp_cfg(), "f32", &seed) ||
	    ds_model_load(&m, dir, DS_LOAD_POPULATE | DS_LOAD_MTP, &err)) {
		T_CHECK(0);
		return;
	}
	V = m.hp.n_vocab;
	H = m.hp.n_embd;
	for (i = 0; i < N; i++) {
		tok[i] = (int32_t)(t_rand(&seed) % V);
		pos[i] = (int32_t)i;
		want[i] = 1;
		rows[i] = (uint32_t)i;
	}
	ref = malloc((N - 1) * V * sizeof *ref);
	hid = malloc(N * H * sizeof *hid);
	one = m.hp;
	one.n_layer = 1;
	T_CHECK(ds_ref_mtp(&m, tok, N, ref, &err) == 0);
	if (ds_pool_init(&pool, &po, &err) || ds_fwd_init(&f, &m, pool, NULL, &err) ||
	    ds_fwd_init(&g, &m, pool, &mo, &err) || ds_fwd_init(&d, &m, pool, &dro, &err) ||
	    ds_kvcache_init(&kv, &m.hp, 1, 64, DS_KV_F32, &err) ||
	    ds_kvcache_init(&kv1, &one, 1, 64, DS_KV_F32, &err)) {
		printf("# %s\n", err.msg);
		T_CHECK(0);
		goto out;
	}
	{
		ds_batch b = { N, tok, pos, seq, NULL, NULL };
		ds_batch c = { N - 1, tok + 1, pos, seq, want, NULL };

		T_CHECK(ds_fwd_decode(f, &kv, &b, &err) == 0);
		ds_fwd_hidden(f, rows, N - 1, hid);
		T_CHECK(ds_fwd_mtp(g, &kv1, &c, hid, &err) == 0);
		/* the drafting module: the same cache rows again, a q8 head */
		ds_kvcache_seq_keep(&kv1, 0, 0);
		T_CHECK(ds_fwd_mtp(d, &kv1, &c, hid, &err) == 0);
		/* the main forward runs the main model, the module's only it */
		T_CHECK(ds_fwd_mtp(f, &kv, &c, hid, &err) == -1);
		T_CHECK(ds_fwd_decode(g, &kv1, &b, &err) == -1);
	}
	r = rms_of(ref, (N - 1) * V);
	for (i = 0; i < (N - 1) * V; i++) {
		size_t row = i / V;
		double d = fabs((double)ds_fwd_logits(g, row)[i % V] - ref[i]) / r;

		worst = d > worst ? d : worst;
	}
	printf("# MTP pass against the reference: largest deviation %.3g of the rms\n", worst);
	T_CHECK(worst <= 1e-5);
	/* the draft head: the f32 head rounded to q8g32, so q8's budget,
	 * and a real rounding (not the exact head again) */
	worst = 0;
	for (i = 0; i < (N - 1) * V; i++) {
		size_t row = i / V;
		double x = fabs((double)ds_fwd_logits(d, row)[i % V] - ref[i]) / r;

		worst = x > worst ? x : worst;
	}
	printf("# the q8 draft head against the reference: largest deviation %.3g of "
	       "the rms\n", worst);
	T_CHECK(worst > 1e-5 && worst <= BUDGET_Q8.max);
	ds_kvcache_free(&kv);
	ds_kvcache_free(&kv1);
out:
	ds_fwd_free(f);
	ds_fwd_free(g);
	ds_fwd_free(d);
	if (pool)
		ds_pool_free(pool);
	free(ref);
	free(hid);
	ds_model_free(&m);
	ds_remove_tree(dir);
}

/* Wraps the MTP drafter and records each first draft with the sequence
 * it was drafted for. */
typedef struct rec {
	ds_drafter base;
	ds_drafter *in;
	int32_t seq[4][96];
	size_t n_seq[4];
	int32_t first[4][32];
	size_t n_final[4][32], n_first[4];
} rec;

static int rec_propose(ds_drafter *d, const ds_fwd *t, ds_spec_seq *const *seqs,
		       size_t n, ds_err *err)
{
	rec *rc = (rec *)d;
	size_t i;

	if (rc->in->propose(rc->in, t, seqs, n, err))
		return -1;
	for (i = 0; i < n; i++) {
		const ds_spec_seq *q = seqs[i];
		uint32_t s = q->slot;

		if (q->n_draft == 0 || rc->n_first[s] == 32 || q->n_tok > 96)
			continue;
		memcpy(rc->seq[s], q->tok, q->n_tok * sizeof *q->tok);
		rc->n_seq[s] = q->n_tok;
		rc->n_final[s][rc->n_first[s]] = q->n_final;
		rc->first[s][rc->n_first[s]++] = q->draft[0];
	}
	return 0;
}

static void rec_release(ds_drafter *d, uint32_t slot) { ((rec *)d)->in->release(((rec *)d)->in, slot); }

/* Through the scheduler (greedy, K 3: chained drafts, rejections, the
 * module's cache caught up over positions fed in earlier steps), each
 * first draft is the reference module's argmax for its sequence (where
 * the reference's best two logits are apart by more than the budget);
 * and greedy output with the MTP drafter is plain greedy output. */
static void test_mtp_drafts(void)
{
	const int32_t prompts[2][7] = { { 5, 9, 200, 31, 7, 7, 64 }, { 3, 1, 4, 1, 5, 9, 2 } };
	char dir[64];
	ds_pool_opts po = { .threads = 2 };
	ds_fwd_opts fo = { .max_batch = 64 };
	ds_pool *pool = NULL;
	ds_fwd *f = NULL;
	ds_kvcache kv;
	ds_sched *s = NULL;
	ds_drafter *md = NULL;
	ds_model m;
	ds_err err;
	static rec rc;
	out o[2], plain[2];
	size_t V, i, j, checked = 0;
	float *ref = NULL;
	int pass;

	snprintf(dir, sizeof dir, "/tmp/ds-test-spec-%d", (int)getpid());
	if (tm_write(dir, mtp_cfg(), "f32", &seed) ||
	    ds_model_load(&m, dir, DS_LOAD_POPULATE | DS_LOAD_MTP, &err) ||
	    ds_pool_init(&pool, &po, &err)) {
		T_CHECK(0);
		return;
	}
	V = m.hp.n_vocab;
	for (pass = 0; pass < 2; pass++) {
		ds_mtp_opts mo = { .m = &m, .pool = pool, .n_slot = 2, .n_ctx = 128,
				   .max_batch = 64, .kv_type = DS_KV_F32 };
		ds_sched_opts so = { .n_batch = 16, .spec_k = 3 };
		ds_sampler_params sp;

		memset(&rc, 0, sizeof rc);
		if (pass) {
			T_CHECK(ds_mtp_open(&md, &mo, &err) == 0);
			rc.base = (ds_drafter){ .name = "rec", .propose = rec_propose,
						.release = rec_release, .free = script_free };
			rc.in = md;
			so.drafter = &rc.base;
		}
		if (ds_fwd_init(&f, &m, pool, &fo, &err) ||
		    ds_kvcache_init(&kv, &m.hp, 2, 128, DS_KV_F32, &err) ||
		    ds_sched_init(&s, f, &kv, &so, &err)) {
			printf("# %s\n", err.msg);
			T_CHECK(0);
			break;
		}
		ds_sampler_defaults(&sp);
		sp.temp = 0;
		for (i = 0; i < 2; i++) {
			memset(&(pass ? o : plain)[i], 0, sizeof o[i]);
			submit_one(s, prompts[i], 7, 30, &sp, &(pass ? o : plain)[i]);
		}
		T_CHECK(ds_sched_drain(s, &err) == 0);
		ds_sched_free(s);
		ds_kvcache_free(&kv);
		ds_fwd_free(f);
		f = NULL;
	}
	for (i = 0; i < 2; i++) {
		T_CHECK(o[i].n_tok == 30 && memcmp(o[i].tok, plain[i].tok, 30 * sizeof(int32_t)) == 0);
		T_CHECK(o[i].st.spec_drafted > 0);
		free(o[i].rows);
		free(plain[i].rows);
	}
	ref = malloc(96 * V * sizeof *ref);
	for (i = 0; i < 2; i++)
		for (j = 0; j < rc.n_first[i]; j++) {
			size_t nf = rc.n_final[i][j], a, b, k;
			const float *row;

			/* the reference over the sequence up to the unfed token */
			if (ds_ref_mtp(&m, rc.seq[i], nf + 1, ref, &err)) {
				T_CHECK(0);
				continue;
			}
			row = ref + (nf - 1) * V;
			a = (size_t)ds_argmax(row, (int)V);
			b = a ? 0 : 1;
			for (k = 0; k < V; k++)
				if (k != a && row[k] > row[b])
					b = k;
			if (row[a] - row[b] < 1e-3)
				continue;
			checked++;
			T_CHECKF(rc.first[i][j] == (int32_t)a, "request %zu, %zu final: "
				 "draft %d, the reference's %zu", i, nf, rc.first[i][j], a);
		}
	printf("# %zu first drafts checked against the reference\n", checked);
	T_CHECK(checked >= 4);
	free(ref);
	if (md)
		md->free(md);
	ds_pool_free(pool);
	ds_model_free(&m);
	ds_remove_tree(dir);
}

int main(void)
{
	seed = t_seed();
	T_RUN(test_ngram);
	T_RUN(test_penalize);
	T_RUN(test_greedy_llama);
	T_RUN(test_greedy_qwen2);
	T_RUN(test_greedy_dsv2);
	T_RUN(test_greedy_dsv3);
	T_RUN(test_sampled_distribution);
	T_RUN(test_draft_vocab);
	T_RUN(test_mtp_pass);
	T_RUN(test_mtp_drafts);
	return t_done();
}

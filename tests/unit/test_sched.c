/*
 * test_sched.c - the scheduler (scheduler.h): continuous batching gives
 * each request the tokens it gets alone; seeded sampling is reproducible;
 * stop ids, n_predict, the context limit; cancellation and submission
 * from other threads; callbacks' order and counts; stop strings.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "model/forward.h"
#include "harness.h"
#include "grammar/grammar.h"
#include "runtime/sched.h"
#include "spec/drafter.h"
#include "tmodel.h"

static uint64_t seed;
static char dir[64];
static ds_model model;

typedef struct eng {
	ds_pool *pool;
	ds_fwd *f;
	ds_kvcache kv;
	ds_pcache *pc;
	ds_sched *s;
} eng;

/* With a prompt cache of cache_bytes when that is not 0; form: MLA's
 * (ds_fwd_opts.mla_form, 0 the default). */
static int eng_open_form(eng *e, uint32_t slots, uint32_t ctx, uint32_t batch,
			 size_t cache_bytes, int form)
{
	ds_pool_opts po = { 2, NULL, 0 };
	ds_fwd_opts fo = { .max_batch = 64, .mla_form = form };
	ds_sched_opts so = { .n_batch = batch };
	ds_pcache_opts co = { .max_bytes = cache_bytes, .n_vocab = model.hp.n_vocab };
	ds_err err;

	memset(e, 0, sizeof *e);
	if (ds_pool_init(&e->pool, &po, &err) ||
	    ds_fwd_init(&e->f, &model, e->pool, &fo, &err) ||
	    ds_kvcache_init(&e->kv, &model.hp, slots, ctx, DS_KV_F16, &err) ||
	    (cache_bytes && ds_pcache_init(&e->pc, &e->kv, &co, &err))) {
		printf("# eng_open: %s\n", err.msg);
		return -1;
	}
	so.cache = e->pc;
	if (ds_sched_init(&e->s, e->f, &e->kv, &so, &err)) {
		printf("# eng_open: %s\n", err.msg);
		return -1;
	}
	return 0;
}

static int eng_open_cache(eng *e, uint32_t slots, uint32_t ctx, uint32_t batch,
			  size_t cache_bytes)
{
	return eng_open_form(e, slots, ctx, batch, cache_bytes, 0);
}

static int eng_open(eng *e, uint32_t slots, uint32_t ctx, uint32_t batch)
{
	return eng_open_cache(e, slots, ctx, batch, 0);
}

static void eng_close(eng *e)
{
	ds_sched_free(e->s);
	ds_pcache_free(e->pc);
	ds_kvcache_free(&e->kv);
	ds_fwd_free(e->f);
	ds_pool_free(e->pool);
}

/* What one request saw. */
typedef struct out {
	int32_t tok[256];
	size_t n_tok, n_logits, last_pos;
	int done, why, order_ok;
	ds_req_stats st;
	float first[512];           /* the first logits row */
} out;

static void on_logits(void *u, size_t pos, const float *l, uint32_t n)
{
	out *o = u;

	if (o->n_logits == 0)
		memcpy(o->first, l, (n < 512 ? n : 512) * sizeof *l);
	if (o->n_logits && pos != o->last_pos + 1)
		o->order_ok = 0;
	o->last_pos = pos;
	o->n_logits++;
}

static int stop_after = -1;   /* on_token asks to stop after this many */

static int on_token(void *u, int32_t t)
{
	out *o = u;

	if (o->done)
		o->order_ok = 0;
	if (o->n_tok < 256)
		o->tok[o->n_tok] = t;
	o->n_tok++;
	return stop_after >= 0 && (int)o->n_tok >= stop_after;
}

static void on_done(void *u, enum ds_finish why, const ds_req_stats *st)
{
	out *o = u;

	o->done++;
	o->why = (int)why;
	o->st = *st;
}

static void req_init(ds_req *r, const int32_t *p, size_t n, int64_t n_predict,
		     uint64_t s, out *o)
{
	memset(r, 0, sizeof *r);
	memset(o, 0, sizeof *o);
	o->order_ok = 1;
	r->prompt = p;
	r->n_prompt = n;
	r->n_predict = n_predict;
	ds_sampler_defaults(&r->sp);
	r->sp.seed = s;
	r->cb.on_logits = on_logits;
	r->cb.on_token = on_token;
	r->cb.on_done = on_done;
	r->cb.user = o;
}

#define NREQ 6

/* NREQ prompts of different lengths, each request's tokens with 3 slots
 * and small batches (prefill chunks interleaved with decode steps) equal
 * its tokens alone; sampled at temperature 0.8 with per-request seeds. */
static void test_parallel_equals_sequential(void)
{
	static int32_t prompts[NREQ][40];
	static out seq_out[NREQ], par_out[NREQ];
	size_t lens[NREQ] = { 5, 40, 17, 1, 33, 9 }, i;
	ds_err err;
	eng e;
	ds_req r;

	for (i = 0; i < NREQ; i++) {
		size_t k;

		for (k = 0; k < lens[i]; k++)
			prompts[i][k] = (int32_t)(t_rand(&seed) % model.hp.n_vocab);
	}
	if (eng_open(&e, 1, 128, 64)) {
		T_CHECK(0);
		return;
	}
	for (i = 0; i < NREQ; i++) {
		req_init(&r, prompts[i], lens[i], 12, 100 + i, &seq_out[i]);
		T_CHECK(ds_sched_submit(e.s, &r, NULL, &err) == 0);
		T_CHECK(ds_sched_drain(e.s, &err) == 0);
	}
	eng_close(&e);
	if (eng_open(&e, 3, 128, 8)) {
		T_CHECK(0);
		return;
	}
	for (i = 0; i < NREQ; i++) {
		req_init(&r, prompts[i], lens[i], 12, 100 + i, &par_out[i]);
		T_CHECK(ds_sched_submit(e.s, &r, NULL, &err) == 0);
	}
	T_CHECK(ds_sched_pending(e.s) == NREQ);
	T_CHECK(ds_sched_drain(e.s, &err) == 0);
	T_CHECK(ds_sched_pending(e.s) == 0);
	for (i = 0; i < NREQ; i++) {
		out *a = &seq_out[i], *b = &par_out[i];

		T_CHECK(a->done == 1 && b->done == 1 && a->order_ok && b->order_ok);
		T_CHECKF(a->n_tok == b->n_tok && memcmp(a->tok, b->tok,
			 a->n_tok * sizeof a->tok[0]) == 0, "request %zu", i);
		T_CHECK(a->why == DS_FINISH_LENGTH && a->n_tok == 12);
		T_CHECK(b->st.prompt_tokens == lens[i] && b->st.completion_tokens == 12);
		/* one logits row per sampled token (no all_logits) */
		T_CHECK(b->n_logits == 12);
		T_CHECK(b->st.t_submit <= b->st.t_start && b->st.t_start <= b->st.t_prompt &&
			b->st.t_prompt <= b->st.t_end);
	}
	eng_close(&e);
}

/* 40 tokens of p[8] sampled from the whole distribution at T 1.5. */
static void wide(eng *e, const int32_t *p, uint64_t s, out *o)
{
	ds_err err;
	ds_req r;

	req_init(&r, p, 8, 40, s, o);
	r.sp.temp = 1.5f;
	r.sp.top_k = 0;
	r.sp.top_p = 1;
	r.sp.min_p = 0;
	T_CHECK(ds_sched_submit(e->s, &r, NULL, &err) == 0);
}

/* The same seed twice: the same tokens; other seeds: other tokens. */
static void test_seeded(void)
{
	int32_t p[8] = { 3, 14, 15, 92, 65, 35, 89, 79 };
	out a, b, c;
	ds_err err;
	eng e;

	if (eng_open(&e, 2, 64, 32)) {
		T_CHECK(0);
		return;
	}
	wide(&e, p, 7, &a);
	wide(&e, p, 7, &b);
	T_CHECK(ds_sched_drain(e.s, &err) == 0);
	wide(&e, p, 8, &c);
	T_CHECK(ds_sched_drain(e.s, &err) == 0);
	T_CHECK(a.n_tok == 40 && b.n_tok == 40 && c.n_tok == 40);
	T_CHECK(memcmp(a.tok, b.tok, 40 * sizeof a.tok[0]) == 0);
	T_CHECK(memcmp(a.tok, c.tok, 40 * sizeof a.tok[0]) != 0);
	eng_close(&e);
}

/* Stop ids, on_token's stop, n_predict 0, the context limit, all_logits. */
static void test_stops(void)
{
	int32_t p[6] = { 10, 20, 30, 40, 50, 60 }, stop;
	out a, b;
	ds_err err;
	ds_req r;
	eng e;

	if (eng_open(&e, 1, 16, 16)) {
		T_CHECK(0);
		return;
	}
	/* greedy: the first token it picks, then again as a stop id */
	req_init(&r, p, 6, 5, 1, &a);
	r.sp.temp = 0;
	T_CHECK(ds_sched_submit(e.s, &r, NULL, &err) == 0 &&
		ds_sched_drain(e.s, &err) == 0);
	T_CHECK(a.n_tok == 5 && a.why == DS_FINISH_LENGTH);
	stop = a.tok[2];
	req_init(&r, p, 6, 5, 1, &b);
	r.sp.temp = 0;
	r.stop_ids = &stop;
	r.n_stop_ids = 1;
	T_CHECK(ds_sched_submit(e.s, &r, NULL, &err) == 0 &&
		ds_sched_drain(e.s, &err) == 0);
	/* the stop id is counted but not passed to on_token */
	T_CHECK(b.why == DS_FINISH_STOP && b.st.completion_tokens <= 3);
	T_CHECK(b.n_tok + 1 == b.st.completion_tokens);
	T_CHECK(memcmp(a.tok, b.tok, b.n_tok * sizeof a.tok[0]) == 0);
	/* on_token says stop after 2 */
	stop_after = 2;
	req_init(&r, p, 6, 5, 1, &b);
	r.sp.temp = 0;
	T_CHECK(ds_sched_submit(e.s, &r, NULL, &err) == 0 &&
		ds_sched_drain(e.s, &err) == 0);
	stop_after = -1;
	T_CHECK(b.why == DS_FINISH_STOP && b.n_tok == 2);
	/* n_predict 0 with all_logits: the prompt's logits only */
	req_init(&r, p, 6, 0, 1, &b);
	r.all_logits = 1;
	T_CHECK(ds_sched_submit(e.s, &r, NULL, &err) == 0 &&
		ds_sched_drain(e.s, &err) == 0);
	T_CHECK(b.why == DS_FINISH_LENGTH && b.n_tok == 0 && b.n_logits == 6 &&
		b.order_ok);
	/* all_logits while generating: every position fed, n + g - 1 */
	req_init(&r, p, 6, 4, 1, &b);
	r.all_logits = 1;
	T_CHECK(ds_sched_submit(e.s, &r, NULL, &err) == 0 &&
		ds_sched_drain(e.s, &err) == 0);
	T_CHECK(b.n_tok == 4 && b.n_logits == 6 + 4 - 1 && b.order_ok);
	/* until the context (16) is full: 16 - 6 + 1 tokens */
	req_init(&r, p, 6, -1, 1, &b);
	T_CHECK(ds_sched_submit(e.s, &r, NULL, &err) == 0 &&
		ds_sched_drain(e.s, &err) == 0);
	T_CHECK(b.why == DS_FINISH_LENGTH && b.n_tok == 11);
	eng_close(&e);
}

/* Bad requests are refused at submission, naming what is wrong. */
static void test_refused(void)
{
	int32_t p[20] = { 0 };
	out a;
	ds_err err;
	ds_req r;
	eng e;

	if (eng_open(&e, 1, 16, 16)) {
		T_CHECK(0);
		return;
	}
	req_init(&r, p, 17, 5, 1, &a);
	T_CHECK(ds_sched_submit(e.s, &r, NULL, &err) == -1 &&
		strstr(err.msg, "longer than the context"));
	req_init(&r, p, 0, 5, 1, &a);
	T_CHECK(ds_sched_submit(e.s, &r, NULL, &err) == -1 &&
		strstr(err.msg, "empty"));
	p[3] = (int32_t)model.hp.n_vocab;
	req_init(&r, p, 5, 5, 1, &a);
	T_CHECK(ds_sched_submit(e.s, &r, NULL, &err) == -1 &&
		strstr(err.msg, "token 4: id"));
	T_CHECK(ds_sched_pending(e.s) == 0 && a.done == 0);
	eng_close(&e);
}

/* ---- threads ------------------------------------------------------------------------ */

typedef struct th {
	eng *e;
	out o[4];
	uint64_t ids[4];
	int32_t p[4];
	int ok;
} th;

static void *submitter(void *arg)
{
	th *t = arg;
	ds_err err;
	ds_req r;
	int i;

	t->ok = 1;
	for (i = 0; i < 4; i++) {
		t->p[i] = 5 + i;
		req_init(&r, &t->p[i], 1, 6, (uint64_t)i, &t->o[i]);
		if (ds_sched_submit(t->e->s, &r, &t->ids[i], &err))
			t->ok = 0;
	}
	return NULL;
}

/* Two threads submit while the driver steps; a long request is cancelled
 * from another thread and frees its slot. */
static void test_threads_and_cancel(void)
{
	pthread_t a, b;
	th ta, tb;
	int32_t p[4] = { 1, 2, 3, 4 };
	out lo;
	uint64_t id;
	ds_err err;
	ds_req r;
	eng e;
	int i, steps = 0;

	if (eng_open(&e, 2, 256, 16)) {
		T_CHECK(0);
		return;
	}
	memset(&ta, 0, sizeof ta);
	memset(&tb, 0, sizeof tb);
	ta.e = tb.e = &e;
	req_init(&r, p, 4, -1, 3, &lo);       /* runs until the context is full */
	T_CHECK(ds_sched_submit(e.s, &r, &id, &err) == 0 && id > 0);
	pthread_create(&a, NULL, submitter, &ta);
	pthread_create(&b, NULL, submitter, &tb);
	for (i = 0; i < 6; i++) {
		T_CHECK(ds_sched_step(e.s, &err) >= 0);
		steps++;
	}
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	T_CHECK(ta.ok && tb.ok);
	T_CHECK(ds_sched_cancel(e.s, id) == 0);
	T_CHECK(ds_sched_cancel(e.s, 999999) == -1);
	T_CHECK(ds_sched_drain(e.s, &err) == 0);
	T_CHECK(lo.done == 1 && lo.why == DS_FINISH_CANCEL && lo.n_tok < 250);
	for (i = 0; i < 4; i++) {
		T_CHECK(ta.o[i].done == 1 && ta.o[i].why == DS_FINISH_LENGTH &&
			ta.o[i].n_tok == 6);
		T_CHECK(tb.o[i].done == 1 && tb.o[i].n_tok == 6);
		/* same prompt and seed: same tokens, whoever shared the batch */
		T_CHECK(memcmp(ta.o[i].tok, tb.o[i].tok, 6 * sizeof(int32_t)) == 0);
		T_CHECK(ta.ids[i] != tb.ids[i]);
	}
	/* a queued request cancelled before it starts; freeing ends the rest */
	req_init(&r, p, 4, 3, 1, &lo);
	T_CHECK(ds_sched_submit(e.s, &r, &id, &err) == 0);
	T_CHECK(ds_sched_cancel(e.s, id) == 0);
	T_CHECK(ds_sched_step(e.s, &err) == 0);
	T_CHECK(lo.done == 1 && lo.why == DS_FINISH_CANCEL && lo.n_tok == 0);
	req_init(&r, p, 4, 3, 1, &lo);
	T_CHECK(ds_sched_submit(e.s, &r, &id, &err) == 0);
	eng_close(&e);
	T_CHECK(lo.done == 1 && lo.why == DS_FINISH_CANCEL);
}

static void *waiter(void *arg)
{
	ds_sched *s = arg;

	return (void *)(intptr_t)ds_sched_wait(s);
}

/* ds_sched_wait sleeps until work or stop. */
static void test_wait_stop(void)
{
	pthread_t t;
	void *rv;
	eng e;

	if (eng_open(&e, 1, 16, 16)) {
		T_CHECK(0);
		return;
	}
	pthread_create(&t, NULL, waiter, e.s);
	ds_sched_stop(e.s);
	pthread_join(t, &rv);
	T_CHECK((intptr_t)rv == 0);
	T_CHECK(ds_sched_wait(e.s) == 0);
	eng_close(&e);
}

/* ds_sched_counts tells queued from running as slots fill, a request
 * ends and others are cancelled (ds-serve's metrics). */
static void test_counts(void)
{
	int32_t p[3] = { 1, 2, 3 };
	size_t q = 9, r = 9;
	uint64_t id[3];
	out o[3];
	ds_err err;
	ds_req rq;
	eng e;
	int i;

	if (eng_open(&e, 2, 64, 16)) {
		T_CHECK(0);
		return;
	}
	ds_sched_counts(e.s, &q, &r);
	T_CHECK(q == 0 && r == 0);
	for (i = 0; i < 3; i++) {   /* the first ends after 2 tokens */
		req_init(&rq, p, 3, i == 0 ? 2 : -1, (uint64_t)i, &o[i]);
		T_CHECK(ds_sched_submit(e.s, &rq, &id[i], &err) == 0);
	}
	ds_sched_counts(e.s, &q, &r);
	T_CHECK(q == 3 && r == 0);      /* admitted by a step */
	T_CHECK(ds_sched_step(e.s, &err) == 3);
	ds_sched_counts(e.s, &q, &r);
	T_CHECK(q == 1 && r == 2);
	T_CHECK(ds_sched_step(e.s, &err) == 2);
	ds_sched_counts(e.s, &q, NULL);
	ds_sched_counts(e.s, NULL, &r);
	T_CHECK(o[0].done == 1 && q == 1 && r == 1);
	T_CHECK(ds_sched_step(e.s, &err) == 2);
	ds_sched_counts(e.s, &q, &r);
	T_CHECK(q == 0 && r == 2);
	T_CHECK(ds_sched_cancel(e.s, id[1]) == 0);
	T_CHECK(ds_sched_step(e.s, &err) == 1);
	ds_sched_counts(e.s, &q, &r);
	T_CHECK(o[1].why == DS_FINISH_CANCEL && q == 0 && r == 1);
	T_CHECK(ds_sched_cancel(e.s, id[2]) == 0);
	T_CHECK(ds_sched_step(e.s, &err) == 0);
	ds_sched_counts(e.s, &q, &r);
	T_CHECK(q == 0 && r == 0 && o[2].done == 1);
	eng_close(&e);
}

/* ---- stop strings ------------------------------------------------------------------- */

static void test_stopper(void)
{
	char *stops[] = { "STOP", "\n\n" }, *out = NULL;
	const char *pieces[] = { "Hello ", "wor", "ld S", "TO", "P and more" };
	size_t n = 0, cap = 0, i;
	ds_stopper st;
	ds_err err;
	int rc = 0;

	T_CHECK(ds_stopper_init(&st, stops, 2, &err) == 0);
	for (i = 0; i < 5 && rc == 0; i++) {
		rc = ds_stopper_push(&st, pieces[i], strlen(pieces[i]), &out, &n,
				     &cap, &err);
		/* "S" is held back while "STOP" may follow */
		if (i == 2)
			T_CHECK(strcmp(out, "Hello world ") == 0);
	}
	T_CHECK(rc == 1 && i == 5 && strcmp(out, "Hello world ") == 0);
	ds_stopper_free(&st);
	/* a held-back prefix that does not complete is shown at the end */
	n = 0;
	T_CHECK(ds_stopper_init(&st, stops, 2, &err) == 0);
	T_CHECK(ds_stopper_push(&st, "a\nb\n", 4, &out, &n, &cap, &err) == 0);
	T_CHECK(strcmp(out, "a\nb") == 0);
	T_CHECK(ds_stopper_flush(&st, &out, &n, &cap, &err) == 0);
	T_CHECK(strcmp(out, "a\nb\n") == 0);
	T_CHECK(ds_stopper_push(&st, "x\n\ny", 4, &out, &n, &cap, &err) == 1);
	T_CHECK(strcmp(out, "a\nb\nx") == 0);
	ds_stopper_free(&st);
	/* no stop strings: everything passes */
	n = 0;
	T_CHECK(ds_stopper_init(&st, NULL, 0, &err) == 0);
	T_CHECK(ds_stopper_push(&st, "STOP", 4, &out, &n, &cap, &err) == 0 &&
		strcmp(out, "STOP") == 0);
	ds_stopper_free(&st);
	free(out);
}

/* ---- the prompt cache ------------------------------------------------------- */

/* One request run alone to its end on e. */
static void run1(eng *e, const int32_t *p, size_t n, int64_t n_predict,
		 uint64_t s, int all_logits, out *o)
{
	ds_err err;
	ds_req r;

	req_init(&r, p, n, n_predict, s, o);
	r.all_logits = all_logits;
	T_CHECK(ds_sched_submit(e->s, &r, NULL, &err) == 0);
	T_CHECK(ds_sched_drain(e->s, &err) == 0);
}

static int same_tokens(const out *a, const out *b)
{
	return a->done == 1 && b->done == 1 && a->n_tok == b->n_tok &&
	       memcmp(a->tok, b->tok, a->n_tok * sizeof a->tok[0]) == 0;
}

/* A conversation's turns in one slot: the next turn starts from the rows
 * its slot kept (the earlier answer's included), or, after another
 * request took the slot, from the blocks stored then; the tokens (sampled,
 * seeded) are those computed without the cache. */
static void test_cache_turns(void)
{
	static int32_t a[128], b[128], c[40], d[160];
	static out ref[5], got[5];
	size_t na = 37, nb, nc = 30, nd, i;
	eng e;
	int k;

	for (i = 0; i < na; i++)
		a[i] = (int32_t)(3 + t_rand(&seed) % (model.hp.n_vocab - 3));
	for (i = 0; i < nc; i++)
		c[i] = (int32_t)(3 + t_rand(&seed) % (model.hp.n_vocab - 3));
	/* absorbed MLA: a later turn takes its earlier answer's rows (decode,
	 * absorbed) from the cache, where without it they are read as prompt
	 * tokens (the MHA form), which rounds differently */
	for (k = 0; k < 2; k++) {
		out *o = k ? got : ref;

		if (eng_open_form(&e, 1, 256, 16, k ? 1 << 20 : 0, DS_MLA_ABSORBED)) {
			T_CHECK(0);
			return;
		}
		run1(&e, a, na, 20, 11, 0, &o[0]);
		/* turn 2: turn 1, its answer (the rows of all but the last
		 * token it sampled are in the slot), a new message */
		memcpy(b, a, na * sizeof *a);
		memcpy(b + na, ref[0].tok, 19 * sizeof *b);
		nb = na + 19;
		for (i = 0; i < 5; i++)
			b[nb++] = (int32_t)(3 + i);
		run1(&e, b, nb, 20, 12, 0, &o[1]);
		run1(&e, c, nc, 8, 13, 0, &o[2]);   /* takes the slot */
		memcpy(d, b, nb * sizeof *b);
		memcpy(d + nb, ref[1].tok, 19 * sizeof *d);
		nd = nb + 19;
		for (i = 0; i < 3; i++)
			d[nd++] = (int32_t)(7 + i);
		run1(&e, d, nd, 20, 14, 0, &o[3]);
		/* every position's logits: nothing taken */
		run1(&e, d, nd, 2, 15, 1, &o[4]);
		eng_close(&e);
	}
	for (i = 0; i < 5; i++)
		T_CHECKF(same_tokens(&ref[i], &got[i]), "request %zu", i);
	T_CHECK(ref[1].st.cached_tokens == 0 && ref[3].st.cached_tokens == 0);
	T_CHECK(got[0].st.cached_tokens == 0 && got[2].st.cached_tokens == 0);
	/* turn 2: turn 1's 37 + 19 answer positions, kept in the slot */
	T_CHECKF(got[1].st.cached_tokens == na + 19, "%zu", got[1].st.cached_tokens);
	/* turn 3 after another request: the 80 positions turn 2's slot held,
	 * five whole blocks, from the cache */
	T_CHECKF(got[3].st.cached_tokens == 80, "%zu", got[3].st.cached_tokens);
	T_CHECK(got[4].st.cached_tokens == 0 && got[4].n_logits == nd + 1);
	T_CHECK(memcmp(ref[4].first, got[4].first, sizeof ref[4].first) == 0);
	T_CHECK(got[3].st.prompt_tokens == nd);
}

/* Requests that share a prefix, submitted together: the later ones wait
 * while the first computes it and copy its rows; the tokens are the
 * same as without the cache. */
static void test_cache_shared(void)
{
	static int32_t p[5][80];
	static out ref[5], got[5];
	size_t n[5], i, k;
	ds_err err;
	ds_req r;
	eng e;
	int pass;

	for (k = 0; k < 50; k++)
		p[0][k] = (int32_t)(3 + t_rand(&seed) % (model.hp.n_vocab - 3));
	for (i = 0; i < 5; i++) {
		n[i] = 50 + 3 * i + 1;
		memcpy(p[i], p[0], 50 * sizeof p[0][0]);
		for (k = 50; k < n[i]; k++)
			p[i][k] = (int32_t)(3 + t_rand(&seed) % (model.hp.n_vocab - 3));
	}
	for (pass = 0; pass < 2; pass++) {
		out *o = pass ? got : ref;

		if ((pass ? eng_open_cache(&e, 3, 128, 8, 1 << 20) : eng_open(&e, 3, 128, 8))) {
			T_CHECK(0);
			return;
		}
		for (i = 0; i < 5; i++) {
			req_init(&r, p[i], n[i], 10, 20 + i, &o[i]);
			T_CHECK(ds_sched_submit(e.s, &r, NULL, &err) == 0);
		}
		T_CHECK(ds_sched_drain(e.s, &err) == 0);
		eng_close(&e);
	}
	for (i = 0; i < 5; i++) {
		T_CHECKF(same_tokens(&ref[i], &got[i]), "request %zu", i);
		T_CHECKF(i == 0 ? got[i].st.cached_tokens == 0 : got[i].st.cached_tokens >= 48,
			 "request %zu: %zu cached", i, got[i].st.cached_tokens);
	}
}

/* A cache of two blocks' memory never holds more; answers stay right. */
static void test_cache_bound(void)
{
	static int32_t p[6][70];
	static out ref[6], got[6];
	ds_pcache_stats ps;
	size_t i, k, two;
	eng e;
	int pass;

	for (i = 0; i < 6; i++)
		for (k = 0; k < 70; k++)
			p[i][k] = k < 40 && i % 2 ? p[i - 1][k] :
				  (int32_t)(3 + t_rand(&seed) % (model.hp.n_vocab - 3));
	for (pass = 0; pass < 2; pass++) {
		out *o = pass ? got : ref;

		if (eng_open(&e, 1, 128, 16)) {
			T_CHECK(0);
			return;
		}
		two = 2 * ds_kvcache_span(&e.kv, DS_PCACHE_BLOCK);
		if (pass) {
			eng_close(&e);
			if (eng_open_cache(&e, 1, 128, 16, two)) {
				T_CHECK(0);
				return;
			}
		}
		for (i = 0; i < 6; i++) {
			run1(&e, p[i], 70, 6, 30 + i, 0, &o[i]);
			if (pass) {
				ds_pcache_get_stats(e.pc, &ps);
				T_CHECK(ps.blocks <= 2 && ps.bytes <= two);
			}
		}
		eng_close(&e);
	}
	for (i = 0; i < 6; i++)
		T_CHECKF(same_tokens(&ref[i], &got[i]), "request %zu", i);
	/* the odd ones share 40 with the one before, kept in the slot */
	T_CHECKF(got[1].st.cached_tokens == 40, "%zu", got[1].st.cached_tokens);
}


/* ---- constrained decoding ------------------------------------------------------------ */

/* Token i's bytes: i + 1 written in base 8 over the alphabet "ab01,[] ",
 * so every short string over it is a token; the last id is the stop id
 * (special: no bytes). */
static const char galpha[] = "ab01,[] ";

static int gvocab_make(uint32_t n, ds_gvocab **v, char (*bytes)[8])
{
	const uint8_t *ptr[512];
	uint32_t lens[512], i;
	uint8_t special[512] = { 0 };
	ds_err err;

	for (i = 0; i < n && i < 512; i++) {
		uint32_t x = i + 1, k = 0;
		char rev[8];

		while (x > 0 && k < 7) {
			rev[k++] = galpha[x % 8];
			x /= 8;
		}
		for (lens[i] = 0; lens[i] < k; lens[i]++)
			bytes[i][lens[i]] = rev[k - 1 - lens[i]];
		ptr[i] = (const uint8_t *)bytes[i];
	}
	special[n - 1] = 1;
	lens[n - 1] = 0;
	if (ds_gvocab_build(n, ptr, lens, special, -1, v, &err)) {
		printf("# gvocab: %s\n", err.msg);
		return -1;
	}
	return 0;
}

/* Requests under a grammar, sampled at temperature 1 with 2 slots (and
 * with n-gram drafts): every answer is a prefix of a sentence, a whole
 * one when it stopped by itself; the stop id only where it is complete. */
static void test_grammar(void)
{
	static const char gtext[] =
		"root ::= \"[\" item (\",\" item){0,3} \"]\"\n"
		"item ::= \"a\" \"b\"{0,4} | \"0\" | \"1\" [01]{0,3}\n";
	uint32_t n = model.hp.n_vocab, k;
	char (*bytes)[8] = calloc(512, 8);
	int32_t p[5] = { 3, 14, 15, 92, 65 }, stop = (int32_t)n - 1;
	ds_gvocab *v = NULL;
	ds_grammar *g = NULL;
	ds_drafter *d = NULL;
	out o[6];
	ds_err err;
	int spec, i, stopped = 0;

	T_CHECK(bytes && gvocab_make(n, &v, bytes) == 0);
	T_CHECK(ds_grammar_parse(gtext, sizeof gtext - 1, &g, &err) == 0);
	for (spec = 0; spec < 2 && v && g; spec++) {
		ds_sched_opts so = { .n_batch = 32 };
		ds_pool_opts po = { 2, NULL, 0 };
		ds_fwd_opts fo = { .max_batch = 64 };
		eng e;

		memset(&e, 0, sizeof e);
		if (spec && ds_ngram_open(&d, &err))
			break;
		so.drafter = d;
		if (ds_pool_init(&e.pool, &po, &err) || ds_fwd_init(&e.f, &model, e.pool, &fo, &err) ||
		    ds_kvcache_init(&e.kv, &model.hp, 2, 128, DS_KV_F16, &err) ||
		    ds_sched_init(&e.s, e.f, &e.kv, &so, &err)) {
			printf("# %s\n", err.msg);
			T_CHECK(0);
			break;
		}
		for (i = 0; i < 6; i++) {
			ds_req r;

			req_init(&r, p, 5, 60, (uint64_t)i + 100 * (uint64_t)spec, &o[i]);
			r.sp.temp = 1;
			r.sp.top_k = 0;
			r.sp.top_p = 1;
			r.sp.min_p = 0;
			r.stop_ids = &stop;
			r.n_stop_ids = 1;
			r.grammar = g;
			r.gvocab = v;
			T_CHECK(ds_sched_submit(e.s, &r, NULL, &err) == 0);
		}
		T_CHECK(ds_sched_drain(e.s, &err) == 0);
		for (i = 0; i < 6; i++) {
			ds_gmatch *m = NULL;
			int ok = ds_gmatch_new(g, &m, &err) == 0;

			T_CHECK(o[i].done == 1 && o[i].why != DS_FINISH_ERROR);
			for (k = 0; ok && k < o[i].n_tok && k < 256; k++)
				ok = ds_gmatch_accept_token(m, v, o[i].tok[k], &err) ==
				     DS_GMATCH_OK;
			T_CHECKF(ok, "request %d (spec %d): token %u refused", i, spec, k);
			if (o[i].why == DS_FINISH_STOP) {
				T_CHECK(ds_gmatch_complete(m));
				stopped++;
			}
			T_CHECK(o[i].st.mask_steps > 0);
			ds_gmatch_free(m);
		}
		ds_sched_free(e.s);
		if (d)
			d->free(d);
		d = NULL;
		ds_kvcache_free(&e.kv);
		ds_fwd_free(e.f);
		ds_pool_free(e.pool);
	}
	T_CHECKF(stopped >= 6, "%d of 12 answers ended by themselves", stopped);
	ds_grammar_free(g);
	ds_gvocab_free(v);
	free(bytes);
}

int main(void)
{
	ds_err err;

	seed = t_seed();
	snprintf(dir, sizeof dir, "/tmp/ds-test-sched-%d", (int)getpid());
	if (tm_write(dir, tm_dsv2, "q8g32", &seed) ||
	    ds_model_load(&model, dir, DS_LOAD_POPULATE, &err)) {
		printf("not ok 1 - model\n1..1\n");
		return 1;
	}
	T_RUN(test_parallel_equals_sequential);
	T_RUN(test_seeded);
	T_RUN(test_stops);
	T_RUN(test_refused);
	T_RUN(test_threads_and_cancel);
	T_RUN(test_wait_stop);
	T_RUN(test_counts);
	T_RUN(test_stopper);
	T_RUN(test_cache_turns);
	T_RUN(test_cache_shared);
	T_RUN(test_cache_bound);
	T_RUN(test_grammar);
	ds_model_free(&model);
	ds_remove_tree(dir);
	return t_done();
}

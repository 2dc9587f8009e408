/* specbench.c - speculative decoding measured (specbench.h). */
#include "specbench.h"

#include <stdlib.h>
#include <string.h>

#include "spec/drafter.h"

/* ---- --spec -------------------------------------------------------------------------- */

typedef struct run1 {
	int32_t tok[4096];
	size_t n;
	ds_req_stats st;
} run1;

static int cb_token(void *u, int32_t t)
{
	run1 *r = u;

	if (r->n < 4096)
		r->tok[r->n++] = t;
	return 0;
}

static void cb_done(void *u, enum ds_finish why, const ds_req_stats *st)
{
	run1 *r = u;

	(void)why;
	r->st = *st;
}

/* One greedy request of n tokens, drafts on or off; decode tokens/s. */
static int one(ds_session *s, const ds_tok_ids *p, const ds_specbench_opts *o,
	       int spec, run1 *r, double *ts, ds_err *err)
{
	ds_req q = {
		.prompt = p->v, .n_prompt = p->n, .n_predict = o->n, .no_spec = !spec,
		.cb = { .on_token = cb_token, .on_done = cb_done, .user = r },
	};
	double dt;

	memset(r, 0, sizeof *r);
	ds_sampler_defaults(&q.sp);
	q.sp.temp = 0;
	q.sp.repeat_penalty = o->repeat_penalty > 0 ? o->repeat_penalty : 1;
	if (ds_sched_submit(s->sched, &q, NULL, err) || ds_sched_drain(s->sched, err))
		return -1;
	dt = r->st.t_end - r->st.t_prompt;
	*ts = dt > 0 && r->n > 1 ? (r->n - 1) / dt : 0;
	return 0;
}

static int rounds(ds_session *s, const ds_tok_ids *p, const ds_specbench_opts *o,
		  ds_specbench_row *row, ds_err *err)
{
	static run1 a, b;
	double ta, tb, sa = 0, sb = 0, sr = 0;
	int i;

	row->same = 1;
	row->speedup_lo = 1e9;
	for (i = 0; i < o->reps; i++) {
		/* the order turns each round: neither always runs first */
		if (i % 2 ? one(s, p, o, 1, &b, &tb, err) || one(s, p, o, 0, &a, &ta, err)
			  : one(s, p, o, 0, &a, &ta, err) || one(s, p, o, 1, &b, &tb, err))
			return -1;
		row->same &= a.n == b.n && memcmp(a.tok, b.tok, a.n * sizeof *a.tok) == 0;
		row->drafted += b.st.spec_drafted;
		row->accepted += b.st.spec_accepted;
		row->steps += b.st.spec_steps;
		sa += ta;
		sb += tb;
		sr += ta > 0 ? tb / ta : 0;
		if (ta > 0 && tb / ta < row->speedup_lo)
			row->speedup_lo = tb / ta;
		if (ta > 0 && tb / ta > row->speedup_hi)
			row->speedup_hi = tb / ta;
		if (o->progress)
			fprintf(o->progress, "ds-bench: --spec %s round %d/%d: %.1f tokens/s "
				"plain, %.1f with drafts (%.2fx), %zu of %zu drafts kept\n",
				row->drafter, i + 1, o->reps, ta, tb, ta > 0 ? tb / ta : 0,
				b.st.spec_accepted, b.st.spec_drafted);
	}
	row->plain_ts = sa / o->reps;
	row->spec_ts = sb / o->reps;
	row->speedup = sr / o->reps;
	row->acceptance = row->drafted ? (double)row->accepted / row->drafted : 0;
	row->mean_len = row->steps ? 1 + (double)row->accepted / row->steps : 0;
	return 0;
}

int ds_specbench_spec(const ds_specbench_opts *o, ds_specbench_row *row, ds_err *err)
{
	ds_session s;
	ds_tok_ids p = { 0 };
	char *text = NULL;
	int rc = -1;

	memset(row, 0, sizeof *row);
	row->drafter = ds_spec_name(o->so.spec);
	row->k = o->so.spec_k;
	row->n = o->n;
	row->reps = o->reps;
	if (ds_session_open(&s, &o->so, err))
		goto out;
	if (ds_read_file(o->prompt_file, 1u << 24, &text, NULL, err) ||
	    ds_session_encode(&s, text, &p, err) ||
	    ds_session_fit(&s, &p, o->n, 0, err))
		goto out;
	if (p.n + o->n + DS_SPEC_MAX_K >= s.n_ctx) {
		ds_errf(err, "%s: %zu prompt tokens and %u to generate do not fit "
			"the context of %u", o->prompt_file, p.n, o->n, s.n_ctx);
		goto out;
	}
	rc = rounds(&s, &p, o, row, err);
out:
	ds_tok_ids_free(&p);
	free(text);
	ds_session_close(&s);
	return rc;
}

/* ---- --verify ------------------------------------------------------------------------- */

typedef struct vb {
	ds_fwd *f;
	ds_kvcache kv;
	int32_t *tok, *pos, *seq;
	uint8_t *want;
} vb;

/* One pass of e entries after the ctx cached positions, cut again. */
static int vpass(vb *b, uint32_t ctx, uint32_t e, double *sec, ds_err *err)
{
	ds_batch bt = { e, b->tok + ctx, b->pos + ctx, b->seq, b->want, NULL };
	double t0 = ds_now_s();

	if (ds_fwd_decode(b->f, &b->kv, &bt, err))
		return -1;
	*sec = ds_now_s() - t0;
	ds_kvcache_seq_keep(&b->kv, 0, ctx);
	return 0;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The median of the rounds: on a shared machine a round that lost its
 * core to a neighbour is an outlier, not a cost. */
static int vrounds(vb *b, const ds_verify_opts *o, ds_verify_row *row, ds_err *err)
{
	double *t = calloc((size_t)o->reps * (DS_VERIFY_MAX + 1), sizeof *t), sec;
	uint32_t e;
	int i;

	if (t == NULL)
		return ds_errf(err, "out of memory");
	for (e = 1; e <= o->max_e; e++)     /* warm-up */
		if (vpass(b, o->ctx, e, &sec, err)) {
			free(t);
			return -1;
		}
	for (i = 0; i < o->reps; i++)
		for (e = 1; e <= o->max_e; e++) {
			/* e in turn, the order reversed every other round */
			uint32_t x = i % 2 ? o->max_e + 1 - e : e;

			if (vpass(b, o->ctx, x, &sec, err)) {
				free(t);
				return -1;
			}
			t[(size_t)x * o->reps + i] = sec;
		}
	for (e = 1; e <= o->max_e; e++) {
		double *r = t + (size_t)e * o->reps;

		qsort(r, (size_t)o->reps, sizeof *r, cmp_d);
		row->ms[e] = (o->reps % 2 ? r[o->reps / 2] :
			      (r[o->reps / 2 - 1] + r[o->reps / 2]) / 2) * 1e3;
		row->cost[e] = row->ms[e] / row->ms[1];
	}
	free(t);
	return 0;
}

int ds_specbench_verify(const ds_verify_opts *o, ds_verify_row *row, ds_err *err)
{
	ds_pool_opts po = { .threads = o->threads, .cpus = o->cpus };
	ds_fwd_opts fo = { .max_batch = o->ctx > DS_VERIFY_MAX ? o->ctx : DS_VERIFY_MAX };
	uint32_t n = o->ctx + o->max_e, i;
	ds_placement pl;
	ds_pool *pool = NULL;
	ds_model m;
	char warn[256];
	vb b = { 0 };
	int rc = -1, have_m = 0;

	memset(row, 0, sizeof *row);
	row->ctx = o->ctx;
	row->max_e = o->max_e;
	row->reps = o->reps;
	memset(&pl, 0, sizeof pl);
	memset(&m, 0, sizeof m);
	if (o->max_e < 1 || o->max_e > DS_VERIFY_MAX)
		return ds_errf(err, "--verify %u: 1 to %d entries", o->max_e, DS_VERIFY_MAX);
	if (ds_pool_init(&pool, &po, err))
		return -1;
	row->threads = ds_pool_threads(pool);
	b.tok = calloc(n, sizeof *b.tok);
	b.pos = calloc(n, sizeof *b.pos);
	b.seq = calloc(n, sizeof *b.seq);
	b.want = calloc(n, 1);
	if (!b.tok || !b.pos || !b.seq || !b.want) {
		ds_errf(err, "out of memory");
		goto out;
	}
	have_m = 1;     /* freeable whatever the outcome */
	if (ds_model_open(&m, pool, o->dir, &o->load, &pl, warn, sizeof warn, err) ||
	    ds_fwd_init(&b.f, &m, pool, &fo, err) ||
	    ds_kvcache_init(&b.kv, &m.hp, 1, n + 1, o->kv_type, err))
		goto out;
	for (i = 0; i < n; i++) {
		/* reproducible tokens; every entry wants logits, as a
		 * verification's do */
		b.tok[i] = (int32_t)((i * 2654435761u) % m.hp.n_vocab);
		b.pos[i] = (int32_t)i;
		b.want[i] = 1;
	}
	if (o->ctx) {
		ds_batch pre = { o->ctx, b.tok, b.pos, b.seq, NULL, NULL };

		if (ds_fwd_decode(b.f, &b.kv, &pre, err))
			goto out;
	}
	rc = vrounds(&b, o, row, err);
out:
	if (b.kv.data)
		ds_kvcache_free(&b.kv);
	ds_fwd_free(b.f);
	if (have_m)
		ds_model_free(&m);
	ds_placement_free(&pl);
	free(b.tok);
	free(b.pos);
	free(b.seq);
	free(b.want);
	ds_pool_free(pool);
	return rc;
}

double ds_verify_bound(const ds_verify_row *row, double a, uint32_t *best_k)
{
	double best = 1, e = 1, pw = a;
	uint32_t k;

	*best_k = 0;
	for (k = 1; k < row->max_e; k++) {
		e += pw;
		pw *= a;
		if (e / row->cost[k + 1] > best) {
			best = e / row->cost[k + 1];
			*best_k = k;
		}
	}
	return best;
}

/* runner.c - requests run, answers written in order (runner.h). */
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "runner.h"

struct ds_runner_req {
	size_t index;
	ds_tok_ids ids;            /* the prompt */
	ds_tok_ids gen;            /* generated, stop ids excluded */
	char *text;                /* the answer's text (JSON lines, chat) */
	size_t n_text, cap_text;
	ds_textout to;
	enum ds_finish why;
	ds_req_stats st;
	ds_runner *r;
};

typedef struct ds_runner_req rq;

void ds_runner_init(ds_runner *r, ds_session *s, const ds_runner_opts *o)
{
	memset(r, 0, sizeof *r);
	r->s = s;
	r->o = *o;
	ds_outq_init(&r->oq, o->text, o->logits, s->n_vocab * sizeof(float));
}

static void rq_free(rq *q)
{
	ds_tok_ids_free(&q->ids);
	ds_tok_ids_free(&q->gen);
	free(q->text);
	ds_textout_free(&q->to);
	free(q);
}

void ds_runner_free(ds_runner *r)
{
	size_t i;

	/* a request's end may still call back into the runner */
	ds_sched_free(r->s->sched);
	r->s->sched = NULL;
	for (i = 0; i < r->n; i++)
		if (r->rq[i] != NULL)
			rq_free(r->rq[i]);
	free(r->rq);
	free(r->last);
	ds_outq_free(&r->oq);
	memset(r, 0, sizeof *r);
}

/* The first error inside a callback is kept for ds_runner_run. */
static void fail(ds_runner *r, const ds_err *e)
{
	if (!r->bad)
		r->err = *e;
	r->bad = 1;
}

/* ---- output ------------------------------------------------------------------------- */

static void out_bytes(rq *q, const char *s, size_t n)
{
	ds_outq_text(&q->r->oq, q->index, s, n);
}

/* A JSON line's object (ds-run(1) names its fields). */
static json_t *jsonl_row(const rq *q)
{
	double pm = q->ids.n ? (q->st.t_prompt - q->st.t_start) * 1e3 : 0;
	double gm = q->ids.n ? (q->st.t_end - q->st.t_prompt) * 1e3 : 0;
	json_t *toks = json_array(), *o;
	size_t i;

	for (i = 0; toks && i < q->gen.n; i++)
		json_array_append_new(toks, json_integer(q->gen.v[i]));
	o = json_pack("{s:I, s:o*, s:o*, s:s, s:I, s:I, s:I}", "index", (json_int_t)q->index,
		      "tokens", toks, "text", q->r->s->tok ? ds_json_text(q->text, q->n_text)
							   : json_null(),
		      "finish_reason", ds_finish_name(q->why),
		      "prompt_tokens", (json_int_t)q->ids.n,
		      "cached_tokens", (json_int_t)q->st.cached_tokens,
		      "completion_tokens", (json_int_t)q->gen.n);
	json_object_set_new(o, "timings", json_pack(
		"{s:f, s:f, s:f, s:f}", "prompt_ms", pm, "predicted_ms", gm,
		"prompt_per_second", pm > 0 ? q->ids.n / (pm / 1e3) : 0,
		"predicted_per_second", gm > 0 && q->gen.n > 1 ? (q->gen.n - 1) / (gm / 1e3) : 0));
	return o;
}

/* The answer's closing output: the newline of the text or ids, or the
 * JSON object. */
static void out_final(rq *q)
{
	json_t *o;
	char *s;

	if (q->r->o.out != DS_RUN_JSONL) {
		out_bytes(q, "\n", 1);
		return;
	}
	o = jsonl_row(q);
	s = o ? json_dumps(o, DS_JSON_FLAGS) : NULL;
	if (s == NULL) {
		q->r->oq.failed = 1;
	} else {
		out_bytes(q, s, strlen(s));
		out_bytes(q, "\n", 1);
	}
	free(s);
	json_decref(o);
}

/* Its output complete: the next ones may come out; the request goes. */
static void rq_done(rq *q)
{
	ds_runner *r = q->r;

	ds_outq_done(&r->oq, q->index);
	r->rq[q->index] = NULL;
	rq_free(q);
}

/* Text the stop strings let through: out (text mode) and kept. */
static void show(rq *q)
{
	const ds_textout *t = &q->to;

	if (q->r->o.out == DS_RUN_TEXT)
		out_bytes(q, t->shown, t->n_shown);
	if (t->n_shown == 0)
		return;
	if (ds_grow((void **)&q->text, &q->cap_text, q->n_text + t->n_shown + 1, 1)) {
		q->r->oq.failed = 1;
		return;
	}
	memcpy(q->text + q->n_text, t->shown, t->n_shown);
	q->n_text += t->n_shown;
	q->text[q->n_text] = '\0';
}

/* ---- scheduler callbacks ------------------------------------------------------------ */

static void cb_logits(void *u, size_t pos, const float *l, uint32_t n)
{
	rq *q = u;

	(void)pos;
	(void)n;
	ds_outq_row(&q->r->oq, q->index, l);
}

static int cb_token(void *u, int32_t t)
{
	rq *q = u;
	ds_runner *r = q->r;
	ds_err err;
	char b[16];
	int stop;

	if (ds_grow((void **)&q->gen.v, &q->gen.cap, q->gen.n + 1, sizeof *q->gen.v)) {
		r->oq.failed = 1;
		return 1;
	}
	q->gen.v[q->gen.n++] = t;
	if (r->o.out == DS_RUN_IDS) {
		snprintf(b, sizeof b, q->gen.n > 1 ? " %d" : "%d", t);
		out_bytes(q, b, strlen(b));
		return 0;
	}
	if (r->s->tok == NULL)
		return 0;
	if ((stop = ds_textout_push(&q->to, t, &err)) < 0) {
		fail(r, &err);
		return 1;
	}
	show(q);
	return stop;
}

static void account(ds_runner *r, const ds_req_stats *st)
{
	r->tot_prompt += st->prompt_tokens;
	r->tot_gen += st->completion_tokens;
	r->spec_drafted += st->spec_drafted;
	r->spec_accepted += st->spec_accepted;
	r->spec_steps += st->spec_steps;
	r->mask_steps += st->mask_steps;
	r->mask_s += st->mask_s;
	if (st->prompt_tokens) {
		r->t_pre += st->t_prompt - st->t_start;
		r->t_dec += st->t_end - st->t_prompt;
		r->n_dec += st->completion_tokens ? st->completion_tokens - 1 : 0;
	}
	if (r->t_first == 0 || st->t_start < r->t_first)
		r->t_first = st->t_start;
	r->t_last = st->t_end;
}

/* The answer's text becomes r->last (the chat history's next turn). */
static void keep_last(rq *q)
{
	ds_runner *r = q->r;

	free(r->last);
	r->last = q->text;
	r->n_last = q->n_text;
	q->text = NULL;
	q->n_text = q->cap_text = 0;
}

static void cb_done(void *u, enum ds_finish why, const ds_req_stats *st)
{
	rq *q = u;
	ds_runner *r = q->r;
	ds_err err;

	q->why = why;
	q->st = *st;
	if (r->s->tok != NULL && r->o.out != DS_RUN_IDS && !q->to.stop_hit) {
		if (ds_textout_finish(&q->to, &err))
			fail(r, &err);
		show(q);
	}
	out_final(q);
	if (r->o.on_done)
		r->o.on_done(r->o.user, q->index, why, st);
	account(r, st);
	keep_last(q);
	rq_done(q);
}

/* ---- requests -------------------------------------------------------------------------- */

int ds_runner_add(ds_runner *r, ds_tok_ids *ids, ds_err *err)
{
	rq *q = calloc(1, sizeof *q);
	long i = ds_outq_add(&r->oq);

	if (q == NULL || i < 0 || ds_grow((void **)&r->rq, &r->cap, r->n + 1, sizeof *r->rq)) {
		free(q);
		ds_tok_ids_free(ids);
		return ds_errf(err, "out of memory");
	}
	DS_ASSERT((size_t)i == r->n);
	q->index = r->n;
	q->ids = *ids;
	q->r = r;
	r->rq[r->n++] = q;
	memset(ids, 0, sizeof *ids);
	return 0;
}

static int submit(ds_runner *r, rq *q, ds_err *err)
{
	int32_t stops[DS_SESSION_MAX_STOPS + 1];
	ds_req req = {
		.prompt = q->ids.v, .n_prompt = q->ids.n, .sp = r->o.sp,
		.n_predict = r->o.n_predict, .stop_ids = stops,
		.n_stop_ids = ds_session_stops(r->s, r->o.chat, stops),
		.all_logits = r->o.logits != NULL,
		.cb = { .on_logits = cb_logits, .on_token = cb_token,
			.on_done = cb_done, .user = q },
		.grammar = r->o.grammar,
	};

	if (r->s->tok != NULL &&
	    ds_textout_init(&q->to, r->s->tok, r->o.stops, r->o.n_stops, err))
		return -1;
	if (req.grammar && ds_session_gvocab(r->s, &req.gvocab, err))
		return -1;
	if (q->ids.n == 0) {        /* an empty line: an empty answer */
		q->why = DS_FINISH_LENGTH;
		out_final(q);
		rq_done(q);
		return 0;
	}
	return ds_sched_submit(r->s->sched, &req, NULL, err);
}

int ds_runner_run(ds_runner *r, ds_err *err)
{
	for (; r->next < r->n; r->next++)
		if (r->rq[r->next] != NULL && submit(r, r->rq[r->next], err))
			return ds_err_prefix(err, "line %zu", r->next + 1);
	if (ds_sched_drain(r->s->sched, err))
		return -1;
	if (r->oq.failed)
		return ds_errf(err, "write error on the output");
	if (r->bad) {
		*err = r->err;
		return -1;
	}
	return 0;
}

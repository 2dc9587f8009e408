/*
 * engine.c - the model behind ds-serve (serve_int.h): loading, the driver
 * thread, prompts, and jobs fed by the scheduler's callbacks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include "serve_int.h"

static void logf_(const ds_eng *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void logf_(const ds_eng *e, const char *fmt, ...)
{
	char line[600];
	va_list ap;

	if (e->o->log == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	e->o->log(e->o->log_user, line);
}

/* ---- loading ------------------------------------------------------------------------ */

/* DIR/tokenizer.bin: answers are text, so the tokenizer is needed. */
static int load_tokenizer(ds_eng *e, ds_err *err)
{
	char *p = ds_path_join(e->o->model_dir, "tokenizer.bin");
	int rc;

	if (p == NULL)
		return ds_errf(err, "out of memory");
	if (access(p, F_OK) != 0)
		rc = ds_errf(err, "%s: no tokenizer (ds-serve needs the model's "
			     "tokenizer: convert it with ds-convert)", p);
	else
		rc = ds_tok_load(&e->tok, p, err);
	free(p);
	return rc;
}

static void add_stop_id(ds_eng *e, int64_t id)
{
	size_t i;

	if (id < 0 || id >= e->n_vocab || e->n_stop_ids >= DS_ENG_MAX_STOP_IDS)
		return;
	for (i = 0; i < e->n_stop_ids; i++)
		if (e->stop_ids[i] == id)
			return;
	e->stop_ids[e->n_stop_ids++] = (int32_t)id;
}

static void piece_str(const ds_tok *t, int32_t id, char *out, size_t cap)
{
	const char *p;
	size_t l;

	out[0] = '\0';
	if (id >= 0 && (p = ds_tok_piece(t, id, &l)) != NULL && l < cap) {
		memcpy(out, p, l);
		out[l] = '\0';
	}
}

/* End tokens, and the chat template: model.meta's, else the tokenizer's.
 * A model without one answers chat requests 400. */
static void stops_and_template(ds_eng *e)
{
	const json_t *ct = json_object_get(e->m.meta, "chat_template");
	const char *name = json_is_string(ct) ? json_string_value(ct) : NULL;
	ds_tok_info ti;
	uint32_t i;

	ds_tok_get_info(e->tok, &ti);
	for (i = 0; i < e->m.hp.n_eos; i++)
		add_stop_id(e, e->m.hp.eos_ids[i]);
	add_stop_id(e, ti.eos);
	add_stop_id(e, ti.eot);
	piece_str(e->tok, ti.bos, e->bos, sizeof e->bos);
	piece_str(e->tok, ti.eos, e->eos, sizeof e->eos);
	if (name == NULL && ti.chat_template && ti.chat_template[0])
		name = ti.chat_template;
	e->turn_end = -1;
	if (name == NULL || ds_chat_parse(name, &e->tmpl, NULL) != 0)
		return;
	e->have_tmpl = 1;
	if (ds_chat_end_marker(e->tmpl) != NULL) {
		const char *mk = ds_chat_end_marker(e->tmpl);

		e->turn_end = ds_tok_piece_id(e->tok, mk, strlen(mk));
	}
}

static int load_model(ds_eng *e, ds_err *err)
{
	const ds_srv_opts *o = e->o;
	ds_load_opts lo = { .hugepages = o->hugepages };
	char warn[256];
	int rc;

	if (o->numa && ds_numa_parse(o->numa, &lo.numa, err))
		return -1;
	rc = ds_model_open(&e->m, e->pool, o->model_dir, &lo, &e->pl, warn,
			   sizeof warn, err);
	e->have_model = 1; /* freeable whatever the outcome */
	if (rc == 0 && warn[0])
		logf_(e, "warning: --hugepages: %s", warn);
	return rc;
}

static void *driver(void *arg)
{
	ds_eng *e = arg;
	ds_err err;

	while (ds_sched_wait(e->sched))
		if (ds_sched_step(e->sched, &err) < 0)
			logf_(e, "forward pass failed: %s", err.msg);
	return NULL;
}

int ds_eng_load(ds_eng *e, const ds_srv_opts *o, ds_metrics *mt, ds_err *err)
{
	ds_pool_opts po = { o->threads, o->cpus, 0 };
	ds_fwd_opts fo = { 0 };
	uint32_t train;

	e->o = o;
	e->metrics = mt;
	if (ds_pool_init(&e->pool, &po, err) || load_model(e, err) ||
	    load_tokenizer(e, err))
		return -1;
	e->n_vocab = e->m.hp.n_vocab;
	train = e->m.hp.n_ctx_train;
	e->n_ctx = o->ctx_size ? o->ctx_size : train && train < 4096 ? train : 4096;
	stops_and_template(e);
	fo.max_batch = o->parallel + 1 > 256 ? o->parallel + 1 : 256;
	if (ds_fwd_init(&e->fwd, &e->m, e->pool, &fo, err) ||
	    ds_kvcache_init(&e->kv, &e->m.hp, o->parallel, e->n_ctx, DS_KV_F16,
			    err))
		return -1;
	e->have_kv = 1;
	if (ds_sched_init(&e->sched, e->fwd, &e->kv, NULL, err))
		return -1;
	e->limit = (size_t)o->parallel + o->queue;
	if (pthread_create(&e->driver, NULL, driver, e) != 0)
		return ds_errf(err, "cannot start the scheduler thread");
	e->driver_on = 1;
	return 0;
}

void ds_eng_stop(ds_eng *e)
{
	if (e->driver_on) {
		ds_sched_stop(e->sched);
		pthread_join(e->driver, NULL);
		e->driver_on = 0;
	}
	pthread_mutex_lock(&e->smu);
	ds_sched_free(e->sched);    /* on_done(cancelled) for what is left */
	e->sched = NULL;
	pthread_mutex_unlock(&e->smu);
}

void ds_eng_free(ds_eng *e)
{
	ds_eng_stop(e);
	if (e->have_kv)
		ds_kvcache_free(&e->kv);
	ds_fwd_free(e->fwd);
	if (e->tok)
		ds_tok_free(e->tok);
	if (e->have_model)
		ds_model_free(&e->m);
	ds_placement_free(&e->pl);
	if (e->pool)
		ds_pool_free(e->pool);
	e->have_kv = e->have_model = 0;
	e->fwd = NULL;
	e->tok = NULL;
	e->pool = NULL;
}

void ds_eng_counts(ds_eng *e, size_t *queued, size_t *running)
{
	*queued = *running = 0;
	pthread_mutex_lock(&e->smu);
	if (e->sched)
		ds_sched_counts(e->sched, queued, running);
	pthread_mutex_unlock(&e->smu);
}

/* ---- prompts ----------------------------------------------------------------------------- */

static int encode(ds_eng *e, const char *text, unsigned flags, int32_t **ids,
		  size_t *n, ds_api_err *ae)
{
	ds_tok_ids out = { 0 };
	ds_err err;

	if (ds_tok_encode(e->tok, text, strlen(text), flags, &out, &err)) {
		ds_tok_ids_free(&out);
		return ds_api_fail(ae, 400, NULL, "%s", err.msg);
	}
	*ids = out.v;
	*n = out.n;
	return 0;
}

static int render_chat(ds_eng *e, const ds_api_req *r, int32_t **ids,
		       size_t *n, ds_api_err *ae)
{
	char *text;
	ds_err err;
	int rc;

	if (!e->have_tmpl)
		return ds_api_fail(ae, 400, "messages", "messages: the model names "
				   "no chat template: use /v1/completions");
	if (ds_chat_render(e->tmpl, r->msgs, r->n_msgs, 1, e->bos[0] ? e->bos : NULL,
			   e->eos[0] ? e->eos : NULL, &text, &err))
		return ds_api_fail(ae, 400, "messages", "messages: %s", err.msg);
	rc = encode(e, text, DS_TOK_NO_BOS, ids, n, ae);   /* the template has it */
	free(text);
	return rc;
}

int ds_eng_prompt(ds_eng *e, const ds_api_req *r, int32_t **ids, size_t *n,
		  ds_api_err *ae)
{
	const char *param = r->kind == DS_API_CHAT ? "messages" : "prompt";
	int rc;

	*ids = NULL;
	*n = 0;
	if (r->kind == DS_API_CHAT) {
		rc = render_chat(e, r, ids, n, ae);
	} else if (r->ids != NULL) {
		*ids = malloc(r->n_ids * sizeof **ids);
		if (*ids == NULL)
			return ds_api_fail(ae, 500, NULL, "out of memory");
		memcpy(*ids, r->ids, r->n_ids * sizeof **ids);
		*n = r->n_ids;
		rc = 0;
	} else {
		rc = encode(e, r->prompt, 0, ids, n, ae);
	}
	if (rc == 0 && *n == 0)
		rc = ds_api_fail(ae, 400, param, "%s: no tokens", param);
	else if (rc == 0 && *n > e->n_ctx)
		rc = ds_api_fail(ae, 400, param, "%s: %zu tokens, more than the "
				 "context (%u)", param, *n, e->n_ctx);
	if (rc) {
		free(*ids);
		*ids = NULL;
	}
	return rc;
}

int ds_eng_detok(ds_eng *e, const int32_t *ids, size_t n, ds_tok_text *out,
		 ds_err *err)
{
	ds_tok_stream ts;
	size_t i;

	ds_tok_stream_init(&ts, e->tok, 0);
	for (i = 0; i < n; i++) {
		size_t before = out->n;

		if (ds_tok_stream_push(&ts, ids[i], out, NULL))
			out->n = before;    /* no string: no text (as answers) */
	}
	if (out->s)
		out->s[out->n] = '\0';
	return ds_tok_stream_finish(&ts, out, err);
}

/* ---- jobs ------------------------------------------------------------------------------ */

static void wake(ds_job *j)
{
	uint64_t one = 1;

	if (write(j->efd, &one, sizeof one) < 0 && errno != EAGAIN)
		j->failed = 1;
}

/* With return_tokens, the ids (under j->mu). */
static void keep_id(ds_job *j, int32_t id)
{
	if (!j->keep_ids || id < 0)
		return;
	if (j->n_ids == j->cap_ids) {
		size_t c = j->cap_ids ? 2 * j->cap_ids : 64;
		int32_t *p = realloc(j->ids, c * sizeof *p);

		if (p == NULL) {
			j->failed = 1;
			return;
		}
		j->ids = p;
		j->cap_ids = c;
	}
	j->ids[j->n_ids++] = id;
}

/* Append shown text, and the id (-1: none) (driver thread). */
static void append(ds_job *j, const char *s, size_t n, int32_t id)
{
	pthread_mutex_lock(&j->mu);
	keep_id(j, id);
	if (n > 0 && j->n_text + n + 1 > j->cap_text) {
		size_t c = j->cap_text ? j->cap_text : 256;
		char *p;

		while (c < j->n_text + n + 1)
			c *= 2;
		p = realloc(j->text, c);
		if (p == NULL) {
			j->failed = 1;
			n = 0;
		} else {
			j->text = p;
			j->cap_text = c;
		}
	}
	if (n > 0) {
		memcpy(j->text + j->n_text, s, n);
		j->n_text += n;
		j->text[j->n_text] = '\0';
	}
	pthread_mutex_unlock(&j->mu);
}

/* A token's text through the stop strings; 1 when a stop string ended it.
 * An id the tokenizer has no string for (a model's vocabulary may be
 * padded past the tokenizer's) adds no text. */
static int cb_token(void *u, int32_t t)
{
	ds_job *j = u;
	ds_tok_text piece = { 0 };
	char *shown = NULL;
	size_t n_shown = 0, cap = 0;
	ds_err err;
	int stop = 0;

	if (ds_tok_stream_push(&j->ts, t, &piece, &err))
		piece.n = 0;
	if ((stop = ds_stopper_push(&j->stopper, piece.s ? piece.s : "", piece.n,
				    &shown, &n_shown, &cap, &err)) < 0) {
		j->failed = 1;
		stop = 1;
	}
	append(j, shown, n_shown, t);
	free(shown);
	ds_tok_text_free(&piece);
	ds_metrics_tokens(j->eng->metrics, 1, ds_now_s());
	if (n_shown > 0)
		wake(j);
	return j->stop_hit = stop;
}

/* What the decoder and the stop strings still hold. */
static void text_tail(ds_job *j)
{
	ds_tok_text piece = { 0 };
	char *shown = NULL;
	size_t n_shown = 0, cap = 0;
	ds_err err;

	if (ds_tok_stream_finish(&j->ts, &piece, &err) ||
	    ds_stopper_push(&j->stopper, piece.s ? piece.s : "", piece.n, &shown,
			    &n_shown, &cap, &err) < 0 ||
	    ds_stopper_flush(&j->stopper, &shown, &n_shown, &cap, &err))
		j->failed = 1;
	append(j, shown, n_shown, -1);
	free(shown);
	ds_tok_text_free(&piece);
}

static void cb_done(void *u, enum ds_finish why, const ds_req_stats *st)
{
	ds_job *j = u;
	ds_eng *e = j->eng;
	double ttft = st->completion_tokens ? st->t_prompt - j->t_arrival : -1;

	if (!j->stop_hit)
		text_tail(j);
	pthread_mutex_lock(&j->mu);
	j->done = 1;
	j->why = why;
	j->st = *st;
	pthread_mutex_unlock(&j->mu);
	ds_metrics_finish(e->metrics, why, j->n_prompt, st->completion_tokens,
			  st->t_end - j->t_arrival, ttft);
	atomic_fetch_sub(&e->inflight, 1);
	wake(j);
	ds_job_release(j);
}

static uint64_t fresh_seed(ds_eng *e)
{
	uint64_t s;

	if (getrandom(&s, sizeof s, GRND_NONBLOCK) != sizeof s)
		s = ds_now_ns() ^ ((uint64_t)getpid() << 32);
	return s ^ ++e->seed_ctr * 0x9e3779b97f4a7c15ull;
}

static ds_job *job_new(ds_eng *e, const ds_api_req *r, size_t n,
		       double t_arrival)
{
	ds_job *j = calloc(1, sizeof *j);

	if (j == NULL)
		return NULL;
	j->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (j->efd < 0 || ds_stopper_init(&j->stopper, r->stops, r->n_stops, NULL)) {
		if (j->efd >= 0)
			close(j->efd);
		free(j);
		return NULL;
	}
	pthread_mutex_init(&j->mu, NULL);
	j->refs = 2;                /* the connection's and the scheduler's */
	j->eng = e;
	j->stream = r->stream;
	j->keep_ids = r->return_tokens && !r->stream;
	j->t_arrival = t_arrival;
	j->n_prompt = n;
	ds_tok_stream_init(&j->ts, e->tok, 0);
	return j;
}

static void job_free(ds_job *j)
{
	ds_stopper_free(&j->stopper);
	pthread_mutex_destroy(&j->mu);
	close(j->efd);
	free(j->text);
	free(j->ids);
	free(j);
}

/* The request as the scheduler takes it; max_tokens is clamped to what the
 * context leaves: tokens are sampled from positions n-1 .. n_ctx-1. */
static void make_req(ds_eng *e, const ds_api_req *r, const int32_t *ids,
		     size_t n, ds_job *j, int32_t *stops, ds_req *q)
{
	int64_t room = (int64_t)e->n_ctx - (int64_t)n + 1;

	memset(q, 0, sizeof *q);
	q->prompt = ids;
	q->n_prompt = n;
	q->sp = r->sp;
	q->n_predict = r->max_tokens < 0 ? -1 : r->max_tokens < room ? r->max_tokens
								    : room;
	if (!r->ignore_eos) {
		memcpy(stops, e->stop_ids, e->n_stop_ids * sizeof *stops);
		q->n_stop_ids = e->n_stop_ids;
		if (r->kind == DS_API_CHAT && e->turn_end >= 0)
			stops[q->n_stop_ids++] = e->turn_end;
	}
	q->stop_ids = stops;
	q->cb.on_token = cb_token;
	q->cb.on_done = cb_done;
	q->cb.user = j;
}

int ds_job_submit(ds_eng *e, const ds_api_req *r, const int32_t *ids,
		  size_t n, double t_arrival, ds_job **out, ds_api_err *ae)
{
	int32_t stops[DS_ENG_MAX_STOP_IDS + 1];
	ds_job *j = job_new(e, r, n, t_arrival);
	ds_req q;
	ds_err err;
	int rc = 0;

	*out = NULL;
	if (j == NULL)
		return ds_api_fail(ae, 500, NULL, "out of memory");
	make_req(e, r, ids, n, j, stops, &q);
	pthread_mutex_lock(&e->smu);
	if (!r->seed_set)
		q.sp.seed = fresh_seed(e);
	if (e->sched == NULL) {
		rc = ds_api_fail(ae, 503, NULL, "the server is shutting down");
	} else if (atomic_load(&e->inflight) >= e->limit) {
		rc = ds_api_fail(ae, 503, NULL, "all %u slots are busy and %zu "
				 "requests are queued: retry later", e->o->parallel,
				 e->limit - e->o->parallel);
		ae->code = "queue_full";
	} else {
		/* counted first: the job may be done before submit returns */
		atomic_fetch_add(&e->inflight, 1);
		if (ds_sched_submit(e->sched, &q, &j->id, &err)) {
			atomic_fetch_sub(&e->inflight, 1);
			rc = ds_api_fail(ae, 400, r->kind == DS_API_CHAT ? "messages"
					 : "prompt", "%s", err.msg);
		}
	}
	pthread_mutex_unlock(&e->smu);
	if (rc) {
		job_free(j);
		return -1;
	}
	*out = j;
	return 0;
}

void ds_job_cancel(ds_job *j)
{
	ds_eng *e = j->eng;
	int done;

	pthread_mutex_lock(&j->mu);
	done = j->done;
	pthread_mutex_unlock(&j->mu);
	if (done)
		return;
	pthread_mutex_lock(&e->smu);
	if (e->sched)
		ds_sched_cancel(e->sched, j->id);
	pthread_mutex_unlock(&e->smu);
}

void ds_job_release(ds_job *j)
{
	int last;

	pthread_mutex_lock(&j->mu);
	last = --j->refs == 0;
	pthread_mutex_unlock(&j->mu);
	if (last)
		job_free(j);
}

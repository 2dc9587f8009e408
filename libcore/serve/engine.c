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

#include "dist/dist.h"
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

/* The session's warnings (prompt cache files ignored). */
static void warn_line(void *user, const char *line)
{
	logf_(user, "warning: %s", line);
}

static void *driver(void *arg)
{
	ds_eng *e = arg;
	ds_err err;

	while (ds_sched_wait(e->s.sched))
		if (ds_sched_step(e->s.sched, &err) < 0)
			logf_(e, "forward pass failed: %s", err.msg);
	return NULL;
}

void ds_srv_session_opts(const ds_srv_opts *o, ds_session_opts *so)
{
	*so = (ds_session_opts){
		.dir = o->model_dir, .threads = o->threads, .cpus = o->cpus,
		.load = { .hugepages = o->hugepages }, .ctx_size = o->ctx_size,
		.slots = o->parallel, .batch = o->batch, .kv_type = DS_KV_F16,
		.tok = DS_SESS_TOK_NEED,
		.tok_why = "ds-serve needs", .chat_template = o->chat_template,
		.chat_template_file = o->chat_template_file,
		.cache_mib = o->cache_mib, .cache_dir = o->cache_dir,
		.warn = warn_line, .spec_k = o->spec_k, .draft_dir = o->draft,
	};
	/* checked when the options were read; the ranks' batches must be
	 * sized alike */
	if (o->spec && ds_spec_parse(o->spec, &so->spec, NULL))
		so->spec = DS_SPEC_NONE;
}

int ds_eng_load(ds_eng *e, const ds_srv_opts *o, ds_metrics *mt, ds_err *err)
{
	ds_session_opts so;

	ds_srv_session_opts(o, &so);
	so.warn_user = e;
	e->o = o;
	e->metrics = mt;
	if (o->numa && ds_numa_parse(o->numa, &so.load.numa, err))
		return -1;
	/* --mpi: the model split by the caller (ds_dist_model) before the
	 * server started, when the other ranks did */
	if (o->dist != NULL) {
		ds_dist_load_opts(o->dist, &so.load);
		so.ep = ds_dist_ep(o->dist);
	}
	if (o->spec && ds_spec_parse(o->spec, &so.spec, err))
		return ds_err_prefix(err, "--spec %s", o->spec);
	e->have_s = 1;      /* closable whatever the outcome */
	if (ds_session_open(&e->s, &so, err))
		return -1;
	if (e->s.warn[0])
		logf_(e, "warning: --hugepages: %s", e->s.warn);
	e->limit = (size_t)o->parallel + o->queue;
	if (pthread_create(&e->driver, NULL, driver, e) != 0)
		return ds_errf(err, "cannot start the scheduler thread");
	e->driver_on = 1;
	return 0;
}

void ds_eng_stop(ds_eng *e)
{
	if (e->driver_on) {
		ds_sched_stop(e->s.sched);
		pthread_join(e->driver, NULL);
		e->driver_on = 0;
	}
	pthread_mutex_lock(&e->smu);
	ds_sched_free(e->s.sched);  /* on_done(cancelled) for what is left */
	e->s.sched = NULL;
	pthread_mutex_unlock(&e->smu);
}

void ds_eng_free(ds_eng *e)
{
	ds_eng_stop(e);
	if (e->have_s)
		ds_session_close(&e->s);
	e->have_s = 0;
}

void ds_eng_counts(ds_eng *e, size_t *queued, size_t *running)
{
	*queued = *running = 0;
	pthread_mutex_lock(&e->smu);
	if (e->s.sched)
		ds_sched_counts(e->s.sched, queued, running);
	pthread_mutex_unlock(&e->smu);
}

/* ---- prompts ----------------------------------------------------------------------------- */

/* A chat's conversation with its tools (ds_tool_messages), encoded. */
static int chat_ids(ds_eng *e, const ds_api_req *r, ds_tok_ids *ids,
		    int *think, ds_err *err)
{
	json_t *m, *v;
	ds_api_err ae;
	int rc;

	if (ds_tool_messages(r, &e->s.tpl, &m, &v, &ae))
		return ds_errf(err, "%s", ae.msg);
	rc = ds_session_chat(&e->s, m, v, ids, think, err);
	json_decref(m);
	json_decref(v);
	return rc;
}

int ds_eng_render(ds_eng *e, const ds_api_req *r, char **text, size_t *len,
		  ds_err *err)
{
	json_t *m, *v;
	ds_api_err ae;
	int rc;

	if (ds_tool_messages(r, &e->s.tpl, &m, &v, &ae))
		return ds_errf(err, "%s", ae.msg);
	rc = ds_session_render(&e->s, m, v, r->add_gen, text, len, err);
	json_decref(m);
	json_decref(v);
	return rc;
}

static int prompt_ids(ds_eng *e, const ds_api_req *r, ds_tok_ids *ids,
		      int *think, ds_err *err)
{
	memset(ids, 0, sizeof *ids);
	*think = 0;
	if (r->kind == DS_API_CHAT)
		return chat_ids(e, r, ids, think, err);
	if (r->ids == NULL)
		return ds_session_encode(&e->s, r->prompt, ids, err);
	if (ds_grow((void **)&ids->v, &ids->cap, r->n_ids, sizeof *ids->v))
		return ds_errf(err, "out of memory");
	memcpy(ids->v, r->ids, r->n_ids * sizeof *ids->v);
	ids->n = r->n_ids;
	return 0;
}

int ds_eng_prompt(ds_eng *e, const ds_api_req *r, int32_t **out, size_t *n,
		  int *think, ds_api_err *ae)
{
	const char *param = r->kind == DS_API_CHAT ? "messages" : "prompt";
	ds_tok_ids ids;
	ds_err err;
	int rc = 0;

	*out = NULL;
	*n = 0;
	if (r->kind == DS_API_CHAT && !e->s.have_tmpl)
		return ds_api_fail(ae, 400, "messages", "messages: %s: use "
				   "/v1/completions, or --chat-template", e->s.tpl_err);
	if (prompt_ids(e, r, &ids, think, &err))
		rc = ds_api_fail(ae, 400, param, "%s: %s", param, err.msg);
	else if (ids.n == 0)
		rc = ds_api_fail(ae, 400, param, "%s: no tokens", param);
	else if (ids.n > e->s.n_ctx)
		rc = ds_api_fail(ae, 400, param, "%s: %zu tokens, more than the "
				 "context (%u)", param, ids.n, e->s.n_ctx);
	if (rc) {
		ds_tok_ids_free(&ids);
		return -1;
	}
	*out = ids.v;
	*n = ids.n;
	return 0;
}

int ds_eng_grammar(ds_eng *e, ds_api_req *r, ds_grammar **g,
		   const char **trigger, ds_api_err *ae)
{
	enum ds_tool_fmt f = e->s.tpl.tool_fmt;

	*g = NULL;
	*trigger = NULL;
	if (r->grammar != NULL) {
		*g = r->grammar;
		r->grammar = NULL;
		return 0;
	}
	if (r->tools == NULL || r->kind != DS_API_CHAT)
		return 0;
	/* with "none" too: a schema the compiler refuses is refused */
	if (ds_tool_grammar(r, f, g, ae))
		return -1;
	if (r->tool_choice == DS_TOOLS_NONE) {
		ds_grammar_free(*g);
		*g = NULL;
	} else if (r->tool_choice == DS_TOOLS_AUTO) {
		*trigger = ds_tool_trigger(f);
	}
	return 0;
}

int ds_eng_detok(ds_eng *e, const int32_t *ids, size_t n, ds_tok_text *out,
		 ds_err *err)
{
	ds_tok_stream ts;
	size_t i;

	ds_tok_stream_init(&ts, e->s.tok, 0);
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

/* Append n bytes to a growing buffer (under j->mu); 0 when out of memory. */
static int add_bytes(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
	if (n == 0)
		return 1;
	if (ds_grow((void **)buf, cap, *len + n + 1, 1))
		return 0;
	memcpy(*buf + *len, s, n);
	*len += n;
	(*buf)[*len] = '\0';
	return 1;
}

/* Append shown text and reasoning, and the id (-1: none) (driver thread). */
static void append(ds_job *j, const char *s, size_t n, const char *th,
		   size_t nth, int32_t id)
{
	pthread_mutex_lock(&j->mu);
	keep_id(j, id);
	if (!add_bytes(&j->text, &j->n_text, &j->cap_text, s, n) ||
	    !add_bytes(&j->think, &j->n_think, &j->cap_think, th, nth))
		j->failed = 1;
	pthread_mutex_unlock(&j->mu);
}

/* What the stop strings let through: split into reasoning and content
 * when asked, then to the job; 1 when there is something to show. */
static int shown(ds_job *j, int32_t id, int last)
{
	ds_reason_out *o = &j->ro;
	ds_err err;
	int rc = 0;

	if (!j->split) {
		append(j, j->to.shown, j->to.n_shown, NULL, 0, id);
		return j->to.n_shown > 0;
	}
	o->n_think = o->n_content = 0;
	if (ds_reason_push(&j->rs, j->to.shown, j->to.n_shown, o, &err) ||
	    (last && ds_reason_finish(&j->rs, o, &err)))
		j->failed = 1;
	rc = o->n_think + o->n_content > 0;
	append(j, o->content, o->n_content, o->think, o->n_think, id);
	return rc;
}

/* A token's text through the stop strings; 1 when a stop string ended it.
 * An id the tokenizer has no string for (a model's vocabulary may be
 * padded past the tokenizer's) adds no text. */
static int cb_token(void *u, int32_t t)
{
	ds_job *j = u;
	ds_err err;
	int stop = ds_textout_push(&j->to, t, &err);

	if (stop < 0) {
		j->failed = 1;
		stop = 1;
	}
	ds_metrics_tokens(j->eng->metrics, 1, ds_now_s());
	/* a stream with return_tokens sends each id at once, text or not */
	if (shown(j, t, 0) || (j->keep_ids && j->stream))
		wake(j);
	return stop;
}

/* What the decoder and the stop strings still hold. */
static void text_tail(ds_job *j)
{
	ds_err err;

	if (ds_textout_finish(&j->to, &err))
		j->failed = 1;
	shown(j, -1, 1);
}

static void cb_done(void *u, enum ds_finish why, const ds_req_stats *st)
{
	ds_job *j = u;
	ds_eng *e = j->eng;
	double ttft = st->completion_tokens ? st->t_prompt - j->t_arrival : -1;

	if (!j->to.stop_hit)
		text_tail(j);
	else if (j->split) {
		j->to.n_shown = 0;  /* shown already: the splitter's held text */
		shown(j, -1, 1);
	}
	pthread_mutex_lock(&j->mu);
	j->done = 1;
	j->why = why;
	j->st = *st;
	pthread_mutex_unlock(&j->mu);
	ds_metrics_finish(e->metrics, why, j->n_prompt, st->cached_tokens,
			  st->completion_tokens, st->t_end - j->t_arrival, ttft);
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

/* The request's reasoning_format, else the server's, else the template's
 * way: apart for templates that know <think>. */
static int splits(const ds_eng *e, const ds_api_req *r)
{
	enum ds_reasoning f = r->reasoning != DS_REASON_AUTO ? r->reasoning
							      : e->o->reasoning;

	if (r->kind != DS_API_CHAT)
		return 0;
	if (f == DS_REASON_AUTO)
		return e->s.have_tmpl && e->s.tpl.think;
	return f == DS_REASON_DEEPSEEK;
}

static ds_job *job_new(ds_eng *e, const ds_api_req *r, size_t n, int think,
		       double t_arrival)
{
	ds_job *j = calloc(1, sizeof *j);

	if (j == NULL)
		return NULL;
	j->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (j->efd < 0 || ds_textout_init(&j->to, e->s.tok, r->stops, r->n_stops, NULL)) {
		if (j->efd >= 0)
			close(j->efd);
		free(j);
		return NULL;
	}
	pthread_mutex_init(&j->mu, NULL);
	j->refs = 2;                /* the connection's and the scheduler's */
	j->eng = e;
	j->stream = r->stream;
	j->keep_ids = r->return_tokens;
	j->t_arrival = t_arrival;
	j->n_prompt = n;
	j->split = splits(e, r);
	ds_reason_init(&j->rs, think);
	return j;
}

static void job_free(ds_job *j)
{
	ds_grammar_free(j->grammar);
	ds_textout_free(&j->to);
	ds_reason_free(&j->rs);
	ds_reason_out_free(&j->ro);
	free(j->think);
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
	int64_t room = (int64_t)e->s.n_ctx - (int64_t)n + 1;

	memset(q, 0, sizeof *q);
	q->prompt = ids;
	q->n_prompt = n;
	q->sp = r->sp;
	q->n_predict = r->max_tokens < 0 ? -1 : r->max_tokens < room ? r->max_tokens
								    : room;
	q->no_spec = !r->speculative;
	if (!r->ignore_eos)
		q->n_stop_ids = ds_session_stops(&e->s, r->kind == DS_API_CHAT, stops);
	q->stop_ids = stops;
	q->cb.on_token = cb_token;
	q->cb.on_done = cb_done;
	q->cb.user = j;
	q->grammar = j->grammar;
	q->trigger = j->trigger;
	q->n_trigger = j->trigger ? strlen(j->trigger) : 0;
}

int ds_job_submit(ds_eng *e, const ds_api_req *r, const int32_t *ids,
		  size_t n, int think, double t_arrival, ds_grammar *g,
		  const char *trigger, ds_job **out, ds_api_err *ae)
{
	int32_t stops[DS_SESSION_MAX_STOPS + 1];
	ds_job *j = job_new(e, r, n, think, t_arrival);
	ds_req q;
	ds_err err;
	int rc = 0;

	*out = NULL;
	if (j == NULL) {
		ds_grammar_free(g);
		return ds_api_fail(ae, 500, NULL, "out of memory");
	}
	j->grammar = g;
	j->trigger = trigger;
	j->tools_on = ds_api_tools_on(r);
	j->tool_fmt = e->s.tpl.tool_fmt;
	make_req(e, r, ids, n, j, stops, &q);
	if (g && ds_session_gvocab(&e->s, &q.gvocab, &err)) {
		job_free(j);
		return ds_api_fail(ae, 500, NULL, "%s", err.msg);
	}
	pthread_mutex_lock(&e->smu);
	if (!r->seed_set)
		q.sp.seed = fresh_seed(e);
	if (e->s.sched == NULL) {
		rc = ds_api_fail(ae, 503, NULL, "the server is shutting down");
	} else if (atomic_load(&e->inflight) >= e->limit) {
		rc = ds_api_fail(ae, 503, NULL, "all %u slots are busy and %zu "
				 "requests are queued: retry later", e->o->parallel,
				 e->limit - e->o->parallel);
		ae->code = "queue_full";
	} else {
		/* counted first: the job may be done before submit returns */
		atomic_fetch_add(&e->inflight, 1);
		if (ds_sched_submit(e->s.sched, &q, &j->id, &err)) {
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
	if (e->s.sched)
		ds_sched_cancel(e->s.sched, j->id);
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

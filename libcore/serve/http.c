/*
 * http.c - the HTTP side of ds-serve (serve.h) on libmicrohttpd.
 *
 * libmicrohttpd parses HTTP; we route, check the API key and the body
 * size, and answer.  It runs one thread per connection
 * (MHD_USE_THREAD_PER_CONNECTION), so a generation request may block its
 * own thread: in the access handler until the answer is whole, or in the
 * content reader between stream chunks.  Either way the thread sleeps in
 * poll() on the job's eventfd and on the connection's socket (POLLRDHUP),
 * so a client that closes its connection is noticed at once and its job
 * cancelled.
 *
 * libmicrohttpd closes a connection idle for --timeout seconds, counting
 * from its last socket activity, and checks that right after our
 * callbacks return: before answering after a long wait the timer is
 * restarted (setting the connection's timeout to 0 and back does that).
 *
 * A client that sends its headers a byte at a time is never idle: a
 * watchdog thread shuts down (shutdown(2), and libmicrohttpd then closes)
 * every connection that has not sent a whole request head within
 * --timeout of its accept or of the end of its previous request.  A slow
 * body is cut off by body_add.  The connections are tracked from
 * libmicrohttpd's connection notifications, whose "closed" comes before
 * the socket is closed, so the watchdog never touches a reused fd.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/json.h"
#include "serve_int.h"

struct ds_srv {
	ds_srv_opts o;
	char model_name[128];
	long long started;          /* Unix seconds */
	struct MHD_Daemon *d;
	unsigned port;
	ds_metrics *metrics;
	ds_eng eng;
	atomic_int ready;           /* the engine is loaded */
	atomic_int draining;        /* ds_srv_quiesce was called */
	atomic_int answering;       /* generation requests not yet completed */
	int quiesced;
	/* the connections, for the watchdog (see the top) */
	pthread_mutex_t cmu;
	pthread_cond_t ccv;
	struct conn *conns;         /* under cmu */
	int watching, stop_watch;   /* under cmu */
	pthread_t watch;
	uint32_t nonce;             /* answer ids: nonce + counter */
	atomic_ullong counter;
	char mhd_msg[256];          /* libmicrohttpd's last message */
};

/* One connection, from its accept to its close. */
typedef struct conn {
	struct conn *prev, *next;
	int fd;
	double t0;                  /* accepted, or its last request ended */
	int in_request;             /* its request head is in */
	int cut;                    /* shut down by the watchdog */
} conn;

/* One request, from its headers to the end of its answer. */
typedef struct rctx {
	atomic_int refs;            /* the connection's, a stream's reader */
	ds_srv *s;
	struct MHD_Connection *c;
	enum ds_ep ep;
	char method[8];
	char path[64];              /* for the log: printable, cut */
	char *body;
	size_t n_body, dropped;     /* bytes kept, bytes over --max-body */
	double t0;
	int status;
	ds_job *job;
	ds_api_req req;
	char id[48];
	long long created;
	char *out;                  /* stream bytes not yet given out */
	size_t n_out, off;
	int phase;                  /* stream: 0 start, 1 running, 2 ended */
	char *tb;                   /* stream with tools: the content so far */
	size_t n_tb, cap_tb, tb_sent;   /* and how much of it went out */
	int answering;              /* counted in s->answering */
} rctx;

static void slog(const ds_srv *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void slog(const ds_srv *s, const char *fmt, ...)
{
	char line[600];
	va_list ap;

	if (s->o.log == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	s->o.log(s->o.log_user, line);
}

static void rctx_unref(rctx *q)
{
	if (atomic_fetch_sub(&q->refs, 1) != 1)
		return;
	if (q->job)
		ds_job_release(q->job);
	ds_api_req_free(&q->req);
	free(q->body);
	free(q->out);
	free(q->tb);
	free(q);
}

/* Restart the idle timer (see the top). */
static void touch(rctx *q)
{
	if (q->s->o.timeout_s == 0)
		return;
	MHD_set_connection_option(q->c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
	MHD_set_connection_option(q->c, MHD_CONNECTION_OPTION_TIMEOUT,
				  q->s->o.timeout_s);
}

/* ---- answers ----------------------------------------------------------------------- */

static enum MHD_Result queue(rctx *q, int status, struct MHD_Response *r)
{
	enum MHD_Result rc;

	if (atomic_load(&q->s->draining))
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
	q->status = status;
	ds_metrics_answer(q->s->metrics, q->ep, status);
	touch(q);
	rc = MHD_queue_response(q->c, (unsigned)status, r);
	MHD_destroy_response(r);
	return rc;
}

/* body: malloc'd, taken (NULL: out of memory, answered 500); hname: one
 * more header, or NULL. */
static enum MHD_Result reply_with(rctx *q, int status, const char *ctype,
				  char *body, const char *hname, const char *hval)
{
	struct MHD_Response *r;

	if (body == NULL) {
		status = 500;
		ctype = "application/json";
		hname = NULL;
		body = strdup("{\"error\":{\"message\":\"out of memory\","
			      "\"type\":\"server_error\",\"param\":null,\"code\":null}}");
		if (body == NULL)
			return MHD_NO;
	}
	r = MHD_create_response_from_buffer(strlen(body), body,
					    MHD_RESPMEM_MUST_FREE);
	if (r == NULL) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	if (hname)
		MHD_add_response_header(r, hname, hval);
	return queue(q, status, r);
}

static enum MHD_Result reply(rctx *q, int status, const char *ctype, char *body)
{
	return reply_with(q, status, ctype, body, NULL, NULL);
}

static enum MHD_Result reply_json(rctx *q, int status, json_t *j)
{
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;

	json_decref(j);
	return reply(q, status, "application/json", s);
}

/* The endpoints that take a body. */
static int is_post(enum ds_ep ep)
{
	return ep == DS_EP_COMPLETIONS || ep == DS_EP_CHAT || ep == DS_EP_TOKENIZE ||
	       ep == DS_EP_DETOKENIZE || ep == DS_EP_APPLY_TEMPLATE;
}

static enum MHD_Result reply_err(rctx *q, const ds_api_err *e)
{
	char *body = ds_api_error_json(e);

	switch (e->status) {
	case 401:
		return reply_with(q, 401, "application/json", body,
				  MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	case 405:
		return reply_with(q, 405, "application/json", body,
				  MHD_HTTP_HEADER_ALLOW,
				  is_post(q->ep) ? "POST" : "GET, HEAD");
	case 503:
		return reply_with(q, 503, "application/json", body,
				  MHD_HTTP_HEADER_RETRY_AFTER, "1");
	}
	return reply(q, e->status, "application/json", body);
}

static enum MHD_Result fail(rctx *q, int status, const char *code,
			    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static enum MHD_Result fail(rctx *q, int status, const char *code,
			    const char *fmt, ...)
{
	ds_api_err e;
	va_list ap;

	ds_api_fail(&e, status, NULL, "%s", "");
	va_start(ap, fmt);
	vsnprintf(e.msg, sizeof e.msg, fmt, ap);
	va_end(ap);
	e.code = code;
	return reply_err(q, &e);
}

static enum MHD_Result not_ready(rctx *q)
{
	if (atomic_load(&q->s->draining))
		return fail(q, 503, "shutting_down", "the server is shutting down");
	return fail(q, 503, "model_loading", "the model is loading");
}

/* ---- waiting for a job ---------------------------------------------------------------- */

/* Sleep until the job has news (1) or the client has gone (0). */
static int wait_news(rctx *q)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(q->c, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct pollfd p[2] = { { q->job->efd, POLLIN, 0 },
			       { ci ? ci->connect_fd : -1, POLLRDHUP, 0 } };
	uint64_t v;

	for (;;) {
		int k = poll(p, p[1].fd >= 0 ? 2 : 1, 1000);

		if (k < 0 && errno != EINTR)
			return 0;
		if (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))
			return 0;
		if (p[0].revents & POLLIN) {
			if (read(q->job->efd, &v, sizeof v) < 0 && errno != EAGAIN)
				return 0;
			return 1;
		}
	}
}

static int job_done(ds_job *j, enum ds_finish *why, ds_req_stats *st)
{
	int d;

	pthread_mutex_lock(&j->mu);
	d = j->done;
	if (why)
		*why = j->why;
	if (st)
		*st = j->st;
	pthread_mutex_unlock(&j->mu);
	return d;
}

static void out_init(rctx *q, ds_api_out *o, const char *text, size_t n)
{
	memset(o, 0, sizeof *o);
	o->kind = q->req.kind;
	o->id = q->id;
	o->created = q->created;
	o->model = q->s->model_name;
	o->text = text;
	o->n_text = n;
	o->prompt_tokens = q->job->n_prompt;
}

/* A job that did not end by its own rule. */
static int job_failed(enum ds_finish why, ds_job *j, ds_api_err *e)
{
	if (why == DS_FINISH_ERROR || j->failed)
		return ds_api_fail(e, 500, NULL, "the generation failed (see the "
				   "server's log)");
	if (why == DS_FINISH_CANCEL) {
		ds_api_fail(e, 503, NULL, "cancelled: the server is shutting down");
		e->code = "shutting_down";
		return -1;
	}
	return 0;
}

/* Not streamed: the whole answer once the job is done. */
static enum MHD_Result answer_whole(rctx *q)
{
	ds_job *j = q->job;
	enum ds_finish why;
	ds_req_stats st;
	ds_api_out o;
	ds_api_err e;
	json_t *calls = NULL;
	char *s;

	while (!job_done(j, &why, &st))
		if (!wait_news(q)) {
			ds_job_cancel(j);
			return MHD_NO;
		}
	if (job_failed(why, j, &e))
		return reply_err(q, &e);
	pthread_mutex_lock(&j->mu);
	out_init(q, &o, j->text, j->n_text);
	o.reasoning = j->think;
	o.n_reasoning = j->n_think;
	o.finish = ds_finish_name(why);
	o.completion_tokens = st.completion_tokens;
	o.cached_tokens = st.cached_tokens;
	o.tokens = j->ids;
	o.n_tokens = j->n_ids;
	o.with_tokens = j->keep_ids;
	if (j->tools_on && ds_tool_parse(j->tool_fmt, j->text, j->n_text,
					 q->id + strcspn(q->id, "-") + 1, &o.n_text,
					 &calls) > 0) {
		o.tool_calls = calls;
		if (why == DS_FINISH_STOP)
			o.finish = "tool_calls";
	}
	s = ds_api_answer(&o);
	pthread_mutex_unlock(&j->mu);
	json_decref(calls);
	return reply(q, 200, "application/json", s);
}

/* ---- streaming --------------------------------------------------------------------------- */

static int out_add(rctx *q, char *s, size_t n)
{
	char *p;

	if (s == NULL)
		return -1;
	p = realloc(q->out, q->n_out + n);
	if (p == NULL) {
		free(s);
		return -1;
	}
	memcpy(p + q->n_out, s, n);
	q->out = p;
	q->n_out += n;
	free(s);
	return 0;
}

static int add_chunk(rctx *q, const ds_api_out *o, enum ds_api_chunk what)
{
	size_t n = 0;
	char *s = ds_api_chunk(o, what, &n);

	return out_add(q, s, n);
}

/* With tools: text joins the content held back; what cannot start the
 * calls' marker goes out as content. */
static int tools_text(rctx *q, ds_api_out *o, const char *text, size_t n)
{
	size_t shown;

	if (ds_grow((void **)&q->tb, &q->cap_tb, q->n_tb + n + 1, 1))
		return -1;
	memcpy(q->tb + q->n_tb, text, n);
	q->n_tb += n;
	shown = ds_tool_shown(q->job->tool_fmt, q->tb, q->n_tb);
	o->text = q->tb + q->tb_sent;
	o->n_text = shown > q->tb_sent ? shown - q->tb_sent : 0;
	q->tb_sent += o->n_text;
	return 0;
}

/* The end of a stream with tools: the calls (delta.tool_calls, and
 * finish_reason "tool_calls"), or the rest as content. */
static int tools_end(rctx *q, ds_api_out *o, enum ds_finish why)
{
	json_t *calls = NULL;
	size_t n = q->n_tb;
	int rc = 0;

	if (!q->job->tools_on)
		return 0;
	if (ds_tool_parse(q->job->tool_fmt, q->tb ? q->tb : "", q->n_tb,
			  q->id + strcspn(q->id, "-") + 1, &n, &calls) < 0)
		return -1;
	o->text = q->tb ? q->tb + q->tb_sent : NULL;
	o->n_text = q->tb && n > q->tb_sent ? n - q->tb_sent : 0;
	if (o->n_text > 0)
		rc = add_chunk(q, o, DS_CHUNK_TEXT);
	o->text = NULL;
	o->n_text = 0;
	if (rc == 0 && calls != NULL) {
		o->tool_calls = calls;
		rc = add_chunk(q, o, DS_CHUNK_TOOLS);
		o->tool_calls = NULL;
		if (why == DS_FINISH_STOP)
			o->finish = "tool_calls";
	}
	json_decref(calls);
	return rc;
}

/* The stream's end: the finish chunk (and usage), or an error event. */
static int stream_end(rctx *q, ds_api_out *o, enum ds_finish why,
		      const ds_req_stats *st)
{
	ds_api_err e;
	int rc;

	if (job_failed(why, q->job, &e)) {
		char *ej = ds_api_error_json(&e), *ev = NULL;
		int n = ej ? asprintf(&ev, "data: %s\n\n", ej) : -1;

		free(ej);
		rc = n < 0 ? -1 : out_add(q, ev, (size_t)n);
	} else {
		o->finish = ds_finish_name(why);
		if (tools_end(q, o, why))
			return -1;
		o->completion_tokens = st->completion_tokens;
		o->cached_tokens = st->cached_tokens;
		rc = add_chunk(q, o, DS_CHUNK_FINISH);
		if (rc == 0 && q->req.include_usage)
			rc = add_chunk(q, o, DS_CHUNK_USAGE);
	}
	q->phase = 2;
	return rc ? rc : out_add(q, strdup("data: [DONE]\n\n"), 14);
}

/* Turn what the job has into events. */
static int stream_fill(rctx *q)
{
	ds_job *j = q->job;
	char *text, *think;
	int32_t *ids;
	size_t n, nt, ni;
	int done;
	enum ds_finish why;
	ds_req_stats st;
	ds_api_out o;
	int rc = 0;

	out_init(q, &o, NULL, 0);
	if (q->phase == 0) {
		q->phase = 1;
		if (o.kind == DS_API_CHAT && add_chunk(q, &o, DS_CHUNK_ROLE))
			return -1;
	}
	pthread_mutex_lock(&j->mu);
	text = j->text;
	n = j->n_text;
	think = j->think;
	nt = j->n_think;
	ids = j->ids;
	ni = j->n_ids;
	j->text = j->think = NULL;
	j->ids = NULL;
	j->n_text = j->cap_text = j->n_think = j->cap_think = 0;
	j->n_ids = j->cap_ids = 0;
	done = j->done;
	why = j->why;
	st = j->st;
	pthread_mutex_unlock(&j->mu);
	o.text = text;
	o.n_text = n;
	o.reasoning = think;
	o.n_reasoning = nt;
	/* the reasoning came first */
	if (nt > 0)
		rc = add_chunk(q, &o, DS_CHUNK_REASONING);
	o.tokens = ids;
	o.n_tokens = ni;
	o.with_tokens = j->keep_ids;
	if (rc == 0 && j->tools_on)
		rc = tools_text(q, &o, text ? text : "", n);
	if (rc == 0 && (o.n_text > 0 || ni > 0))
		rc = add_chunk(q, &o, DS_CHUNK_TEXT);
	o.with_tokens = 0;
	o.tokens = NULL;
	o.n_tokens = 0;
	free(text);
	free(think);
	free(ids);
	o.text = o.reasoning = NULL;
	o.n_text = o.n_reasoning = 0;
	if (rc == 0 && done)
		rc = stream_end(q, &o, why, &st);
	return rc;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	rctx *q = cls;

	(void)pos;
	for (;;) {
		if (q->off < q->n_out) {
			size_t n = q->n_out - q->off < max ? q->n_out - q->off : max;

			memcpy(buf, q->out + q->off, n);
			q->off += n;
			if (q->off == q->n_out)
				q->off = q->n_out = 0;
			touch(q);
			return (ssize_t)n;
		}
		if (q->phase == 2)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (stream_fill(q))
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (q->n_out > 0 || q->phase == 2)
			continue;
		if (!wait_news(q)) {
			ds_job_cancel(q->job);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
	}
}

static void stream_free(void *cls)
{
	rctx_unref(cls);
}

static enum MHD_Result answer_stream(rctx *q)
{
	struct MHD_Response *r;

	r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read,
					      q, stream_free);
	if (r == NULL) {
		ds_job_cancel(q->job);
		return MHD_NO;
	}
	atomic_fetch_add(&q->refs, 1);
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	MHD_add_response_header(r, "X-Accel-Buffering", "no"); /* nginx */
	return queue(q, 200, r);
}

/* ---- the endpoints ------------------------------------------------------------------------ */

static ds_api_limits limits(const ds_srv *s)
{
	ds_api_limits l = { .n_vocab = s->eng.s.n_vocab, .n_ctx = s->eng.s.n_ctx };

	return l;
}

static enum MHD_Result generate(rctx *q, enum ds_api_kind kind)
{
	ds_srv *s = q->s;
	ds_api_limits lim;
	ds_api_err e;
	int32_t *ids;
	size_t n;
	int rc, think;
	ds_grammar *g;
	const char *trigger;

	if (!atomic_load(&s->ready) || atomic_load(&s->draining))
		return not_ready(q);
	lim = limits(s);
	if (ds_api_parse(&q->req, kind, q->body ? q->body : "", q->n_body, &lim, &e) ||
	    ds_eng_prompt(&s->eng, &q->req, &ids, &n, &think, &e))
		return reply_err(q, &e);
	if (ds_eng_grammar(&s->eng, &q->req, &g, &trigger, &e)) {
		free(ids);
		return reply_err(q, &e);
	}
	rc = ds_job_submit(&s->eng, &q->req, ids, n, think, q->t0, g, trigger,
			   &q->job, &e);
	free(ids);
	if (rc)
		return reply_err(q, &e);
	q->answering = 1;
	atomic_fetch_add(&s->answering, 1);
	snprintf(q->id, sizeof q->id, "%s-%08x%012llx",
		 kind == DS_API_CHAT ? "chatcmpl" : "cmpl", s->nonce,
		 (unsigned long long)atomic_fetch_add(&s->counter, 1));
	q->created = (long long)time(NULL);
	return q->req.stream ? answer_stream(q) : answer_whole(q);
}

static enum MHD_Result health(rctx *q)
{
	if (atomic_load(&q->s->draining))
		return fail(q, 503, "shutting_down", "the server is shutting down");
	if (!atomic_load(&q->s->ready))
		return reply_json(q, 503, json_pack("{s:s}", "status", "loading"));
	return reply_json(q, 200, json_pack("{s:s}", "status", "ok"));
}

static enum MHD_Result models(rctx *q)
{
	ds_srv *s = q->s;
	json_t *meta = json_pack("{s:b, s:i, s:i}", "ready", atomic_load(&s->ready),
				 "parallel", (int)s->o.parallel, "queue",
				 (int)s->o.queue);

	if (meta && atomic_load(&s->ready)) {
		json_object_set_new(meta, "arch", json_string(ds_arch_name(s->eng.s.m.hp.arch)));
		json_object_set_new(meta, "n_ctx", json_integer(s->eng.s.n_ctx));
		json_object_set_new(meta, "n_vocab", json_integer(s->eng.s.n_vocab));
	}
	return reply_json(q, 200, json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:o}]}",
					    "object", "list", "data", "id",
					    s->model_name, "object", "model",
					    "created", (json_int_t)s->started,
					    "owned_by", "ds", "meta", meta));
}

static enum MHD_Result metrics(rctx *q)
{
	ds_srv *s = q->s;
	ds_metrics_now g = { .ready = atomic_load(&s->ready), .slots = s->o.parallel,
			     .queue_limit = s->o.queue };

	ds_eng_counts(&s->eng, &g.queued, &g.running);
	if (g.ready && s->eng.s.pc != NULL) {
		ds_pcache_stats ps;

		ds_pcache_get_stats(s->eng.s.pc, &ps);
		g.cache_bytes = ps.bytes;
		g.cache_limit = ps.max_bytes;
		g.cache_blocks = ps.blocks;
	}
	return reply(q, 200, "text/plain; version=0.0.4; charset=utf-8",
		     ds_metrics_render(s->metrics, &g, ds_now_s()));
}

/* One token's text alone (lossy where it is part of a character). */
static json_t *piece_json(ds_eng *e, int32_t id)
{
	ds_tok_text t = { 0 };
	json_t *j = NULL;
	char *u;
	size_t n;

	if (ds_eng_detok(e, &id, 1, &t, NULL) == 0 &&
	    (u = ds_utf8_repair(t.s ? t.s : "", t.n, &n)) != NULL) {
		j = json_pack("{s:i, s:s%}", "id", (int)id, "piece", u, n);
		free(u);
	}
	ds_tok_text_free(&t);
	return j;
}

static enum MHD_Result tokenize(rctx *q)
{
	ds_srv *s = q->s;
	ds_api_tokreq r;
	ds_tok_ids ids = { 0 };
	ds_api_err e;
	ds_err err;
	json_t *a;
	size_t i;

	if (!atomic_load(&s->ready))
		return not_ready(q);
	if (ds_api_parse_tokenize(&r, q->body ? q->body : "", q->n_body, &e))
		return reply_err(q, &e);
	if (ds_tok_encode(s->eng.s.tok, r.content, strlen(r.content),
			  r.add_special ? 0 : DS_TOK_NO_BOS, &ids, &err)) {
		ds_api_tokreq_free(&r);
		ds_tok_ids_free(&ids);
		return fail(q, 400, NULL, "content: %s", err.msg);
	}
	a = json_array();
	for (i = 0; a && i < ids.n; i++)
		json_array_append_new(a, r.with_pieces ? piece_json(&s->eng, ids.v[i])
						      : json_integer(ids.v[i]));
	ds_api_tokreq_free(&r);
	ds_tok_ids_free(&ids);
	return reply_json(q, 200, json_pack("{s:o}", "tokens", a));
}

static enum MHD_Result detokenize(rctx *q)
{
	ds_srv *s = q->s;
	ds_tok_text t = { 0 };
	ds_api_limits lim;
	int32_t *ids;
	size_t n, len;
	ds_api_err e;
	ds_err err;
	json_t *j;
	char *u;

	if (!atomic_load(&s->ready))
		return not_ready(q);
	lim = limits(s);            /* the model's ids, with text or not */
	if (ds_api_parse_detokenize(&ids, &n, q->body ? q->body : "", q->n_body,
				    &lim, &e))
		return reply_err(q, &e);
	if (ds_eng_detok(&s->eng, ids, n, &t, &err)) {
		free(ids);
		ds_tok_text_free(&t);
		return fail(q, 400, NULL, "tokens: %s", err.msg);
	}
	free(ids);
	u = ds_utf8_repair(t.s ? t.s : "", t.n, &len);
	ds_tok_text_free(&t);
	if (u == NULL)
		return reply(q, 500, NULL, NULL);
	j = json_pack("{s:s%}", "content", u, len);
	free(u);
	return reply_json(q, 200, j);
}

/* llama.cpp server's /apply-template: a chat body's prompt, as text. */
static enum MHD_Result apply_template(rctx *q)
{
	ds_srv *s = q->s;
	ds_api_limits lim;
	ds_api_err e;
	ds_err err;
	char *text;
	size_t len;
	json_t *j;

	if (!atomic_load(&s->ready))
		return not_ready(q);
	lim = limits(s);
	if (ds_api_parse(&q->req, DS_API_TEMPLATE, q->body ? q->body : "", q->n_body,
			 &lim, &e))
		return reply_err(q, &e);
	if (ds_eng_render(&s->eng, &q->req, &text, &len, &err)) {
		ds_api_fail(&e, 400, "messages", "messages: %s", err.msg);
		return reply_err(q, &e);
	}
	j = json_pack("{s:o}", "prompt", ds_json_text(text, len));
	free(text);
	return reply_json(q, 200, j);
}

static enum MHD_Result dispatch(rctx *q)
{
	switch (q->ep) {
	case DS_EP_COMPLETIONS: return generate(q, DS_API_COMPLETION);
	case DS_EP_CHAT: return generate(q, DS_API_CHAT);
	case DS_EP_MODELS: return models(q);
	case DS_EP_HEALTH: return health(q);
	case DS_EP_METRICS: return metrics(q);
	case DS_EP_TOKENIZE: return tokenize(q);
	case DS_EP_DETOKENIZE: return detokenize(q);
	case DS_EP_APPLY_TEMPLATE: return apply_template(q);
	default: return fail(q, 404, NULL, "no such endpoint");
	}
}

/* ---- connections and the watchdog ---------------------------------------------------- */

/* A request head has come in (1) or its request ended (0). */
static void conn_mark(ds_srv *s, struct MHD_Connection *c, int in_request)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	conn *k = ci ? ci->socket_context : NULL;

	if (k == NULL)
		return;
	pthread_mutex_lock(&s->cmu);
	k->in_request = in_request;
	k->t0 = ds_now_s();
	pthread_mutex_unlock(&s->cmu);
}

static void on_connection(void *cls, struct MHD_Connection *c,
			  void **socket_context,
			  enum MHD_ConnectionNotificationCode code)
{
	ds_srv *s = cls;
	conn *k = *socket_context;
	const union MHD_ConnectionInfo *ci;

	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		if (ci == NULL || (k = calloc(1, sizeof *k)) == NULL)
			return;     /* not watched: the idle timeout still holds */
		k->fd = ci->connect_fd;
		k->t0 = ds_now_s();
		pthread_mutex_lock(&s->cmu);
		k->next = s->conns;
		if (s->conns)
			s->conns->prev = k;
		s->conns = k;
		pthread_mutex_unlock(&s->cmu);
		*socket_context = k;
		return;
	}
	if (k == NULL)
		return;
	pthread_mutex_lock(&s->cmu);
	if (k->prev)
		k->prev->next = k->next;
	else
		s->conns = k->next;
	if (k->next)
		k->next->prev = k->prev;
	pthread_mutex_unlock(&s->cmu);
	free(k);
	*socket_context = NULL;
}

/* Every 0.25 s: shut down the connections whose request head is late. */
static void *watchdog(void *arg)
{
	ds_srv *s = arg;
	struct timespec ts;
	conn *k;

	pthread_mutex_lock(&s->cmu);
	while (!s->stop_watch) {
		double now = ds_now_s();

		for (k = s->conns; k; k = k->next)
			if (!k->in_request && !k->cut && now - k->t0 > s->o.timeout_s) {
				shutdown(k->fd, SHUT_RDWR);
				k->cut = 1;
			}
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 250000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&s->ccv, &s->cmu, &ts);
	}
	pthread_mutex_unlock(&s->cmu);
	return NULL;
}

static void watch_stop(ds_srv *s)
{
	if (!s->watching)
		return;
	pthread_mutex_lock(&s->cmu);
	s->stop_watch = 1;
	pthread_cond_signal(&s->ccv);
	pthread_mutex_unlock(&s->cmu);
	pthread_join(s->watch, NULL);
	s->watching = 0;
}

/* ---- a request's life ---------------------------------------------------------------------- */

/* Checks on the headers alone, before any body is read: an answer here
 * (404, 405, 401, 413) ends the request. */
static enum MHD_Result early(rctx *q, const char *method)
{
	ds_srv *s = q->s;
	int post = is_post(q->ep);
	const char *cl, *auth;
	int big;

	if (q->ep == DS_EP_OTHER)
		return fail(q, 404, "not_found", "%.60s: no such endpoint", q->path);
	if (post ? strcmp(method, "POST") != 0
		 : strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return fail(q, 405, NULL, "%s: use %s", ds_ep_name(q->ep),
			    post ? "POST" : "GET");
	auth = MHD_lookup_connection_value(q->c, MHD_HEADER_KIND,
					   MHD_HTTP_HEADER_AUTHORIZATION);
	if (s->o.api_key && q->ep != DS_EP_HEALTH && !ds_api_key_ok(auth, s->o.api_key))
		return fail(q, 401, "invalid_api_key", "%s", auth ? "invalid API key" :
			    "an API key is needed: Authorization: Bearer KEY");
	cl = MHD_lookup_connection_value(q->c, MHD_HEADER_KIND,
					 MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (cl && (big = ds_api_length_check(cl, s->o.max_body)) != 0)
		return big < 0 ? fail(q, 400, NULL, "Content-Length: not a "
				      "decimal number") :
			fail(q, 413, "request_too_large", "the body is larger than "
			     "%zu bytes (--max-body)", s->o.max_body);
	return MHD_YES;
}

static rctx *rctx_new(ds_srv *s, struct MHD_Connection *c, const char *url,
		      const char *method)
{
	rctx *q = calloc(1, sizeof *q);
	size_t i;

	if (q == NULL)
		return NULL;
	atomic_init(&q->refs, 1);
	q->s = s;
	q->c = c;
	q->ep = ds_ep_of(url);
	q->t0 = ds_now_s();
	snprintf(q->method, sizeof q->method, "%s", method);
	for (i = 0; url[i] && i < sizeof q->path - 1; i++)
		q->path[i] = url[i] > ' ' && url[i] <= '~' ? url[i] : '?';
	for (i = 0; method[i] && i < sizeof q->method - 1; i++)
		q->method[i] = method[i] > ' ' && method[i] <= '~' ? method[i] : '?';
	return q;
}

/* A piece of the body: kept up to --max-body, counted beyond (answered
 * 413 at its end); 0 closes the connection (a body without Content-Length
 * past twice the limit, or at least 64 KiB past it, or still arriving
 * after --timeout). */
static int body_add(rctx *q, const char *data, size_t n)
{
	const ds_srv *s = q->s;
	char *p;

	if (s->o.timeout_s && ds_now_s() - q->t0 > s->o.timeout_s)
		return 0;
	if (q->dropped || q->n_body + n > s->o.max_body) {
		size_t cap = s->o.max_body + (s->o.max_body > 65536 ? s->o.max_body
								     : 65536);

		q->dropped += n;
		return q->n_body + q->dropped <= cap;
	}
	p = realloc(q->body, q->n_body + n + 1);
	if (p == NULL)
		return 0;
	memcpy(p + q->n_body, data, n);
	q->body = p;
	q->n_body += n;
	p[q->n_body] = '\0';
	return 1;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
				  const char *url, const char *method,
				  const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	ds_srv *s = cls;
	rctx *q = *con_cls;

	(void)version;
	if (q == NULL) {
		conn_mark(s, c, 1);
		if ((q = rctx_new(s, c, url, method)) == NULL)
			return MHD_NO;
		*con_cls = q;
		return early(q, method);
	}
	if (*upload_size > 0) {
		int ok = body_add(q, upload, *upload_size);

		*upload_size = 0;
		return ok ? MHD_YES : MHD_NO;
	}
	if (q->dropped)
		return fail(q, 413, "request_too_large", "the body is larger than "
			    "%zu bytes (--max-body)", s->o.max_body);
	return dispatch(q);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode why)
{
	ds_srv *s = cls;
	rctx *q = *con_cls;
	char status[8] = "-";

	conn_mark(s, c, 0);
	if (q == NULL)
		return;
	if (q->status)
		snprintf(status, sizeof status, "%d", q->status);
	if (q->job && !job_done(q->job, NULL, NULL))
		ds_job_cancel(q->job);   /* the client went away, or a write failed */
	if (q->answering)
		atomic_fetch_sub(&s->answering, 1);
	if (s->o.verbose)
		slog(s, "%s %s %s %.3f s%s", q->method, q->path, status,
		     ds_now_s() - q->t0,
		     why == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" :
		     why == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED ? " (timed out)" :
		     " (connection closed)");
	*con_cls = NULL;
	rctx_unref(q);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	ds_srv *s = cls;
	size_t n;

	vsnprintf(s->mhd_msg, sizeof s->mhd_msg, fmt, ap);
	n = strlen(s->mhd_msg);
	while (n > 0 && (s->mhd_msg[n - 1] == '\n' || s->mhd_msg[n - 1] == '.'))
		s->mhd_msg[--n] = '\0';
	if (s->o.verbose)
		slog(s, "libmicrohttpd: %s", s->mhd_msg);
}

/* ---- the server ------------------------------------------------------------------------------ */

static void model_name(ds_srv *s, const char *dir)
{
	size_t n = strlen(dir);
	const char *b;

	while (n > 1 && dir[n - 1] == '/')
		n--;
	for (b = dir + n; b > dir && b[-1] != '/'; b--)
		;
	snprintf(s->model_name, sizeof s->model_name, "%.*s", (int)(dir + n - b), b);
}

static int bind_addr(const ds_srv_opts *o, struct addrinfo **ai, ds_err *err)
{
	struct addrinfo hints;
	char port[16];
	int rc;

	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	snprintf(port, sizeof port, "%u", o->port);
	rc = getaddrinfo(o->host ? o->host : "127.0.0.1", port, &hints, ai);
	if (rc != 0)
		return ds_errf(err, "--host %s: %s", o->host ? o->host : "127.0.0.1",
			       gai_strerror(rc));
	return 0;
}

/* Connections open at once: --max-conns (2048), and at least the slots
 * and the queue; at most the file descriptors left, 64 kept for the rest. */
static unsigned conn_limit(const ds_srv_opts *o)
{
	unsigned want = o->max_conns ? o->max_conns : 2048, min = o->parallel + o->queue + 8;
	struct rlimit rl;

	if (want < min)
		want = min;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur < (rlim_t)want + 64)
		want = rl.rlim_cur > 80 ? (unsigned)rl.rlim_cur - 64 : 16;
	return want;
}

/* poll(2), not select(2): descriptors past FD_SETSIZE (1024) work. */
static int daemon_start(ds_srv *s, ds_err *err)
{
	const ds_srv_opts *o = &s->o;
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
			 MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG;
	unsigned limit = conn_limit(o);
	struct addrinfo *ai;
	const union MHD_DaemonInfo *di;

	if (bind_addr(o, &ai, err))
		return -1;
	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	s->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, s,
				MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s,
				MHD_OPTION_SOCK_ADDR, ai->ai_addr,
				MHD_OPTION_CONNECTION_TIMEOUT, o->timeout_s,
				MHD_OPTION_CONNECTION_LIMIT, limit,
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)65536,
				MHD_OPTION_LISTEN_BACKLOG_SIZE, 256u,
				MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
				MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
				MHD_OPTION_END);
	freeaddrinfo(ai);
	if (s->d == NULL)
		return ds_errf(err, "cannot listen on %s port %u: %s",
			       o->host ? o->host : "127.0.0.1", o->port,
			       s->mhd_msg[0] ? s->mhd_msg : "libmicrohttpd failed");
	di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
	s->port = di ? di->port : o->port;
	return 0;
}

/* What ds_srv_start made before the daemon. */
static void srv_destroy(ds_srv *s)
{
	ds_metrics_free(s->metrics);
	pthread_mutex_destroy(&s->eng.smu);
	pthread_mutex_destroy(&s->cmu);
	pthread_cond_destroy(&s->ccv);
	free(s);
}

int ds_srv_start(ds_srv **out, const ds_srv_opts *o, ds_err *err)
{
	ds_srv *s = ds_calloc(1, sizeof *s, err);

	*out = NULL;
	if (s == NULL)
		return -1;
	s->o = *o;
	s->started = (long long)time(NULL);
	if (getrandom(&s->nonce, sizeof s->nonce, GRND_NONBLOCK) != sizeof s->nonce)
		s->nonce = (uint32_t)ds_now_ns();
	model_name(s, o->model_dir);
	pthread_mutex_init(&s->eng.smu, NULL);
	pthread_mutex_init(&s->cmu, NULL);
	pthread_cond_init(&s->ccv, NULL);
	s->eng.o = &s->o;
	if (ds_metrics_init(&s->metrics, err) || daemon_start(s, err)) {
		srv_destroy(s);
		return -1;
	}
	if (s->o.timeout_s > 0) {
		if ((errno = pthread_create(&s->watch, NULL, watchdog, s)) != 0) {
			ds_errf(err, "cannot start a thread: %s", strerror(errno));
			MHD_stop_daemon(s->d);
			srv_destroy(s);
			return -1;
		}
		s->watching = 1;
	}
	*out = s;
	return 0;
}

unsigned ds_srv_port(const ds_srv *s)
{
	return s->port;
}

int ds_srv_load(ds_srv *s, ds_err *err)
{
	double t0 = ds_now_s();
	const ds_eng *e = &s->eng;
	ds_fwd_info fi;

	if (ds_eng_load(&s->eng, &s->o, s->metrics, err))
		return -1;
	atomic_store(&s->ready, 1);
	ds_fwd_get_info(e->s.fwd, &fi);
	slog(s, "model %s loaded in %.2f s: %s, %u slots of %u positions, forward "
	     "passes of up to %u tokens, %d threads, kernels %s, chat template %s",
	     s->model_name, ds_now_s() - t0, ds_arch_name(e->s.m.hp.arch), e->s.kv.n_slot,
	     e->s.n_ctx, fi.max_batch, ds_pool_threads(e->s.pool), ds_kernels_name(),
	     e->s.have_tmpl ? ds_chat_tpl_kind(&e->s.tpl) : "none");
	if (e->s.pc != NULL) {
		ds_pcache_stats ps;

		ds_pcache_get_stats(e->s.pc, &ps);
		slog(s, "prompt cache: %.0f MiB in blocks of %d positions (%zu bytes "
		     "each)%s%s: %zu blocks read, %zu files ignored",
		     ps.max_bytes / 1048576.0, DS_PCACHE_BLOCK, ps.block_bytes,
		     s->o.cache_dir ? " in " : "", s->o.cache_dir ? s->o.cache_dir : "",
		     ps.blocks, ps.ignored);
	}
	if (e->s.tpl_warn[0])
		slog(s, "warning: %s", e->s.tpl_warn);
	else if (!e->s.have_tmpl && strcmp(e->s.tpl_err, "the model names no chat "
						  "template") != 0)
		slog(s, "warning: %s", e->s.tpl_err);
	return 0;
}

void ds_srv_quiesce(ds_srv *s)
{
	int fd;

	atomic_store(&s->draining, 1);
	if (s->quiesced)
		return;
	s->quiesced = 1;
	fd = MHD_quiesce_daemon(s->d);
	if (fd >= 0)
		close(fd);
}

size_t ds_srv_inflight(ds_srv *s)
{
	return atomic_load(&s->eng.inflight);
}

void ds_srv_free(ds_srv *s)
{
	int i;

	if (s == NULL)
		return;
	ds_srv_quiesce(s);
	ds_eng_stop(&s->eng);       /* the waiting connections get their answer */
	for (i = 0; i < 200 && atomic_load(&s->answering) > 0; i++)
		usleep(10000);      /* 2 s at most to send it */
	MHD_stop_daemon(s->d);      /* then every connection is closed, its
				       thread joined */
	watch_stop(s);
	ds_eng_free(&s->eng);
	srv_destroy(s);
}

/*
 * ds-run - generate from a model: token-id lines (or text) in, text, ids,
 * JSON lines or logits out (ds-run(1)).
 */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chat/chat.h"
#include "model/forward.h"
#include "model/kvcache.h"
#include "format/modelfile.h"
#include "runtime/sampler.h"
#include "runtime/sched.h"
#include "host/sysinfo/sysinfo.h"
#include "pool/threads.h"
#include "tokenizer/tokenizer.h"
#include "base/util.h"

static const char *prog = "ds-run";

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s -m DIR [-n N] [--ctx-size N] [--threads N] [--temp T]\n"
		"              [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R]\n"
		"              [--repeat-last-n N] [--seed S] [--stop STR ...] [--ids | --jsonl]\n"
		"              [--logits-out FILE] [--parallel N] [-p TEXT | -f FILE] [--chat]\n"
		"              [--chat-template NAME] [--perplexity] [--truncate] [--verify]\n"
		"              [--mlock] [--no-populate] [--hugepages] [--numa MODE]\n"
		"              [--cpus LIST] [--sched-fifo PRIO] [--cache-type TYPE] [--verbose]\n"
		"       %s -h | --version\n",
		prog, prog);
}

static void warnx_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void warnx_(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ---- options ------------------------------------------------------------------ */

enum out_mode { OUT_TEXT, OUT_IDS, OUT_JSONL };

typedef struct opts {
	const char *dir, *prompt, *file, *logits_out, *cpus, *chat_tmpl;
	const char *cache_type, *numa;
	long n_predict, ctx_size, threads, parallel, sched_fifo;
	ds_sampler_params sp;
	int seed_set;
	char **stops;
	size_t n_stops;
	enum out_mode out;
	int chat, perplexity, truncate, verify, mlock, no_populate, hugepages;
	int verbose;
} opts;

enum {
	O_CACHE = 256, O_CHAT, O_CHAT_TMPL, O_CPUS, O_CTX, O_HUGE, O_IDS, O_JSONL,
	O_LOGITS, O_MINP, O_MLOCK, O_NOPOP, O_NUMA, O_PAR, O_PPL, O_RLN, O_RP,
	O_FIFO, O_SEED, O_STOP, O_TEMP, O_THREADS, O_TOPK, O_TOPP, O_TRUNC,
	O_VERBOSE, O_VERIFY, O_VERSION,
};

static const struct option longopts[] = {
	{ "cache-type", required_argument, NULL, O_CACHE },
	{ "chat", no_argument, NULL, O_CHAT },
	{ "chat-template", required_argument, NULL, O_CHAT_TMPL },
	{ "cpus", required_argument, NULL, O_CPUS },
	{ "ctx-size", required_argument, NULL, O_CTX },
	{ "file", required_argument, NULL, 'f' },
	{ "help", no_argument, NULL, 'h' },
	{ "hugepages", no_argument, NULL, O_HUGE },
	{ "ids", no_argument, NULL, O_IDS },
	{ "jsonl", no_argument, NULL, O_JSONL },
	{ "logits-out", required_argument, NULL, O_LOGITS },
	{ "min-p", required_argument, NULL, O_MINP },
	{ "mlock", no_argument, NULL, O_MLOCK },
	{ "model", required_argument, NULL, 'm' },
	{ "n-predict", required_argument, NULL, 'n' },
	{ "no-populate", no_argument, NULL, O_NOPOP },
	{ "numa", required_argument, NULL, O_NUMA },
	{ "parallel", required_argument, NULL, O_PAR },
	{ "perplexity", no_argument, NULL, O_PPL },
	{ "prompt", required_argument, NULL, 'p' },
	{ "repeat-last-n", required_argument, NULL, O_RLN },
	{ "repeat-penalty", required_argument, NULL, O_RP },
	{ "sched-fifo", required_argument, NULL, O_FIFO },
	{ "seed", required_argument, NULL, O_SEED },
	{ "stop", required_argument, NULL, O_STOP },
	{ "temp", required_argument, NULL, O_TEMP },
	{ "threads", required_argument, NULL, O_THREADS },
	{ "top-k", required_argument, NULL, O_TOPK },
	{ "top-p", required_argument, NULL, O_TOPP },
	{ "truncate", no_argument, NULL, O_TRUNC },
	{ "verbose", no_argument, NULL, O_VERBOSE },
	{ "verify", no_argument, NULL, O_VERIFY },
	{ "version", no_argument, NULL, O_VERSION },
	{ NULL, 0, NULL, 0 },
};

static int bad_value(const char *opt, const char *v, const char *what)
{
	warnx_("%s %s: %s", opt, v, what);
	return 2;
}

static int num_long(const char *opt, const char *v, long lo, long hi, long *out)
{
	if (ds_parse_long(v, lo, hi, out) != 0) {
		warnx_("%s %s: not an integer in [%ld, %ld]", opt, v, lo, hi);
		return 2;
	}
	return 0;
}

static int num_float(const char *opt, const char *v, double lo, double hi,
		     float *out)
{
	double d;

	if (ds_parse_double(v, lo, hi, &d) != 0) {
		warnx_("%s %s: not a number in [%g, %g]", opt, v, lo, hi);
		return 2;
	}
	*out = (float)d;
	return 0;
}

static int add_stop(opts *o, const char *s)
{
	char **n = realloc(o->stops, (o->n_stops + 1) * sizeof *n);

	if (n == NULL)
		return 1;
	o->stops = n;
	o->stops[o->n_stops++] = (char *)s;
	return 0;
}

static int parse_one(opts *o, int c, const char *a)
{
	long v;

	switch (c) {
	case 'f': o->file = a; return 0;
	case 'm': o->dir = a; return 0;
	case 'n': return num_long("-n", a, -1, 1L << 30, &o->n_predict);
	case 'p': o->prompt = a; return 0;
	case O_CACHE: o->cache_type = a; return 0;
	case O_CHAT: o->chat = 1; return 0;
	case O_CHAT_TMPL: o->chat_tmpl = a; return 0;
	case O_CPUS: o->cpus = a; return 0;
	case O_CTX: return num_long("--ctx-size", a, 4, 1L << 24, &o->ctx_size);
	case O_HUGE: o->hugepages = 1; return 0;
	case O_IDS: o->out = OUT_IDS; return 0;
	case O_JSONL: o->out = OUT_JSONL; return 0;
	case O_LOGITS: o->logits_out = a; return 0;
	case O_MINP: return num_float("--min-p", a, 0, 1, &o->sp.min_p);
	case O_MLOCK: o->mlock = 1; return 0;
	case O_NOPOP: o->no_populate = 1; return 0;
	case O_NUMA: o->numa = a; return 0;
	case O_PAR: return num_long("--parallel", a, 1, 256, &o->parallel);
	case O_PPL: o->perplexity = 1; return 0;
	case O_RLN:
		if (num_long("--repeat-last-n", a, 0, 1L << 20, &v))
			return 2;
		o->sp.repeat_last_n = (int)v;
		return 0;
	case O_RP: return num_float("--repeat-penalty", a, 0.01, 100, &o->sp.repeat_penalty);
	case O_FIFO: return num_long("--sched-fifo", a, 1, 99, &o->sched_fifo);
	case O_SEED:
		if (ds_parse_long(a, 0, 0x7fffffffffffffffL, &v))
			return bad_value("--seed", a, "not a non-negative integer");
		o->sp.seed = (uint64_t)v;
		o->seed_set = 1;
		return 0;
	case O_STOP: return add_stop(o, a);
	case O_TEMP: return num_float("--temp", a, 0, 100, &o->sp.temp);
	case O_THREADS: return num_long("--threads", a, 1, DS_POOL_MAX, &o->threads);
	case O_TOPK:
		if (num_long("--top-k", a, 0, 1L << 30, &v))
			return 2;
		o->sp.top_k = (int)v;
		return 0;
	case O_TOPP: return num_float("--top-p", a, 0, 1, &o->sp.top_p);
	case O_TRUNC: o->truncate = 1; return 0;
	case O_VERBOSE: o->verbose = 1; return 0;
	case O_VERIFY: o->verify = 1; return 0;
	}
	return 2;
}

/* 0 go on, 2 usage error, -1 exit 0 (help, version) */
static int parse_args(opts *o, int argc, char **argv)
{
	int c, rc;

	memset(o, 0, sizeof *o);
	o->n_predict = -1;
	ds_sampler_defaults(&o->sp);
	o->parallel = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":f:hm:n:p:", longopts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return -1;
		}
		if (c == O_VERSION) {
			printf("%s %s\n", prog, DS_VERSION);
			return -1;
		}
		if (c == '?' || c == ':') {
			warnx_("%s: %s", argv[optind - 1], c == '?' ? "unknown option"
							     : "needs a value");
			usage(stderr);
			return 2;
		}
		if ((rc = parse_one(o, c, optarg)) != 0)
			return rc;
	}
	if (optind < argc) {
		warnx_("unexpected argument %s", argv[optind]);
		return 2;
	}
	if (o->dir == NULL) {
		warnx_("-m DIR is required");
		usage(stderr);
		return 2;
	}
	if (o->prompt && o->file) {
		warnx_("-p and -f exclude each other");
		return 2;
	}
	if (o->perplexity && (o->chat || o->prompt || o->file || o->parallel > 1)) {
		warnx_("--perplexity reads ids from stdin alone");
		return 2;
	}
	return 0;
}

/* ---- the run's state ----------------------------------------------------------------- */

/* One request's output, in input order: streamed while it is the head,
 * buffered until then. */
typedef struct rq {
	size_t index;
	int32_t *ids;              /* the prompt */
	size_t n_ids;
	int32_t *gen;              /* generated, stop ids excluded */
	size_t n_gen, cap_gen;
	char *buf;                 /* pending stdout bytes */
	size_t n_buf, cap_buf;
	float *lg;                 /* pending logits rows */
	size_t n_lg, cap_lg;
	char *text;                /* --jsonl: the answer's text */
	size_t n_text, cap_text;
	ds_tok_stream ts;
	ds_stopper stopper;
	ds_tok_text piece;         /* a token's text (reused) */
	char *shown;               /* what the stop strings let through */
	size_t n_shown, cap_shown;
	int done;
	int stop_hit;              /* a stop string ended it */
	enum ds_finish why;
	ds_req_stats st;
	struct run *run;
} rq;

typedef struct run {
	opts *o;
	ds_model m;
	ds_placement pl;
	ds_pool *pool;
	ds_fwd *fwd;
	ds_kvcache kv;
	ds_sched *sched;
	ds_tok *tok;
	enum ds_chat_tmpl tmpl;
	int have_tmpl;
	uint32_t n_ctx, n_vocab;
	int32_t stop_ids[DS_MAX_EOS + 4];
	size_t n_stop_ids;
	FILE *lf;                  /* --logits-out, written as lf_tmp */
	char *lf_tmp;
	enum ds_kvtype kvtype;
	enum ds_numa numa;
	double t_load;
	char *last_answer;         /* --chat: the answer just given */
	rq **rqs;
	size_t n_rqs, cap_rqs, head;
	int failed;                /* an output error */
	int bad;                   /* another error, already reported */
	double t0;
	size_t tot_prompt, tot_gen, n_dec;
	double t_pre, t_dec;          /* summed over the requests */
	double t_first, t_last;
} run;

/* ---- output in input order ------------------------------------------------------- */

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	size_t c = *cap ? *cap : 256;
	void *n;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	n = realloc(*p, c * elem);
	if (n == NULL)
		return -1;
	*p = n;
	*cap = c;
	return 0;
}

static void out_bytes(rq *q, const char *s, size_t n)
{
	run *r = q->run;

	if (n == 0)
		return;
	if (q->index == r->head) {
		if (fwrite(s, 1, n, stdout) != n || fflush(stdout) != 0)
			r->failed = 1;
		return;
	}
	if (grow((void **)&q->buf, &q->cap_buf, q->n_buf + n, 1)) {
		r->failed = 1;
		return;
	}
	memcpy(q->buf + q->n_buf, s, n);
	q->n_buf += n;
}

static void out_logits(rq *q, const float *l)
{
	run *r = q->run;

	if (q->index == r->head) {
		if (fwrite(l, sizeof *l, r->n_vocab, r->lf) != r->n_vocab)
			r->failed = 1;
		return;
	}
	if (grow((void **)&q->lg, &q->cap_lg, (q->n_lg + 1) * r->n_vocab,
		 sizeof(float))) {
		r->failed = 1;
		return;
	}
	memcpy(q->lg + q->n_lg * r->n_vocab, l, r->n_vocab * sizeof *l);
	q->n_lg++;
}

static void json_str(rq *q, const char *s, size_t n)
{
	char tmp[8];
	size_t i;

	out_bytes(q, "\"", 1);
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\') {
			tmp[0] = '\\';
			tmp[1] = (char)c;
			out_bytes(q, tmp, 2);
		} else if (c < 0x20 || c == 0x7f) {
			snprintf(tmp, sizeof tmp, "\\u%04x", c);
			out_bytes(q, tmp, 6);
		} else {
			out_bytes(q, (const char *)&s[i], 1);
		}
	}
	out_bytes(q, "\"", 1);
}

/* The request's closing output: the ids line, the JSON object or the
 * text's newline. */
static void out_final(rq *q)
{
	run *r = q->run;
	char b[512];
	size_t i;
	double pm = (q->st.t_prompt - q->st.t_start) * 1e3;
	double gm = (q->st.t_end - q->st.t_prompt) * 1e3;

	if (r->o->out == OUT_TEXT) {
		out_bytes(q, "\n", 1);
		return;
	}
	if (r->o->out == OUT_IDS) {
		out_bytes(q, "\n", 1);
		return;
	}
	snprintf(b, sizeof b, "{\"index\": %zu, \"tokens\": [", q->index);
	out_bytes(q, b, strlen(b));
	for (i = 0; i < q->n_gen; i++) {
		snprintf(b, sizeof b, i ? ", %d" : "%d", q->gen[i]);
		out_bytes(q, b, strlen(b));
	}
	out_bytes(q, "], \"text\": ", 11);
	if (r->tok != NULL)
		json_str(q, q->text ? q->text : "", q->n_text);
	else
		out_bytes(q, "null", 4);
	if (q->n_ids == 0)
		pm = gm = 0;
	snprintf(b, sizeof b, ", \"finish_reason\": \"%s\", \"prompt_tokens\": %zu, "
		 "\"completion_tokens\": %zu, \"timings\": {\"prompt_ms\": %.3f, "
		 "\"predicted_ms\": %.3f, \"prompt_per_second\": %.3f, "
		 "\"predicted_per_second\": %.3f}}\n",
		 ds_finish_name(q->why), q->n_ids, q->n_gen, pm, gm,
		 pm > 0 ? q->n_ids / (pm / 1e3) : 0,
		 gm > 0 && q->n_gen > 1 ? (q->n_gen - 1) / (gm / 1e3) : 0);
	out_bytes(q, b, strlen(b));
}

static void rq_free(rq *q)
{
	free(q->ids);
	free(q->gen);
	free(q->buf);
	free(q->lg);
	free(q->text);
	free(q->shown);
	ds_tok_text_free(&q->piece);
	ds_stopper_free(&q->stopper);
	free(q);
}

/* The head moved on: flush what the next ones buffered, in order. */
static void advance(run *r)
{
	while (r->head < r->n_rqs) {
		rq *q = r->rqs[r->head];

		if (q->n_buf && (fwrite(q->buf, 1, q->n_buf, stdout) != q->n_buf ||
				 fflush(stdout) != 0))
			r->failed = 1;
		if (q->n_lg && fwrite(q->lg, sizeof(float) * r->n_vocab, q->n_lg,
				      r->lf) != q->n_lg)
			r->failed = 1;
		q->n_buf = q->n_lg = 0;
		if (!q->done)
			return;
		r->rqs[r->head] = NULL;
		rq_free(q);
		r->head++;
	}
}

/* ---- scheduler callbacks ------------------------------------------------------------ */

static void cb_logits(void *u, size_t pos, const float *l, uint32_t n)
{
	rq *q = u;

	(void)pos;
	(void)n;
	if (q->run->lf != NULL)
		out_logits(q, l);
}

/* The answer's text, for --jsonl and the chat history. */
static void keep_text(rq *q, const char *s, size_t n)
{
	if (n == 0)
		return;
	if (grow((void **)&q->text, &q->cap_text, q->n_text + n + 1, 1)) {
		q->run->failed = 1;
		return;
	}
	memcpy(q->text + q->n_text, s, n);
	q->n_text += n;
	q->text[q->n_text] = '\0';
}

/* Decoded text of a token through the stop strings; 1 when one matched.
 * The piece and shown buffers live in the request: nothing is allocated
 * per token once they have grown. */
static int text_piece(rq *q, int32_t t)
{
	run *r = q->run;
	ds_err err;
	int stop = 0;

	q->piece.n = 0;
	q->n_shown = 0;
	/* ids past the tokenizer's (a vocabulary padded for the kernels, or
	 * a random model's) have no text */
	if ((uint32_t)t >= ds_tok_n_vocab(r->tok))
		return 0;
	if (ds_tok_stream_push(&q->ts, t, &q->piece, &err) ||
	    (stop = ds_stopper_push(&q->stopper, q->piece.s ? q->piece.s : "",
				    q->piece.n, &q->shown, &q->n_shown,
				    &q->cap_shown, &err)) < 0) {
		warnx_("%s", err.msg);
		r->bad = 1;
		stop = 1;
	}
	if (r->o->out == OUT_TEXT)
		out_bytes(q, q->shown, q->n_shown);
	keep_text(q, q->shown, q->n_shown);
	return stop;
}

static int cb_token(void *u, int32_t t)
{
	rq *q = u;
	run *r = q->run;
	char b[16];

	if (grow((void **)&q->gen, &q->cap_gen, q->n_gen + 1, sizeof *q->gen)) {
		r->failed = 1;
		return 1;
	}
	q->gen[q->n_gen++] = t;
	if (r->o->out == OUT_IDS) {
		snprintf(b, sizeof b, q->n_gen > 1 ? " %d" : "%d", t);
		out_bytes(q, b, strlen(b));
	}
	if (r->tok != NULL && r->o->out != OUT_IDS)
		return q->stop_hit = text_piece(q, t);
	return 0;
}

/* The text the decoder and the stop strings still hold. */
static void text_tail(rq *q)
{
	ds_err err;

	q->piece.n = 0;
	q->n_shown = 0;
	if (ds_tok_stream_finish(&q->ts, &q->piece, &err) ||
	    ds_stopper_push(&q->stopper, q->piece.s ? q->piece.s : "", q->piece.n,
			    &q->shown, &q->n_shown, &q->cap_shown, &err) < 0 ||
	    ds_stopper_flush(&q->stopper, &q->shown, &q->n_shown, &q->cap_shown,
			     &err)) {
		warnx_("%s", err.msg);
		q->run->bad = 1;
	}
	if (q->run->o->out == OUT_TEXT)
		out_bytes(q, q->shown, q->n_shown);
	keep_text(q, q->shown, q->n_shown);
}

static void cb_done(void *u, enum ds_finish why, const ds_req_stats *st)
{
	rq *q = u;
	run *r = q->run;

	q->why = why;
	q->st = *st;
	if (r->tok != NULL && r->o->out != OUT_IDS && !q->stop_hit)
		text_tail(q);
	out_final(q);
	q->done = 1;
	if (r->o->verbose)
		warnx_("request %zu: %zu prompt tokens, %zu generated, %s",
		       q->index + 1, st->prompt_tokens, st->completion_tokens,
		       ds_finish_name(why));
	if (r->o->chat) {
		free(r->last_answer);
		r->last_answer = strndup(q->text ? q->text : "", q->n_text);
	}
	r->tot_prompt += st->prompt_tokens;
	r->tot_gen += st->completion_tokens;
	if (st->prompt_tokens) {
		r->t_pre += st->t_prompt - st->t_start;
		r->t_dec += st->t_end - st->t_prompt;
		r->n_dec += st->completion_tokens ? st->completion_tokens - 1 : 0;
	}
	if (r->t_first == 0 || st->t_start < r->t_first)
		r->t_first = st->t_start;
	r->t_last = st->t_end;
	if (q->index == r->head)
		advance(r);
}

/* ---- requests -------------------------------------------------------------------------- */

static rq *rq_add(run *r, int32_t *ids, size_t n)
{
	rq *q = calloc(1, sizeof *q);

	if (q == NULL || grow((void **)&r->rqs, &r->cap_rqs, r->n_rqs + 1,
			      sizeof *r->rqs)) {
		free(q);
		free(ids);
		return NULL;
	}
	q->index = r->n_rqs;
	q->ids = ids;
	q->n_ids = n;
	q->run = r;
	r->rqs[r->n_rqs++] = q;
	return q;
}

/* --truncate keeps the prompt's last n_ctx - reserve tokens, reserve =
 * min(-n, n_ctx/2), or n_ctx/4 when -n is -1. */
static int fit_prompt(run *r, rq *q, size_t line, ds_err *err)
{
	size_t reserve, keep;

	if (q->n_ids <= r->n_ctx)
		return 0;
	if (!r->o->truncate)
		return ds_errf(err, "line %zu: prompt of %zu tokens is longer than "
			       "the context (%u): use --truncate or a larger "
			       "--ctx-size", line, q->n_ids, r->n_ctx);
	reserve = r->o->n_predict < 0 ? r->n_ctx / 4 :
		  (size_t)r->o->n_predict < r->n_ctx / 2 ? (size_t)r->o->n_predict
							  : r->n_ctx / 2;
	keep = r->n_ctx - reserve;
	memmove(q->ids, q->ids + q->n_ids - keep, keep * sizeof *q->ids);
	q->n_ids = keep;
	return 0;
}

static int rq_submit(run *r, rq *q, ds_err *err)
{
	ds_req req;

	memset(&req, 0, sizeof req);
	if (r->tok != NULL) {
		ds_tok_stream_init(&q->ts, r->tok, 0);
		if (ds_stopper_init(&q->stopper, r->o->stops, r->o->n_stops, err))
			return -1;
	}
	if (q->n_ids == 0) {        /* an empty line: an empty answer */
		q->why = DS_FINISH_LENGTH;
		out_final(q);
		q->done = 1;
		if (q->index == r->head)
			advance(r);
		return 0;
	}
	req.prompt = q->ids;
	req.n_prompt = q->n_ids;
	req.sp = r->o->sp;
	req.n_predict = r->o->n_predict;
	req.stop_ids = r->stop_ids;
	req.n_stop_ids = r->n_stop_ids;
	req.all_logits = r->lf != NULL;
	req.cb.on_logits = cb_logits;
	req.cb.on_token = cb_token;
	req.cb.on_done = cb_done;
	req.cb.user = q;
	return ds_sched_submit(r->sched, &req, NULL, err);
}

/* ---- input ------------------------------------------------------------------------------ */

/* One line of decimal ids separated by blanks. */
static int parse_ids(const run *r, const char *s, size_t len, size_t line,
		     int32_t **out, size_t *n, ds_err *err)
{
	ds_tok_ids ids = { 0 };

	if (ds_tok_ids_parse(s, len, r->n_vocab, &ids, err) != 0) {
		ds_tok_ids_free(&ids);
		return ds_err_prefix(err, "line %zu", line);
	}
	*out = ids.v;
	*n = ids.n;
	return 0;
}

/* The text as the model reads it: a chat turn in the template, or
 * plain (BOS as the tokenizer's config says). */
static int encode(run *r, const ds_chat_msg *msgs, size_t n_msgs,
		  const char *text, int32_t **ids, size_t *n, ds_err *err)
{
	ds_tok_ids out = { 0 };
	char *rendered = NULL;
	unsigned flags = 0;
	int rc;

	if (msgs != NULL) {
		ds_tok_info ti;
		char bos[64] = "", eos[64] = "";
		const char *p;
		size_t l;

		ds_tok_get_info(r->tok, &ti);
		if (ti.bos >= 0 && (p = ds_tok_piece(r->tok, ti.bos, &l)) && l < sizeof bos)
			memcpy(bos, p, l), bos[l] = '\0';
		if (ti.eos >= 0 && (p = ds_tok_piece(r->tok, ti.eos, &l)) && l < sizeof eos)
			memcpy(eos, p, l), eos[l] = '\0';
		if (ds_chat_render(r->tmpl, msgs, n_msgs, 1, bos[0] ? bos : NULL,
				   eos[0] ? eos : NULL, &rendered, err))
			return -1;
		text = rendered;
		flags = DS_TOK_NO_BOS;    /* the template has its own */
	}
	rc = ds_tok_encode(r->tok, text, strlen(text), flags, &out, err);
	free(rendered);
	if (rc) {
		ds_tok_ids_free(&out);
		return -1;
	}
	*ids = out.v;
	*n = out.n;
	return 0;
}

static int add_text(run *r, const char *text, size_t line, ds_err *err)
{
	ds_chat_msg msg = { "user", text };
	int32_t *ids = NULL;
	size_t n = 0;
	rq *q;

	if (encode(r, r->o->chat ? &msg : NULL, 1, text, &ids, &n, err))
		return ds_err_prefix(err, "line %zu", line);
	q = rq_add(r, ids, n);
	if (q == NULL)
		return ds_errf(err, "out of memory");
	return fit_prompt(r, q, line, err);
}

static int read_line(FILE *in, char **buf, size_t *cap, size_t *len)
{
	ssize_t n = getline(buf, cap, in);

	if (n < 0)
		return 0;
	if (n > 0 && (*buf)[n - 1] == '\n')
		(*buf)[--n] = '\0';
	*len = (size_t)n;
	return 1;
}

/* Every stdin line a request (read and checked before any runs). */
static int read_requests(run *r, ds_err *err)
{
	char *buf = NULL;
	size_t cap = 0, len, line = 0;
	int rc = 0;

	while (rc == 0 && read_line(stdin, &buf, &cap, &len)) {
		int32_t *ids = NULL;
		size_t n = 0;
		rq *q;

		line++;
		if (r->o->chat) {
			rc = add_text(r, buf, line, err);
			continue;
		}
		if (parse_ids(r, buf, len, line, &ids, &n, err))
			rc = -1;
		else if ((q = rq_add(r, ids, n)) == NULL)
			rc = ds_errf(err, "out of memory");
		else if (!r->o->perplexity)   /* there, all lines are one text */
			rc = fit_prompt(r, q, line, err);
	}
	if (rc == 0 && ferror(stdin))
		rc = ds_errf(err, "stdin: read error");
	free(buf);
	return rc;
}

/* -p TEXT, or -f FILE: one text. */
static int prompt_request(run *r, ds_err *err)
{
	char *text = NULL;
	int rc;

	if (r->o->file != NULL &&
	    ds_read_file(r->o->file, 1u << 30, &text, NULL, err))
		return -1;
	rc = add_text(r, text ? text : r->o->prompt, 1, err);
	free(text);
	return rc;
}

static int submit_all(run *r, ds_err *err)
{
	size_t i;

	for (i = 0; i < r->n_rqs; i++)
		if (r->rqs[i] != NULL && rq_submit(r, r->rqs[i], err))
			return ds_err_prefix(err, "line %zu", i + 1);
	return ds_sched_drain(r->sched, err);
}

/* ---- an interactive chat (stdin a terminal) ------------------------------------------------- */

static int chat_loop(run *r, ds_err *err)
{
	ds_chat_msg *msgs = NULL;
	size_t n = 0, cap = 0, len, lcap = 0, i;
	char *line = NULL;
	int rc = 0;

	for (;;) {
		int32_t *ids;
		size_t n_ids;
		rq *q;

		fputs("> ", stderr);
		fflush(stderr);
		if (!read_line(stdin, &line, &lcap, &len))
			break;
		if (len == 0)
			continue;
		if (grow((void **)&msgs, &cap, n + 2, sizeof *msgs) ||
		    (msgs[n].content = strdup(line)) == NULL) {
			rc = ds_errf(err, "out of memory");
			break;
		}
		msgs[n++].role = "user";
		if (encode(r, msgs, n, NULL, &ids, &n_ids, err) ||
		    (q = rq_add(r, ids, n_ids)) == NULL ||
		    fit_prompt(r, q, n, err) || rq_submit(r, q, err) ||
		    ds_sched_drain(r->sched, err)) {
			rc = -1;
			break;
		}
		msgs[n].role = "assistant";
		msgs[n].content = r->last_answer ? r->last_answer : strdup("");
		r->last_answer = NULL;
		if (msgs[n++].content == NULL) {
			rc = ds_errf(err, "out of memory");
			break;
		}
	}
	for (i = 0; i < n; i++)
		free((char *)msgs[i].content);
	free(msgs);
	free(line);
	return rc;
}

/* ---- perplexity ------------------------------------------------------------------------------ */

/* llama-perplexity's windows: non-overlapping windows of n_ctx tokens; in
 * each, the logits at positions n_ctx/2 .. n_ctx-2 score the next token. */
static int perplexity(run *r, const int32_t *ids, size_t n, ds_err *err)
{
	size_t C = r->n_ctx, first = C / 2, w, p0, i, count = 0;
	ds_fwd_info fi;
	int32_t *pos, *seq;
	uint8_t *want;
	double nll = 0;
	int rc = 0;

	if (n < C)
		return ds_errf(err, "--perplexity: %zu tokens, fewer than one window "
			       "of --ctx-size %zu", n, C);
	ds_fwd_get_info(r->fwd, &fi);
	pos = calloc(fi.max_batch, sizeof *pos);
	seq = calloc(fi.max_batch, sizeof *seq);
	want = calloc(fi.max_batch, 1);
	if (!pos || !seq || !want)
		rc = ds_errf(err, "out of memory");
	for (w = 0; rc == 0 && w < n / C; w++) {
		const int32_t *win = ids + w * C;

		ds_kvcache_seq_keep(&r->kv, 0, 0);
		for (p0 = 0; rc == 0 && p0 < C; p0 += fi.max_batch) {
			size_t m = C - p0 < fi.max_batch ? C - p0 : fi.max_batch, k = 0;
			ds_batch b = { m, win + p0, pos, seq, want };

			for (i = 0; i < m; i++) {
				pos[i] = (int32_t)(p0 + i);
				want[i] = p0 + i >= first && p0 + i + 1 < C;
			}
			if (ds_fwd_decode(r->fwd, &r->kv, &b, err)) {
				rc = -1;
				break;
			}
			for (i = 0; i < m; i++) {
				const float *l;
				double mx = -INFINITY, se = 0;
				uint32_t v;

				if (!want[i])
					continue;
				l = ds_fwd_logits(r->fwd, k++);
				for (v = 0; v < r->n_vocab; v++)
					mx = l[v] > mx ? l[v] : mx;
				for (v = 0; v < r->n_vocab; v++)
					se += exp(l[v] - mx);
				nll -= l[win[p0 + i + 1]] - mx - log(se);
				count++;
			}
		}
	}
	if (rc == 0 && printf("perplexity %.6f tokens %zu windows %zu ctx %zu\n",
			      exp(nll / count), count, n / C, C) < 0)
		rc = ds_errf(err, "stdout: write error");
	free(pos);
	free(seq);
	free(want);
	return rc;
}

static int run_perplexity(run *r, ds_err *err)
{
	size_t i, n = 0;
	int32_t *all = NULL;
	size_t cap = 0;
	int rc;

	if (read_requests(r, err))
		return -1;
	for (i = 0; i < r->n_rqs; i++) {
		rq *q = r->rqs[i];

		if (grow((void **)&all, &cap, n + q->n_ids + 1, sizeof *all)) {
			free(all);
			return ds_errf(err, "out of memory");
		}
		memcpy(all + n, q->ids, q->n_ids * sizeof *all);
		n += q->n_ids;
	}
	rc = perplexity(r, all, n, err);
	free(all);
	return rc;
}

/* ---- setting up ------------------------------------------------------------------------------- */

static double rss_mib(void)
{
	long pages = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f == NULL)
		return 0;
	if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
		resident = 0;
	fclose(f);
	return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1 << 20);
}

/* Does this run need the tokenizer (1), use it if present (0)? */
static int tok_needed(const opts *o)
{
	return o->out == OUT_TEXT || o->prompt || o->file || o->chat || o->n_stops;
}

static int load_tokenizer(run *r, ds_err *err)
{
	char *path = ds_path_join(r->o->dir, "tokenizer.bin");
	const char *why = r->o->prompt || r->o->file ? "-p and -f need" :
			  r->o->chat ? "--chat needs" : r->o->n_stops ? "--stop needs" :
			  "text output needs";
	int rc = 0;

	if (path == NULL)
		return ds_errf(err, "out of memory");
	if (r->o->perplexity || (!tok_needed(r->o) && r->o->out == OUT_IDS) ||
	    (access(path, F_OK) != 0 && !tok_needed(r->o))) {
		free(path);
		return 0;
	}
	if (access(path, F_OK) != 0)
		rc = ds_errf(err, "%s: no tokenizer (%s the model's tokenizer; "
			     "--ids and --jsonl work without)", path, why);
	else if (ds_tok_load(&r->tok, path, err))
		rc = -1;
	free(path);
	return rc;
}

static void add_stop_id(run *r, int64_t id)
{
	size_t i;

	if (id < 0 || id >= r->n_vocab || r->n_stop_ids >= sizeof r->stop_ids /
							   sizeof r->stop_ids[0])
		return;
	for (i = 0; i < r->n_stop_ids; i++)
		if (r->stop_ids[i] == id)
			return;
	r->stop_ids[r->n_stop_ids++] = (int32_t)id;
}

/* EOS and the model's other end tokens; the chat template's end marker. */
static int chat_and_stops(run *r, ds_err *err)
{
	const json_t *ct;
	const char *name = r->o->chat_tmpl;
	uint32_t i;

	for (i = 0; i < r->m.hp.n_eos; i++)
		add_stop_id(r, r->m.hp.eos_ids[i]);
	if (r->tok == NULL)
		return 0;
	add_stop_id(r, ds_tok_eos(r->tok));
	add_stop_id(r, ds_tok_eot(r->tok));
	if (!r->o->chat)
		return 0;
	ct = json_object_get(r->m.meta, "chat_template");
	if (name == NULL && json_is_string(ct))
		name = json_string_value(ct);
	if (name == NULL) {
		ds_tok_info ti;

		ds_tok_get_info(r->tok, &ti);
		name = ti.chat_template && ti.chat_template[0] ? ti.chat_template : NULL;
	}
	if (name == NULL)
		return ds_errf(err, "%s: the model names no chat template: give "
			       "--chat-template", r->o->dir);
	if (ds_chat_parse(name, &r->tmpl, err))
		return -1;
	if (ds_chat_end_marker(r->tmpl) != NULL) {
		const char *mk = ds_chat_end_marker(r->tmpl);

		add_stop_id(r, ds_tok_piece_id(r->tok, mk, strlen(mk)));
	}
	return 0;
}

static int load_model(run *r, ds_err *err)
{
	opts *o = r->o;
	ds_load_opts lo = { o->no_populate, o->mlock, o->hugepages,
			    o->numa ? r->numa : DS_NUMA_OFF, o->verify };
	char warn[256];
	double t0 = ds_now_s();

	if (ds_model_open(&r->m, r->pool, o->dir, &lo, &r->pl, warn, sizeof warn,
			  err))
		return -1;
	if (warn[0])
		warnx_("warning: --hugepages: %s", warn);
	r->t_load = ds_now_s() - t0;
	return 0;
}

static void verbose_setup(const run *r)
{
	ds_fwd_info fi;

	ds_fwd_get_info(r->fwd, &fi);
	warnx_("model %s: %s, %u layers, %.1f MiB of weights, %.1f MiB read "
	       "per decoded token, %.1f MiB derived (MLA)", r->o->dir,
	       ds_arch_name(r->m.hp.arch), r->m.hp.n_layer,
	       fi.weight_bytes / 1048576.0, fi.active_bytes / 1048576.0,
	       fi.derived_bytes / 1048576.0);
	warnx_("kernels %s, %d threads, seed %llu", ds_kernels_name(),
	       ds_pool_threads(r->pool), (unsigned long long)r->o->sp.seed);
	warnx_("loaded in %.3f s", r->t_load);
	warnx_("KV cache %s: %u slots x %u positions = %.1f MiB",
	       ds_kvtype_name(r->kv.type), r->kv.n_slot, r->kv.n_ctx,
	       r->kv.bytes / 1048576.0);
	warnx_("RSS %.1f MiB", rss_mib());
}

static int setup(run *r, ds_err *err)
{
	opts *o = r->o;
	ds_pool_opts po = { (int)o->threads, o->cpus, 0 };
	ds_fwd_opts fo = { 0 };

	ds_cpuset cpus;

	/* the tune library's checks: CPUs this process may use; SCHED_FIFO
	 * before the pool, whose threads inherit it */
	if (o->cpus && ds_cpus_arg(o->cpus, &cpus, err))
		return ds_err_prefix(err, "--cpus");
	if (o->sched_fifo && ds_sched_fifo((int)o->sched_fifo, err))
		return ds_err_prefix(err, "--sched-fifo");
	if (ds_pool_init(&r->pool, &po, err) || load_model(r, err) ||
	    load_tokenizer(r, err))
		return -1;
	r->n_vocab = r->m.hp.n_vocab;
	r->n_ctx = o->ctx_size ? (uint32_t)o->ctx_size :
		   r->m.hp.n_ctx_train && r->m.hp.n_ctx_train < 4096 ? r->m.hp.n_ctx_train
								      : 4096;
	fo.max_batch = o->parallel + 1 > 256 ? (uint32_t)o->parallel + 1 : 256;
	if (chat_and_stops(r, err) ||
	    ds_fwd_init(&r->fwd, &r->m, r->pool, &fo, err) ||
	    ds_kvcache_init(&r->kv, &r->m.hp, (uint32_t)o->parallel, r->n_ctx,
			    r->kvtype, err) ||
	    ds_sched_init(&r->sched, r->fwd, &r->kv, NULL, err))
		return -1;
	if (o->verbose)
		verbose_setup(r);
	return 0;
}

/* An interrupted run leaves no FILE.tmp behind (unlink is
 * async-signal-safe). */
static const char *volatile tmp_to_remove;

static void on_signal(int sig)
{
	if (tmp_to_remove != NULL)
		unlink(tmp_to_remove);
	signal(sig, SIG_DFL);
	raise(sig);
}

static int open_logits(run *r, ds_err *err)
{
	if (r->o->logits_out == NULL)
		return 0;
	r->lf_tmp = malloc(strlen(r->o->logits_out) + 8);
	if (r->lf_tmp == NULL)
		return ds_errf(err, "out of memory");
	sprintf(r->lf_tmp, "%s.tmp", r->o->logits_out);
	r->lf = fopen(r->lf_tmp, "wb");
	if (r->lf == NULL)
		return ds_errf(err, "%s: %s", r->lf_tmp, strerror(errno));
	tmp_to_remove = r->lf_tmp;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	signal(SIGPIPE, on_signal);
	return 0;
}

/* The logits file is renamed into place only when complete. */
static int close_logits(run *r, int ok, ds_err *err)
{
	int rc = 0;

	if (r->lf == NULL)
		return 0;
	if (fclose(r->lf) != 0 && ok)
		rc = ds_errf(err, "%s: write error", r->lf_tmp);
	r->lf = NULL;
	if (ok && rc == 0 && rename(r->lf_tmp, r->o->logits_out) != 0)
		rc = ds_errf(err, "%s: %s", r->o->logits_out, strerror(errno));
	if (!ok || rc)
		unlink(r->lf_tmp);
	tmp_to_remove = NULL;
	free(r->lf_tmp);
	return rc;
}

static void teardown(run *r)
{
	size_t i;

	ds_sched_free(r->sched);
	for (i = 0; i < r->n_rqs; i++)
		if (r->rqs[i] != NULL)
			rq_free(r->rqs[i]);
	free(r->rqs);
	free(r->last_answer);
	ds_kvcache_free(&r->kv);
	ds_fwd_free(r->fwd);
	if (r->tok)
		ds_tok_free(r->tok);
	ds_model_free(&r->m);
	ds_placement_free(&r->pl);
	if (r->pool)
		ds_pool_free(r->pool);
}

static void verbose_end(const run *r)
{
	double t = r->t_last - r->t_first;

	/* prompt: tokens / time to the first sampled token; decode: the
	 * tokens sampled after the first / the time after it (summed over
	 * the requests, so with --parallel each is its own request's rate) */
	warnx_("%zu prompt tokens in %.3f s (%.1f tokens/s), %zu generated in "
	       "%.3f s (%.2f tokens/s decoding), %.3f s in all", r->tot_prompt,
	       r->t_pre, r->t_pre > 0 ? r->tot_prompt / r->t_pre : 0, r->tot_gen,
	       r->t_dec, r->t_dec > 0 ? r->n_dec / r->t_dec : 0, t);
	warnx_("RSS %.1f MiB", rss_mib());
}

static int work(run *r, ds_err *err)
{
	if (r->o->perplexity)
		return run_perplexity(r, err);
	if (open_logits(r, err))
		return -1;
	if (r->o->prompt || r->o->file) {
		if (prompt_request(r, err) || submit_all(r, err))
			return -1;
	} else if (r->o->chat && isatty(STDIN_FILENO)) {
		if (chat_loop(r, err))
			return -1;
	} else if (read_requests(r, err) || submit_all(r, err)) {
		return -1;
	}
	if (r->failed)
		return ds_errf(err, "stdout: write error");
	return r->bad ? ds_errf(err, "giving up after the error above") : 0;
}

int main(int argc, char **argv)
{
	opts o;
	run r;
	ds_err err;
	int rc;

	rc = parse_args(&o, argc, argv);
	if (rc)
		return rc < 0 ? 0 : rc;
	memset(&r, 0, sizeof r);
	r.o = &o;
	if (o.cache_type && ds_kvtype_parse(o.cache_type, &r.kvtype, &err))
		return bad_value("--cache-type", o.cache_type, err.msg);
	if (!o.cache_type)
		r.kvtype = DS_KV_F16;
	if (o.numa && ds_numa_parse(o.numa, &r.numa, &err))
		return bad_value("--numa", o.numa, err.msg);
	if (!o.seed_set)
		o.sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	ds_map_guard(); /* model.bin and tokenizer.bin are used in place */
	rc = setup(&r, &err) || work(&r, &err) ? 1 : 0;
	if (close_logits(&r, rc == 0, rc ? NULL : &err))
		rc = 1;
	if (rc)
		warnx_("%s", err.msg);
	else if (o.verbose)
		verbose_end(&r);
	teardown(&r);
	free(o.stops);
	return rc;
}

/*
 * ds-run - generate from a model: token-id lines (or text) in, text, ids,
 * JSON lines or logits out (ds-run(1)).
 */
#include <err.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/afile.h"
#include "base/cli.h"
#include "base/json.h"
#include "base/util.h"
#include "bench/perplexity.h"
#include "dist/dist.h"
#include "host/sysinfo/sysinfo.h"
#include "runtime/describe.h"
#include "runtime/runner.h"
#include "spec/drafter.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ds-run -m DIR [-n N] [--ctx-size N] [-b N] [--threads N] [--temp T]\n"
		"              [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R]\n"
		"              [--repeat-last-n N] [--seed S] [--stop STR ...] [--ids | --jsonl]\n"
		"              [--logits-out FILE] [--parallel N] [-p TEXT | -f FILE] [--chat]\n"
		"              [--chat-template NAME | --chat-template-file FILE] [--perplexity]\n"
		"              [--truncate] [--verify] [--grammar FILE | --json-schema FILE]\n"
		"              [--mlock] [--no-populate] [--hugepages] [--numa MODE]\n"
		"              [--cpus LIST] [--sched-fifo PRIO] [--cache-type TYPE]\n"
		"              [--cache-ram MIB] [--cache-dir DIR] [--verbose]\n"
		"              [--spec mtp|ngram|draft] [--spec-k K] [--draft DIR]\n"
		"              [--mpi [--mpi-timeout S]]\n"
		"       ds-run -h | --version\n");
}

/* ---- options ------------------------------------------------------------------ */

enum out_mode { OUT_TEXT, OUT_IDS, OUT_JSONL };

typedef struct opts {
	const char *dir, *prompt, *file, *logits_out, *cpus, *chat_tmpl, *chat_file;
	const char *cache_dir, *draft;
	const char *grammar, *schema;   /* --grammar, --json-schema */
	long cache_mib;
	long n_predict;
	uint32_t ctx_size, parallel, batch;
	int threads, sched_fifo;
	ds_sampler_params sp;
	int seed_set;
	char **stops;
	size_t n_stops;
	enum out_mode out;
	enum ds_kvtype kv_type;
	ds_load_opts load;
	int chat, perplexity, truncate, verbose;
	int mpi;
	double mpi_timeout;
	enum ds_spec_kind spec;
	uint32_t spec_k;
} opts;

enum {
	O_CACHE = 256, O_CACHE_RAM, O_CACHE_DIR, O_CHAT, O_CHAT_TMPL, O_CHAT_FILE, O_CPUS, O_CTX, O_HUGE, O_IDS, O_JSONL,
	O_LOGITS, O_MINP, O_MLOCK, O_NOPOP, O_NUMA, O_PAR, O_PPL, O_RLN, O_RP,
	O_FIFO, O_SEED, O_STOP, O_TEMP, O_THREADS, O_TOPK, O_TOPP, O_TRUNC,
	O_VERBOSE, O_VERIFY, O_VERSION, O_MPI, O_MPI_TIMEOUT, O_SPEC, O_SPEC_K,
	O_DRAFT, O_GRAMMAR, O_SCHEMA,
};

static const struct option longopts[] = {
	{ "batch", required_argument, NULL, 'b' },
	{ "cache-dir", required_argument, NULL, O_CACHE_DIR },
	{ "cache-ram", required_argument, NULL, O_CACHE_RAM },
	{ "cache-type", required_argument, NULL, O_CACHE },
	{ "chat", no_argument, NULL, O_CHAT },
	{ "chat-template", required_argument, NULL, O_CHAT_TMPL },
	{ "chat-template-file", required_argument, NULL, O_CHAT_FILE },
	{ "cpus", required_argument, NULL, O_CPUS },
	{ "ctx-size", required_argument, NULL, O_CTX },
	{ "draft", required_argument, NULL, O_DRAFT },
	{ "file", required_argument, NULL, 'f' },
	{ "grammar", required_argument, NULL, O_GRAMMAR },
	{ "help", no_argument, NULL, 'h' },
	{ "hugepages", no_argument, NULL, O_HUGE },
	{ "ids", no_argument, NULL, O_IDS },
	{ "json-schema", required_argument, NULL, O_SCHEMA },
	{ "jsonl", no_argument, NULL, O_JSONL },
	{ "logits-out", required_argument, NULL, O_LOGITS },
	{ "min-p", required_argument, NULL, O_MINP },
	{ "mlock", no_argument, NULL, O_MLOCK },
	{ "model", required_argument, NULL, 'm' },
	{ "mpi", no_argument, NULL, O_MPI },
	{ "mpi-timeout", required_argument, NULL, O_MPI_TIMEOUT },
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
	{ "spec", required_argument, NULL, O_SPEC },
	{ "spec-k", required_argument, NULL, O_SPEC_K },
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

static int add_stop(opts *o, char *s)
{
	char **n = realloc(o->stops, (o->n_stops + 1) * sizeof *n);

	if (n == NULL)
		return 1;
	o->stops = n;
	o->stops[o->n_stops++] = s;
	return 0;
}

/* The options that take words, not numbers. */
static int parse_word(opts *o, int c, char *a)
{
	ds_err err;

	switch (c) {
	case O_CACHE:
		return ds_kvtype_parse(a, &o->kv_type, &err) ?
		       ds_opt_bad("--cache-type", a, err.msg) : 0;
	case O_NUMA:
		return ds_numa_parse(a, &o->load.numa, &err) ?
		       ds_opt_bad("--numa", a, err.msg) : 0;
	case O_SPEC:
		return ds_spec_parse(a, &o->spec, &err) ?
		       ds_opt_bad("--spec", a, err.msg) : 0;
	case O_DRAFT: o->draft = a; return 0;
	case O_GRAMMAR: o->grammar = a; return 0;
	case O_SCHEMA: o->schema = a; return 0;
	case O_STOP: return add_stop(o, a);
	case 'f': o->file = a; return 0;
	case 'm': o->dir = a; return 0;
	case 'p': o->prompt = a; return 0;
	case O_CHAT_TMPL: o->chat_tmpl = a; return 0;
	case O_CHAT_FILE: o->chat_file = a; return 0;
	case O_CACHE_DIR: o->cache_dir = a; return 0;
	case O_CPUS: o->cpus = a; return 0;
	case O_LOGITS: o->logits_out = a; return 0;
	}
	return -1;
}

static int parse_one(opts *o, int c, char *a)
{
	ds_sampler_params *sp = &o->sp;
	int rc = parse_word(o, c, a);

	if (rc >= 0)
		return rc;
	switch (c) {
	case 'n': return ds_opt_long("-n", a, -1, 1L << 30, &o->n_predict);
	case 'b': return ds_opt_u32("--batch", a, 1, DS_BATCH_MAX, &o->batch);
	case O_CACHE_RAM: return ds_opt_long("--cache-ram", a, 0, 1L << 30, &o->cache_mib);
	case O_CTX: return ds_opt_u32("--ctx-size", a, 4, 1u << 24, &o->ctx_size);
	case O_FIFO: return ds_opt_int("--sched-fifo", a, 1, 99, &o->sched_fifo);
	case O_MINP: return ds_opt_float("--min-p", a, 0, 1, &sp->min_p);
	case O_PAR: return ds_opt_u32("--parallel", a, 1, 256, &o->parallel);
	case O_RLN: return ds_opt_int("--repeat-last-n", a, 0, 1 << 20, &sp->repeat_last_n);
	case O_RP: return ds_opt_float("--repeat-penalty", a, 0.01, 100, &sp->repeat_penalty);
	case O_SEED: o->seed_set = 1; return ds_opt_u64("--seed", a, &sp->seed);
	case O_SPEC_K: return ds_opt_u32("--spec-k", a, 1, DS_SPEC_MAX_K, &o->spec_k);
	case O_TEMP: return ds_opt_float("--temp", a, 0, 100, &sp->temp);
	case O_THREADS: return ds_opt_int("--threads", a, 1, DS_POOL_MAX, &o->threads);
	case O_MPI_TIMEOUT: return ds_opt_double("--mpi-timeout", a, 0.1, 86400, &o->mpi_timeout);
	case O_TOPK: return ds_opt_int("--top-k", a, 0, 1 << 30, &sp->top_k);
	case O_TOPP: return ds_opt_float("--top-p", a, 0, 1, &sp->top_p);
	case O_CHAT: o->chat = 1; return 0;
	case O_HUGE: o->load.hugepages = 1; return 0;
	case O_IDS: o->out = OUT_IDS; return 0;
	case O_JSONL: o->out = OUT_JSONL; return 0;
	case O_MLOCK: o->load.mlock = 1; return 0;
	case O_MPI: o->mpi = 1; return 0;
	case O_NOPOP: o->load.no_populate = 1; return 0;
	case O_PPL: o->perplexity = 1; return 0;
	case O_TRUNC: o->truncate = 1; return 0;
	case O_VERBOSE: o->verbose = 1; return 0;
	case O_VERIFY: o->load.verify = 1; return 0;
	}
	return 2;
}

static int check_args(const opts *o)
{
	if (o->dir == NULL) {
		warnx("-m DIR is required");
		usage(stderr);
		return 2;
	}
	if (o->prompt && o->file) {
		warnx("-p and -f exclude each other");
		return 2;
	}
	if (o->chat_tmpl && o->chat_file) {
		warnx("--chat-template and --chat-template-file exclude each other");
		return 2;
	}
	if (o->cache_dir && o->cache_mib == 0) {
		warnx("--cache-dir needs a prompt cache: --cache-ram 0 turns it off");
		return 2;
	}
	if (o->perplexity && (o->chat || o->prompt || o->file || o->parallel > 1 ||
			      o->spec)) {
		warnx("--perplexity reads ids from stdin alone");
		return 2;
	}
	if (o->mpi_timeout > 0 && !o->mpi) {
		warnx("--mpi-timeout needs --mpi");
		return 2;
	}
	if ((o->spec == DS_SPEC_DRAFT) != (o->draft != NULL)) {
		warnx("--draft DIR goes with --spec draft, and --spec draft needs it");
		return 2;
	}
	if (o->spec_k && !o->spec) {
		warnx("--spec-k needs --spec");
		return 2;
	}
	if (o->grammar && o->schema) {
		warnx("--grammar and --json-schema exclude each other");
		return 2;
	}
	if ((o->grammar || o->schema) && o->perplexity) {
		warnx("--perplexity samples nothing: no --grammar or --json-schema");
		return 2;
	}
	return 0;
}

/* 0 go on, 2 usage error, -1 exit 0 (help, version) */
static int parse_args(opts *o, int argc, char **argv)
{
	int c, rc;

	memset(o, 0, sizeof *o);
	o->n_predict = -1;
	o->cache_mib = -1;
	o->parallel = 1;
	o->kv_type = DS_KV_F16;
	ds_sampler_defaults(&o->sp);
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":b:f:hm:n:p:", longopts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return -1;
		}
		if (c == O_VERSION) {
			printf("ds-run %s\n", DS_VERSION);
			return -1;
		}
		if (c == '?' || c == ':') {
			ds_opt_getopt_error(c, argv[optind - 1]);
			usage(stderr);
			return 2;
		}
		if ((rc = parse_one(o, c, optarg)) != 0)
			return rc;
	}
	if (optind < argc) {
		warnx("unexpected argument %s", argv[optind]);
		return 2;
	}
	return check_args(o);
}

/* ---- the run ------------------------------------------------------------------------ */

typedef struct run {
	opts *o;
	ds_dist *d;                /* --mpi, or NULL */
	ds_session s;
	ds_afile lf;               /* --logits-out */
	ds_runner rn;
	int have_rn;
	ds_tok_ids all;            /* --perplexity: every line's ids */
	ds_grammar *g;             /* --grammar, --json-schema */
} run;

/* --verbose: a line per request */
static void on_done(void *user, size_t index, enum ds_finish why,
		    const ds_req_stats *st)
{
	(void)user;
	ds_describe_request(index, why, st);
}

/* The session's warnings (prompt cache files ignored). */
static void warn_line(void *user, const char *line)
{
	(void)user;
	warnx("warning: %s", line);
}

/* The prompt against the context (ds_session_fit), with the way out. */
static int fit(run *r, ds_tok_ids *ids, ds_err *err)
{
	size_t l;

	if (ds_session_fit(&r->s, ids, r->o->n_predict, r->o->truncate, err) == 0)
		return 0;
	l = strlen(err->msg);
	snprintf(err->msg + l, sizeof err->msg - l, ": use --truncate or a larger "
		 "--ctx-size");
	return -1;
}

/* ---- input ------------------------------------------------------------------------------ */

/* One user message; NULL when out of memory or the text is not UTF-8. */
static json_t *user_msg(const char *text, ds_err *err)
{
	json_t *m = json_pack("{s:s, s:s}", "role", "user", "content", text);

	if (m == NULL)
		ds_errf(err, "not valid UTF-8 (a chat message must be)");
	return m;
}

/* A text as the model reads it: a chat turn in the template, or plain. */
static int add_text(run *r, const char *text, size_t line, ds_err *err)
{
	json_t *conv = NULL, *m;
	ds_tok_ids ids = { 0 };
	int rc;

	if (r->o->chat && ((m = user_msg(text, err)) == NULL ||
			   (conv = json_pack("[o]", m)) == NULL))
		rc = -1;
	else
		rc = r->o->chat ? ds_session_chat(&r->s, conv, NULL, &ids, NULL, err)
				: ds_session_encode(&r->s, text, &ids, err);
	json_decref(conv);
	if (rc || fit(r, &ids, err)) {
		ds_tok_ids_free(&ids);
		return ds_err_prefix(err, "line %zu", line);
	}
	return ds_runner_add(&r->rn, &ids, err);
}

/* A line of decimal ids separated by blanks; --perplexity joins them. */
static int add_ids(run *r, const char *s, size_t len, size_t line, ds_err *err)
{
	ds_tok_ids ids = { 0 };
	int rc = 0;

	if (ds_tok_ids_parse(s, len, r->s.n_vocab, &ids, err) ||
	    (!r->o->perplexity && fit(r, &ids, err))) {
		ds_tok_ids_free(&ids);
		return ds_err_prefix(err, "line %zu", line);
	}
	if (!r->o->perplexity)
		return ds_runner_add(&r->rn, &ids, err);
	if (ds_grow((void **)&r->all.v, &r->all.cap, r->all.n + ids.n, sizeof *ids.v))
		rc = ds_errf(err, "out of memory");
	else
		memcpy(r->all.v + r->all.n, ids.v, ids.n * sizeof *ids.v);
	r->all.n += rc ? 0 : ids.n;
	ds_tok_ids_free(&ids);
	return rc;
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
		line++;
		rc = r->o->chat ? add_text(r, buf, line, err)
				: add_ids(r, buf, len, line, err);
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

/* ---- an interactive chat (stdin a terminal) ------------------------------------------------- */

/* One turn: the conversation so far, answered; the answer joins it. */
static int chat_turn(run *r, json_t *conv, ds_err *err)
{
	ds_tok_ids ids;
	json_t *a;

	if (ds_session_chat(&r->s, conv, NULL, &ids, NULL, err) || fit(r, &ids, err)) {
		ds_tok_ids_free(&ids);
		return -1;
	}
	if (ds_runner_add(&r->rn, &ids, err) || ds_runner_run(&r->rn, err))
		return -1;
	/* the answer as shown (text a model makes may not be UTF-8) */
	a = ds_json_text(r->rn.last ? r->rn.last : "", r->rn.last ? r->rn.n_last : 0);
	free(r->rn.last);
	r->rn.last = NULL;
	if (a == NULL || json_array_append_new(conv, json_pack("{s:s, s:o}", "role",
							       "assistant", "content", a)))
		return ds_errf(err, "out of memory");
	return 0;
}

static int chat_loop(run *r, ds_err *err)
{
	json_t *conv = json_array(), *m;
	size_t len, lcap = 0;
	char *line = NULL;
	int rc = conv ? 0 : ds_errf(err, "out of memory");

	while (rc == 0) {
		fputs("> ", stderr);
		fflush(stderr);
		if (!read_line(stdin, &line, &lcap, &len))
			break;
		if (len == 0)
			continue;
		if ((m = user_msg(line, err)) == NULL) {
			warnx("%s", err->msg);
			continue;
		}
		if (json_array_append_new(conv, m))
			rc = ds_errf(err, "out of memory");
		else
			rc = chat_turn(r, conv, err);
	}
	json_decref(conv);
	free(line);
	return rc;
}

/* ---- perplexity ------------------------------------------------------------------------------ */

static int run_perplexity(run *r, ds_err *err)
{
	ds_ppl p;

	if (read_requests(r, err))
		return -1;
	if (ds_perplexity(r->s.fwd, &r->s.kv, r->all.v, r->all.n, r->s.n_ctx, &p, err))
		return ds_err_prefix(err, "--perplexity");
	if (printf("perplexity %.6f tokens %zu windows %zu ctx %u\n", p.ppl, p.count,
		   p.windows, r->s.n_ctx) < 0)
		return ds_errf(err, "stdout: write error");
	return 0;
}

/* ---- setting up ------------------------------------------------------------------------------- */

/* Whether the tokenizer is needed (and by what), or used if present. */
static enum ds_sess_tok tok_mode(const opts *o, const char **why)
{
	*why = o->prompt || o->file ? "-p and -f need" : o->chat ? "--chat needs" :
	       o->n_stops ? "--stop needs" : o->grammar ? "--grammar needs" :
	       o->schema ? "--json-schema needs" : "text output needs";
	if (o->perplexity)
		return DS_SESS_TOK_NONE;
	if (o->out == OUT_TEXT || o->prompt || o->file || o->chat || o->n_stops ||
	    o->grammar || o->schema)
		return DS_SESS_TOK_NEED;
	return o->out == OUT_IDS ? DS_SESS_TOK_NONE : DS_SESS_TOK_IF_PRESENT;
}

static void runner_init(run *r)
{
	const opts *o = r->o;
	ds_runner_opts ro = {
		.out = o->out == OUT_IDS ? DS_RUN_IDS : o->out == OUT_JSONL ? DS_RUN_JSONL
									     : DS_RUN_TEXT,
		.text = stdout, .logits = r->lf.f, .sp = o->sp, .n_predict = o->n_predict,
		.stops = o->stops, .n_stops = o->n_stops, .chat = o->chat,
		.on_done = o->verbose ? on_done : NULL, .grammar = r->g,
	};

	ds_runner_init(&r->rn, &r->s, &ro);
	r->have_rn = 1;
}

/* The session every rank opens alike (the tokenizer is rank 0's). */
static ds_session_opts session_opts(const opts *o, const ds_dist *d)
{
	ds_session_opts so = {
		.dir = o->dir, .threads = o->threads, .cpus = o->cpus, .load = o->load,
		.ctx_size = o->ctx_size, .slots = o->parallel, .batch = o->batch,
		.kv_type = o->kv_type,
		.chat_template = o->chat_tmpl, .chat_template_file = o->chat_file,
		.tok = DS_SESS_TOK_NONE, .cache_mib = o->cache_mib,
		.cache_dir = o->cache_dir, .warn = warn_line,
		.spec = o->spec, .spec_k = o->spec_k, .draft_dir = o->draft,
	};

	if (d != NULL)
		ds_dist_load_opts(d, &so.load);
	return so;
}

/* The host settings of --cpus and --sched-fifo. */
static int host_setup(const opts *o, ds_err *err)
{
	ds_cpuset cpus;

	/* the CPUs this process may use; SCHED_FIFO before the pool, whose
	 * threads inherit it */
	if (o->cpus && ds_cpus_arg(o->cpus, &cpus, err))
		return ds_err_prefix(err, "--cpus");
	if (o->sched_fifo && ds_sched_fifo(o->sched_fifo, err))
		return ds_err_prefix(err, "--sched-fifo");
	return 0;
}

static int setup(run *r, ds_err *err)
{
	const opts *o = r->o;
	ds_session_opts so;

	if ((o->grammar || o->schema) &&
	    ds_grammar_load(o->grammar ? o->grammar : o->schema, !o->grammar,
			    &r->g, err))
		return -1;

	/* first, on every rank: the model's split, then they follow */
	if (r->d != NULL && ds_dist_model(r->d, o->dir, err))
		return -1;
	so = session_opts(o, r->d);
	so.ep = r->d ? ds_dist_ep(r->d) : NULL;
	so.tok = tok_mode(o, &so.tok_why);
	if (host_setup(o, err) || ds_session_open(&r->s, &so, err))
		return -1;
	if (r->s.warn[0])
		warnx("warning: --hugepages: %s", r->s.warn);
	if (r->s.tpl_warn[0] && (o->chat || o->verbose))
		warnx("warning: %s", r->s.tpl_warn);
	if (o->chat && !r->s.have_tmpl)
		return ds_errf(err, "%s: %s: give --chat-template or "
			       "--chat-template-file", o->dir, r->s.tpl_err);
	if (o->verbose)
		ds_describe_session(&r->s, o->dir, o->sp.seed, o->spec_k);
	if (o->verbose && r->d != NULL)
		ds_describe_rank(r->d, &r->s, 0);
	if (o->logits_out && ds_afile_open(&r->lf, o->logits_out, err))
		return -1;
	runner_init(r);
	return 0;
}

static void teardown(run *r)
{
	if (r->have_rn)
		ds_runner_free(&r->rn);
	ds_tok_ids_free(&r->all);
	ds_afile_abort(&r->lf);
	ds_session_close(&r->s);
	ds_grammar_free(r->g);
}

static int work(run *r, ds_err *err)
{
	int rc;

	if (r->o->perplexity)
		return run_perplexity(r, err);
	if (r->o->prompt || r->o->file)
		rc = prompt_request(r, err) || ds_runner_run(&r->rn, err);
	else if (r->o->chat && isatty(STDIN_FILENO))
		rc = chat_loop(r, err);
	else
		rc = read_requests(r, err) || ds_runner_run(&r->rn, err);
	if (rc)
		return -1;
	/* the logits file is renamed into place only when complete */
	return r->lf.f ? ds_afile_commit(&r->lf, err) : 0;
}

/* --mpi, ranks > 0: rank 0's batches until it is done; its failures are
 * its to report, a follower's own end the job. */
static int follow(const opts *o, ds_dist *d)
{
	ds_session_opts so = session_opts(o, d);
	ds_session s;
	ds_err err;
	int rc;

	if (ds_dist_model(d, o->dir, &err))
		return 1;
	so.ep = ds_dist_ep(d);
	so.follow = 1;
	if (host_setup(o, &err) || ds_session_open(&s, &so, &err))
		ds_dist_fail(d, err.msg);
	if (o->verbose)
		ds_describe_rank(d, &s, 0);
	rc = ds_dist_follow(d, s.fwd, &s.kv, &err);
	if (o->verbose && rc == 0)
		ds_describe_rank(d, &s, 1);
	ds_session_close(&s);
	return rc;
}

static int lead(run *r)
{
	ds_err err;
	int rc;

	rc = setup(r, &err) || work(r, &err) ? 1 : 0;
	if (rc)
		warnx("%s", err.msg);
	else if (r->o->verbose)
		ds_describe_runner(&r->rn, r->o->spec);
	if (r->d != NULL) {
		ds_dist_done(r->d, rc);
		if (r->o->verbose && rc == 0)
			ds_describe_rank(r->d, &r->s, 1);
	}
	teardown(r);
	return rc;
}

int main(int argc, char **argv)
{
	opts o;
	run r = { .o = &o };
	ds_err err;
	int rc;

	rc = parse_args(&o, argc, argv);
	if (rc)
		return rc < 0 ? 0 : rc;
	if (!o.seed_set)
		o.sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	ds_map_guard(); /* model.bin and tokenizer.bin are used in place */
	if (o.mpi && ds_dist_init(&r.d, &(ds_dist_opts){ .prog = "ds-run",
			.timeout_s = o.mpi_timeout }, &err)) {
		warnx("%s", err.msg);
		return 1;
	}
	rc = r.d && ds_dist_rank(r.d) > 0 ? follow(&o, r.d) : lead(&r);
	ds_dist_free(r.d);
	free(o.stops);
	return rc;
}

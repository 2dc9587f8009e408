/*
 * ds-serve - an OpenAI-compatible HTTP server with continuous batching
 * (ds-serve(1)).  The options, the signals and the exit status; the server
 * is libcore/serve/.
 *
 * Every signal the program handles is blocked in all threads and taken by
 * the main thread with sigwaitinfo: SIGTERM and SIGINT start the drain,
 * a second one ends it at once; SIGHUP is ignored; SIGUSR1 is the loader
 * thread saying it is done.
 *
 * --mpi: rank 0 is the server; the other ranks follow its forward passes
 * (dist.h) until it stops, and end at once on SIGTERM (mpirun's, when a
 * rank fails or mpirun is interrupted).
 */
#include <ctype.h>
#include <err.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "dist/dist.h"
#include "runtime/session.h"
#include "serve/serve.h"
#include "spec/drafter.h"
#include "pool/threads.h"
#include "base/cli.h"
#include "base/util.h"

static const char *prog = "ds-serve";

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s -m DIR [--host ADDR] [--port N] [--threads N] [--parallel N]\n"
		"                [--ctx-size N] [-b N] [--queue N]\n"
		"                [--api-key KEY | --api-key-file FILE]\n"
		"                [--max-body BYTES] [--timeout S] [--max-conns N] [--cpus LIST]\n"
		"                [--chat-template NAME | --chat-template-file FILE]\n"
		"                [--reasoning-format none|deepseek|auto]\n"
		"                [--cache-ram MIB] [--cache-dir DIR]\n"
		"                [--hugepages] [--numa MODE] [--verbose]\n"
		"                [--spec mtp|ngram|draft] [--spec-k K] [--draft DIR]\n"
		"                [--mpi [--mpi-timeout S]]\n",
		prog);
}

static void log_line(void *user, const char *line)
{
	(void)user;
	warnx("%s", line);
}

/* ---- options ------------------------------------------------------------------- */

typedef struct opts {
	ds_srv_opts so;
	const char *key_file;
	char *key;                 /* read from key_file */
	int mpi;
	double mpi_timeout;
} opts;

enum {
	O_KEY = 256, O_KEYFILE, O_CPUS, O_CTX, O_HOST, O_HUGE, O_BODY, O_NUMA,
	O_PAR, O_PORT, O_QUEUE, O_THREADS, O_TIMEOUT, O_VERBOSE, O_VERSION,
	O_CONNS, O_MPI, O_MPI_TIMEOUT, O_SPEC, O_SPEC_K, O_DRAFT, O_CHAT_TMPL,
	O_CHAT_FILE, O_REASON, O_CACHE_RAM, O_CACHE_DIR,
};

static const struct option longopts[] = {
	{ "api-key", required_argument, NULL, O_KEY },
	{ "api-key-file", required_argument, NULL, O_KEYFILE },
	{ "batch", required_argument, NULL, 'b' },
	{ "cache-dir", required_argument, NULL, O_CACHE_DIR },
	{ "cache-ram", required_argument, NULL, O_CACHE_RAM },
	{ "chat-template", required_argument, NULL, O_CHAT_TMPL },
	{ "chat-template-file", required_argument, NULL, O_CHAT_FILE },
	{ "cpus", required_argument, NULL, O_CPUS },
	{ "ctx-size", required_argument, NULL, O_CTX },
	{ "draft", required_argument, NULL, O_DRAFT },
	{ "help", no_argument, NULL, 'h' },
	{ "host", required_argument, NULL, O_HOST },
	{ "hugepages", no_argument, NULL, O_HUGE },
	{ "max-body", required_argument, NULL, O_BODY },
	{ "max-conns", required_argument, NULL, O_CONNS },
	{ "model", required_argument, NULL, 'm' },
	{ "mpi", no_argument, NULL, O_MPI },
	{ "mpi-timeout", required_argument, NULL, O_MPI_TIMEOUT },
	{ "numa", required_argument, NULL, O_NUMA },
	{ "parallel", required_argument, NULL, O_PAR },
	{ "port", required_argument, NULL, O_PORT },
	{ "queue", required_argument, NULL, O_QUEUE },
	{ "reasoning-format", required_argument, NULL, O_REASON },
	{ "spec", required_argument, NULL, O_SPEC },
	{ "spec-k", required_argument, NULL, O_SPEC_K },
	{ "threads", required_argument, NULL, O_THREADS },
	{ "timeout", required_argument, NULL, O_TIMEOUT },
	{ "verbose", no_argument, NULL, O_VERBOSE },
	{ "version", no_argument, NULL, O_VERSION },
	{ NULL, 0, NULL, 0 },
};

/* Printable ASCII without spaces: what an HTTP header carries as is. */
static int key_ok(const char *k)
{
	if (*k == '\0')
		return 0;
	for (; *k; k++)
		if (*k <= ' ' || *k > '~')
			return 0;
	return 1;
}

static int parse_one(opts *o, int c, const char *a)
{
	ds_srv_opts *s = &o->so;
	long v = 0;
	int rc = 0;

	switch (c) {
	case 'm': s->model_dir = a; return 0;
	case O_KEY: s->api_key = a; return 0;
	case O_KEYFILE: o->key_file = a; return 0;
	case O_CPUS: s->cpus = a; return 0;
	case O_CHAT_TMPL: s->chat_template = a; return 0;
	case O_CHAT_FILE: s->chat_template_file = a; return 0;
	case O_CACHE_DIR: s->cache_dir = a; return 0;
	case O_CACHE_RAM: rc = ds_opt_long("--cache-ram", a, 0, 1L << 30, &v); s->cache_mib = v; break;
	case O_CTX: rc = ds_opt_long("--ctx-size", a, 4, 1L << 24, &v); s->ctx_size = (uint32_t)v; break;
	case 'b': rc = ds_opt_long("--batch", a, 1, DS_BATCH_MAX, &v); s->batch = (uint32_t)v; break;
	case O_HOST: s->host = a; return 0;
	case O_HUGE: s->hugepages = 1; return 0;
	case O_BODY: rc = ds_opt_long("--max-body", a, 16, 1L << 30, &v); s->max_body = (size_t)v; break;
	case O_CONNS: rc = ds_opt_long("--max-conns", a, 1, 1L << 20, &v); s->max_conns = (unsigned)v; break;
	case O_NUMA: s->numa = a; return 0;
	case O_SPEC: s->spec = a; return 0;
	case O_DRAFT: s->draft = a; return 0;
	case O_SPEC_K: rc = ds_opt_long("--spec-k", a, 1, DS_SPEC_MAX_K, &v); s->spec_k = (uint32_t)v; break;
	case O_PAR: rc = ds_opt_long("--parallel", a, 1, 256, &v); s->parallel = (uint32_t)v; break;
	case O_PORT: rc = ds_opt_long("--port", a, 0, 65535, &v); s->port = (unsigned)v; break;
	case O_QUEUE: rc = ds_opt_long("--queue", a, 0, 65536, &v); s->queue = (uint32_t)v; break;
	case O_THREADS: rc = ds_opt_long("--threads", a, 1, DS_POOL_MAX, &v); s->threads = (int)v; break;
	case O_TIMEOUT: rc = ds_opt_long("--timeout", a, 1, 86400, &v); s->timeout_s = (unsigned)v; break;
	case O_VERBOSE: s->verbose = 1; return 0;
	case O_MPI: o->mpi = 1; return 0;
	case O_MPI_TIMEOUT: return ds_opt_double("--mpi-timeout", a, 0.1, 86400, &o->mpi_timeout);
	case O_REASON:
		if (strcmp(a, "none") == 0)
			s->reasoning = DS_REASON_NONE;
		else if (strcmp(a, "deepseek") == 0)
			s->reasoning = DS_REASON_DEEPSEEK;
		else if (strcmp(a, "auto") == 0)
			s->reasoning = DS_REASON_AUTO;
		else
			return ds_opt_bad("--reasoning-format", a, "none, deepseek or auto");
		return 0;
	default: return 2;
	}
	return rc;
}

static int check_args(opts *o)
{
	enum ds_spec_kind kind = DS_SPEC_NONE;
	ds_err err;

	if (o->so.model_dir == NULL) {
		warnx("-m DIR is required");
		usage(stderr);
		return 2;
	}
	if (o->so.api_key && o->key_file) {
		warnx("--api-key and --api-key-file exclude each other");
		return 2;
	}
	if (o->so.chat_template && o->so.chat_template_file) {
		warnx("--chat-template and --chat-template-file exclude each other");
		return 2;
	}
	if (o->so.cache_dir && o->so.cache_mib == 0) {
		warnx("--cache-dir needs a prompt cache: --cache-ram 0 turns it off");
		return 2;
	}
	if (o->so.api_key && !key_ok(o->so.api_key)) {
		warnx("--api-key: printable ASCII without spaces, not empty");
		return 2;
	}
	if (o->mpi_timeout > 0 && !o->mpi) {
		warnx("--mpi-timeout needs --mpi");
		return 2;
	}
	if (o->so.spec && ds_spec_parse(o->so.spec, &kind, &err))
		return ds_opt_bad("--spec", o->so.spec, err.msg);
	if ((o->so.spec && kind == DS_SPEC_DRAFT) != (o->so.draft != NULL)) {
		warnx("--draft DIR goes with --spec draft, and --spec draft needs it");
		return 2;
	}
	if (o->so.spec_k && !o->so.spec) {
		warnx("--spec-k needs --spec");
		return 2;
	}
	if (o->so.numa && strcmp(o->so.numa, "interleave") != 0 &&
	    strcmp(o->so.numa, "node") != 0) {
		warnx("--numa %s: interleave or node", o->so.numa);
		return 2;
	}
	return 0;
}

/* 0 go on, 2 usage error, -1 exit 0 (help, version) */
static int parse_args(opts *o, int argc, char **argv)
{
	int c, rc;

	memset(o, 0, sizeof *o);
	o->so.port = 8080;
	o->so.parallel = 4;
	o->so.queue = 64;
	o->so.max_body = 1u << 20;
	o->so.timeout_s = 60;
	o->so.reasoning = DS_REASON_AUTO;
	o->so.cache_mib = -1;
	o->so.log = log_line;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":b:hm:", longopts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return -1;
		}
		if (c == O_VERSION) {
			printf("%s %s\n", prog, DS_VERSION);
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

/* The key file's first line (a trailing newline and blanks dropped). */
static int read_key(opts *o, ds_err *err)
{
	size_t n;

	if (o->key_file == NULL)
		return 0;
	if (ds_read_file(o->key_file, 4096, &o->key, &n, err))
		return -1;
	o->key[strcspn(o->key, "\r\n")] = '\0';
	n = strlen(o->key);
	while (n > 0 && isspace((unsigned char)o->key[n - 1]))
		o->key[--n] = '\0';
	if (!key_ok(o->key))
		return ds_errf(err, "%s: the key must be one line of printable "
			       "ASCII without spaces", o->key_file);
	o->so.api_key = o->key;
	return 0;
}

/* ---- loading, serving, stopping -------------------------------------------------- */

typedef struct loader {
	ds_srv *s;
	pthread_t main, th;
	atomic_int done;
	int rc;
	ds_err err;
} loader;

static void *load_main(void *arg)
{
	loader *l = arg;

	l->rc = ds_srv_load(l->s, &l->err);
	atomic_store(&l->done, 1);
	pthread_kill(l->main, SIGUSR1);
	return NULL;
}

/* Until SIGTERM/SIGINT (0), or the load failed (1). */
static int serve(loader *l, const sigset_t *set, int *joined)
{
	for (;;) {
		siginfo_t si;
		int sig = sigwaitinfo(set, &si);

		if (sig == SIGINT || sig == SIGTERM) {
			warnx("%s: stopping", sig == SIGINT ? "SIGINT" : "SIGTERM");
			return 0;
		}
		if (sig == SIGUSR1 && atomic_load(&l->done) && !*joined) {
			pthread_join(l->th, NULL);
			*joined = 1;
			if (l->rc) {
				warnx("%s", l->err.msg);
				return 1;
			}
		}
	}
}

/* In-flight requests get up to timeout_s to finish; a second signal ends
 * the wait. */
static void drain(ds_srv *s, const sigset_t *set, unsigned timeout_s)
{
	double end = ds_now_s() + timeout_s;
	struct timespec tick = { 0, 50 * 1000 * 1000 };
	size_t n = ds_srv_inflight(s);

	if (n > 0)
		warnx("finishing %zu request%s (at most %u s)", n, n == 1 ? "" : "s",
		       timeout_s);
	while (ds_srv_inflight(s) > 0 && ds_now_s() < end) {
		int sig = sigtimedwait(set, NULL, &tick);

		if (sig == SIGINT || sig == SIGTERM)
			break;
	}
	if ((n = ds_srv_inflight(s)) > 0)
		warnx("cancelling %zu request%s", n, n == 1 ? "" : "s");
}

/* Every connection is a descriptor: the soft limit raised towards the
 * hard one, as far as n connections and 64 more need. */
static void raise_nofile(unsigned n)
{
	struct rlimit rl;
	rlim_t want = (rlim_t)n + 64;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want)
		return;
	rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
	setrlimit(RLIMIT_NOFILE, &rl);
}

static int run(opts *o)
{
	sigset_t set;
	loader l;
	ds_err err;
	int joined = 0, rc;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &set, NULL);   /* before any thread starts */
	signal(SIGPIPE, SIG_IGN);
	ds_map_guard();  /* model.bin and tokenizer.bin are used in place */
	raise_nofile(o->so.max_conns ? o->so.max_conns : 2048);
	memset(&l, 0, sizeof l);
	if (read_key(o, &err) || ds_srv_start(&l.s, &o->so, &err)) {
		warnx("%s", err.msg);
		return 1;
	}
	warnx("listening on http://%s%s%s:%u/ (model loading)",
	       strchr(o->so.host ? o->so.host : "", ':') ? "[" : "",
	       o->so.host ? o->so.host : "127.0.0.1",
	       strchr(o->so.host ? o->so.host : "", ':') ? "]" : "", ds_srv_port(l.s));
	l.main = pthread_self();
	if (pthread_create(&l.th, NULL, load_main, &l) != 0) {
		warnx("cannot start the loader thread");
		ds_srv_free(l.s);
		return 1;
	}
	rc = serve(&l, &set, &joined);
	ds_srv_quiesce(l.s);
	if (!joined)
		pthread_join(l.th, NULL);
	if (rc == 0 && l.rc == 0)
		drain(l.s, &set, o->so.timeout_s);
	ds_srv_free(l.s);
	if (rc == 0)
		warnx("stopped");
	return rc;
}

/* --mpi, ranks > 0: the server's session without its tokenizer, rank
 * 0's forward passes until it stops; rank 0 reports its own failures. */
static int follow(const opts *o, ds_dist *d)
{
	ds_session_opts so;
	ds_session s;
	ds_err err;
	uint32_t e0, e1;
	int rc;

	ds_srv_session_opts(&o->so, &so);
	so.tok = DS_SESS_TOK_NONE;
	ds_map_guard();
	if (ds_dist_model(d, o->so.model_dir, &err))
		return 1;
	ds_dist_load_opts(d, &so.load);
	so.ep = ds_dist_ep(d);
	so.follow = 1;
	if ((o->so.numa && ds_numa_parse(o->so.numa, &so.load.numa, &err)) ||
	    ds_session_open(&s, &so, &err))
		ds_dist_fail(d, err.msg);
	ds_dist_experts(d, &e0, &e1);
	warnx("rank %d of %d (pid %d): experts %u-%u of %u, following rank 0",
	      ds_dist_rank(d), ds_dist_size(d), (int)getpid(), e0, e1 - 1,
	      s.m.hp.n_expert);
	rc = ds_dist_follow(d, s.fwd, &s.kv, &err);
	ds_session_close(&s);
	return rc;
}

int main(int argc, char **argv)
{
	opts o;
	ds_dist *d = NULL;
	ds_err err;
	int rc = parse_args(&o, argc, argv);

	if (rc)
		return rc < 0 ? 0 : rc;
	if (o.mpi && ds_dist_init(&d, &(ds_dist_opts){ .prog = prog,
			.timeout_s = o.mpi_timeout }, &err)) {
		warnx("%s", err.msg);
		return 1;
	}
	if (d != NULL && ds_dist_rank(d) > 0) {
		rc = follow(&o, d);
	} else if (d != NULL && ds_dist_model(d, o.so.model_dir, &err)) {
		/* every rank has the answer; rank 0 says it */
		warnx("%s", err.msg);
		rc = 1;
	} else {
		if (d != NULL)
			warnx("rank 0 of %d (pid %d): the server; SIGTERM to this pid "
			      "drains it, then every rank ends", ds_dist_size(d),
			      (int)getpid());
		o.so.dist = d;
		rc = run(&o);
		if (d != NULL)
			ds_dist_done(d, rc);
	}
	ds_dist_free(d);
	free(o.key);
	return rc;
}

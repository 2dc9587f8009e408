/*
 * ds-bench - benchmarks: a model's prefill and decode speed beside the
 * bandwidth probe and the ISA's peaks (-m DIR, or --synthetic SHAPE: a
 * random-weight model of a published shape), the kernels against the
 * memory-bandwidth limit and the ISA's peak (--kernels), and the read
 * bandwidth alone (--membw).
 */
#include <err.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/afile.h"
#include "base/cli.h"
#include "base/util.h"
#include "bench/kbench.h"
#include "bench/maskbench.h"
#include "bench/mbench.h"
#include "bench/report.h"
#include "bench/specbench.h"
#include "bench/synth.h"
#include "dist/dist.h"
#include "host/sysinfo/sysinfo.h"
#include "kernels/kernels.h"
#include "kernels/types.h"
#include "model/kvcache.h"
#include "runtime/session.h"
#include "spec/drafter.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ds-bench (-m DIR | --synthetic SHAPE [--layers N] [--type TYPE])\n"
		"                [-b N] [--cache-type TYPE] [--cpus LIST] [--ctx-size N]\n"
		"                [--hugepages] [--mlock]\n"
		"                [-n N,...] [--no-populate] [--numa MODE] [-o md|csv|json|jsonl]\n"
		"                [-p N,...] [-r N] [--seed N] [-t N,...]\n"
		"       mpirun -n R ds-bench --mpi [--mpi-timeout S] -m DIR [...]\n"
		"       ds-bench -m DIR --spec mtp|ngram|draft [--spec-k K] [--draft DIR]\n"
		"                --prompt-file FILE [--repeat-penalty R] [--cache-type TYPE]\n"
		"                [-n N] [-r N] [-t N]\n"
		"       ds-bench (-m DIR | --synthetic SHAPE [--layers N] [--type TYPE])\n"
		"                --verify E [--cache-type TYPE] [-p CTX] [-r N] [-t N]\n"
		"                [-o md|csv]\n"
		"       ds-bench -m DIR --grammar DOC.json [--grammar DOC.json ...]\n"
		"       ds-bench --synthetic SHAPE [--layers N] [--type TYPE] --save DIR\n"
		"       ds-bench --synthetic list\n"
		"       ds-bench --kernels [--cpu-time] [--cpus LIST] [-o md|csv|json] [-q]\n"
		"                [-s NxK] [-t N,...] [-w TYPE,...]\n"
		"       ds-bench --membw [--cpu-time] [--cpus LIST] [-o md|csv|json] [-q]\n"
		"                [-t N,...]\n");
}

/* ---- options ------------------------------------------------------------------------- */

typedef struct opts {
	int mode;                 /* 'K' 'M' 'B' (a model) */
	const char *dir, *shape, *type, *numa, *cpus, *save;
	long layers, reps, ctx, batch;
	uint32_t pp[16], tg[16];
	int n_pp, n_tg;
	int threads[16], n_threads, threads_set;
	int hugepages, mlock, no_populate, mpi;
	enum ds_kvtype kv_type;   /* --cache-type; DS_KV_F16 unless given */
	int kv_set;
	double mpi_timeout;
	unsigned long long seed;
	ds_report out;
	ds_kbench_opts k;
	/* speculative decoding: --spec rows, --verify rows */
	enum ds_spec_kind spec;
	long spec_k, verify;
	const char *draft, *prompt_file;
	float repeat_penalty;
	/* --grammar: documents {schema, doc} whose masks are timed */
	const char *gdocs[16];
	int n_gdocs;
} opts;

/* A comma-separated list of up to MAX numbers in [lo, hi]: how many, or
 * -1. */
static int parse_u32_list(const char *s, uint32_t lo, uint32_t hi, uint32_t *v,
			  int max)
{
	int n = 0;

	while (*s && n < max) {
		char *end;
		long x = strtol(s, &end, 10);

		if (end == s || x < (long)lo || x > (long)hi ||
		    (*end != ',' && *end != '\0'))
			return -1;
		v[n++] = (uint32_t)x;
		s = *end == ',' ? end + 1 : end;
	}
	return *s ? -1 : n;
}

static int parse_threads(const char *s, int *t, int max)
{
	uint32_t v[16];
	int n = parse_u32_list(s, 1, 1024, v, max < 16 ? max : 16);

	for (int i = 0; i < n; i++)
		t[i] = (int)v[i];
	return n;
}

static int parse_type(const char *s, ds_ttype *t)
{
	if (strcmp(s, "q4") == 0 || strcmp(s, "q8") == 0) {
		*t = (ds_ttype){ s[1] == '4' ? DS_Q4 : DS_Q8, 32 };
		return 0;
	}
	if (ds_ttype_parse(s, t) != 0)
		return -1;
	return t->dt == DS_Q4 || t->dt == DS_Q8 || t->dt == DS_BF16 ? 0 : -1;
}

static int parse_opt(opts *o, int c, const char *a)
{
	long v;

	switch (c) {
	case 'C': o->k.cpu_time = 1; return 0;
	case 'c': o->cpus = o->k.cpus = a; return 0;
	case 'G':
		if (ds_parse_long(a, 1, 1 << 24, &v))
			return ds_opt_bad("--ctx-size", a, "expected 1 to 16777216");
		o->ctx = v;
		return 0;
	case 'H': o->hugepages = 1; return 0;
	case 'Z': {
		ds_err e;

		o->kv_set = 1;
		return ds_kvtype_parse(a, &o->kv_type, &e) ? ds_opt_bad("--cache-type", a, e.msg)
							   : 0;
	}
	case 'b':
		if (ds_parse_long(a, 1, DS_BATCH_MAX, &o->batch))
			return ds_opt_bad("--batch", a, "expected 1 to 65536");
		return 0;
	case 'K': o->mode = 'K'; return 0;
	case 'L':
		if (ds_parse_long(a, 1, 1024, &o->layers))
			return ds_opt_bad("--layers", a, "expected 1 to 1024");
		return 0;
	case 'M': o->mode = 'M'; return 0;
	case 'm': o->dir = a; o->mode = 'B'; return 0;
	case 'l': o->mlock = 1; return 0;
	case 'N': o->numa = a; return 0;
	case 'n':
		if ((o->n_tg = parse_u32_list(a, 0, 1 << 20, o->tg, 16)) < 1)
			return ds_opt_bad("-n", a, "expected token counts like 128,256 (0 skips tg)");
		return 0;
	case 'P': o->no_populate = 1; return 0;
	case 'X': o->mpi = 1; return 0;
	case 'Y':
		return ds_opt_double("--mpi-timeout", a, 0.1, 86400, &o->mpi_timeout);
	case 'p':
		if ((o->n_pp = parse_u32_list(a, 0, 1 << 20, o->pp, 16)) < 1)
			return ds_opt_bad("-p", a, "expected token counts like 512,1024 (0 skips pp)");
		return 0;
	case 'q': o->k.quick = 1; return 0;
	case 'r':
		if (ds_parse_long(a, 1, 64, &o->reps))
			return ds_opt_bad("-r", a, "expected 1 to 64 repetitions");
		return 0;
	case 'S': o->shape = a; o->mode = 'B'; return 0;
	case 'W': o->save = a; return 0;
	case 's': {
		unsigned long long n, k;
		char tail;

		if (sscanf(a, "%llux%llu%c", &n, &k, &tail) != 2 || n < 1 || k < 1 ||
		    n > 65536 || k > 65536)
			return ds_opt_bad("-s", a, "expected NxK, each 1 to 65536");
		o->k.mm_n = n;
		o->k.mm_k = k;
		return 0;
	}
	case 'E':
		if (ds_parse_long(a, 0, 0x7fffffffL, &v))
			return ds_opt_bad("--seed", a, "expected a number");
		o->seed = (unsigned long long)v;
		return 0;
	case 't':
		o->n_threads = parse_threads(a, o->threads, 16);
		o->threads_set = 1;
		if (o->n_threads < 1)
			return ds_opt_bad("-t", a, "expected thread counts like 1,2");
		return 0;
	case 'T': o->type = a; return 0;
	case 'Q': {
		ds_err e;

		return ds_spec_parse(a, &o->spec, &e) ? ds_opt_bad("--spec", a, e.msg) : 0;
	}
	case 'k':
		if (ds_parse_long(a, 1, DS_SPEC_MAX_K, &o->spec_k))
			return ds_opt_bad("--spec-k", a, "expected 1 to 16 drafts");
		return 0;
	case 'D': o->draft = a; return 0;
	case 'F': o->prompt_file = a; return 0;
	case 'R':
		return ds_opt_float("--repeat-penalty", a, 0.01, 100, &o->repeat_penalty);
	case 'v':
		if (ds_parse_long(a, 1, DS_VERIFY_MAX, &o->verify))
			return ds_opt_bad("--verify", a, "expected 1 to 16 entries");
		return 0;
	case 'w': o->k.types = a; return 0;
	case 'g':
		if (o->n_gdocs == 16)
			return ds_opt_bad("--grammar", a, "at most 16 documents");
		o->gdocs[o->n_gdocs++] = a;
		return 0;
	case 'o':
		if (ds_report_parse(a, &o->out.fmt))
			return ds_opt_bad("-o", a, "expected md, csv, json or jsonl");
		return 0;
	}
	usage(stderr);
	return 2;
}

/* --spec and --verify: what they take. */
static int check_spec(const opts *o)
{
	int other = o->hugepages || o->numa || o->mlock || o->no_populate || o->save;

	if ((o->spec_k || o->draft || o->prompt_file || o->repeat_penalty) && !o->spec) {
		warnx("--spec-k, --draft, --prompt-file and --repeat-penalty need --spec");
		return 2;
	}
	if (o->spec && (o->verify || !o->dir || !o->prompt_file || o->n_pp || other)) {
		warnx("--spec takes -m DIR and --prompt-file FILE (not --verify, -p "
		      "or the loading options)");
		return 2;
	}
	if ((o->spec == DS_SPEC_DRAFT) != (o->draft != NULL)) {
		warnx("--draft DIR goes with --spec draft, and --spec draft needs it");
		return 2;
	}
	if (o->n_gdocs && (!o->dir || o->spec || o->verify || o->n_pp || o->n_tg ||
			   other || o->mpi || o->kv_set || o->out.fmt != DS_REPORT_MD)) {
		warnx("--grammar takes -m DIR alone (markdown rows)");
		return 2;
	}
	if (o->verify && (o->mode != 'B' || o->n_tg || o->save || o->batch)) {
		warnx("--verify takes -m DIR or --synthetic SHAPE (not -n, -b or --save)");
		return 2;
	}
	if ((o->spec || o->verify) && (o->n_threads > 1 || o->n_pp > 1 || o->n_tg > 1 ||
				       (o->out.fmt != DS_REPORT_MD && o->out.fmt != DS_REPORT_CSV))) {
		warnx("--spec and --verify: one -t, -p and -n value, -o md or csv");
		return 2;
	}
	return 0;
}

/* The combinations that need a model, and those that need --kernels. */
static int check_opts(const opts *o)
{
	if (o->mode == 0) {
		usage(stderr);
		return 2;
	}
	if (o->dir && o->shape) {
		warnx("-m and --synthetic: give one");
		return 2;
	}
	if (o->mode != 'B' && (o->n_pp || o->n_tg || o->reps || o->ctx || o->batch ||
			       o->kv_set || o->hugepages || o->numa || o->mlock ||
			       o->no_populate)) {
		warnx("-p, -n, -r, -b, --cache-type, --ctx-size and the loading "
			"options need -m or --synthetic");
		return 2;
	}
	if (!o->shape && (o->type || o->layers || o->save)) {
		warnx("--type, --layers and --save need --synthetic");
		return 2;
	}
	if (o->mode == 'B' && (o->k.quick || o->k.mm_n || o->k.types || o->k.cpu_time)) {
		warnx("-q, -s, -w and --cpu-time need --kernels "
			"or --membw");
		return 2;
	}
	if (o->mode != 'B' && o->out.fmt == DS_REPORT_JSONL) {
		warnx("-o jsonl needs -m or --synthetic");
		return 2;
	}
	if ((o->mpi || o->mpi_timeout > 0) && (o->dir == NULL || !o->mpi)) {
		warnx("--mpi needs -m DIR (write a synthetic model with --save "
		      "first), --mpi-timeout needs --mpi");
		return 2;
	}
	return check_spec(o);
}

static int parse_args(opts *o, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "batch", required_argument, NULL, 'b' },
		{ "cache-type", required_argument, NULL, 'Z' },
		{ "cpu-time", no_argument, NULL, 'C' },
		{ "cpus", required_argument, NULL, 'c' },
		{ "ctx-size", required_argument, NULL, 'G' },
		{ "draft", required_argument, NULL, 'D' },
		{ "grammar", required_argument, NULL, 'g' },
		{ "help", no_argument, NULL, 'h' },
		{ "hugepages", no_argument, NULL, 'H' },
		{ "kernels", no_argument, NULL, 'K' },
		{ "layers", required_argument, NULL, 'L' },
		{ "membw", no_argument, NULL, 'M' },
		{ "mlock", no_argument, NULL, 'l' },
		{ "model", required_argument, NULL, 'm' },
		{ "mpi", no_argument, NULL, 'X' },
		{ "mpi-timeout", required_argument, NULL, 'Y' },
		{ "n-gen", required_argument, NULL, 'n' },
		{ "n-prompt", required_argument, NULL, 'p' },
		{ "no-populate", no_argument, NULL, 'P' },
		{ "numa", required_argument, NULL, 'N' },
		{ "output", required_argument, NULL, 'o' },
		{ "prompt-file", required_argument, NULL, 'F' },
		{ "quick", no_argument, NULL, 'q' },
		{ "repeat-penalty", required_argument, NULL, 'R' },
		{ "repetitions", required_argument, NULL, 'r' },
		{ "save", required_argument, NULL, 'W' },
		{ "seed", required_argument, NULL, 'E' },
		{ "shape", required_argument, NULL, 's' },
		{ "spec", required_argument, NULL, 'Q' },
		{ "spec-k", required_argument, NULL, 'k' },
		{ "synthetic", required_argument, NULL, 'S' },
		{ "threads", required_argument, NULL, 't' },
		{ "type", required_argument, NULL, 'T' },
		{ "verify", required_argument, NULL, 'v' },
		{ "version", no_argument, NULL, 'V' },
		{ "weights", required_argument, NULL, 'w' },
		{ NULL, 0, NULL, 0 },
	};
	int c, rc, modes = 0;

	memset(o, 0, sizeof *o);
	o->out.f = stdout;
	o->threads[0] = 1;
	o->threads[1] = 2;
	o->n_threads = 2;
	o->kv_type = DS_KV_F16;
	while ((c = getopt_long(argc, argv, "b:hm:n:o:p:qr:s:t:w:", lo, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return -1;
		}
		if (c == 'V') {
			printf("ds-bench %s\n", DS_VERSION);
			return -1;
		}
		modes += c == 'K' || c == 'M' || c == 'm' || c == 'S';
		if ((rc = parse_opt(o, c, optarg)) != 0)
			return rc;
	}
	if (optind != argc || modes > 1) {
		if (modes > 1)
			warnx("-m, --synthetic, --kernels and "
				"--membw: give one");
		else
			usage(stderr);
		return 2;
	}
	return check_opts(o);
}

/* ---- --synthetic: a temporary model directory -------------------------------------------
 * Built under $TMPDIR (or /tmp) in ds-bench-XXXXXX/model and removed as
 * soon as it is loaded (the mapping keeps the data).  An interrupt while
 * it is written stops the writer, which removes its temporary; one after
 * that removes the files here (afile.h's registry). */

typedef struct tmpmodel {
	char dir[4096], model[4200], bin[4300], meta[4300];
	int made;
} tmpmodel;

static volatile sig_atomic_t cancel;

static void remove_tmp(void *arg)
{
	tmpmodel *t = arg;

	if (!t->made)
		return;
	ds_remove_tree(t->dir);
	ds_cleanup_del(t->bin);
	ds_cleanup_del(t->meta);
	ds_cleanup_del(t->model);
	ds_cleanup_del(t->dir);
	t->made = 0;
}

static void list_shapes(void)
{
	size_t n, i;
	const ds_synth_shape *sh = ds_synth_shapes(&n);

	for (i = 0; i < n; i++) {
		ds_hparams hp;
		uint64_t total = 0, active = 0, q4 = 0;
		ds_err err;

		if (ds_synth_hparams(sh[i].name, 0, &hp, &err) ||
		    ds_model_params(&hp, &total, &active, &err) ||
		    ds_synth_bytes(&hp, (ds_ttype){ DS_Q4, 32 }, &q4, &err))
			continue;
		char a[32], b[32], c[32];

		printf("%-21s %-9s %2u layers %9s params %9s active %10s q4  %s%s\n",
		       sh[i].name, ds_arch_name(hp.arch), hp.n_layer,
		       ds_report_count(total, a, sizeof a),
		       ds_report_count(active, b, sizeof b),
		       ds_report_bytes(q4, c, sizeof c), sh[i].model,
		       sh[i].test_only ? " (test only)" : "");
	}
}

/* Extra memory a run needs beside the mapped model: the cache, a
 * hugepages copy, the read probe's buffer. */
static uint64_t extra_bytes(const opts *o, const ds_hparams *hp, uint64_t bytes)
{
	uint32_t mp = o->n_pp ? 0 : 512, mn = o->n_tg ? 0 : 128;
	size_t kv = 0;
	int i;
	ds_err err;

	for (i = 0; i < o->n_pp; i++)
		mp = o->pp[i] > mp ? o->pp[i] : mp;
	for (i = 0; i < o->n_tg; i++)
		mn = o->tg[i] > mn ? o->tg[i] : mn;
	if (ds_kvcache_size(hp, 1, o->ctx ? (uint32_t)o->ctx : mp + mn + 1,
			    o->kv_type, &kv, &err))
		kv = 0;
	return kv + (o->hugepages ? bytes : 0) + ((uint64_t)512 << 20);
}

static int synth_opts(const opts *o, ds_synth_opts *so, uint64_t *bytes,
		      ds_err *err)
{
	memset(so, 0, sizeof *so);
	so->type = (ds_ttype){ DS_Q4, 32 };
	if (o->type && parse_type(o->type, &so->type))
		return ds_errf(err, "--type %s: expected q4, q8, bf16, q4gG or q8gG "
			       "(G 32, 64 or 128)", o->type);
	if (ds_synth_hparams(o->shape, (uint32_t)o->layers, &so->hp, err) ||
	    ds_synth_bytes(&so->hp, so->type, bytes, err))
		return -1;
	so->seed = o->seed;
	so->progress = stderr;
	so->cancel = &cancel;
	return 0;
}

/* --save DIR: the model written there to stay (ds-run, ds-tune plan and
 * ds-bench -m can use it), nothing benchmarked. */
static int save_synthetic(const opts *o, ds_err *err)
{
	ds_synth_opts so;
	uint64_t bytes;
	char *parent = strdup(o->save), *slash;
	int rc;

	if (parent == NULL)
		return ds_errf(err, "out of memory");
	if (access(o->save, F_OK) == 0) {
		free(parent);
		return ds_errf(err, "%s: already exists", o->save);
	}
	slash = strrchr(parent, '/');
	if (slash == NULL)
		strcpy(parent, ".");
	else
		slash[slash == parent] = '\0';
	rc = synth_opts(o, &so, &bytes, err) ||
	     ds_synth_check_fit(parent, bytes, 0, err);
	free(parent);
	if (rc)
		return ds_err_prefix(err, "--synthetic %s", o->shape);
	ds_cleanup_flag(&cancel);
	so.dst = o->save;
	return ds_synth_write(&so, &bytes, err);
}

static int build_synthetic(const opts *o, tmpmodel *t, ds_mbench_model *mm,
			   ds_err *err)
{
	const char *base = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	ds_synth_opts so;
	uint64_t bytes;
	double t0;
	int rc;

	if (synth_opts(o, &so, &bytes, err))
		return -1;
	if (ds_synth_check_fit(base, bytes, extra_bytes(o, &so.hp, bytes), err))
		return ds_err_prefix(err, "--synthetic %s%s", o->shape,
				     so.hp.n_layer > 1 ? " (--layers N makes it smaller)" : "");
	if (snprintf(t->dir, sizeof t->dir, "%s/ds-bench-XXXXXX", base) >=
	    (int)sizeof t->dir || mkdtemp(t->dir) == NULL)
		return ds_errf(err, "%s: cannot create a temporary directory", base);
	snprintf(t->model, sizeof t->model, "%s/model", t->dir);
	snprintf(t->bin, sizeof t->bin, "%s/model.bin", t->model);
	snprintf(t->meta, sizeof t->meta, "%s/model.meta", t->model);
	t->made = 1;
	ds_cleanup_flag(&cancel);
	so.dst = t->model;
	warnx("writing a random %s (%s, %u layers, %.2f GiB) in %s", o->shape,
	      o->type ? o->type : "q4", so.hp.n_layer, bytes / 1073741824.0, t->dir);
	t0 = ds_now_s();
	rc = ds_synth_write(&so, &bytes, err);
	mm->synth_s = ds_now_s() - t0;
	mm->synth_bytes = bytes;
	/* written: a signal now removes the files, directories last */
	ds_cleanup_flag(NULL);
	ds_cleanup_add(t->dir);
	ds_cleanup_add(t->model);
	ds_cleanup_add(t->meta);
	ds_cleanup_add(t->bin);
	if (rc == 0 && cancel)
		rc = ds_errf(err, "interrupted");
	if (rc)
		remove_tmp(t);
	return rc;
}

static int run_model(opts *o, ds_dist *d, ds_err *err)
{
	ds_mbench_model mm = { 0 };
	tmpmodel t = { .made = 0 };
	uint32_t def_pp = 512, def_tg = 128;
	ds_mbench_opts mo = {
		.name = o->shape, .pp = o->n_pp ? o->pp : &def_pp, .n_pp = o->n_pp ? o->n_pp : 1,
		.tg = o->n_tg ? o->tg : &def_tg, .n_tg = o->n_tg ? o->n_tg : 1,
		.threads = o->threads, .n_threads = o->n_threads,
		.reps = o->reps ? (int)o->reps : 5, .ctx_size = (uint32_t)o->ctx,
		.batch = (uint32_t)o->batch, .kv_type = o->kv_type,
		.cpus = o->cpus, .seed = o->seed, .progress = stderr, .model = &mm,
		.load = { .no_populate = o->no_populate, .mlock = o->mlock,
			  .hugepages = o->hugepages },
		.dist = d,
	};
	int rc;

	if (o->numa && ds_numa_parse(o->numa, &mo.load.numa, err))
		return ds_err_prefix(err, "--numa");
	if (d != NULL && ds_dist_rank(d) > 0) {
		mo.dir = o->dir;
		mo.progress = NULL;
		return ds_mbench_follow(&mo, err) ? -2 : 0;
	}
	if (o->shape && build_synthetic(o, &t, &mm, err))
		return -1;
	mo.dir = o->shape ? t.model : o->dir;
	mo.loaded = o->shape ? remove_tmp : NULL;
	mo.loaded_arg = &t;
	rc = ds_mbench_run(&mo, ds_report_model_row, &o->out, err);
	remove_tmp(&t);
	ds_report_models_end(&o->out);
	return rc;
}

/* A model, on this process or (--mpi) as a rank of the job; the
 * followers leave failures to rank 0 (status 1, no line: -2). */
static int run_mpi(opts *o, ds_err *err)
{
	ds_dist *d = NULL;
	int rc;

	if (o->mpi && ds_dist_init(&d, &(ds_dist_opts){ .prog = "ds-bench",
			.timeout_s = o->mpi_timeout }, err))
		return 1;
	rc = run_model(o, d, err);
	ds_dist_free(d);
	return rc == -2 ? 3 : rc ? 1 : 0;
}

/* ---- --spec and --verify ---------------------------------------------------------- */

static int run_spec(opts *o, ds_err *err)
{
	ds_specbench_opts so = {
		.so = { .dir = o->dir, .threads = o->threads[0], .cpus = o->cpus,
			.ctx_size = (uint32_t)o->ctx, .batch = (uint32_t)o->batch,
			.slots = 1, .kv_type = o->kv_type,
			.tok = DS_SESS_TOK_NEED, .tok_why = "--prompt-file needs",
			.spec = o->spec, .spec_k = (uint32_t)o->spec_k, .draft_dir = o->draft },
		.prompt_file = o->prompt_file, .n = o->n_tg ? o->tg[0] : 128,
		.reps = o->reps ? (int)o->reps : 5, .repeat_penalty = o->repeat_penalty,
		.progress = stderr,
	};
	ds_specbench_row r;

	if (ds_specbench_spec(&so, &r, err))
		return -1;
	ds_report_spec(&o->out, o->dir, o->threads[0], &r);
	if (!r.same)
		return ds_errf(err, "greedy tokens with drafts differ from those without");
	return 0;
}

static int run_verify(opts *o, ds_err *err)
{
	ds_mbench_model mm = { 0 };
	tmpmodel t = { .made = 0 };
	ds_verify_opts vo = {
		.threads = o->threads[0], .cpus = o->cpus, .max_e = (uint32_t)o->verify,
		.ctx = o->n_pp ? o->pp[0] : 128, .reps = o->reps ? (int)o->reps : 10,
		.kv_type = o->kv_type, .progress = stderr,
	};
	ds_verify_row r;
	int rc;

	if (o->shape && build_synthetic(o, &t, &mm, err))
		return -1;
	vo.dir = o->shape ? t.model : o->dir;
	rc = ds_specbench_verify(&vo, &r, err);
	remove_tmp(&t);
	if (rc == 0)
		ds_report_verify(&o->out, o->shape ? o->shape : o->dir, &r);
	return rc;
}

static int run_kernels(opts *o, ds_err *err)
{
	int rc;

	if (o->k.types) {
		const char *p = o->k.types;

		/* a bad type is a usage error: check before anything runs */
		while (*p) {
			char name[16];
			size_t len = strcspn(p, ",");
			ds_ttype t;

			if (len == 0 || len >= sizeof name) {
				warnx("-w %s: empty or overlong type", o->k.types);
				return 2;
			}
			memcpy(name, p, len);
			name[len] = '\0';
			if (ds_ttype_parse(name, &t) != 0 || t.dt == DS_I32) {
				warnx("-w %s: not a weight type", name);
				return 2;
			}
			p += len + (p[len] == ',');
		}
	}
	o->k.threads = o->threads;
	o->k.nthreads = o->n_threads;
	ds_report_kernels_begin(&o->out, ds_kernels_name(), o->k.cpu_time);
	rc = o->mode == 'K' ? ds_kbench_kernels(&o->k, ds_report_kernel_row, &o->out, err)
			    : ds_kbench_membw(&o->k, ds_report_kernel_row, &o->out, err);
	ds_report_kernels_end(&o->out);
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	opts o;
	ds_err err;
	int rc;

	rc = parse_args(&o, argc, argv);
	if (rc)
		return rc < 0 ? 0 : rc;
	if (o.shape && strcmp(o.shape, "list") == 0) {
		list_shapes();
		return 0;
	}
	if (ds_kernels_init(&err) != 0) {
		warnx("%s", err.msg);
		return 1;
	}
	if (o.mode == 'B') {
		ds_map_guard();
		if (!o.threads_set) {
			long n = sysconf(_SC_NPROCESSORS_ONLN);

			o.threads[0] = n > 0 && n < 1024 ? (int)n : 1;
			o.n_threads = 1;
		}
		rc = o.n_gdocs ? (ds_maskbench(o.dir, o.gdocs, o.n_gdocs, &err) ? 1 : 0) :
		     o.save ? (save_synthetic(&o, &err) ? 1 : 0) :
		     o.spec ? (run_spec(&o, &err) ? 1 : 0) :
		     o.verify ? (run_verify(&o, &err) ? 1 : 0) : run_mpi(&o, &err);
		if (rc && cancel)
			rc = 130;
	} else {
		rc = run_kernels(&o, &err);
	}
	if (rc == 1 || rc == 130)
		warnx("%s", err.msg);
	return rc == 3 ? 1 : rc;
}

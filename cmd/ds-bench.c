/*
 * ds-bench - benchmarks: a model's prefill and decode speed beside the
 * bandwidth probe and the ISA's peaks (-m DIR, or --synthetic SHAPE: a
 * random-weight model of a published shape), the kernels against the
 * memory-bandwidth limit and the ISA's peak (--kernels), and the read
 * bandwidth alone (--membw).
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/kbench.h"
#include "kernels/kernels.h"
#include "model/kvcache.h"
#include "bench/mbench.h"
#include "bench/synth.h"
#include "host/sysinfo/sysinfo.h"
#include "kernels/types.h"
#include "base/util.h"

enum { FMT_MD, FMT_CSV, FMT_JSON, FMT_JSONL };

struct out {
	int fmt, n;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ds-bench (-m DIR | --synthetic SHAPE [--layers N] [--type TYPE])\n"
		"                [--cpus LIST] [--ctx-size N] [--hugepages] [--mlock]\n"
		"                [-n N,...] [--no-populate] [--numa MODE] [-o md|csv|json|jsonl]\n"
		"                [-p N,...] [-r N] [--seed N] [-t N,...]\n"
		"       ds-bench --synthetic SHAPE [--layers N] [--type TYPE] --save DIR\n"
		"       ds-bench --synthetic list\n"
		"       ds-bench --kernels [--cpu-time] [--cpus LIST] [-o md|csv|json] [-q]\n"
		"                [-s NxK] [-t N,...] [-w TYPE,...]\n"
		"       ds-bench --membw [--cpu-time] [--cpus LIST] [-o md|csv|json] [-q]\n"
		"                [-t N,...]\n");
}

static void emit(void *arg, const ds_kbench_row *r)
{
	struct out *o = arg;
	char shape[48] = "";

	if (r->n && r->k)
		snprintf(shape, sizeof shape, "%llux%llu", (unsigned long long)r->n,
			 (unsigned long long)r->k);
	else if (r->n)
		snprintf(shape, sizeof shape, "%llu MiB", (unsigned long long)r->n >> 20);
	if (o->fmt == FMT_CSV) {
		printf("%s,%s,%llu,%llu,%llu,%d,%.9g,%.4g,%.4g,%.4g,%.4g,%.4g\n", r->op, r->type,
		       (unsigned long long)r->n, (unsigned long long)r->k,
		       (unsigned long long)r->t, r->threads, r->sec, r->gbs, r->gops, r->ratio,
		       r->us, r->ghz);
	} else if (o->fmt == FMT_JSON) {
		printf("%s\n    {\"op\": \"%s\", \"type\": \"%s\", \"n\": %llu, \"k\": %llu, "
		       "\"t\": %llu, \"threads\": %d, \"sec\": %.9g, \"gbs\": %.4g, "
		       "\"gops\": %.4g, \"ratio\": %.4g, \"us\": %.4g, \"ghz\": %.4g}",
		       o->n ? "," : "", r->op, r->type, (unsigned long long)r->n,
		       (unsigned long long)r->k, (unsigned long long)r->t, r->threads, r->sec,
		       r->gbs, r->gops, r->ratio, r->us, r->ghz);
	} else {
		char gbs[16] = "", gops[16] = "", ratio[16] = "", note[48] = "";

		if (r->gbs > 0)
			snprintf(gbs, sizeof gbs, "%.1f", r->gbs);
		if (r->gops > 0)
			snprintf(gops, sizeof gops, "%.1f", r->gops);
		if (r->ratio > 0)
			snprintf(ratio, sizeof ratio, "%.2f", r->ratio);
		if (strcmp(r->op, "barrier") == 0)
			snprintf(note, sizeof note, "%.2f us round trip", r->us);
		else if (strcmp(r->op, "peak") == 0)
			snprintf(note, sizeof note, "ops/cycle/thread at %.2f GHz", r->ghz);
		else if (strcmp(r->op, "matvec") == 0)
			snprintf(note, sizeof note, "of read probe");
		else if (strcmp(r->op, "matmul") == 0)
			snprintf(note, sizeof note, "of %s peak",
				 r->type[0] == 'q' ? "int8" : strcmp(r->type, "bf16") == 0 ? "bf16" : "fp32");
		printf("| %s | %s | %s | %llu | %d | %.3f | %s | %s | %s %s |\n", r->op, r->type,
		       shape, (unsigned long long)r->t, r->threads, r->sec * 1e3, gbs, gops,
		       ratio, note);
	}
	o->n++;
	fflush(stdout);
}

/* ---- model rows ------------------------------------------------------------------------ */

/* The fields of a row, in the order of every plumbing format; the names
 * are the stable interface (ds-bench(1)). */
enum { F_STR, F_INT, F_NUM, F_BOOL };

typedef struct field {
	const char *name;
	int kind;
	const char *s;
	double v;
} field;

#define NFIELDS 35

static int row_fields(const ds_mbench_row *r, field *f)
{
	const ds_mbench_model *m = r->m;
	int n = 0;

#define S(nm, val) f[n++] = (field){ nm, F_STR, val, 0 }
#define I(nm, val) f[n++] = (field){ nm, F_INT, NULL, (double)(val) }
#define N(nm, val) f[n++] = (field){ nm, F_NUM, NULL, (double)(val) }
#define B(nm, val) f[n++] = (field){ nm, F_BOOL, NULL, (double)(val) }
	S("model", m->name);
	B("synthetic", m->synth_bytes > 0);
	S("arch", m->arch);
	S("type", m->type);
	I("n_layer", m->n_layer);
	I("model_bytes", m->model_bytes);
	I("active_bytes", m->active_bytes);
	I("params", m->params);
	I("active_params", m->active_params);
	S("isa", m->isa);
	B("hugepages", m->hugepages);
	N("load_s", m->load_s);
	I("threads", r->threads);
	I("n_prompt", r->pp);
	I("n_gen", r->tg);
	I("n_ctx", r->n_ctx);
	I("reps", r->reps);
	N("pp_ts", r->pp_ts);
	N("pp_sd", r->pp_sd);
	N("tg_ts", r->tg_ts);
	N("tg_sd", r->tg_sd);
	N("ms_per_tok", r->ms_per_tok);
	N("ms_per_tok_sd", r->ms_sd);
	N("ttft_ms", r->ttft_ms);
	N("ttft_sd", r->ttft_sd);
	N("probe_gbs", r->probe_gbs);
	N("probe_best_gbs", r->probe_best_gbs);
	N("decode_gbs", r->decode_gbs);
	N("bw_ratio", r->bw_ratio);
	S("peak_kind", r->peak_kind);
	N("peak_gops", r->peak_gops);
	N("pp_gops", r->pp_gops);
	N("pp_ratio", r->pp_ratio);
	N("rss_peak_mib", r->rss_peak_mib);
	N("kv_mib", r->kv_mib);
#undef S
#undef I
#undef N
#undef B
	DS_ASSERT(n == NFIELDS);
	return n;
}

/* A JSON string (names and types are plain; a directory may not be). */
static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static void csv_str(const char *s)
{
	if (strpbrk(s, ",\"\n") == NULL) {
		fputs(s, stdout);
		return;
	}
	putchar('"');
	for (; *s; s++) {
		if (*s == '"')
			putchar('"');
		putchar(*s);
	}
	putchar('"');
}

static void value(const field *f, int json)
{
	if (f->kind == F_STR)
		json ? json_str(f->s) : csv_str(f->s);
	else if (f->kind == F_BOOL)
		fputs(f->v != 0 ? "true" : "false", stdout);
	else if (f->kind == F_INT)
		printf("%.0f", f->v);
	else
		printf("%.6g", f->v);
}

/* "636.18 MiB", "9.06 GiB"; "1.10 B", "35.2 M" */
static const char *bytes_str(uint64_t b, char *buf, size_t len)
{
	if (b >= (1ull << 30))
		snprintf(buf, len, "%.2f GiB", b / 1073741824.0);
	else
		snprintf(buf, len, "%.2f MiB", b / 1048576.0);
	return buf;
}

static const char *count_str(uint64_t n, char *buf, size_t len)
{
	if (n >= 100000000ull)
		snprintf(buf, len, "%.2f B", n * 1e-9);
	else
		snprintf(buf, len, "%.2f M", n * 1e-6);
	return buf;
}

static void md_header(const ds_mbench_model *m)
{
	char a[32], b[32], c[32], d[32];

	printf("model %s: %s, %s, %u layers, %s, %s params (%s active, %s read "
	       "per token), kernels %s, loaded in %.2f s%s\n\n", m->name, m->arch,
	       m->type, m->n_layer, bytes_str(m->model_bytes, a, sizeof a),
	       count_str(m->params, b, sizeof b),
	       count_str(m->active_params, c, sizeof c),
	       bytes_str(m->active_bytes, d, sizeof d), m->isa, m->load_s,
	       m->hugepages ? ", in hugepages" : "");
	printf("| model | size | params | type | threads | test | t/s | ms/tok "
	       "| TTFT ms | GB/s | of probe | GOP/s | of peak |\n"
	       "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
}

static void md_row(const ds_mbench_row *r)
{
	const ds_mbench_model *m = r->m;
	char pre[256], a[32], b[32];

	snprintf(pre, sizeof pre, "| %s | %s | %s | %s | %d |", m->name,
		 bytes_str(m->model_bytes, a, sizeof a),
		 count_str(m->params, b, sizeof b), m->type, r->threads);
	if (r->pp)
		printf("%s pp%u | %.2f ± %.2f | | %.1f ± %.1f | | | %.1f | %.3f %s |\n",
		       pre, r->pp, r->pp_ts, r->pp_sd, r->ttft_ms, r->ttft_sd,
		       r->pp_gops, r->pp_ratio, r->peak_kind);
	if (r->tg)
		printf("%s tg%u | %.2f ± %.2f | %.2f | | %.2f | %.3f | | |\n", pre,
		       r->tg, r->tg_ts, r->tg_sd, r->ms_per_tok, r->decode_gbs,
		       r->bw_ratio);
}

static void emit_model(void *arg, const ds_mbench_row *r)
{
	struct out *o = arg;
	field f[NFIELDS];
	int n = row_fields(r, f), i;

	if (o->fmt == FMT_MD) {
		if (o->n == 0)
			md_header(r->m);
		md_row(r);
	} else if (o->fmt == FMT_CSV) {
		for (i = 0; o->n == 0 && i < n; i++)
			printf("%s%s", f[i].name, i + 1 < n ? "," : "\n");
		for (i = 0; i < n; i++) {
			value(&f[i], 0);
			putchar(i + 1 < n ? ',' : '\n');
		}
	} else {
		int js = o->fmt == FMT_JSON;

		printf("%s{", js ? (o->n ? ",\n  " : "[\n  ") : "");
		for (i = 0; i < n; i++) {
			printf("\"%s\": ", f[i].name);
			value(&f[i], 1);
			printf("%s", i + 1 < n ? ", " : "}");
		}
		if (!js)
			putchar('\n');
	}
	o->n++;
	fflush(stdout);
}

/* ---- options ------------------------------------------------------------------------- */

typedef struct opts {
	int mode;                 /* 'K' 'M' 'B' (a model) */
	const char *dir, *shape, *type, *numa, *cpus, *save;
	long layers, reps, ctx;
	uint32_t pp[16], tg[16];
	int n_pp, n_tg;
	int threads[16], n_threads, threads_set;
	int hugepages, mlock, no_populate;
	unsigned long long seed;
	struct out out;
	ds_kbench_opts k;
} opts;

static int bad(const char *opt, const char *val, const char *what)
{
	fprintf(stderr, "ds-bench: %s %s: %s\n", opt, val, what);
	return 2;
}

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
			return bad("--ctx-size", a, "expected 1 to 16777216");
		o->ctx = v;
		return 0;
	case 'H': o->hugepages = 1; return 0;
	case 'K': o->mode = 'K'; return 0;
	case 'L':
		if (ds_parse_long(a, 1, 1024, &o->layers))
			return bad("--layers", a, "expected 1 to 1024");
		return 0;
	case 'M': o->mode = 'M'; return 0;
	case 'm': o->dir = a; o->mode = 'B'; return 0;
	case 'l': o->mlock = 1; return 0;
	case 'N': o->numa = a; return 0;
	case 'n':
		if ((o->n_tg = parse_u32_list(a, 0, 1 << 20, o->tg, 16)) < 1)
			return bad("-n", a, "expected token counts like 128,256 (0 skips tg)");
		return 0;
	case 'P': o->no_populate = 1; return 0;
	case 'p':
		if ((o->n_pp = parse_u32_list(a, 0, 1 << 20, o->pp, 16)) < 1)
			return bad("-p", a, "expected token counts like 512,1024 (0 skips pp)");
		return 0;
	case 'q': o->k.quick = 1; return 0;
	case 'r':
		if (ds_parse_long(a, 1, 64, &o->reps))
			return bad("-r", a, "expected 1 to 64 repetitions");
		return 0;
	case 'S': o->shape = a; o->mode = 'B'; return 0;
	case 'W': o->save = a; return 0;
	case 's': {
		unsigned long long n, k;
		char tail;

		if (sscanf(a, "%llux%llu%c", &n, &k, &tail) != 2 || n < 1 || k < 1 ||
		    n > 65536 || k > 65536)
			return bad("-s", a, "expected NxK, each 1 to 65536");
		o->k.mm_n = n;
		o->k.mm_k = k;
		return 0;
	}
	case 'E':
		if (ds_parse_long(a, 0, 0x7fffffffL, &v))
			return bad("--seed", a, "expected a number");
		o->seed = (unsigned long long)v;
		return 0;
	case 't':
		o->n_threads = parse_threads(a, o->threads, 16);
		o->threads_set = 1;
		if (o->n_threads < 1)
			return bad("-t", a, "expected thread counts like 1,2");
		return 0;
	case 'T': o->type = a; return 0;
	case 'w': o->k.types = a; return 0;
	case 'o':
		if (strcmp(a, "md") == 0) o->out.fmt = FMT_MD;
		else if (strcmp(a, "csv") == 0) o->out.fmt = FMT_CSV;
		else if (strcmp(a, "json") == 0) o->out.fmt = FMT_JSON;
		else if (strcmp(a, "jsonl") == 0) o->out.fmt = FMT_JSONL;
		else return bad("-o", a, "expected md, csv, json or jsonl");
		return 0;
	}
	usage(stderr);
	return 2;
}

/* The combinations that need a model, and those that need --kernels. */
static int check_opts(const opts *o)
{
	if (o->mode == 0) {
		usage(stderr);
		return 2;
	}
	if (o->dir && o->shape) {
		fprintf(stderr, "ds-bench: -m and --synthetic: give one\n");
		return 2;
	}
	if (o->mode != 'B' && (o->n_pp || o->n_tg || o->reps || o->ctx ||
			       o->hugepages || o->numa || o->mlock || o->no_populate)) {
		fprintf(stderr, "ds-bench: -p, -n, -r, --ctx-size and the loading "
			"options need -m or --synthetic\n");
		return 2;
	}
	if (!o->shape && (o->type || o->layers || o->save)) {
		fprintf(stderr, "ds-bench: --type, --layers and --save need --synthetic\n");
		return 2;
	}
	if (o->mode == 'B' && (o->k.quick || o->k.mm_n || o->k.types || o->k.cpu_time)) {
		fprintf(stderr, "ds-bench: -q, -s, -w and --cpu-time need --kernels "
			"or --membw\n");
		return 2;
	}
	if (o->mode != 'B' && o->out.fmt == FMT_JSONL) {
		fprintf(stderr, "ds-bench: -o jsonl needs -m or --synthetic\n");
		return 2;
	}
	return 0;
}

static int parse_args(opts *o, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "cpu-time", no_argument, NULL, 'C' },
		{ "cpus", required_argument, NULL, 'c' },
		{ "ctx-size", required_argument, NULL, 'G' },
		{ "help", no_argument, NULL, 'h' },
		{ "hugepages", no_argument, NULL, 'H' },
		{ "kernels", no_argument, NULL, 'K' },
		{ "layers", required_argument, NULL, 'L' },
		{ "membw", no_argument, NULL, 'M' },
		{ "mlock", no_argument, NULL, 'l' },
		{ "model", required_argument, NULL, 'm' },
		{ "n-gen", required_argument, NULL, 'n' },
		{ "n-prompt", required_argument, NULL, 'p' },
		{ "no-populate", no_argument, NULL, 'P' },
		{ "numa", required_argument, NULL, 'N' },
		{ "output", required_argument, NULL, 'o' },
		{ "quick", no_argument, NULL, 'q' },
		{ "repetitions", required_argument, NULL, 'r' },
		{ "save", required_argument, NULL, 'W' },
		{ "seed", required_argument, NULL, 'E' },
		{ "shape", required_argument, NULL, 's' },
		{ "synthetic", required_argument, NULL, 'S' },
		{ "threads", required_argument, NULL, 't' },
		{ "type", required_argument, NULL, 'T' },
		{ "version", no_argument, NULL, 'V' },
		{ "weights", required_argument, NULL, 'w' },
		{ NULL, 0, NULL, 0 },
	};
	int c, rc, modes = 0;

	memset(o, 0, sizeof *o);
	o->threads[0] = 1;
	o->threads[1] = 2;
	o->n_threads = 2;
	while ((c = getopt_long(argc, argv, "hm:n:o:p:qr:s:t:w:", lo, NULL)) != -1) {
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
			fprintf(stderr, "ds-bench: -m, --synthetic, --kernels and "
				"--membw: give one\n");
		else
			usage(stderr);
		return 2;
	}
	return check_opts(o);
}

/* ---- --synthetic: a temporary model directory -------------------------------------------
 * Built under $TMPDIR (or /tmp) in ds-bench-XXXXXX/model and removed as
 * soon as it is loaded (the mapping keeps the data); an interrupt while
 * it is written stops the writer (which removes its temporary), one after
 * that removes the files here. */

static volatile sig_atomic_t cancel;
static volatile sig_atomic_t phase;      /* 1 writing, 2 written */
static char tmp_dir[4096], tmp_model[4200], tmp_bin[4300], tmp_meta[4300];

static void on_signal(int sig)
{
	if (phase == 1) {
		cancel = 1;
		return;
	}
	if (phase == 2) {
		unlink(tmp_bin);
		unlink(tmp_meta);
		rmdir(tmp_model);
		rmdir(tmp_dir);
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

static void remove_tmp(void *arg)
{
	(void)arg;
	if (phase == 0)
		return;
	ds_remove_tree(tmp_dir);
	phase = 0;
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
		       count_str(total, a, sizeof a), count_str(active, b, sizeof b),
		       bytes_str(q4, c, sizeof c), sh[i].model,
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
			    DS_KV_F16, &kv, &err))
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
	phase = 1;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	so.dst = o->save;
	return ds_synth_write(&so, &bytes, err);
}

static int build_synthetic(const opts *o, ds_mbench_model *mm, ds_err *err)
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
	if (snprintf(tmp_dir, sizeof tmp_dir, "%s/ds-bench-XXXXXX", base) >=
	    (int)sizeof tmp_dir || mkdtemp(tmp_dir) == NULL)
		return ds_errf(err, "%s: cannot create a temporary directory", base);
	snprintf(tmp_model, sizeof tmp_model, "%s/model", tmp_dir);
	snprintf(tmp_bin, sizeof tmp_bin, "%s/model.bin", tmp_model);
	snprintf(tmp_meta, sizeof tmp_meta, "%s/model.meta", tmp_model);
	phase = 1;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	so.dst = tmp_model;
	fprintf(stderr, "ds-bench: writing a random %s (%s, %u layers, %.2f GiB) "
		"in %s\n", o->shape, o->type ? o->type : "q4", so.hp.n_layer,
		bytes / 1073741824.0, tmp_dir);
	t0 = ds_now_s();
	rc = ds_synth_write(&so, &bytes, err);
	mm->synth_s = ds_now_s() - t0;
	mm->synth_bytes = bytes;
	if (rc) {
		phase = 2;
		remove_tmp(NULL);
		return -1;
	}
	phase = 2;
	return 0;
}

static int run_model(opts *o, ds_err *err)
{
	ds_mbench_model mm;
	ds_mbench_opts mo;
	uint32_t def_pp = 512, def_tg = 128;
	int rc;

	memset(&mm, 0, sizeof mm);
	memset(&mo, 0, sizeof mo);
	if (o->numa && ds_numa_parse(o->numa, &mo.load.numa, err))
		return ds_err_prefix(err, "--numa");
	if (o->shape && build_synthetic(o, &mm, err))
		return -1;
	mo.dir = o->shape ? tmp_model : o->dir;
	mo.name = o->shape;
	mo.pp = o->n_pp ? o->pp : &def_pp;
	mo.n_pp = o->n_pp ? o->n_pp : 1;
	mo.tg = o->n_tg ? o->tg : &def_tg;
	mo.n_tg = o->n_tg ? o->n_tg : 1;
	mo.threads = o->threads;
	mo.n_threads = o->n_threads;
	mo.reps = o->reps ? (int)o->reps : 5;
	mo.ctx_size = (uint32_t)o->ctx;
	mo.cpus = o->cpus;
	mo.load.no_populate = o->no_populate;
	mo.load.mlock = o->mlock;
	mo.load.hugepages = o->hugepages;
	mo.seed = o->seed;
	mo.progress = stderr;
	mo.model = &mm;
	mo.loaded = o->shape ? remove_tmp : NULL;
	rc = ds_mbench_run(&mo, emit_model, &o->out, err);
	remove_tmp(NULL);
	if (o->out.fmt == FMT_JSON)
		printf(o->out.n ? "\n]\n" : "[]\n");
	else if (o->out.fmt == FMT_MD && o->out.n)
		printf("\npeak RSS %.1f MiB\n", ds_rss_peak_mib());
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
				fprintf(stderr, "ds-bench: -w %s: empty or overlong type\n", o->k.types);
				return 2;
			}
			memcpy(name, p, len);
			name[len] = '\0';
			if (ds_ttype_parse(name, &t) != 0 || t.dt == DS_I32) {
				fprintf(stderr, "ds-bench: -w %s: not a weight type\n", name);
				return 2;
			}
			p += len + (p[len] == ',');
		}
	}
	o->k.threads = o->threads;
	o->k.nthreads = o->n_threads;
	if (o->out.fmt == FMT_CSV)
		printf("op,type,n,k,t,threads,sec,gbs,gops,ratio,us,ghz\n");
	else if (o->out.fmt == FMT_JSON)
		printf("{\"isa\": \"%s\", \"clock\": \"%s\", \"rows\": [", ds_kernels_name(),
		       o->k.cpu_time ? "cpu" : "wall");
	else
		printf("kernels: %s, times by %s\n\n| op | type | shape | T | threads | ms | GB/s | GOP/s | ratio |\n"
		       "|---|---|---|---|---|---|---|---|---|\n", ds_kernels_name(),
		       o->k.cpu_time ? "CPU time per thread" : "the wall clock");
	rc = o->mode == 'K' ? ds_kbench_kernels(&o->k, emit, &o->out, err)
			    : ds_kbench_membw(&o->k, emit, &o->out, err);
	if (o->out.fmt == FMT_JSON)
		printf("\n]}\n");
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
		fprintf(stderr, "ds-bench: %s\n", err.msg);
		return 1;
	}
	if (o.mode == 'B') {
		ds_map_guard();
		if (!o.threads_set) {
			long n = sysconf(_SC_NPROCESSORS_ONLN);

			o.threads[0] = n > 0 && n < 1024 ? (int)n : 1;
			o.n_threads = 1;
		}
		rc = (o.save ? save_synthetic(&o, &err) : run_model(&o, &err)) ? 1 : 0;
		if (rc && cancel)
			rc = 130;
	} else {
		rc = run_kernels(&o, &err);
	}
	if (rc == 1 || rc == 130)
		fprintf(stderr, "ds-bench: %s\n", err.msg);
	return rc;
}

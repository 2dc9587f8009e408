/*
 * mbench.c - the model benchmark (mbench.h): load once, then per thread
 * count a pool, a forward, a cache and the probes, and per (p, n) the
 * timed prefills and decodes.
 */
#include "mbench.h"

#include <malloc.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "kbench.h"
#include "kernels/kernels.h"
#include "runtime/sampler.h"
#include "runtime/session.h"

/* ---- accounting --------------------------------------------------------------------- */

int ds_model_params(const ds_hparams *hp, uint64_t *total, uint64_t *active,
		    ds_err *err)
{
	ds_tdesc *d;
	size_t n, i;

	if (ds_arch_tensors(hp, &d, &n, err))
		return -1;
	*total = *active = 0;
	for (i = 0; i < n; i++) {
		uint64_t e = 1;
		int j;

		for (j = 0; j < d[i].ndim; j++)
			e *= d[i].shape[j];
		*total += e;
		if (d[i].kind == DS_TK_EMBED && !hp->tie_embeddings)
			continue;       /* one row per token */
		if (d[i].ndim == 3)     /* routed experts: the used ones */
			e = e / d[i].shape[0] * hp->n_expert_used;
		*active += e;
	}
	free(d);
	return 0;
}

/* Start the peak RSS afresh (Linux 4.0+: "5" to clear_refs), so that it
 * leaves out the probe's buffer, freed by now. */
static void reset_peak_rss(void)
{
	FILE *f = fopen("/proc/self/clear_refs", "w");

	if (f == NULL)
		return;
	fputs("5", f);
	fclose(f);
}

/* ---- one thread count ------------------------------------------------------------------ */

typedef struct mb {
	const ds_mbench_opts *o;
	ds_model *m;
	ds_pool *pool;
	ds_fwd *f;
	ds_kvcache kv;
	uint32_t n_ctx, max_p, ubatch;
	int32_t *tok, *pos, *seq;   /* [max(max_p, 1)] */
	uint8_t *prompt;            /* [ubatch] all 1: pp reads a prompt */
	uint64_t rng;
	double probe_gbs, peak[3];
	const uint8_t *wmem;        /* the weights the forward reads */
	size_t wbytes;
} mb;

static uint32_t rnd(mb *b, uint32_t n)
{
	/* reproducible tokens for a given seed */
	return (uint32_t)(ds_xorshift64s(&b->rng) >> 33) % n;
}

/* p tokens from an empty cache; *sec: the passes, *ttft: and the argmax. */
static int prefill(mb *b, uint32_t p, double *sec, double *ttft, ds_err *err)
{
	uint32_t i, nv = b->m->hp.n_vocab;
	double t0;
	int first;

	for (i = 0; i < p; i++) {
		b->tok[i] = (int32_t)rnd(b, nv);
		b->pos[i] = (int32_t)i;
	}
	ds_kvcache_seq_keep(&b->kv, 0, 0);
	t0 = ds_now_s();
	for (i = 0; i < p; i += b->ubatch) {
		ds_batch bt = { p - i < b->ubatch ? p - i : b->ubatch, b->tok + i,
				b->pos + i, b->seq, NULL, b->prompt };

		if (ds_fwd_decode(b->f, &b->kv, &bt, err))
			return -1;
	}
	*sec = ds_now_s() - t0;
	first = ds_argmax(ds_fwd_logits(b->f, 0), (int)nv);
	*ttft = ds_now_s() - t0;
	return first >= 0 ? 0 : -1;
}

/* n steps of one token each from an empty cache. */
static int decode(mb *b, uint32_t n, double *sec, ds_err *err)
{
	uint32_t i, nv = b->m->hp.n_vocab;
	double t0;

	ds_kvcache_seq_keep(&b->kv, 0, 0);
	t0 = ds_now_s();
	for (i = 0; i < n; i++) {
		int32_t tok = (int32_t)rnd(b, nv), pos = (int32_t)i;
		ds_batch bt = { .n = 1, .token = &tok, .pos = &pos, .seq = b->seq };

		if (ds_fwd_decode(b->f, &b->kv, &bt, err))
			return -1;
	}
	*sec = ds_now_s() - t0;
	return 0;
}

static void mean_sd(const double *x, int n, double *mean, double *sd)
{
	double s = 0, q = 0;
	int i;

	for (i = 0; i < n; i++)
		s += x[i];
	*mean = n ? s / n : 0;
	for (i = 0; i < n; i++)
		q += (x[i] - *mean) * (x[i] - *mean);
	*sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

static void say(const mb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const mb *b, const char *fmt, ...)
{
	va_list ap;

	if (b->o->progress == NULL)
		return;
	fprintf(b->o->progress, "ds-bench: ");
	va_start(ap, fmt);
	vfprintf(b->o->progress, fmt, ap);
	va_end(ap);
	fputc('\n', b->o->progress);
	fflush(b->o->progress);
}

/* --mpi: what the ranks moved and waited over `tokens` tokens taking
 * sec seconds, since the last reset. */
static void comm(mb *b, double tokens, double sec, struct ds_mbench_comm *c)
{
	ds_dist *d = b->o->dist;
	ds_dist_stats *all;
	int i, n;

	if (d == NULL || tokens <= 0)
		return;
	n = ds_dist_size(d);
	all = calloc((size_t)n, sizeof *all);
	if (all == NULL)
		return;
	ds_dist_gather(d, all);
	for (i = 0; i < n; i++) {
		double w = all[i].wait_s * 1e3 / tokens;

		c->bytes += (double)all[i].sent / tokens;
		c->wait_max_ms = w > c->wait_max_ms ? w : c->wait_max_ms;
	}
	c->ms = (all[0].wait_s + all[0].batch_s) * 1e3 / tokens;
	c->share = sec > 0 ? (all[0].wait_s + all[0].batch_s) / sec : 0;
	free(all);
}

static void comm_reset(mb *b)
{
	if (b->o->dist != NULL)
		ds_dist_reset_all(b->o->dist);
}

/* The pp test of p tokens: reps timed prefills after one warm-up. */
static int pp_test(mb *b, uint32_t p, ds_mbench_row *r, ds_err *err)
{
	double ts[64], ttft[64], sec, t1, all = 0;
	int i, n = r->reps;

	if (p == 0)
		return 0;
	if (prefill(b, p, &sec, &t1, err))
		return -1;
	comm_reset(b);
	for (i = 0; i < n; i++) {
		if (prefill(b, p, &sec, &t1, err))
			return -1;
		ts[i] = p / sec;
		all += sec;
		ttft[i] = t1 * 1e3;
		say(b, "%d threads: pp%u %d/%d: %.2f tokens/s", r->threads, p, i + 1,
		    n, ts[i]);
	}
	mean_sd(ts, n, &r->pp_ts, &r->pp_sd);
	mean_sd(ttft, n, &r->ttft_ms, &r->ttft_sd);
	comm(b, (double)p * n, all, &r->pp_comm);
	return 0;
}

#define PROBE_MAX ((size_t)512 << 20)   /* weight bytes the probe reads */
#define PROBE_SEC 0.1                   /* and for how long, back to back */

/* The tg test of n steps: reps timed decodes after a warm-up of a few,
 * each just after a read probe over (the first 512 MiB of) the weights
 * it streams, so that a ratio's two figures see the same machine.  The
 * probe's sustained rate is the ratio's ruler (a decode run is a mean
 * over a second or more); its fastest single read is reported beside. */
static int tg_test(mb *b, uint32_t n, ds_mbench_row *r, ds_err *err)
{
	double ts[64], ms[64], gbs[64], best[64], ratio, sec, sd, all = 0;
	int i, reps = r->reps;

	if (n == 0)
		return 0;
	if (decode(b, n < 4 ? n : 4, &sec, err))
		return -1;
	comm_reset(b);
	for (i = 0; i < reps; i++) {
		if (ds_kbench_read(b->pool, b->wmem, b->wbytes < PROBE_MAX ? b->wbytes : PROBE_MAX,
				   PROBE_SEC, &gbs[i], &best[i]) || decode(b, n, &sec, err))
			return -1;
		ts[i] = n / sec;
		all += sec;
		ms[i] = sec * 1e3 / n;
		ratio = gbs[i] > 0 ? b->o->model->active_bytes * ts[i] * 1e-9 / gbs[i] : 0;
		say(b, "%d threads: tg%u %d/%d: %.2f tokens/s, %.3f of the probe's %.1f GB/s "
		    "(its best read %.1f)", r->threads, n, i + 1, reps, ts[i], ratio, gbs[i], best[i]);
	}
	mean_sd(ts, reps, &r->tg_ts, &r->tg_sd);
	mean_sd(ms, reps, &r->ms_per_tok, &r->ms_sd);
	mean_sd(gbs, reps, &r->probe_gbs, &sd);
	mean_sd(best, reps, &r->probe_best_gbs, &sd);
	comm(b, (double)n * reps, all, &r->tg_comm);
	return 0;
}

static int one_row(mb *b, uint32_t p, uint32_t n, ds_mbench_row *r,
		   ds_err *err)
{
	const ds_mbench_model *mm = b->o->model;
	int bf16 = strncmp(mm->type, "bf16", 4) == 0;

	r->pp = p;
	r->tg = n;
	r->ranks = b->o->dist ? ds_dist_size(b->o->dist) : 1;
	r->n_ctx = b->n_ctx;
	r->kv_mib = b->kv.bytes / 1048576.0;
	r->probe_gbs = b->probe_gbs;
	r->peak_kind = bf16 ? "bf16" : "int8";
	r->peak_gops = b->peak[bf16 ? 1 : 0];
	if (pp_test(b, p, r, err) || tg_test(b, n, r, err))
		return -1;
	r->decode_gbs = mm->active_bytes * r->tg_ts * 1e-9;
	r->bw_ratio = r->probe_gbs > 0 ? r->decode_gbs / r->probe_gbs : 0;
	/* a prompt of p tokens attends to (p + 1) / 2 keys a token on
	 * average, and asks for one token's logits (the last) */
	r->pp_gops = p ? 2.0 * ((double)(mm->active_params - mm->head_params) +
				(double)mm->head_params / p +
				(double)mm->attn_width * (p + 1.0) / 2) * r->pp_ts * 1e-9 : 0;
	r->pp_ratio = r->peak_gops > 0 ? r->pp_gops / r->peak_gops : 0;
	r->rss_peak_mib = ds_rss_peak_mib();
	return 0;
}

/* 1 if some row decodes nothing (-n 0). */
static int no_decode(const ds_mbench_opts *o)
{
	int i;

	for (i = 0; i < o->n_tg; i++)
		if (o->tg[i] == 0)
			return 1;
	return 0;
}

/* The pool, forward and cache of a thread count (on every rank alike). */
static int threads_fwd(mb *b, int threads, ds_err *err)
{
	ds_pool_opts po = { .threads = threads, .cpus = b->o->cpus };
	ds_fwd_opts fo = { .max_batch = b->ubatch,
			   .ep = b->o->dist ? ds_dist_ep(b->o->dist) : NULL };

	if (ds_pool_init(&b->pool, &po, err) ||
	    ds_fwd_init(&b->f, b->m, b->pool, &fo, err) ||
	    ds_kvcache_init(&b->kv, &b->m->hp, 1, b->n_ctx, b->o->kv_type, err))
		return -1;
	return 0;
}

static int threads_open(mb *b, int threads, ds_err *err)
{
	int probe;

	if (threads_fwd(b, threads, err))
		return -1;
	/* rows with decode probe the model's weights (tg_test); the 512 MiB
	 * buffer is read only for rows without */
	probe = no_decode(b->o);
	say(b, "%d threads: %speaks", threads, probe ? "read probe and " : "");
	if (ds_kbench_probe(b->pool, 0, 0, probe ? &b->probe_gbs : NULL, b->peak, err))
		return -1;
	/* the previous thread count's buffers, freed, stay resident in the
	 * heap until trimmed, and would count in this row's peak */
	malloc_trim(0);
	reset_peak_rss();
	return 0;
}

static void threads_close(mb *b)
{
	ds_kvcache_free(&b->kv);
	memset(&b->kv, 0, sizeof b->kv);
	ds_fwd_free(b->f);
	b->f = NULL;
	if (b->pool)
		ds_pool_free(b->pool);
	b->pool = NULL;
}

static int threads_rows(mb *b, int threads, ds_mbench_emit *emit, void *arg,
			ds_err *err)
{
	const ds_mbench_opts *o = b->o;
	int i, j;

	if (threads_open(b, threads, err))
		return -1;
	for (i = 0; i < o->n_pp; i++)
		for (j = 0; j < o->n_tg; j++) {
			ds_mbench_row r;

			memset(&r, 0, sizeof r);
			r.m = o->model;
			r.threads = threads;
			r.reps = o->reps;
			if (one_row(b, o->pp[i], o->tg[j], &r, err))
				return -1;
			emit(arg, &r);
		}
	return 0;
}

/* ---- the whole run ------------------------------------------------------------------- */

static uint32_t max_of(const uint32_t *v, int n)
{
	uint32_t m = 0;
	int i;

	for (i = 0; i < n; i++)
		m = v[i] > m ? v[i] : m;
	return m;
}

/* Load with a pool of the most threads asked for (the hugepages copy and
 * NUMA placement run on it), and fill o->model. */
/* ds_model_open with a pool of the most threads asked for (the
 * hugepages copy and NUMA placement run on it); --mpi: the rank's share,
 * after the job's split (on every rank alike). */
static int open_model(mb *b, ds_placement *pl, char *warn, size_t warn_len,
		      ds_err *err)
{
	const ds_mbench_opts *o = b->o;
	ds_pool_opts po = { .threads = 1, .cpus = o->cpus };
	ds_load_opts lo = o->load;
	int i, rc;

	if (o->dist != NULL) {
		if (ds_dist_model(o->dist, o->dir, err))
			return -2;      /* the job's answer: no section follows */
		ds_dist_load_opts(o->dist, &lo);
	}
	for (i = 0; i < o->n_threads; i++)
		po.threads = o->threads[i] > po.threads ? o->threads[i] : po.threads;
	if (ds_pool_init(&b->pool, &po, err))
		return -1;
	rc = ds_model_open(b->m, b->pool, o->dir, &lo, pl, warn, warn_len, err);
	ds_pool_free(b->pool);
	b->pool = NULL;
	return rc;
}

/* Load and fill o->model. */
/* Attention's multiply-adds per (query, key) pair: each head's q.k and
 * its weighted sum of values, in the form prompts use (MLA's MHA form:
 * qk_nope + qk_rope, then v_head_dim; otherwise head_dim twice). */
static uint64_t attn_width(const ds_hparams *hp)
{
	uint64_t w = hp->arch == DS_ARCH_DEEPSEEK2
		? (uint64_t)hp->qk_nope_head_dim + hp->qk_rope_head_dim + hp->v_head_dim
		: 2 * (uint64_t)hp->head_dim;

	return (uint64_t)hp->n_layer * hp->n_head * w;
}

static int load(mb *b, ds_placement *pl, ds_err *err)
{
	const ds_mbench_opts *o = b->o;
	ds_mbench_model *mm = o->model;
	char warn[256];
	double t0, share;
	int rc;

	say(b, "loading %s", o->dir);
	t0 = ds_now_s();
	rc = open_model(b, pl, warn, sizeof warn, err);
	mm->load_s = ds_now_s() - t0;
	if (o->loaded != NULL)
		o->loaded(o->loaded_arg);
	if (rc)
		return rc;
	if (warn[0])
		say(b, "warning: --hugepages: %s", warn);
	if (ds_map_small_pages(&b->m->bin, &share))
		say(b, "warning: %.0f%% of model.bin maps in 2 MiB pages (the rest in "
		    "4 KiB pages, which decode reads slower; see ds-run(1))", 100.0 * share);
	mm->name = o->name ? o->name : o->dir;
	mm->hugepages = pl->huge;
	mm->isa = ds_kernels_name();
	mm->kv_type = ds_kvtype_name(o->kv_type);
	mm->n_layer = b->m->hp.n_layer;
	snprintf(mm->arch, sizeof mm->arch, "%s", ds_arch_name(b->m->hp.arch));
	snprintf(mm->type, sizeof mm->type, "%s", b->m->quant.type);
	mm->attn_width = attn_width(&b->m->hp);
	mm->head_params = (uint64_t)b->m->hp.n_vocab * b->m->hp.n_embd;
	return ds_model_params(&b->m->hp, &mm->params, &mm->active_params, err);
}

/* Model bytes and active bytes come from a forward's own account. */
static int model_bytes(mb *b, ds_err *err)
{
	ds_pool_opts po = { .threads = 1 };
	ds_fwd_opts fo = { .max_batch = 1,
			   .ep = b->o->dist ? ds_dist_ep(b->o->dist) : NULL };
	ds_fwd_info fi;

	if (ds_pool_init(&b->pool, &po, err))
		return -1;
	if (ds_fwd_init(&b->f, b->m, b->pool, &fo, err)) {
		threads_close(b);
		return -1;
	}
	ds_fwd_get_info(b->f, &fi);
	b->o->model->model_bytes = fi.weight_bytes;
	b->o->model->active_bytes = fi.active_bytes;
	threads_close(b);
	return 0;
}

/* The batch sizes, cache and token buffers of o (on every rank alike). */
static int mb_init(mb *b, const ds_mbench_opts *o, ds_model *m, ds_err *err)
{
	uint32_t ctx = o->ctx_size;

	memset(b, 0, sizeof *b);
	memset(m, 0, sizeof *m);
	m->bin.fd = -1;
	b->o = o;
	b->m = m;
	b->rng = o->seed ? o->seed : 0x9E3779B97F4A7C15ULL;
	b->max_p = max_of(o->pp, o->n_pp);
	b->ubatch = o->batch ? o->batch : DS_SESSION_BATCH;
	if (b->ubatch > b->max_p)
		b->ubatch = b->max_p < 1 ? 1 : b->max_p;
	if (ctx == 0)
		ctx = b->max_p + max_of(o->tg, o->n_tg);
	b->n_ctx = ctx < 1 ? 1 : ctx;
	if (b->max_p > b->n_ctx || max_of(o->tg, o->n_tg) > b->n_ctx)
		return ds_errf(err, "--ctx-size %u is below the longest test", b->n_ctx);
	b->tok = ds_calloc(b->max_p + 1, sizeof *b->tok, err);
	b->pos = ds_calloc(b->max_p + 1, sizeof *b->pos, err);
	b->seq = ds_calloc(b->ubatch, sizeof *b->seq, err);   /* all slot 0 */
	b->prompt = ds_calloc(b->ubatch, 1, err);
	if (b->prompt != NULL)
		memset(b->prompt, 1, b->ubatch);
	return b->tok == NULL || b->pos == NULL || b->seq == NULL || b->prompt == NULL ? -1 : 0;
}

static void mb_free(mb *b, ds_placement *pl)
{
	free(b->tok);
	free(b->pos);
	free(b->seq);
	free(b->prompt);
	ds_model_free(b->m);
	ds_placement_free(pl);
}

int ds_mbench_run(const ds_mbench_opts *o, ds_mbench_emit *emit, void *arg,
		  ds_err *err)
{
	ds_model m;
	ds_placement pl;
	mb b;
	int t = 0, rc = -1, lrc = 0;

	memset(&pl, 0, sizeof pl);
	if (mb_init(&b, o, &m, err) || ds_kernels_init(err) ||
	    (lrc = load(&b, &pl, err)) != 0 || model_bytes(&b, err))
		goto out;
	b.wmem = pl.mem ? pl.mem : m.bin.data;
	b.wbytes = pl.mem ? pl.bytes : m.bin.size;
	for (t = 0; t < o->n_threads; t++) {
		rc = threads_rows(&b, o->threads[t], emit, arg, err);
		threads_close(&b);
		/* the other ranks' section of this thread count ends */
		if (o->dist != NULL)
			ds_dist_done(o->dist, rc ? 1 : 0);
		if (rc)
			goto out;
	}
	rc = 0;
out:
	/* a failure before the first section: the others wait for one */
	if (rc && t == 0 && lrc != -2 && o->dist != NULL)
		ds_dist_done(o->dist, 1);
	mb_free(&b, &pl);
	return rc;
}

int ds_mbench_follow(const ds_mbench_opts *o, ds_err *err)
{
	ds_model m;
	ds_placement pl;
	char warn[256];
	mb b;
	int t, rc;

	memset(&pl, 0, sizeof pl);
	if (mb_init(&b, o, &m, err) || ds_kernels_init(err))
		ds_dist_fail(o->dist, err->msg);
	rc = open_model(&b, &pl, warn, sizeof warn, err);
	if (rc == -2) {
		mb_free(&b, &pl);
		return 1;
	}
	if (rc)
		ds_dist_fail(o->dist, err->msg);
	for (t = 0; t < o->n_threads && rc == 0; t++) {
		if (threads_fwd(&b, o->threads[t], err))
			ds_dist_fail(o->dist, err->msg);
		rc = ds_dist_follow(o->dist, b.f, &b.kv, err);
		threads_close(&b);
	}
	mb_free(&b, &pl);
	return rc;
}

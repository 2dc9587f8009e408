/*
 * kbench.c - the kernel benchmark: read-bandwidth probe, pool barrier,
 * dot-product peaks and the matrix kernels, through the op layer.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kbench.h"
#include "kernels.h"
#include "ops.h"
#include "threads.h"

/* ---- timing ------------------------------------------------------------------- */

typedef void bench_fn(void *arg);

/* Best time of one call of fn over at least min_sec and 3 calls. */
static double best_of(bench_fn *fn, void *arg, double min_sec)
{
	double t0 = ds_now_s(), best = INFINITY;
	int r;

	for (r = 0; r < 3 || ds_now_s() - t0 < min_sec; r++) {
		double a = ds_now_s(), d;

		fn(arg);
		d = ds_now_s() - a;
		best = d < best ? d : best;
		if (r > 100000)
			break;
	}
	return best;
}

/* Best times of fa and fb, called alternately (so both see the same
 * machine when it is shared), over at least min_sec and 3 calls each. */
static void best_of2(bench_fn *fa, void *a, bench_fn *fb, void *b,
		     double min_sec, double *ta, double *tb)
{
	double t0 = ds_now_s();
	int r;

	*ta = *tb = INFINITY;
	for (r = 0; r < 3 || ds_now_s() - t0 < min_sec; r++) {
		double s = ds_now_s(), d;

		fa(a);
		d = ds_now_s() - s;
		*ta = d < *ta ? d : *ta;
		s = ds_now_s();
		fb(b);
		d = ds_now_s() - s;
		*tb = d < *tb ? d : *tb;
		if (r > 100000)
			break;
	}
}

static uint64_t add_chain(uint64_t n)
{
	uint64_t x = 0, i;

	for (i = 0; i < n; i++) {
#if defined(__x86_64__)
		__asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
				 "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
				 : "+r"(x));
#else
		__asm__ volatile("" : "+r"(x));
		x += 8;
#endif
	}
	return x;
}

static void chain_fn(void *arg)
{
	add_chain(*(uint64_t *)arg);
}

double ds_kbench_clock_ghz(void)
{
	/* short runs, many of them: the best escaped preemption */
	uint64_t n = 1 << 16;

	return 8.0 * (double)n / best_of(chain_fn, &n, 0.05) * 1e-9;
}

/* ---- per-thread-count setup -------------------------------------------------------- */

typedef struct bench {
	const ds_kbench_opts *o;
	ds_kbench_emit *emit;
	void *arg;
	ds_pool *pool;
	ds_ctx ctx;
	int threads;
	uint8_t *ws;             /* working set, o->ws_bytes */
	size_t ws_bytes;
	double probe_gbs, peak[3];
} bench;

static void row(bench *b, ds_kbench_row *r)
{
	r->threads = b->threads;
	b->emit(b->arg, r);
}

/* ---- read probe, barrier, peaks ------------------------------------------------------ */

struct probe_job {
	bench *b;
	const ds_kernels *k;
	uint64_t sink[DS_POOL_MAX];
	uint64_t iters, macs[DS_POOL_MAX];
	int kind;
};

static void probe_share(void *arg, int ith, int nth)
{
	struct probe_job *j = arg;
	size_t b0, e0, lines = j->b->ws_bytes / 256;

	ds_split(lines, ith, nth, &b0, &e0);
	j->sink[ith] = j->k->read_probe(j->b->ws + 256 * b0, 256 * (e0 - b0));
}

static void probe_fn(void *arg)
{
	struct probe_job *j = arg;

	ds_pool_run(j->b->pool, probe_share, j);
}

static void noop_job(void *arg, int ith, int nth)
{
	(void)arg;
	(void)ith;
	(void)nth;
}

static void barrier_fn(void *arg)
{
	bench *b = arg;
	int i;

	for (i = 0; i < 1000; i++)
		ds_pool_run(b->pool, noop_job, NULL);
}

static void peak_share(void *arg, int ith, int nth)
{
	struct probe_job *j = arg;

	(void)nth;
	j->macs[ith] = j->k->peak_probe(j->kind, j->iters);
}

static void peak_fn(void *arg)
{
	struct probe_job *j = arg;

	ds_pool_run(j->b->pool, peak_share, j);
}

static void base_rows(bench *b, int peaks)
{
	static const char *const kinds[3] = { "int8", "bf16", "fp32" };
	struct probe_job *j = calloc(1, sizeof *j);
	ds_kbench_row r;
	double clock = ds_kbench_clock_ghz();
	int i, kind;

	j->b = b;
	j->k = ds_kernels_get();
	memset(&r, 0, sizeof r);
	r.op = "membw";
	snprintf(r.type, sizeof r.type, "read");
	r.sec = best_of(probe_fn, j, b->o->min_sec);
	r.gbs = b->probe_gbs = (double)b->ws_bytes / r.sec * 1e-9;
	r.n = b->ws_bytes;
	row(b, &r);
	memset(&r, 0, sizeof r);
	r.op = "barrier";
	snprintf(r.type, sizeof r.type, "run");
	r.sec = best_of(barrier_fn, b, b->o->min_sec / 4) / 1000;
	r.us = r.sec * 1e6;
	row(b, &r);
	for (kind = 0; peaks && kind < 3; kind++) {
		uint64_t macs = 0;

		j->kind = kind;
		j->iters = 1 << 14;
		memset(&r, 0, sizeof r);
		r.op = "peak";
		snprintf(r.type, sizeof r.type, "%s", kinds[kind]);
		r.sec = best_of(peak_fn, j, b->o->min_sec / 4);
		for (i = 0; i < b->threads; i++)
			macs += j->macs[i];
		r.gops = b->peak[kind] = 2.0 * (double)macs / r.sec * 1e-9;
		/* operations per cycle per thread at the measured clock */
		r.ratio = r.gops / (clock * b->threads);
		r.ghz = clock;
		row(b, &r);
	}
	free(j);
}

/* ---- weights --------------------------------------------------------------------------- */

/* Fill `bytes` at p with copies of a random matrix [64, k] of type t (so
 * every row-set holds valid values), starting each [n, k] copy on a page. */
static int fill_weights(uint8_t *p, size_t bytes, ds_ttype t, uint64_t k,
			uint64_t seed)
{
	uint64_t shape[2] = { 64, k }, blk, off, i;
	float *f = malloc(64 * k * sizeof(float));
	uint8_t *src;
	int rc = 0;

	if (f == NULL || ds_tensor_bytes(t, 2, shape, &blk) != 0 || (src = malloc(blk)) == NULL) {
		free(f);
		return -1;
	}
	for (i = 0; i < 64 * k; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		f[i] = (float)((double)(seed >> 11) * 0x1p-53 - 0.5);
	}
	if (t.dt == DS_Q4)
		rc = ds_quantize_q4(src, f, 64, k, t.group);
	else if (t.dt == DS_Q8)
		rc = ds_quantize_q8(src, f, 64, k, t.group);
	else if (t.dt == DS_F32)
		memcpy(src, f, blk);
	else {
		uint16_t *h = (uint16_t *)src, *tmp = malloc(64 * k * 2);

		for (i = 0; tmp && i < 64 * k; i++)
			tmp[i] = t.dt == DS_F16 ? ds_f32_to_f16(f[i]) : ds_f32_to_bf16(f[i]);
		if (tmp && t.dt == DS_BF16)
			ds_pack_bf16(src, tmp, 64, k);
		else if (tmp)
			memcpy(h, tmp, 64 * k * 2);
		rc = tmp ? 0 : -1;
		free(tmp);
	}
	for (off = 0; rc == 0 && off < bytes; off += blk)
		memcpy(p + off, src, bytes - off < blk ? bytes - off : blk);
	free(f);
	free(src);
	return rc;
}

/* ---- matrix benchmarks ---------------------------------------------------------------- */

struct mm_bench {
	bench *b;
	ds_mat m[512];
	int ncopies;
	const float *x;
	float *y;
	size_t t;
};

static void matvec_fn(void *arg)
{
	struct mm_bench *j = arg;
	int i;

	for (i = 0; i < j->ncopies; i++)
		ds_matmul(&j->b->ctx, &j->m[i], j->x, 1, j->y);
}

static void matmul_fn(void *arg)
{
	struct mm_bench *j = arg;

	ds_matmul(&j->b->ctx, &j->m[0], j->x, j->t, j->y);
}

static int type_rows(bench *b, ds_ttype t, ds_err *err)
{
	static const uint64_t shapes[2][2] = { { 4096, 4096 }, { 4096, 11008 } };
	static const size_t ts[3] = { 8, 64, 512 };
	struct mm_bench *j = calloc(1, sizeof *j);
	float *x = malloc(512 * 11008 * sizeof(float)), *y = malloc(512 * 4096 * sizeof(float));
	int s, i, rc = 0, peak = t.dt == DS_Q4 || t.dt == DS_Q8 ? DS_PEAK_INT8
			     : t.dt == DS_BF16 ? DS_PEAK_BF16 : DS_PEAK_FP32;
	size_t ti;

	if (j == NULL || x == NULL || y == NULL) {
		rc = ds_errf(err, "benchmark: out of memory");
		goto out;
	}
	for (i = 0; i < 512 * 11008; i++)
		x[i] = (float)sin(0.37 * i);
	j->b = b;
	j->x = x;
	j->y = y;
	for (s = 0; s < (b->o->quick ? 1 : 2); s++) {
		uint64_t shape[2] = { shapes[s][0], shapes[s][1] }, bytes, stride;
		ds_kbench_row r;

		if (ds_tensor_bytes(t, 2, shape, &bytes) != 0)
			continue;
		stride = ds_round_up(bytes, 4096);
		j->ncopies = (int)(b->ws_bytes / stride);
		j->ncopies = j->ncopies > 512 ? 512 : j->ncopies < 1 ? 1 : j->ncopies;
		if (stride > b->ws_bytes) {
			rc = ds_errf(err, "benchmark: a %llu-byte matrix does not fit the %zu-byte working set",
				     (unsigned long long)bytes, b->ws_bytes);
			goto out;
		}
		if (fill_weights(b->ws, (size_t)stride * (size_t)j->ncopies, t, shape[1], 42) != 0) {
			rc = ds_errf(err, "benchmark: out of memory");
			goto out;
		}
		for (i = 0; i < j->ncopies; i++)
			if (ds_mat_init(&j->m[i], t, b->ws + (size_t)i * stride, bytes, 2, shape, NULL,
					err) != 0) {
				rc = -1;
				goto out;
			}
		memset(&r, 0, sizeof r);
		r.op = "matvec";
		ds_ttype_name(t, r.type);
		r.n = shape[0];
		r.k = shape[1];
		r.t = 1;
		{
			/* the probe over the same bytes, alternating with the matvec */
			struct probe_job *pj = calloc(1, sizeof *pj);
			double tp, tm;
			size_t ws = b->ws_bytes;

			if (pj == NULL) {
				rc = ds_errf(err, "benchmark: out of memory");
				goto out;
			}
			pj->b = b;
			pj->k = ds_kernels_get();
			b->ws_bytes = (size_t)stride * (size_t)j->ncopies / 256 * 256;
			best_of2(matvec_fn, j, probe_fn, pj, b->o->min_sec, &tm, &tp);
			r.sec = tm / j->ncopies;
			r.gbs = (double)bytes / r.sec * 1e-9;
			r.gops = 2.0 * (double)shape[0] * (double)shape[1] / r.sec * 1e-9;
			r.ratio = tp / tm * (double)bytes * j->ncopies / (double)b->ws_bytes;
			b->ws_bytes = ws;
			free(pj);
		}
		row(b, &r);
		for (ti = 0; s == 0 && ti < (b->o->quick ? 1 : 3); ti++) {
			memset(&r, 0, sizeof r);
			r.op = "matmul";
			ds_ttype_name(t, r.type);
			r.n = shape[0];
			r.k = shape[1];
			r.t = j->t = b->o->quick ? 8 : ts[ti];
			r.sec = best_of(matmul_fn, j, b->o->min_sec);
			r.gops = 2.0 * (double)(r.n * r.k * r.t) / r.sec * 1e-9;
			r.ratio = r.gops / b->peak[peak];
			row(b, &r);
		}
	}
out:
	free(j);
	free(x);
	free(y);
	return rc;
}

/* ---- drivers ----------------------------------------------------------------------- */

static int bench_open(bench *b, const ds_kbench_opts *o, int threads, ds_err *err)
{
	ds_pool_opts po = { threads, o->cpus, 0 };
	ds_ctx_cfg cfg;

	memset(&cfg, 0, sizeof cfg);
	cfg.max_rows = 512;
	cfg.max_k = 11008;
	cfg.max_group = 1;
	cfg.max_head = 64;
	b->threads = threads;
	if (ds_pool_init(&b->pool, &po, err) != 0)
		return -1;
	if (ds_ctx_init(&b->ctx, b->pool, &cfg, err) != 0) {
		ds_pool_free(b->pool);
		return -1;
	}
	return 0;
}

static void bench_close(bench *b)
{
	ds_ctx_free(&b->ctx);
	ds_pool_free(b->pool);
}

static int run(const ds_kbench_opts *o0, ds_kbench_emit *emit, void *arg,
	       int kernels, ds_err *err)
{
	static const ds_ttype types[] = {
		{ DS_Q4, 128 }, { DS_Q4, 32 }, { DS_Q8, 32 }, { DS_BF16, 0 },
		{ DS_F16, 0 }, { DS_F32, 0 },
	};
	ds_kbench_opts od = *o0, *o = &od;
	size_t ws = o->ws_bytes ? o->ws_bytes : (size_t)512 << 20;

	if (o->min_sec <= 0)
		o->min_sec = 0.25;
	uint8_t *buf;
	int i, rc = 0;
	size_t ti;

	if (ds_kernels_init(err) != 0)
		return -1;
	buf = ds_aligned_alloc(4096, ws, err);
	if (buf == NULL)
		return ds_err_prefix(err, "benchmark working set");
	memset(buf, 1, ws);
	for (i = 0; i < o->nthreads && rc == 0; i++) {
		bench b;

		memset(&b, 0, sizeof b);
		b.o = o;
		b.emit = emit;
		b.arg = arg;
		b.ws = buf;
		b.ws_bytes = ws;
		if (bench_open(&b, o, o->threads[i], err) != 0) {
			rc = -1;
			break;
		}
		base_rows(&b, kernels);
		for (ti = 0; kernels && rc == 0 && ti < sizeof types / sizeof types[0]; ti++)
			if (!o->quick || ti == 0 || types[ti].dt == DS_BF16)
				rc = type_rows(&b, types[ti], err);
		bench_close(&b);
	}
	free(buf);
	return rc;
}

int ds_kbench_membw(const ds_kbench_opts *o, ds_kbench_emit *emit, void *arg,
		    ds_err *err)
{
	return run(o, emit, arg, 0, err);
}

int ds_kbench_kernels(const ds_kbench_opts *o, ds_kbench_emit *emit,
		      void *arg, ds_err *err)
{
	return run(o, emit, arg, 1, err);
}

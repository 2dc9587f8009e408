/*
 * kbench.c - the kernel benchmark: read-bandwidth probe, pool barrier,
 * dot-product peaks and the matrix kernels, through the op layer.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kbench.h"
#include "kernels/kernels.h"
#include "ops/ops.h"
#include "pool/threads.h"

/* ---- timing ------------------------------------------------------------------- */

typedef void bench_fn(void *arg);

/* The clock the figures are taken with: the wall clock, or the calling
 * thread's CPU time (use_cpu).  The caller is thread 0 of every job and
 * spins while it waits for the others, so its CPU time is the job's
 * duration less the time other processes held its CPU.  (The process's
 * CPU time would also count the workers, but the kernel brings other
 * running threads' times up to date only at scheduler ticks.) */
static int use_cpu;

static double now(void)
{
	struct timespec ts;

	if (!use_cpu)
		return ds_now_s();
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Calls of fn back to back over at least min_sec (wall clock) and 3
 * calls: the mean time of a call, and in *best the shortest.  The mean
 * is what a stream sustains; single passes of a few milliseconds vary
 * widely on a shared machine, and the shortest is the luckiest. */
static double mean_of(bench_fn *fn, void *arg, double min_sec, double *best)
{
	double t0 = ds_now_s(), sum = 0;
	int r;

	*best = INFINITY;
	for (r = 0; r < 3 || (ds_now_s() - t0 < min_sec && r <= 100000); r++) {
		double a = now(), d;

		fn(arg);
		d = now() - a;
		sum += d;
		*best = d < *best ? d : *best;
	}
	return sum / r;
}

/* mean_of after one call untimed: the first pass over memory another
 * job used last can take several times as long as the next (a first
 * read of a fresh buffer runs at about half the rate). */
static double sustained_of(bench_fn *fn, void *arg, double min_sec, double *best)
{
	fn(arg);
	return mean_of(fn, arg, min_sec, best);
}

/* Best time of one call of fn over at least min_sec and 3 calls. */
static double best_of(bench_fn *fn, void *arg, double min_sec)
{
	double best;

	(void)mean_of(fn, arg, min_sec, &best);
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
		double s = now(), d;

		fa(a);
		d = now() - s;
		*ta = d < *ta ? d : *ta;
		s = now();
		fb(b);
		d = now() - s;
		*tb = d < *tb ? d : *tb;
		if (r > 100000)
			break;
	}
}

/* Eight dependent adds of a register a step: one cycle each on every x86
 * core.  (Adds of an immediate are not: recent Intel cores fold chains of
 * them at rename, several a cycle, and the clock reads several times too
 * high: docs/perf.md, 2026-12-06 03:06.) */
static uint64_t add_chain(uint64_t n)
{
	uint64_t x = 0, one = 1, i;

	for (i = 0; i < n; i++) {
#if defined(__x86_64__)
		__asm__ volatile("add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
				 "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0"
				 : "+r"(x) : "r"(one));
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
	double peak[3];
} bench;

static void row(bench *b, ds_kbench_row *r)
{
	r->threads = b->threads;
	b->emit(b->arg, r);
}

/* ---- read probe, barrier, peaks ------------------------------------------------------ */

/* The read probe over bytes at p, one pass a call of region_fn: the
 * threads claim READ_CHUNK-byte pieces in turn, as decode claims
 * row-sets, so that a thread held up by another process leaves its part
 * to the others, as in decode. */
#define READ_CHUNK ((size_t)1 << 20)

struct region_job {
	ds_pool *pool;
	const ds_kernels *k;
	const uint8_t *p;
	size_t bytes;               /* whole 256-byte lines */
	_Atomic size_t next, done;  /* the next piece to claim; bytes read */
	uint64_t sink[DS_POOL_MAX];
};

/* The probe over the whole 256-byte lines of bytes at p (NULL: out of
 * memory). */
static struct region_job *region_new(ds_pool *pool, const void *p, size_t bytes)
{
	struct region_job *j = calloc(1, sizeof *j);

	if (j != NULL) {
		j->pool = pool;
		j->k = ds_kernels_get();
		j->p = p;
		j->bytes = bytes / 256 * 256;
	}
	return j;
}

static void region_share(void *arg, int ith, int nth)
{
	struct region_job *j = arg;
	uint64_t sink = 0;
	size_t c, n;

	(void)nth;
	while ((c = atomic_fetch_add_explicit(&j->next, READ_CHUNK, memory_order_relaxed)) <
	       j->bytes) {
		n = j->bytes - c < READ_CHUNK ? j->bytes - c : READ_CHUNK;
		sink ^= j->k->read_probe(j->p + c, n);
		atomic_fetch_add_explicit(&j->done, n, memory_order_relaxed);
	}
	j->sink[ith] = sink;
}

/* One pass, which must read every byte once. */
static void region_fn(void *arg)
{
	struct region_job *j = arg;

	atomic_store(&j->next, 0);
	atomic_store(&j->done, 0);
	ds_pool_run(j->pool, region_share, j);
	DS_ASSERT(atomic_load(&j->done) == j->bytes);
}

/* The dot-product peaks' job. */
struct probe_job {
	bench *b;
	const ds_kernels *k;
	uint64_t iters, macs[DS_POOL_MAX];
	int kind;
};

static void noop_job(void *arg, int ith, int nth)
{
	(void)arg;
	(void)ith;
	(void)nth;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

#define ROUND_TRIPS 4001

/* The median of many single round trips (a mean would be dominated by the
 * few that another process on a shared machine preempts). */
static double median_us(double *t, int n)
{
	qsort(t, (size_t)n, sizeof *t, cmp_double);
	return t[n / 2] * 1e6;
}

static double run_round_trip(bench *b)
{
	static double t[ROUND_TRIPS];
	int i;

	for (i = 0; i < ROUND_TRIPS; i++) {
		double a = ds_now_s();

		ds_pool_run(b->pool, noop_job, NULL);
		t[i] = ds_now_s() - a;
	}
	return median_us(t, ROUND_TRIPS);
}

struct sync_job {
	ds_pool *pool;
	double t[ROUND_TRIPS];
};

/* Thread 0 times each barrier; all threads pass ROUND_TRIPS of them. */
static void sync_job(void *arg, int ith, int nth)
{
	struct sync_job *j = arg;
	int i;

	(void)nth;
	for (i = 0; i < ROUND_TRIPS; i++) {
		double a = ith == 0 ? ds_now_s() : 0;

		ds_pool_barrier(j->pool);
		if (ith == 0)
			j->t[i] = ds_now_s() - a;
	}
}

static double sync_round_trip(bench *b)
{
	struct sync_job *j = malloc(sizeof *j);
	double us;

	if (j == NULL)
		return 0;
	j->pool = b->pool;
	ds_pool_run(b->pool, sync_job, j);
	us = median_us(j->t, ROUND_TRIPS);
	free(j);
	return us;
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

/* One dot-product peak in GOP/s on j->b's pool, the best over min_sec;
 * *sec: that best pass's time. */
static double peak_gops(struct probe_job *j, int kind, double min_sec,
			double *sec)
{
	uint64_t macs = 0;

	j->kind = kind;
	j->iters = 1 << 14;
	*sec = best_of(peak_fn, j, min_sec);
	for (int i = 0; i < j->b->threads; i++)
		macs += j->macs[i];
	return 2.0 * (double)macs / *sec * 1e-9;
}

int ds_kbench_read(ds_pool *pool, const void *p, size_t bytes, double min_sec,
		   double *read_gbs, double *best_gbs)
{
	struct region_job *j = region_new(pool, p, bytes);
	double mean, best;

	*read_gbs = best = 0;
	if (j == NULL)
		return -1;
	if (j->bytes > 0) {
		mean = sustained_of(region_fn, j, min_sec > 0 ? min_sec : 0.25, &best);
		*read_gbs = (double)j->bytes / mean * 1e-9;
		best = (double)j->bytes / best * 1e-9;
	}
	if (best_gbs)
		*best_gbs = best;
	free(j);
	return 0;
}

/* The read probe's rows over the working set: sustained, and fastest. */
static int membw_rows(bench *b, ds_err *err)
{
	ds_kbench_row r;
	double gbs, best;

	if (ds_kbench_read(b->pool, b->ws, b->ws_bytes, b->o->min_sec, &gbs, &best) != 0)
		return ds_errf(err, "read probe: out of memory");
	memset(&r, 0, sizeof r);
	r.op = "membw";
	r.n = b->ws_bytes;
	snprintf(r.type, sizeof r.type, "read");
	r.gbs = gbs;
	r.sec = (double)b->ws_bytes / gbs * 1e-9;
	row(b, &r);
	snprintf(r.type, sizeof r.type, "best");
	r.gbs = best;
	r.sec = (double)b->ws_bytes / best * 1e-9;
	row(b, &r);
	return 0;
}

static int base_rows(bench *b, int peaks, ds_err *err)
{
	static const char *const kinds[3] = { "int8", "bf16", "fp32" };
	struct probe_job *j = calloc(1, sizeof *j);
	ds_kbench_row r;
	double clock = ds_kbench_clock_ghz();
	int kind;

	if (j == NULL)
		return ds_errf(err, "benchmark: out of memory");
	if (membw_rows(b, err) != 0) {
		free(j);
		return -1;
	}
	j->b = b;
	j->k = ds_kernels_get();
	memset(&r, 0, sizeof r);
	r.op = "barrier";
	snprintf(r.type, sizeof r.type, "run");
	r.us = run_round_trip(b);
	r.sec = r.us * 1e-6;
	row(b, &r);
	/* the barrier inside a job, between the phases of one op */
	memset(&r, 0, sizeof r);
	r.op = "barrier";
	snprintf(r.type, sizeof r.type, "sync");
	r.us = sync_round_trip(b);
	r.sec = r.us * 1e-6;
	row(b, &r);
	for (kind = 0; peaks && kind < 3; kind++) {
		memset(&r, 0, sizeof r);
		r.op = "peak";
		snprintf(r.type, sizeof r.type, "%s", kinds[kind]);
		r.gops = b->peak[kind] = peak_gops(j, kind, b->o->min_sec / 4,
						   &r.sec);
		/* operations per cycle per thread at the measured clock */
		r.ratio = r.gops / (clock * b->threads);
		r.ghz = clock;
		row(b, &r);
	}
	free(j);
	return 0;
}

int ds_kbench_probe(ds_pool *pool, size_t ws_bytes, double min_sec,
		    double *read_gbs, double peak_gops_out[3], ds_err *err)
{
	struct probe_job *j = calloc(1, sizeof *j);
	bench b;
	double sec;

	memset(&b, 0, sizeof b);
	b.pool = pool;
	b.threads = ds_pool_threads(pool);
	b.ws_bytes = read_gbs ? ds_round_up(ws_bytes ? ws_bytes : (size_t)512 << 20, 4096) : 0;
	min_sec = min_sec > 0 ? min_sec : 0.25;
	b.ws = j && read_gbs ? ds_aligned_alloc(4096, b.ws_bytes, err) : NULL;
	if (j == NULL || (read_gbs && b.ws == NULL)) {
		free(j);
		return ds_errf(err, "read probe: out of memory");
	}
	j->b = &b;
	j->k = ds_kernels_get();
	if (read_gbs) {
		memset(b.ws, 1, b.ws_bytes);
		if (ds_kbench_read(pool, b.ws, b.ws_bytes, min_sec, read_gbs, NULL) != 0) {
			free(b.ws);
			free(j);
			return ds_errf(err, "read probe: out of memory");
		}
	}
	for (int kind = 0; kind < 3; kind++)
		peak_gops_out[kind] = peak_gops(j, kind, min_sec / 4, &sec);
	free(b.ws);
	free(j);
	return 0;
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

/* Lay copies of a [n, k] matrix of type t over the working set (all of
 * it for a matvec, one for a matmul). */
static int load_copies(bench *b, struct mm_bench *j, ds_ttype t, uint64_t n,
		       uint64_t k, int fill, ds_err *err)
{
	uint64_t shape[2] = { n, k }, bytes, stride;
	int i;

	if (ds_tensor_bytes(t, 2, shape, &bytes) != 0)
		return ds_errf(err, "benchmark: bad shape %llux%llu", (unsigned long long)n,
			       (unsigned long long)k);
	stride = ds_round_up(bytes, 4096);
	if (stride > b->ws_bytes)
		return ds_errf(err, "benchmark: a %llu-byte matrix does not fit the %zu-byte working set",
			       (unsigned long long)bytes, b->ws_bytes);
	j->ncopies = fill ? (int)(b->ws_bytes / stride) : 1;
	j->ncopies = j->ncopies > 512 ? 512 : j->ncopies;
	if (fill_weights(b->ws, (size_t)stride * (size_t)j->ncopies, t, k, 42) != 0)
		return ds_errf(err, "benchmark: out of memory");
	for (i = 0; i < j->ncopies; i++)
		if (ds_mat_init(&j->m[i], t, b->ws + (size_t)i * stride, bytes, 2, shape, NULL,
				err) != 0)
			return -1;
	return 0;
}

/* One matvec row: the weights streamed from memory, alternating with
 * the read probe over the same bytes. */
static int matvec_row(bench *b, struct mm_bench *j, ds_ttype t, uint64_t n,
		      uint64_t k, ds_err *err)
{
	struct region_job *rj;
	double tp, tm, bytes;
	ds_kbench_row r;

	if (load_copies(b, j, t, n, k, 1, err) != 0)
		return -1;
	rj = region_new(b->pool, b->ws, (size_t)(j->m[j->ncopies - 1].data + j->m[0].e_bytes - b->ws));
	if (rj == NULL)
		return ds_errf(err, "benchmark: out of memory");
	bytes = (double)j->m[0].e_bytes;
	best_of2(matvec_fn, j, region_fn, rj, b->o->min_sec, &tm, &tp);
	memset(&r, 0, sizeof r);
	r.op = "matvec";
	ds_ttype_name(t, r.type);
	r.n = n;
	r.k = k;
	r.t = 1;
	r.sec = tm / j->ncopies;
	r.gbs = bytes / r.sec * 1e-9;
	r.gops = 2.0 * (double)n * (double)k / r.sec * 1e-9;
	r.ratio = r.gbs / ((double)rj->bytes / tp * 1e-9);
	free(rj);
	row(b, &r);
	return 0;
}

static int matmul_rows(bench *b, struct mm_bench *j, ds_ttype t, uint64_t n,
		       uint64_t k, ds_err *err)
{
	static const size_t ts[3] = { 8, 64, 512 };
	int peak = t.dt == DS_Q4 || t.dt == DS_Q8 ? DS_PEAK_INT8
		 : t.dt == DS_BF16 ? DS_PEAK_BF16 : DS_PEAK_FP32;
	size_t ti;

	if (load_copies(b, j, t, n, k, 0, err) != 0)
		return -1;
	for (ti = 0; ti < (b->o->quick ? 1 : 3); ti++) {
		ds_kbench_row r;

		memset(&r, 0, sizeof r);
		r.op = "matmul";
		ds_ttype_name(t, r.type);
		r.n = n;
		r.k = k;
		r.t = j->t = ts[ti];
		r.sec = best_of(matmul_fn, j, b->o->min_sec);
		r.gops = 2.0 * (double)(r.n * r.k * r.t) / r.sec * 1e-9;
		r.ratio = r.gops / b->peak[peak];
		row(b, &r);
	}
	return 0;
}

static int type_rows(bench *b, ds_ttype t, ds_err *err)
{
	uint64_t mn = b->o->mm_n ? b->o->mm_n : 4096, mk = b->o->mm_k ? b->o->mm_k : 4096;
	size_t xk = mk > 11008 ? mk : 11008, yn = mn > 4096 ? mn : 4096, i;
	struct mm_bench *j = calloc(1, sizeof *j);
	float *x = malloc(512 * xk * sizeof(float)), *y = malloc(512 * yn * sizeof(float));
	int rc = -1;

	if (j == NULL || x == NULL || y == NULL) {
		ds_errf(err, "benchmark: out of memory");
		goto out;
	}
	for (i = 0; i < 512 * xk; i++)
		x[i] = (float)sin(0.37 * (double)i);
	j->b = b;
	j->x = x;
	j->y = y;
	if (matvec_row(b, j, t, mn, mk, err) != 0 ||
	    matmul_rows(b, j, t, mn, mk, err) != 0 ||
	    (!b->o->quick && matvec_row(b, j, t, 4096, 11008, err) != 0))
		goto out;
	rc = 0;
out:
	free(j);
	free(x);
	free(y);
	return rc;
}

/* ---- drivers ----------------------------------------------------------------------- */

static int bench_open(bench *b, const ds_kbench_opts *o, int threads, ds_err *err)
{
	ds_pool_opts po = { .threads = threads, .cpus = o->cpus };
	ds_ctx_cfg cfg;

	memset(&cfg, 0, sizeof cfg);
	cfg.max_rows = 512;
	cfg.max_k = o->mm_k > 11008 ? ds_round_up(o->mm_k, 128) : 11008;
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

/* The weight types to run: o->types parsed, or the default list. */
static int pick_types(const ds_kbench_opts *o, ds_ttype *out, int max, ds_err *err)
{
	static const ds_ttype def[] = {
		{ DS_Q4, 128 }, { DS_Q4, 32 }, { DS_Q8, 32 }, { DS_BF16, 0 },
		{ DS_F16, 0 }, { DS_F32, 0 },
	};
	static const ds_ttype quick[] = { { DS_Q4, 128 }, { DS_BF16, 0 } };
	const char *p = o->types;
	int n = 0;

	if (p == NULL) {
		memcpy(out, o->quick ? quick : def, o->quick ? sizeof quick : sizeof def);
		return o->quick ? 2 : 6;
	}
	while (*p && n < max) {
		char name[16];
		size_t len = strcspn(p, ",");

		if (len == 0 || len >= sizeof name)
			return ds_errf(err, "weight type list '%s': empty or overlong entry", o->types);
		memcpy(name, p, len);
		name[len] = '\0';
		if (ds_ttype_parse(name, &out[n]) != 0 || out[n].dt == DS_I32)
			return ds_errf(err, "weight type '%s': not a matrix type (q4gG, q8gG, bf16, f16, f32)",
				       name);
		n++;
		p += len + (p[len] == ',');
	}
	return n;
}

static int run(const ds_kbench_opts *o0, ds_kbench_emit *emit, void *arg,
	       int kernels, ds_err *err)
{
	ds_ttype types[16];
	int ntypes;
	ds_kbench_opts od = *o0, *o = &od;
	size_t ws = o->ws_bytes ? o->ws_bytes : (size_t)(o->quick ? 64 : 512) << 20;

	if (o->min_sec <= 0)
		o->min_sec = o->quick ? 0.03 : 0.25;
	/* one copy of the widest matrix benchmarked must fit */
	if (kernels && o->mm_n && o->mm_k &&
	    ws < (o->quick ? 2 : 4) * o->mm_n * o->mm_k + ((size_t)1 << 20))
		ws = (o->quick ? 2 : 4) * o->mm_n * o->mm_k + ((size_t)1 << 20);
	ws = ds_round_up(ws, 4096);
	uint8_t *buf;
	int i, rc = 0;
	size_t ti;

	if (ds_kernels_init(err) != 0)
		return -1;
	ntypes = pick_types(o, types, 16, err);
	if (ntypes < 0)
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
		use_cpu = o->cpu_time;
		rc = base_rows(&b, kernels, err);
		for (ti = 0; kernels && rc == 0 && ti < (size_t)ntypes; ti++)
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

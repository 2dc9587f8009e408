/*
 * threads.c - the thread pool: a job generation counter that workers
 * spin on, then sleep on (futex), and a done counter the caller waits on
 * the same way.  Every shared word has its own cache line.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <numa.h>
#include <numaif.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "threads.h"

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ volatile("yield")
#else
#define cpu_relax() ((void)0)
#endif

#define LINE 64

/* A futex word with a count of the threads asleep on it; the job
 * generation's word also carries the job, so that a worker that sees a
 * new generation has the function and its argument in the same cache
 * line: one cache-line transfer a job, where a line of their own, or the
 * pool's first line (beside fields the workers read), made the caller's
 * round trip longer (docs/perf.md, 2026-12-05 08:53). */
typedef struct wordq {
	_Alignas(LINE) _Atomic uint32_t v;
	_Atomic uint32_t sleepers;
	ds_job_fn *fn;          /* the job generation's only */
	void *arg;
} wordq;

struct ds_pool {
	int n;
	uint64_t spin_ns;
	pthread_t *tid;
	struct worker *w;
	int *cpu;               /* [n] or NULL */
	int *node;              /* [n] */
	int nodes;
	wordq gen;              /* job generation, with the job */
	wordq done;             /* workers finished with the current job */
	wordq bar_gen;          /* in-job barrier generation */
	_Alignas(LINE) _Atomic uint32_t bar_count;
	_Atomic int stop;
};

struct worker {
	ds_pool *pool;
	int ith;
};

static void futex_wait(_Atomic uint32_t *w, uint32_t val)
{
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *w)
{
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Wait until q->v != old: spin for a few microseconds, then spin while
 * yielding the CPU (when there are more runnable threads than CPUs, the
 * thread we wait for may need ours) until spin_ns, then sleep.  The
 * sleeper count and the value are both seq_cst, so a waker that stores
 * the new value and then sees no sleepers cannot miss a thread about to
 * sleep. */
#define PURE_SPIN_NS 5000

static uint32_t wait_change(wordq *q, uint32_t old, uint64_t spin_ns)
{
	uint64_t t0 = 0, now;
	uint32_t v;
	unsigned i;

	for (i = 0;; i++) {
		v = atomic_load_explicit(&q->v, memory_order_acquire);
		if (v != old)
			return v;
		cpu_relax();
		if ((i & 63) != 63)
			continue;
		now = ds_now_ns();
		if (t0 == 0)
			t0 = now;
		else if (now - t0 > spin_ns)
			break;
		else if (now - t0 > PURE_SPIN_NS)
			sched_yield();
	}
	atomic_fetch_add(&q->sleepers, 1);
	while ((v = atomic_load(&q->v)) == old)
		futex_wait(&q->v, old);
	atomic_fetch_sub(&q->sleepers, 1);
	return v;
}

static void wake(wordq *q)
{
	if (atomic_load(&q->sleepers) > 0)
		futex_wake(&q->v);
}

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	ds_pool *p = w->pool;
	uint32_t seen = 0;

	if (p->cpu)
		pin(p->cpu[w->ith]);
	for (;;) {
		seen = wait_change(&p->gen, seen, p->spin_ns);
		if (atomic_load_explicit(&p->stop, memory_order_acquire))
			break;
		p->gen.fn(p->gen.arg, w->ith, p->n);
		atomic_fetch_add(&p->done.v, 1);
		wake(&p->done);
	}
	return NULL;
}

void ds_pool_run(ds_pool *p, ds_job_fn *fn, void *arg)
{
	uint32_t want = (uint32_t)p->n - 1, d;

	if (p->n == 1) {
		fn(arg, 0, 1);
		return;
	}
	p->gen.fn = fn;
	p->gen.arg = arg;
	atomic_store_explicit(&p->done.v, 0, memory_order_relaxed);
	atomic_fetch_add(&p->gen.v, 1);    /* seq_cst: publishes fn, arg */
	wake(&p->gen);
	fn(arg, 0, p->n);
	d = atomic_load_explicit(&p->done.v, memory_order_acquire);
	while (d != want)
		d = wait_change(&p->done, d, p->spin_ns);
}

void ds_pool_barrier(ds_pool *p)
{
	uint32_t g;

	if (p->n == 1)
		return;
	g = atomic_load(&p->bar_gen.v);
	if (atomic_fetch_add(&p->bar_count, 1) == (uint32_t)p->n - 1) {
		atomic_store(&p->bar_count, 0);
		atomic_fetch_add(&p->bar_gen.v, 1);
		wake(&p->bar_gen);
		return;
	}
	wait_change(&p->bar_gen, g, p->spin_ns);
}

void ds_split(size_t n, int ith, int nth, size_t *b, size_t *e)
{
	*b = n * (size_t)ith / (size_t)nth;
	*e = n * (size_t)(ith + 1) / (size_t)nth;
}

int ds_cpulist_parse(const char *s, int *cpus, int max, int *n, ds_err *err)
{
	const char *p = s;

	*n = 0;
	while (*p) {
		char *end;
		long a = strtol(p, &end, 10), b = a, c;

		if (end == p || a < 0 || a >= CPU_SETSIZE)
			return ds_errf(err, "CPU list '%s': bad CPU number at '%s'", s, p);
		p = end;
		if (*p == '-') {
			b = strtol(p + 1, &end, 10);
			if (end == p + 1 || b < a || b >= CPU_SETSIZE)
				return ds_errf(err, "CPU list '%s': bad range at '%s'", s, p);
			p = end;
		}
		for (c = a; c <= b; c++) {
			if (*n >= max)
				return ds_errf(err, "CPU list '%s': more than %d CPUs", s, max);
			cpus[(*n)++] = (int)c;
		}
		if (*p == ',')
			p++;
		else if (*p != '\0')
			return ds_errf(err, "CPU list '%s': unexpected '%c'", s, *p);
	}
	if (*n == 0)
		return ds_errf(err, "CPU list '%s': empty", s);
	return 0;
}

static int count_cpus(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof set, &set) != 0)
		return 1;
	return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
}

static int setup_cpus(ds_pool *p, const ds_pool_opts *o, ds_err *err)
{
	int list[DS_POOL_MAX], nl = 0, i;

	if (o->cpus == NULL)
		return 0;
	if (ds_cpulist_parse(o->cpus, list, DS_POOL_MAX, &nl, err) != 0)
		return -1;
	p->cpu = calloc((size_t)p->n, sizeof *p->cpu);
	if (p->cpu == NULL)
		return ds_errf(err, "thread pool: out of memory");
	for (i = 0; i < p->n; i++)
		p->cpu[i] = list[i % nl];
	return 0;
}

static void setup_numa(ds_pool *p)
{
	int i;

	p->nodes = 1;
	if (numa_available() >= 0 && numa_num_configured_nodes() > 1)
		p->nodes = numa_num_configured_nodes();
	for (i = 0; i < p->n; i++)
		p->node[i] = p->nodes > 1 && p->cpu ? numa_node_of_cpu(p->cpu[i]) : -1;
}

int ds_pool_init(ds_pool **pool, const ds_pool_opts *o, ds_err *err)
{
	ds_pool_opts def = { 0 };
	ds_pool *p;
	int i, rc;

	*pool = NULL;
	if (o == NULL)
		o = &def;
	p = ds_aligned_alloc(LINE, sizeof *p, err);
	if (p == NULL)
		return ds_err_prefix(err, "thread pool");
	p->n = o->threads > 0 ? o->threads : count_cpus();
	if (p->n > DS_POOL_MAX) {
		free(p);
		return ds_errf(err, "thread pool: %d threads (at most %d)", o->threads, DS_POOL_MAX);
	}
	p->spin_ns = (uint64_t)(o->spin_us ? o->spin_us : 200) * 1000;
	p->tid = calloc((size_t)p->n, sizeof *p->tid);
	p->w = calloc((size_t)p->n, sizeof *p->w);
	p->node = calloc((size_t)p->n, sizeof *p->node);
	if (p->tid == NULL || p->w == NULL || p->node == NULL) {
		ds_pool_free(p);
		return ds_errf(err, "thread pool: out of memory");
	}
	if (setup_cpus(p, o, err) != 0) {
		ds_pool_free(p);
		return -1;
	}
	setup_numa(p);
	if (p->cpu)
		pin(p->cpu[0]);
	for (i = 1; i < p->n; i++) {
		p->w[i].pool = p;
		p->w[i].ith = i;
		rc = pthread_create(&p->tid[i], NULL, worker_main, &p->w[i]);
		if (rc != 0) {
			ds_pool_free(p);
			return ds_errf(err, "thread pool: creating thread %d: %s", i, strerror(rc));
		}
	}
	*pool = p;
	return 0;
}

void ds_pool_free(ds_pool *p)
{
	int i;

	if (p == NULL)
		return;
	atomic_store(&p->stop, 1);
	atomic_fetch_add(&p->gen.v, 1);
	futex_wake(&p->gen.v);
	for (i = 1; i < p->n; i++)
		if (p->tid && p->tid[i])
			pthread_join(p->tid[i], NULL);
	free(p->tid);
	free(p->w);
	free(p->cpu);
	free(p->node);
	free(p);
}

int ds_pool_threads(const ds_pool *p)
{
	return p->n;
}

int ds_pool_numa_nodes(const ds_pool *p)
{
	return p->nodes;
}

int ds_pool_node(const ds_pool *p, int ith)
{
	return ith >= 0 && ith < p->n ? p->node[ith] : -1;
}

/* ---- placement ------------------------------------------------------------ */

struct place_job {
	ds_pool *pool;
	const uint8_t *data;
	size_t bytes, units;
};

static void place_share(void *arg, int ith, int nth)
{
	struct place_job *j = arg;
	size_t page = (size_t)sysconf(_SC_PAGESIZE), b, e, lo, hi, i;
	volatile uint8_t sink = 0;
	int node = ds_pool_node(j->pool, ith);

	ds_split(j->units, ith, nth, &b, &e);
	lo = j->bytes / j->units * b;
	hi = e == j->units ? j->bytes : j->bytes / j->units * e;
	/* whole pages only: a page shared with the next share stays put */
	lo = (lo + page - 1) / page * page;
	hi = hi / page * page;
	if (hi <= lo)
		return;
	if (node >= 0 && j->pool->nodes > 1)
		numa_tonode_memory((void *)(j->data + lo), hi - lo, node);
	for (i = lo; i < hi; i += page)
		sink ^= j->data[i];
	(void)sink;
}

int ds_pool_place(ds_pool *pool, const void *data, size_t bytes,
		  size_t units, enum ds_place how, ds_err *err)
{
	struct place_job j = { pool, data, bytes, units ? units : 1 };

	(void)err;
	if (pool->nodes <= 1 || bytes == 0)
		return 0;
	if (how == DS_PLACE_INTERLEAVE)
		numa_interleave_memory((void *)data, bytes, numa_all_nodes_ptr);
	else
		ds_pool_run(pool, place_share, &j);
	return 0;
}

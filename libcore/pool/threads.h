/*
 * threads.h - a persistent thread pool, CPU affinity and NUMA placement.
 *
 * The threads are created once and wait between jobs by spinning for a
 * while (so back-to-back operations of a forward pass cost a cache-line
 * round trip, well under 2 us) and then sleeping on a futex (so an idle
 * pool costs nothing).  The calling thread is thread 0 of every job: a
 * pool of N threads runs N-1 workers.
 *
 *	ds_pool *p;
 *	ds_pool_opts o = { .threads = 8, .cpus = "0-7" };
 *	if (ds_pool_init(&p, &o, &err) != 0) ...
 *	ds_pool_run(p, job, &args);        // job(&args, ith, nth) on all
 *	ds_pool_free(p);
 *
 * One thread at a time may call ds_pool_run on a pool; jobs do not nest.
 * Inside a job, ds_pool_barrier() waits for all nth threads (for jobs with
 * phases: quantize, barrier, multiply).  Work is split with ds_split, the
 * same way every time for the same (n, nth), so a thread keeps touching
 * the same rows of a weight from one call to the next (its pages stay in
 * that thread's caches and, with ds_pool_place, on its NUMA node).
 */
#ifndef DS_THREADS_H
#define DS_THREADS_H

#include <stddef.h>

#include "base/util.h"

#define DS_POOL_MAX 1024

typedef struct ds_pool ds_pool;

/* One job: called once on each thread, ith in 0 .. nth-1 (0 = caller). */
typedef void ds_job_fn(void *arg, int ith, int nth);

typedef struct ds_pool_opts {
	int threads;       /* threads including the caller; <= 0: one per CPU
			      of the process's affinity mask */
	const char *cpus;  /* CPU list "0-3,8,10-11": thread i is pinned to
			      its i-th CPU (the caller too, to the first);
			      NULL: no pinning */
	unsigned spin_us;  /* spin this long before sleeping; 0: 200 us */
} ds_pool_opts;

int ds_pool_init(ds_pool **pool, const ds_pool_opts *opts, ds_err *err);
void ds_pool_free(ds_pool *pool);
int ds_pool_threads(const ds_pool *pool);

/* Run fn(arg, ith, nth) on every thread; returns when all have returned.
 * Memory written by any thread in fn is visible to the caller after. */
void ds_pool_run(ds_pool *pool, ds_job_fn *fn, void *arg);

/* Inside a job: wait until all nth threads have reached it.  Memory
 * written before it by any thread is visible to all after it. */
void ds_pool_barrier(ds_pool *pool);

/* The share [*b, *e) of n items that thread ith of nth works on:
 * contiguous, in thread order, sizes differing by at most one. */
void ds_split(size_t n, int ith, int nth, size_t *b, size_t *e);

/* Parse a CPU list ("0-3,8"): up to max CPUs into cpus, count in *n. */
int ds_cpulist_parse(const char *s, int *cpus, int max, int *n,
		     ds_err *err);

/* ---- NUMA (libnuma; everything is a no-op on a single-node machine) ---- */

/* Memory nodes of the machine (1 without NUMA). */
int ds_pool_numa_nodes(const ds_pool *pool);
/* The node of thread ith's CPU, -1 when not pinned or without NUMA. */
int ds_pool_node(const ds_pool *pool, int ith);

enum ds_place {
	DS_PLACE_INTERLEAVE,  /* pages round-robin over all nodes */
	DS_PLACE_SPLIT,       /* [data, data + bytes) cut into `units` equal
				 units split with ds_split: each thread's
				 share on its own node (for a weight matrix,
				 units = row-sets), then touched by it */
};

/* Set the placement policy of a (page-aligned) range and fault it in.
 * Policies act when pages are first faulted in: call it before anything
 * reads the range (for a mapped model file, before its first use). */
int ds_pool_place(ds_pool *pool, const void *data, size_t bytes,
		  size_t units, enum ds_place how, ds_err *err);

#endif

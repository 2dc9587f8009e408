/*
 * kbench.h - kernel and memory benchmarks behind `ds-bench --kernels`
 * and `ds-bench --membw`.
 *
 * Every figure is the best of several timed repetitions (as STREAM
 * reports) but the read probe's sustained rate (membw "read", a mean
 * over passes back to back), by the wall clock or (cpu_time) by the
 * caller's CPU time, and every ratio compares two figures measured in
 * the same process, one after the other: matrix-vector rates against a
 * read probe over the same amount of memory, matrix-matrix rates
 * against the ISA's peak measured by a dot-product probe.
 *
 *   read probe   the threads sum a buffer larger than the last-level
 *                cache with the widest vector loads, claiming 1 MiB
 *                pieces of it in turn; membw
 *                "read" is the sustained rate (passes back to back, bytes
 *                over their time), "best" the fastest single pass
 *   matvec       one activation row against weights streamed from memory:
 *                enough copies of the matrix to fill the same buffer size
 *                are used in turn, so no copy is in cache when it is read
 *   matmul       T activation rows (including their quantization) in
 *                GOP/s = 2 n k T / time
 *   peak         clock (a chain of dependent adds, one per cycle) times
 *                the dot-product instructions retired per cycle by
 *                independent accumulators (vpdpbusd: 64 int8 multiply-adds
 *                per instruction), times the threads
 *   barrier      "run": an empty ds_pool_run, the caller's round trip
 *                through all threads; "sync": one ds_pool_barrier inside
 *                a job (between the phases of an op); the median of 4001
 *                single round trips
 */
#ifndef DS_KBENCH_H
#define DS_KBENCH_H

#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

typedef struct ds_kbench_row {
	const char *op;       /* "membw" "barrier" "peak" "matvec" "matmul" */
	char type[16];        /* weight type ("q4g128"), peak kind ("int8") */
	uint64_t n, k, t;     /* shape: W [n, k], t activation rows */
	int threads;
	double sec;           /* best time of one operation */
	double gbs;           /* bytes read per second / 1e9 */
	double gops;          /* operations per second / 1e9 (2 per multiply-add) */
	double ratio;         /* matvec: gbs / read probe (same threads);
				 matmul: gops / peak of its kind (int8 for
				 q4/q8, bf16, fp32 for f16/f32);
				 peak: operations per cycle per thread */
	double us;            /* barrier: round trip in microseconds */
	double ghz;           /* peak: the measured clock */
} ds_kbench_row;

typedef void ds_kbench_emit(void *arg, const ds_kbench_row *r);

typedef struct ds_kbench_opts {
	const int *threads;   /* thread counts to run, e.g. { 1, 2 } */
	int nthreads;
	size_t ws_bytes;      /* streamed working set (0: 512 MiB) */
	double min_sec;       /* time per measurement (0: 0.25 s) */
	int quick;            /* q4g128 and bf16 only, T = 8, 64 MiB, short runs */
	uint64_t mm_n, mm_k;  /* matmul shape (0: 4096 x 4096) */
	const char *cpus;     /* CPU list to pin to, or NULL */
	const char *types;    /* comma-separated weight types ("q4g32,bf16"),
				 NULL: q4g128 q4g32 q8g32 bf16 f16 f32 */
	int cpu_time;         /* time by the calling thread's CPU time instead
				 of the wall clock: leaves out the time other
				 processes had its CPU */
} ds_kbench_opts;

/* Measured clock in GHz (dependent integer adds, one per cycle). */
double ds_kbench_clock_ghz(void);
/* 8 n dependent register adds, one cycle each (clock_x86.c, clock_arm.c:
 * the instructions are the architecture's); returns their sum. */
uint64_t ds_kbench_add_chain(uint64_t n);

/* For benchmarks of something else run in the same process (ds-bench
 * -m): the read probe's sustained GB/s over ws_bytes (0: 512 MiB;
 * read_gbs NULL: no probe, no buffer) and the dot-product peaks' GOP/s
 * (int8, bf16, fp32, each the best) on pool's threads, over min_sec (0:
 * 0.25 s). */
struct ds_pool;
int ds_kbench_probe(struct ds_pool *pool, size_t ws_bytes, double min_sec,
		    double *read_gbs, double peak_gops[3], ds_err *err);

/* The read probe over bytes at p (64-aligned; the part that is whole
 * 256-byte lines), on pool's threads, passes back to back over at least
 * min_sec (0: 0.25 s) and 3 passes: *read_gbs the sustained rate (bytes
 * over the passes' time), *best_gbs (unless NULL) the fastest pass's.  ds-bench -m
 * reads the model's own weights with it between its decode runs. */
int ds_kbench_read(struct ds_pool *pool, const void *p, size_t bytes,
		   double min_sec, double *read_gbs, double *best_gbs);

/* The read probe and the barrier for each thread count. */
int ds_kbench_membw(const ds_kbench_opts *o, ds_kbench_emit *emit, void *arg,
		    ds_err *err);
/* Peaks, read probes, barriers, then for each weight type matvec on
 * 4096x4096 and 4096x11008 and matmul at T = 8, 64, 512 on 4096x4096
 * (or mm_n x mm_k). */
int ds_kbench_kernels(const ds_kbench_opts *o, ds_kbench_emit *emit,
		      void *arg, ds_err *err);

#endif

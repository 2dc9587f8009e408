/* test_threads.c - the thread pool: every thread runs every job once, the
 * barrier orders phases, sleeping workers wake, splits cover, CPU lists. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "pool/threads.h"

struct count_job {
	_Atomic int calls[8];
	_Atomic int nth_bad;
	int nth;
};

static void count_fn(void *arg, int ith, int nth)
{
	struct count_job *j = arg;

	atomic_fetch_add(&j->calls[ith], 1);
	if (nth != j->nth)
		atomic_fetch_add(&j->nth_bad, 1);
}

static void test_run(void)
{
	int n, i, r;

	for (n = 1; n <= 4; n++) {
		ds_pool_opts o = { n, NULL, 0 };
		struct count_job j;
		ds_pool *p;
		ds_err err;
		int bad = 0;

		memset(&j, 0, sizeof j);
		j.nth = n;
		T_CHECK(ds_pool_init(&p, &o, &err) == 0);
		T_CHECK(ds_pool_threads(p) == n);
		for (r = 0; r < 2000; r++)
			ds_pool_run(p, count_fn, &j);
		for (i = 0; i < n; i++)
			bad += atomic_load(&j.calls[i]) != 2000;
		T_CHECKF(bad == 0 && atomic_load(&j.nth_bad) == 0, "%d threads", n);
		ds_pool_free(p);
	}
}

/* Phases separated by barriers: each phase reads what all threads wrote
 * in the one before. */
struct bar_job {
	ds_pool *p;
	long v[8];
	long sums[8];
	int round;
	_Atomic int bad;
};

static void bar_fn(void *arg, int ith, int nth)
{
	struct bar_job *j = arg;
	int ph, i;

	for (ph = 0; ph < 5; ph++) {
		long s = 0;

		j->v[ith] = (long)j->round * 100 + ph * 10 + ith;
		ds_pool_barrier(j->p);
		for (i = 0; i < nth; i++)
			s += j->v[i];
		j->sums[ith] = s;
		ds_pool_barrier(j->p);
		for (i = 0; i < nth; i++)
			if (j->sums[i] != s)
				atomic_fetch_add(&j->bad, 1);
		ds_pool_barrier(j->p);
	}
}

static void test_barrier(void)
{
	int n;

	for (n = 1; n <= 3; n++) {
		ds_pool_opts o = { n, NULL, 0 };
		struct bar_job j;
		ds_err err;

		memset(&j, 0, sizeof j);
		T_CHECK(ds_pool_init(&j.p, &o, &err) == 0);
		for (j.round = 0; j.round < 300; j.round++)
			ds_pool_run(j.p, bar_fn, &j);
		T_CHECKF(atomic_load(&j.bad) == 0, "%d threads: %d mismatches", n, atomic_load(&j.bad));
		ds_pool_free(j.p);
	}
}

/* With a 1 us spin, workers are asleep on the futex between jobs. */
static void test_sleep_wake(void)
{
	ds_pool_opts o = { 3, NULL, 1 };
	struct count_job j;
	struct bar_job b;
	ds_pool *p;
	ds_err err;
	int r, bad = 0, i;

	memset(&j, 0, sizeof j);
	j.nth = 3;
	T_CHECK(ds_pool_init(&p, &o, &err) == 0);
	for (r = 0; r < 30; r++) {
		usleep(2000);
		ds_pool_run(p, count_fn, &j);
	}
	for (i = 0; i < 3; i++)
		bad += atomic_load(&j.calls[i]) != 30;
	T_CHECK(bad == 0);
	memset(&b, 0, sizeof b);
	b.p = p;
	for (b.round = 0; b.round < 20; b.round++)
		ds_pool_run(p, bar_fn, &b);
	T_CHECK(atomic_load(&b.bad) == 0);
	ds_pool_free(p);
}

struct cpu_job {
	_Atomic int wrong;
};

static void cpu_fn(void *arg, int ith, int nth)
{
	struct cpu_job *j = arg;

	(void)ith;
	(void)nth;
	if (sched_getcpu() != 0)
		atomic_fetch_add(&j->wrong, 1);
}

static void test_pinning(void)
{
	ds_pool_opts o = { 2, "0", 0 };
	struct cpu_job j = { 0 };
	cpu_set_t saved;
	ds_pool *p;
	ds_err err;

	sched_getaffinity(0, sizeof saved, &saved);
	T_CHECK(ds_pool_init(&p, &o, &err) == 0);
	ds_pool_run(p, cpu_fn, &j);
	T_CHECK(atomic_load(&j.wrong) == 0);
	T_CHECK(ds_pool_numa_nodes(p) >= 1);
	T_CHECK(ds_pool_node(p, 5) == -1);
	{
		static uint8_t buf[1 << 16];

		T_CHECK(ds_pool_place(p, buf, sizeof buf, 16, DS_PLACE_SPLIT, &err) == 0);
		T_CHECK(ds_pool_place(p, buf, sizeof buf, 1, DS_PLACE_INTERLEAVE, &err) == 0);
	}
	ds_pool_free(p);
	sched_setaffinity(0, sizeof saved, &saved);
	o.threads = DS_POOL_MAX + 1;
	o.cpus = NULL;
	T_CHECK(ds_pool_init(&p, &o, &err) == -1 && p == NULL);
	o.threads = 2;
	o.cpus = "0-";
	T_CHECK(ds_pool_init(&p, &o, &err) == -1 && strstr(err.msg, "0-") != NULL);
}

static void test_split(void)
{
	uint64_t seed = t_seed();
	int r, bad = 0;

	for (r = 0; r < 200; r++) {
		size_t n = t_rand(&seed) % 1000, prev = 0, b, e, lo = (size_t)-1, hi = 0;
		int nth = 1 + (int)(t_rand(&seed) % 17), i;

		for (i = 0; i < nth; i++) {
			ds_split(n, i, nth, &b, &e);
			bad += b != prev || e < b;
			prev = e;
			lo = e - b < lo ? e - b : lo;
			hi = e - b > hi ? e - b : hi;
		}
		bad += prev != n || hi - lo > 1;
	}
	T_CHECK(bad == 0);
}

static void test_cpulist(void)
{
	int c[16], n;
	ds_err err;

	T_CHECK(ds_cpulist_parse("0-3,8,10-11", c, 16, &n, &err) == 0 && n == 7 &&
		c[0] == 0 && c[3] == 3 && c[4] == 8 && c[6] == 11);
	T_CHECK(ds_cpulist_parse("5", c, 16, &n, &err) == 0 && n == 1 && c[0] == 5);
	T_CHECK(ds_cpulist_parse("3-1", c, 16, &n, &err) == -1);
	T_CHECK(ds_cpulist_parse("a", c, 16, &n, &err) == -1);
	T_CHECK(ds_cpulist_parse("", c, 16, &n, &err) == -1);
	T_CHECK(ds_cpulist_parse("1,,2", c, 16, &n, &err) == -1);
	T_CHECK(ds_cpulist_parse("1;2", c, 16, &n, &err) == -1);
	T_CHECK(ds_cpulist_parse("0-31", c, 16, &n, &err) == -1 && strstr(err.msg, "more than 16"));
}

int main(void)
{
	T_RUN(test_run);
	T_RUN(test_barrier);
	T_RUN(test_sleep_wake);
	T_RUN(test_pinning);
	T_RUN(test_split);
	T_RUN(test_cpulist);
	return t_done();
}

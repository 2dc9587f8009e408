/*
 * work.c - an op's work over the pool's threads: even shares of rows
 * (ops_rows) and work stealing (ops_steal_*, ops_int.h).
 */
#include "ops_int.h"

/* ---- rows split over the threads ---------------------------------------------- */

struct rows_job {
	rows_fn *fn;
	void *arg;
	size_t rows;
};

static void rows_run(void *arg, int ith, int nth)
{
	struct rows_job *j = arg;
	size_t b, e;

	ds_split(j->rows, ith, nth, &b, &e);
	if (b < e)
		j->fn(j->arg, b, e, ith);
}

void ops_rows(ds_ctx *c, size_t rows, size_t work_per_row, rows_fn *fn,
	      void *arg)
{
	struct rows_job j = { .fn = fn, .arg = arg, .rows = rows };

	if (rows <= 1 || rows * work_per_row < (1u << 15) || ds_pool_threads(c->pool) == 1)
		fn(arg, 0, rows, 0);
	else
		ops_run(c, rows_run, &j);
}

/* ---- work stealing ------------------------------------------------------------- */

void ops_steal_init(const ds_ctx *c, size_t n)
{
	int i, nth = ds_pool_threads(c->pool);
	size_t b, e;

	DS_ASSERT(n < UINT32_MAX);
	for (i = 0; i < nth; i++) {
		ds_split(n, i, nth, &b, &e);
		c->steal[i].n0 = e - b;
		atomic_store_explicit(&c->steal[i].fb, (uint64_t)b | (uint64_t)e << 32,
				      memory_order_relaxed);
	}
}

/* Claim units of the share s: from its front, first 7/8 of it (one long
 * run: each claim restarts the kernel's streams), then half of what is
 * left, at least want; from its back, want.  Halves, not 7/8 again: a
 * thread a few percent slower than the other would otherwise still be in
 * its second claim (1/8 of 7/8) when the other has taken all the rest,
 * and the other would wait for it (docs/perf.md, 2026-12-04 18:30). */
static int claim(struct ops_steal *s, int front, size_t want, size_t *lo,
		 size_t *hi)
{
	uint64_t fb = atomic_load_explicit(&s->fb, memory_order_relaxed), nw;
	size_t f, b, n;

	do {
		f = (uint32_t)fb;
		b = (size_t)(fb >> 32);
		if (f >= b)
			return 0;
		n = b - f;
		n = !front ? want : n == s->n0 ? n - n / 8 : n / 2;
		n = n > want ? n : want;
		n = n < b - f ? n : b - f;
		nw = front ? (uint64_t)(f + n) | (uint64_t)b << 32
			   : (uint64_t)f | (uint64_t)(b - n) << 32;
	} while (!atomic_compare_exchange_weak_explicit(&s->fb, &fb, nw, memory_order_relaxed,
							memory_order_relaxed));
	*lo = front ? f : b - n;
	*hi = front ? f + n : b;
	return 1;
}

int ops_steal_next(const ds_ctx *c, int ith, int nth, size_t min, size_t *lo,
		   size_t *hi)
{
	int i;

	min = min ? min : 1;
	if (claim(&c->steal[ith], 1, min, lo, hi))
		return 1;
	for (i = 1; i < nth; i++)
		if (claim(&c->steal[(ith + i) % nth], 0, min, lo, hi))
			return 1;
	return 0;
}

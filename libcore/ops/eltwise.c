/*
 * eltwise.c - the element-wise and row ops: RMSNorm, add, bias.
 */
#include "ops_int.h"

/* ---- element-wise ----------------------------------------------------------------- */

struct ew {
	ds_ctx *c;
	const float *a, *b, *w;
	float *y;
	size_t lda, ldy, n;
	float eps;
};

static void norm_rows(void *arg, size_t r0, size_t r1, int ith)
{
	struct ew *e = arg;
	size_t r;

	(void)ith;
	for (r = r0; r < r1; r++)
		e->c->kern->rmsnorm(e->a + r * e->lda, e->w, e->n, e->eps, e->y + r * e->ldy);
}

void ds_rmsnorm(ds_ctx *c, const float *x, size_t ldx, const float *w,
		float eps, size_t t, size_t n, float *y, size_t ldy)
{
	struct ew e = {
		.c = c, .a = x, .w = w, .y = y, .lda = ldx ? ldx : n,
		.ldy = ldy ? ldy : n, .n = n, .eps = eps
	};

	ops_rows(c, t, n, norm_rows, &e);
}

#define SLICE 4096

static void add_rows(void *arg, size_t r0, size_t r1, int ith)
{
	struct ew *e = arg;
	size_t i0 = r0 * SLICE, i1 = r1 * SLICE < e->n ? r1 * SLICE : e->n;

	(void)ith;
	e->c->kern->add(e->a + i0, e->b + i0, i1 - i0, e->y + i0);
}

void ds_add(ds_ctx *c, const float *a, const float *b, size_t n, float *y)
{
	struct ew e = { .c = c, .a = a, .b = b, .y = y, .n = n };

	ops_rows(c, (n + SLICE - 1) / SLICE, SLICE, add_rows, &e);
}

static void bias_rows(void *arg, size_t r0, size_t r1, int ith)
{
	struct ew *e = arg;
	size_t r;

	(void)ith;
	for (r = r0; r < r1; r++)
		e->c->kern->add(e->y + r * e->ldy, e->b, e->n, e->y + r * e->ldy);
}

void ds_add_bias(ds_ctx *c, float *y, size_t ldy, size_t t, const float *bias,
		 size_t n)
{
	struct ew e = { .c = c, .b = bias, .y = y, .ldy = ldy ? ldy : n, .n = n };

	ops_rows(c, t, n, bias_rows, &e);
}

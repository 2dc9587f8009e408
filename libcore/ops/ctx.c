/*
 * ctx.c - the op context (its scratch), element-wise ops, top-k, the MoE
 * router and the embedding gather.
 */
#include "ops_int.h"

/* ---- context ---------------------------------------------------------------- */

static void *take(size_t n, size_t size, int *fail, ds_err *err)
{
	size_t bytes;
	void *p;

	if (*fail || n == 0)
		return NULL;
	if (ds_mul_sz(n, size, &bytes) != 0) {
		*fail = 1;
		ds_errf(err, "op context: scratch size overflows");
		return NULL;
	}
	p = ds_aligned_alloc(64, ds_round_up(bytes, 64), err);
	if (p == NULL)
		*fail = 1;
	return p;
}

/* qt: the kernels' act_qt (q8g32's products of that many rows or more
 * read ds_act.qt; a buffer of fewer rows gets none). */
static void buf_alloc(ds_actbuf *b, size_t rows, size_t k, unsigned types, unsigned qt,
		      int *fail, ds_err *err)
{
	memset(b, 0, sizeof *b);
	b->rows = rows;
	b->ldq = ds_round_up(k ? k : 1, 64);
	b->ldf = k;
	if (types & (1u << DS_Q4 | 1u << DS_Q8)) {
		b->q = take(rows, b->ldq, fail, err);
		b->qd = take(rows, b->ldq / DS_QBLOCK * sizeof(float), fail, err);
		b->qs = take(rows, b->ldq / DS_QBLOCK * sizeof(float), fail, err);
		if (qt && (types & 1u << DS_Q8) && rows >= qt) {
			size_t n;

			b->ldqt = ds_act_qt_ld(rows);
			n = ds_act_qt_floats(b->ldqt, b->ldq);
			if (n == 0 && !*fail) {
				*fail = 1;
				ds_errf(err, "op context: scratch size overflows");
			}
			b->qt = take(n, sizeof(float), fail, err);
		}
	}
	if (types & 1u << DS_BF16)
		b->b = take(rows, b->ldq * sizeof(uint16_t), fail, err);
	if (types & (1u << DS_F32 | 1u << DS_F16))
		b->f = take(rows, k * sizeof(float), fail, err);
}

static void buf_free(ds_actbuf *b)
{
	free(b->q);
	free(b->qd);
	free(b->qs);
	free(b->qt);
	free(b->b);
	free(b->f);
}

int ds_ctx_init(ds_ctx *c, ds_pool *pool, const ds_ctx_cfg *cfg, ds_err *err)
{
	const ds_ctx_cfg *g = cfg;
	unsigned types = g->types ? g->types : ~0u;
	size_t mrows = g->max_rows * (g->moe_used ? g->moe_used : 1), thr;
	int fail = 0;
	unsigned qt;

	memset(c, 0, sizeof *c);
	if (ds_kernels_init(err) != 0)
		return -1;
	if (g->max_rows == 0 || g->max_k == 0)
		return ds_errf(err, "op context: max_rows and max_k must be positive");
	c->pool = pool;
	c->kern = ds_kernels_get();
	qt = c->kern->act_qt;
	c->cfg = *g;
	buf_alloc(&c->in, g->max_rows, g->max_k, types, qt, &fail, err);
	/* each thread's one row: no product of one row reads qt */
	buf_alloc(&c->one, (size_t)ds_pool_threads(pool), g->max_k, types, 0, &fail, err);
	c->h = take(ops_ffn_rows(c, NULL), g->max_ff * sizeof(float), &fail, err);
	c->gu = take(2, ds_round_up(g->max_ff, DS_ROWSET) * sizeof(float), &fail, err);
	if (g->moe_experts) {
		c->moe_tok = take(mrows, sizeof(int32_t), &fail, err);
		c->moe_w = take(mrows, sizeof(float), &fail, err);
		c->moe_off = take(3 * (g->moe_experts + 1), sizeof(int32_t), &fail, err);
		c->moe_h = take(mrows, g->moe_ff * sizeof(float), &fail, err);
		buf_alloc(&c->moe_x, mrows, g->moe_k, types, qt, &fail, err);
		buf_alloc(&c->moe_hq, mrows, g->moe_ff, types & ~(1u << DS_F32 | 1u << DS_F16),
			  qt, &fail, err);
		/* float experts read the hidden rows where they are */
		c->moe_hq.f = c->moe_h;
		c->moe_hq.ldf = g->moe_ff;
	}
	if (g->head_rows)
		buf_alloc(&c->heads, g->head_rows, g->head_k, types, qt, &fail, err);
	/* per thread: FFN tiles, attention, a RoPE row, router scores */
	thr = 2 * TB_MAX * FFN_LD * sizeof(float);
	if (DS_ATTN_SCRATCH(g->max_group, g->max_head, g->max_head) * sizeof(float) > thr)
		thr = DS_ATTN_SCRATCH(g->max_group, g->max_head, g->max_head) * sizeof(float);
	if ((g->max_rope + 16) * sizeof(float) > thr)
		thr = (g->max_rope + 16) * sizeof(float);
	if (3 * (g->moe_experts + 16) * sizeof(float) > thr)
		thr = 3 * (g->moe_experts + 16) * sizeof(float);
	c->thr_bytes = ds_round_up(thr, 64);
	c->thr = take((size_t)ds_pool_threads(pool), c->thr_bytes, &fail, err);
	c->steal = take((size_t)ds_pool_threads(pool), sizeof *c->steal, &fail, err);
	if (fail) {
		ds_err_prefix(err, "op context");
		ds_ctx_free(c);
		return -1;
	}
	return 0;
}

void ds_ctx_free(ds_ctx *c)
{
	buf_free(&c->in);
	buf_free(&c->one);
	free(c->h);
	free(c->gu);
	free(c->moe_tok);
	free(c->moe_w);
	free(c->moe_off);
	free(c->moe_h);
	buf_free(&c->moe_x);
	c->moe_hq.f = NULL;
	buf_free(&c->moe_hq);
	buf_free(&c->heads);
	free(c->thr);
	free(c->steal);
	memset(c, 0, sizeof *c);
}

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
	struct rows_job j = { fn, arg, rows };

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
 * its second claim (1/8 of 7/8) when the other has taken all the rest
 * (TinyLlama's gate/up then left one thread idle 12 us, the worker last
 * in 83% of them). */
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
	struct ew e = { c, x, NULL, w, y, ldx ? ldx : n, ldy ? ldy : n, n, eps };

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
	struct ew e = { c, a, b, NULL, y, 0, 0, n, 0 };

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
	struct ew e = { c, NULL, bias, NULL, y, 0, ldy ? ldy : n, n, 0 };

	ops_rows(c, t, n, bias_rows, &e);
}

static void softmax_rows(void *arg, size_t r0, size_t r1, int ith)
{
	struct ew *e = arg;
	size_t r;

	(void)ith;
	for (r = r0; r < r1; r++)
		e->c->kern->softmax(e->y + r * e->ldy, e->n);
}

void ds_softmax(ds_ctx *c, float *x, size_t ld, size_t t, size_t n)
{
	struct ew e = { c, NULL, NULL, NULL, x, 0, ld ? ld : n, n, 0 };

	ops_rows(c, t, 4 * n, softmax_rows, &e);
}

/* ---- top-k and the router ------------------------------------------------------- */

void ds_topk(const float *x, size_t n, size_t k, int32_t *idx, float *val)
{
	size_t i, m = 0, j;

	DS_ASSERT(k <= n);
	if (k == 0)
		return;
	/* insertion into the sorted list idx[0..m); a later equal value
	 * stays behind an earlier one */
	for (i = 0; i < n; i++) {
		if (m == k && !(x[i] > x[idx[k - 1]]))
			continue;
		j = m < k ? m++ : k - 1;
		while (j > 0 && x[i] > x[idx[j - 1]]) {
			idx[j] = idx[j - 1];
			j--;
		}
		idx[j] = (int32_t)i;
	}
	for (j = 0; val && j < k; j++)
		val[j] = x[idx[j]];
}

/* Scores of one token's logits l [ne] into s; the selection values in b. */
static void route_token(const ds_ctx *c, const ds_router *r, float *l,
			float *b, float *gs, int32_t *ids, float *w)
{
	size_t ne = r->n_expert, e, g, ng = r->n_group ? r->n_group : 1, per = ne / ng;
	int32_t gi[64], top2[2];
	float sum = 0, v2[2];
	size_t i;

	if (r->score == DS_ROUTE_SOFTMAX)
		c->kern->softmax(l, ne);
	else
		for (e = 0; e < ne; e++)
			l[e] = 1.0f / (1.0f + expf(-l[e]));
	for (e = 0; e < ne; e++)
		b[e] = r->method == DS_ROUTE_NOAUX_TC && r->bias ? l[e] + r->bias[e] : l[e];
	if (r->method != DS_ROUTE_GREEDY && ng > 1) {
		/* rank the groups; experts outside the kept ones cannot win */
		for (g = 0; g < ng; g++) {
			ds_topk(b + g * per, per, r->method == DS_ROUTE_NOAUX_TC ? 2 : 1, top2, v2);
			gs[g] = r->method == DS_ROUTE_NOAUX_TC ? v2[0] + v2[1] : v2[0];
		}
		ds_topk(gs, ng, r->topk_group, gi, NULL);
		for (g = 0; g < ng; g++)
			gs[g] = 0;
		for (i = 0; i < r->topk_group; i++)
			gs[gi[i]] = 1;
		for (e = 0; e < ne; e++)
			if (gs[e / per] == 0)
				b[e] = -INFINITY;
	}
	ds_topk(b, ne, r->n_used, ids, NULL);
	for (i = 0; i < r->n_used; i++) {
		w[i] = l[ids[i]];
		sum += w[i];
	}
	/* V2 remote code: normalize or scale; V3: normalize, then scale */
	for (i = 0; i < r->n_used; i++) {
		if (r->norm_topk_prob)
			w[i] /= sum + 1e-20f;
		if (r->score == DS_ROUTE_SIGMOID || !r->norm_topk_prob)
			w[i] *= r->routed_scaling_factor;
	}
}

void ds_route(ds_ctx *c, const ds_router *r, float *logits, size_t t,
	      int32_t *ids, float *w)
{
	float *b = ops_thr(c, 0), *gs = b + r->n_expert + 16;
	size_t i;

	DS_ASSERT(r->n_expert <= c->cfg.moe_experts);
	DS_ASSERT(r->n_used <= r->n_expert && r->n_used <= 256);
	DS_ASSERT(r->n_group <= 64 && r->topk_group <= (r->n_group ? r->n_group : 1));
	DS_ASSERT(r->n_group == 0 || r->n_expert % r->n_group == 0);
	for (i = 0; i < t; i++)
		route_token(c, r, logits + i * r->n_expert, b, gs, ids + i * r->n_used,
			    w + i * r->n_used);
}

/* ---- embedding ------------------------------------------------------------------------ */

struct embed_job {
	ds_ctx *c;
	const ds_mat *m;
	const int32_t *ids;
	float *y;
	size_t ldy;
};

static void embed_rows(void *arg, size_t r0, size_t r1, int ith)
{
	struct embed_job *j = arg;
	size_t r;

	(void)ith;
	for (r = r0; r < r1; r++)
		j->c->kern->dequant_row(j->m, (uint64_t)j->ids[r], j->y + r * j->ldy);
}

int ds_embed(ds_ctx *c, const ds_mat *table, const int32_t *ids, size_t t,
	     float *y, size_t ldy, ds_err *err)
{
	struct embed_job j = { c, table, ids, y, ldy ? ldy : table->k };
	size_t i;

	for (i = 0; i < t; i++)
		if (ids[i] < 0 || (uint64_t)ids[i] >= table->n)
			return ds_errf(err, "token %zu: id %d outside the vocabulary (0..%llu)",
				       i, ids[i], (unsigned long long)table->n - 1);
	ops_rows(c, t, table->k, embed_rows, &j);
	return 0;
}

/*
 * ctx.c - the op context: the scratch every op works in, sized once.
 *
 * Each buffer is an anonymous mapping: zero, page-aligned, and resident
 * only where an op writes it, so the forms and rows a model never uses
 * cost address space, not memory.
 */
#include <sys/mman.h>

#include "ops_int.h"

/* ---- context ---------------------------------------------------------------- */

static void *take(ds_ctx *c, size_t n, size_t size, int *fail, ds_err *err)
{
	size_t bytes;
	void *p;

	if (*fail || n == 0)
		return NULL;
	if (ds_mul_sz(n, size, &bytes) != 0 || bytes > SIZE_MAX - 4096) {
		*fail = 1;
		ds_errf(err, "scratch size overflows");
		return NULL;
	}
	if (c->n_maps == DS_CTX_MAPS) {
		*fail = 1;
		ds_errf(err, "too many buffers");
		return NULL;
	}
	bytes = ds_round_up(bytes ? bytes : 1, 4096);
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		*fail = 1;
		ds_errf(err, "cannot map %zu bytes", bytes);
		return NULL;
	}
	c->maps[c->n_maps].p = p;
	c->maps[c->n_maps++].n = bytes;
	return p;
}

/* qt: the kernels' act_qt (q8g32's products of that many rows or more
 * read ds_act.qt; a buffer of fewer rows gets none). */
static void buf_alloc(ds_ctx *c, ds_actbuf *b, size_t rows, size_t k, unsigned types,
		      unsigned qt, int *fail, ds_err *err)
{
	memset(b, 0, sizeof *b);
	b->rows = rows;
	b->ldq = ds_round_up(k ? k : 1, 64);
	b->ldf = k;
	if (types & (1u << DS_Q4 | 1u << DS_Q8)) {
		b->q = take(c, rows, b->ldq, fail, err);
		b->qd = take(c, rows, b->ldq / DS_QBLOCK * sizeof(float), fail, err);
		b->qs = take(c, rows, b->ldq / DS_QBLOCK * sizeof(float), fail, err);
		if (qt && (types & 1u << DS_Q8) && rows >= qt) {
			size_t n;

			b->ldqt = ds_act_qt_ld(rows);
			n = ds_act_qt_floats(b->ldqt, b->ldq);
			if (n == 0 && !*fail) {
				*fail = 1;
				ds_errf(err, "scratch size overflows");
			}
			b->qt = take(c, n, sizeof(float), fail, err);
		}
	}
	if (types & 1u << DS_BF16)
		b->b = take(c, rows, b->ldq * sizeof(uint16_t), fail, err);
	if (types & (1u << DS_F32 | 1u << DS_F16))
		b->f = take(c, rows, k * sizeof(float), fail, err);
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
	buf_alloc(c, &c->in, g->max_rows, g->max_k, types, qt, &fail, err);
	/* each thread's one row: no product of one row reads qt */
	buf_alloc(c, &c->one, (size_t)ds_pool_threads(pool), g->max_k, types, 0, &fail, err);
	c->h = take(c, ops_ffn_rows(c, NULL), g->max_ff * sizeof(float), &fail, err);
	c->gu = take(c, 2, ds_round_up(g->max_ff, DS_ROWSET) * sizeof(float), &fail, err);
	if (g->moe_experts) {
		c->moe_tok = take(c, mrows, sizeof(int32_t), &fail, err);
		c->moe_w = take(c, mrows, sizeof(float), &fail, err);
		c->moe_off = take(c, 3 * (g->moe_experts + 1), sizeof(int32_t), &fail, err);
		c->moe_h = take(c, mrows, g->moe_ff * sizeof(float), &fail, err);
		buf_alloc(c, &c->moe_x, mrows, g->moe_k, types, qt, &fail, err);
		buf_alloc(c, &c->moe_hq, mrows, g->moe_ff, types & ~(1u << DS_F32 | 1u << DS_F16),
			  qt, &fail, err);
		/* float experts read the hidden rows where they are */
		c->moe_hq.f = c->moe_h;
		c->moe_hq.ldf = g->moe_ff;
	}
	/* f32 and f16 heads are read where they are */
	if (g->head_rows)
		buf_alloc(c, &c->heads, g->head_rows, g->head_k,
			  (g->head_types ? g->head_types : types) &
			  ~(1u << DS_F32 | 1u << DS_F16), qt, &fail, err);
	/* per thread: FFN tiles, attention, a RoPE row, router scores */
	thr = 2 * TB_MAX * FFN_LD * sizeof(float);
	if (DS_ATTN_SCRATCH(g->max_group, g->max_head, g->max_head) * sizeof(float) > thr)
		thr = DS_ATTN_SCRATCH(g->max_group, g->max_head, g->max_head) * sizeof(float);
	if (DS_ATTN_BLK_SCRATCH * sizeof(float) > thr)
		thr = DS_ATTN_BLK_SCRATCH * sizeof(float);
	/* ds_attn_pack: 16 keys' rows of three parts, none wider than max_head */
	if (16 * 3 * ds_round_up(g->max_head, 32) * sizeof(uint16_t) > thr)
		thr = 16 * 3 * ds_round_up(g->max_head, 32) * sizeof(uint16_t);
	if ((g->max_rope + 16) * sizeof(float) > thr)
		thr = (g->max_rope + 16) * sizeof(float);
	if (3 * (g->moe_experts + 16) * sizeof(float) > thr)
		thr = 3 * (g->moe_experts + 16) * sizeof(float);
	c->thr_bytes = ds_round_up(thr, 64);
	c->thr = take(c, (size_t)ds_pool_threads(pool), c->thr_bytes, &fail, err);
	c->steal = take(c, (size_t)ds_pool_threads(pool), sizeof *c->steal, &fail, err);
	if (fail) {
		ds_err_prefix(err, "op context");
		ds_ctx_free(c);
		return -1;
	}
	return 0;
}

void ds_ctx_free(ds_ctx *c)
{
	int i;

	for (i = 0; i < c->n_maps; i++)
		munmap(c->maps[i].p, c->maps[i].n);
	memset(c, 0, sizeof *c);
}

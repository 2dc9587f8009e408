/*
 * moe.c - routed experts (ds_moe) in one pool job.
 *
 * The (token, expert) assignments are sorted by expert, so an expert's
 * tokens are contiguous rows; then, with barriers between:
 *   1. prepare the rows x[token] (threads split the rows);
 *   2. gate/up of every active expert: items (expert, row-set) split over
 *      the threads, weighted by the expert's token count (in decode,
 *      claimed as they go: ops_steal);
 *   3. prepare the hidden rows for down;
 *   4. down: each thread owns a share of the output row-sets (in decode,
 *      claims them) and runs all active experts on them, adding w * out
 *      into y: no two threads write the same y element, so no locks.
 */
#include "ops_int.h"

struct moe_job {
	ds_ctx *c;
	const ds_mat *gate, *up, *down;
	const float *x;
	size_t ldx, t0;
	float *y;
	size_t ldy;
	int32_t *off;               /* [ne + 1] first row of each expert */
	int32_t *act;               /* active experts (with tokens) */
	size_t nact, rows, ff_sets;
	int two_pass;
	const ds_actbuf *xd, *hd;   /* prepared x rows, prepared hidden rows */
};

static int32_t row_expert(const struct moe_job *j, size_t r)
{
	size_t a = 0, b = j->nact;

	/* the active expert whose rows hold r: off is increasing */
	while (b - a > 1) {
		size_t m = (a + b) / 2;

		if ((size_t)j->off[j->act[m]] <= r)
			a = m;
		else
			b = m;
	}
	return j->act[a];
}

static void prep_x(struct moe_job *j, const ds_mat *w3, int need, int ith,
		   int nth)
{
	size_t b, e, r;

	ds_split(j->rows, ith, nth, &b, &e);
	for (r = b; r < e; r++) {
		ds_mat w = ds_mat_expert(w3, (uint64_t)row_expert(j, r));

		ops_prep_row(j->c, j->x + (size_t)j->c->moe_tok[r] * j->ldx, w.k,
			     ds_round_up(w.kp, DS_QBLOCK), w.perm, NULL, 0, need, j->xd, r);
	}
}

static void prep_h(struct moe_job *j, int ith, int nth)
{
	size_t b, e, r;

	ds_split(j->rows, ith, nth, &b, &e);
	for (r = b; r < e; r++) {
		ds_mat w = ds_mat_expert(j->down, (uint64_t)row_expert(j, r));

		ops_prep_row(j->c, j->c->moe_h + r * j->c->cfg.moe_ff, w.k,
			     ds_round_up(w.kp, DS_QBLOCK), w.perm, NULL, 0,
			     need_of(w.type), j->hd, r);
	}
}

/* The items [*b, *e) of thread ith: items are (active expert a, row-set)
 * in order, item cost = the expert's rows + 1 (its weights are read even
 * for one row). */
static void item_share(const struct moe_job *j, int ith, int nth, size_t *b,
		       size_t *e)
{
	size_t total = 0, acc = 0, a, lo = (size_t)ith, hi = (size_t)ith + 1;

	for (a = 0; a < j->nact; a++)
		total += (size_t)(j->off[j->act[a] + 1] - j->off[j->act[a]]) + 1;
	total *= j->ff_sets;
	*b = *e = j->nact * j->ff_sets;
	for (a = 0; a < j->nact * j->ff_sets; a++) {
		size_t cost = (size_t)(j->off[j->act[a / j->ff_sets] + 1] -
				       j->off[j->act[a / j->ff_sets]]) + 1;

		/* an item belongs to the thread whose range holds its start */
		if (*b == j->nact * j->ff_sets && acc * (size_t)nth >= total * lo)
			*b = a;
		if (acc * (size_t)nth >= total * hi) {
			*e = a;
			break;
		}
		acc += cost;
	}
	if (*b > *e)
		*b = *e;
}

/* Gate/up of items item .. item+n-1 (one expert's row-sets, as ds_ffn's
 * blocks: FFN_RS at most, so a tile of rows stays in L1 across them):
 * pass 0 both, 1 gate into h, 2 up combined (docs/perf.md, 2026-12-06
 * 03:42). */
static void gate_up_items(struct moe_job *j, int ith, size_t item, size_t n, int pass)
{
	int32_t ex = j->act[item / j->ff_sets];
	size_t rs = item % j->ff_sets, r0 = (size_t)j->off[ex], r1 = (size_t)j->off[ex + 1];
	ds_mat g = ds_mat_expert(j->gate, (uint64_t)ex), u = ds_mat_expert(j->up, (uint64_t)ex);
	float *tu, *tg = ops_gu(j->c, ith, &tu);
	size_t ff = j->c->cfg.moe_ff, nv = g.n - rs * DS_ROWSET, tb;
	size_t TB = ops_tb(j->c, need_of(g.type) | need_of(u.type), g.kp);
	ds_mat gv, uv;

	nv = nv < n * DS_ROWSET ? nv : n * DS_ROWSET;
	gv = ds_mat_rows(&g, rs * DS_ROWSET, nv);
	uv = ds_mat_rows(&u, rs * DS_ROWSET, nv);
	for (tb = r0; tb < r1; tb += TB) {
		size_t nt = r1 - tb < TB ? r1 - tb : TB;
		ds_act ag = ops_act(j->xd, need_of(g.type), tb, nt);
		ds_act au = ops_act(j->xd, need_of(u.type), tb, nt);

		ops_gate_up(j->c, &gv, &uv, &ag, &au, pass, j->c->moe_h + tb * ff + rs * DS_ROWSET,
			    ff, tg, tu);
	}
}

/* Items i .. of one expert with a single row (decode), up to the end of
 * the thread's items, the expert's, or TB_MAX row-sets, as one streamed
 * range; returns the first item not done. */
static size_t gate_up_run(struct moe_job *j, int ith, size_t i, size_t e)
{
	int32_t ex = j->act[i / j->ff_sets];
	size_t rs = i % j->ff_sets, n = j->ff_sets - rs, r0 = (size_t)j->off[ex], nr;
	ds_mat g = ds_mat_expert(j->gate, (uint64_t)ex), u = ds_mat_expert(j->up, (uint64_t)ex);
	float *tu, *tg = ops_gu(j->c, ith, &tu);
	ds_act ag = ops_act(j->xd, need_of(g.type), r0, 1);
	ds_act au = ops_act(j->xd, need_of(u.type), r0, 1);

	n = n < e - i ? n : e - i;
	n = n < TB_MAX ? n : TB_MAX;
	nr = ops_mv_rows(j->c, &g, rs, n, &ag, tg);
	(void)ops_mv_rows(j->c, &u, rs, n, &au, tu);
	j->c->kern->silu_mul(tg, tu, nr, j->c->moe_h + r0 * j->c->cfg.moe_ff + rs * DS_ROWSET);
	return i + n;
}

static void gate_up_share(struct moe_job *j, int ith, size_t b, size_t e,
			  int pass)
{
	size_t i = b, n;

	while (i < e) {
		int32_t ex = j->act[i / j->ff_sets];

		if (pass == 0 && j->off[ex + 1] - j->off[ex] == 1) {
			i = gate_up_run(j, ith, i, e);
			continue;
		}
		n = j->ff_sets - i % j->ff_sets;
		n = n < e - i ? n : e - i;
		n = n < FFN_RS ? n : FFN_RS;
		gate_up_items(j, ith, i, n, pass);
		i += n;
	}
}

/* Decode (one row per active expert, one pass): the (expert, row-set)
 * items of gate/up, then down's row-sets, claimed as they go (ops_steal). */
static int moe_steals(const struct moe_job *j)
{
	return j->rows == j->nact && !j->two_pass;
}

/* down for one token per expert (decode): each expert over the row-sets
 * b .. e-1 as streamed ranges, added into y expert after expert (each y
 * element by one thread, in one order). */
static void down_vec(struct moe_job *j, int ith, size_t b, size_t e)
{
	const ds_kernels *K = j->c->kern;
	float *tile = ops_thr(j->c, ith);
	size_t a, rs, n, nr;

	for (a = 0; a < j->nact; a++) {
		int32_t ex = j->act[a];
		ds_mat d = ds_mat_expert(j->down, (uint64_t)ex);
		size_t r0 = (size_t)j->off[ex], tok = (size_t)j->c->moe_tok[r0];
		ds_act ah = ops_act(j->hd, need_of(d.type), r0, 1);

		for (rs = b; rs < e; rs += n) {
			n = e - rs < TB_MAX ? e - rs : TB_MAX;
			nr = ops_mv_rows(j->c, &d, rs, n, &ah, tile);
			K->axpy(j->c->moe_w[r0], tile, nr,
				j->y + (j->t0 + tok) * j->ldy + rs * DS_ROWSET);
		}
	}
}

static void down_share(struct moe_job *j, int ith, int nth)
{
	const ds_kernels *K = j->c->kern;
	float *tile = ops_thr(j->c, ith);
	size_t b, e, rs, a, tb, t, TB = ops_tb(j->c, need_of(j->down->type), j->down->kp);

	if (moe_steals(j)) {
		while (ops_steal_next(j->c, ith, nth, STEAL_MIN, &b, &e))
			down_vec(j, ith, b, e);
		return;
	}
	ds_split((j->down->n + DS_ROWSET - 1) / DS_ROWSET, ith, nth, &b, &e);
	for (rs = b; rs < e; rs++) {
		size_t nv = j->down->n - rs * DS_ROWSET;

		nv = nv < DS_ROWSET ? nv : DS_ROWSET;
		for (a = 0; a < j->nact; a++) {
			int32_t ex = j->act[a];
			ds_mat d = ds_mat_expert(j->down, (uint64_t)ex);
			size_t r0 = (size_t)j->off[ex], r1 = (size_t)j->off[ex + 1];

			for (tb = r0; tb < r1; tb += TB) {
				size_t nt = r1 - tb < TB ? r1 - tb : TB;
				ds_act ah = ops_act(j->hd, need_of(d.type), tb, nt);

				ops_mm_tile(j->c, &d, rs, &ah, tile);
				for (t = 0; t < nt; t++) {
					size_t tok = (size_t)j->c->moe_tok[tb + t];

					K->axpy(j->c->moe_w[tb + t], tile + t * DS_ROWSET, nv,
						j->y + (j->t0 + tok) * j->ldy + rs * DS_ROWSET);
				}
			}
		}
	}
}

static void moe_fn(void *arg, int ith, int nth)
{
	struct moe_job *j = arg;
	int ng = need_of(j->gate->type), nu = need_of(j->up->type), pass;
	size_t b, e;

	item_share(j, ith, nth, &b, &e);
	for (pass = j->two_pass ? 1 : 0; pass <= (j->two_pass ? 2 : 0); pass++) {
		prep_x(j, pass == 2 ? j->up : j->gate,
		       pass == 0 ? ng | nu : pass == 1 ? ng : nu, ith, nth);
		ds_pool_barrier(j->c->pool);
		if (moe_steals(j)) {
			while (ops_steal_next(j->c, ith, nth, STEAL_MIN, &b, &e))
				gate_up_share(j, ith, b, e, 0);
		} else {
			gate_up_share(j, ith, b, e, pass);
		}
		ds_pool_barrier(j->c->pool);
	}
	/* every claim of gate/up is made: down's shares (published by
	 * the barrier after prep_h) */
	if (moe_steals(j) && ith == 0)
		ops_steal_init(j->c, (j->down->n + DS_ROWSET - 1) / DS_ROWSET);
	prep_h(j, ith, nth);
	ds_pool_barrier(j->c->pool);
	down_share(j, ith, nth);
}

/* Sort the assignments of tokens t0 .. t0+t-1 by expert (counting sort). */
static void moe_sort(ds_ctx *c, struct moe_job *j, const int32_t *ids,
		     const float *w, size_t t, size_t n_used)
{
	size_t ne = j->gate->ne, i, e;
	int32_t *off = c->moe_off, *fill = c->moe_off + ne + 1;

	memset(off, 0, (ne + 1) * sizeof *off);
	for (i = 0; i < t * n_used; i++) {
		DS_ASSERT(ids[i] >= 0 && (uint64_t)ids[i] < ne);
		off[ids[i] + 1]++;
	}
	j->nact = 0;
	for (e = 0; e < ne; e++) {
		if (off[e + 1] > 0)
			j->act[j->nact++] = (int32_t)e;
		off[e + 1] += off[e];
		fill[e] = off[e];
	}
	for (i = 0; i < t * n_used; i++) {
		int32_t r = fill[ids[i]]++;

		c->moe_tok[r] = (int32_t)(i / n_used);
		c->moe_w[r] = w[i];
	}
	j->rows = t * n_used;
	j->two_pass = 0;
	for (e = 0; e < j->nact; e++) {
		ds_mat g = ds_mat_expert(j->gate, (uint64_t)j->act[e]);
		ds_mat u = ds_mat_expert(j->up, (uint64_t)j->act[e]);

		j->two_pass |= !ops_perm_same(g.perm, u.perm, g.k);
	}
}

void ds_moe(ds_ctx *c, const ds_mat *gate, const ds_mat *up,
	    const ds_mat *down, const float *x, size_t ldx, size_t t,
	    const int32_t *ids, const float *w, size_t n_used, float *y,
	    size_t ldy)
{
	struct moe_job j;
	size_t t0, chunk = c->cfg.max_rows;

	DS_ASSERT(gate->ne == up->ne && gate->ne == down->ne && gate->ne <= c->cfg.moe_experts);
	DS_ASSERT(n_used <= c->cfg.moe_used && gate->n <= c->cfg.moe_ff && down->k == gate->n);
	DS_ASSERT(gate->kp <= c->moe_x.ldq && down->kp <= c->moe_hq.ldq);
	memset(&j, 0, sizeof j);
	j.c = c;
	j.gate = gate;
	j.up = up;
	j.down = down;
	j.x = x;
	j.ldx = ldx ? ldx : gate->k;
	j.y = y;
	j.ldy = ldy ? ldy : down->n;
	j.off = c->moe_off;
	j.act = c->moe_off + 2 * (c->cfg.moe_experts + 1);
	j.ff_sets = (gate->n + DS_ROWSET - 1) / DS_ROWSET;
	j.xd = &c->moe_x;
	j.hd = &c->moe_hq;
	for (t0 = 0; t0 < t; t0 += chunk) {
		size_t n = t - t0 < chunk ? t - t0 : chunk;

		j.t0 = t0;
		j.x = x + t0 * j.ldx;
		j.t0 = t0;
		moe_sort(c, &j, ids + t0 * n_used, w + t0 * n_used, n, n_used);
		j.y = y;
		/* y rows are addressed from the chunk's first token */
		if (moe_steals(&j))
			ops_steal_init(c, j.nact * j.ff_sets);
		ops_run(c, moe_fn, &j);
	}
}

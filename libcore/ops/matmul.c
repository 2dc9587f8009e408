/*
 * matmul.c - threaded matrix products: weight views, activation
 * preparation, ds_matmul/ds_matmul_many and the fused gate/up FFN.
 *
 * A product is one pool job in two phases: the threads prepare the
 * activation rows (normalize, permute, quantize; rows split over the
 * threads), meet at a barrier, then compute the output row-sets.  Each
 * thread starts from its share (ds_split, the same on every call, so a
 * thread keeps reading the same rows and, with ds_pool_place, its own
 * NUMA node's pages).  For one block of rows (decode and small batches:
 * memory-bound, where a thread slowed by anything else on its core would
 * leave the other idle at the end) the shares are claimed piecewise and
 * a thread done with its own takes the others' last row-sets
 * (ops_steal); for several blocks of ops_tb() rows each thread computes
 * its whole share block after block.
 */
#include "ops_int.h"

/* ---- weight views ---------------------------------------------------------- */

static int perm_check(const int32_t *perm, uint64_t k, ds_err *err)
{
	uint8_t *seen = calloc(k, 1);
	uint64_t i;

	if (seen == NULL)
		return ds_errf(err, "permutation: out of memory");
	for (i = 0; i < k; i++) {
		if (perm[i] < 0 || (uint64_t)perm[i] >= k || seen[perm[i]]) {
			free(seen);
			return ds_errf(err, "permutation entry %llu = %d is not a permutation of 0..%llu",
				       (unsigned long long)i, perm[i], (unsigned long long)k - 1);
		}
		seen[perm[i]] = 1;
	}
	free(seen);
	return 0;
}

int ds_mat_init(ds_mat *m, ds_ttype t, const void *data, uint64_t bytes,
		int ndim, const uint64_t *shape, const int32_t *perm,
		ds_err *err)
{
	uint64_t want, e;
	char nm[16];

	if ((ndim != 2 && ndim != 3) || t.dt == DS_I32)
		return ds_errf(err, "a %d-D %s tensor is not a matrix", ndim, ds_ttype_name(t, nm));
	if (perm && !ds_ttype_interleaved(t))
		return ds_errf(err, "an input permutation needs a q4, q8 or bf16 matrix, not %s",
			       ds_ttype_name(t, nm));
	if (ds_tensor_bytes(t, ndim, shape, &want) != 0 || want != bytes)
		return ds_errf(err, "%s matrix of %llu bytes, its shape needs %llu",
			       ds_ttype_name(t, nm), (unsigned long long)bytes,
			       (unsigned long long)want);
	*m = ds_mat_make(t, data, shape[ndim - 2], shape[ndim - 1], perm);
	m->ne = ndim == 3 ? shape[0] : 1;
	for (e = 0; perm && e < m->ne; e++)
		if (perm_check(perm + e * m->k, m->k, err) != 0)
			return ds_err_prefix(err, "expert %llu", (unsigned long long)e);
	return 0;
}

ds_mat ds_mat_expert(const ds_mat *m, uint64_t e)
{
	ds_mat r = *m;

	DS_ASSERT(e < m->ne);
	r.data += e * m->e_bytes;
	if (m->perm)
		r.perm = m->perm + e * m->k;
	r.ne = 1;
	return r;
}

ds_mat ds_mat_rows(const ds_mat *m, uint64_t r0, uint64_t n)
{
	ds_mat r;

	DS_ASSERT(r0 % DS_ROWSET == 0 && r0 + n <= m->n && m->ne == 1);
	r = ds_mat_from_rowset(m, r0 / DS_ROWSET);
	r.n = n;
	r.e_bytes = ds_ttype_interleaved(m->type) ? m->rs_bytes * ((n + DS_ROWSET - 1) / DS_ROWSET)
						  : n * m->k * (m->type.dt == DS_F16 ? 2 : 4);
	return r;
}

/* ---- preparing activations -------------------------------------------------- */

void ops_prep_row(const ds_ctx *c, const float *x, size_t k, size_t kp,
		  const int32_t *perm, const float *norm, float eps, int need,
		  const ds_actbuf *d, size_t r)
{
	const ds_kernels *K = c->kern;
	float sc = 1.0f;
	size_t i;

	/* the same formula as the rmsnorm kernel, so fused == unfused */
	if (norm)
		sc = (float)(1.0 / sqrt((double)K->sumsq(x, k) / (double)k + eps));
	if (need & NEED_Q) {
		float *qd = d->qd + r * (d->ldq / DS_QBLOCK), *qs = d->qs + r * (d->ldq / DS_QBLOCK);

		K->quant_row(x, k, kp, perm, norm, sc, d->q + r * d->ldq, qd, qs);
		if ((need & NEED_QT) && d->qt)
			ds_act_qt_row(d->qt, d->ldqt, d->ldq, r, qd, qs);
	}
	if (need & NEED_B)
		K->bf16_row(x, k, kp, perm, norm, sc, d->b + r * d->ldq);
	if ((need & NEED_F) && !(d->f + r * d->ldf == x && !perm && !norm)) {
		float *f = d->f + r * d->ldf;

		for (i = 0; i < k; i++) {
			size_t p = perm ? (size_t)perm[i] : i;

			f[i] = norm ? x[p] * sc * norm[p] : x[p];
		}
	}
}

ds_act ops_act(const ds_actbuf *d, int need, size_t r0, size_t n)
{
	ds_act a;

	memset(&a, 0, sizeof a);
	a.t = n;
	a.ldq = d->ldq;
	if (need & NEED_Q) {
		a.q = d->q + r0 * d->ldq;
		a.qd = d->qd + r0 * (d->ldq / DS_QBLOCK);
		a.qs = d->qs + r0 * (d->ldq / DS_QBLOCK);
		if ((need & NEED_QT) && d->qt) {
			a.qt = d->qt + r0;
			a.ldqt = d->ldqt;
		}
	}
	if (need & NEED_B)
		a.b = d->b + r0 * d->ldq;
	if (need & NEED_F) {
		a.f = d->f + r0 * d->ldf;
		a.ldf = d->ldf;
	}
	return a;
}

int ops_perm_same(const int32_t *a, const int32_t *b, size_t k)
{
	if (a == b)
		return 1;
	if (a == NULL || b == NULL)
		return 0;
	return memcmp(a, b, k * sizeof *a) == 0;
}

void ops_mm_tile(const ds_ctx *c, const ds_mat *w, size_t rs,
		 const ds_act *x, float *tile)
{
	ds_mat v = ds_mat_from_rowset(w, rs);

	c->kern->mm[w->type.dt](&v, x, tile, DS_ROWSET, 0, 1);
}

size_t ops_mv_rows(const ds_ctx *c, const ds_mat *w, size_t rs, size_t n,
		   const ds_act *x, float *out)
{
	size_t r0 = rs * DS_ROWSET, nr = w->n - r0;
	ds_mat v;

	DS_ASSERT(x->t == 1 && n <= TB_MAX && r0 < w->n);
	nr = nr < n * DS_ROWSET ? nr : n * DS_ROWSET;
	v = ds_mat_rows(w, r0, nr);
	c->kern->mm[v.type.dt](&v, x, out, nr, 0, n);
	return nr;
}

/* ---- the product job --------------------------------------------------------- */

#define MM_MAX 8   /* outputs per job */

struct mm_job {
	ds_ctx *c;
	const ds_in *in;
	const int32_t *perm;
	size_t k, kp, t0, t;        /* input width; rows t0 .. t0+t-1 */
	int need, direct_f;         /* direct_f: the f form is the input */
	const ds_mm_out *out[MM_MAX];
	size_t sets[MM_MAX + 1];    /* cumulative row-sets */
	int n;
	size_t smin;                /* ops_steal_min of the outputs */
	const ds_actbuf *dst;
};

static void mm_prep(struct mm_job *j, int ith, int nth)
{
	size_t b, e, r;
	int need = j->direct_f ? j->need & ~NEED_F : j->need;

	if (need == 0)
		return;
	ds_split(j->t, ith, nth, &b, &e);
	for (r = b; r < e; r++)
		ops_prep_row(j->c, j->in->x + (j->t0 + r) * j->in->ld, j->k, j->kp,
			     j->perm, j->in->norm, j->in->eps, need, j->dst, r);
}

/* Input rows tb .. tb+n-1 as the kernels read them: prepared at rows
 * ar .. of buf, or the input itself (the f form, unnormalized). */
static ds_act mm_act(const struct mm_job *j, int need, const ds_actbuf *buf,
		     size_t ar, size_t tb, size_t n)
{
	ds_act a = ops_act(buf, need, ar, n);

	if ((need & NEED_F) && j->direct_f) {
		a.f = j->in->x + (j->t0 + tb) * j->in->ld;
		a.ldf = j->in->ld;
	}
	return a;
}

/* res += y over output o's row-sets [lo, hi) of rows tb .. tb+nt-1. */
static void mm_res(const struct mm_job *j, const ds_mm_out *out, size_t lo,
		   size_t hi, size_t tb, size_t nt)
{
	size_t c0 = lo * DS_ROWSET, c1 = hi * DS_ROWSET < out->w->n ? hi * DS_ROWSET : out->w->n, t;

	for (t = j->t0 + tb; t < j->t0 + tb + nt; t++) {
		float *r = out->res + t * out->ldr + c0;

		j->c->kern->add(r, out->y + t * out->ldy + c0, c1 - c0, r);
	}
}

/* Row-sets [b, e) of the job's outputs (numbered across them) for the
 * activation rows tb .. tb+nt-1, prepared at rows ar .. of buf. */
static void mm_sets(struct mm_job *j, size_t b, size_t e, size_t tb, size_t nt,
		    const ds_actbuf *buf, size_t ar)
{
	int o;

	for (o = 0; o < j->n; o++) {
		const ds_mm_out *out = j->out[o];
		size_t lo, hi;
		ds_act a;

		if (b >= e || e <= j->sets[o] || b >= j->sets[o + 1])
			continue;       /* none of this output's row-sets */
		lo = b > j->sets[o] ? b - j->sets[o] : 0;
		hi = e < j->sets[o + 1] ? e - j->sets[o] : j->sets[o + 1] - j->sets[o];
		a = mm_act(j, need_of(out->w->type), buf, ar, tb, nt);
		j->c->kern->mm[out->w->type.dt](out->w, &a, out->y + (j->t0 + tb) * out->ldy,
						out->ldy, lo, hi);
		if (out->res)
			mm_res(j, out, lo, hi, tb, nt);
	}
}

/* One row (decode): each thread prepares its own copy of it, with no
 * barrier, and claims row-sets as they go (ops_steal); one block of rows
 * (small batches): the rows prepared together, then claims; more blocks:
 * each thread its fixed share. */
static void mm_fn(void *arg, int ith, int nth)
{
	struct mm_job *j = arg;
	size_t b, e, tb, TB = ops_tb(j->c, j->need, j->kp);
	int need = j->direct_f ? j->need & ~NEED_F : j->need;

	if (j->t == 1 && nth > 1) {
		if (need)
			ops_prep_row(j->c, j->in->x + j->t0 * j->in->ld, j->k, j->kp, j->perm,
				     j->in->norm, j->in->eps, need, &j->c->one, (size_t)ith);
		while (ops_steal_next(j->c, ith, nth, j->smin, &b, &e))
			mm_sets(j, b, e, 0, 1, &j->c->one, (size_t)ith);
		return;
	}
	mm_prep(j, ith, nth);
	ds_pool_barrier(j->c->pool);
	if (j->t <= TB) {
		while (ops_steal_next(j->c, ith, nth, j->smin, &b, &e))
			mm_sets(j, b, e, 0, j->t, j->dst, 0);
		return;
	}
	ds_split(j->sets[j->n], ith, nth, &b, &e);
	for (tb = 0; tb < j->t; tb += TB)
		mm_sets(j, b, e, tb, j->t - tb < TB ? j->t - tb : TB, j->dst, tb);
}

/* One job over outputs that share a permutation, rows t0 .. t0+t-1. */
static void mm_group(ds_ctx *c, const ds_in *in, const ds_mm_out *outs,
		     int n, size_t t0, size_t t)
{
	struct mm_job j;
	uint64_t bytes = 0;
	int i;

	memset(&j, 0, sizeof j);
	j.c = c;
	j.in = in;
	j.perm = outs[0].w->perm;
	j.k = outs[0].w->k;
	j.t0 = t0;
	j.t = t;
	j.dst = &c->in;
	for (i = 0; i < n; i++) {
		const ds_mat *w = outs[i].w;

		DS_ASSERT(w->k == j.k && w->kp <= c->in.ldq && w->ne == 1);
		j.out[i] = &outs[i];
		j.need |= need_of(w->type);
		j.kp = w->kp > j.kp ? w->kp : j.kp;
		j.sets[i + 1] = j.sets[i] + (w->n + DS_ROWSET - 1) / DS_ROWSET;
		bytes += w->e_bytes;
	}
	j.smin = ops_steal_min(bytes, j.sets[n]);
	j.kp = ds_round_up(j.kp, DS_QBLOCK);
	j.n = n;
	j.direct_f = in->norm == NULL && j.perm == NULL;
	if (t <= ops_tb(c, j.need, j.kp))
		ops_steal_init(c, j.sets[n]);
	ops_run(c, mm_fn, &j);
}

void ds_matmul_many(ds_ctx *c, const ds_in *in0, const ds_mm_out *out0, int n)
{
	ds_mm_out outs[MM_MAX];
	ds_in in = *in0;
	uint8_t done[64] = { 0 };
	size_t t0;
	int i, m;

	DS_ASSERT(n >= 1 && n <= 64);
	if (in.ld == 0)
		in.ld = out0[0].w->k;
	for (i = 0; i < n; i++) {
		if (done[i])
			continue;
		/* outputs with the same permutation as output i, in one job */
		m = 0;
		for (int o = i; o < n && m < MM_MAX; o++) {
			if (done[o] || !ops_perm_same(out0[o].w->perm, out0[i].w->perm, out0[i].w->k))
				continue;
			outs[m] = out0[o];
			if (outs[m].ldy == 0)
				outs[m].ldy = outs[m].w->n;
			if (outs[m].ldr == 0)
				outs[m].ldr = outs[m].w->n;
			done[o] = 1;
			m++;
		}
		for (t0 = 0; t0 < in.t; t0 += c->cfg.max_rows)
			mm_group(c, &in, outs, m, t0,
				 in.t - t0 < c->cfg.max_rows ? in.t - t0 : c->cfg.max_rows);
	}
}

void ds_matmul(ds_ctx *c, const ds_mat *w, const float *x, size_t t, float *y)
{
	ds_in in = { .x = x, .ld = w->k, .t = t };
	ds_mm_out o = { .w = w, .y = y, .ldy = w->n };

	ds_matmul_many(c, &in, &o, 1);
}

/* ---- per-head products -------------------------------------------------------- */

#define HEAD_TB 32   /* activation rows per kernel call */

struct heads_job {
	ds_ctx *c;
	const ds_heads *p;
	size_t t;
	int need;
};

/* Head h's prepared rows (row h * T + t is x[t][h]: each head's rows
 * are contiguous), or its inputs where they are for f32/f16. */
static ds_act heads_act(const struct heads_job *j, size_t h)
{
	ds_act a;

	if (!(j->need & NEED_F))
		return ops_act(&j->c->heads, j->need, h * j->t, j->t);
	memset(&a, 0, sizeof a);
	a.t = j->t;
	a.f = j->p->x + h * j->p->hsx;
	a.ldf = j->p->ldx;
	return a;
}

static void heads_fn(void *arg, int ith, int nth)
{
	const struct heads_job *j = arg;
	const ds_heads *p = j->p;
	const ds_mat *w0 = &p->w[0];
	size_t sets = (w0->n + DS_ROWSET - 1) / DS_ROWSET, b, e, u, t0;

	if (p->side)
		p->side(p->side_arg, ith, nth);
	if (!(j->need & NEED_F)) {
		ds_split(p->nh * j->t, ith, nth, &b, &e);
		for (u = b; u < e; u++) {
			size_t h = u / j->t, t = u % j->t;

			ops_prep_row(j->c, p->x + t * p->ldx + h * p->hsx, w0->k, w0->kp,
				     p->w[h].perm, NULL, 0, j->need, &j->c->heads, u);
		}
	}
	ds_pool_barrier(j->c->pool);
	/* (head, row-set) units; a head's run of row-sets in one call */
	ds_split(p->nh * sets, ith, nth, &b, &e);
	for (u = b; u < e;) {
		size_t h = u / sets, rs0 = u % sets;
		size_t rs1 = rs0 + (e - u) < sets ? rs0 + (e - u) : sets;
		ds_act a = heads_act(j, h);

		for (t0 = 0; t0 < j->t; t0 += HEAD_TB) {
			size_t nt = j->t - t0 < HEAD_TB ? j->t - t0 : HEAD_TB;
			ds_act at = ds_act_rows(&a, t0, nt);

			j->c->kern->mm[w0->type.dt](&p->w[h], &at,
						    p->y + t0 * p->ldy + h * p->hsy,
						    p->ldy, rs0, rs1);
		}
		u += rs1 - rs0;
	}
}

void ds_matmul_heads(ds_ctx *c, const ds_heads *p, size_t t)
{
	struct heads_job j = { .c = c, .p = p, .t = t, .need = need_of(p->w[0].type) };
	size_t h;

	DS_ASSERT((j.need & NEED_F) ||
		  (p->nh * t <= c->heads.rows && p->w[0].kp <= c->heads.ldq));
	for (h = 1; h < p->nh; h++)
		DS_ASSERT(p->w[h].type.dt == p->w[0].type.dt &&
			  p->w[h].type.group == p->w[0].type.group &&
			  p->w[h].n == p->w[0].n && p->w[h].k == p->w[0].k);
	ops_run(c, heads_fn, &j);
}

/* ---- gate and up ------------------------------------------------------------- */

struct ffn_job {
	ds_ctx *c;
	const ds_in *in;
	const ds_mat *gate, *up;
	size_t t0, t, kp, smin;     /* smin: ops_steal_min of gate and up */
	int two_pass;               /* gate and up permute differently */
	size_t sets;                /* not 0: one row, gate's row-sets then up's
				       claimed as one range of 2 sets units
				       (ffn_pair) */
	float *h;
	size_t ldh;
	const ds_actbuf *dst;
};

/* 1 if gate and up (of one shape, and one permutation: !two_pass) can
 * be claimed as one range of row-sets for one activation row: units 0 ..
 * sets-1 gate's row-sets, sets .. 2 sets-1 up's, so a claim (but one
 * that crosses from gate to up) streams one matrix, where gate and up of
 * each claim would restart the kernel's streams twice.  They must read
 * the same prepared input.  The same for q, k and v gained too little
 * for the copying out it needs (docs/perf.md, 2026-12-05 03:13). */
static int ffn_pair(const ds_mat *gate, const ds_mat *up)
{
	return ds_ttype_interleaved(gate->type) && up->type.dt == gate->type.dt &&
	       up->type.group == gate->type.group && gate->ne == 1 && up->ne == 1;
}

static void ffn_prep(struct ffn_job *j, const ds_mat *w, int need, int ith,
		     int nth)
{
	size_t b, e, r;

	ds_split(j->t, ith, nth, &b, &e);
	for (r = b; r < e; r++)
		ops_prep_row(j->c, j->in->x + (j->t0 + r) * j->in->ld, w->k, j->kp,
			     w->perm, j->in->norm, j->in->eps, need, j->dst, r);
}

/* One activation row (decode): gate and up each over up to TB_MAX
 * row-sets at a time, then the gated product. */
static void ffn_vec(struct ffn_job *j, const ds_act *ag, const ds_act *au,
		    float *tg, float *tu, size_t b, size_t e, size_t tb)
{
	size_t rs, n, nr;

	for (rs = b; rs < e; rs += n) {
		n = e - rs < TB_MAX ? e - rs : TB_MAX;
		nr = ops_mv_rows(j->c, j->gate, rs, n, ag, tg);
		(void)ops_mv_rows(j->c, j->up, rs, n, au, tu);
		j->c->kern->silu_mul(tg, tu, nr, j->h + (j->t0 + tb) * j->ldh + rs * DS_ROWSET);
	}
}

/* The thread's row-sets for one block of rows tb .. tb+nt-1 (prepared at
 * rows ar .. of buf), FFN_RS at a time: pass 0 both products (gate and up
 * from the same prepared rows), pass 1 gate alone into h, pass 2 up
 * alone, combined with the gate values already in h. */
void ops_gate_up(const ds_ctx *c, const ds_mat *g, const ds_mat *u, const ds_act *ag,
		 const ds_act *au, int pass, float *h, size_t ldh, float *tg, float *tu)
{
	const ds_kernels *K = c->kern;
	size_t n = (g->n + DS_ROWSET - 1) / DS_ROWSET, t;

	DS_ASSERT(n <= FFN_RS && ag->t <= TB_MAX);
	if (pass == 1) {
		K->mm[g->type.dt](g, ag, h, ldh, 0, n);
		return;
	}
	if (pass == 0)
		K->mm[g->type.dt](g, ag, tg, FFN_LD, 0, n);
	K->mm[u->type.dt](u, au, tu, FFN_LD, 0, n);
	for (t = 0; t < ag->t; t++)
		K->silu_mul(pass == 0 ? tg + t * FFN_LD : h + t * ldh, tu + t * FFN_LD, g->n,
			    h + t * ldh);
}

static void ffn_block(struct ffn_job *j, int ith, size_t b, size_t e,
		      size_t tb, size_t nt, int pass, const ds_actbuf *buf, size_t ar)
{
	float *tu, *tg = ops_gu(j->c, ith, &tu);
	ds_act ag = ops_act(buf, need_of(j->gate->type), ar, nt);
	ds_act au = ops_act(buf, need_of(j->up->type), ar, nt);
	float *hb = j->h + (j->t0 + tb) * j->ldh;
	size_t rs, n;

	if (nt == 1 && pass == 0) {
		ffn_vec(j, &ag, &au, tg, tu, b, e, tb);
		return;
	}
	for (rs = b; rs < e; rs += n) {
		size_t nv = j->gate->n - rs * DS_ROWSET;
		ds_mat g, u;

		n = e - rs < FFN_RS ? e - rs : FFN_RS;
		nv = nv < n * DS_ROWSET ? nv : n * DS_ROWSET;
		g = ds_mat_rows(j->gate, rs * DS_ROWSET, nv);
		u = ds_mat_rows(j->up, rs * DS_ROWSET, nv);
		ops_gate_up(j->c, &g, &u, &ag, &au, pass, hb + rs * DS_ROWSET, j->ldh, tg, tu);
	}
}

/* One pass over one block of rows: the row-sets claimed as they go. */
static int ffn_steals(const struct ffn_job *j)
{
	return !j->two_pass && j->t <= ops_tb(j->c, need_of(j->gate->type) | need_of(j->up->type), j->kp);
}

/* Units [b, e) of the fused row (ffn_pair) into c->gu: gate's row-set u
 * at gu + 16 u, up's at gu + 16 (sets + u). */
static void ffn_units(struct ffn_job *j, const ds_act *a, size_t b, size_t e)
{
	const ds_kernels *K = j->c->kern;
	size_t s = j->sets;

	if (b < s)
		K->mm[j->gate->type.dt](j->gate, a, j->c->gu, j->gate->n, b, e < s ? e : s);
	if (e > s)
		K->mm[j->up->type.dt](j->up, a, j->c->gu + s * DS_ROWSET, j->up->n,
				      b > s ? b - s : 0, e - s);
}

/* One activation row through gate and up claimed as one range (ffn_pair),
 * then, once both are in, silu(gate) * up split over the threads. */
static void ffn_row_fused(struct ffn_job *j, int ith, int nth)
{
	int need = need_of(j->gate->type);
	size_t b, e, r0, r1;
	ds_act a;

	ops_prep_row(j->c, j->in->x + j->t0 * j->in->ld, j->gate->k, j->kp, j->gate->perm,
		     j->in->norm, j->in->eps, need, &j->c->one, (size_t)ith);
	a = ops_act(&j->c->one, need, (size_t)ith, 1);
	while (ops_steal_next(j->c, ith, nth, j->smin, &b, &e))
		ffn_units(j, &a, b, e);
	ds_pool_barrier(j->c->pool);
	ds_split(j->sets, ith, nth, &b, &e);
	r0 = b * DS_ROWSET;
	r1 = e * DS_ROWSET < j->gate->n ? e * DS_ROWSET : j->gate->n;
	if (r1 > r0)
		j->c->kern->silu_mul(j->c->gu + r0, j->c->gu + j->sets * DS_ROWSET + r0, r1 - r0,
				     j->h + j->t0 * j->ldh + r0);
}

static void ffn_fn(void *arg, int ith, int nth)
{
	struct ffn_job *j = arg;
	int ng = need_of(j->gate->type), nu = need_of(j->up->type), pass;
	size_t b, e, tb, TB = ops_tb(j->c, ng | nu, j->kp);

	if (j->sets) {
		ffn_row_fused(j, ith, nth);
		return;
	}
	if (ffn_steals(j) && j->t == 1 && nth > 1) {
		/* one row: each thread its own copy, no barrier */
		ops_prep_row(j->c, j->in->x + j->t0 * j->in->ld, j->gate->k, j->kp,
			     j->gate->perm, j->in->norm, j->in->eps, ng | nu, &j->c->one,
			     (size_t)ith);
		while (ops_steal_next(j->c, ith, nth, j->smin, &b, &e))
			ffn_block(j, ith, b, e, 0, 1, 0, &j->c->one, (size_t)ith);
		return;
	}
	if (ffn_steals(j)) {
		ffn_prep(j, j->gate, ng | nu, ith, nth);
		ds_pool_barrier(j->c->pool);
		while (ops_steal_next(j->c, ith, nth, j->smin, &b, &e))
			ffn_block(j, ith, b, e, 0, j->t, 0, j->dst, 0);
		return;
	}
	ds_split((j->gate->n + DS_ROWSET - 1) / DS_ROWSET, ith, nth, &b, &e);
	for (pass = j->two_pass ? 1 : 0; pass <= (j->two_pass ? 2 : 0); pass++) {
		const ds_mat *w = pass == 2 ? j->up : j->gate;
		int need = pass == 0 ? ng | nu : pass == 1 ? ng : nu;

		ffn_prep(j, w, need, ith, nth);
		ds_pool_barrier(j->c->pool);
		for (tb = 0; tb < j->t; tb += TB)
			ffn_block(j, ith, b, e, tb, j->t - tb < TB ? j->t - tb : TB, pass,
				  j->dst, tb);
		if (pass == 1)
			ds_pool_barrier(j->c->pool);  /* before the rows are reused */
	}
}

void ds_ffn_gate_up(ds_ctx *c, const ds_mat *gate, const ds_mat *up,
		    const ds_in *in0, float *h, size_t ldh)
{
	struct ffn_job j;
	ds_in in = *in0;
	size_t sets = (gate->n + DS_ROWSET - 1) / DS_ROWSET;

	DS_ASSERT(gate->n == up->n && gate->k == up->k);
	DS_ASSERT(gate->kp <= c->in.ldq && up->kp <= c->in.ldq);
	if (in.ld == 0)
		in.ld = gate->k;
	memset(&j, 0, sizeof j);
	j.c = c;
	j.in = &in;
	j.gate = gate;
	j.up = up;
	j.kp = ds_round_up(gate->kp > up->kp ? gate->kp : up->kp, DS_QBLOCK);
	j.two_pass = !ops_perm_same(gate->perm, up->perm, gate->k);
	j.h = h;
	j.ldh = ldh ? ldh : gate->n;
	j.dst = &c->in;
	/* not across NUMA nodes: --numa node puts each thread's share of gate
	 * and of up on its node, and a thread's share of the two claimed as
	 * one range would be all of one of them */
	if (in.t == 1 && gate->n <= c->cfg.max_ff && ds_pool_numa_nodes(c->pool) <= 1 &&
	    !j.two_pass && ffn_pair(gate, up)) {
		j.t = 1;
		j.sets = sets;
		j.smin = ops_steal_min(gate->e_bytes + up->e_bytes, 2 * sets);
		ops_steal_init(c, 2 * sets);
		ops_run(c, ffn_fn, &j);
		return;
	}
	/* a unit: a row-set of gate and the same of up */
	j.smin = ops_steal_min(gate->e_bytes + up->e_bytes, sets);
	for (j.t0 = 0; j.t0 < in.t; j.t0 += c->cfg.max_rows) {
		j.t = in.t - j.t0 < c->cfg.max_rows ? in.t - j.t0 : c->cfg.max_rows;
		if (ffn_steals(&j))
			ops_steal_init(c, sets);
		ops_run(c, ffn_fn, &j);
	}
}


/* Rows per pass of ds_ffn through down, whose hidden rows are ld apart. */
static size_t ffn_pass(const ds_ctx *c, const ds_mat *down, size_t ld)
{
	size_t rows = ops_ffn_rows(c, down);
	size_t fit = ops_ffn_rows(c, NULL) * c->cfg.max_ff / ld;

	return rows < fit ? rows : fit;
}

void ds_ffn(ds_ctx *c, const ds_mat *gate, const ds_mat *up,
	    const ds_mat *down, const ds_in *in, float *y, size_t ldy, float *res)
{
	size_t t0, ff = gate->n, rows = ffn_pass(c, down, ff);

	DS_ASSERT(gate->n <= c->cfg.max_ff && down->k == gate->n && rows > 0);
	for (t0 = 0; t0 < in->t; t0 += rows) {
		size_t t = in->t - t0 < rows ? in->t - t0 : rows;
		size_t ld = in->ld ? in->ld : gate->k;
		ds_in part = {
			.x = in->x + t0 * ld, .ld = ld, .t = t,
			.norm = in->norm, .eps = in->eps
		};
		ds_in hin = { .x = c->h, .ld = ff, .t = t };
		size_t ly = ldy ? ldy : down->n;
		ds_mm_out o = {
			.w = down, .y = y + t0 * ly, .ldy = ly,
			.res = res ? res + t0 * ly : NULL, .ldr = ly
		};

		ds_ffn_gate_up(c, gate, up, &part, c->h, ff);
		ds_matmul_many(c, &hin, &o, 1);
	}
}

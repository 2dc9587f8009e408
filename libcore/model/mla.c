/*
 * mla.c - multi-head latent attention in the absorbed form, over the
 * compressed cache (docs/deepseek.md section 6):
 *
 *   q_c[t][h] = W_UK[h]^T q_nope[t][h]                    (rkv)
 *   s[t][h](p) = scale (q_c[t][h] . c_n(p) + q_pe[t][h] . k_pe(p))
 *   o_c[t][h] = sum_p softmax_p(s) c_n(p)                 (rkv)
 *   o[t][h]   = W_UV[h] o_c[t][h]                         (dv)
 *
 * which is MQA with one (rkv + dr)-wide key per position, [c_n | k_pe],
 * and the first rkv values of the same row as the value, shared by all
 * heads.  W_UK[h] and W_UV[h] are head h's k_nope rows [dn, rkv] and v
 * rows [dv, rkv] of attn_kv_b.  The same form serves prefill and decode:
 * at these context sizes the attention's extra arithmetic (rkv + dr
 * instead of dn + dr per score) is small beside the weights', and nothing
 * has to be expanded from the cache.
 *
 * The per-head products y[t][h] = W_h x[t][h] are one pool job each:
 * every (t, h) input row is prepared once for the weight type (int8
 * blocks, bf16), then the (head, row-set) units are split over the
 * threads.
 */
#include "arch.h"

#include <stdlib.h>
#include <string.h>

#define TB 32   /* activation rows per kernel call */

/* W_UK^T (and a derived W_UV) keep f32/f16 as they are; anything else
 * becomes bf16 (exact for bf16 checkpoints). */
static ds_ttype derived_type(ds_ttype t)
{
	ds_ttype b = { DS_BF16, 0 };

	return t.dt == DS_F32 || t.dt == DS_F16 ? t : b;
}

/* W_UV[h] can be read from attn_kv_b's rows in place when they start on
 * a row-set. */
static int wv_in_place(const ds_hparams *hp)
{
	return hp->qk_nope_head_dim % DS_ROWSET == 0 &&
	       hp->v_head_dim % DS_ROWSET == 0;
}

enum { NEED_F, NEED_B, NEED_Q };

/* The padded input width a kernel reads for type t. */
static size_t kpad(ds_ttype t, size_t k)
{
	return ds_ttype_interleaved(t) ? ds_kpad(t, k) : k;
}

static int need_of(ds_ttype t)
{
	return t.dt == DS_Q4 || t.dt == DS_Q8 ? NEED_Q :
	       t.dt == DS_BF16 ? NEED_B : NEED_F;
}

/* ---- the per-head product job ------------------------------------------------- */

/* One run's new rows, finished in the query side's job (ds_mla_attend):
 * q_pe rotated, and each latent row [c | k_pe] normalized (c), rotated
 * (k_pe) and written into the run's cache at pos0 + t. */
typedef struct mla_rows {
	ds_kv kc;
	size_t pos0;
} mla_rows;

typedef struct hprod {
	ds_fwd *f;
	const ds_layer *L;
	int uv;                    /* 0: W_UK^T (query side), 1: W_UV */
	size_t T, nh;
	float *x;                  /* x[t][h] at x + t * ldx + h * hsx */
	size_t ldx, hsx;
	float *y;                  /* y[t][h] at y + t * ldy + h * hsy */
	size_t ldy, hsy;
	/* query side: q_pe[t][h] copied behind q_c (cn floats) */
	size_t cn, coff;
	const mla_rows *rows;      /* query side: or NULL, done before */
} hprod;

static ds_mat head_mat(const hprod *j, size_t h)
{
	const ds_layer *L = j->L;
	const ds_hparams *hp = j->f->hp;
	size_t dn = hp->qk_nope_head_dim, dv = hp->v_head_dim;
	ds_mat m;

	if (!j->uv)
		return ds_mat_expert(&L->wk_b, h);
	if (!L->wv_view)
		return ds_mat_expert(&L->wv_b, h);
	m = ds_mat_from_rowset(&L->wkv_b, (h * (dn + dv) + dn) / DS_ROWSET);
	m.n = dv;
	return m;
}

/* Rows r0 .. r1-1 of the (h, t) inputs, prepared (buffer row h T + t). */
static void hprod_prep(const hprod *j, const ds_mat *w, int need,
		       size_t r0, size_t r1)
{
	const ds_kernels *k = j->f->kern;
	const ds_hbuf *hb = &j->f->hb;
	size_t r, nb = hb->ldq / DS_QBLOCK;

	for (r = r0; r < r1; r++) {
		size_t h = r / j->T, t = r % j->T;
		const float *src = j->x + t * j->ldx + h * j->hsx;

		if (need == NEED_Q)
			k->quant_row(src, w->k, w->kp, w->perm, NULL, 1.0f,
				     hb->q + r * hb->ldq, hb->qd + r * nb,
				     hb->qs + r * nb);
		else if (need == NEED_B)
			k->bf16_row(src, w->k, w->kp, w->perm, NULL, 1.0f,
				    hb->b + r * hb->ldq);
	}
}

/* The latent row t of a run: c normalized, k_pe rotated, into the cache. */
static void mla_row(const hprod *j, size_t t, const float *cs)
{
	const ds_fwd *f = j->f;
	const ds_hparams *hp = f->hp;
	size_t rkv = hp->kv_lora_rank, lat = rkv + hp->qk_rope_head_dim;
	float *k = f->k + t * lat;

	f->kern->rmsnorm(k, j->L->kv_a_norm, rkv, DS_LORA_EPS, k);
	f->kern->rope(k + rkv, 1, lat - rkv, f->rope.dim, cs, f->rope.style);
	f->kern->kv_store(j->rows->kc.type, k, j->rows->kc.dim,
			  j->rows->kc.data + (j->rows->pos0 + t) * j->rows->kc.ld);
}

/* q_pe[t][h] behind q_c[t][h] (query side only), rotated first when the
 * job finishes the rows; units past T * nh are the latent rows. */
static void hprod_copy(const hprod *j, size_t r0, size_t r1)
{
	size_t r, row = SIZE_MAX, dn = j->f->hp->qk_nope_head_dim;
	float cs[DS_ROPE_MAXDIM];
	const float *tab = j->f->rope1 ? j->f->rope1 : cs;   /* decode: the step's */

	for (r = r0; r < r1; r++) {
		size_t h = r / j->T, t = r % j->T;
		float *pe = j->x + t * j->ldx + h * j->hsx + dn;

		if (j->rows && t != row && tab == cs)
			ds_rope_table(&j->f->rope, (double)(j->rows->pos0 + t), cs);
		row = t;
		if (h == j->nh) {
			mla_row(j, t, tab);
			continue;
		}
		if (j->rows)
			j->f->kern->rope(pe, 1, j->cn, j->f->rope.dim, tab, j->f->rope.style);
		memcpy(j->y + t * j->ldy + h * j->hsy + j->coff, pe, j->cn * sizeof(float));
	}
}

/* The prepared rows of head h, as the kernels read them. */
static ds_act head_act(const hprod *j, int need, size_t h)
{
	const ds_hbuf *hb = &j->f->hb;
	size_t nb = hb->ldq / DS_QBLOCK;
	ds_act a;

	memset(&a, 0, sizeof a);
	a.t = j->T;
	if (need == NEED_F) {
		a.f = j->x + h * j->hsx;
		a.ldf = j->ldx;
		return a;
	}
	a.ldq = hb->ldq;
	if (need == NEED_B) {
		a.b = hb->b + h * j->T * hb->ldq;
	} else {
		a.q = hb->q + h * j->T * hb->ldq;
		a.qd = hb->qd + h * j->T * nb;
		a.qs = hb->qs + h * j->T * nb;
	}
	return a;
}

static void hprod_fn(void *arg, int ith, int nth)
{
	const hprod *j = arg;
	ds_mat w = head_mat(j, 0);
	int need = need_of(w.type);
	size_t nrs = (w.n + DS_ROWSET - 1) / DS_ROWSET, b, e, u, t0;

	/* with rows, units T * nh .. are the latent rows (h = nh) */
	ds_split(j->T * (j->nh + (j->rows != NULL)), ith, nth, &b, &e);
	if (j->cn)
		hprod_copy(j, b, e);
	e = e < j->T * j->nh ? e : j->T * j->nh;
	b = b < e ? b : e;
	if (need != NEED_F) {
		hprod_prep(j, &w, need, b, e);
		ds_pool_barrier(j->f->pool);
	}
	ds_split(j->nh * nrs, ith, nth, &b, &e);
	for (u = b; u < e;) {
		size_t h = u / nrs, rs0 = u % nrs;
		size_t rs1 = rs0 + (e - u) < nrs ? rs0 + (e - u) : nrs;
		ds_act a = head_act(j, need, h);

		w = head_mat(j, h);
		for (t0 = 0; t0 < j->T; t0 += TB) {
			size_t nt = j->T - t0 < TB ? j->T - t0 : TB;
			ds_act at = ds_act_rows(&a, t0, nt);

			j->f->kern->mm[w.type.dt](&w, &at,
						  j->y + t0 * j->ldy + h * j->hsy,
						  j->ldy, rs0, rs1);
		}
		u += rs1 - rs0;
	}
}

/* ---- absorbed attention ---------------------------------------------------------------- */

/* The new rows' last steps on the caller, for batches of several runs:
 * c normalized, q_pe and k_pe rotated, each run's rows into its cache. */
static void mla_rows_apart(ds_fwd *f, ds_kvcache *kv, uint32_t layer, size_t T,
			   const ds_layer *L)
{
	const ds_hparams *hp = f->hp;
	size_t nh = hp->n_head, dn = hp->qk_nope_head_dim, qhd = dn + hp->qk_rope_head_dim;
	size_t rkv = hp->kv_lora_rank, lat = rkv + hp->qk_rope_head_dim, i;
	ds_kv kc, vc;

	ds_rmsnorm(&f->ctx, f->k, lat, L->kv_a_norm, DS_LORA_EPS, T, rkv, f->k, lat);
	ds_rope_apply(&f->ctx, &f->rope, f->q + dn, nh * qhd, T, nh, qhd, f->pos, 0);
	ds_rope_apply(&f->ctx, &f->rope, f->k + rkv, lat, T, 1, lat, f->pos, 0);
	for (i = 0; i < f->n_runs; i++) {
		const ds_run *r = &f->runs[i];

		ds_kvcache_layer(kv, r->seq, layer, &kc, &vc);
		ds_kv_write(&f->ctx, &kc, f->k + r->t0 * lat, lat, lat, 1, r->n, r->pos0);
	}
}

void ds_mla_attend(ds_fwd *f, ds_kvcache *kv, const ds_layer *L,
		   uint32_t layer, size_t T)
{
	const ds_hparams *hp = f->hp;
	size_t nh = hp->n_head, dn = hp->qk_nope_head_dim, dr = hp->qk_rope_head_dim;
	size_t rkv = hp->kv_lora_rank, dv = hp->v_head_dim, lat = rkv + dr, i;
	hprod qs = { f, L, 0, T, nh, f->q, nh * (dn + dr), dn + dr,
		     f->qc, nh * lat, lat, dr, rkv, NULL };
	hprod vs = { f, L, 1, T, nh, f->oc, nh * rkv, rkv,
		     f->o, nh * dv, dv, 0, 0, NULL };
	mla_rows rows;
	ds_kv vc;

	if (f->n_runs == 1) {   /* one run: its rows finish in qs's job */
		ds_kvcache_layer(kv, f->runs[0].seq, layer, &rows.kc, &vc);
		rows.pos0 = f->runs[0].pos0;
		qs.rows = &rows;
	} else {
		mla_rows_apart(f, kv, layer, T, L);
	}
	ds_pool_run(f->pool, hprod_fn, &qs);
	for (i = 0; i < f->n_runs; i++) {
		ds_attn a = ds_run_attn(f, kv, layer, &f->runs[i], 1, f->qc, lat, f->oc, rkv);

		ds_attention(&f->ctx, &a, f->runs[i].n);
	}
	ds_pool_run(f->pool, hprod_fn, &vs);
}

/* ---- buffers ---------------------------------------------------------------------------- */

int ds_mla_alloc(ds_fwd *f, ds_err *err)
{
	const ds_hparams *hp = f->hp;
	const ds_mat *kvb = &f->layers[0].wkv_b;
	ds_ttype dt = derived_type(kvb->type);
	int nq = need_of(kvb->type), nd = need_of(dt);
	size_t kp = kpad(dt, hp->qk_nope_head_dim), rows, nb;
	ds_hbuf *hb = &f->hb;

	if (kvb->kp > kp)
		kp = kvb->kp;
	if (kpad(dt, hp->kv_lora_rank) > kp)
		kp = kpad(dt, hp->kv_lora_rank);
	hb->ldq = ds_round_up(kp, 64);
	nb = hb->ldq / DS_QBLOCK;
	if (ds_mul_sz(f->max_batch, hp->n_head, &rows) ||
	    rows > SIZE_MAX / hb->ldq / 4)
		return ds_errf(err, "MLA buffers: size overflows");
	hb->rows = rows;
	if (nq == NEED_Q) {
		hb->q = ds_fwd_map(f, rows * hb->ldq, err);
		hb->qd = ds_fwd_map(f, rows * nb * sizeof(float), err);
		hb->qs = ds_fwd_map(f, rows * nb * sizeof(float), err);
		if (!hb->q || !hb->qd || !hb->qs)
			return -1;
	}
	if ((nq == NEED_B || nd == NEED_B) &&
	    (hb->b = ds_fwd_map(f, rows * hb->ldq * 2, err)) == NULL)
		return -1;
	return 0;
}

/* ---- deriving W_UK^T (and W_UV) ------------------------------------------------------------ */

typedef struct derive_job {
	ds_fwd *f;
	size_t units;        /* layers x heads x parts */
	int parts;           /* 1: W_UK^T; 2: and W_UV */
	float *tmp;          /* per thread: 2 x per floats */
	uint16_t *u16;       /* per thread: per halves */
	size_t per;          /* max(dn, dv) * rkv */
} derive_job;

/* m [n][k] row-major floats into the matrix at dst, type t. */
static void pack(ds_ttype t, const float *m, uint16_t *u, uint64_t n,
		 uint64_t k, uint8_t *dst)
{
	uint64_t i;

	if (t.dt == DS_F32) {
		memcpy(dst, m, n * k * sizeof(float));
		return;
	}
	for (i = 0; i < n * k; i++)
		u[i] = t.dt == DS_F16 ? ds_f32_to_f16(m[i]) : ds_f32_to_bf16(m[i]);
	if (t.dt == DS_F16)
		memcpy(dst, u, n * k * 2);
	else
		ds_pack_bf16(dst, u, n, k);
}

static void derive_unit(const derive_job *j, size_t u, float *rows,
			float *tr, uint16_t *u16)
{
	const ds_hparams *hp = j->f->hp;
	size_t dn = hp->qk_nope_head_dim, dv = hp->v_head_dim, rkv = hp->kv_lora_rank;
	size_t part = u % j->parts, h = u / j->parts % hp->n_head;
	const ds_layer *L = &j->f->layers[u / j->parts / hp->n_head];
	size_t n = part ? dv : dn, i, r, row0 = h * (dn + dv) + (part ? dn : 0);
	const ds_mat *dst = part ? &L->wv_b : &L->wk_b;

	for (i = 0; i < n; i++) {
		float *w = rows + i * rkv;

		j->f->kern->dequant_row(&L->wkv_b, row0 + i, w);
		/* act-order GPTQ: stored column c is input perm[c] */
		if (L->wkv_b.perm != NULL) {
			memcpy(tr, w, rkv * sizeof *w);
			for (r = 0; r < rkv; r++)
				w[L->wkv_b.perm[r]] = tr[r];
		}
	}
	if (part) {             /* W_UV[h]: the rows as they are [dv, rkv] */
		pack(dst->type, rows, u16, dv, rkv,
		     (uint8_t *)dst->data + h * dst->e_bytes);
		return;
	}
	for (i = 0; i < dn; i++)         /* W_UK[h]^T [rkv, dn] */
		for (r = 0; r < rkv; r++)
			tr[r * dn + i] = rows[i * rkv + r];
	pack(dst->type, tr, u16, rkv, dn, (uint8_t *)dst->data + h * dst->e_bytes);
}

static void derive_fn(void *arg, int ith, int nth)
{
	const derive_job *j = arg;
	float *rows = j->tmp + (size_t)ith * 2 * j->per;
	uint16_t *u16 = j->u16 + (size_t)ith * j->per;
	size_t b, e, u;

	ds_split(j->units, ith, nth, &b, &e);
	for (u = b; u < e; u++)
		derive_unit(j, u, rows, rows + j->per, u16);
}

/* Lay out the derived matrices of every layer in one allocation. */
static int derive_alloc(ds_fwd *f, ds_ttype dt, int parts, ds_err *err)
{
	const ds_hparams *hp = f->hp;
	uint64_t kb[3] = { hp->n_head, hp->kv_lora_rank, hp->qk_nope_head_dim };
	uint64_t vb[3] = { hp->n_head, hp->v_head_dim, hp->kv_lora_rank };
	uint64_t bk, bv = 0, per, total;
	uint8_t *p;
	uint32_t l;

	if (ds_tensor_bytes(dt, 3, kb, &bk) ||
	    (parts == 2 && ds_tensor_bytes(dt, 3, vb, &bv)))
		return ds_errf(err, "MLA: derived matrices: size overflows");
	per = ds_round_up(bk, 64) + ds_round_up(bv, 64);
	if (ds_mul_u64(per, hp->n_layer, &total) || total > SIZE_MAX)
		return ds_errf(err, "MLA: derived matrices: size overflows");
	f->derived = p = ds_fwd_map(f, total, err);
	if (p == NULL)
		return ds_err_prefix(err, "MLA: derived matrices");
	f->scratch_bytes -= ds_round_up(total, 4096);
	f->derived_bytes = total;
	for (l = 0; l < hp->n_layer; l++, p += per) {
		ds_layer *L = &f->layers[l];

		L->wv_view = parts == 1;
		if (ds_mat_init(&L->wk_b, dt, p, bk, 3, kb, NULL, err) ||
		    (parts == 2 && ds_mat_init(&L->wv_b, dt, p + ds_round_up(bk, 64),
					       bv, 3, vb, NULL, err)))
			return ds_err_prefix(err, "MLA: derived matrices");
	}
	return 0;
}

int ds_mla_derive(ds_fwd *f, ds_err *err)
{
	const ds_hparams *hp = f->hp;
	ds_ttype dt = derived_type(f->layers[0].wkv_b.type);
	int nth = ds_pool_threads(f->pool), parts = wv_in_place(hp) ? 1 : 2;
	size_t dmax = hp->qk_nope_head_dim > hp->v_head_dim ? hp->qk_nope_head_dim
							    : hp->v_head_dim;
	derive_job j;
	int rc = -1;

	if (derive_alloc(f, dt, parts, err))
		return -1;
	j.f = f;
	j.parts = parts;
	j.per = dmax * hp->kv_lora_rank;
	j.units = (size_t)hp->n_layer * hp->n_head * parts;
	j.tmp = ds_calloc((size_t)nth * 2, j.per * sizeof(float), err);
	j.u16 = ds_calloc((size_t)nth, j.per * sizeof(uint16_t), err);
	if (j.tmp != NULL && j.u16 != NULL) {
		ds_pool_run(f->pool, derive_fn, &j);
		rc = 0;
	}
	free(j.tmp);
	free(j.u16);
	return rc;
}

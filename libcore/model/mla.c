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

/* W_UK^T (and a derived W_UV) keep f32/f16 as they are; anything else
 * becomes bf16 (exact for bf16 checkpoints). */
ds_ttype ds_mla_derived_type(ds_ttype kv_b)
{
	ds_ttype b = { .dt = DS_BF16 };

	return kv_b.dt == DS_F32 || kv_b.dt == DS_F16 ? kv_b : b;
}

/* W_UV[h] can be read from attn_kv_b's rows in place when they start on
 * a row-set. */
static int wv_in_place(const ds_hparams *hp)
{
	return hp->qk_nope_head_dim % DS_ROWSET == 0 &&
	       hp->v_head_dim % DS_ROWSET == 0;
}

/* ---- the query side's rows ------------------------------------------------------ */

/* Work done beside the per-head products of the query side (ds_heads'
 * side): q_pe[t][h] copied behind q_c[t][h]; with one run, q_pe rotated
 * first and each latent row [c | k_pe] normalized (c), rotated (k_pe)
 * and written into the run's cache at pos0 + t (units T * nh .. T * nh
 * + T - 1). */
typedef struct mla_side {
	const ds_fwd *f;
	const ds_layer *L;
	size_t t0, T;              /* rows t0 .. t0+T-1 */
	int rows;                  /* the rows finish here (one run) */
	ds_kv kc;                  /* that run's cache */
	size_t pos0;
} mla_side;

/* The latent row t of the run: c normalized, k_pe rotated, into the cache. */
static void mla_row(const mla_side *j, size_t t, const float *cs)
{
	const ds_fwd *f = j->f;
	const ds_hparams *hp = f->hp;
	size_t rkv = hp->kv_lora_rank, lat = rkv + hp->qk_rope_head_dim;
	float *k = f->k + t * lat;

	f->kern->rmsnorm(k, j->L->kv_a_norm, rkv, DS_LORA_EPS, k);
	f->kern->rope(k + rkv, 1, lat - rkv, f->rope.dim, cs, f->rope.style);
	f->kern->kv_store(j->kc.type, k, j->kc.dim, j->kc.data + (j->pos0 + t) * j->kc.ld);
}

static void mla_side_fn(void *arg, int ith, int nth)
{
	const mla_side *j = arg;
	const ds_fwd *f = j->f;
	const ds_hparams *hp = f->hp;
	size_t nh = hp->n_head, dn = hp->qk_nope_head_dim, dr = hp->qk_rope_head_dim;
	size_t rkv = hp->kv_lora_rank, lat = rkv + dr, qhd = dn + dr;
	size_t b, e, r, row = SIZE_MAX, W = nh + (j->rows != 0);
	float cs[DS_ROPE_MAXDIM];
	const float *tab = f->rope1 ? f->rope1 : cs;   /* decode: the step's */

	/* row-major units, so a thread builds each row's table once */
	ds_split(j->T * W, ith, nth, &b, &e);
	for (r = b; r < e; r++) {
		size_t h = r % W, t = r / W;
		float *pe = f->q + (j->t0 + t) * nh * qhd + h * qhd + dn;

		if (j->rows && t != row && tab == cs)
			ds_rope_table(&f->rope, (double)(j->pos0 + t), cs);
		row = t;
		if (h == nh) {
			mla_row(j, t, tab);
			continue;
		}
		if (j->rows)
			f->kern->rope(pe, 1, dr, f->rope.dim, tab, f->rope.style);
		memcpy(f->qc + (j->t0 + t) * nh * lat + h * lat + rkv, pe, dr * sizeof(float));
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

/* Absorbed attention of the runs r0 .. r1-1 (rows t0 .. t0+T-1); rows:
 * one run, whose rows finish in the query side's job, else their last
 * steps are done (mla_rows_apart). */
static void mla_absorbed(ds_fwd *f, ds_kvcache *kv, const ds_layer *L,
			 uint32_t layer, size_t r0, size_t r1, int rows)
{
	const ds_hparams *hp = f->hp;
	size_t nh = hp->n_head, dn = hp->qk_nope_head_dim, dr = hp->qk_rope_head_dim;
	size_t rkv = hp->kv_lora_rank, dv = hp->v_head_dim, lat = rkv + dr, i;
	size_t t0 = f->runs[r0].t0, T = f->runs[r1 - 1].t0 + f->runs[r1 - 1].n - t0;
	mla_side side = { .f = f, .L = L, .t0 = t0, .T = T, .rows = rows };
	ds_heads qs = { .w = L->uk, .nh = nh, .x = f->q + t0 * nh * (dn + dr),
			.ldx = nh * (dn + dr), .hsx = dn + dr, .y = f->qc + t0 * nh * lat,
			.ldy = nh * lat, .hsy = lat, .side = mla_side_fn, .side_arg = &side };
	ds_heads vs = { .w = L->uv, .nh = nh, .x = f->oc + t0 * nh * rkv, .ldx = nh * rkv,
			.hsx = rkv, .y = f->o + t0 * nh * dv, .ldy = nh * dv, .hsy = dv };
	ds_kv vc;

	if (rows) {
		ds_kvcache_layer(kv, f->runs[r0].seq, layer, &side.kc, &vc);
		side.pos0 = f->runs[r0].pos0;
	}
	ds_matmul_heads(&f->ctx, &qs, T);
	for (i = r0; i < r1; i++) {
		ds_attn a = ds_run_attn(f, kv, layer, &f->runs[i], 1, f->qc, lat, f->oc, rkv);

		ds_attention(&f->ctx, &a, f->runs[i].n);
	}
	ds_matmul_heads(&f->ctx, &vs, T);
}

/* ---- the MHA form ------------------------------------------------------------------- */

/* A block of a run's keys, k0 .. k0+n-1, decompressed from its cache. */
typedef struct mla_keys {
	const ds_fwd *f;
	ds_kv kc;
	size_t k0, n;
	size_t T;                  /* the run's tokens (mla_q_fn) */
	const float *q;            /* their queries */
} mla_keys;

/* The cache rows [c_n | k_pe] as floats into f->mla_lat. */
static void keys_read_fn(void *arg, int ith, int nth)
{
	const mla_keys *j = arg;
	size_t lat = j->kc.dim, b, e, p;

	ds_split(j->n, ith, nth, &b, &e);
	for (p = b; p < e; p++)
		j->f->kern->kv_load(j->kc.type, j->kc.data + (j->k0 + p) * j->kc.ld, lat,
				    j->f->mla_lat + p * lat);
}

/* The run's queries rounded to bf16 into f->mla_qb (rows of
 * ds_mla_qb_ld values, zero past dn + dr), or quantized to int8 where
 * the kernels take int8 keys (rows of as many bytes as halfwords). */
static void mla_q_fn(void *arg, int ith, int nth)
{
	const mla_keys *j = arg;
	const ds_fwd *f = j->f;
	const ds_hparams *hp = f->hp;
	size_t nh = hp->n_head, qhd = hp->qk_nope_head_dim + hp->qk_rope_head_dim;
	size_t ld = ds_mla_qb_ld(hp), b, e, r;

	ds_split(j->T * nh, ith, nth, &b, &e);
	if (f->kern->attn_q8) {
		ds_attn_quant_q(f->kern, j->q, qhd, hp->qk_nope_head_dim, hp->qk_rope_head_dim,
				(int8_t *)(void *)f->mla_qb, ld * 2, b, e);
		return;
	}
	for (r = b; r < e; r++)
		f->kern->bf16_row(j->q + r * qhd, qhd, ld, NULL, NULL, 1.0f, f->mla_qb + r * ld);
}

/* Each head's key rows [k_nope | k_pe] (the rope part shared by the
 * heads) into f->mla_kr, from f->mla_kv's [k_nope | v] and the cache's
 * k_pe. */
static void keys_build_fn(void *arg, int ith, int nth)
{
	const mla_keys *j = arg;
	const ds_hparams *hp = j->f->hp;
	size_t nh = hp->n_head, dn = hp->qk_nope_head_dim, dr = hp->qk_rope_head_dim;
	size_t dv = hp->v_head_dim, rkv = hp->kv_lora_rank, b, e, u;

	ds_split(j->n * nh, ith, nth, &b, &e);
	for (u = b; u < e; u++) {
		size_t p = u / nh, h = u % nh;
		float *k = j->f->mla_kr + u * (dn + dr);

		memcpy(k, j->f->mla_kv + p * nh * (dn + dv) + h * (dn + dv), dn * sizeof *k);
		memcpy(k + dn, j->f->mla_lat + p * (rkv + dr) + rkv, dr * sizeof *k);
	}
}

/* The attention of a block in fp32 (f32 and f16 attn_kv_b, whose
 * products round nothing): the keys built in f->mla_kr. */
static void mha_block_f32(ds_fwd *f, const mla_keys *j, ds_attn *a, size_t P)
{
	ds_pool_run(f->pool, keys_build_fn, (void *)j);
	a->k0 = j->k0;
	a->nk = j->n;
	a->last = j->k0 + j->n == P;
	ds_attention(&f->ctx, a, j->T);
}

/* The attention of a block in bf16 (the other types, whose derived
 * matrices are bf16 too): keys (bf16, or int8 where the kernels take
 * them) and values packed for ds_attention_blk. */
static void mha_block_packed(ds_fwd *f, const mla_keys *j, ds_attn_pk *a, size_t P)
{
	const ds_hparams *hp = f->hp;
	size_t nh = hp->n_head, dn = hp->qk_nope_head_dim, dr = hp->qk_rope_head_dim;
	size_t dv = hp->v_head_dim, lat = hp->kv_lora_rank + dr;
	ds_attn_src s = {
		.n_head = nh, .n = j->n,
		.ka = f->mla_kv, .ka_ld = nh * (dn + dv), .ka_hs = dn + dv, .na = dn,
		.kb = f->mla_lat + lat - dr, .kb_ld = lat, .nb = dr,
		.va = f->mla_kv + dn, .va_ld = nh * (dn + dv), .va_hs = dn + dv, .vd = dv,
		.k = f->mla_kp, .k_hs = a->k_hs, .v = f->mla_vp, .v_hs = a->v_hs,
		.k8 = a->k8 ? (uint8_t *)f->mla_kp : NULL, .k8_hs = a->k8_hs,
	};

	ds_attn_pack(&f->ctx, &s);
	a->k0 = j->k0;
	a->nk = j->n;
	a->last = j->k0 + j->n == P;
	ds_attention_blk(&f->ctx, a, j->T);
}

/* Run r in the MHA form: its keys DS_MLA_KEYS at a time decompressed
 * from the cache through attn_kv_b (k_nope and v of every head), and
 * the run's tokens attending each block with their softmax carried from
 * block to block (ds_attn ml, ds_attn_pk ml):
 *   s[t][h](p) = scale ([q_nope | q_pe][t][h] . [k_nope[h](p) | k_pe(p)])
 *   o[t][h]    = sum_p softmax_p(s) v[h](p)
 * the reference pass's equations; the products in bf16 pairs where the
 * derived matrices are bf16 (ds_mla_derived_type: the weights' own
 * rounding is bf16's or coarser), else in fp32.  Per key it costs a
 * product of the latent row by attn_kv_b (at the matrix kernels' rate)
 * and (dn + dr + dv) per head and token, against the absorbed form's
 * (2 rkv + dr) per head and token: the cheaper for a run of several
 * tokens. */
static void mla_mha(ds_fwd *f, ds_kvcache *kv, const ds_layer *L, uint32_t layer,
		    const ds_run *r)
{
	const ds_hparams *hp = f->hp;
	size_t nh = hp->n_head, dn = hp->qk_nope_head_dim, dr = hp->qk_rope_head_dim;
	size_t dv = hp->v_head_dim, qhd = dn + dr, P = r->pos0 + r->n, qld = ds_mla_qb_ld(hp);
	/* ds_attn_pack packs k_pe from an even column on */
	int bf = ds_mla_derived_type(L->wkv_b.type).dt == DS_BF16 && dn % 2 == 0;
	mla_keys j = { .f = f, .T = r->n, .q = f->q + r->t0 * nh * qhd };
	ds_attn fa = {
		.n_head = nh, .n_kv_head = nh,
		.q = f->q + r->t0 * nh * qhd, .q_ld = nh * qhd, .q_hs = qhd,
		.k = { DS_KV_F32, (uint8_t *)f->mla_kr, nh * qhd * sizeof(float),
		       qhd * sizeof(float), qhd },
		.v = { DS_KV_F32, (uint8_t *)(f->mla_kv + dn), nh * (dn + dv) * sizeof(float),
		       (dn + dv) * sizeof(float), dv },
		.o = f->o + r->t0 * nh * dv, .o_ld = nh * dv, .o_hs = dv,
		.scale = f->attn_scale, .pos0 = r->pos0, .ml = f->mla_ml,
	};
	ds_attn_pk a = {
		.n_head = nh, .q = f->mla_qb, .q_ld = nh * qld, .q_hs = qld,
		.k = f->mla_kp, .k_hs = ds_mla_kp_size(hp),
		.v = f->mla_vp, .v_hs = ds_attn_pack_v_size(DS_MLA_KEYS, dv),
		.kd = qhd, .vd = dv,
		.o = f->o + r->t0 * nh * dv, .o_ld = nh * dv, .o_hs = dv,
		.scale = f->attn_scale, .pos0 = r->pos0, .ml = f->mla_ml,
		.k8 = f->kern->attn_q8 ? (const uint8_t *)f->mla_kp : NULL,
		.q8 = (const int8_t *)f->mla_qb, .q8_ld = nh * qld * 2, .q8_hs = qld * 2,
		.k8_hs = ds_mla_kp_size(hp) * 2, .kb = ds_mla_q8_blocks(hp),
	};
	ds_in in = { .x = f->mla_lat, .ld = hp->kv_lora_rank + dr };
	ds_mm_out out = { .w = &L->wkv_b, .y = f->mla_kv };
	ds_kv vc;

	ds_kvcache_layer(kv, r->seq, layer, &j.kc, &vc);
	if (bf)
		ds_pool_run(f->pool, mla_q_fn, &j);
	for (j.k0 = 0; j.k0 < P; j.k0 += DS_MLA_KEYS) {
		j.n = P - j.k0 < DS_MLA_KEYS ? P - j.k0 : DS_MLA_KEYS;
		ds_pool_run(f->pool, keys_read_fn, &j);
		in.t = j.n;
		ds_matmul_many(&f->ctx, &in, &out, 1);
		if (bf)
			mha_block_packed(f, &j, &a, P);
		else
			mha_block_f32(f, &j, &fa, P);
	}
}

/* Run i in the MHA form: a prompt's tokens (forward.h ds_mla_form). */
static int mla_long(const ds_fwd *f, size_t i)
{
	return f->mla_form == DS_MLA_MHA ||
	       (f->mla_form == DS_MLA_PROMPT && f->runs[i].prompt);
}

void ds_mla_attend(ds_fwd *f, ds_kvcache *kv, const ds_layer *L,
		   uint32_t layer, size_t T)
{
	size_t i, e, n_long = 0;

	for (i = 0; i < f->n_runs; i++)
		n_long += (size_t)mla_long(f, i);
	if (n_long == 0 && f->n_runs == 1) {   /* its rows finish in the query side */
		mla_absorbed(f, kv, L, layer, 0, 1, 1);
		return;
	}
	mla_rows_apart(f, kv, layer, T, L);
	/* consecutive runs of one form together */
	for (i = 0; i < f->n_runs; i = e) {
		for (e = i + 1; e < f->n_runs && mla_long(f, e) == mla_long(f, i); e++)
			;
		if (!mla_long(f, i)) {
			mla_absorbed(f, kv, L, layer, i, e, 0);
			continue;
		}
		for (; i < e; i++)
			mla_mha(f, kv, L, layer, &f->runs[i]);
	}
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

/* The derived matrices of one layer: W_UK^T, then W_UV where not read
 * in place, each 64-byte aligned. */
static int derived_layer(const ds_hparams *hp, ds_ttype dt, uint64_t *bk,
			 uint64_t *bv)
{
	uint64_t kb[3] = { hp->n_head, hp->kv_lora_rank, hp->qk_nope_head_dim };
	uint64_t vb[3] = { hp->n_head, hp->v_head_dim, hp->kv_lora_rank };

	*bv = 0;
	return ds_tensor_bytes(dt, 3, kb, bk) ||
	       (!wv_in_place(hp) && ds_tensor_bytes(dt, 3, vb, bv)) ? -1 : 0;
}

int ds_mla_derived_bytes(const ds_hparams *hp, uint32_t n_layer, ds_ttype kv_b,
			 uint64_t *bytes, ds_err *err)
{
	uint64_t bk, bv;

	if (derived_layer(hp, ds_mla_derived_type(kv_b), &bk, &bv) ||
	    ds_mul_u64(ds_round_up(bk, 64) + ds_round_up(bv, 64), n_layer, bytes) ||
	    *bytes > SIZE_MAX)
		return ds_errf(err, "MLA: derived matrices: size overflows");
	return 0;
}

/* Lay the derived matrices of every layer out in f->derived, and each
 * layer's per-head views (ds_layer uk, uv) in f->heads. */
static int derive_layout(ds_fwd *f, ds_ttype dt, ds_err *err)
{
	const ds_hparams *hp = f->hp;
	uint64_t kb[3] = { hp->n_head, hp->kv_lora_rank, hp->qk_nope_head_dim };
	uint64_t vb[3] = { hp->n_head, hp->v_head_dim, hp->kv_lora_rank };
	uint64_t bk, bv;
	uint8_t *p = f->derived;
	uint32_t l, h, nh = hp->n_head, dn = hp->qk_nope_head_dim, dv = hp->v_head_dim;

	if (derived_layer(hp, dt, &bk, &bv))
		return ds_errf(err, "MLA: derived matrices: size overflows");
	for (l = 0; l < f->n_layer; l++) {
		ds_layer *L = &f->layers[l];

		L->wv_view = bv == 0;
		if (ds_mat_init(&L->wk_b, dt, p, bk, 3, kb, NULL, err) ||
		    (bv && ds_mat_init(&L->wv_b, dt, p + ds_round_up(bk, 64), bv, 3, vb,
				       NULL, err)))
			return ds_err_prefix(err, "MLA: derived matrices");
		p += ds_round_up(bk, 64) + ds_round_up(bv, 64);
		L->uk = f->head_mats + (size_t)2 * nh * l;
		L->uv = L->uk + nh;
		for (h = 0; h < nh; h++) {
			L->uk[h] = ds_mat_expert(&L->wk_b, h);
			if (bv) {
				L->uv[h] = ds_mat_expert(&L->wv_b, h);
				continue;
			}
			L->uv[h] = ds_mat_from_rowset(&L->wkv_b, (h * (dn + dv) + dn) / DS_ROWSET);
			L->uv[h].n = dv;
		}
	}
	return 0;
}

int ds_mla_derive(ds_fwd *f, ds_err *err)
{
	const ds_hparams *hp = f->hp;
	ds_ttype dt = ds_mla_derived_type(f->layers[0].wkv_b.type);
	int nth = ds_pool_threads(f->pool), parts = wv_in_place(hp) ? 1 : 2;
	size_t dmax = hp->qk_nope_head_dim > hp->v_head_dim ? hp->qk_nope_head_dim
							    : hp->v_head_dim;
	derive_job j = { .f = f, .parts = parts, .per = dmax * hp->kv_lora_rank,
			 .units = (size_t)f->n_layer * hp->n_head * parts };
	int rc = -1;

	if (derive_layout(f, dt, err))
		return -1;
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

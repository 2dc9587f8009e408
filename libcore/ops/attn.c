/*
 * attn.c - RoPE frequency tables (plain, linear, YaRN, llama3) and their
 * application, KV-cache writes and causal attention over the cache.
 */
#include "ops_int.h"

/* ---- RoPE ----------------------------------------------------------------------- */

/* YaRN's magnitude correction (DeepSeek's yarn_get_mscale). */
static double yarn_mscale(double s, double m)
{
	return s <= 1 ? 1.0 : 0.1 * m * log(s) + 1.0;
}

/* The dimension whose wavelength spans `rot` rotations over the original
 * context (YaRN's find_correction_dim). */
static double yarn_corr_dim(double rot, double dim, double base, double l0)
{
	return dim * log(l0 / (rot * 2 * M_PI)) / (2 * log(base));
}

static void yarn(ds_rope *r, double base, const ds_hparams *hp)
{
	const double d = r->dim, s = hp->rope_scaling.factor;
	const double l0 = hp->rope_scaling.original_ctx;
	double lo = floor(yarn_corr_dim(hp->rope_scaling.beta_fast, d, base, l0));
	double hi = ceil(yarn_corr_dim(hp->rope_scaling.beta_slow, d, base, l0));
	uint32_t i;

	lo = lo < 0 ? 0 : lo;
	hi = hi > d - 1 ? d - 1 : hi;
	if (lo == hi)
		hi += 0.001;
	for (i = 0; i < r->dim / 2; i++) {
		double ramp = ((double)i - lo) / (hi - lo);

		ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
		r->inv_freq[i] = r->inv_freq[i] / s * ramp + r->inv_freq[i] * (1 - ramp);
	}
	r->attn_factor = yarn_mscale(s, hp->rope_scaling.mscale) /
			 yarn_mscale(s, hp->rope_scaling.mscale_all_dim);
}

static void llama3(ds_rope *r, const ds_hparams *hp)
{
	const double l0 = hp->rope_scaling.original_ctx, f = hp->rope_scaling.factor;
	const double lf = hp->rope_scaling.low_freq_factor, hf = hp->rope_scaling.high_freq_factor;
	double lo_w = l0 / lf, hi_w = l0 / hf;
	uint32_t i;

	for (i = 0; i < r->dim / 2; i++) {
		double v = r->inv_freq[i], wl = 2 * M_PI / v;

		if (wl > lo_w) {
			r->inv_freq[i] = v / f;
		} else if (wl >= hi_w) {
			double sm = (l0 / wl - lf) / (hf - lf);

			r->inv_freq[i] = (1 - sm) * v / f + sm * v;
		}
	}
}

int ds_rope_init(ds_rope *r, const ds_hparams *hp, uint32_t dim, ds_err *err)
{
	enum ds_rope_scaling type = hp->rope_scaling.type;
	double theta = hp->rope_theta, f = hp->rope_scaling.factor;
	uint32_t i;

	memset(r, 0, sizeof *r);
	if (dim == 0 || dim % 2 || dim > DS_ROPE_MAXDIM)
		return ds_errf(err, "rope: dimension %u (even, at most %d)", dim, DS_ROPE_MAXDIM);
	if (!(theta > 1))
		return ds_errf(err, "rope: rope_theta %g", theta);
	if (type != DS_ROPE_SCALING_NONE && !(f > 0))
		return ds_errf(err, "rope: rope_scaling factor %g", f);
	if ((type == DS_ROPE_SCALING_YARN || type == DS_ROPE_SCALING_LLAMA3) &&
	    hp->rope_scaling.original_ctx == 0)
		return ds_errf(err, "rope: rope_scaling original_ctx 0");
	if (type == DS_ROPE_SCALING_LLAMA3 &&
	    !(hp->rope_scaling.low_freq_factor > 0 &&
	      hp->rope_scaling.high_freq_factor > hp->rope_scaling.low_freq_factor))
		return ds_errf(err, "rope: llama3 low/high_freq_factor %g/%g",
			       hp->rope_scaling.low_freq_factor, hp->rope_scaling.high_freq_factor);
	r->style = hp->rope_style;
	r->dim = dim;
	r->attn_factor = 1;
	for (i = 0; i < dim / 2; i++)
		r->inv_freq[i] = pow(theta, -2.0 * i / dim);
	switch (type) {
	case DS_ROPE_SCALING_NONE:
		break;
	case DS_ROPE_SCALING_LINEAR:
		for (i = 0; i < dim / 2; i++)
			r->inv_freq[i] /= f;
		break;
	case DS_ROPE_SCALING_YARN:
		yarn(r, theta, hp);
		break;
	case DS_ROPE_SCALING_LLAMA3:
		llama3(r, hp);
		break;
	}
	return 0;
}

double ds_rope_attn_scale(const ds_hparams *hp)
{
	double m;

	if (hp->rope_scaling.type != DS_ROPE_SCALING_YARN)
		return 1;
	m = yarn_mscale(hp->rope_scaling.factor, hp->rope_scaling.mscale_all_dim);
	return m * m;
}

struct rope_job {
	ds_ctx *c;
	const ds_rope *r;
	float *x;
	size_t ldx, nh, hs, pos0;
	const int32_t *pos;
};

void ds_rope_table(const ds_rope *r, double p, float *cs)
{
	size_t i, half = r->dim / 2;

	for (i = 0; i < half; i++) {
		double a = p * r->inv_freq[i];

		cs[i] = (float)(cos(a) * r->attn_factor);
		cs[half + i] = (float)(sin(a) * r->attn_factor);
	}
}

static void rope_rows(void *arg, size_t r0, size_t r1, int ith)
{
	struct rope_job *j = arg;
	float *cs = ops_thr(j->c, ith);
	size_t t;

	for (t = r0; t < r1; t++) {
		ds_rope_table(j->r, j->pos ? (double)j->pos[t] : (double)(j->pos0 + t), cs);
		j->c->kern->rope(j->x + t * j->ldx, j->nh, j->hs, j->r->dim, cs, j->r->style);
	}
}

void ds_rope_apply(ds_ctx *c, const ds_rope *r, float *x, size_t ldx,
		   size_t t, size_t nh, size_t hs, const int32_t *pos,
		   size_t pos0)
{
	struct rope_job j = {
		.c = c, .r = r, .x = x, .ldx = ldx ? ldx : nh * hs, .nh = nh,
		.hs = hs, .pos0 = pos0, .pos = pos
	};

	DS_ASSERT(r->dim <= c->cfg.max_rope && r->dim <= hs);
	ops_rows(c, t, nh * r->dim * 4, rope_rows, &j);
}

/* ---- KV cache -------------------------------------------------------------------- */

struct kv_job {
	ds_ctx *c;
	const ds_kv *kv;
	const float *x;
	size_t ldx, hs, nh, pos0;
};

static void kv_rows(void *arg, size_t r0, size_t r1, int ith)
{
	struct kv_job *j = arg;
	size_t t, h;

	(void)ith;
	for (t = r0; t < r1; t++)
		for (h = 0; h < j->nh; h++)
			j->c->kern->kv_store(j->kv->type, j->x + t * j->ldx + h * j->hs, j->kv->dim,
					     j->kv->data + (j->pos0 + t) * j->kv->ld +
					     h * j->kv->head_stride);
}

void ds_kv_write(ds_ctx *c, const ds_kv *kv, const float *x, size_t ldx,
		 size_t hs, size_t nh, size_t t, size_t pos0)
{
	struct kv_job j = {
		.c = c, .kv = kv, .x = x, .ldx = ldx ? ldx : nh * hs, .hs = hs,
		.nh = nh, .pos0 = pos0
	};

	DS_ASSERT(kv->type != DS_KV_Q8 || kv->dim % DS_QBLOCK == 0);
	ops_rows(c, t, nh * kv->dim, kv_rows, &j);
}

/* ---- attention ---------------------------------------------------------------------- */

struct attn_job {
	ds_ctx *c;
	const ds_attn *a;
	size_t t, g, sub, per;      /* g heads per KV head, in `sub` parts of `per` */
	size_t ntb;                 /* MHA: blocks of DS_ATTN_TOKENS tokens, else 0 */
	const ds_attn_rows *in;     /* ds_attention_rows: the rows' last steps */
};

/* Unit u = (token, KV head, part of its query heads); units are dealt
 * round-robin, so the long (late) and short (early) causal rows mix. */
static void attn_unit(const struct attn_job *j, size_t u, float *scratch)
{
	const ds_attn *a = j->a;
	size_t part = u % j->sub, kvh = u / j->sub % a->n_kv_head, t = u / j->sub / a->n_kv_head;
	size_t h0 = kvh * j->g + part * j->per;
	size_t nq = part * j->per + j->per <= j->g ? j->per : j->g - part * j->per;
	ds_attn_job w = { .diag = 0, .ml = NULL };

	w.q = a->q + t * a->q_ld + h0 * a->q_hs;
	w.q_ld = a->q_hs;
	w.g = nq;
	w.k = (ds_kview){ a->k.type, a->k.data + kvh * a->k.head_stride, a->k.ld, a->k.dim };
	w.v = (ds_kview){ a->v.type, a->v.data + kvh * a->v.head_stride, a->v.ld, a->v.dim };
	w.n = a->pos0 + t + 1;
	w.scale = a->scale;
	w.o = a->o + t * a->o_ld + h0 * a->o_hs;
	w.o_ld = a->o_hs;
	j->c->kern->attn(&w, scratch);
}

/* MHA unit u = (head, block of DS_ATTN_TOKENS tokens): the block's
 * tokens as the kernel's causal rows against the head's keys, so each key
 * row read serves them all.  Over a block of keys (ds_attn k0, nk) the
 * tokens before it are left out (they see none of it), and the last
 * block divides every token's outputs by its sum. */
static void attn_tokens(const struct attn_job *j, size_t u, float *scratch)
{
	const ds_attn *a = j->a;
	size_t h = u / j->ntb, t0 = u % j->ntb * DS_ATTN_TOKENS, t;
	size_t t1 = t0 + DS_ATTN_TOKENS < j->t ? t0 + DS_ATTN_TOKENS : j->t;
	size_t end = a->nk ? a->k0 + a->nk : SIZE_MAX, ta = t0;
	size_t seen = a->pos0 + t1 < end ? a->pos0 + t1 : end;
	ds_attn_job w = {
		.k = { a->k.type, a->k.data + h * a->k.head_stride, a->k.ld, a->k.dim },
		.v = { a->v.type, a->v.data + h * a->v.head_stride, a->v.ld, a->v.dim },
		.scale = a->scale, .q_ld = a->q_ld, .o_ld = a->o_ld,
		.ml_ld = a->n_head * 2, .first = a->k0 == 0,
	};

	if (a->pos0 + ta < a->k0)
		ta = a->k0 - a->pos0;
	if (ta < t1) {
		w.q = a->q + ta * a->q_ld + h * a->q_hs;
		w.o = a->o + ta * a->o_ld + h * a->o_hs;
		w.g = t1 - ta;
		w.n = seen - a->k0;
		w.diag = a->pos0 + ta + 1 - a->k0;
		w.ml = a->ml ? a->ml + (ta * a->n_head + h) * 2 : NULL;
		j->c->kern->attn(&w, scratch);
	}
	for (t = t0; a->ml && a->last && t < t1; t++) {
		float *o = a->o + t * a->o_ld + h * a->o_hs;
		float c = 1.0f / a->ml[(t * a->n_head + h) * 2 + 1];
		size_t i;

		for (i = 0; i < a->v.dim; i++)
			o[i] *= c;
	}
}

/* One row unit of token t: query head h < nh roped, or key head h - nh
 * roped and its key and value rows written to the cache (cs: the RoPE
 * table of the token's position). */
static void row_unit(const struct attn_job *j, size_t t, size_t h, const float *cs)
{
	const ds_attn *a = j->a;
	const ds_attn_rows *in = j->in;
	const ds_kernels *K = j->c->kern;
	size_t nh = a->n_head, ld = in->ld ? in->ld : a->n_kv_head * in->hs, p = a->pos0 + t;
	float *kr;

	if (h < nh) {
		if (in->rope)
			K->rope(in->q + t * a->q_ld + h * a->q_hs, 1, a->q_hs, in->rope->dim, cs,
				in->rope->style);
		return;
	}
	h -= nh;
	kr = in->k + t * ld + h * in->hs;
	if (in->rope)
		K->rope(kr, 1, in->hs, in->rope->dim, cs, in->rope->style);
	K->kv_store(a->k.type, kr, a->k.dim, a->k.data + p * a->k.ld + h * a->k.head_stride);
	K->kv_store(a->v.type, in->v + t * ld + h * in->hs, a->v.dim,
		    a->v.data + p * a->v.ld + h * a->v.head_stride);
}

/* ds_attention_rows' first phase: units (token, head) of the query heads
 * then the key heads, split over the threads. */
static void attn_rows(const struct attn_job *j, int ith, int nth)
{
	size_t nh = j->a->n_head, nkv = j->a->n_kv_head, b, e, u, row = SIZE_MAX;
	float *cs = ops_thr(j->c, ith);

	ds_split(j->t * (nh + nkv), ith, nth, &b, &e);
	for (u = b; u < e; u++) {
		size_t t = u / (nh + nkv);

		if (j->in->rope && t != row)
			ds_rope_table(j->in->rope, (double)(j->a->pos0 + t), cs);
		row = t;
		row_unit(j, t, u % (nh + nkv), cs);
	}
}

/* Decode with whole KV heads per unit: each thread ropes and caches the
 * rows of the KV heads it attends with (its query heads and the key
 * head), then attends; no thread waits for another. */
static void attn_own(const struct attn_job *j, int ith, int nth)
{
	size_t nkv = j->a->n_kv_head, kvh, h;
	float *scratch = ops_thr(j->c, ith);
	const float *cs = j->in->cs ? j->in->cs : scratch;

	if ((size_t)ith >= nkv)
		return;
	if (j->in->rope && j->in->cs == NULL)
		ds_rope_table(j->in->rope, (double)j->a->pos0, scratch);
	for (kvh = (size_t)ith; kvh < nkv; kvh += (size_t)nth) {
		for (h = kvh * j->g; h < (kvh + 1) * j->g; h++)
			row_unit(j, 0, h, cs);
		row_unit(j, 0, j->a->n_head + kvh, cs);
	}
	for (kvh = (size_t)ith; kvh < nkv; kvh += (size_t)nth)
		attn_unit(j, kvh, scratch);
}

static void attn_fn(void *arg, int ith, int nth)
{
	struct attn_job *j = arg;
	size_t units = j->ntb ? j->ntb * j->a->n_head : j->t * j->a->n_kv_head * j->sub, u;
	float *scratch = ops_thr(j->c, ith);

	if (j->in && j->t == 1 && j->sub == 1) {
		attn_own(j, ith, nth);
		return;
	}
	if (j->in) {
		attn_rows(j, ith, nth);
		ds_pool_barrier(j->c->pool);
	}
	for (u = (size_t)ith; u < units; u += (size_t)nth) {
		if (j->ntb)
			attn_tokens(j, u, scratch);
		else
			attn_unit(j, u, scratch);
	}
}

static void attention(ds_ctx *c, const ds_attn *a, const ds_attn_rows *in, size_t t)
{
	struct attn_job j = { .c = c, .a = a, .t = t, .sub = 1, .in = in };
	size_t nth = (size_t)ds_pool_threads(c->pool), base = t * a->n_kv_head;

	DS_ASSERT(a->n_kv_head > 0 && a->n_head % a->n_kv_head == 0);
	DS_ASSERT(a->k.dim <= c->cfg.max_head && a->v.dim <= c->cfg.max_head);
	j.g = a->n_head / a->n_kv_head;
	DS_ASSERT(j.g <= c->cfg.max_group);
	DS_ASSERT(a->ml == NULL || (j.g == 1 && a->k0 % DS_ATTN_CHUNK == 0));
	/* MHA over several tokens: blocks of tokens per unit (attn_tokens) */
	if (j.g == 1 && (t > 1 || a->ml != NULL) && c->cfg.max_group >= DS_ATTN_TOKENS) {
		j.ntb = (t + DS_ATTN_TOKENS - 1) / DS_ATTN_TOKENS;
		ops_run(c, attn_fn, &j);
		return;
	}
	/* too few units for the threads (decode with few KV heads, MLA):
	 * split a KV head's query heads; each part reads the rows again */
	if (base < 2 * nth)
		j.sub = (2 * nth + base - 1) / base < j.g ? (2 * nth + base - 1) / base : j.g;
	j.per = (j.g + j.sub - 1) / j.sub;
	j.sub = (j.g + j.per - 1) / j.per;
	ops_run(c, attn_fn, &j);
}

void ds_attention(ds_ctx *c, const ds_attn *a, size_t t)
{
	attention(c, a, NULL, t);
}

void ds_attention_rows(ds_ctx *c, const ds_attn *a, const ds_attn_rows *in,
		       size_t t)
{
	DS_ASSERT(in->q == a->q && in->hs >= a->k.dim && in->hs >= a->v.dim);
	DS_ASSERT(in->rope == NULL || (in->rope->dim <= c->cfg.max_rope &&
				       in->rope->dim <= in->hs && in->rope->dim <= a->q_hs));
	DS_ASSERT(a->k.type != DS_KV_Q8 || (a->k.dim % DS_QBLOCK == 0 && a->v.dim % DS_QBLOCK == 0));
	attention(c, a, in, t);
}

/* ---- MHA over packed blocks of keys ---------------------------------------------- */

struct blk_job {
	ds_ctx *c;
	const ds_attn_pk *a;
	size_t t, ntb;              /* tokens, their tiles of DS_ATTN_TOKENS */
};

/* Unit u = (head, tile of DS_ATTN_TOKENS tokens) against the head's
 * block; the tile's tokens before the block are left out. */
static void blk_unit(const struct blk_job *j, size_t u, float *scratch)
{
	const ds_attn_pk *a = j->a;
	size_t h = u / j->ntb, t0 = u % j->ntb * DS_ATTN_TOKENS, t;
	size_t t1 = t0 + DS_ATTN_TOKENS < j->t ? t0 + DS_ATTN_TOKENS : j->t;
	size_t ta = a->pos0 + t0 < a->k0 ? a->k0 - a->pos0 : t0;
	ds_attn_blk w = {
		.q_ld = a->q_ld, .k = a->k8 ? NULL : a->k + h * a->k_hs, .v = a->v + h * a->v_hs,
		.kd = a->kd, .vd = a->vd, .nk = a->nk, .scale = a->scale,
		.o_ld = a->o_ld, .ml_ld = a->n_head * 2, .first = a->k0 == 0,
	};

	if (ta < t1) {
		if (a->k8) {
			w.k8 = a->k8 + h * a->k8_hs;
			w.q8 = a->q8 + ta * a->q8_ld + h * a->q8_hs;
			w.q8_ld = a->q8_ld;
			w.kb = a->kb;
		} else {
			w.q = a->q + ta * a->q_ld + h * a->q_hs;
		}
		w.nt = t1 - ta;
		w.o = a->o + ta * a->o_ld + h * a->o_hs;
		w.ml = a->ml + (ta * a->n_head + h) * 2;
		w.diag = a->pos0 + ta + 1 - a->k0;
		j->c->kern->attn_blk(&w, scratch);
	}
	for (t = t0; a->last && t < t1; t++) {
		float *o = a->o + t * a->o_ld + h * a->o_hs;
		float c = 1.0f / a->ml[(t * a->n_head + h) * 2 + 1];
		size_t i;

		for (i = 0; i < a->vd; i++)
			o[i] *= c;
	}
}

static void blk_fn(void *arg, int ith, int nth)
{
	struct blk_job *j = arg;
	float *scratch = ops_thr(j->c, ith);
	size_t u;

	for (u = (size_t)ith; u < j->ntb * j->a->n_head; u += (size_t)nth)
		blk_unit(j, u, scratch);
}

void ds_attention_blk(ds_ctx *c, const ds_attn_pk *a, size_t t)
{
	struct blk_job j = { .c = c, .a = a, .t = t,
			     .ntb = (t + DS_ATTN_TOKENS - 1) / DS_ATTN_TOKENS };

	DS_ASSERT(a->nk >= 1 && a->nk <= DS_ATTN_BLK && a->q_ld % 2 == 0 && a->q_hs % 2 == 0);
	ops_run(c, blk_fn, &j);
}

/* ---- packing a block of keys ------------------------------------------------- */

struct pack_job {
	ds_ctx *c;
	const ds_attn_src *s;
	size_t ng;                  /* groups of 16 keys */
};

/* n rows of w floats (src, ld apart) rounded to bf16 into dst, rows of
 * w rounded up to 32 (bf16_row's whole vectors). */
static void pack_rows(const ds_kernels *K, const float *src, size_t ld, size_t n,
		      size_t w, uint16_t *dst)
{
	size_t j;

	for (j = 0; j < n; j++)
		K->bf16_row(src + j * ld, w, ds_round_up(w, 32), NULL, NULL, 1.0f,
			    dst + j * ds_round_up(w, 32));
}

/* A row [a | b] (na, nb floats) in int8, each part by quant_row in
 * blocks of 32 (kernels.h K8, Q8): kb blocks of values q, their scales
 * d and sums sd. */
static void quant_parts(const ds_kernels *K, const float *a, size_t na, const float *b,
			size_t nb, int8_t *q, float *d, float *sd)
{
	size_t ba = ds_round_up(na, 32) / 32;

	K->quant_row(a, na, ba * 32, NULL, NULL, 1.0f, q, d, sd);
	if (nb)
		K->quant_row(b, nb, ds_round_up(nb, 32), NULL, NULL, 1.0f, q + ba * 32, d + ba,
			     sd + ba);
}

/* Rows r0 .. r1-1 of [a | b] as Q8 rows. */
void ds_attn_quant_q(const ds_kernels *K, const float *x, size_t ld, size_t na, size_t nb,
		     int8_t *q8, size_t q8_ld, size_t r0, size_t r1)
{
	size_t kb = ds_round_up(na, 32) / 32 + ds_round_up(nb, 32) / 32, r;

	for (r = r0; r < r1; r++) {
		int8_t *q = q8 + r * q8_ld;
		float *d = (float *)(void *)(q + kb * 32);

		quant_parts(K, x + r * ld, na, x + r * ld + na, nb, q, d, d + kb);
	}
}

/* The keys j0 .. j0+nj-1 of head h in int8 into the K8 block, their rows
 * quantized in the thread's scratch (tq). */
static void pack_k8(const ds_kernels *K, const ds_attn_src *s, size_t h, size_t j0, size_t nj,
		    int8_t *tq)
{
	size_t kb = ds_round_up(s->na, 32) / 32 + ds_round_up(s->nb, 32) / 32, j;
	float *d = (float *)(void *)(tq + 16 * kb * 32), *sd = d + 16 * kb;

	for (j = 0; j < nj; j++)
		quant_parts(K, s->ka + (j0 + j) * s->ka_ld + h * s->ka_hs, s->na,
			    s->kb + (j0 + j) * s->kb_ld, s->nb, tq + j * kb * 32, d + j * kb,
			    sd + j * kb);
	ds_attn_pack_k8(s->k8 + h * s->k8_hs, kb, s->n, j0, nj, 0, kb, tq, kb * 32, d, kb);
}

/* Unit u = (head, group of 16 keys): the rows rounded in the thread's
 * scratch, then laid out. */
static void pack_unit(const struct pack_job *j, size_t u, uint16_t *tmp)
{
	const ds_attn_src *s = j->s;
	const ds_kernels *K = j->c->kern;
	size_t h = u / j->ng, j0 = u % j->ng * 16, nj = s->n - j0 < 16 ? s->n - j0 : 16;
	size_t la = ds_round_up(s->na, 32), lb = ds_round_up(s->nb, 32), lv = ds_round_up(s->vd, 32);
	size_t kd = s->na + s->nb;
	uint16_t *ta = tmp, *tb = ta + 16 * la, *tv = tb + 16 * lb;

	if (s->k8) {
		pack_k8(K, s, h, j0, nj, (int8_t *)(void *)ta);
	} else {
		pack_rows(K, s->ka + j0 * s->ka_ld + h * s->ka_hs, s->ka_ld, nj, s->na, ta);
		ds_attn_pack_k(s->k + h * s->k_hs, kd, s->n, j0, nj, 0, s->na, ta, la);
	}
	if (s->nb && !s->k8) {
		pack_rows(K, s->kb + j0 * s->kb_ld, s->kb_ld, nj, s->nb, tb);
		ds_attn_pack_k(s->k + h * s->k_hs, kd, s->n, j0, nj, s->na, s->nb, tb, lb);
	}
	pack_rows(K, s->va + j0 * s->va_ld + h * s->va_hs, s->va_ld, nj, s->vd, tv);
	ds_attn_pack_v(s->v + h * s->v_hs, s->vd, j0, nj, tv, lv);
}

static void pack_fn(void *arg, int ith, int nth)
{
	struct pack_job *j = arg;
	uint16_t *tmp = ops_thr(j->c, ith);
	size_t b, e, u;

	ds_split(j->ng * j->s->n_head, ith, nth, &b, &e);
	for (u = b; u < e; u++)
		pack_unit(j, u, tmp);
}

void ds_attn_pack(ds_ctx *c, const ds_attn_src *s)
{
	struct pack_job j = { .c = c, .s = s, .ng = (s->n + 15) / 16 };
	size_t w = ds_round_up(s->na, 32) + ds_round_up(s->nb, 32) + ds_round_up(s->vd, 32);

	DS_ASSERT(s->n >= 1 && s->n <= DS_ATTN_BLK && s->na % 2 == 0 &&
		  w <= c->thr_bytes / 16 / sizeof(uint16_t));
	ops_run(c, pack_fn, &j);
}

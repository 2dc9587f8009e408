/*
 * scalar.c - the reference for every kernel in kernels.h: plain C, no
 * target flags, written to be read.  Integer dot products are exact;
 * float sums are carried in double, so this is also the most accurate
 * evaluation of each kernel's definition.  The SIMD files are held to it.
 */
#include <math.h>
#include <string.h>

#include "kernels.h"

/* ---- weight access (ds-model(5); ds_dequant_row is the definition) ------ */

/* input k of lane r in a group's weights at gw (k from the group's start) */
static inline int q4_at(const uint8_t *gw, size_t r, size_t k)
{
	uint8_t b = gw[64 * (k / 8) + 4 * r + (k & 3)];

	return (k & 4) ? b >> 4 : b & 15;
}

static inline int q8_at(const uint8_t *gw, size_t r, size_t k)
{
	return gw[64 * (k / 4) + 4 * r + (k & 3)];
}

static inline float bf16_at(const uint8_t *rs, size_t r, size_t k)
{
	const uint16_t *p = (const uint16_t *)rs;

	return ds_bf16_to_f32(p[(k / 2) * 32 + 2 * r + (k & 1)]);
}

static inline float f16_scale(const uint8_t *p, size_t i)
{
	return ds_f16_to_f32(((const uint16_t *)p)[i]);
}

/* ---- matrix products ------------------------------------------------------ */

/* q4 and q8 share the arithmetic: w = S (u - Z) per group, u the stored
 * unsigned integer; x = d q per block of 32. */
static double qrow_dot(const ds_mat *w, const uint8_t *rs, size_t r,
		       const int8_t *q, const float *d, const float *s)
{
	size_t kp = w->kp, g = w->type.group, ng = kp / g, gi, b, i;
	int is4 = w->type.dt == DS_Q4;
	double acc = 0;

	for (gi = 0; gi < ng; gi++) {
		const uint8_t *gw = rs + ds_qgrp_w(is4, g, ng, gi);
		double a = 0, bs = 0;
		int z = is4 ? rs[ds_qgrp_z(g, ng, gi) + r] : 128;

		for (b = gi * g / DS_QBLOCK; b < (gi + 1) * g / DS_QBLOCK; b++) {
			int32_t dot = 0;

			for (i = 32 * b; i < 32 * b + 32; i++)
				dot += (is4 ? q4_at(gw, r, i - gi * g) : q8_at(gw, r, i - gi * g)) * q[i];
			a += (double)dot * d[b];
			bs += s[b];
		}
		acc += (double)f16_scale(rs + ds_qgrp_s(is4, g, gi), r) * (a - z * bs);
	}
	return acc;
}

static void mm_q(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		 size_t rs0, size_t rs1)
{
	size_t rs, r, t;

	for (rs = rs0; rs < rs1; rs++) {
		const uint8_t *p = w->data + rs * w->rs_bytes;

		for (r = 0; r < DS_ROWSET && rs * DS_ROWSET + r < w->n; r++)
			for (t = 0; t < x->t; t++)
				y[t * ldy + rs * DS_ROWSET + r] = (float)qrow_dot(
					w, p, r, x->q + t * x->ldq,
					x->qd + t * (x->ldq / DS_QBLOCK),
					x->qs + t * (x->ldq / DS_QBLOCK));
	}
}

static void mm_bf16(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		    size_t rs0, size_t rs1)
{
	size_t rs, r, t, i;

	for (rs = rs0; rs < rs1; rs++) {
		const uint8_t *p = w->data + rs * w->rs_bytes;

		for (r = 0; r < DS_ROWSET && rs * DS_ROWSET + r < w->n; r++)
			for (t = 0; t < x->t; t++) {
				const uint16_t *xb = x->b + t * x->ldq;
				double acc = 0;

				for (i = 0; i < w->kp; i++)
					acc += (double)bf16_at(p, r, i) *
					       ds_bf16_to_f32(xb[i]);
				y[t * ldy + rs * DS_ROWSET + r] = (float)acc;
			}
	}
}

static void mm_rowmajor(const ds_mat *w, const ds_act *x, float *y,
			size_t ldy, size_t rs0, size_t rs1)
{
	size_t n, n1 = rs1 * DS_ROWSET < w->n ? rs1 * DS_ROWSET : w->n, t, i;

	for (n = rs0 * DS_ROWSET; n < n1; n++)
		for (t = 0; t < x->t; t++) {
			const float *xr = x->f + t * x->ldf;
			double acc = 0;

			for (i = 0; i < w->k; i++) {
				float wv;

				if (w->type.dt == DS_F32)
					memcpy(&wv, w->data + 4 * (n * w->k + i), 4);
				else
					wv = ds_f16_to_f32(((const uint16_t *)w->data)[n * w->k + i]);
				acc += (double)wv * xr[i];
			}
			y[t * ldy + n] = (float)acc;
		}
}

/* ---- activation preparation -------------------------------------------- */

static inline float act_in(const float *x, size_t i, const int32_t *perm,
			   const float *nw, float nscale)
{
	size_t p = perm ? (size_t)perm[i] : i;
	float v = x[p] * nscale;

	return nw ? v * nw[p] : v;
}

static void quant_row(const float *x, size_t k, size_t kp,
		      const int32_t *perm, const float *nw, float nscale,
		      int8_t *q, float *d, float *s)
{
	size_t b, i;

	for (b = 0; b < kp / DS_QBLOCK; b++) {
		float v[DS_QBLOCK], amax = 0, id;
		int sum = 0;

		for (i = 0; i < DS_QBLOCK; i++) {
			size_t j = b * DS_QBLOCK + i;

			v[i] = j < k ? act_in(x, j, perm, nw, nscale) : 0.0f;
			amax = fabsf(v[i]) > amax ? fabsf(v[i]) : amax;
		}
		id = amax > 0 ? 127.0f / amax : 0.0f;
		for (i = 0; i < DS_QBLOCK; i++) {
			float r = nearbyintf(v[i] * id);
			int qi = r > 127 ? 127 : r < -127 ? -127 : (int)r;

			q[b * DS_QBLOCK + i] = (int8_t)qi;
			sum += qi;
		}
		d[b] = amax / 127.0f;
		s[b] = d[b] * (float)sum;
	}
}

static void bf16_row(const float *x, size_t k, size_t kp,
		     const int32_t *perm, const float *nw, float nscale,
		     uint16_t *out)
{
	size_t i;

	for (i = 0; i < kp; i++)
		out[i] = i < k ? ds_f32_to_bf16(act_in(x, i, perm, nw, nscale)) : 0;
}

static float sumsq(const float *x, size_t n)
{
	double s = 0;
	size_t i;

	for (i = 0; i < n; i++)
		s += (double)x[i] * x[i];
	return (float)s;
}

/* ---- element-wise ---------------------------------------------------------- */

static void rmsnorm(const float *x, const float *w, size_t n, float eps,
		    float *y)
{
	float r = (float)(1.0 / sqrt((double)sumsq(x, n) / (double)n + eps));
	size_t i;

	for (i = 0; i < n; i++)
		y[i] = x[i] * r * w[i];
}

static void softmax(float *x, size_t n)
{
	float m = x[0];
	double sum = 0;
	size_t i;

	for (i = 1; i < n; i++)
		m = x[i] > m ? x[i] : m;
	for (i = 0; i < n; i++) {
		x[i] = expf(x[i] - m);
		sum += x[i];
	}
	for (i = 0; i < n; i++)
		x[i] = (float)(x[i] / sum);
}

static void silu_mul(const float *g, const float *u, size_t n, float *h)
{
	size_t i;

	for (i = 0; i < n; i++)
		h[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void add(const float *a, const float *b, size_t n, float *y)
{
	size_t i;

	for (i = 0; i < n; i++)
		y[i] = a[i] + b[i];
}

static void axpy(float a, const float *x, size_t n, float *y)
{
	size_t i;

	for (i = 0; i < n; i++)
		y[i] += a * x[i];
}

static void rope(float *x, size_t nh, size_t hs, size_t dim, const float *cs,
		 enum ds_rope_style style)
{
	size_t h, i, half = dim / 2;

	for (h = 0; h < nh; h++) {
		float *p = x + h * hs;

		for (i = 0; i < half; i++) {
			size_t i0 = style == DS_ROPE_NEOX ? i : 2 * i;
			size_t i1 = style == DS_ROPE_NEOX ? i + half : 2 * i + 1;
			float a = p[i0], b = p[i1], c = cs[i], s = cs[half + i];

			p[i0] = a * c - b * s;
			p[i1] = a * s + b * c;
		}
	}
}

/* ---- gather, KV cache, attention ------------------------------------------- */

static void dequant_row(const ds_mat *w, uint64_t row, float *out)
{
	ds_dequant_row(w->type, w->data, w->k, row, out);
}

static void kv_store(enum ds_kvtype t, const float *x, size_t n, void *dst)
{
	uint8_t *p = dst;
	size_t i;

	switch (t) {
	case DS_KV_F32:
		memcpy(p, x, 4 * n);
		break;
	case DS_KV_F16:
	case DS_KV_BF16:
		for (i = 0; i < n; i++) {
			uint16_t h = t == DS_KV_F16 ? ds_f32_to_f16(x[i])
						    : ds_f32_to_bf16(x[i]);
			memcpy(p + 2 * i, &h, 2);
		}
		break;
	case DS_KV_Q8:
		for (i = 0; i < n / DS_QBLOCK; i++) {
			float d, s;

			quant_row(x + i * DS_QBLOCK, DS_QBLOCK, DS_QBLOCK, NULL,
				  NULL, 1.0f, (int8_t *)p + 36 * i + 4, &d, &s);
			memcpy(p + 36 * i, &d, 4);
		}
		break;
	}
}

/* Value j of a cache row. */
static float kv_at(enum ds_kvtype t, const uint8_t *row, size_t j)
{
	uint16_t h;
	float f;

	switch (t) {
	case DS_KV_F32:
		memcpy(&f, row + 4 * j, 4);
		return f;
	case DS_KV_F16:
		memcpy(&h, row + 2 * j, 2);
		return ds_f16_to_f32(h);
	case DS_KV_BF16:
		memcpy(&h, row + 2 * j, 2);
		return ds_bf16_to_f32(h);
	case DS_KV_Q8:
		memcpy(&f, row + 36 * (j / 32), 4);
		return f * (float)(int8_t)row[36 * (j / 32) + 4 + j % 32];
	}
	return 0;
}

static float kv_score(const ds_attn_job *a, const float *q, size_t j)
{
	const uint8_t *kr = a->k.data + j * a->k.ld;
	double dot = 0;
	size_t i;

	for (i = 0; i < a->k.dim; i++)
		dot += (double)q[i] * kv_at(a->k.type, kr, i);
	return (float)(dot * a->scale);
}

static void kv_load(enum ds_kvtype t, const void *src, size_t n, float *out)
{
	size_t i;

	for (i = 0; i < n; i++)
		out[i] = kv_at(t, src, i);
}

/* The keys row h sees: n, or fewer for causal rows (ds_attn_job.diag). */
static size_t attn_lim(const ds_attn_job *a, size_t h)
{
	return a->diag && a->diag + h < a->n ? a->diag + h : a->n;
}

/* One row: two passes over its keys, the maximum score, then the
 * exponentials and the weighted sum of values; over a block of keys
 * (ds_attn_job.ml) the carried maximum and sum rescaled to the block's. */
static void attn_row(const ds_attn_job *a, size_t h)
{
	const float *q = a->q + h * a->q_ld;
	float *o = a->o + h * a->o_ld, *ml = a->ml ? a->ml + h * a->ml_ld : NULL;
	int carry = ml != NULL && !a->first;
	float m = carry ? ml[0] : -INFINITY, corr;
	double l = carry ? ml[1] : 0;
	size_t n = attn_lim(a, h), j, i;

	for (j = 0; j < n; j++) {
		float s = kv_score(a, q, j);

		m = s > m ? s : m;
	}
	if (!carry)
		memset(o, 0, a->v.dim * sizeof *o);
	corr = carry ? expf(ml[0] - m) : 0;
	l *= corr;
	for (i = 0; carry && i < a->v.dim; i++)
		o[i] *= corr;
	for (j = 0; j < n; j++) {
		const uint8_t *vr = a->v.data + j * a->v.ld;
		float p = expf(kv_score(a, q, j) - m);

		l += p;
		for (i = 0; i < a->v.dim; i++)
			o[i] += p * kv_at(a->v.type, vr, i);
	}
	if (ml != NULL) {
		ml[0] = m;
		ml[1] = (float)l;
		return;
	}
	for (i = 0; i < a->v.dim; i++)
		o[i] = (float)(o[i] / l);
}

static void attn(const ds_attn_job *a, float *scratch)
{
	size_t h;

	(void)scratch;
	for (h = 0; h < a->g; h++)
		attn_row(a, h);
}

/* ---- MHA over a packed block (ds_attn_blk) ------------------------------------ */

/* Value i of key j of a packed K, of a packed V. */
static float blk_k(const ds_attn_blk *a, size_t j, size_t i)
{
	size_t kp2 = a->kd / 2 + a->kd % 2;

	return ds_bf16_to_f32(a->k[((j / 16 * kp2 + i / 2) * 16 + j % 16) * 2 + i % 2]);
}

static float blk_v(const ds_attn_blk *a, size_t j, size_t d)
{
	size_t vdp = (a->vd + 15) / 16 * 16;

	return ds_bf16_to_f32(a->v[(j / 2 * vdp + d) * 2 + j % 2]);
}

/* The score of row t and key j in bf16. */
static float blk_s16(const ds_attn_blk *a, size_t t, size_t j)
{
	const uint16_t *q = a->q + t * a->q_ld;
	double d = 0;
	size_t i;

	for (i = 0; i < a->kd; i++)
		d += (double)ds_bf16_to_f32(q[i]) * blk_k(a, j, i);
	return (float)d * a->scale;
}

/* The score of row t and key j in int8 (kernels.h's K8 and Q8). */
static float blk_s8(const ds_attn_blk *a, size_t t, size_t j)
{
	const int8_t *q = a->q8 + t * a->q8_ld;
	const float *dq = (const float *)(const void *)(q + a->kb * 32), *sd = dq + a->kb;
	const uint8_t *g = a->k8 + j / 16 * a->kb * DS_ATTN_Q8_BYTES;
	double s = 0;
	size_t b, i;

	for (b = 0; b < a->kb; b++) {
		const uint8_t *blk = g + b * DS_ATTN_Q8_BYTES;
		int32_t acc = 0;
		float dk;

		for (i = 0; i < 32; i++)
			acc += (int32_t)blk[i / 4 * 64 + j % 16 * 4 + i % 4] * q[b * 32 + i];
		memcpy(&dk, blk + 512 + j % 16 * 4, 4);
		s += (double)dk * ((double)dq[b] * acc - 128.0 * sd[b]);
	}
	return (float)s * a->scale;
}

/* Row t: the scores into s, the carried maximum and sum rescaled, the
 * weights rounded to bf16 as the definition (kernels.h) has them. */
static void blk_row(const ds_attn_blk *a, size_t t, float *s)
{
	float *o = a->o + t * a->o_ld, *ml = a->ml + t * a->ml_ld;
	size_t n = a->diag && a->diag + t < a->nk ? a->diag + t : a->nk, j, i;
	float m = a->first ? -INFINITY : ml[0], c;
	double l = a->first ? 0 : ml[1];

	for (j = 0; j < n; j++) {
		s[j] = a->k8 ? blk_s8(a, t, j) : blk_s16(a, t, j);
		m = s[j] > m ? s[j] : m;
	}
	c = a->first ? 0 : expf(ml[0] - m);
	for (i = 0; i < a->vd; i++)
		o[i] = a->first ? 0 : o[i] * c;
	l *= c;
	for (j = 0; j < n; j++) {
		float p = ds_bf16_to_f32(ds_f32_to_bf16(expf(s[j] - m)));

		l += p;
		for (i = 0; i < a->vd; i++)
			o[i] += p * blk_v(a, j, i);
	}
	ml[0] = m;
	ml[1] = (float)l;
}

static void attn_blk(const ds_attn_blk *a, float *scratch)
{
	size_t t;

	for (t = 0; t < a->nt; t++)
		blk_row(a, t, scratch);
}

/* ---- probes ------------------------------------------------------------------- */

static uint64_t read_probe(const uint8_t *p, size_t n)
{
	uint64_t a = 0, b = 0, c = 0, d = 0, v[4];
	size_t i;

	for (i = 0; i < n; i += 32) {
		memcpy(v, p + i, 32);
		a += v[0];
		b += v[1];
		c += v[2];
		d += v[3];
	}
	return a ^ b ^ c ^ d;
}

static uint64_t peak_probe(int kind, uint64_t iters)
{
	float f[8] = { 0 };
	int32_t s[8] = { 0 };
	uint64_t i;
	int j;

	for (i = 0; i < iters; i++)
		for (j = 0; j < 8; j++) {
			if (kind == DS_PEAK_INT8)
				s[j] += (int32_t)(i & 7) * j;
			else
				f[j] += (float)j * 1.0001f;
		}
	__asm__ volatile("" : : "r"(f), "r"(s) : "memory");
	return iters * 8;
}

void ds_kernels_fill_scalar(ds_kernels *k)
{
	k->name = "scalar";
	k->isa = DS_ISA_SCALAR;
	k->mm_rows = 12;
	k->mm[DS_F32] = mm_rowmajor;
	k->mm[DS_F16] = mm_rowmajor;
	k->mm[DS_BF16] = mm_bf16;
	k->mm[DS_Q8] = mm_q;
	k->mm[DS_Q4] = mm_q;
	k->mm[DS_I32] = NULL;
	k->quant_row = quant_row;
	k->bf16_row = bf16_row;
	k->sumsq = sumsq;
	k->rmsnorm = rmsnorm;
	k->softmax = softmax;
	k->silu_mul = silu_mul;
	k->add = add;
	k->axpy = axpy;
	k->rope = rope;
	k->dequant_row = dequant_row;
	k->kv_store = kv_store;
	k->kv_load = kv_load;
	k->attn = attn;
	k->attn_blk = attn_blk;
	k->read_probe = read_probe;
	k->peak_probe = peak_probe;
}

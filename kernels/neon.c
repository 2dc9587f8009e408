/*
 * neon.c - AArch64 Advanced SIMD versions of the kernels in scalar.c, for
 * every AArch64 CPU (ARMv8-A; no target flags).  dotprod.c replaces the
 * q4/q8 products with sdot ones where the CPU has FEAT_DotProd, i8mm.c
 * prefill's with smmla and the bf16 ones with bfdot.
 *
 * The weight layouts put 16 output rows in four 128-bit vectors (neon_q.h),
 * so a row-set is four accumulators per activation row and no horizontal
 * sums are needed; f32/f16 weights are row-major (dot products, 4 rows by
 * up to 4 activation rows).  Attention works in register tiles as
 * avx2.c's (8 query-key products at a time, summed by pairwise adds; 4
 * heads by 16 values of the output while the value rows pass).
 */
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "arm.h"

#define Q_SDOT 0
#define Q_BF16 1
#include "neon_q.h"

static void mm_q4(const ds_mat *w, const ds_act *x, float *y, size_t ldy, size_t rs0,
		  size_t rs1)
{
	if (x->t == 1)
		q_vecs(w, x, y, rs0, rs1, 1);
	else
		q_mm_tiles(w, x, y, ldy, rs0, rs1, 1);
}

static void mm_q8(const ds_mat *w, const ds_act *x, float *y, size_t ldy, size_t rs0,
		  size_t rs1)
{
	if (x->t == 1)
		q_vecs(w, x, y, rs0, rs1, 0);
	else
		q_mm_tiles(w, x, y, ldy, rs0, rs1, 0);
}

static void mm_bf16(const ds_mat *w, const ds_act *x, float *y, size_t ldy, size_t rs0,
		    size_t rs1)
{
	bf16_mm(w, x, y, ldy, rs0, rs1);
}

/* ---- f32 / f16, row-major: R rows by TT activation rows ------------------- */

AI float32x4_t load_w4(const uint8_t *base, const int f16, size_t i)
{
	if (f16)
		return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)(const void *)base + i)));
	return vld1q_f32((const float *)(const void *)base + i);
}

static float w_at(const uint8_t *base, int f16, size_t i)
{
	float f;

	if (f16)
		return ds_f16_to_f32(((const uint16_t *)(const void *)base)[i]);
	memcpy(&f, base + 4 * i, 4);
	return f;
}

/* Each output the same steps in every tile: 4-lane FMA chains over the
 * whole vectors, the lanes added, then the tail's products one by one. */
AI void rm_tile(const ds_mat *w, const ds_act *x, size_t n0, size_t t0, float *y,
		size_t ldy, const int f16, const int R, const int TT)
{
	const size_t k = w->k, es = f16 ? 2 : 4, k4 = k / 4 * 4;
	float32x4_t acc[4][4];
	size_t i;
	int r, t;

#pragma GCC unroll 4
	for (r = 0; r < R; r++)
#pragma GCC unroll 4
		for (t = 0; t < TT; t++)
			acc[r][t] = vdupq_n_f32(0);
	for (i = 0; i < k4; i += 4) {
		float32x4_t xv[4];

#pragma GCC unroll 4
		for (t = 0; t < TT; t++)
			xv[t] = vld1q_f32(x->f + (t0 + t) * x->ldf + i);
#pragma GCC unroll 4
		for (r = 0; r < R; r++) {
			float32x4_t wv = load_w4(w->data + (n0 + r) * k * es, f16, i);

#pragma GCC unroll 4
			for (t = 0; t < TT; t++)
				acc[r][t] = vfmaq_f32(acc[r][t], wv, xv[t]);
		}
	}
#pragma GCC unroll 4
	for (r = 0; r < R; r++)
#pragma GCC unroll 4
		for (t = 0; t < TT; t++) {
			const float *xr = x->f + (t0 + t) * x->ldf;
			float s = vaddvq_f32(acc[r][t]);

			for (i = k4; i < k; i++)
				s = fmaf(w_at(w->data + (n0 + r) * k * es, f16, i), xr[i], s);
			y[(t0 + t) * ldy + n0 + r] = s;
		}
}

AI void mm_rowmajor(const ds_mat *w, const ds_act *x, float *y, size_t ldy, size_t rs0,
		    size_t rs1, const int f16)
{
	size_t n = rs0 * DS_ROWSET, n1 = rs1 * DS_ROWSET < w->n ? rs1 * DS_ROWSET : w->n;
	size_t t, r, u;

	for (; n < n1; n += 4)
		for (t = 0; t < x->t; t += 4) {
			size_t nt = x->t - t >= 4 ? 4 : x->t - t;

			if (n1 - n >= 4 && nt == 4)
				rm_tile(w, x, n, t, y, ldy, f16, 4, 4);
			else if (n1 - n >= 4 && nt == 1)
				rm_tile(w, x, n, t, y, ldy, f16, 4, 1);
			else
				for (r = n; r < n1 && r < n + 4; r++)
					for (u = 0; u < nt; u++)
						rm_tile(w, x, r, t + u, y, ldy, f16, 1, 1);
		}
}

static void mm_f32(const ds_mat *w, const ds_act *x, float *y, size_t ldy, size_t rs0,
		   size_t rs1)
{
	mm_rowmajor(w, x, y, ldy, rs0, rs1, 0);
}

static void mm_f16(const ds_mat *w, const ds_act *x, float *y, size_t ldy, size_t rs0,
		   size_t rs1)
{
	mm_rowmajor(w, x, y, ldy, rs0, rs1, 1);
}

/* ---- activation preparation (bit-identical to scalar.c) ------------------- */

/* The 32 input values of the block at i0 (scalar.c act_in, the same
 * operations): loaded as they are where the block is whole and not
 * permuted, else one by one. */
AI void act_block(const float *x, size_t i0, size_t k, const int32_t *perm, const float *nw,
		  float nscale, float32x4_t *v)
{
	float tmp[32];
	size_t i;
	int j;

	if (perm == NULL && i0 + 32 <= k) {
#pragma GCC unroll 8
		for (j = 0; j < 8; j++) {
			v[j] = vmulq_n_f32(vld1q_f32(x + i0 + 4 * j), nscale);
			if (nw)
				v[j] = vmulq_f32(v[j], vld1q_f32(nw + i0 + 4 * j));
		}
		return;
	}
	for (i = 0; i < 32; i++) {
		size_t p = perm && i0 + i < k ? (size_t)perm[i0 + i] : i0 + i;
		float f = i0 + i < k ? x[p] * nscale : 0.0f;

		tmp[i] = nw && i0 + i < k ? f * nw[p] : f;
	}
#pragma GCC unroll 8
	for (j = 0; j < 8; j++)
		v[j] = vld1q_f32(tmp + 4 * j);
}

static void quant_row(const float *x, size_t k, size_t kp, const int32_t *perm,
		      const float *nw, float nscale, int8_t *q, float *d, float *s)
{
	const float32x4_t lim = vdupq_n_f32(127.0f), nlim = vdupq_n_f32(-127.0f);
	size_t b;

	for (b = 0; b < kp / DS_QBLOCK; b++) {
		float32x4_t v[8], m;
		int32x4_t qi[8], sum;
		int16x8_t h[4];
		float amax, id;
		int j;

		act_block(x, b * DS_QBLOCK, k, perm, nw, nscale, v);
		m = vabsq_f32(v[0]);
#pragma GCC unroll 8
		for (j = 1; j < 8; j++)
			m = vmaxq_f32(m, vabsq_f32(v[j]));
		amax = vmaxvq_f32(m);
		id = amax > 0 ? 127.0f / amax : 0.0f;
		/* clamped, then rounded to nearest even (as nearbyintf) */
#pragma GCC unroll 8
		for (j = 0; j < 8; j++)
			qi[j] = vcvtnq_s32_f32(vminq_f32(vmaxq_f32(vmulq_n_f32(v[j], id), nlim), lim));
#pragma GCC unroll 4
		for (j = 0; j < 4; j++)
			h[j] = vcombine_s16(vmovn_s32(qi[2 * j]), vmovn_s32(qi[2 * j + 1]));
		vst1q_s8(q + b * DS_QBLOCK, vcombine_s8(vmovn_s16(h[0]), vmovn_s16(h[1])));
		vst1q_s8(q + b * DS_QBLOCK + 16, vcombine_s8(vmovn_s16(h[2]), vmovn_s16(h[3])));
		sum = vaddq_s32(vaddq_s32(vaddq_s32(qi[0], qi[1]), vaddq_s32(qi[2], qi[3])),
				vaddq_s32(vaddq_s32(qi[4], qi[5]), vaddq_s32(qi[6], qi[7])));
		d[b] = amax / 127.0f;
		s[b] = d[b] * (float)vaddvq_s32(sum);
	}
}

/* 4 floats -> bf16 bits, round to nearest even, a NaN kept quiet (util.h) */
AI uint16x4_t to_bf16(float32x4_t v)
{
	uint32x4_t u = vreinterpretq_u32_f32(v);
	uint32x4_t r = vaddq_u32(u, vaddq_u32(vdupq_n_u32(0x7fff),
					     vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1))));
	uint32x4_t qn = vorrq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(0x40));
	uint32x4_t num = vceqq_f32(v, v);

	return vmovn_u32(vbslq_u32(num, vshrq_n_u32(r, 16), qn));
}

static void bf16_row(const float *x, size_t k, size_t kp, const int32_t *perm,
		     const float *nw, float nscale, uint16_t *out)
{
	size_t i;
	int j;

	for (i = 0; i < kp; i += 32) {
		float32x4_t v[8];

		act_block(x, i, k, perm, nw, nscale, v);
#pragma GCC unroll 4
		for (j = 0; j < 4; j++)
			vst1q_u16(out + i + 8 * j, vcombine_u16(to_bf16(v[2 * j]), to_bf16(v[2 * j + 1])));
	}
}

/* ---- element-wise ---------------------------------------------------------- */

/* e^x, relative error < 2e-7 (degree-7 Taylor on |r| <= ln2/2); 0 below
 * -87.3 (as avx2.c's exp256). */
AI float32x4_t exp4(float32x4_t x)
{
	const float32x4_t lo = vdupq_n_f32(-87.3f);
	uint32x4_t under = vcltq_f32(x, lo);
	float32x4_t n, r, p;
	int32x4_t e;

	x = vminq_f32(vmaxq_f32(x, lo), vdupq_n_f32(88.3f));
	n = vrndnq_f32(vmulq_n_f32(x, 1.44269504f));
	r = vfmsq_n_f32(x, n, 0.693145752f);
	r = vfmsq_n_f32(r, n, 1.42860677e-6f);
	p = vdupq_n_f32(1.0f / 5040);
	p = vfmaq_f32(vdupq_n_f32(1.0f / 720), p, r);
	p = vfmaq_f32(vdupq_n_f32(1.0f / 120), p, r);
	p = vfmaq_f32(vdupq_n_f32(1.0f / 24), p, r);
	p = vfmaq_f32(vdupq_n_f32(1.0f / 6), p, r);
	p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
	p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
	p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
	e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
	p = vmulq_f32(p, vreinterpretq_f32_s32(e));
	return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(p), under));
}

static float sumsq(const float *x, size_t n)
{
	float32x4_t a = vdupq_n_f32(0), b = vdupq_n_f32(0);
	size_t i = 0;
	float s;

	for (; i + 8 <= n; i += 8) {
		float32x4_t u = vld1q_f32(x + i), v = vld1q_f32(x + i + 4);

		a = vfmaq_f32(a, u, u);
		b = vfmaq_f32(b, v, v);
	}
	s = vaddvq_f32(vaddq_f32(a, b));
	for (; i < n; i++)
		s = fmaf(x[i], x[i], s);
	return s;
}

static void rmsnorm(const float *x, const float *w, size_t n, float eps, float *y)
{
	float r = (float)(1.0 / sqrt((double)sumsq(x, n) / (double)n + eps));
	size_t i = 0;

	for (; i + 4 <= n; i += 4)
		vst1q_f32(y + i, vmulq_f32(vmulq_n_f32(vld1q_f32(x + i), r), vld1q_f32(w + i)));
	for (; i < n; i++)
		y[i] = x[i] * r * w[i];
}

/* The largest of s[0..n-1] and m (a NaN score passed over). */
static float row_max(const float *s, size_t n, float m)
{
	float32x4_t v = vdupq_n_f32(m);
	size_t i = 0;

	for (; i + 4 <= n; i += 4)
		v = vmaxnmq_f32(v, vld1q_f32(s + i));
	m = vmaxnmvq_f32(v);
	for (; i < n; i++)
		m = s[i] > m ? s[i] : m;
	return m;
}

/* s[i] = e^(s[i] - m); returns their sum */
static float exp_sub_sum(float *s, size_t n, float m)
{
	float32x4_t sum = vdupq_n_f32(0), mv = vdupq_n_f32(m);
	size_t i = 0;
	float t;

	for (; i + 4 <= n; i += 4) {
		float32x4_t e = exp4(vsubq_f32(vld1q_f32(s + i), mv));

		vst1q_f32(s + i, e);
		sum = vaddq_f32(sum, e);
	}
	t = vaddvq_f32(sum);
	if (i < n) {
		float buf[4] = { m, m, m, m };
		float32x4_t e;

		memcpy(buf, s + i, (n - i) * sizeof(float));
		e = exp4(vsubq_f32(vld1q_f32(buf), mv));
		vst1q_f32(buf, e);
		memcpy(s + i, buf, (n - i) * sizeof(float));
		for (; i < n; i++)
			t += s[i];
	}
	return t;
}

static void scale_row(float *o, size_t n, float c)
{
	size_t i = 0;

	for (; i + 4 <= n; i += 4)
		vst1q_f32(o + i, vmulq_n_f32(vld1q_f32(o + i), c));
	for (; i < n; i++)
		o[i] *= c;
}

static void softmax(float *x, size_t n)
{
	scale_row(x, n, 1.0f / exp_sub_sum(x, n, row_max(x, n, x[0])));
}

AI float32x4_t silu4(float32x4_t g, float32x4_t u)
{
	float32x4_t e = exp4(vnegq_f32(g));

	return vmulq_f32(vdivq_f32(g, vaddq_f32(vdupq_n_f32(1.0f), e)), u);
}

static void silu_mul(const float *g, const float *u, size_t n, float *h)
{
	size_t i = 0;

	for (; i + 4 <= n; i += 4)
		vst1q_f32(h + i, silu4(vld1q_f32(g + i), vld1q_f32(u + i)));
	if (i < n) {
		float gb[4] = { 0 }, ub[4] = { 0 }, hb[4];

		memcpy(gb, g + i, (n - i) * sizeof(float));
		memcpy(ub, u + i, (n - i) * sizeof(float));
		vst1q_f32(hb, silu4(vld1q_f32(gb), vld1q_f32(ub)));
		memcpy(h + i, hb, (n - i) * sizeof(float));
	}
}

static void add(const float *a, const float *b, size_t n, float *y)
{
	size_t i = 0;

	for (; i + 4 <= n; i += 4)
		vst1q_f32(y + i, vaddq_f32(vld1q_f32(a + i), vld1q_f32(b + i)));
	for (; i < n; i++)
		y[i] = a[i] + b[i];
}

static void axpy(float a, const float *x, size_t n, float *y)
{
	size_t i = 0;

	for (; i + 4 <= n; i += 4)
		vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), a));
	for (; i < n; i++)
		y[i] = fmaf(a, x[i], y[i]);
}

static void rope(float *x, size_t nh, size_t hs, size_t dim, const float *cs,
		 enum ds_rope_style style)
{
	const size_t half = dim / 2;
	size_t h, i;

	for (h = 0; h < nh; h++) {
		float *p = x + h * hs;

		for (i = 0; i + 4 <= half; i += 4) {
			float32x4_t c = vld1q_f32(cs + i), s = vld1q_f32(cs + half + i);

			if (style == DS_ROPE_NEOX) {
				float32x4_t a = vld1q_f32(p + i), b = vld1q_f32(p + half + i);

				vst1q_f32(p + i, vfmsq_f32(vmulq_f32(a, c), b, s));
				vst1q_f32(p + half + i, vfmaq_f32(vmulq_f32(a, s), b, c));
			} else {
				/* pairs (x[2i], x[2i+1]): deinterleaved by the load */
				float32x4x2_t v = vld2q_f32(p + 2 * i), o;

				o.val[0] = vfmsq_f32(vmulq_f32(v.val[0], c), v.val[1], s);
				o.val[1] = vfmaq_f32(vmulq_f32(v.val[0], s), v.val[1], c);
				vst2q_f32(p + 2 * i, o);
			}
		}
		for (; i < half; i++) {
			size_t i0 = style == DS_ROPE_NEOX ? i : 2 * i;
			size_t i1 = style == DS_ROPE_NEOX ? i + half : 2 * i + 1;
			float a = p[i0], b = p[i1], c = cs[i], s = cs[half + i];

			p[i0] = a * c - b * s;
			p[i1] = a * s + b * c;
		}
	}
}

/* ---- KV cache rows ---------------------------------------------------------- */

/* 4 floats -> fp16 bits, round to nearest even; a NaN becomes the quiet
 * NaN of its sign with no payload (util.h's ds_f32_to_f16) */
AI uint16x4_t to_f16(float32x4_t v)
{
	uint16x4_t h = vreinterpret_u16_f16(vcvt_f16_f32(v));
	uint16x4_t num = vmovn_u32(vceqq_f32(v, v));
	uint16x4_t qn = vorr_u16(vand_u16(h, vdup_n_u16(0x8000)), vdup_n_u16(0x7e00));

	return vbsl_u16(num, h, qn);
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
		for (i = 0; i < n; i += 4) {
			float buf[4] = { 0 };
			uint16_t out[4];
			uint16x4_t h;

			if (n - i >= 4) {
				h = t == DS_KV_F16 ? to_f16(vld1q_f32(x + i)) : to_bf16(vld1q_f32(x + i));
				vst1_u16((uint16_t *)(void *)(p + 2 * i), h);
				continue;
			}
			memcpy(buf, x + i, (n - i) * sizeof(float));
			h = t == DS_KV_F16 ? to_f16(vld1q_f32(buf)) : to_bf16(vld1q_f32(buf));
			vst1_u16(out, h);
			memcpy(p + 2 * i, out, 2 * (n - i));
		}
		break;
	case DS_KV_Q8:
		for (i = 0; i < n / DS_QBLOCK; i++) {
			float d, s;

			quant_row(x + i * DS_QBLOCK, DS_QBLOCK, DS_QBLOCK, NULL, NULL, 1.0f,
				  (int8_t *)p + 36 * i + 4, &d, &s);
			memcpy(p + 36 * i, &d, 4);
		}
		break;
	}
}

/* Values d .. d+7 of a cache row as floats (d a multiple of 8). */
AI void kv_load8(enum ds_kvtype t, const uint8_t *row, size_t d, float32x4_t *v)
{
	if (t == DS_KV_F32) {
		v[0] = vld1q_f32((const float *)(const void *)row + d);
		v[1] = vld1q_f32((const float *)(const void *)row + d + 4);
	} else if (t == DS_KV_F16) {
		float16x8_t h = vreinterpretq_f16_u16(vld1q_u16((const uint16_t *)(const void *)row + d));

		v[0] = vcvt_f32_f16(vget_low_f16(h));
		v[1] = vcvt_high_f32_f16(h);
	} else if (t == DS_KV_BF16) {
		uint16x8_t h = vld1q_u16((const uint16_t *)(const void *)row + d);

		v[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
		v[1] = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
	} else {
		const uint8_t *b = row + 36 * (d / 32);
		int16x8_t q = vmovl_s8(vld1_s8((const int8_t *)b + 4 + d % 32));
		float sc;

		memcpy(&sc, b, 4);
		v[0] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(q))), sc);
		v[1] = vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(q)), sc);
	}
}

/* ---- attention: the generic kernel (attn_online.h) ----------------------- */

static void kv_row_f32(enum ds_kvtype t, const uint8_t *row, size_t dim, float *out)
{
	size_t i, j;

	for (i = 0; i + 8 <= dim; i += 8) {
		float32x4_t v[2];

		kv_load8(t, row, i, v);
		vst1q_f32(out + i, v[0]);
		vst1q_f32(out + i + 4, v[1]);
	}
	for (j = i; j < dim; j++)
		out[j] = t == DS_KV_F32 ? ((const float *)(const void *)row)[j]
		       : t == DS_KV_F16 ? ds_f16_to_f32(((const uint16_t *)(const void *)row)[j])
		       : ds_bf16_to_f32(((const uint16_t *)(const void *)row)[j]);
	for (; j < (dim + 15) / 16 * 16; j++)
		out[j] = 0;
}

static float dot(const float *a, const float *b, size_t n)
{
	float32x4_t s = vdupq_n_f32(0);
	size_t i = 0;
	float r;

	for (; i + 4 <= n; i += 4)
		s = vfmaq_f32(s, vld1q_f32(a + i), vld1q_f32(b + i));
	r = vaddvq_f32(s);
	for (; i < n; i++)
		r = fmaf(a[i], b[i], r);
	return r;
}

#include "attn_softmax.h"
#include "attn_online.h"

/* ---- tiled attention (key widths a multiple of 8, value widths of 16) ---- */

/* r[i] = the sum of a[i]'s lanes for four vectors, by pairwise adds (each
 * sum's order the same whatever the others hold). */
AI float32x4_t hsum4(const float32x4_t *a)
{
	return vpaddq_f32(vpaddq_f32(a[0], a[1]), vpaddq_f32(a[2], a[3]));
}

/* Scores of nh <= NH heads (from h0) against nk <= NK keys (from j0) in an
 * NH x NK tile (NH x NK = 8; missing ones repeat the last head and key and
 * are not stored).  A score's arithmetic is the same in every tile. */
AI void attn_qk8(const ds_attn_job *a, size_t h0, size_t nh, size_t j0, size_t nk, size_t jc,
		 float *sc, const int NH, const int NK, enum ds_kvtype KT)
{
	const size_t kd = a->k.dim, C = DS_ATTN_CHUNK;
	const int full = nh == (size_t)NH && nk == (size_t)NK;
	float32x4_t acc[8];
	float out[8];
	size_t d;
	int h, k;

#pragma GCC unroll 8
	for (h = 0; h < 8; h++)
		acc[h] = vdupq_n_f32(0);
	for (d = 0; d < kd; d += 8)
#pragma GCC unroll 8
		for (k = 0; k < NK; k++) {
			size_t j = j0 + (full || (size_t)k < nk ? (size_t)k : nk - 1);
			float32x4_t kv[2];

			kv_load8(KT, a->k.data + j * a->k.ld, d, kv);
#pragma GCC unroll 8
			for (h = 0; h < NH; h++) {
				size_t hh = h0 + (full || (size_t)h < nh ? (size_t)h : nh - 1);
				const float *q = a->q + hh * a->q_ld + d;

				acc[h * NK + k] = vfmaq_f32(acc[h * NK + k], vld1q_f32(q), kv[0]);
				acc[h * NK + k] = vfmaq_f32(acc[h * NK + k], vld1q_f32(q + 4), kv[1]);
			}
		}
	vst1q_f32(out, vmulq_n_f32(hsum4(acc), a->scale));
	vst1q_f32(out + 4, vmulq_n_f32(hsum4(acc + 4), a->scale));
	for (h = 0; (size_t)h < nh; h++)
		memcpy(sc + (h0 + h) * C + jc, out + h * NK, nk * sizeof(float));
}

/* One NH x NK tile: a whole one by a copy of attn_qk8 where nh and nk are
 * constants (no clamped indices), a partial one by another. */
AI void attn_tile8(const ds_attn_job *a, size_t h, size_t nh, size_t j0, size_t nk, size_t jc,
		   float *sc, const int NH, const int NK, enum ds_kvtype KT)
{
	if (nh == (size_t)NH && nk == (size_t)NK)
		attn_qk8(a, h, (size_t)NH, j0, (size_t)NK, jc, sc, NH, NK, KT);
	else
		attn_qk8(a, h, nh, j0, nk, jc, sc, NH, NK, KT);
}

/* Scores of heads h .. h+nh-1 (nh <= 4) against the chunk's nj keys. */
AI void attn_scores8(const ds_attn_job *a, size_t h, size_t nh, size_t j0, size_t nj, float *sc,
		     enum ds_kvtype KT)
{
	size_t j, step = nh > 2 ? 2 : nh == 2 ? 4 : 8;

	for (j = 0; j < nj; j += step) {
		size_t nk = nj - j < step ? nj - j : step;

		if (nh > 2)
			attn_tile8(a, h, nh, j0 + j, nk, j, sc, 4, 2, KT);
		else if (nh == 2)
			attn_tile8(a, h, nh, j0 + j, nk, j, sc, 2, 4, KT);
		else
			attn_tile8(a, h, nh, j0 + j, nk, j, sc, 1, 8, KT);
	}
}

/* o[h] += sum_j p[h][j] v_j for NH (1..4) heads over the chunk's keys, 16
 * values of each head's o in registers while the keys pass (the same
 * multiply-adds, in the same order, as one axpy per key). */
AI void attn_pv(const ds_attn_job *a, size_t h0, size_t j0, size_t nj, const float *sc,
		const int NH, enum ds_kvtype VT)
{
	const size_t C = DS_ATTN_CHUNK;
	size_t d, j;
	int h, i;

	for (d = 0; d < a->v.dim; d += 16) {
		float32x4_t o[4][4];

#pragma GCC unroll 4
		for (h = 0; h < NH; h++)
#pragma GCC unroll 4
			for (i = 0; i < 4; i++)
				o[h][i] = vld1q_f32(a->o + (h0 + h) * a->o_ld + d + 4 * i);
		for (j = 0; j < nj; j++) {
			const uint8_t *row = a->v.data + (j0 + j) * a->v.ld;
			float32x4_t v[4];

			kv_load8(VT, row, d, v);
			kv_load8(VT, row, d + 8, v + 2);
#pragma GCC unroll 4
			for (h = 0; h < NH; h++) {
				float p = sc[(h0 + h) * C + j];

#pragma GCC unroll 4
				for (i = 0; i < 4; i++)
					o[h][i] = vfmaq_n_f32(o[h][i], v[i], p);
			}
		}
#pragma GCC unroll 4
		for (h = 0; h < NH; h++)
#pragma GCC unroll 4
			for (i = 0; i < 4; i++)
				vst1q_f32(a->o + (h0 + h) * a->o_ld + d + 4 * i, o[h][i]);
	}
}

/* attn_softmax.h's online softmax with the tiled products; KT and VT the
 * cache types, constants where attn() calls it. */
AI void attn_t(const ds_attn_job *a, float *scratch, enum ds_kvtype KT, enum ds_kvtype VT)
{
	const size_t g = a->g, C = DS_ATTN_CHUNK;
	float *sc = scratch, *mx = sc + g * C, *l = mx + g;
	size_t h, j0, nj;

	attn_begin(a, mx, l);
	attn_fetch(a, 0, 2 * C);
	for (j0 = 0; j0 < a->n; j0 += C) {
		nj = a->n - j0 < C ? a->n - j0 : C;
		attn_fetch(a, j0 + 2 * C, C);   /* two chunks ahead */
		for (h = 0; h < g; h += 4)
			attn_scores8(a, h, g - h < 4 ? g - h : 4, j0, nj, sc, KT);
		attn_weights(a, sc, mx, l, j0, nj);
		for (h = 0; h < g; h += 4) {
			switch (g - h < 4 ? g - h : 4) {
			case 1: attn_pv(a, h, j0, nj, sc, 1, VT); break;
			case 2: attn_pv(a, h, j0, nj, sc, 2, VT); break;
			case 3: attn_pv(a, h, j0, nj, sc, 3, VT); break;
			default: attn_pv(a, h, j0, nj, sc, 4, VT); break;
			}
		}
	}
	attn_end(a, mx, l);
}

static void attn(const ds_attn_job *a, float *scratch)
{
	if (a->k.dim % 8 || a->v.dim % 16 || a->k.type != a->v.type)
		attn_generic(a, scratch);
	else if (a->k.type == DS_KV_F16)
		attn_t(a, scratch, DS_KV_F16, DS_KV_F16);
	else if (a->k.type == DS_KV_BF16)
		attn_t(a, scratch, DS_KV_BF16, DS_KV_BF16);
	else if (a->k.type == DS_KV_Q8)
		attn_t(a, scratch, DS_KV_Q8, DS_KV_Q8);
	else
		attn_t(a, scratch, DS_KV_F32, DS_KV_F32);
}

/* ---- probes ------------------------------------------------------------------- */

static uint64_t read_probe(const uint8_t *p, size_t n)
{
	uint64x2_t a = vdupq_n_u64(0), b = a, c = a, d = a;
	size_t i;

	for (i = 0; i < n; i += 64) {
		uint8x16x4_t v = vld1q_u8_x4(p + i);

		a = vaddq_u64(a, vreinterpretq_u64_u8(v.val[0]));
		b = vaddq_u64(b, vreinterpretq_u64_u8(v.val[1]));
		c = vaddq_u64(c, vreinterpretq_u64_u8(v.val[2]));
		d = vaddq_u64(d, vreinterpretq_u64_u8(v.val[3]));
	}
	a = veorq_u64(veorq_u64(a, b), veorq_u64(c, d));
	return vgetq_lane_u64(a, 0) ^ vgetq_lane_u64(a, 1);
}

/* The peaks (arm.h): int8 as the q4 kernel does it here (smull + sadalp:
 * 8 products per two instructions), w touched every round since smull
 * does not depend on the accumulator; bf16 is widened to fp32 FMA. */
AI int32x4_t smull_step(int32x4_t acc, int8x16_t w, int8x16_t x)
{
	return vpadalq_s16(acc, vmull_s8(vget_low_s8(w), vget_low_s8(x)));
}

static uint64_t peak_probe(int kind, uint64_t iters)
{
	if (kind == DS_PEAK_INT8) {
		peak_s32(iters, smull_step, vdupq_n_s8(3), vdupq_n_s8(5), 1);
		return iters * PEAK_ACC * 8;
	}
	peak_f32(iters, fma_f32, vdupq_n_f32(1.0f), vdupq_n_f32(1e-9f));
	return iters * PEAK_ACC * 4;
}

void ds_kernels_fill_neon(ds_kernels *k)
{
	k->name = "neon";
	k->isa = DS_ISA_NEON;
	k->mm[DS_F32] = mm_f32;
	k->mm[DS_F16] = mm_f16;
	k->mm[DS_BF16] = mm_bf16;
	k->mm[DS_Q8] = mm_q8;
	k->mm[DS_Q4] = mm_q4;
	k->quant_row = quant_row;
	k->bf16_row = bf16_row;
	k->kv_store = kv_store;
	k->sumsq = sumsq;
	k->rmsnorm = rmsnorm;
	k->softmax = softmax;
	k->silu_mul = silu_mul;
	k->add = add;
	k->axpy = axpy;
	k->rope = rope;
	k->attn = attn;
	k->read_probe = read_probe;
	k->peak_probe = peak_probe;
}

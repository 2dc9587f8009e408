/*
 * avx2.c - AVX2 + FMA + F16C versions of the kernels in scalar.c, for
 * x86-64 CPUs without AVX-512.  No VNNI here (avxvnni.c adds it where the
 * CPU has it): int8 dot products are vpmaddubsw + vpmaddwd.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels.h"

#include "x86.h"

/* The int8 steps of x86_q256.h's products (its header says what each
 * must do). */
enum { Q_ANY_U8 = 0, Q_DOT16 = 1 };
static const float q8_bias = 0.0f;

/* u in 0..15: vpmaddubsw's 16-bit pair sums stay below 2*15*127 */
AI __m256i q_dot(__m256i acc, __m256i u, __m256i s)
{
	return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s),
						       _mm256_set1_epi16(1)));
}

/* q8: u - 128 in -127..127; the sign trick keeps the pair sums below
 * 2*127*127, and the bias is taken out here, not through the block sums */
AI __m256i q8_dot(__m256i acc, __m256i u, __m256i s)
{
	__m256i w = _mm256_xor_si256(u, _mm256_set1_epi8((char)0x80));

	return q_dot(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(s, w));
}

#include "x86_q256.h"

/* lanes i .. n-1 of 8 */
AI __m256i tmask(size_t n, size_t i)
{
	size_t left = n - i > 8 ? 8 : n - i;

	return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)left),
				  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

AI __m256 loadm(const float *p, size_t n, size_t i)
{
	return _mm256_maskload_ps(p + i, tmask(n, i));
}

AI void storem(float *p, size_t n, size_t i, __m256 v)
{
	_mm256_maskstore_ps(p + i, tmask(n, i), v);
}

AI float hsum(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

AI float hmax(__m256 v)
{
	__m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_max_ps(s, _mm_movehl_ps(s, s));
	s = _mm_max_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* e^x, relative error < 2e-7; 0 below -87.3 */
AI __m256 exp256(__m256 x)
{
	__m256 lo = _mm256_set1_ps(-87.3f), n, r, p;
	__m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
	__m256i e;

	x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.3f));
	n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
			    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145752f), x);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860677e-6f), r);
	p = _mm256_set1_ps(1.0f / 5040);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
	return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* ---- bf16: lane r of a chunk holds (w[r][2c], w[r][2c+1]) ----------------- */

AI __m256 bf_even(__m256i v)
{
	return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

AI __m256 bf_odd(__m256i v)
{
	return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xffff0000u)));
}

AI void bf16_tile(const ds_mat *w, const uint8_t *rs, const ds_act *x,
		  size_t t0, float *y, size_t ldy, const __m256i *rm, const int TT)
{
	__m256 ae[QTT_MAX][2], ao[QTT_MAX][2];
	size_t c;
	int t, h;

	#pragma GCC unroll 8
	for (t = 0; t < TT; t++)
		#pragma GCC unroll 8
		for (h = 0; h < 2; h++)
			ae[t][h] = ao[t][h] = _mm256_setzero_ps();
	for (c = 0; c < w->kp / 2; c++) {
		__m256i xe[QTT_MAX];

		#pragma GCC unroll 8
		for (t = 0; t < TT; t++)
			xe[t] = q_bcast32(x->b + (t0 + t) * x->ldq + 2 * c);
		#pragma GCC unroll 8
		for (h = 0; h < 2; h++) {
			__m256i wv = _mm256_loadu_si256((const void *)(rs + 64 * c + 32 * h));
			__m256 we = bf_even(wv), wo = bf_odd(wv);

			#pragma GCC unroll 8
			for (t = 0; t < TT; t++) {
				ae[t][h] = _mm256_fmadd_ps(we, bf_even(xe[t]), ae[t][h]);
				ao[t][h] = _mm256_fmadd_ps(wo, bf_odd(xe[t]), ao[t][h]);
			}
		}
	}
	#pragma GCC unroll 8
	for (t = 0; t < TT; t++)
		#pragma GCC unroll 8
		for (h = 0; h < 2; h++)
			_mm256_maskstore_ps(y + (t0 + t) * ldy + 8 * h, rm[h],
					    _mm256_add_ps(ae[t][h], ao[t][h]));
}

static void mm_bf16(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		    size_t rs0, size_t rs1)
{
	size_t rs, t;

	for (rs = rs0; rs < rs1; rs++) {
		const uint8_t *p = w->data + rs * w->rs_bytes;
		__m256i rm[2] = { q_rowmask(w, rs, 0), q_rowmask(w, rs, 1) };

		for (t = 0; t < x->t; t += QTT_MAX) {
			if (x->t - t >= 2)
				bf16_tile(w, p, x, t, y + rs * DS_ROWSET, ldy, rm, 2);
			else
				bf16_tile(w, p, x, t, y + rs * DS_ROWSET, ldy, rm, 1);
		}
	}
}

/* ---- f32 / f16, row-major: 4 rows by 1 or 2 x rows ------------------------ */

AI __m256 load_w8(const uint8_t *base, int f16, size_t i)
{
	if (f16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const void *)(base + 2 * i)));
	return _mm256_loadu_ps((const float *)(const void *)(base + 4 * i));
}

static float w_at(const uint8_t *base, int f16, size_t i)
{
	float f;

	if (f16)
		return ds_f16_to_f32(((const uint16_t *)(const void *)base)[i]);
	memcpy(&f, base + 4 * i, 4);
	return f;
}

AI void rm_tile(const ds_mat *w, const ds_act *x, size_t n0, size_t t0,
		float *y, size_t ldy, const int f16, const int R, const int TT)
{
	const size_t k = w->k, es = f16 ? 2 : 4, k8 = k / 8 * 8;
	__m256 acc[4][2];
	size_t i;
	int r, t;

	#pragma GCC unroll 8
	for (r = 0; r < R; r++)
		#pragma GCC unroll 8
		for (t = 0; t < TT; t++)
			acc[r][t] = _mm256_setzero_ps();
	for (i = 0; i < k8; i += 8) {
		__m256 xv[2];

		#pragma GCC unroll 8
		for (t = 0; t < TT; t++)
			xv[t] = _mm256_loadu_ps(x->f + (t0 + t) * x->ldf + i);
		#pragma GCC unroll 8
		for (r = 0; r < R; r++) {
			__m256 wv = load_w8(w->data + (n0 + r) * k * es, f16, i);

			#pragma GCC unroll 8
			for (t = 0; t < TT; t++)
				acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
		}
	}
	#pragma GCC unroll 8
	for (r = 0; r < R; r++)
		#pragma GCC unroll 8
		for (t = 0; t < TT; t++) {
			const float *xr = x->f + (t0 + t) * x->ldf;
			float s = hsum(acc[r][t]);

			for (i = k8; i < k; i++)
				s += w_at(w->data + (n0 + r) * k * es, f16, i) * xr[i];
			y[(t0 + t) * ldy + n0 + r] = s;
		}
}

AI void mm_rowmajor(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		    size_t rs0, size_t rs1, const int f16)
{
	size_t n = rs0 * DS_ROWSET, n1 = rs1 * DS_ROWSET < w->n ? rs1 * DS_ROWSET : w->n;
	size_t t;

	for (; n < n1; n += 4)
		for (t = 0; t < x->t; t += 2) {
			int two = x->t - t >= 2;

			if (n1 - n >= 4 && two)
				rm_tile(w, x, n, t, y, ldy, f16, 4, 2);
			else if (n1 - n >= 4)
				rm_tile(w, x, n, t, y, ldy, f16, 4, 1);
			else {
				size_t r;

				for (r = n; r < n1; r++) {
					rm_tile(w, x, r, t, y, ldy, f16, 1, 1);
					if (two)
						rm_tile(w, x, r, t + 1, y, ldy, f16, 1, 1);
				}
			}
		}
}

static void mm_f32(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		   size_t rs0, size_t rs1)
{
	mm_rowmajor(w, x, y, ldy, rs0, rs1, 0);
}

static void mm_f16(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		   size_t rs0, size_t rs1)
{
	mm_rowmajor(w, x, y, ldy, rs0, rs1, 1);
}

/* ---- activation preparation (bit-identical to scalar.c) ------------------- */

/* 32 input values of block b into v (scalar.c act_in, same operations) */
AI void act_block(const float *x, size_t i0, size_t k, const int32_t *perm,
		  const float *nw, float nscale, __m256 *v)
{
	float tmp[32];
	size_t i;
	int j;

	if (perm == NULL && i0 + 32 <= k) {
		#pragma GCC unroll 8
		for (j = 0; j < 4; j++) {
			v[j] = _mm256_mul_ps(_mm256_loadu_ps(x + i0 + 8 * j), _mm256_set1_ps(nscale));
			if (nw)
				v[j] = _mm256_mul_ps(v[j], _mm256_loadu_ps(nw + i0 + 8 * j));
		}
		return;
	}
	for (i = 0; i < 32; i++) {
		size_t p = perm && i0 + i < k ? (size_t)perm[i0 + i] : i0 + i;
		float f = i0 + i < k ? x[p] * nscale : 0.0f;

		tmp[i] = nw && i0 + i < k ? f * nw[p] : f;
	}
	#pragma GCC unroll 8
	for (j = 0; j < 4; j++)
		v[j] = _mm256_loadu_ps(tmp + 8 * j);
}

static void quant_row(const float *x, size_t k, size_t kp,
		      const int32_t *perm, const float *nw, float nscale,
		      int8_t *q, float *d, float *s)
{
	const __m256 sign = _mm256_set1_ps(-0.0f), lim = _mm256_set1_ps(127.0f);
	const __m256 nlim = _mm256_set1_ps(-127.0f);
	const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	size_t b;

	for (b = 0; b < kp / DS_QBLOCK; b++) {
		__m256 v[4], m;
		__m256i qi[4], p, sum;
		float amax, id;
		int j;

		act_block(x, b * DS_QBLOCK, k, perm, nw, nscale, v);
		m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
				  _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
		amax = hmax(m);
		id = amax > 0 ? 127.0f / amax : 0.0f;
		#pragma GCC unroll 8
		for (j = 0; j < 4; j++)
			qi[j] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(
				_mm256_mul_ps(v[j], _mm256_set1_ps(id)), nlim), lim));
		p = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
		_mm256_storeu_si256((void *)(q + b * DS_QBLOCK), _mm256_permutevar8x32_epi32(p, order));
		sum = _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3]));
		d[b] = amax / 127.0f;
		s[b] = d[b] * hsum(_mm256_cvtepi32_ps(sum));
	}
}

/* 8 floats -> bf16 bits in the low 16 of each lane (util.h rounding) */
AI __m256i to_bf16(__m256 v)
{
	__m256i u = _mm256_castps_si256(v);
	__m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
		_mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))));
	__m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
	__m256i qn = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));

	return _mm256_blendv_epi8(_mm256_srli_epi32(r, 16), qn, nan);
}

static void bf16_row(const float *x, size_t k, size_t kp,
		     const int32_t *perm, const float *nw, float nscale,
		     uint16_t *out)
{
	size_t i;

	for (i = 0; i < kp; i += 32) {
		__m256 v[4];
		__m256i a, b;

		act_block(x, i, k, perm, nw, nscale, v);
		a = _mm256_permute4x64_epi64(_mm256_packus_epi32(to_bf16(v[0]), to_bf16(v[1])), 0xd8);
		b = _mm256_permute4x64_epi64(_mm256_packus_epi32(to_bf16(v[2]), to_bf16(v[3])), 0xd8);
		_mm256_storeu_si256((void *)(out + i), a);
		_mm256_storeu_si256((void *)(out + i + 16), b);
	}
}

/* ---- element-wise ---------------------------------------------------------- */

static float sumsq(const float *x, size_t n)
{
	__m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m256 u = _mm256_loadu_ps(x + i), v = _mm256_loadu_ps(x + i + 8);

		a = _mm256_fmadd_ps(u, u, a);
		b = _mm256_fmadd_ps(v, v, b);
	}
	for (; i < n; i += 8) {
		__m256 u = loadm(x, n, i);

		a = _mm256_fmadd_ps(u, u, a);
	}
	return hsum(_mm256_add_ps(a, b));
}

static void rmsnorm(const float *x, const float *w, size_t n, float eps,
		    float *y)
{
	__m256 r = _mm256_set1_ps((float)(1.0 / sqrt((double)sumsq(x, n) / (double)n + eps)));
	size_t i;

	for (i = 0; i < n; i += 8)
		storem(y, n, i, _mm256_mul_ps(_mm256_mul_ps(loadm(x, n, i), r), loadm(w, n, i)));
}

static float exp_sub_sum(float *s, size_t n, float m)
{
	__m256 sum = _mm256_setzero_ps();
	size_t i;

	for (i = 0; i < n; i += 8) {
		__m256 e = _mm256_and_ps(_mm256_castsi256_ps(tmask(n, i)),
					 exp256(_mm256_sub_ps(loadm(s, n, i), _mm256_set1_ps(m))));

		storem(s, n, i, e);
		sum = _mm256_add_ps(sum, e);
	}
	return hsum(sum);
}

static void softmax(float *x, size_t n)
{
	__m256 mv = _mm256_set1_ps(-INFINITY);
	size_t i;
	float inv;

	for (i = 0; i < n; i += 8)
		mv = _mm256_max_ps(mv, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), loadm(x, n, i),
							 _mm256_castsi256_ps(tmask(n, i))));
	inv = 1.0f / exp_sub_sum(x, n, hmax(mv));
	for (i = 0; i < n; i += 8)
		storem(x, n, i, _mm256_mul_ps(loadm(x, n, i), _mm256_set1_ps(inv)));
}

static void silu_mul(const float *g, const float *u, size_t n, float *h)
{
	size_t i;

	for (i = 0; i < n; i += 8) {
		__m256 gv = loadm(g, n, i);
		__m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), gv));

		storem(h, n, i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(_mm256_set1_ps(1.0f), e)),
					      loadm(u, n, i)));
	}
}

static void add(const float *a, const float *b, size_t n, float *y)
{
	size_t i;

	for (i = 0; i < n; i += 8)
		storem(y, n, i, _mm256_add_ps(loadm(a, n, i), loadm(b, n, i)));
}

static void axpy(float a, const float *x, size_t n, float *y)
{
	size_t i;

	for (i = 0; i < n; i += 8)
		storem(y, n, i, _mm256_fmadd_ps(_mm256_set1_ps(a), loadm(x, n, i), loadm(y, n, i)));
}

static void rope(float *x, size_t nh, size_t hs, size_t dim, const float *cs,
		 enum ds_rope_style style)
{
	const size_t half = dim / 2;
	const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
	size_t h, i;

	for (h = 0; h < nh; h++) {
		float *p = x + h * hs;

		if (style == DS_ROPE_NEOX) {
			for (i = 0; i < half; i += 8) {
				__m256 a = loadm(p, half, i), b = loadm(p + half, half, i);
				__m256 c = loadm(cs, half, i), s = loadm(cs + half, half, i);

				storem(p, half, i, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
				storem(p + half, half, i, _mm256_fmadd_ps(a, s, _mm256_mul_ps(b, c)));
			}
			continue;
		}
		for (i = 0; i + 4 <= half; i += 4) {
			__m256 v = _mm256_loadu_ps(p + 2 * i);
			__m256 c = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(cs + i)), dup);
			__m256 s = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(cs + half + i)), dup);

			_mm256_storeu_ps(p + 2 * i, _mm256_fmaddsub_ps(v, c,
				_mm256_mul_ps(_mm256_permute_ps(v, 0xb1), s)));
		}
		for (; i < half; i++) {
			float a = p[2 * i], b = p[2 * i + 1];

			p[2 * i] = a * cs[i] - b * cs[half + i];
			p[2 * i + 1] = a * cs[half + i] + b * cs[i];
		}
	}
}

/* ---- attention ----------------------------------------------------------------- */

static void kv_row_f32(enum ds_kvtype t, const uint8_t *row, size_t dim,
		       float *out)
{
	size_t i;

	for (i = 0; i < dim; i += 8) {
		__m256 v;

		if (t == DS_KV_Q8) {
			float d;

			memcpy(&d, row + 36 * (i / 32), 4);
			v = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
				_mm_loadl_epi64((const void *)(row + 36 * (i / 32) + 4 + i % 32)))));
		} else if (dim - i < 8) {
			size_t j;

			for (j = i; j < dim; j++)
				out[j] = t == DS_KV_F32 ? ((const float *)(const void *)row)[j]
				       : t == DS_KV_F16 ? ds_f16_to_f32(((const uint16_t *)(const void *)row)[j])
				       : ds_bf16_to_f32(((const uint16_t *)(const void *)row)[j]);
			for (; j < i + 8; j++)
				out[j] = 0;
			return;
		} else if (t == DS_KV_F32) {
			v = _mm256_loadu_ps((const float *)(const void *)(row + 4 * i));
		} else if (t == DS_KV_F16) {
			v = _mm256_cvtph_ps(_mm_loadu_si128((const void *)(row + 2 * i)));
		} else {
			v = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(
				_mm_loadu_si128((const void *)(row + 2 * i))), 16));
		}
		_mm256_storeu_ps(out + i, v);
	}
}

static float dot(const float *a, const float *b, size_t n)
{
	__m256 s = _mm256_setzero_ps();
	size_t i;

	for (i = 0; i < n; i += 8)
		s = _mm256_fmadd_ps(loadm(a, n, i), loadm(b, n, i), s);
	return hsum(s);
}

static void scale_row(float *o, size_t n, float c)
{
	size_t i;

	for (i = 0; i < n; i += 8)
		storem(o, n, i, _mm256_mul_ps(loadm(o, n, i), _mm256_set1_ps(c)));
}

/* The largest of s[0..n-1] and m (a NaN score is passed over). */
static float row_max(const float *s, size_t n, float m)
{
	__m256 v = _mm256_set1_ps(m);
	size_t i;

	for (i = 0; i < n; i += 8)
		v = _mm256_blendv_ps(v, _mm256_max_ps(loadm(s, n, i), v),
				     _mm256_castsi256_ps(tmask(n, i)));
	return hmax(v);
}

#include "attn_softmax.h"
#include "attn_online.h"

/* kernels.h kv_load: kv_row_f32 over the whole vectors, the rest one by
 * one (kv_row_f32 would zero-fill past n). */
static void kv_load_row(enum ds_kvtype t, const void *src, size_t n, float *out)
{
	const uint8_t *row = src;
	size_t m = t == DS_KV_Q8 ? n : n / 8 * 8, j;

	kv_row_f32(t, row, m, out);
	for (j = m; j < n; j++)
		out[j] = t == DS_KV_F32 ? ((const float *)src)[j]
		       : t == DS_KV_F16 ? ds_f16_to_f32(((const uint16_t *)src)[j])
		       : ds_bf16_to_f32(((const uint16_t *)src)[j]);
}

/* ---- tiled attention (key widths a multiple of 8, value widths of 32) ---- */

/* Values d .. d+7 of a cache row as floats (d a multiple of 8). */
AI __m256 kv_load8(enum ds_kvtype t, const uint8_t *row, size_t d)
{
	if (t == DS_KV_F32)
		return _mm256_loadu_ps((const float *)(const void *)(row + 4 * d));
	if (t == DS_KV_F16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const void *)(row + 2 * d)));
	if (t == DS_KV_BF16)
		return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(
			_mm_loadu_si128((const void *)(row + 2 * d))), 16));
	{
		const uint8_t *b = row + 36 * (d / 32);
		float sc;

		memcpy(&sc, b, 4);
		return _mm256_mul_ps(_mm256_set1_ps(sc), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
			_mm_loadl_epi64((const void *)(b + 4 + d % 32)))));
	}
}

/* r[i] = the sum of a[i]'s lanes, for eight vectors at once; each sum's
 * order is the same whatever the other seven hold. */
AI __m256 hsum8(const __m256 *a)
{
	__m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
	__m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));

	return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
			     _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* Scores of nh <= NH heads (from h0) against nk <= NK keys (from j0) in an
 * NH x NK tile (NH x NK = 8; missing ones repeat the last head and key and
 * are not stored).  A score's arithmetic is the same in every tile. */
AI void attn_qk8(const ds_attn_job *a, size_t h0, size_t nh, size_t j0, size_t nk,
		 size_t jc, float *sc, const int NH, const int NK, enum ds_kvtype KT)
{
	const size_t kd = a->k.dim, C = DS_ATTN_CHUNK;
	const int full = nh == (size_t)NH && nk == (size_t)NK;
	__m256 acc[8];
	float out[8];
	size_t d;
	int h, k;

#pragma GCC unroll 8
	for (h = 0; h < 8; h++)
		acc[h] = _mm256_setzero_ps();
	for (d = 0; d < kd; d += 8)
#pragma GCC unroll 8
		for (k = 0; k < NK; k++) {
			size_t j = j0 + (full || (size_t)k < nk ? (size_t)k : nk - 1);
			__m256 kv = kv_load8(KT, a->k.data + j * a->k.ld, d);

#pragma GCC unroll 8
			for (h = 0; h < NH; h++) {
				size_t hh = h0 + (full || (size_t)h < nh ? (size_t)h : nh - 1);

				acc[h * NK + k] = _mm256_fmadd_ps(_mm256_loadu_ps(a->q + hh * a->q_ld + d),
								  kv, acc[h * NK + k]);
			}
		}
	_mm256_storeu_ps(out, _mm256_mul_ps(hsum8(acc), _mm256_set1_ps(a->scale)));
	for (h = 0; (size_t)h < nh; h++)
		memcpy(sc + (h0 + h) * C + jc, out + h * NK, nk * sizeof(float));
}

/* One NH x NK tile of scores: a whole one by a copy of attn_qk8 where nh
 * and nk are constants (no clamped indices), a partial one by another. */
AI void attn_tile8(const ds_attn_job *a, size_t h, size_t nh, size_t j0, size_t nk,
		   size_t jc, float *sc, const int NH, const int NK, enum ds_kvtype KT)
{
	if (nh == (size_t)NH && nk == (size_t)NK)
		attn_qk8(a, h, (size_t)NH, j0, (size_t)NK, jc, sc, NH, NK, KT);
	else
		attn_qk8(a, h, nh, j0, nk, jc, sc, NH, NK, KT);
}

/* Scores of heads h .. h+nh-1 (nh <= 8) against the chunk's nj keys. */
AI void attn_scores8(const ds_attn_job *a, size_t h, size_t nh, size_t j0, size_t nj,
		     float *sc, enum ds_kvtype KT)
{
	size_t j, step = nh > 4 ? 1 : nh > 2 ? 2 : nh == 2 ? 4 : 8;

	for (j = 0; j < nj; j += step) {
		size_t nk = nj - j < step ? nj - j : step;

		if (nh > 4)
			attn_tile8(a, h, nh, j0 + j, nk, j, sc, 8, 1, KT);
		else if (nh > 2)
			attn_tile8(a, h, nh, j0 + j, nk, j, sc, 4, 2, KT);
		else if (nh == 2)
			attn_tile8(a, h, nh, j0 + j, nk, j, sc, 2, 4, KT);
		else
			attn_tile8(a, h, nh, j0 + j, nk, j, sc, 1, 8, KT);
	}
}

/* o[h] += sum_j p[h][j] v_j for NH (1 or 2) heads over the chunk's keys,
 * 32 values of each head's o in registers while the keys pass (the same
 * multiply-adds, in the same order, as one axpy per key). */
AI void attn_pv8(const ds_attn_job *a, size_t h0, size_t j0, size_t nj,
		 const float *sc, const int NH, enum ds_kvtype VT)
{
	const size_t C = DS_ATTN_CHUNK;
	size_t d, j;
	int h, i;

	for (d = 0; d < a->v.dim; d += 32) {
		__m256 o[2][4];

#pragma GCC unroll 2
		for (h = 0; h < NH; h++)
#pragma GCC unroll 4
			for (i = 0; i < 4; i++)
				o[h][i] = _mm256_loadu_ps(a->o + (h0 + h) * a->o_ld + d + 8 * i);
		for (j = 0; j < nj; j++) {
			const uint8_t *row = a->v.data + (j0 + j) * a->v.ld;
			__m256 v[4];

#pragma GCC unroll 4
			for (i = 0; i < 4; i++)
				v[i] = kv_load8(VT, row, d + 8 * i);
#pragma GCC unroll 2
			for (h = 0; h < NH; h++) {
				__m256 p = _mm256_broadcast_ss(sc + (h0 + h) * C + j);

#pragma GCC unroll 4
				for (i = 0; i < 4; i++)
					o[h][i] = _mm256_fmadd_ps(p, v[i], o[h][i]);
			}
		}
#pragma GCC unroll 2
		for (h = 0; h < NH; h++)
#pragma GCC unroll 4
			for (i = 0; i < 4; i++)
				_mm256_storeu_ps(a->o + (h0 + h) * a->o_ld + d + 8 * i, o[h][i]);
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
		for (h = 0; h < g; h += 8)
			attn_scores8(a, h, g - h < 8 ? g - h : 8, j0, nj, sc, KT);
		attn_weights(a, sc, mx, l, j0, nj);
		for (h = 0; h + 2 <= g; h += 2)
			attn_pv8(a, h, j0, nj, sc, 2, VT);
		if (h < g)
			attn_pv8(a, h, j0, nj, sc, 1, VT);
	}
	attn_end(a, mx, l);
}

static void attn(const ds_attn_job *a, float *scratch)
{
	if (a->k.dim % 8 || a->v.dim % 32 || a->k.type != a->v.type)
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

/* ---- MHA over a packed block (kernels.h ds_attn_blk) ------------------------ */

AI size_t blk_seen(const ds_attn_blk *a, size_t t)
{
	return a->diag && a->diag + t < a->nk ? a->diag + t : a->nk;
}

/* A bf16 pair as one 32-bit lane, broadcast. */
AI __m256i pair8(const uint16_t *p)
{
	int32_t v;

	memcpy(&v, p, 4);
	return _mm256_set1_epi32(v);
}

/* Scores of rows t0 .. t0+nt-1 (nt <= 4; the missing rows repeat the
 * last, not stored) against key group gi, into sc (the tile's rows,
 * DS_ATTN_BLK apart): the 16 keys' pairs widened to fp32 once for the
 * four rows. */
AI void blk_qk8(const ds_attn_blk *a, size_t t0, size_t nt, size_t gi, float *sc)
{
	const size_t kp2 = a->kd / 2 + a->kd % 2;
	const uint16_t *q[4], *k = a->k + gi * kp2 * 32;
	__m256 acc[4][2];
	size_t i;
	int t;

#pragma GCC unroll 4
	for (t = 0; t < 4; t++) {
		q[t] = a->q + (t0 + ((size_t)t < nt ? (size_t)t : nt - 1)) * a->q_ld;
		acc[t][0] = acc[t][1] = _mm256_setzero_ps();
	}
	for (i = 0; i < kp2; i++) {
		__m256i k0 = _mm256_loadu_si256((const void *)(k + i * 32));
		__m256i k1 = _mm256_loadu_si256((const void *)(k + i * 32 + 16));
		__m256 e0 = bf_even(k0), o0 = bf_odd(k0), e1 = bf_even(k1), o1 = bf_odd(k1);

#pragma GCC unroll 4
		for (t = 0; t < 4; t++) {
			__m256i qw = pair8(q[t] + 2 * i);
			__m256 qe = bf_even(qw), qo = bf_odd(qw);

			acc[t][0] = _mm256_fmadd_ps(qo, o0, _mm256_fmadd_ps(qe, e0, acc[t][0]));
			acc[t][1] = _mm256_fmadd_ps(qo, o1, _mm256_fmadd_ps(qe, e1, acc[t][1]));
		}
	}
	/* constant indices, so that acc stays in registers */
#pragma GCC unroll 4
	for (t = 0; t < 4; t++) {
		if ((size_t)t >= nt)
			continue;
		_mm256_storeu_ps(sc + t * DS_ATTN_BLK + gi * 16,
				 _mm256_mul_ps(acc[t][0], _mm256_set1_ps(a->scale)));
		_mm256_storeu_ps(sc + t * DS_ATTN_BLK + gi * 16 + 8,
				 _mm256_mul_ps(acc[t][1], _mm256_set1_ps(a->scale)));
	}
}

/* Row t's n scores s into weights rounded to bf16, kept as floats in s
 * (zero from n to np, a multiple of 16), the carried maximum and sum
 * updated; returns the factor c of the outputs so far. */
static float blk_weights8(const ds_attn_blk *a, size_t t, float *s, size_t n, size_t np)
{
	float *ml = a->ml + t * a->ml_ld, m = row_max(s, n, a->first ? -INFINITY : ml[0]), c;
	__m256 sum = _mm256_setzero_ps();
	size_t j;

	for (j = 0; j < np; j += 8) {
		__m256 keep = _mm256_castsi256_ps(tmask(n > j ? n : j, j));
		__m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), _mm256_set1_ps(m)));
		__m256 r = _mm256_castsi256_ps(_mm256_slli_epi32(to_bf16(_mm256_and_ps(e, keep)), 16));

		_mm256_storeu_ps(s + j, r);
		sum = _mm256_add_ps(sum, r);
	}
	c = a->first ? 0.0f : expf(ml[0] - m);
	ml[1] = (a->first ? 0.0f : ml[1] * c) + hsum(sum);
	ml[0] = m;
	return c;
}

/* Outputs of rows t0 .. t0+nt-1 (as blk_qk8), values d0 .. d0+15: scaled
 * by their rows' c, plus the weights w (the tile's rows) times the
 * values over the first np2 pairs of keys. */
AI void blk_pv8(const ds_attn_blk *a, size_t t0, size_t nt, size_t d0, size_t np2,
		const float *w, const float *c)
{
	const size_t vdp = (a->vd + 15) / 16 * 16;
	const uint16_t *v = a->v + d0 * 2;
	const float *p[4];
	__m256 acc[4][2];
	size_t jp;
	int t, i;

#pragma GCC unroll 4
	for (t = 0; t < 4; t++) {
		size_t r = (size_t)t < nt ? (size_t)t : nt - 1;
		float *o = a->o + (t0 + r) * a->o_ld;

		p[t] = w + r * DS_ATTN_BLK;
		for (i = 0; i < 2; i++)
			acc[t][i] = a->first ? _mm256_setzero_ps()
				  : _mm256_mul_ps(loadm(o, a->vd, d0 + 8 * (size_t)i),
						  _mm256_set1_ps(c[r]));
	}
	for (jp = 0; jp < np2; jp++) {
		__m256i v0 = _mm256_loadu_si256((const void *)(v + jp * vdp * 2));
		__m256i v1 = _mm256_loadu_si256((const void *)(v + jp * vdp * 2 + 16));
		__m256 e0 = bf_even(v0), o0 = bf_odd(v0), e1 = bf_even(v1), o1 = bf_odd(v1);

#pragma GCC unroll 4
		for (t = 0; t < 4; t++) {
			__m256 pe = _mm256_broadcast_ss(p[t] + 2 * jp);
			__m256 po = _mm256_broadcast_ss(p[t] + 2 * jp + 1);

			acc[t][0] = _mm256_fmadd_ps(po, o0, _mm256_fmadd_ps(pe, e0, acc[t][0]));
			acc[t][1] = _mm256_fmadd_ps(po, o1, _mm256_fmadd_ps(pe, e1, acc[t][1]));
		}
	}
#pragma GCC unroll 4
	for (t = 0; t < 4; t++)
#pragma GCC unroll 2
		for (i = 0; i < 2; i++)
			if ((size_t)t < nt && d0 + 8 * (size_t)i < a->vd)
				storem(a->o + (t0 + t) * a->o_ld, a->vd, d0 + 8 * (size_t)i,
				       acc[t][i]);
}

/* A tile of up to 4 rows from t0 (avx512.c blk_tile). */
static void blk_tile8(const ds_attn_blk *a, size_t t0, size_t nt, float *sc)
{
	size_t n = blk_seen(a, t0 + nt - 1), ng = (n + 15) / 16, vdp = (a->vd + 15) / 16 * 16;
	size_t g, t, d;
	float c[4];

	for (g = 0; g < ng; g++)
		blk_qk8(a, t0, nt, g, sc);
	for (t = 0; t < nt; t++)
		c[t] = blk_weights8(a, t0 + t, sc + t * DS_ATTN_BLK, blk_seen(a, t0 + t), ng * 16);
	for (d = 0; d < vdp; d += 16)
		blk_pv8(a, t0, nt, d, (n + 1) / 2, sc, c);
}

static void attn_blk(const ds_attn_blk *a, float *scratch)
{
	size_t t;

	for (t = 0; t < a->nt; t += 4)
		blk_tile8(a, t, a->nt - t < 4 ? a->nt - t : 4, scratch);
}

/* ---- probes ------------------------------------------------------------------- */

static uint64_t read_probe(const uint8_t *p, size_t n)
{
	__m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
	size_t i;

	for (i = 0; i < n; i += 128) {
		a = _mm256_add_epi64(a, _mm256_load_si256((const void *)(p + i)));
		b = _mm256_add_epi64(b, _mm256_load_si256((const void *)(p + i + 32)));
		c = _mm256_add_epi64(c, _mm256_load_si256((const void *)(p + i + 64)));
		d = _mm256_add_epi64(d, _mm256_load_si256((const void *)(p + i + 96)));
	}
	a = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
	return (uint64_t)_mm256_extract_epi64(a, 0) ^ (uint64_t)_mm256_extract_epi64(a, 3);
}

/* The peaks (x86.h): int8 as the q4 kernel does it (vpmaddubsw +
 * vpmaddwd + vpaddd: 32 products per three instructions), w touched
 * every round since vpmaddubsw does not depend on the accumulator; bf16
 * is widened to fp32 FMA. */
static uint64_t peak_probe(int kind, uint64_t iters)
{
	if (kind == DS_PEAK_INT8) {
		peak_i256(iters, q_dot, _mm256_set1_epi8(3), _mm256_set1_epi8(5), 1);
		return iters * PEAK_ACC * 32;
	}
	peak_f256(iters, fma256, _mm256_set1_ps(1.0f), _mm256_set1_ps(1e-9f));
	return iters * PEAK_ACC * 8;
}

/* 8 floats -> fp16 bits (util.h rounding; a NaN the quiet NaN of its sign) */
AI __m128i to_f16(__m256 v)
{
	__m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
	__m128i nm = _mm_packs_epi32(_mm256_castsi256_si128(_mm256_castps_si256(nan)),
				     _mm256_extracti128_si256(_mm256_castps_si256(nan), 1));
	__m128i qn = _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16((short)0x8000)),
				  _mm_set1_epi16(0x7e00));

	return _mm_blendv_epi8(h, qn, nm);
}

/* A cache row (scalar.c kv_store): fp16 and bf16 8 values at a time (the
 * tail through a buffer), q8 blocks through quant_row. */
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
		for (i = 0; i < n; i += 8) {
			float buf[8] = { 0 };
			__m128i h;

			memcpy(buf, x + i, (n - i < 8 ? n - i : 8) * sizeof(float));
			if (t == DS_KV_F16) {
				h = to_f16(_mm256_loadu_ps(buf));
			} else {
				__m256i b = to_bf16(_mm256_loadu_ps(buf));

				h = _mm_packus_epi32(_mm256_castsi256_si128(b),
						     _mm256_extracti128_si256(b, 1));
			}
			if (n - i >= 8) {
				_mm_storeu_si128((void *)(p + 2 * i), h);
			} else {
				uint16_t out[8];

				_mm_storeu_si128((void *)out, h);
				memcpy(p + 2 * i, out, 2 * (n - i));
			}
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

void ds_kernels_fill_avx2(ds_kernels *k)
{
	k->name = "avx2";
	k->isa = DS_ISA_AVX2;
	k->mm[DS_F32] = mm_f32;
	k->mm[DS_F16] = mm_f16;
	k->mm[DS_BF16] = mm_bf16;
	k->mm[DS_Q8] = mm_q8;
	k->mm[DS_Q4] = mm_q4;
	k->quant_row = quant_row;
	k->bf16_row = bf16_row;
	k->kv_store = kv_store;
	k->kv_load = kv_load_row;
	k->sumsq = sumsq;
	k->rmsnorm = rmsnorm;
	k->softmax = softmax;
	k->silu_mul = silu_mul;
	k->add = add;
	k->axpy = axpy;
	k->rope = rope;
	k->attn = attn;
	k->attn_blk = attn_blk;
	k->read_probe = read_probe;
	k->peak_probe = peak_probe;
}

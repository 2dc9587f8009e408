/* types.c - runtime tensor types: names, sizes, packing, reference dequant. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "types.h"
#include "base/util.h"

static const struct {
	const char *name;
	enum ds_dtype dt;
} scalar_names[] = {
	{ "f32", DS_F32 }, { "f16", DS_F16 }, { "bf16", DS_BF16 },
	{ "i32", DS_I32 },
};

int ds_ttype_parse(const char *s, ds_ttype *t)
{
	unsigned long g;
	char *end;
	size_t i;

	for (i = 0; i < sizeof scalar_names / sizeof scalar_names[0]; i++) {
		if (strcmp(s, scalar_names[i].name) == 0) {
			t->dt = scalar_names[i].dt;
			t->group = 0;
			return 0;
		}
	}
	if ((s[0] != 'q') || (s[1] != '4' && s[1] != '8') || s[2] != 'g' ||
	    s[3] < '1' || s[3] > '9')
		return -1;
	g = strtoul(s + 3, &end, 10);
	if (*end != '\0' || g < 32 || g > 8192 || g % 32 != 0)
		return -1;
	t->dt = s[1] == '4' ? DS_Q4 : DS_Q8;
	t->group = (uint32_t)g;
	return 0;
}

const char *ds_ttype_name(ds_ttype t, char *buf)
{
	switch (t.dt) {
	case DS_F32: return strcpy(buf, "f32");
	case DS_F16: return strcpy(buf, "f16");
	case DS_BF16: return strcpy(buf, "bf16");
	case DS_I32: return strcpy(buf, "i32");
	case DS_Q8: snprintf(buf, 16, "q8g%u", t.group); return buf;
	case DS_Q4: snprintf(buf, 16, "q4g%u", t.group); return buf;
	}
	return strcpy(buf, "?");
}

int ds_ttype_interleaved(ds_ttype t)
{
	return t.dt == DS_BF16 || t.dt == DS_Q8 || t.dt == DS_Q4;
}

uint64_t ds_kpad(ds_ttype t, uint64_t k)
{
	return ds_round_up(k, t.dt == DS_BF16 ? 32 : t.group);
}

uint64_t ds_rowset_bytes(ds_ttype t, uint64_t k)
{
	uint64_t kp = ds_kpad(t, k), b = 0;

	switch (t.dt) {
	case DS_Q4:
	case DS_Q8:
		/* the end of the last group */
		b = ds_qgrp_w(t.dt == DS_Q4, t.group, kp / t.group, kp / t.group - 1) +
		    ds_qgrp_bytes(t.dt == DS_Q4, t.group);
		break;
	case DS_BF16: b = 32 * kp; break;
	default: return 0;
	}
	return ds_round_up(b, DS_CHUNK);
}

static uint64_t elsize(enum ds_dtype dt)
{
	return dt == DS_F16 ? 2 : 4;
}

int ds_tensor_bytes(ds_ttype t, int ndim, const uint64_t *shape,
		    uint64_t *bytes)
{
	uint64_t n = 1, rs, sets;
	int i;

	if (ndim < 1 || ndim > 4)
		return -1;
	if (!ds_ttype_interleaved(t)) {
		for (i = 0; i < ndim; i++)
			if (ds_mul_u64(n, shape[i], &n) != 0)
				return -1;
		return ds_mul_u64(n, elsize(t.dt), bytes);
	}
	if (ndim != 2 && ndim != 3)
		return -1;
	/* the largest k we accept keeps every intermediate below 2^63 */
	if (shape[ndim - 1] > (1ull << 40) || shape[ndim - 1] == 0)
		return -1;
	rs = ds_rowset_bytes(t, shape[ndim - 1]);
	sets = (shape[ndim - 2] + DS_ROWSET - 1) / DS_ROWSET;
	if (ds_mul_u64(rs, sets, bytes) != 0)
		return -1;
	if (ndim == 3 && ds_mul_u64(*bytes, shape[0], bytes) != 0)
		return -1;
	return 0;
}

/* ---- packing ------------------------------------------------------------- */

void ds_pack_q4(uint8_t *dst, const uint8_t *q, const uint16_t *scale,
		const uint8_t *zero, uint64_t n, uint64_t k, uint32_t group)
{
	ds_ttype t = { DS_Q4, group };
	uint64_t kp = ds_kpad(t, k), ng = kp / group;
	uint64_t rsb = ds_rowset_bytes(t, k), sets = (n + 15) / 16;
	uint64_t s, c, r, g, j;

	memset(dst, 0, rsb * sets);
	for (s = 0; s < sets; s++) {
		uint8_t *rs = dst + s * rsb;

		for (r = 0; r < 16 && s * 16 + r < n; r++) {
			uint64_t row = s * 16 + r;
			const uint8_t *qr = q + row * k;
			/* padding columns get q = z, a weight of exactly 0 */
			uint8_t zpad = zero[row * ng + ng - 1];

			for (c = 0; c < kp / 8; c++) {
				uint8_t *out = rs + ds_qchunk(1, group, ng, c) + 4 * r;

				for (j = 0; j < 4; j++) {
					uint64_t k0 = 8 * c + j, k1 = k0 + 4;
					uint8_t lo = k0 < k ? qr[k0] : zpad;
					uint8_t hi = k1 < k ? qr[k1] : zpad;

					out[j] = (uint8_t)((lo & 15) | (hi & 15) << 4);
				}
			}
			for (g = 0; g < ng; g++) {
				memcpy(rs + ds_qgrp_s(1, group, g) + 2 * r, &scale[row * ng + g], 2);
				rs[ds_qgrp_z(group, ng, g) + r] = zero[row * ng + g];
			}
		}
	}
}

/* Inputs kk ... kk + 3 of a row as u = q + 128 (0 past the row's end or
 * past the last row): four bytes at once where all four are there. */
static void pack_q8_chunk(uint8_t *out, const int8_t *q, uint64_t row,
			  uint64_t n, uint64_t k, uint64_t kk)
{
	uint64_t j;
	uint32_t w;

	if (row < n && kk + 4 <= k) {
		memcpy(&w, q + row * k + kk, 4);
		w ^= 0x80808080u; /* + 128 in each byte, two's complement */
		memcpy(out, &w, 4);
		return;
	}
	for (j = 0; j < 4; j++)
		out[j] = (uint8_t)((row < n && kk + j < k ? q[row * k + kk + j] : 0) + 128);
}

void ds_pack_q8(uint8_t *dst, const int8_t *q, const uint16_t *scale,
		uint64_t n, uint64_t k, uint32_t group)
{
	ds_ttype t = { DS_Q8, group };
	uint64_t kp = ds_kpad(t, k), ng = kp / group;
	uint64_t rsb = ds_rowset_bytes(t, k), sets = (n + 15) / 16;
	uint64_t s, c, r, g;

	/* padding rows and columns hold u = 128, a weight of exactly 0 */
	memset(dst, 0, rsb * sets);
	for (s = 0; s < sets; s++) {
		uint8_t *rs = dst + s * rsb;

		for (r = 0; r < 16; r++) {
			uint64_t row = s * 16 + r;

			/* group by group: a chunk's offset without a division */
			for (g = 0; g < ng; g++) {
				uint8_t *grp = rs + ds_qgrp_w(0, group, ng, g) + 4 * r;

				for (c = 0; c < group / 4; c++)
					pack_q8_chunk(grp + 64 * c, q, row, n, k,
						      g * group + 4 * c);
			}
			for (g = 0; g < ng && row < n; g++)
				memcpy(rs + ds_qgrp_s(0, group, g) + 2 * r, &scale[row * ng + g], 2);
		}
	}
}

void ds_pack_bf16(uint8_t *dst, const uint16_t *w, uint64_t n, uint64_t k)
{
	ds_ttype t = { DS_BF16, 0 };
	uint64_t kp = ds_kpad(t, k), rsb = ds_rowset_bytes(t, k);
	uint64_t sets = (n + 15) / 16, s, r, kk;

	memset(dst, 0, rsb * sets);
	for (s = 0; s < sets; s++) {
		uint16_t *rs = (uint16_t *)(dst + s * rsb);

		for (r = 0; r < 16 && s * 16 + r < n; r++)
			for (kk = 0; kk < k; kk++)
				rs[(kk / 2) * 32 + 2 * r + (kk & 1)] =
					w[(s * 16 + r) * k + kk];
	}
	(void)kp;
}

/* ---- round-to-nearest quantization ------------------------------------- */

/* nearbyintf for |x| < 2^22 (every quotient below is far smaller): adding
 * 1.5 * 2^23 leaves no bits below the units, so the sum is rounded to
 * nearest even and the subtraction is exact.  Inline and vectorizable,
 * unlike the libm call, with the same results. */
static inline float rne_small(float x)
{
	const float m = 12582912.0f;

	return (x + m) - m;
}

static uint8_t clamp_u4(float v)
{
	return (uint8_t)(v < 0 ? 0 : v > 15 ? 15 : v);
}

/* [min(min w, 0), max(max w, 0)], in 8 lanes as amax_of */
static void range_of(const float *w, uint64_t len, float *lo, float *hi)
{
	float l[8] = { 0 }, h[8] = { 0 };
	uint64_t i = 0, j;

	for (; i + 8 <= len; i += 8)
		for (j = 0; j < 8; j++) {
			l[j] = w[i + j] < l[j] ? w[i + j] : l[j];
			h[j] = w[i + j] > h[j] ? w[i + j] : h[j];
		}
	for (; i < len; i++) {
		l[0] = w[i] < l[0] ? w[i] : l[0];
		h[0] = w[i] > h[0] ? w[i] : h[0];
	}
	for (j = 1; j < 8; j++) {
		l[0] = l[j] < l[0] ? l[j] : l[0];
		h[0] = h[j] > h[0] ? h[j] : h[0];
	}
	*lo = l[0];
	*hi = h[0];
}

/* One group of w[0..len): asymmetric with an fp16 scale, the range widened
 * to contain 0 (GPTQ's find_params) so the zero point z = round(-lo/s)
 * always lies in [0, 15]; AutoAWQ's rule clamps z instead, which for a
 * group of one sign clips the range by any number of steps. */
static void q4_group(const float *w, uint64_t len, uint8_t *q, uint16_t *s16,
		     uint8_t *z)
{
	float lo, hi, s, zf;
	uint64_t i, j;

	range_of(w, len, &lo, &hi);
	s = (hi - lo) > 1e-5f ? (hi - lo) / 15.0f : 1e-5f / 15.0f;
	*s16 = ds_f32_to_f16(s);
	s = ds_f16_to_f32(*s16);
	if (s == 0) { /* underflowed to 0 in fp16: smallest normal instead */
		*s16 = 0x0400;
		s = ds_f16_to_f32(*s16);
	}
	*z = clamp_u4(rne_small(-lo / s));
	zf = *z;
	for (i = 0; i + 32 <= len; i += 32) /* a count the compiler sees */
		for (j = 0; j < 32; j++)
			q[i + j] = clamp_u4(rne_small(w[i + j] / s) + zf);
	for (; i < len; i++)
		q[i] = clamp_u4(rne_small(w[i] / s) + zf);
}

int ds_quantize_q4(uint8_t *dst, const float *w, uint64_t n, uint64_t k,
		   uint32_t group)
{
	uint64_t ng = (k + group - 1) / group, r, g, len;
	uint8_t *q = NULL, *z = NULL;
	uint16_t *s = NULL;
	size_t nq, ns;

	if (ds_mul_sz(n, k, &nq) || ds_mul_sz(n, ng, &ns))
		return -1;
	q = malloc(nq ? nq : 1);
	z = malloc(ns ? ns : 1);
	s = malloc(ns ? ns * 2 : 2);
	if (q == NULL || z == NULL || s == NULL) {
		free(q); free(z); free(s);
		return -1;
	}
	for (r = 0; r < n; r++)
		for (g = 0; g < ng; g++) {
			len = k - g * group < group ? k - g * group : group;
			q4_group(w + r * k + g * group, len, q + r * k + g * group,
				 &s[r * ng + g], &z[r * ng + g]);
		}
	ds_pack_q4(dst, q, s, z, n, k, group);
	free(q); free(z); free(s);
	return 0;
}

/* max |w[i]|, in 8 lanes (the maximum does not depend on the order) so
 * that it vectorizes instead of waiting on one compare per weight */
static float amax_of(const float *w, uint64_t len)
{
	float m[8] = { 0 }, a;
	uint64_t i = 0, j;

	for (; i + 8 <= len; i += 8)
		for (j = 0; j < 8; j++) {
			a = fabsf(w[i + j]);
			m[j] = a > m[j] ? a : m[j];
		}
	for (; i < len; i++) {
		a = fabsf(w[i]);
		m[0] = a > m[0] ? a : m[0];
	}
	for (j = 1; j < 8; j++)
		m[0] = m[j] > m[0] ? m[j] : m[0];
	return m[0];
}

static int8_t q8_step(float w, float sc)
{
	float v = rne_small(w / sc);

	return (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
}

/* w[0..len) in steps of sc > 0; whole blocks of 32 (a count the compiler
 * sees) so that they vectorize. */
static void q8_steps(const float *w, uint64_t len, float sc, int8_t *q)
{
	uint64_t i = 0, j;

	for (; i + 32 <= len; i += 32)
		for (j = 0; j < 32; j++)
			q[i + j] = q8_step(w[i + j], sc);
	for (; i < len; i++)
		q[i] = q8_step(w[i], sc);
}

int ds_quantize_q8(uint8_t *dst, const float *w, uint64_t n, uint64_t k,
		   uint32_t group)
{
	uint64_t ng = (k + group - 1) / group, r, g, len;
	int8_t *q;
	uint16_t *s;
	size_t nq, ns;

	if (ds_mul_sz(n, k, &nq) || ds_mul_sz(n, ng, &ns))
		return -1;
	q = malloc(nq ? nq : 1);
	s = malloc(ns ? ns * 2 : 2);
	if (q == NULL || s == NULL) {
		free(q); free(s);
		return -1;
	}
	for (r = 0; r < n; r++)
		for (g = 0; g < ng; g++) {
			const float *wg = w + r * k + g * group;
			float amax, sc;

			len = k - g * group < group ? k - g * group : group;
			amax = amax_of(wg, len);
			s[r * ng + g] = ds_f32_to_f16(amax / 127.0f);
			sc = ds_f16_to_f32(s[r * ng + g]);
			if (sc > 0)
				q8_steps(wg, len, sc, q + r * k + g * group);
			else
				memset(q + r * k + g * group, 0, len);
		}
	ds_pack_q8(dst, q, s, n, k, group);
	free(q); free(s);
	return 0;
}

/* ---- reference dequantization ---------------------------------------------- */

void ds_dequant_row(ds_ttype t, const uint8_t *m, uint64_t k, uint64_t row,
		    float *out)
{
	uint64_t kp, ng, i, r = row % 16;
	const uint8_t *rs;

	if (!ds_ttype_interleaved(t)) {
		for (i = 0; i < k; i++) {
			if (t.dt == DS_F32)
				memcpy(&out[i], m + 4 * (row * k + i), 4);
			else if (t.dt == DS_F16)
				out[i] = ds_f16_to_f32(((const uint16_t *)m)[row * k + i]);
			else
				out[i] = (float)((const int32_t *)m)[row * k + i];
		}
		return;
	}
	kp = ds_kpad(t, k);
	ng = t.group ? kp / t.group : 0;
	rs = m + (row / 16) * ds_rowset_bytes(t, k);
	for (i = 0; i < k; i++) {
		if (t.dt == DS_BF16) {
			out[i] = ds_bf16_to_f32(((const uint16_t *)rs)[(i / 2) * 32 + 2 * r + (i & 1)]);
		} else {
			int is4 = t.dt == DS_Q4;
			uint64_t g = i / t.group;
			uint16_t sc;
			uint8_t b = rs[ds_qchunk(is4, t.group, ng, i / (is4 ? 8 : 4)) + 4 * r + (i & 3)];
			int u = !is4 ? b : (i & 4) ? b >> 4 : b & 15;
			int z = is4 ? rs[ds_qgrp_z(t.group, ng, g) + r] : 128;

			memcpy(&sc, rs + ds_qgrp_s(is4, t.group, g) + 2 * r, 2);
			out[i] = ds_f16_to_f32(sc) * (float)(u - z);
		}
	}
}

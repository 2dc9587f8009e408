/* fp8.c - DeepSeek-V3's block-scaled FP8 weights (F8_E4M3 codes and an
 * F32 weight_scale_inv per block) to the runtime types, one 16-row
 * row-set at a time (docs/formats/fp8.md). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"

/* e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is
 * subnormal (m/8 * 2^-6); no infinities, and S.1111.111 is NaN. */
float ds_fp8_e4m3_value(uint8_t code)
{
	unsigned e = (code >> 3) & 15, m = code & 7;
	float v;

	if ((code & 0x7f) == 0x7f)
		return NAN;
	v = e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8 + m), (int)e - 10);
	return code & 0x80 ? -v : v;
}

static void make_table(float tab[256])
{
	int i;

	for (i = 0; i < 256; i++)
		tab[i] = ds_fp8_e4m3_value((uint8_t)i);
}

static float ld_f32(const uint8_t *p)
{
	float f;

	memcpy(&f, p, 4);
	return f;
}

/* The first NaN code in w[0, len) (there is one). */
static uint64_t first_nan(const uint8_t *w, uint64_t len)
{
	uint64_t i;

	for (i = 0; i < len; i++)
		if ((w[i] & 0x7f) == 0x7f)
			return i;
	return len;
}

/* One row: each block's codes times its scale, in f32. */
static int row(float *out, const float *tab, const ds_fp8_src *s, uint64_t r,
	       uint64_t *bad_c)
{
	const uint8_t *w = s->w + r * s->k;
	const uint8_t *sc = s->scale + 4 * (r / s->bo) *
			    ((s->k + s->bi - 1) / s->bi);
	uint64_t c0;

	for (c0 = 0; c0 < s->k; c0 += s->bi) {
		uint64_t len = s->k - c0 < s->bi ? s->k - c0 : s->bi, c;
		float f = ld_f32(sc + 4 * (c0 / s->bi));
		unsigned nan = 0;

		if (!isfinite(f)) {
			*bad_c = c0 / s->bi;
			return -2;
		}
		for (c = 0; c < len; c++) {
			uint8_t b = w[c0 + c];

			nan |= (b & 0x7f) == 0x7f;
			out[c0 + c] = tab[b] * f;
		}
		if (nan) {
			*bad_c = c0 + first_nan(w + c0, len);
			return -1;
		}
	}
	return 0;
}

static int rows_tab(float *out, const float *tab, const ds_fp8_src *s,
		    uint64_t r0, uint64_t rows, uint64_t *bad_r, uint64_t *bad_c)
{
	uint64_t r;
	int rc;

	for (r = 0; r < rows; r++) {
		rc = row(out + r * s->k, tab, s, r0 + r, bad_c);
		if (rc) {
			*bad_r = rc == -2 ? (r0 + r) / s->bo : r0 + r;
			return rc;
		}
	}
	return 0;
}

int ds_fp8_rows(float *out, const ds_fp8_src *s, uint64_t r0, uint64_t rows,
		uint64_t *bad_r, uint64_t *bad_c)
{
	float tab[256];

	make_table(tab);
	return rows_tab(out, tab, s, r0, rows, bad_r, bad_c);
}

/* Row-set rs into dst; 0, -1/-2 as ds_fp8_rows, -3 out of memory. */
static int rowset(uint8_t *dst, ds_ttype t, const float *tab,
		  const ds_fp8_src *s, uint64_t rs, uint64_t *bad_r,
		  uint64_t *bad_c)
{
	uint64_t r0 = 16 * rs, rows = s->n - r0 < 16 ? s->n - r0 : 16, i;
	float *buf = malloc(rows * s->k * sizeof *buf + 4);
	int rc;

	if (buf == NULL)
		return -3;
	rc = rows_tab(buf, tab, s, r0, rows, bad_r, bad_c);
	if (rc == 0 && t.dt == DS_BF16) {
		uint16_t *h = (uint16_t *)buf; /* in place: each read before written */

		for (i = 0; i < rows * s->k; i++)
			h[i] = ds_f32_to_bf16(buf[i]);
		ds_pack_bf16(dst, h, rows, s->k);
	} else if (rc == 0) {
		rc = (t.dt == DS_Q4 ? ds_quantize_q4(dst, buf, rows, s->k, t.group)
				    : ds_quantize_q8(dst, buf, rows, s->k, t.group))
			     ? -3 : 0;
	}
	free(buf);
	return rc;
}

int ds_fp8_matrix(uint8_t *dst, ds_ttype t, const ds_fp8_src *s, int threads,
		  ds_err *err)
{
	uint64_t sets = (s->n + 15) / 16, rsb;
	/* the first failure in row-set order, whichever thread finds it */
	uint64_t first = UINT64_MAX, br = 0, bc = 0;
	int code = 0;
	float tab[256];
	int64_t i;
	char tn[16];

	if (t.dt != DS_BF16 && t.dt != DS_Q8 && t.dt != DS_Q4)
		return ds_errf(err, "cannot convert F8_E4M3 to %s",
			       ds_ttype_name(t, tn));
	make_table(tab);
	rsb = ds_rowset_bytes(t, s->k);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 4) if (threads > 1)
	for (i = 0; i < (int64_t)sets; i++) {
		uint64_t r = 0, c = 0;
		int rc = rowset(dst + (uint64_t)i * rsb, t, tab, s, (uint64_t)i,
				&r, &c);

		if (rc) {
#pragma omp critical(fp8_first)
			if ((uint64_t)i < first) {
				first = (uint64_t)i;
				code = rc;
				br = r;
				bc = c;
			}
		}
	}
	if (code == -1)
		return ds_errf(err, "NaN code 0x%02x at [%llu, %llu]",
			       s->w[br * s->k + bc], (unsigned long long)br,
			       (unsigned long long)bc);
	if (code == -2)
		return ds_errf(err, "scale of block [%llu, %llu] is not finite",
			       (unsigned long long)br, (unsigned long long)bc);
	if (code == -3)
		return ds_errf(err, "out of memory dequantizing a [%llu, %llu] "
			       "matrix", (unsigned long long)s->n,
			       (unsigned long long)s->k);
	return 0;
}

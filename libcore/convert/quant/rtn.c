/* rtn.c - float checkpoint weights to the runtime types (kept or
 * round-to-nearest quantized), one 16-row row-set at a time. */
#include <stdlib.h>
#include <string.h>

#include "quant.h"

int ds_st_is_float(enum ds_st_dtype dt)
{
	return dt == DS_ST_F32 || dt == DS_ST_F16 || dt == DS_ST_BF16;
}

void ds_to_f32(float *dst, const uint8_t *src, enum ds_st_dtype dt,
	       uint64_t count)
{
	uint64_t i;

	if (dt == DS_ST_F32) {
		memcpy(dst, src, 4 * count);
	} else if (dt == DS_ST_F16) {
		for (i = 0; i < count; i++)
			dst[i] = ds_f16_to_f32(ds_st_ld16(src + 2 * i));
	} else {
		DS_ASSERT(dt == DS_ST_BF16);
		for (i = 0; i < count; i++)
			dst[i] = ds_bf16_to_f32(ds_st_ld16(src + 2 * i));
	}
}

/* rows [r0, r0 + rows) as bf16 bits */
static void to_bf16(uint16_t *dst, const uint8_t *src, enum ds_st_dtype dt,
		    uint64_t count)
{
	uint64_t i;
	float f;

	for (i = 0; i < count; i++) {
		if (dt == DS_ST_BF16) {
			dst[i] = ds_st_ld16(src + 2 * i);
		} else {
			memcpy(&f, src + 4 * i, 4);
			dst[i] = ds_f32_to_bf16(f);
		}
	}
}

/* Row-set s of an interleaved type; 0, or -1 when out of memory. */
static int rowset(uint8_t *dst, ds_ttype t, const uint8_t *src,
		  enum ds_st_dtype dt, uint64_t n, uint64_t k, uint64_t s)
{
	uint64_t r0 = 16 * s, rows = n - r0 < 16 ? n - r0 : 16;
	uint64_t esz = dt == DS_ST_F32 ? 4 : 2;
	const uint8_t *in = src + r0 * k * esz;
	void *buf = malloc(rows * k * 4 + 4);
	int rc = 0;

	if (buf == NULL)
		return -1;
	if (t.dt == DS_BF16) {
		to_bf16(buf, in, dt, rows * k);
		ds_pack_bf16(dst, buf, rows, k);
	} else {
		ds_to_f32(buf, in, dt, rows * k);
		rc = t.dt == DS_Q4 ? ds_quantize_q4(dst, buf, rows, k, t.group)
				   : ds_quantize_q8(dst, buf, rows, k, t.group);
	}
	free(buf);
	return rc;
}

int ds_rtn_matrix(uint8_t *dst, ds_ttype t, const uint8_t *src,
		  enum ds_st_dtype dt, uint64_t n, uint64_t k, int threads,
		  ds_err *err)
{
	uint64_t sets = (n + 15) / 16, rsb, i;
	char tn[16];
	int64_t s;
	int bad = 0;

	if (!ds_st_is_float(dt) || (t.dt == DS_BF16 && dt == DS_ST_F16) ||
	    (t.dt == DS_F16 && dt == DS_ST_BF16) || t.dt == DS_I32)
		return ds_errf(err, "cannot convert %s to %s", ds_st_dtype_name(dt),
			       ds_ttype_name(t, tn));
	if (t.dt == DS_F32) {
		ds_to_f32((float *)dst, src, dt, n * k);
		return 0;
	}
	if (t.dt == DS_F16 && dt == DS_ST_F16) {
		memcpy(dst, src, 2 * n * k);
		return 0;
	}
	if (t.dt == DS_F16) {
		for (i = 0; i < n * k; i++) {
			uint16_t h;
			float f;

			memcpy(&f, src + 4 * i, 4);
			h = ds_f32_to_f16(f);
			memcpy(dst + 2 * i, &h, 2);
		}
		return 0;
	}
	rsb = ds_rowset_bytes(t, k);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 4) if (threads > 1) reduction(| : bad)
	for (s = 0; s < (int64_t)sets; s++)
		bad |= rowset(dst + (uint64_t)s * rsb, t, src, dt, n, k, (uint64_t)s);
	if (bad)
		return ds_errf(err, "out of memory quantizing a [%llu, %llu] matrix",
			       (unsigned long long)n, (unsigned long long)k);
	return 0;
}

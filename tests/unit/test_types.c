/* test_types.c - runtime tensor layouts: sizes, packing, RTN error bounds. */
#include <math.h>
#include <string.h>

#include "harness.h"
#include "kernels/types.h"
#include "base/util.h"

static void test_names(void)
{
	ds_ttype t;
	char buf[16];

	T_CHECK(ds_ttype_parse("q4g128", &t) == 0 && t.dt == DS_Q4 && t.group == 128);
	T_CHECK(strcmp(ds_ttype_name(t, buf), "q4g128") == 0);
	T_CHECK(ds_ttype_parse("q8g32", &t) == 0 && t.dt == DS_Q8 && t.group == 32);
	T_CHECK(ds_ttype_parse("bf16", &t) == 0 && t.dt == DS_BF16);
	T_CHECK(ds_ttype_parse("q4g33", &t) == -1);
	T_CHECK(ds_ttype_parse("q4g0", &t) == -1);
	T_CHECK(ds_ttype_parse("q5g32", &t) == -1);
	T_CHECK(ds_ttype_parse("q4g128x", &t) == -1);
}

static void test_sizes(void)
{
	ds_ttype q4 = { DS_Q4, 128 }, q8 = { DS_Q8, 64 }, bf = { DS_BF16, 0 };
	uint64_t shape[3] = { 4096, 4096, 0 }, b;

	/* q4g128: 4096 rows x (4096/2 + 4096/128*3) bytes */
	T_CHECK(ds_tensor_bytes(q4, 2, shape, &b) == 0 &&
		b == 4096ull * (2048 + 32 * 3));
	T_CHECK(ds_tensor_bytes(q8, 2, shape, &b) == 0 &&
		b == 4096ull * (4096 + 64 * 2));
	T_CHECK(ds_tensor_bytes(bf, 2, shape, &b) == 0 && b == 4096ull * 8192);
	/* 17 rows need two row-sets */
	shape[0] = 17;
	shape[1] = 100;
	T_CHECK(ds_tensor_bytes(bf, 2, shape, &b) == 0 && b == 2 * 32 * 128);
	/* experts */
	shape[0] = 3; shape[1] = 32; shape[2] = 256;
	T_CHECK(ds_tensor_bytes(q4, 3, shape, &b) == 0 &&
		b == 3 * 2 * ds_rowset_bytes(q4, 256));
	/* overflow is refused */
	shape[0] = 1ull << 62; shape[1] = 1ull << 20;
	T_CHECK(ds_tensor_bytes(bf, 2, shape, &b) == -1);
	T_CHECK(ds_tensor_bytes(bf, 1, shape, &b) == -1);
	{
		ds_ttype f = { DS_F32, 0 };
		uint64_t s2[2] = { 1ull << 62, 8 };
		T_CHECK(ds_tensor_bytes(f, 2, s2, &b) == -1);
	}
}

/* Pack random integers, dequantize: exactly s*(q-z), padding reads as 0. */
static void test_q4_pack(void)
{
	static const uint32_t groups[] = { 32, 64, 128 };
	static const uint64_t ns[] = { 1, 15, 16, 33 }, ks[] = { 32, 96, 256, 200 };
	uint64_t seed = t_seed();
	size_t gi, ni, ki;

	for (gi = 0; gi < 3; gi++)
	for (ni = 0; ni < 4; ni++)
	for (ki = 0; ki < 4; ki++) {
		uint32_t g = groups[gi];
		uint64_t n = ns[ni], k = ks[ki], ng = (k + g - 1) / g, r, i, sh[2] = { n, k }, bytes;
		ds_ttype t = { DS_Q4, g };
		uint8_t *q = malloc(n * k), *z = malloc(n * ng), *dst;
		uint16_t *s = malloc(n * ng * 2);
		float *row = malloc(k * 4);
		int bad = 0;

		for (i = 0; i < n * k; i++) q[i] = t_rand(&seed) & 15;
		for (i = 0; i < n * ng; i++) {
			z[i] = t_rand(&seed) & 15;
			s[i] = ds_f32_to_f16(t_randf(&seed) * 0.1f);
		}
		T_CHECK(ds_tensor_bytes(t, 2, sh, &bytes) == 0);
		dst = malloc(bytes);
		memset(dst, 0xa5, bytes);
		ds_pack_q4(dst, q, s, z, n, k, g);
		for (r = 0; r < n; r++) {
			ds_dequant_row(t, dst, k, r, row);
			for (i = 0; i < k; i++) {
				float want = ds_f16_to_f32(s[r * ng + i / g]) *
					     (float)((int)q[r * k + i] - z[r * ng + i / g]);
				bad += row[i] != want;
			}
		}
		T_CHECKF(bad == 0, "g=%u n=%llu k=%llu: %d values differ", g,
			 (unsigned long long)n, (unsigned long long)k, bad);
		free(q); free(z); free(s); free(row); free(dst);
	}
}

static void test_q8_bf16_pack(void)
{
	uint64_t seed = t_seed(), n = 19, k = 160, r, i, sh[2] = { 19, 160 }, b;
	ds_ttype t8 = { DS_Q8, 32 }, tb = { DS_BF16, 0 };
	int8_t *q = malloc(n * k);
	uint16_t *s = malloc(n * 5 * 2), *w = malloc(n * k * 2);
	uint8_t *d8, *db;
	float row[160];
	int bad8 = 0, badb = 0;

	for (i = 0; i < n * k; i++) {
		q[i] = (int8_t)((int)(t_rand(&seed) % 255) - 127);
		w[i] = ds_f32_to_bf16(t_randf(&seed));
	}
	for (i = 0; i < n * 5; i++)
		s[i] = ds_f32_to_f16(t_randf(&seed));
	ds_tensor_bytes(t8, 2, sh, &b);
	d8 = malloc(b);
	ds_pack_q8(d8, q, s, n, k, 32);
	ds_tensor_bytes(tb, 2, sh, &b);
	db = malloc(b);
	ds_pack_bf16(db, w, n, k);
	for (r = 0; r < n; r++) {
		ds_dequant_row(t8, d8, k, r, row);
		for (i = 0; i < k; i++)
			bad8 += row[i] != ds_f16_to_f32(s[r * 5 + i / 32]) * q[r * k + i];
		ds_dequant_row(tb, db, k, r, row);
		for (i = 0; i < k; i++)
			badb += row[i] != ds_bf16_to_f32(w[r * k + i]);
	}
	T_CHECK(bad8 == 0);
	T_CHECK(badb == 0);
	free(q); free(s); free(w); free(d8); free(db);
}

/* The byte positions of ds-model(5)'s segmented q4/q8 row-set, worked out
 * by hand for K = 1408, G = 128 (11 groups: segments of 4, 4 and 3): a
 * full q4 segment is a 192-byte header (4 x 32 bytes of scales, 4 x 16 of
 * zeros) and 4 x 1024 bytes of weights, 4288 bytes; the last is 144 bytes
 * of header padded to 192 and 3072 of weights. */
static void test_q4_layout(void)
{
	ds_ttype t4 = { DS_Q4, 128 }, t8 = { DS_Q8, 128 };
	uint64_t n = 16, k = 1408, ng = 11, i, sh[2] = { 16, 1408 }, b;
	uint8_t *q = calloc(n * k, 1), *z = calloc(n * ng, 1), *d;
	uint16_t *s = calloc(n * ng, 2), sv;
	int8_t *q8 = calloc(n * k, 1);
	const uint64_t seg2 = 2 * 4288;

	T_CHECK(ds_rowset_bytes(t4, k) == 2 * 4288 + 192 + 3072);
	/* q8: 128-byte headers, 2048-byte groups: 2 x (128 + 8192) + 128 + 6144 */
	T_CHECK(ds_rowset_bytes(t8, k) == 2 * 8320 + 128 + 6144);
	T_CHECK(ds_tensor_bytes(t4, 2, sh, &b) == 0 && b == ds_rowset_bytes(t4, k));
	d = malloc(b);
	z[3 * ng + 9] = 7;                       /* row 3, group 9 */
	s[5 * ng + 10] = 0x3c00;                 /* row 5, group 10: 1.0 */
	/* row 6, input 1045: group 8, chunk 2 of the group, byte 1, high nibble */
	q[6 * k + 1045] = 11;
	q[6 * k + 1041] = 4;                     /* same byte, low nibble */
	ds_pack_q4(d, q, s, z, n, k, 128);
	T_CHECK(d[seg2 + 32 * 3 + 16 * 1 + 3] == 7);
	memcpy(&sv, d + seg2 + 32 * 2 + 2 * 5, 2);
	T_CHECK(sv == 0x3c00);
	T_CHECK(d[seg2 + 192 + 64 * 2 + 4 * 6 + 1] == (4 | 11 << 4));
	/* the header's padding is zero */
	for (i = seg2 + 144; i < seg2 + 192; i++)
		T_CHECKF(d[i] == 0, "padding byte %llu is %u", (unsigned long long)i, d[i]);
	free(d);
	/* q8: row 2, input 517 is group 4 (segment 1 at 8320, header 128),
	 * chunk (517 - 512) / 4 = 1 of the group, byte 1 */
	q8[2 * k + 517] = -3;
	s[0] = 0x4000;                           /* row 0, group 0: 2.0 */
	d = malloc(ds_rowset_bytes(t8, k));
	ds_pack_q8(d, q8, s, n, k, 128);
	T_CHECK(d[8320 + 128 + 64 * 1 + 4 * 2 + 1] == 125);
	memcpy(&sv, d, 2);
	T_CHECK(sv == 0x4000);
	free(d); free(q); free(z); free(s); free(q8);
}

/* RTN error bounds: q8 within s/2 per weight, q4 within s/2 of its step
 * over the range widened to contain 0. */
static void test_rtn_bounds(void)
{
	uint64_t seed = t_seed(), n = 20, k = 200, r, i, sh[2] = { 20, 200 }, b;
	ds_ttype t4 = { DS_Q4, 64 }, t8 = { DS_Q8, 64 };
	float *w = malloc(n * k * 4), row[200];
	uint8_t *d;
	double worst4 = 0, worst8 = 0;

	for (i = 0; i < n * k; i++)
		w[i] = t_randf(&seed) * (1 + (float)(i % 7));
	ds_tensor_bytes(t4, 2, sh, &b);
	d = malloc(b);
	T_CHECK(ds_quantize_q4(d, w, n, k, 64) == 0);
	for (r = 0; r < n; r++) {
		ds_dequant_row(t4, d, k, r, row);
		for (i = 0; i < k; i++) {
			uint64_t g0 = i / 64 * 64, g1 = g0 + 64 < k ? g0 + 64 : k, j;
			float lo = w[r * k + g0], hi = lo, s;
			for (j = g0; j < g1; j++) {
				lo = fminf(lo, w[r * k + j]);
				hi = fmaxf(hi, w[r * k + j]);
			}
			s = (fmaxf(hi, 0) - fminf(lo, 0)) / 15;
			double e = fabs(row[i] - w[r * k + i]) / s;
			worst4 = e > worst4 ? e : worst4;
		}
	}
	free(d);
	ds_tensor_bytes(t8, 2, sh, &b);
	d = malloc(b);
	T_CHECK(ds_quantize_q8(d, w, n, k, 64) == 0);
	for (r = 0; r < n; r++) {
		ds_dequant_row(t8, d, k, r, row);
		for (i = 0; i < k; i++) {
			uint64_t g0 = i / 64 * 64, g1 = g0 + 64 < k ? g0 + 64 : k, j;
			float am = 0;
			for (j = g0; j < g1; j++)
				am = fmaxf(am, fabsf(w[r * k + j]));
			double e = fabs(row[i] - w[r * k + i]) / (am / 127);
			worst8 = e > worst8 ? e : worst8;
		}
	}
	/* fp16 rounding of the scale adds at most 2^-11 relative per step */
	T_CHECKF(worst4 <= 0.51, "q4 worst error %.3f steps", worst4);
	T_CHECKF(worst8 <= 0.51, "q8 worst error %.3f steps", worst8);
	free(d); free(w);
}

int main(void)
{
	T_RUN(test_names);
	T_RUN(test_sizes);
	T_RUN(test_q4_pack);
	T_RUN(test_q8_bf16_pack);
	T_RUN(test_q4_layout);
	T_RUN(test_rtn_bounds);
	return t_done();
}

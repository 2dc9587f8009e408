/* test_util.c - libcore/util: half floats, CRC-32, parsing, errors. */
#include <string.h>

#include "harness.h"
#include "util.h"

/* f16 -> f32 -> f16 is the identity on every non-NaN bit pattern, and
 * f16 -> f32 agrees with the compiler's own _Float16 conversion. */
static void test_f16_roundtrip(void)
{
	unsigned bad = 0;
	uint32_t h;

	for (h = 0; h < 65536; h++) {
		uint16_t x = (uint16_t)h;
		_Float16 hf;
		float f = ds_f16_to_f32(x);

		memcpy(&hf, &x, 2);
		if ((x & 0x7c00) == 0x7c00 && (x & 0x3ff))
			continue; /* NaN */
		if (ds_f32_to_f16(f) != x || f != (float)hf)
			bad++;
	}
	T_CHECKF(bad == 0, "%u patterns differ", bad);
}

/* f32 -> f16 rounds to nearest even, like the compiler's conversion. */
static void test_f16_rounding(void)
{
	uint64_t seed = t_seed();
	unsigned bad = 0, i;

	for (i = 0; i < 200000; i++) {
		union { uint32_t u; float f; } v;
		_Float16 ref;
		uint16_t rb;

		v.u = (uint32_t)t_rand(&seed);
		if (v.f != v.f)
			continue;
		ref = (_Float16)v.f;
		memcpy(&rb, &ref, 2);
		if (ds_f32_to_f16(v.f) != rb)
			bad++;
	}
	T_CHECKF(bad == 0, "%u of 200000 conversions differ", bad);
}

static void test_bf16(void)
{
	T_CHECK(ds_f32_to_bf16(1.0f) == 0x3f80);
	T_CHECK(ds_bf16_to_f32(0x3f80) == 1.0f);
	/* 1 + 2^-8 is a tie between 1 and 1 + 2^-7: even (1.0) wins */
	T_CHECK(ds_f32_to_bf16(1.00390625f) == 0x3f80);
	T_CHECK(ds_f32_to_bf16(1.01171875f) == 0x3f82);
	T_CHECK(ds_f32_to_bf16(-2.0f) == 0xc000);
}

static void test_crc32(void)
{
	/* the standard check value of CRC-32/ISO-HDLC */
	T_CHECK(ds_crc32(0, "123456789", 9) == 0xcbf43926u);
	T_CHECK(ds_crc32(ds_crc32(0, "1234", 4), "56789", 5) == 0xcbf43926u);
}

static void test_parse(void)
{
	long v;
	double d;

	T_CHECK(ds_parse_long("42", 0, 100, &v) == 0 && v == 42);
	T_CHECK(ds_parse_long("101", 0, 100, &v) == -1);
	T_CHECK(ds_parse_long("4x", 0, 100, &v) == -1);
	T_CHECK(ds_parse_long("", 0, 100, &v) == -1);
	T_CHECK(ds_parse_double("0.5", 0, 1, &d) == 0 && d == 0.5);
	T_CHECK(ds_parse_double("nan", 0, 1, &d) == -1);
}

static void test_err(void)
{
	ds_err e;

	T_CHECK(ds_errf(&e, "tensor %s: bad", "x") == -1);
	T_CHECK(ds_err_prefix(&e, "%s", "model.bin") == -1);
	T_CHECK(strcmp(e.msg, "model.bin: tensor x: bad") == 0);
	T_CHECK(ds_errf(NULL, "ignored") == -1);
}

int main(void)
{
	T_RUN(test_f16_roundtrip);
	T_RUN(test_f16_rounding);
	T_RUN(test_bf16);
	T_RUN(test_crc32);
	T_RUN(test_parse);
	T_RUN(test_err);
	return t_done();
}

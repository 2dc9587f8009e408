/* test_util.c - libcore/util: half floats, CRC-32, parsing, errors,
 * mapped files. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "base/util.h"

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

#define MAPF_BYTES ((size_t)24 << 20)

/* path: MAPF_BYTES of byte i = hash(i), written 4 KiB at a time (as cp
 * writes: the page cache then holds 4 KiB folios); cold: then dropped
 * from the page cache. */
static int write_small(const char *path, int cold)
{
	uint8_t buf[4096];
	size_t i, j;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600), rc = 0;

	if (fd < 0)
		return -1;
	for (i = 0; i < MAPF_BYTES && rc == 0; i += sizeof buf) {
		for (j = 0; j < sizeof buf; j++)
			buf[j] = (uint8_t)((i + j) * 2654435761u >> 13);
		rc = write(fd, buf, sizeof buf) == (ssize_t)sizeof buf ? 0 : -1;
	}
	if (rc == 0 && cold)
		rc = fdatasync(fd) || posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) ? -1 : 0;
	return close(fd) || rc ? -1 : 0;
}

/* 1 if a cold read of path through a 2 MiB-aligned mapping advised
 * MADV_HUGEPAGE maps in 2 MiB pages (what this kernel and file system
 * give), 0 if not, -1 if smaps does not say. */
static int cold_maps_huge(const char *path)
{
	ds_map m;
	ds_err err;
	long long pmd;

	if (write_small(path, 1) != 0 || ds_map_open(&m, path, DS_MAP_HUGE, &err) != 0)
		return -1;
	(void)madvise((void *)m.data, m.size, MADV_POPULATE_READ);
	pmd = ds_map_pmd_bytes(m.data);
	ds_map_close(&m);
	return pmd < 0 ? -1 : pmd >= (long long)(MAPF_BYTES / 2);
}

/* A weights file whose page cache holds 4 KiB folios (a copy) is read
 * again at a populating huge map, into 2 MiB folios that this and later
 * mappings map whole; its bytes are the file's.  Pages that another
 * mapping holds stay as they are. */
static void test_map_rehuge(void)
{
	char dir[] = "/tmp/ds-test-map-XXXXXX", a[64], b[64];
	ds_map m, k;
	ds_err err;
	size_t i, bad = 0;
	int huge;

	if (mkdtemp(dir) == NULL)
		T_SKIP("no temporary directory");
	snprintf(a, sizeof a, "%s/cold", dir);
	snprintf(b, sizeof b, "%s/copy", dir);
	huge = cold_maps_huge(a);
	T_CHECK(write_small(b, 0) == 0);
	if (huge == 1) {
		/* while another mapping holds its pages, nothing is dropped */
		T_CHECK(ds_map_open(&k, b, DS_MAP_POPULATE, &err) == 0);
		T_CHECK(ds_map_open(&m, b, DS_MAP_HUGE | DS_MAP_POPULATE, &err) == 0);
		T_CHECK(ds_map_pmd_bytes(m.data) == 0);
		T_CHECK(memcmp(m.data, k.data, MAPF_BYTES) == 0);
		ds_map_close(&m);
		ds_map_close(&k);
		T_CHECK(ds_map_open(&m, b, DS_MAP_HUGE | DS_MAP_POPULATE, &err) == 0);
		T_CHECKF(ds_map_pmd_bytes(m.data) == (long long)MAPF_BYTES, "%lld",
			 ds_map_pmd_bytes(m.data));
		for (i = 0; i < MAPF_BYTES; i++)
			bad += m.data[i] != (uint8_t)(i * 2654435761u >> 13);
		T_CHECK(bad == 0);
		ds_map_close(&m);
		/* a later mapping without populating finds the 2 MiB folios */
		T_CHECK(ds_map_open(&m, b, DS_MAP_HUGE, &err) == 0);
		(void)madvise((void *)m.data, m.size, MADV_POPULATE_READ);
		T_CHECK(ds_map_pmd_bytes(m.data) == (long long)MAPF_BYTES);
		ds_map_close(&m);
	}
	unlink(a);
	unlink(b);
	rmdir(dir);
	if (huge != 1)
		T_SKIP(huge ? "smaps has no FilePmdMapped" : "no 2 MiB folios from a cold read");
}

int main(void)
{
	T_RUN(test_f16_roundtrip);
	T_RUN(test_f16_rounding);
	T_RUN(test_bf16);
	T_RUN(test_crc32);
	T_RUN(test_parse);
	T_RUN(test_err);
	T_RUN(test_map_rehuge);
	return t_done();
}

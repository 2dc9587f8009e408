/* test_safetensors.c - the safetensors reader and every validation rule. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "format/safetensors.h"

static char dir[64];
static uint64_t seed;

/* Write header text (padded with `pad` spaces) and `n` data bytes; the
 * header length field is hlen when nonzero, else the true length. */
static char *write_st(const char *name, const char *hdr, int pad,
		      const uint8_t *data, size_t n, uint64_t hlen)
{
	char *p = malloc(strlen(dir) + strlen(name) + 2);
	uint64_t len = strlen(hdr) + (uint64_t)pad;
	FILE *f;
	int i;

	sprintf(p, "%s/%s", dir, name);
	f = fopen(p, "wb");
	if (hlen == 0)
		hlen = len;
	fwrite(&hlen, 8, 1, f);
	fputs(hdr, f);
	for (i = 0; i < pad; i++)
		fputc(' ', f);
	if (n)
		fwrite(data, 1, n, f);
	fclose(f);
	return p;
}

/* Open a one-file checkpoint; return 0 if it opened, -1 with err set. */
static int try_open(const char *hdr, size_t ndata, ds_err *err)
{
	uint8_t *data = calloc(ndata + 1, 1);
	char *p = write_st("t.safetensors", hdr, 0, data, ndata, 0);
	ds_st st;
	int rc = ds_st_open_file(&st, p, err);

	if (rc == 0)
		ds_st_free(&st);
	free(data);
	free(p);
	return rc;
}

/* The header must be refused with a message containing `what`. */
static void refuse(const char *hdr, size_t ndata, const char *what)
{
	ds_err err = { "" };
	int rc = try_open(hdr, ndata, &err);

	T_CHECKF(rc == -1, "accepted: %s", hdr);
	T_CHECKF(strstr(err.msg, what) != NULL, "\"%s\" lacks \"%s\"", err.msg,
		 what);
	T_CHECKF(strstr(err.msg, "t.safetensors") != NULL, "\"%s\" lacks the "
		 "file name", err.msg);
	T_CHECKF(strchr(err.msg, '\n') == NULL, "two lines: %s", err.msg);
}

static void test_valid_file(void)
{
	uint8_t data[4 * 6 + 2 * 3];
	const ds_st_tensor *a, *b;
	char *p;
	ds_st st;
	ds_err err;
	size_t i;

	for (i = 0; i < sizeof data; i++)
		data[i] = (uint8_t)t_rand(&seed);
	p = write_st("v.safetensors",
		     "{\"__metadata__\":{\"format\":\"pt\"},"
		     "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[24,30]},"
		     "\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}",
		     5, data, sizeof data, 0);
	T_CHECK(ds_st_open_file(&st, p, &err) == 0);
	T_CHECK(st.n_tensors == 2 && st.n_files == 1);
	a = ds_st_find(&st, "a.weight");
	b = ds_st_find(&st, "b");
	T_CHECK(a != NULL && b != NULL && ds_st_find(&st, "c") == NULL);
	if (a && b) {
		T_CHECK(a->dtype == DS_ST_F32 && a->ndim == 2 &&
			a->shape[0] == 2 && a->shape[1] == 3 && a->nbytes == 24);
		T_CHECK(memcmp(a->data, data, 24) == 0);
		T_CHECK(b->dtype == DS_ST_BF16 && b->nelem == 3);
		T_CHECK(memcmp(b->data, data + 24, 6) == 0);
		/* the file's tensors come in offset order */
		T_CHECK(&st.tensors[0] == a);
		ds_st_prefetch(&st, a);
		ds_st_release(&st, a);
		T_CHECK(memcmp(a->data, data, 24) == 0);
	}
	ds_st_free(&st);
	free(p);
}

static void test_scalar_and_empty(void)
{
	ds_err err;

	/* rank 0 is one element; a 0 in the shape is 0 bytes */
	T_CHECK(try_open("{\"s\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
			 "\"e\":{\"dtype\":\"F16\",\"shape\":[0,4],\"data_offsets\":[8,8]}}",
			 8, &err) == 0);
	T_CHECK(try_open("{}", 0, &err) == 0);
	T_CHECK(try_open("{\"f\":{\"dtype\":\"F4\",\"shape\":[4],\"data_offsets\":[0,2]}}",
			 2, &err) == 0);
}

static void test_header_length(void)
{
	ds_err err = { "" };
	char *p;
	ds_st st;
	FILE *f;

	/* shorter than 8 bytes */
	p = malloc(strlen(dir) + 20);
	sprintf(p, "%s/t.safetensors", dir);
	f = fopen(p, "wb");
	fputs("abc", f);
	fclose(f);
	T_CHECK(ds_st_open_file(&st, p, &err) == -1);
	T_CHECK(strstr(err.msg, "shorter than the 8-byte") != NULL);
	free(p);

	p = write_st("t.safetensors", "{}", 0, NULL, 0, 1000);
	T_CHECK(ds_st_open_file(&st, p, &err) == -1);
	T_CHECKF(strstr(err.msg, "past the end of the file") != NULL, "%s", err.msg);
	free(p);
	p = write_st("t.safetensors", "{}", 0, NULL, 0, 100000001);
	T_CHECK(ds_st_open_file(&st, p, &err) == -1);
	T_CHECKF(strstr(err.msg, "exceeds 100000000") != NULL, "%s", err.msg);
	free(p);
	p = write_st("t.safetensors", "", 0, NULL, 0, 0);
	T_CHECK(ds_st_open_file(&st, p, &err) == -1);
	T_CHECKF(strstr(err.msg, "header length is 0") != NULL, "%s", err.msg);
	free(p);
	/* N larger than every 64-bit sum with 8 */
	p = write_st("t.safetensors", "{}", 0, NULL, 0, ~0ull);
	T_CHECK(ds_st_open_file(&st, p, &err) == -1);
	free(p);
}

static void test_header_json(void)
{
	refuse("[]", 0, "does not start with '{'");
	refuse(" {}", 0, "does not start with '{'");
	refuse("{\"a\":", 0, "header");
	refuse("{} x", 0, "is not a space");
	refuse("{}\n", 0, "is not a space");
	refuse("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
	       "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
	       2, "duplicate");
	refuse("{\"\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
	       1, "header");
	refuse("{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
	       1, "name empty");
	refuse("{\"a\":[1]}", 0, "entry is not an object");
	refuse("{\"__metadata__\":{\"k\":1}}", 0, "__metadata__ value \"k\"");
	refuse("{\"__metadata__\":[\"k\"]}", 0, "__metadata__ is not an object");
}

static void test_entry_fields(void)
{
	refuse("{\"w\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,1]}}",
	       1, "tensor w: unknown dtype \"Q4\"");
	refuse("{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "dtype missing");
	refuse("{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, "shape missing");
	refuse("{\"w\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}",
	       1, "shape[0] is not an integer");
	refuse("{\"w\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}",
	       1, "shape[0] is not an integer");
	refuse("{\"w\":{\"dtype\":\"U8\",\"shape\":3,\"data_offsets\":[0,1]}}",
	       1, "shape is not an array");
	refuse("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
	       "\"data_offsets\":[0,1]}}", 1, "9 dimensions");
	refuse("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}",
	       1, "data_offsets is not two integers");
	refuse("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}",
	       1, "data_offsets is not two integers");
	refuse("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,281474976710656]}}",
	       1, "data_offsets is not two integers");
	refuse("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":0}}",
	       1, "unknown key \"x\"");
	refuse("{\"w\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[8,0]}}",
	       8, "data_offsets [8,0] out of order");
	refuse("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}",
	       20, "shape [2, 3] of F32 needs 24 bytes, data_offsets [0,20] give 20");
	refuse("{\"w\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}",
	       2, "not a whole number of bytes");
	refuse("{\"w\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],"
	       "\"data_offsets\":[0,8]}}", 8, "overflows");
}

static void test_offsets(void)
{
	refuse("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
	       "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}",
	       6, "tensor b: data_offsets [2,6] overlap tensor a");
	refuse("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
	       "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
	       4, "overlap");
	refuse("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
	       "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[6,10]}}",
	       10, "tensor b: data_offsets [6,10] leave a gap after byte 4");
	refuse("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}",
	       8, "gap after byte 0");
	refuse("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
	       "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}",
	       6, "tensor b: data ends at byte");
	refuse("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
	       5, "1 bytes after the last tensor");
}

/* ---- directories and sharded checkpoints ---------------------------------- */

static void write_text(const char *name, const char *text)
{
	char p[256];
	FILE *f;

	snprintf(p, sizeof p, "%s/%s", dir, name);
	f = fopen(p, "w");
	fputs(text, f);
	fclose(f);
}

static void clear_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof cmd, "rm -f %s/*", dir);
	T_CHECK(system(cmd) == 0);
}

static const char *shard_a =
	"{\"x\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
static const char *shard_b =
	"{\"y\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]}}";

static void two_shards(void)
{
	uint8_t d[8];
	size_t i;

	for (i = 0; i < 8; i++)
		d[i] = (uint8_t)t_rand(&seed);
	clear_dir();
	free(write_st("model-00001-of-00002.safetensors", shard_a, 3, d, 8, 0));
	free(write_st("model-00002-of-00002.safetensors", shard_b, 0, d, 8, 0));
}

static void refuse_dir(const char *what)
{
	ds_err err = { "" };
	ds_st st;

	T_CHECK(ds_st_open(&st, dir, &err) == -1);
	T_CHECKF(strstr(err.msg, what) != NULL, "\"%s\" lacks \"%s\"", err.msg,
		 what);
}

static void test_sharded(void)
{
	const ds_st_tensor *x, *y;
	ds_err err;
	ds_st st;

	two_shards();
	write_text("model.safetensors.index.json",
		   "{\"metadata\":{\"total_size\":16},\"weight_map\":{"
		   "\"x\":\"model-00001-of-00002.safetensors\","
		   "\"y\":\"model-00002-of-00002.safetensors\"}}");
	T_CHECK(ds_st_open(&st, dir, &err) == 0);
	x = ds_st_find(&st, "x");
	y = ds_st_find(&st, "y");
	T_CHECK(st.n_files == 2 && x && y && x->file != y->file);
	if (x && y)
		T_CHECK(strcmp(st.files[y->file].name,
			       "model-00002-of-00002.safetensors") == 0);
	ds_st_free(&st);

	write_text("model.safetensors.index.json",
		   "{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
		   "\"y\":\"model-00001-of-00002.safetensors\"}}");
	refuse_dir("tensor y: missing from model-00001-of-00002.safetensors");
	free(write_st("model-00002-of-00002.safetensors",
		      "{\"y\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
		      "\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}",
		      0, (const uint8_t *)"12345678", 8, 0));
	write_text("model.safetensors.index.json",
		   "{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
		   "\"y\":\"model-00002-of-00002.safetensors\"}}");
	refuse_dir("model-00002-of-00002.safetensors: tensor w is not in "
		   "model.safetensors.index.json");
	write_text("model.safetensors.index.json",
		   "{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
		   "\"y\":\"model-00002-of-00002.safetensors\","
		   "\"w\":\"model-00001-of-00002.safetensors\"}}");
	refuse_dir("tensor w: model.safetensors.index.json places it in "
		   "model-00001-of-00002.safetensors");
	two_shards();
	write_text("model.safetensors.index.json",
		   "{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
		   "\"z\":\"model-00001-of-00002.safetensors\","
		   "\"y\":\"model-00002-of-00002.safetensors\"}}");
	refuse_dir("tensor z: missing from model-00001-of-00002.safetensors");
	write_text("model.safetensors.index.json",
		   "{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
		   "\"y\":\"../model-00002-of-00002.safetensors\"}}");
	refuse_dir("tensor y: shard is not a file name");
	/* found by fuzz_stindex: an empty map opened no shard at all */
	write_text("model.safetensors.index.json",
		   "{\"metadata\":{\"total_size\":24},\"weight_map\":{}}");
	refuse_dir("\"weight_map\" names no tensor");
	write_text("model.safetensors.index.json",
		   "{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
		   "\"y\":\"model-00003-of-00002.safetensors\"}}");
	refuse_dir("model-00003-of-00002.safetensors");
	write_text("model.safetensors.index.json", "{\"metadata\":{}}");
	refuse_dir("no \"weight_map\"");
	write_text("model.safetensors.index.json", "{\"weight_map\":");
	refuse_dir("model.safetensors.index.json: line 1");
	/* the same name in two shards */
	free(write_st("model-00002-of-00002.safetensors", shard_a, 0,
		      (const uint8_t *)"12345678", 8, 0));
	write_text("model.safetensors.index.json",
		   "{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
		   "\"y\":\"model-00002-of-00002.safetensors\"}}");
	refuse_dir("tensor x: also in");
}

static void test_dir_single(void)
{
	ds_err err;
	ds_st st;

	clear_dir();
	refuse_dir("no .safetensors file");
	free(write_st("gptq_model-4bit-128g.safetensors", shard_a, 0,
		      (const uint8_t *)"12345678", 8, 0));
	T_CHECK(ds_st_open(&st, dir, &err) == 0);
	T_CHECK(ds_st_find(&st, "x") != NULL);
	ds_st_free(&st);
	free(write_st("other.safetensors", shard_b, 0,
		      (const uint8_t *)"12345678", 8, 0));
	refuse_dir("2 .safetensors files but no model.safetensors.index.json");
	free(write_st("model.safetensors", shard_b, 0,
		      (const uint8_t *)"12345678", 8, 0));
	T_CHECK(ds_st_open(&st, dir, &err) == 0);
	T_CHECK(ds_st_find(&st, "y") != NULL && ds_st_find(&st, "x") == NULL);
	ds_st_free(&st);
	clear_dir();
}

/* Many tensors in random order: every one is found with its own bytes. */
static void test_many(void)
{
	size_t n = 500 + t_rand(&seed) % 1500, i, len = 2, cap;
	size_t *perm = malloc(n * sizeof *perm);
	char *hdr, *p, name[32];
	uint8_t *data = malloc(n * 4);
	ds_err err;
	ds_st st;
	int ok = 1;

	cap = n * 100 + 16;
	hdr = malloc(cap);
	for (i = 0; i < n; i++)
		perm[i] = i;
	for (i = n - 1; i > 0; i--) {
		size_t j = t_rand(&seed) % (i + 1), t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
	}
	for (i = 0; i < n * 4; i++)
		data[i] = (uint8_t)t_rand(&seed);
	strcpy(hdr, "{");
	for (i = 0; i < n; i++)
		len += (size_t)snprintf(hdr + len - 1, cap - len, "%s\"t%zu\":{\"dtype\":"
					"\"U32\",\"shape\":[1],\"data_offsets\":[%zu,%zu]}",
					i ? "," : "", perm[i], 4 * perm[i],
					4 * perm[i] + 4);
	strcat(hdr, "}");
	p = write_st("many.safetensors", hdr, 0, data, n * 4, 0);
	T_CHECK(ds_st_open_file(&st, p, &err) == 0);
	for (i = 0; i < n && st.n_tensors == n; i++) {
		const ds_st_tensor *t;

		snprintf(name, sizeof name, "t%zu", i);
		t = ds_st_find(&st, name);
		if (t == NULL || ds_st_ld32(t->data) != ds_st_ld32(data + 4 * i))
			ok = 0;
	}
	T_CHECK(ok && st.n_tensors == n);
	ds_st_free(&st);
	unlink(p);
	free(p);
	free(hdr);
	free(data);
	free(perm);
}

static void test_dtypes(void)
{
	enum ds_st_dtype dt;
	int i;

	for (i = 0; i < DS_ST_NDTYPES; i++) {
		T_CHECK(ds_st_dtype_parse(ds_st_dtype_name((enum ds_st_dtype)i),
					  &dt) == 0 && (int)dt == i);
		T_CHECK(ds_st_dtype_bits((enum ds_st_dtype)i) > 0);
	}
	T_CHECK(ds_st_dtype_parse("bf16", &dt) == -1);
	T_CHECK(ds_st_dtype_bits(DS_ST_BF16) == 16 &&
		ds_st_dtype_bits(DS_ST_F8_E4M3) == 8 &&
		ds_st_dtype_bits(DS_ST_F4) == 4 && ds_st_dtype_bits(DS_ST_C64) == 64);
}

int main(void)
{
	char cmd[128];

	seed = t_seed();
	strcpy(dir, "/tmp/ds-test-st-XXXXXX");
	if (mkdtemp(dir) == NULL)
		return 1;
	T_RUN(test_valid_file);
	T_RUN(test_scalar_and_empty);
	T_RUN(test_header_length);
	T_RUN(test_header_json);
	T_RUN(test_entry_fields);
	T_RUN(test_offsets);
	T_RUN(test_sharded);
	T_RUN(test_dir_single);
	T_RUN(test_many);
	T_RUN(test_dtypes);
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd) != 0)
		return 1;
	return t_done();
}

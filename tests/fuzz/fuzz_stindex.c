/* fuzz_stindex.c - model.safetensors.index.json of a sharded checkpoint:
 * its weight_map against two real shards (libcore/format/safetensors.c). */
#include "fuzz.h"
#include "format/safetensors.h"

/* A valid shard holding F32 tensors of 2 elements each, named names[]. */
static void shard(const char *file, const char *const *names, int n)
{
	char hdr[512];
	uint8_t buf[1024];
	size_t len = 0, hl;
	uint64_t h;
	int i;

	len += (size_t)snprintf(hdr, sizeof hdr, "{");
	for (i = 0; i < n; i++)
		len += (size_t)snprintf(hdr + len, sizeof hdr - len,
					"%s\"%s\":{\"dtype\":\"F32\",\"shape\":"
					"[2],\"data_offsets\":[%d,%d]}",
					i ? "," : "", names[i], 8 * i,
					8 * i + 8);
	len += (size_t)snprintf(hdr + len, sizeof hdr - len, "}");
	hl = len;
	h = hl;
	memcpy(buf, &h, 8);
	memcpy(buf + 8, hdr, hl);
	memset(buf + 8 + hl, 0x3f, (size_t)(8 * n));
	fz_write(file, buf, 8 + hl + (size_t)(8 * n));
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static const char *const a[] = { "model.embed_tokens.weight",
					 "model.norm.weight" };
	static const char *const b[] = { "lm_head.weight" };

	(void)argc;
	(void)argv;
	fz_mkdir("ckpt");
	shard("ckpt/model-00001-of-00002.safetensors", a, 2);
	shard("ckpt/model-00002-of-00002.safetensors", b, 1);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	ds_st st;
	ds_err err;
	size_t i;

	fz_write("ckpt/model.safetensors.index.json", data, size);
	if (ds_st_open(&st, fz_path("ckpt"), &err) != 0)
		return 0;
	/* only the shards that exist can have been opened */
	FZ_CHECK(st.n_files >= 1 && st.n_files <= 2);
	for (i = 0; i < st.n_tensors; i++)
		FZ_CHECK(ds_st_find(&st, st.tensors[i].name) == &st.tensors[i]);
	ds_st_free(&st);
	return 0;
}

/* fuzz_pcache.c - a prompt cache file (libcore/runtime/pcfile.c) read by
 * ds_pcache_load for a small KV cache.  The first byte: bit 0 repairs the
 * header (magic, version, model, shape, sizes, key, CRC-32s: the checks
 * past them are reached), bit 1 names the file by its header's key; the
 * rest is the file.  A file is used only when it is whole and right: then
 * it is the only block, its prefix matches, and its rows come back as
 * they were written; anything else is ignored, counted once. */
#include "fuzz.h"
#include "runtime/pcache.h"

#define B DS_PCACHE_BLOCK
#define N_VOCAB 1000

static ds_kvcache kv;
static int have_kv;

static void setup(void)
{
	ds_hparams hp;
	ds_err err;

	if (have_kv)
		return;
	memset(&hp, 0, sizeof hp);
	hp.arch = DS_ARCH_LLAMA;
	hp.n_layer = 2;
	hp.n_head_kv = 1;
	hp.head_dim = 32;
	FZ_CHECK(ds_kvcache_init(&kv, &hp, 1, 64, DS_KV_F16, &err) == 0);
	have_kv = 1;
}

static void opts(ds_pcache_opts *o, const char *d)
{
	memset(o, 0, sizeof *o);
	o->max_bytes = 8 * ds_kvcache_span(&kv, B);
	o->dir = d;
	o->n_vocab = N_VOCAB;
	memset(o->model_id, 0x11, sizeof o->model_id);
}

/* The header made right for this cache, the file its exact size. */
static uint8_t *repair(const uint8_t *in, size_t n, size_t *len)
{
	ds_pcache_fhdr h;
	size_t tok, want;
	uint8_t *f;

	if (n < sizeof h)
		return NULL;
	memcpy(&h, in, sizeof h);
	memcpy(h.magic, DS_PCACHE_MAGIC, 8);
	h.version = DS_PCACHE_VERSION;
	h.header_size = sizeof h;
	memset(h.model, 0x11, sizeof h.model);
	h.kv_type = DS_KV_F16;
	h.n_layer = kv.n_layer;
	h.n_kv_head = kv.n_kv_head;
	h.k_dim = kv.k_dim;
	h.v_dim = kv.v_dim;
	h.mla = 0;
	h.block = B;
	h.depth %= 4;
	h.pos_bytes = kv.pos_bytes;
	h.data_bytes = ds_kvcache_span(&kv, B);
	tok = ((size_t)h.depth + 1) * B * sizeof(int32_t);
	want = sizeof h + tok + h.data_bytes;
	f = calloc(1, want);
	FZ_CHECK(f != NULL);
	memcpy(f, in, n < want ? n : want);
	h.key = ds_pcache_key((const int32_t *)(f + sizeof h), h.depth + 1);
	h.tok_crc = ds_crc32(0, f + sizeof h, tok);
	h.data_crc = ds_crc32(0, f + sizeof h + tok, h.data_bytes);
	h.header_crc = 0;
	h.header_crc = ds_crc32(0, &h, sizeof h);
	memcpy(f, &h, sizeof h);
	*len = want;
	return f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *d = fz_mkdir("pc");
	uint8_t *fixed = NULL, *rows;
	const uint8_t *file;
	ds_pcache_fhdr h;
	ds_pcache_stats st;
	ds_pcache_opts o;
	ds_pcache *pc;
	char name[64];
	size_t n;
	ds_err err;

	if (size < 1)
		return 0;
	setup();
	file = data + 1;
	n = size - 1;
	if ((data[0] & 1) && (fixed = repair(file, n, &n)) != NULL)
		file = fixed;
	memset(&h, 0, sizeof h);
	memcpy(&h, file, n < sizeof h ? n : sizeof h);
	if (data[0] & 2)
		snprintf(name, sizeof name, "pc/%016llx.dskv", (unsigned long long)h.key);
	else
		snprintf(name, sizeof name, "pc/00000000000000a5.dskv");
	fz_write(name, file, n);
	opts(&o, d);
	FZ_CHECK(ds_pcache_init(&pc, &kv, &o, &err) == 0);
	FZ_CHECK(ds_pcache_load(pc, &err) == 0);
	ds_pcache_get_stats(pc, &st);
	FZ_CHECK(st.loaded + st.ignored <= 1 && st.blocks == st.loaded);
	if (st.loaded) {
		/* the one block: a prompt's first, whose rows come back */
		const int32_t *tok = (const int32_t *)(file + sizeof h);

		FZ_CHECK(h.depth == 0 && ds_pcache_match(pc, tok, B) == 1);
		ds_kvcache_seq_keep(&kv, 0, 0);
		ds_pcache_restore(pc, &kv, 0, tok, 0, 1);
		rows = malloc(h.data_bytes);
		FZ_CHECK(rows != NULL);
		ds_kvcache_read(&kv, 0, 0, B, rows);
		FZ_CHECK(memcmp(rows, file + sizeof h + B * sizeof(int32_t), h.data_bytes) == 0);
		free(rows);
	}
	FZ_CHECK(ds_pcache_save(pc, &err) == 0);
	ds_pcache_free(pc);
	fz_unlink(name);
	free(fixed);
	return 0;
}

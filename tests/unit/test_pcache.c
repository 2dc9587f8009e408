/* test_pcache.c - the prompt cache's store (runtime/pcache.h): blocks
 * round-trip byte for byte, prefixes share blocks, memory is bounded and
 * a block goes before the blocks it continues; the files: saved and read
 * back, and every kind of bad file (cut short, another magic or version,
 * another model or KV cache, a flipped bit in the header, the tokens or
 * the rows, ids outside the vocabulary, a missing prefix) ignored with a
 * warning that names it. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "runtime/pcache.h"

#define B DS_PCACHE_BLOCK

static uint64_t seed;
static char dir[64];
static char warned[8][600];
static int n_warned;

static void on_warn(void *user, const char *line)
{
	(void)user;
	if (n_warned < 8)
		snprintf(warned[n_warned], sizeof warned[0], "%s", line);
	n_warned++;
}

/* A KV cache of 2 slots: GQA (2 heads of 32, K and V) or MLA-shaped. */
static int kv_open(ds_kvcache *kv, int mla, enum ds_kvtype t)
{
	ds_hparams hp;
	ds_err err;

	memset(&hp, 0, sizeof hp);
	hp.arch = mla ? DS_ARCH_DEEPSEEK2 : DS_ARCH_LLAMA;
	hp.n_layer = 3;
	hp.n_head_kv = 2;
	hp.head_dim = 32;
	hp.kv_lora_rank = 64;
	hp.qk_rope_head_dim = 32;
	return ds_kvcache_init(kv, &hp, 2, 256, t, &err);
}

/* Slot 0 holds n random positions. */
static void fill(ds_kvcache *kv, uint32_t n)
{
	size_t bytes = ds_kvcache_span(kv, n), i;
	uint8_t *src = malloc(bytes);

	for (i = 0; i < bytes; i++)
		src[i] = (uint8_t)t_rand(&seed);
	ds_kvcache_seq_keep(kv, 0, 0);
	ds_kvcache_write(kv, 0, 0, n, src);
	free(src);
}

/* Positions [0, n) of slots 0 and 1 hold the same bytes. */
static int same_rows(const ds_kvcache *kv, uint32_t n)
{
	size_t bytes = ds_kvcache_span(kv, n);
	uint8_t *a = malloc(bytes), *b = malloc(bytes);
	int ok;

	ds_kvcache_read(kv, 0, 0, n, a);
	ds_kvcache_read(kv, 1, 0, n, b);
	ok = memcmp(a, b, bytes) == 0;
	free(a);
	free(b);
	return ok;
}

static ds_pcache *open_pc(const ds_kvcache *kv, size_t blocks, const char *d,
			  uint8_t id, uint32_t n_vocab)
{
	ds_pcache_opts o = { .max_bytes = blocks * ds_kvcache_span(kv, B), .dir = d,
			     .n_vocab = n_vocab, .warn = on_warn };
	ds_pcache *pc;
	ds_err err;

	memset(o.model_id, id, sizeof o.model_id);
	n_warned = 0;
	if (ds_pcache_init(&pc, kv, &o, &err) || ds_pcache_load(pc, &err)) {
		printf("#   %s\n", err.msg);
		return NULL;
	}
	return pc;
}

static void prompt(int32_t *t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		t[i] = (int32_t)(t_rand(&seed) % 1000);
}

static void test_round_trip(void)
{
	int32_t a[100], b[100];
	ds_kvcache kv;
	ds_pcache *pc;
	ds_pcache_stats st;
	int mla;

	for (mla = 0; mla < 2; mla++) {
		T_CHECK(kv_open(&kv, mla, mla ? DS_KV_Q8 : DS_KV_F16) == 0);
		pc = open_pc(&kv, 100, NULL, 1, 1000);
		prompt(a, 100);
		fill(&kv, 70);
		/* 70 positions: 4 whole blocks */
		T_CHECK(ds_pcache_store(pc, &kv, 0, a, 70) == 4);
		T_CHECK(ds_pcache_store(pc, &kv, 0, a, 70) == 0);
		T_CHECK(ds_pcache_match(pc, a, 100) == 4 && ds_pcache_match(pc, a, 63) == 3);
		ds_kvcache_seq_keep(&kv, 1, 0);
		ds_pcache_restore(pc, &kv, 1, a, 0, 4);
		T_CHECK(kv.len[1] == 64 && same_rows(&kv, 64));
		/* from the middle: the slot holds the first blocks already */
		ds_kvcache_seq_keep(&kv, 1, 32);
		ds_pcache_restore(pc, &kv, 1, a, 2, 4);
		T_CHECK(kv.len[1] == 64 && same_rows(&kv, 64));
		/* another prompt sharing two blocks: two more blocks */
		memcpy(b, a, 32 * sizeof *a);
		prompt(b + 32, 68);
		fill(&kv, 64);
		T_CHECK(ds_pcache_store(pc, &kv, 0, b, 64) == 2);
		T_CHECK(ds_pcache_match(pc, b, 64) == 4 && ds_pcache_match(pc, a, 64) == 4);
		/* a change in the first block: nothing */
		b[3]++;
		T_CHECK(ds_pcache_match(pc, b, 64) == 0);
		ds_pcache_get_stats(pc, &st);
		T_CHECK(st.blocks == 6 && st.bytes == 6 * ds_kvcache_span(&kv, B));
		ds_pcache_free(pc);
		ds_kvcache_free(&kv);
	}
}

/* Memory for 4 blocks: the least recent goes, a prefix's last block
 * before the ones it continues; an insertion never evicts its own path. */
static void test_bound(void)
{
	int32_t a[64], b[64], c[64];
	ds_kvcache kv;
	ds_pcache *pc;
	ds_pcache_stats st;

	T_CHECK(kv_open(&kv, 0, DS_KV_F16) == 0);
	pc = open_pc(&kv, 4, NULL, 1, 1000);
	prompt(a, 64);
	prompt(b, 64);
	prompt(c, 64);
	fill(&kv, 64);
	T_CHECK(ds_pcache_store(pc, &kv, 0, a, 48) == 3);
	T_CHECK(ds_pcache_store(pc, &kv, 0, b, 32) == 2);
	/* a's last block went first */
	T_CHECK(ds_pcache_match(pc, a, 64) == 2 && ds_pcache_match(pc, b, 64) == 2);
	/* a used: b is the least recent now */
	ds_kvcache_seq_keep(&kv, 1, 0);
	ds_pcache_restore(pc, &kv, 1, a, 0, 2);
	T_CHECK(ds_pcache_store(pc, &kv, 0, c, 16) == 1);
	T_CHECK(ds_pcache_match(pc, b, 64) == 1 && ds_pcache_match(pc, a, 64) == 2);
	/* longer than the memory: as much as fits, from the start */
	T_CHECK(ds_pcache_store(pc, &kv, 0, c, 64) == 3);
	T_CHECK(ds_pcache_match(pc, c, 64) == 4 && ds_pcache_match(pc, a, 64) == 0);
	ds_pcache_get_stats(pc, &st);
	T_CHECK(st.blocks == 4 && st.max_bytes == 4 * ds_kvcache_span(&kv, B));
	ds_pcache_free(pc);
	/* no memory: nothing held, nothing broken */
	pc = open_pc(&kv, 0, NULL, 1, 1000);
	T_CHECK(ds_pcache_store(pc, &kv, 0, c, 64) == 0 && ds_pcache_match(pc, c, 64) == 0);
	ds_pcache_free(pc);
	ds_kvcache_free(&kv);
}

/* ---- files --------------------------------------------------------------------- */

static char *file_of(const int32_t *tok, size_t blocks)
{
	static char p[200];

	snprintf(p, sizeof p, "%s/%016llx.dskv", dir,
		 (unsigned long long)ds_pcache_key(tok, blocks));
	return p;
}

static void poke(const char *path, long off, uint8_t xor)
{
	FILE *f = fopen(path, "r+b");
	int c;

	if (f == NULL)
		return;
	fseek(f, off, off < 0 ? SEEK_END : SEEK_SET);
	c = fgetc(f);
	fseek(f, -1, SEEK_CUR);
	fputc(c ^ xor, f);
	fclose(f);
}

static int warned_of(const char *what)
{
	for (int i = 0; i < n_warned && i < 8; i++)
		if (strstr(warned[i], what) != NULL)
			return 1;
	return 0;
}

/* Save 4 blocks of a, read them back: the rows as they were. */
static void save_a(ds_kvcache *kv, const int32_t *a)
{
	ds_pcache *pc = open_pc(kv, 100, dir, 1, 1000);
	ds_err err;

	fill(kv, 64);
	ds_pcache_store(pc, kv, 0, a, 64);
	T_CHECK(ds_pcache_save(pc, &err) == 0);
	ds_pcache_free(pc);
}

static void test_files(void)
{
	int32_t a[64];
	ds_kvcache kv, kq;
	ds_pcache *pc;
	ds_pcache_stats st;
	char cmd[200];

	snprintf(cmd, sizeof cmd, "%s/cache", dir);
	T_CHECK(kv_open(&kv, 1, DS_KV_F16) == 0 && kv_open(&kq, 1, DS_KV_Q8) == 0);
	prompt(a, 64);
	save_a(&kv, a);
	pc = open_pc(&kv, 100, dir, 1, 1000);
	T_CHECK(pc && ds_pcache_match(pc, a, 64) == 4 && n_warned == 0);
	ds_kvcache_seq_keep(&kv, 1, 0);
	ds_pcache_restore(pc, &kv, 1, a, 0, 4);
	T_CHECK(same_rows(&kv, 64));
	ds_pcache_get_stats(pc, &st);
	T_CHECK(st.loaded == 4 && st.ignored == 0);
	ds_pcache_free(pc);
	/* another model, another KV cache, ids beyond the vocabulary: all
	 * four ignored (the first for its own reason, the rest as well) */
	pc = open_pc(&kv, 100, dir, 2, 1000);
	T_CHECK(pc && ds_pcache_match(pc, a, 64) == 0 && n_warned == 4);
	T_CHECK(warned_of("made for another model"));
	ds_pcache_free(pc);
	pc = open_pc(&kq, 100, dir, 1, 1000);
	T_CHECK(pc && ds_pcache_match(pc, a, 64) == 0 && warned_of("made for another KV cache"));
	ds_pcache_free(pc);
	pc = open_pc(&kv, 100, dir, 1, 10);
	T_CHECK(pc && ds_pcache_match(pc, a, 64) == 0 &&
		warned_of("a token id is outside the vocabulary"));
	ds_pcache_free(pc);
	/* each damage: that block ignored, naming its file, and the blocks
	 * that continue it with it */
	{
		static const struct { long off; uint8_t x; const char *why; } dmg[] = {
			{ 0, 0x20, "not a ds prompt cache file" },
			{ 8, 1, "version 0 (this ds reads 1)" },
			{ 40, 1, "its header's CRC-32 does not match" },
			{ 130, 1, "its token ids' CRC-32 does not match" },
			{ -1, 0x80, "its rows' CRC-32 does not match" },
		};
		size_t i;

		for (i = 0; i < sizeof dmg / sizeof dmg[0]; i++) {
			save_a(&kv, a);
			poke(file_of(a, 2), dmg[i].off, dmg[i].x);
			pc = open_pc(&kv, 100, dir, 1, 1000);
			T_CHECKF(pc && ds_pcache_match(pc, a, 64) == 1, "%s", dmg[i].why);
			T_CHECKF(warned_of(dmg[i].why) && warned_of(strrchr(file_of(a, 2), '/') + 1),
				 "%s: %s", dmg[i].why, warned[0]);
			T_CHECK(warned_of("its prefix is not in the cache"));
			ds_pcache_free(pc);
		}
		/* cut short, and grown */
		save_a(&kv, a);
		T_CHECK(truncate(file_of(a, 3), 300) == 0);
		pc = open_pc(&kv, 100, dir, 1, 1000);
		T_CHECK(pc && ds_pcache_match(pc, a, 64) == 2 && warned_of("300 bytes, not "));
		ds_pcache_free(pc);
		/* named for another prefix; not a file; someone else's names */
		save_a(&kv, a);
		snprintf(cmd, sizeof cmd, "%s", file_of(a, 4));
		T_CHECK(rename(cmd, file_of(a, 1)) == 0);
		snprintf(cmd, sizeof cmd, "%s/0123456789abcdef.dskv", dir);
		T_CHECK(mkdir(cmd, 0755) == 0);
		snprintf(cmd, sizeof cmd, "%s/notes.txt", dir);
		fclose(fopen(cmd, "w"));
		pc = open_pc(&kv, 100, dir, 1, 1000);
		T_CHECK(pc && warned_of("its header names another prefix than its file name"));
		T_CHECK(warned_of("0123456789abcdef.dskv: not a regular file"));
		T_CHECK(!warned_of("notes.txt"));
		ds_pcache_free(pc);
		/* a temporary of a writer that is gone goes; a live one's stays */
		snprintf(cmd, sizeof cmd, "%s/0123456789abcdef.dskv.tmp-999999999", dir);
		fclose(fopen(cmd, "w"));
		snprintf(cmd, sizeof cmd, "%s/0123456789abcdef.dskv.tmp-%d", dir, (int)getpid());
		fclose(fopen(cmd, "w"));
		pc = open_pc(&kv, 100, dir, 1, 1000);
		T_CHECK(access(cmd, F_OK) == 0);
		snprintf(cmd, sizeof cmd, "%s/0123456789abcdef.dskv.tmp-999999999", dir);
		T_CHECK(access(cmd, F_OK) != 0);
		ds_pcache_free(pc);
	}
	ds_kvcache_free(&kv);
	ds_kvcache_free(&kq);
}

/* More bad files than are named: a count after eight. */
static void test_many_bad(void)
{
	ds_kvcache kv;
	ds_pcache *pc;
	ds_pcache_stats st;
	char p[200];
	int i;

	T_CHECK(kv_open(&kv, 0, DS_KV_F16) == 0);
	ds_remove_tree(dir);
	T_CHECK(mkdir(dir, 0755) == 0);
	for (i = 0; i < 12; i++) {
		FILE *f;

		snprintf(p, sizeof p, "%s/%016x.dskv", dir, i);
		f = fopen(p, "w");
		fputs("garbage", f);
		fclose(f);
	}
	pc = open_pc(&kv, 10, dir, 1, 1000);
	ds_pcache_get_stats(pc, &st);
	T_CHECK(st.ignored == 12 && n_warned == 9);
	T_CHECK(strstr(warned[8 - 1], "shorter than its header") != NULL);
	ds_pcache_free(pc);
	ds_kvcache_free(&kv);
}

int main(void)
{
	seed = t_seed();
	snprintf(dir, sizeof dir, "/tmp/ds-test-pcache-%d", (int)getpid());
	T_RUN(test_round_trip);
	T_RUN(test_bound);
	T_RUN(test_files);
	T_RUN(test_many_bad);
	ds_remove_tree(dir);
	return t_done();
}

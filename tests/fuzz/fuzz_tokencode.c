/* fuzz_tokencode.c - text from users through the real tokenizers
 * (libcore/tokenizer/: normalizers, the PCRE2 pre-tokenizers, BPE and
 * Unigram, added-token matching): the first byte picks a tokenizer of
 * testdata (the Hugging Face files fetched into testdata/cache/hf/ by
 * the tok tests when they are there, the SentencePiece models and the
 * golden fixture's tokenizer.json always) and its flags; the rest is the
 * text.  The same bytes read as int32 ids are decoded too. */
#include <glob.h>

#include "tokfz.h"

#define MAX_TOK 16

static ds_tok *toks[MAX_TOK];
static int n_tok;

static void add(const char *pattern)
{
	glob_t g;
	ds_err err;

	if (glob(pattern, 0, NULL, &g) != 0)
		return;
	for (size_t i = 0; i < g.gl_pathc && n_tok < MAX_TOK; i++)
		if (ds_tok_load(&toks[n_tok], g.gl_pathv[i], &err) == 0)
			n_tok++;
		else
			fprintf(stderr, "fuzz_tokencode: %s\n", err.msg);
	globfree(&g);
}

static void free_all(void)
{
	while (n_tok > 0)
		ds_tok_free(toks[--n_tok]);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	add("testdata/golden/llama/tokenizer.json");
	add("testdata/tok/sp/*.model");
	add("testdata/cache/hf/v3/tokenizer.json");
	add("testdata/cache/hf/llama2/tokenizer.json");
	add("testdata/cache/hf/llama3/tokenizer.json");
	add("testdata/cache/hf/qwen3/tokenizer.json");
	add("testdata/cache/hf/dscoder/tokenizer.json");
	if (n_tok == 0) {
		fprintf(stderr, "fuzz_tokencode: no tokenizers (run from the "
			"repository root)\n");
		abort();
	}
	atexit(free_all);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const unsigned flags[] = { 0, DS_TOK_BOS, DS_TOK_NO_BOS,
					  DS_TOK_NO_SPECIAL };
	const ds_tok *tok;
	ds_tok_ids ids = { 0 };
	ds_err err;
	int32_t *raw;
	size_t i, n;

	if (size < 1)
		return 0;
	tok = toks[data[0] % n_tok];
	if (ds_tok_encode(tok, (const char *)data + 1, size - 1,
			  flags[(data[0] / MAX_TOK) % 4], &ids, &err) == 0) {
		for (i = 0; i < ids.n; i++)
			FZ_CHECK(ids.v[i] >= 0 &&
				 (uint32_t)ids.v[i] < ds_tok_n_vocab(tok));
		tokfz_decode(tok, ids.v, ids.n, 0);
	}
	ds_tok_ids_free(&ids);
	n = (size - 1) / 4;
	raw = malloc(n * 4 + 1);
	FZ_CHECK(raw != NULL);
	memcpy(raw, data + 1, n * 4);
	for (i = 0; i < n; i++)   /* mostly inside the vocabulary */
		if (i % 7 != 6)
			raw[i] = (int32_t)((uint32_t)raw[i] % ds_tok_n_vocab(tok));
	tokfz_decode(tok, raw, n, 0);
	tokfz_decode(tok, raw, n, DS_TOK_NO_SPECIAL);
	free(raw);
	return 0;
}

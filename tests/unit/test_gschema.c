/* test_gschema.c - the JSON schema compiler against a real validator (ajv,
 * draft 2020-12, through scripts/ref/ajv-check.js).
 *
 * The corpus (the files in testdata/schema/) gives schemas with documents; ajv
 * decides which are valid, and the grammar must accept exactly those.
 * Documents are compared as JSON.stringify writes them (compact): the
 * grammar's whitespace policy admits that form, while it rejects some
 * valid JSON texts on purpose (long runs of blanks).  The "subset"
 * documents are ones ajv accepts and the grammar rejects by design
 * (docs/grammar.md: property order, extra members, formats' corners);
 * they are checked to stay that way.
 *
 * Then documents are generated from each grammar (random walks over the
 * token mask) and ajv must accept every one: valid by construction.
 *
 * Without node or the pinned npm packages these tests fail, they do not
 * skip.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grammar/grammar.h"
#include "harness.h"

static char tmpdir[64];
static int have_ajv;

static const char *tmp_path(const char *name)
{
	static char buf[4][128];
	static unsigned k;
	char *b = buf[k++ % 4];

	snprintf(b, sizeof buf[0], "%s/%s", tmpdir, name);
	return b;
}

static void test_fetch_ajv(void)
{
	have_ajv = system("scripts/ref/fetch-ajv.sh >&2") == 0 &&
		   system("node --version >/dev/null") == 0;
	T_CHECKF(have_ajv, "scripts/ref/fetch-ajv.sh or node failed: the "
		 "validator is needed (the npm registry must be reachable once)");
}

static int grammar_accepts(const ds_grammar *g, const char *text)
{
	ds_gmatch *m;
	ds_err err;
	int ok;

	if (ds_gmatch_new(g, &m, &err) != 0)
		return -1;
	ok = ds_gmatch_accept_bytes(m, text, strlen(text), &err) == DS_GMATCH_OK &&
	     ds_gmatch_complete(m);
	ds_gmatch_free(m);
	return ok;
}

static void check_case(const json_t *cs, size_t *ndocs)
{
	const char *name = json_string_value(json_object_get(cs, "name"));
	const json_t *docs = json_object_get(cs, "docs"), *d;
	ds_grammar *g = NULL;
	ds_err err;
	size_t i, nvalid = 0, ninvalid = 0;

	if (ds_grammar_from_schema(json_object_get(cs, "schema"), name, &g, &err) != 0) {
		T_CHECKF(0, "%s: %s", name, err.msg);
		return;
	}
	json_array_foreach(docs, i, d) {
		const char *text = json_string_value(json_object_get(d, "text"));
		const char *label = json_string_value(json_object_get(d, "label"));
		int ajv = json_is_true(json_object_get(d, "valid"));
		int gram = grammar_accepts(g, text);

		if (strcmp(label, "subset") == 0)
			T_CHECKF(ajv && gram == 0, "%s: subset %s: ajv %d grammar %d",
				 name, text, ajv, gram);
		else
			T_CHECKF(gram == ajv, "%s: %s: ajv %s, grammar %s", name, text,
				 ajv ? "valid" : "invalid", gram ? "accepts" : "rejects");
		nvalid += ajv && strcmp(label, "valid") == 0;
		ninvalid += !ajv;
		(*ndocs)++;
	}
	/* every case tests both sides */
	T_CHECKF(nvalid > 0 && ninvalid > 0, "%s: %zu valid, %zu invalid", name,
		 nvalid, ninvalid);
	ds_grammar_free(g);
}

static void test_corpus_against_ajv(void)
{
	json_t *all, *cs;
	size_t i, ndocs = 0;
	char cmd[512];

	T_CHECKF(have_ajv, "no validator");
	if (!have_ajv)
		return;
	snprintf(cmd, sizeof cmd, "node scripts/ref/ajv-check.js corpus "
		 "testdata/schema %s", tmp_path("corpus.json"));
	T_CHECK(system(cmd) == 0);
	all = json_load_file(tmp_path("corpus.json"), 0, NULL);
	T_CHECK(json_array_size(all) >= 15);
	json_array_foreach(all, i, cs)
		check_case(cs, &ndocs);
	printf("# %zu schemas, %zu documents\n", json_array_size(all), ndocs);
	json_decref(all);
}

/* ---- documents generated from the grammar --------------------------------- */

typedef struct gvoc {
	uint8_t *bytes[400];
	uint32_t lens[400];
	unsigned weight[400];
	size_t n;
	int32_t eos;
	ds_gvocab *v;
} gvoc;

static void gv_add(gvoc *gv, const char *s, size_t n, unsigned w)
{
	gv->bytes[gv->n] = malloc(n + 1);
	memcpy(gv->bytes[gv->n], s, n);
	gv->lens[gv->n] = (uint32_t)n;
	gv->weight[gv->n++] = w;
}

/* Every byte, and some longer pieces; closing bytes are favoured so that
 * documents end. */
static int gv_build(gvoc *gv)
{
	static const char *const pieces[] = { "\": ", "\", \"", "true", "null",
		"false", "12", "-3", "0.5", "e+2", "2024-01-", "T10:00:00Z", "abc",
		"\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\\n", "\\u00e9", "\"}", "]}",
		"\n  ", NULL };
	size_t b, i;

	memset(gv, 0, sizeof *gv);
	for (b = 0; b < 256; b++) {
		char c = (char)b;
		unsigned w = strchr("\"}],", c) && c ? 40 : b >= 0x20 && b < 0x7f ? 4 : 1;

		gv_add(gv, &c, 1, w);
	}
	for (i = 0; pieces[i]; i++)
		gv_add(gv, pieces[i], strlen(pieces[i]), 6);
	gv->eos = (int32_t)gv->n;
	gv_add(gv, "", 0, 0);
	return ds_gvocab_build(gv->n, (const uint8_t *const *)gv->bytes, gv->lens,
			       NULL, gv->eos, &gv->v, NULL);
}

static void gv_free(gvoc *gv)
{
	size_t i;

	for (i = 0; i < gv->n; i++)
		free(gv->bytes[i]);
	ds_gvocab_free(gv->v);
}

/* One document by a random walk (at most cap bytes): 1 done, 0 gave up,
 * -1 the grammar got stuck (a state with no token allowed). */
static int gen_doc(const ds_grammar *g, const gvoc *gv, uint64_t *seed,
		   char *out, size_t cap)
{
	uint64_t bits[400 / 64 + 1];
	ds_gmatch *m;
	ds_err err;
	size_t len = 0;
	int rc = 0;

	if (ds_gmatch_new(g, &m, &err) != 0)
		return -1;
	while (len < cap) {
		unsigned total = 0, r;
		size_t i;
		int32_t pick = -1;

		if (ds_gmatch_mask(m, gv->v, bits, &err) != 0) {
			rc = -1;
			break;
		}
		if ((bits[gv->eos / 64] >> (gv->eos % 64) & 1) && t_rand(seed) % 3 == 0) {
			rc = 1;
			break;
		}
		for (i = 0; i < gv->n; i++)
			if ((int32_t)i != gv->eos && (bits[i / 64] >> (i % 64) & 1))
				total += gv->weight[i];
		if (total == 0) {
			rc = bits[gv->eos / 64] >> (gv->eos % 64) & 1 ? 1 : -1;
			break;
		}
		r = (unsigned)(t_rand(seed) % total);
		for (i = 0; i < gv->n && pick < 0; i++)
			if ((int32_t)i != gv->eos && (bits[i / 64] >> (i % 64) & 1)) {
				if (r < gv->weight[i])
					pick = (int32_t)i;
				else
					r -= gv->weight[i];
			}
		if (len + gv->lens[pick] >= cap ||
		    ds_gmatch_accept_token(m, gv->v, pick, &err) != DS_GMATCH_OK)
			break;
		memcpy(out + len, gv->bytes[pick], gv->lens[pick]);
		len += gv->lens[pick];
	}
	out[len] = '\0';
	ds_gmatch_free(m);
	return rc;
}

/* n documents for schema, added to sets as {name, schema, texts}. */
static void generate(const char *name, const json_t *schema, const gvoc *gv,
		     uint64_t *seed, int n, json_t *sets)
{
	json_t *docs = json_array();
	ds_grammar *g = NULL;
	ds_err err;
	char doc[4096];
	int tries, made = 0, stuck = 0;

	if (ds_grammar_from_schema(schema, name, &g, &err) != 0) {
		T_CHECKF(0, "%s: %s", name, err.msg);
		json_decref(docs);
		return;
	}
	for (tries = 0; tries < 20 * n && made < n; tries++) {
		int r = gen_doc(g, gv, seed, doc, sizeof doc);

		stuck += r < 0;
		if (r == 1) {
			json_array_append_new(docs, json_string(doc));
			made++;
		}
	}
	T_CHECKF(stuck == 0, "%s: the walk got stuck %d times", name, stuck);
	T_CHECKF(made >= n / 2, "%s: only %d of %d documents ended", name, made, n);
	json_array_append_new(sets, json_pack("{s:s,s:O,s:o}", "name", name,
					      "schema", (json_t *)schema, "texts", docs));
	ds_grammar_free(g);
}

/* ajv's verdict on every generated text. */
static void validate_sets(const json_t *sets)
{
	json_t *res, *set;
	char cmd[512];
	size_t i, j, total = 0;

	json_dump_file(sets, tmp_path("gen.json"), 0);
	snprintf(cmd, sizeof cmd, "node scripts/ref/ajv-check.js validate %s %s",
		 tmp_path("gen.json"), tmp_path("res.json"));
	T_CHECK(system(cmd) == 0);
	res = json_load_file(tmp_path("res.json"), 0, NULL);
	T_CHECK(json_array_size(res) == json_array_size(sets));
	json_array_foreach(sets, i, set) {
		const json_t *texts = json_object_get(set, "texts");
		const json_t *r = json_array_get(res, i);

		T_CHECK(json_array_size(r) == json_array_size(texts));
		for (j = 0; j < json_array_size(r); j++, total++) {
			const json_t *v = json_array_get(r, j);

			T_CHECKF(json_is_true(json_object_get(v, "ok")), "%s: generated %s: %s",
				 json_string_value(json_object_get(set, "name")),
				 json_string_value(json_array_get(texts, j)),
				 json_string_value(json_object_get(v, "why")));
		}
	}
	printf("# %zu generated documents\n", total);
	json_decref(res);
}

static void test_generated_valid(void)
{
	uint64_t seed = t_seed();
	json_t *all, *cs, *obj, *sets = json_array();
	gvoc gv;
	size_t i;

	T_CHECKF(have_ajv, "no validator");
	if (!have_ajv)
		return;
	T_CHECK(gv_build(&gv) == 0);
	all = json_load_file(tmp_path("corpus.json"), 0, NULL);
	T_CHECK(all != NULL);
	json_array_foreach(all, i, cs)
		generate(json_string_value(json_object_get(cs, "name")),
			 json_object_get(cs, "schema"), &gv, &seed, 60, sets);
	obj = json_pack("{s:s}", "type", "object");
	generate("json_object", obj, &gv, &seed, 60, sets);
	validate_sets(sets);
	json_decref(obj);
	json_decref(sets);
	json_decref(all);
	gv_free(&gv);
}

int main(void)
{
	snprintf(tmpdir, sizeof tmpdir, "/tmp/ds-gschema.XXXXXX");
	if (mkdtemp(tmpdir) == NULL) {
		printf("not ok 1 - mkdtemp\n1..1\n");
		return 1;
	}
	T_RUN(test_fetch_ajv);
	T_RUN(test_corpus_against_ajv);
	T_RUN(test_generated_valid);
	ds_remove_tree(tmpdir);
	return t_done();
}

/*
 * maskbench.c - ds-bench --grammar (maskbench.h).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "maskbench.h"
#include "grammar/grammar.h"
#include "runtime/session.h"

static int doc_row(const char *model, const char *file, const ds_gvocab *v,
		   ds_err *err)
{
	json_error_t je;
	json_t *j = json_load_file(file, JSON_REJECT_DUPLICATES, &je);
	ds_grammar *g = NULL;
	ds_gbench r;
	char *doc;
	int rc;

	if (j == NULL)
		return ds_errf(err, "%s: line %d: %s", file, je.line, je.text);
	doc = json_dumps(json_object_get(j, "doc"), JSON_INDENT(2) | JSON_ENCODE_ANY);
	rc = ds_grammar_from_schema(json_object_get(j, "schema"), "schema", &g, err) ?
	     ds_err_prefix(err, "%s", file) :
	     doc == NULL ? ds_errf(err, "%s: no \"doc\"", file) :
	     ds_grammar_bench(g, v, doc, strlen(doc), &r, NULL, NULL, err);
	if (rc == 0)
		printf("| %s | %s | %zu | %zu | %.1f | %.1f | %.1f | %.1f | %.1f | "
		       "%.2f | %.0f |\n", model, file, ds_gvocab_size(v), r.steps,
		       r.mean_us, r.p50_us, r.p99_us, r.max_us, r.nocache_mean_us,
		       r.accept_mean_us, r.allowed_mean);
	free(doc);
	ds_grammar_free(g);
	json_decref(j);
	return rc;
}

int ds_maskbench(const char *dir, const char *const *docs, int n_docs, ds_err *err)
{
	char *path = ds_path_join(dir, "tokenizer.bin");
	ds_tok *tok = NULL;
	ds_gvocab *v = NULL;
	double t0 = ds_now_s();
	int rc, i;

	if (path == NULL)
		return ds_errf(err, "out of memory");
	rc = ds_tok_load(&tok, path, err) ||
	     ds_gvocab_from_tok(tok, ds_tok_eos(tok), &v, err) ? -1 : 0;
	free(path);
	if (rc == 0) {
		printf("vocabulary: %zu tokens, trie built in %.0f ms; times in "
		       "microseconds, one core\n\n", ds_gvocab_size(v),
		       (ds_now_s() - t0) * 1e3);
		printf("| model | document | vocabulary | steps | mask mean | p50 | "
		       "p99 | max | no cache mean | accept mean | allowed mean |\n");
		printf("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | "
		       "---: | ---: | ---: |\n");
	}
	for (i = 0; rc == 0 && i < n_docs; i++)
		rc = doc_row(dir, docs[i], v, err);
	ds_gvocab_free(v);
	if (tok)
		ds_tok_free(tok);
	return rc;
}

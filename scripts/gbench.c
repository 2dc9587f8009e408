/* gbench.c - the token mask's cost per step on real vocabularies
 * (scripts/bench-grammar.sh builds it against build/libdscore.a).
 *   gbench [DOC.json ...]    default: testdata/gbench/*.json
 * For each vocabulary (Llama 2 32k, DeepSeek-V3's first 102,400 ids as
 * the size of V2's, DeepSeek-V3 129k, Qwen3 152k from testdata/cache/hf)
 * and each document {schema, doc}: the document indented by two spaces,
 * cut into the vocabulary's longest tokens, and the mask at each step
 * (ds_grammar_bench), split by where the step starts: inside a string,
 * in a number, elsewhere (between tokens of the JSON structure).  Prints
 * a markdown table; times are microseconds on one core. */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "../tests/unit/hfvocab.h"

static const struct vspec {
	const char *name, *path, *eos;
	size_t limit;
} vocabs[] = {
	{ "llama2-32k", "testdata/cache/hf/llama2/tokenizer.json", "</s>", 0 },
	{ "v3-102k", "testdata/cache/hf/v3/tokenizer.json",
	  "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", 102400 },
	{ "v3-129k", "testdata/cache/hf/v3/tokenizer.json",
	  "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", 0 },
	{ "qwen3-152k", "testdata/cache/hf/qwen3/tokenizer.json", "<|im_end|>", 0 },
};

/* Where each byte of doc is: 's' in a string, 'n' in a number, 'p'
 * elsewhere. */
static void classify(const char *doc, size_t len, char *cls)
{
	int in_str = 0, esc = 0;
	size_t i;

	for (i = 0; i < len; i++) {
		char c = doc[i];

		if (in_str) {
			cls[i] = 's';
			if (esc)
				esc = 0;
			else if (c == '\\')
				esc = 1;
			else if (c == '"')
				in_str = 0;
			continue;
		}
		if (c == '"') {
			cls[i] = 'p';
			in_str = 1;
		} else if (strchr("-0123456789", c) ||
			   (i && cls[i - 1] == 'n' && strchr(".eE+-0123456789", c))) {
			cls[i] = 'n';
		} else {
			cls[i] = 'p';
		}
	}
	cls[len] = 'p';
}

static void run_doc(const char *vname, const ds_gvocab *v, const char *file)
{
	json_t *j = json_load_file(file, 0, NULL);
	ds_grammar *g = NULL;
	ds_gbench r;
	ds_err err;
	char *doc, *cls;
	double *us, sum[3] = { 0, 0, 0 }, mx[3] = { 0, 0, 0 };
	size_t *off, len, i, cnt[3] = { 0, 0, 0 };
	const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;

	if (j == NULL || ds_grammar_from_schema(json_object_get(j, "schema"), file, &g, &err) != 0) {
		fprintf(stderr, "%s: %s\n", file, j ? err.msg : "cannot read");
		json_decref(j);
		return;
	}
	doc = json_dumps(json_object_get(j, "doc"), JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	len = strlen(doc);
	us = calloc(len + 2, sizeof *us);
	off = calloc(len + 2, sizeof *off);
	cls = calloc(len + 2, 1);
	classify(doc, len, cls);
	if (ds_grammar_bench(g, v, doc, len, &r, us, off, &err) != 0) {
		fprintf(stderr, "%s %s: %s\n", vname, base, err.msg);
	} else {
		for (i = 0; i < r.steps; i++) {
			int k = cls[off[i]] == 's' ? 0 : cls[off[i]] == 'n' ? 1 : 2;

			sum[k] += us[i];
			cnt[k]++;
			mx[k] = us[i] > mx[k] ? us[i] : mx[k];
		}
		printf("| %s | %s | %zu | %.1f | %.1f | %.1f | %.0f | %.0f / %.0f | "
		       "%.0f / %.0f | %.0f / %.0f | %.0f | %.0f | %.1f |\n",
		       vname, base, r.steps, r.mean_us, r.p50_us, r.p99_us, r.max_us,
		       cnt[0] ? sum[0] / (double)cnt[0] : 0, mx[0],
		       cnt[1] ? sum[1] / (double)cnt[1] : 0, mx[1],
		       cnt[2] ? sum[2] / (double)cnt[2] : 0, mx[2],
		       r.nocache_mean_us, r.nocache_max_us, r.accept_mean_us);
	}
	free(us);
	free(off);
	free(cls);
	free(doc);
	ds_grammar_free(g);
	json_decref(j);
}

int main(int argc, char **argv)
{
	glob_t gl = { 0 };
	char **files = argv + 1;
	size_t nfiles = (size_t)argc - 1, k, i;

	if (argc < 2) {
		glob("testdata/gbench/*.json", 0, NULL, &gl);
		files = gl.gl_pathv;
		nfiles = gl.gl_pathc;
	}
	printf("| vocabulary | document | steps | mean | p50 | p99 | max | "
	       "string mean / max | number mean / max | other mean / max | "
	       "no cache mean | no cache max | accept |\n");
	printf("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
	       "---: | ---: | ---: | ---: |\n");
	for (k = 0; k < sizeof vocabs / sizeof vocabs[0]; k++) {
		hfvocab hv;
		ds_gvocab *v;
		ds_err err;
		uint64_t t0;

		if (hfvocab_load(vocabs[k].path, vocabs[k].eos, vocabs[k].limit, &hv) != 0)
			return 1;
		t0 = ds_now_ns();
		if (ds_gvocab_build(hv.n, (const uint8_t *const *)hv.bytes, hv.lens,
				    hv.special, hv.eos, &v, &err) != 0) {
			fprintf(stderr, "%s: %s\n", vocabs[k].name, err.msg);
			return 1;
		}
		fprintf(stderr, "%s: %zu tokens, trie built in %.0f ms\n", vocabs[k].name,
			hv.n, (double)(ds_now_ns() - t0) / 1e6);
		for (i = 0; i < nfiles; i++)
			run_doc(vocabs[k].name, v, files[i]);
		ds_gvocab_free(v);
		hfvocab_free(&hv);
	}
	globfree(&gl);
	return 0;
}

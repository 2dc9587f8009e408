/* test_jinja.c - the Jinja interpreter (libcore/chat/jinja.h): each
 * feature, whitespace control, the errors and the limits; then the real
 * chat templates against the real engines (test_reference).
 *
 *	build/tests/test_jinja                       the tests (TAP)
 *	build/tests/test_jinja --render T.jinja CTX.json [UNIX-TIME]
 *	                                             print one rendering
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "harness.h"
#include "chat/jinja.h"

#define PINNED 1700000000 /* 2023-11-14 22:13:20 UTC */

/* Render src with ctx (JSON text, NULL: {}); the output or NULL with the
 * error in *err. */
static char *render(const char *src, const char *ctx, ds_err *err)
{
	ds_jinja *t;
	json_t *j = NULL;
	char *out = NULL;
	ds_jinja_opts o = { .pin_time = 1, .now = PINNED };

	if (ctx != NULL) {
		json_error_t je;

		j = json_loads(ctx, 0, &je);
		if (j == NULL) {
			ds_errf(err, "bad test JSON: %s", je.text);
			return NULL;
		}
	}
	if (ds_jinja_parse(src, strlen(src), &t, err) == 0) {
		ds_jinja_render_opts(t, j, &o, &out, NULL, err);
		ds_jinja_free(t);
	}
	json_decref(j);
	return out;
}

/* src renders to want */
static int renders(const char *src, const char *ctx, const char *want)
{
	ds_err err = { "" };
	char *got = render(src, ctx, &err);
	int ok = got != NULL && strcmp(got, want) == 0;

	if (!ok)
		printf("#   template [%s]\n#   got  [%s]\n#   want [%s]\n", src,
		       got != NULL ? got : err.msg, want);
	free(got);
	return ok;
}

/* src fails (to parse or render) with an error containing want */
static int fails(const char *src, const char *ctx, const char *want)
{
	ds_err err = { "" };
	char *got = render(src, ctx, &err);
	int ok = got == NULL && strstr(err.msg, want) != NULL;

	if (!ok)
		printf("#   template [%s]\n#   got  [%s]\n#   want error [%s]\n", src,
		       got != NULL ? got : err.msg, want);
	free(got);
	return ok;
}

static int cli_render(int argc, char **argv)
{
	char *src = NULL, *out = NULL;
	size_t n, outlen;
	ds_err err;
	ds_jinja *t;
	json_t *ctx;
	json_error_t je;
	ds_jinja_opts o = { 0 };

	if (argc < 4)
		return fprintf(stderr, "usage: test_jinja --render T CTX.json [TIME]\n"), 2;
	if (argc > 4) {
		o.pin_time = 1;
		o.now = (time_t)strtoll(argv[4], NULL, 10);
	}
	ctx = json_load_file(argv[3], 0, &je);
	if (ctx == NULL)
		return fprintf(stderr, "%s: %s\n", argv[3], je.text), 1;
	if (ds_read_file(argv[2], 64u << 20, &src, &n, &err) != 0 ||
	    ds_jinja_parse(src, n, &t, &err) != 0) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	if (ds_jinja_render_opts(t, ctx, &o, &out, &outlen, &err) != 0) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	fwrite(out, 1, outlen, stdout);
	free(out);
	free(src);
	ds_jinja_free(t);
	json_decref(ctx);
	return 0;
}

static void test_text_and_output(void)
{
	T_CHECK(renders("", NULL, ""));
	T_CHECK(renders("hello", NULL, "hello"));
	T_CHECK(renders("{{ 'a' }}{{ \"b\" }}", NULL, "ab"));
	T_CHECK(renders("{{ x }}", "{\"x\": 3}", "3"));
	T_CHECK(renders("{{ x }}|{{ y }}|{{ z }}", "{\"x\": null, \"y\": true, \"z\": 1.5}",
			"None|True|1.5"));
	T_CHECK(fails("{{ x | nosuchfilter }}", NULL, "unknown filter 'nosuchfilter'"));
}

/* ---- the real templates against the real engines ---------------------------

 * scripts/ref/fetch-jinja.sh fetches the templates and @huggingface/jinja
 * (npm, pinned); scripts/ref/render-chat.js and render-chat.py render each
 * template with each conversation of testdata/chat/ by @huggingface/jinja
 * and by Jinja2 (configured as transformers does).  Each rendering here
 * must equal Jinja2's byte for byte (or fail where it fails), and
 * @huggingface/jinja's wherever that one agrees with Jinja2; where the two
 * engines differ, the pair must be one of DIVERGE, so that a change on
 * either side is seen.  Nothing is skipped: no packages, no pass. */

static const struct { const char *tpl, *conv, *why; } DIVERGE[] = {
	/* str + dict: Jinja2 raises, @huggingface/jinja writes
	 * "[object Map]" */
	{ "deepseek-r1-0528-qwen3-8b", "tools-call-object-args", "str + dict" },
	{ "deepseek-v3.1", "tools-call-object-args", "str + dict" },
	{ "r1-1776", "tools-call-object-args", "str + dict" },
	/* None | trim: Jinja2 prints "None", @huggingface/jinja raises */
	{ "llama3", "tools-call-string-args", "None | trim" },
	{ "llama3.1", "tools-call-string-args", "None | trim" },
	/* @huggingface/jinja has no reject filter */
	{ "qwen3-coder-30b", "tools-call-object-args", "reject" },
	{ "qwen3-coder-30b", "tools-defined", "reject" },
};

static json_t *load_json(const char *path)
{
	json_error_t je;
	json_t *j = json_load_file(path, 0, &je);

	if (j == NULL)
		printf("#   %s: %s\n", path, je.text);
	return j;
}

static const char *diverges(const char *tpl, const char *conv)
{
	for (size_t i = 0; i < sizeof DIVERGE / sizeof DIVERGE[0]; i++)
		if (strcmp(DIVERGE[i].tpl, tpl) == 0 && strcmp(DIVERGE[i].conv, conv) == 0)
			return DIVERGE[i].why;
	return NULL;
}

/* transformers' variables: the special tokens, tools and documents None,
 * then the conversation's (messages, add_generation_prompt, ...). */
static json_t *ref_context(json_t *tpl, json_t *conv)
{
	json_t *ctx = json_deep_copy(json_object_get(tpl, "special"));
	const char *k;
	json_t *v;

	json_object_set_new(ctx, "tools", json_null());
	json_object_set_new(ctx, "documents", json_null());
	json_object_foreach(conv, k, v)
		if (strcmp(k, "description") != 0)
			json_object_set(ctx, k, v);
	return ctx;
}

/* The first byte where a and b differ, shown around it. */
static void show_diff(const char *what, const char *a, const char *b)
{
	size_t i = 0;

	while (a[i] != '\0' && a[i] == b[i])
		i++;
	printf("#     %s differs at byte %zu: [%.60s] vs [%.60s]\n", what, i,
	       a + (i > 20 ? i - 20 : 0), b + (i > 20 ? i - 20 : 0));
}

typedef struct ref_count {
	int renders, same_hf, diverge, errors;
} ref_count;

/* One (template, conversation): 0 if it is as it should be. */
static int ref_one(json_t *py, json_t *hf, ref_count *c)
{
	const char *tname = json_string_value(json_object_get(py, "template"));
	const char *cname = json_string_value(json_object_get(py, "conversation"));
	char path[512];
	json_t *tpl, *conv, *ctx;
	ds_jinja *t = NULL;
	ds_jinja_opts o = { .pin_time = 1, .now = PINNED };
	char *out = NULL;
	ds_err err = { "" };
	const char *src, *why = diverges(tname, cname);
	int py_ok = json_is_true(json_object_get(py, "ok"));
	int hf_ok = json_is_true(json_object_get(hf, "ok"));
	const char *py_text = json_string_value(json_object_get(py, "text"));
	const char *hf_text = json_string_value(json_object_get(hf, "text"));
	int agree = py_ok == hf_ok && (!py_ok || strcmp(py_text, hf_text) == 0);
	int bad = 0;

	snprintf(path, sizeof path, "testdata/cache/chat/templates/%s.json", tname);
	tpl = load_json(path);
	snprintf(path, sizeof path, "testdata/chat/%s.json", cname);
	conv = load_json(path);
	if (tpl == NULL || conv == NULL)
		return 1;
	ctx = ref_context(tpl, conv);
	src = json_string_value(json_object_get(tpl, "template"));
	if (ds_jinja_parse(src, strlen(src), &t, &err) == 0)
		ds_jinja_render_opts(t, ctx, &o, &out, NULL, &err);
	c->renders++;
	if ((out != NULL) != py_ok) {
		printf("#   %s / %s: C %s, Jinja2 %s\n", tname, cname,
		       out != NULL ? "renders" : err.msg,
		       py_ok ? "renders" : json_string_value(json_object_get(py, "error")));
		bad = 1;
	} else if (out != NULL && strcmp(out, py_text) != 0) {
		printf("#   %s / %s: differs from Jinja2\n", tname, cname);
		show_diff("C vs Jinja2", out, py_text);
		bad = 1;
	}
	c->errors += out == NULL;
	if (agree && why != NULL) {
		printf("#   %s / %s: listed as diverging (%s), but the engines agree\n",
		       tname, cname, why);
		bad = 1;
	} else if (!agree && why == NULL) {
		printf("#   %s / %s: @huggingface/jinja %s, Jinja2 %s\n", tname, cname,
		       hf_ok ? "renders" : json_string_value(json_object_get(hf, "error")),
		       py_ok ? "renders" : json_string_value(json_object_get(py, "error")));
		if (hf_ok && py_ok)
			show_diff("@huggingface/jinja vs Jinja2", hf_text, py_text);
		bad = 1;
	}
	c->same_hf += agree;
	c->diverge += !agree;
	free(out);
	ds_jinja_free(t);
	json_decref(ctx);
	json_decref(tpl);
	json_decref(conv);
	return bad;
}

/* One TAP test per template. */
static void ref_report(const char *tpl, int bad, int n)
{
	t_n++;
	if (bad) {
		t_failed++;
		printf("not ok %d - reference %s (%d of %d conversations wrong)\n", t_n,
		       tpl, bad, n);
	} else {
		printf("ok %d - reference %s (%d conversations)\n", t_n, tpl, n);
	}
}

static void test_reference(void)
{
	json_t *py = NULL, *hf = NULL, *pr, *hr;
	ref_count c = { 0 };
	const char *cur = NULL;
	int bad = 0, n = 0;
	size_t i;

	/* the fetch checks every pinned package and fetches what is missing */
	if (system("scripts/ref/fetch-jinja.sh >&2") != 0 ||
	    system("node scripts/ref/render-chat.js >&2") != 0 ||
	    system("/usr/bin/python3 scripts/ref/render-chat.py >&2") != 0 ||
	    (hf = load_json("testdata/cache/chat/ref-hf.json")) == NULL ||
	    (py = load_json("testdata/cache/chat/ref-jinja2.json")) == NULL) {
		t_n++;
		t_failed++;
		printf("not ok %d - reference renderings: the npm packages, node or "
		       "python3-jinja2 (scripts/deps.sh) are missing\n", t_n);
		json_decref(hf);
		return;
	}
	pr = json_object_get(py, "results");
	hr = json_object_get(hf, "results");
	if (json_array_size(pr) == 0 || json_array_size(pr) != json_array_size(hr)) {
		t_n++;
		t_failed++;
		printf("not ok %d - reference renderings: %zu by Jinja2, %zu by "
		       "@huggingface/jinja\n", t_n, json_array_size(pr), json_array_size(hr));
	}
	for (i = 0; i < json_array_size(pr) && i < json_array_size(hr); i++) {
		const char *tn = json_string_value(json_object_get(json_array_get(pr, i), "template"));

		if (cur != NULL && strcmp(cur, tn) != 0) {
			ref_report(cur, bad, n);
			bad = n = 0;
		}
		cur = tn;
		n++;
		bad += ref_one(json_array_get(pr, i), json_array_get(hr, i), &c);
	}
	if (cur != NULL)
		ref_report(cur, bad, n);
	printf("# reference: %d renderings (%d errors) equal to Jinja2's; "
	       "@huggingface/jinja agrees on %d, diverges on %d (listed)\n",
	       c.renders, c.errors, c.same_hf, c.diverge);
	json_decref(py);
	json_decref(hf);
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--render") == 0)
		return cli_render(argc, argv);
	T_RUN(test_text_and_output);
	test_reference();
	return t_done();
}

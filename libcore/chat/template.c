/* template.c - chat templates of either kind, where they come from, and
 * rendering (template.h). */
#define _GNU_SOURCE     /* memmem */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "template.h"

/* Files a checkpoint's template is read from are small; this bounds a
 * hostile one (the interpreter takes at most 4 MiB of source). */
#define TPL_MAX_FILE (16u << 20)

static const char *const special_keys[] = DS_CHAT_SPECIAL_KEYS;

/* End-of-turn markers a template may use besides EOS, most specific first. */
static const char *const end_markers[] = {
	"<|eot_id|>", "<|im_end|>", "<|EOT|>", "<end_of_turn>", "<|end|>",
};

static void tpl_init(ds_chat_tpl *t, const json_t *special)
{
	memset(t, 0, sizeof *t);
	t->special = json_is_object(special) ? json_deep_copy(special) : json_object();
}

void ds_chat_tpl_free(ds_chat_tpl *t)
{
	ds_jinja_free(t->jt);
	json_decref(t->special);
	memset(t, 0, sizeof *t);
}

static int has(const char *src, size_t len, const char *s)
{
	return memmem(src, len, s, strlen(s)) != NULL;
}

int ds_chat_tpl_named(ds_chat_tpl *t, const char *name, const json_t *special,
		      ds_err *err)
{
	tpl_init(t, special);
	if (t->special == NULL)
		return ds_errf(err, "out of memory");
	if (ds_chat_parse(name, &t->named, err)) {
		ds_chat_tpl_free(t);
		return -1;
	}
	snprintf(t->origin, sizeof t->origin, "the named template %s", name);
	t->think = t->named == DS_CHAT_DEEPSEEK_R1;
	t->end_marker = ds_chat_end_marker(t->named);
	t->tool_fmt = t->named == DS_CHAT_DEEPSEEK3 || t->named == DS_CHAT_DEEPSEEK_R1
		      ? DS_TOOLFMT_DEEPSEEK : DS_TOOLFMT_HERMES;
	return 0;
}

int ds_chat_tpl_jinja(ds_chat_tpl *t, const char *src, size_t len,
		      const json_t *special, const char *origin, ds_err *err)
{
	size_t i;

	tpl_init(t, special);
	if (t->special == NULL)
		return ds_errf(err, "out of memory");
	if (ds_jinja_parse(src, len, &t->jt, err)) {
		ds_chat_tpl_free(t);
		return ds_err_prefix(err, "%s", origin);
	}
	snprintf(t->origin, sizeof t->origin, "%s", origin);
	/* R1-style templates drop the reasoning of earlier answers: they
	 * know the block's end */
	t->think = memmem(src, len, "</think>", 8) != NULL;
	t->renders_tools = memmem(src, len, "tools", 5) != NULL;
	t->renders_calls = memmem(src, len, "tool_calls", 10) != NULL;
	t->tool_fmt = has(src, len, "<\xef\xbd\x9c" "tool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>")
		      ? DS_TOOLFMT_DEEPSEEK : has(src, len, "<|python_tag|>") ||
		      (t->renders_tools && has(src, len, "\"parameters\"") &&
		       !has(src, len, "<tool_call>")) ? DS_TOOLFMT_LLAMA3 : DS_TOOLFMT_HERMES;
	for (i = 0; i < sizeof end_markers / sizeof end_markers[0]; i++)
		if (memmem(src, len, end_markers[i], strlen(end_markers[i])) != NULL) {
			t->end_marker = end_markers[i];
			break;
		}
	return 0;
}

int ds_chat_tpl_file(ds_chat_tpl *t, const char *path, const json_t *special,
		     ds_err *err)
{
	char *src;
	size_t len;
	int rc;

	memset(t, 0, sizeof *t);
	if (ds_read_file(path, TPL_MAX_FILE, &src, &len, err))
		return -1;
	rc = ds_chat_tpl_jinja(t, src, len, special, path, err);
	free(src);
	return rc;
}

const char *ds_chat_tpl_kind(const ds_chat_tpl *t)
{
	return t->jt ? "jinja" : ds_chat_name(t->named);
}

/* ---- model.meta -------------------------------------------------------------------- */

/* The tokenizer's BOS and EOS strings, for a model without the stored
 * special tokens (converted before they were kept). */
static json_t *meta_special(const json_t *meta)
{
	const json_t *tk = json_object_get(meta, "tokenizer");
	json_t *o = json_object(), *b = json_object_get(tk, "bos_token"),
	       *e = json_object_get(tk, "eos_token");

	if (o != NULL && json_is_string(b))
		json_object_set(o, "bos_token", b);
	if (o != NULL && json_is_string(e))
		json_object_set(o, "eos_token", e);
	return o;
}

/* The stored Jinja template: 1 made, 0 none, -1 with err. */
static int meta_jinja(ds_chat_tpl *t, const json_t *jj, const json_t *ms,
		      ds_err *err)
{
	const json_t *src = json_object_get(jj, "template");
	const json_t *sp = json_object_get(jj, "special");

	if (jj == NULL || json_is_null(jj))
		return 0;
	if (!json_is_object(jj))
		return ds_errf(err, "model.meta: chat_template_jinja: must be an object");
	if (src == NULL || json_is_null(src))
		return 0;
	if (!json_is_string(src))
		return ds_errf(err, "model.meta: chat_template_jinja.template: must "
			       "be a string");
	if (sp != NULL && !json_is_object(sp))
		return ds_errf(err, "model.meta: chat_template_jinja.special: must "
			       "be an object");
	if (ds_chat_tpl_jinja(t, json_string_value(src), json_string_length(src),
			      sp ? sp : ms, "model.meta chat_template_jinja", err))
		return -1;
	return 1;
}

int ds_chat_tpl_meta(ds_chat_tpl *t, const json_t *meta, char *warn,
		     size_t warn_len, ds_err *err)
{
	const json_t *name = json_object_get(meta, "chat_template");
	json_t *ms = meta_special(meta);
	enum ds_chat_tmpl probe;
	int rc;

	memset(t, 0, sizeof *t);
	if (warn_len)
		warn[0] = '\0';
	if (ms == NULL)
		return ds_errf(err, "out of memory");
	rc = meta_jinja(t, json_object_get(meta, "chat_template_jinja"), ms, err);
	/* the name of a model converted before, or the fallback */
	if (rc < 0 && json_is_string(name) &&
	    ds_chat_parse(json_string_value(name), &probe, NULL) == 0) {
		snprintf(warn, warn_len, "%s; using the named template %s instead",
			 err->msg, json_string_value(name));
		rc = 0;
	}
	if (rc == 0 && json_is_string(name) &&
	    ds_chat_parse(json_string_value(name), &probe, NULL) == 0)
		rc = ds_chat_tpl_named(t, json_string_value(name), ms, err) ? -1 : 1;
	json_decref(ms);
	return rc;
}

/* ---- checkpoint directories ------------------------------------------------------------ */

/* dir/name read whole when it exists: 1 read, 0 absent, -1 error. */
static int read_opt(const char *dir, const char *name, char **text, size_t *len,
		    char **path, ds_err *err)
{
	*text = NULL;
	*path = ds_path_join(dir, name);
	if (*path == NULL)
		return ds_errf(err, "out of memory");
	if (access(*path, F_OK) != 0)
		return 0;
	return ds_read_file(*path, TPL_MAX_FILE, text, len, err) ? -1 : 1;
}

/* A JSON file of dir, or NULL (*absent when it is not there). */
static json_t *read_json(const char *dir, const char *name, int *absent,
			 ds_err *err)
{
	json_error_t je;
	json_t *j = NULL;
	char *text, *path;
	size_t len;
	int rc = read_opt(dir, name, &text, &len, &path, err);

	*absent = rc == 0;
	if (rc == 1) {
		/* integers as reals: model_max_length can be 1e30 */
		j = json_loadb(text, len, JSON_DECODE_INT_AS_REAL, &je);
		if (j == NULL)
			ds_errf(err, "%s: line %d: %s", path, je.line, je.text);
		else if (!json_is_object(j)) {
			json_decref(j);
			j = NULL;
			ds_errf(err, "%s: not a JSON object", path);
		}
	}
	free(text);
	free(path);
	return j;
}

/* An AddedToken as its content. */
static json_t *token_text(const json_t *v)
{
	if (json_is_object(v))
		v = json_object_get(v, "content");
	return json_is_string(v) ? json_incref((json_t *)v) : NULL;
}

static json_t *special_value(const json_t *v)
{
	json_t *a, *e;
	size_t i;

	if (!json_is_array(v))
		return token_text(v);
	a = json_array();
	json_array_foreach(v, i, e) {
		json_t *s = token_text(e);

		if (s != NULL)
			json_array_append_new(a, s);
	}
	return a;
}

/* The special tokens of cfg, then of map where cfg does not give one. */
static json_t *special_of(const json_t *cfg, const json_t *map)
{
	json_t *o = json_object();
	size_t k;

	for (k = 0; o && k < sizeof special_keys / sizeof special_keys[0]; k++) {
		const json_t *v = json_object_get(cfg, special_keys[k]);
		json_t *s;

		if (v == NULL || json_is_null(v))
			v = json_object_get(map, special_keys[k]);
		if (v != NULL && (s = special_value(v)) != NULL)
			json_object_set_new(o, special_keys[k], s);
	}
	return o;
}

/* tokenizer_config.json's chat_template: a string, or a list of
 * {"name", "template"} of which "default" is the template and the rest
 * are kept by name. */
static int config_templates(const json_t *ct, const char *path,
			    const json_t **def, json_t *named, ds_err *err)
{
	const json_t *e;
	size_t i;

	*def = NULL;
	if (ct == NULL || json_is_null(ct))
		return 0;
	if (json_is_string(ct)) {
		*def = ct;
		return 0;
	}
	if (!json_is_array(ct))
		return ds_errf(err, "%s: chat_template: must be a string or a list "
			       "of {\"name\", \"template\"}", path);
	json_array_foreach(ct, i, e) {
		const json_t *n = json_object_get(e, "name"),
			     *s = json_object_get(e, "template");

		if (!json_is_string(n) || !json_is_string(s))
			return ds_errf(err, "%s: chat_template[%zu]: must be "
				       "{\"name\": string, \"template\": string}",
				       path, i);
		if (strcmp(json_string_value(n), "default") == 0)
			*def = s;
		else
			json_object_set(named, json_string_value(n), (json_t *)s);
	}
	return 0;
}

/* chat_template.jinja: 1 read (*out its text as a JSON string), 0 absent. */
static int jinja_file(const char *dir, json_t **out, ds_err *err)
{
	char *text, *path;
	size_t len;
	int rc = read_opt(dir, "chat_template.jinja", &text, &len, &path, err);

	*out = NULL;
	if (rc == 1 && (*out = json_stringn(text, len)) == NULL)
		rc = ds_errf(err, "%s: not valid UTF-8", path);
	free(text);
	free(path);
	return rc;
}

int ds_chat_tpl_extract(const char *dir, json_t **out, ds_err *err)
{
	json_t *cfg, *map, *file = NULL, *named = json_object(), *o = NULL;
	const json_t *def = NULL;
	char *cpath = ds_path_join(dir, "tokenizer_config.json");
	int absent, rc = -1;

	*out = NULL;
	if (named == NULL || cpath == NULL) {
		cfg = NULL;
		ds_errf(err, "out of memory");
		goto done;
	}
	cfg = read_json(dir, "tokenizer_config.json", &absent, err);
	if (cfg == NULL && !absent)
		goto done;
	map = read_json(dir, "special_tokens_map.json", &absent, err);
	if (map == NULL && !absent)
		goto done;
	if (config_templates(json_object_get(cfg, "chat_template"), cpath, &def,
			     named, err) == 0 &&
	    jinja_file(dir, &file, err) >= 0) {
		if (file != NULL)
			def = file;     /* transformers reads it first */
		rc = 0;
		if (def != NULL || json_object_size(named) > 0)
			o = json_pack("{s:s, s:O?, s:o, s:O}", "source",
				      file ? "chat_template.jinja" : "tokenizer_config.json",
				      "template", def, "special", special_of(cfg, map),
				      "named", named);
		if ((def != NULL || json_object_size(named) > 0) && o == NULL)
			rc = ds_errf(err, "out of memory");
	}
	json_decref(map);
	*out = o;
done:
	json_decref(file);
	json_decref(named);
	json_decref(cfg);
	free(cpath);
	return rc;
}

int ds_chat_tpl_dir(ds_chat_tpl *t, const char *dir, ds_err *err)
{
	json_t *o, *src;
	char origin[160];
	int rc;

	memset(t, 0, sizeof *t);
	if (ds_chat_tpl_extract(dir, &o, err))
		return -1;
	src = json_object_get(o, "template");
	if (!json_is_string(src)) {
		json_decref(o);
		return 0;
	}
	snprintf(origin, sizeof origin, "%s/%s", dir,
		 json_string_value(json_object_get(o, "source")));
	rc = ds_chat_tpl_jinja(t, json_string_value(src), json_string_length(src),
			       json_object_get(o, "special"), origin, err) ? -1 : 1;
	json_decref(o);
	return rc;
}

/* ---- rendering ---------------------------------------------------------------------------- */

/* The named templates read text: a string, or nothing. */
static int named_msgs(const json_t *messages, ds_chat_msg *m, const char *tmpl,
		      ds_err *err)
{
	const json_t *e;
	size_t i;

	json_array_foreach(messages, i, e) {
		const json_t *r = json_object_get(e, "role"),
			     *c = json_object_get(e, "content");

		if (!json_is_string(r))
			return ds_errf(err, "messages[%zu].role: must be a string", i);
		if (c != NULL && !json_is_null(c) && !json_is_string(c))
			return ds_errf(err, "messages[%zu].content: the %s template "
				       "takes text", i, tmpl);
		m[i].role = json_string_value(r);
		m[i].content = json_is_string(c) ? json_string_value(c) : "";
	}
	return 0;
}

static int render_named(const ds_chat_tpl *t, const json_t *messages,
			int add_gen, char **out, size_t *len, ds_err *err)
{
	size_t n = json_array_size(messages);
	ds_chat_msg *m = ds_calloc(n + 1, sizeof *m, err);
	const char *bos = json_string_value(json_object_get(t->special, "bos_token"));
	const char *eos = json_string_value(json_object_get(t->special, "eos_token"));
	int rc;

	if (m == NULL)
		return -1;
	rc = named_msgs(messages, m, ds_chat_name(t->named), err) ||
	     ds_chat_render(t->named, m, n, add_gen, bos, eos, out, err) ? -1 : 0;
	free(m);
	if (rc == 0 && len != NULL)
		*len = strlen(*out);
	return rc;
}

/* transformers' variables: the special tokens, the caller's, then the
 * conversation; tools and documents None unless given. */
static json_t *context(const ds_chat_tpl *t, const json_t *messages,
		       const json_t *vars, int add_gen)
{
	json_t *ctx = json_deep_copy(t->special);
	const char *k;
	json_t *v;

	if (ctx == NULL)
		return NULL;
	if (json_is_object(vars))
		json_object_foreach((json_t *)vars, k, v)
			json_object_set(ctx, k, v);
	if (json_object_get(ctx, "tools") == NULL)
		json_object_set_new(ctx, "tools", json_null());
	if (json_object_get(ctx, "documents") == NULL)
		json_object_set_new(ctx, "documents", json_null());
	if (json_object_set(ctx, "messages", (json_t *)messages) ||
	    json_object_set_new(ctx, "add_generation_prompt", json_boolean(add_gen))) {
		json_decref(ctx);
		return NULL;
	}
	return ctx;
}

int ds_chat_tpl_render(const ds_chat_tpl *t, const json_t *messages,
		       const json_t *vars, int add_gen, char **out, size_t *len,
		       ds_err *err)
{
	json_t *ctx;
	int rc;

	*out = NULL;
	if (!json_is_array(messages))
		return ds_errf(err, "messages: must be an array");
	if (t->jt == NULL)
		return render_named(t, messages, add_gen, out, len, err);
	if ((ctx = context(t, messages, vars, add_gen)) == NULL)
		return ds_errf(err, "out of memory");
	rc = ds_jinja_render_opts(t->jt, ctx, &t->jo, out, len, err);
	json_decref(ctx);
	return rc;
}

int ds_chat_opens_think(const char *prompt, size_t len)
{
	static const char open[] = "<think>";
	size_t k = sizeof open - 1;

	while (len > 0 && prompt[len - 1] != '\0' &&
	       strchr(" \t\r\n", prompt[len - 1]) != NULL)
		len--;
	return len >= k && memcmp(prompt + len - k, open, k) == 0;
}

/*
 * tools.c - structured output and tool calls for ds-serve (serve.h):
 * response_format, tools, tool_choice and parallel_tool_calls checked;
 * the conversation a template renders with its tools; the grammar that
 * forces (or, after its marker, constrains) a call; the model's calls
 * parsed back into OpenAI's tool_calls.  docs/grammar.md, "Tool calls".
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

#define DS_LB "<\xef\xbd\x9c"            /* "<｜" */
#define DS_RB "\xef\xbd\x9c>"            /* "｜>" */
#define DS_SP "\xe2\x96\x81"             /* "▁" */
#define DS_CALLS_BEGIN DS_LB "tool" DS_SP "calls" DS_SP "begin" DS_RB
#define DS_CALLS_END   DS_LB "tool" DS_SP "calls" DS_SP "end" DS_RB
#define DS_CALL_BEGIN  DS_LB "tool" DS_SP "call" DS_SP "begin" DS_RB
#define DS_CALL_END    DS_LB "tool" DS_SP "call" DS_SP "end" DS_RB
#define DS_SEP         DS_LB "tool" DS_SP "sep" DS_RB

#define MAX_TOOLS 128

static int oom(ds_api_err *e)
{
	return ds_api_fail(e, 500, NULL, "out of memory");
}

static json_t *field(const json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	return json_is_null(v) ? NULL : v;
}

/* ---- response_format ---------------------------------------------------------------- */

int ds_api_get_format(json_t *o, ds_api_req *r, ds_api_err *e)
{
	const char *P = "response_format.json_schema.schema";
	json_t *v = field(o, "response_format"), *js, *sc;
	const char *t;
	ds_err err;

	if (v == NULL)
		return 0;
	if (!json_is_object(v) || (t = json_string_value(json_object_get(v, "type"))) == NULL)
		return ds_api_fail(e, 400, "response_format", "response_format: must be "
				   "an object with a \"type\"");
	if (strcmp(t, "text") == 0)
		return 0;
	if (strcmp(t, "json_object") == 0) {
		if (ds_grammar_json_object(&r->grammar, &err))
			return ds_api_fail(e, 500, NULL, "%s", err.msg);
		return 0;
	}
	if (strcmp(t, "json_schema") != 0)
		return ds_api_fail(e, 400, "response_format.type", "response_format.type: "
				   "text, json_object or json_schema");
	js = field(v, "json_schema");
	if (!json_is_object(js))
		return ds_api_fail(e, 400, "response_format.json_schema",
				   "response_format.json_schema: must be an object");
	sc = field(js, "schema");
	if (sc == NULL)
		return ds_api_fail(e, 400, P, "%s: missing", P);
	if (!json_is_object(sc) && !json_is_boolean(sc))
		return ds_api_fail(e, 400, P, "%s: must be an object", P);
	if (ds_grammar_from_schema(sc, P, &r->grammar, &err))
		return ds_api_fail(e, 400, P, "%s", err.msg);
	return 0;
}

/* ---- tools ------------------------------------------------------------------------------------ */

static int name_ok(const char *s)
{
	size_t n = strlen(s), i;

	if (n == 0 || n > 64)
		return 0;
	for (i = 0; i < n; i++)
		if (!(s[i] == '_' || s[i] == '-' || (s[i] >= '0' && s[i] <= '9') ||
		      (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')))
			return 0;
	return 1;
}

/* tools[i]: {"type": "function", "function": {"name", "description",
 * "parameters"}}; names unique. */
static int check_tool(json_t *tools, size_t i, ds_api_err *e)
{
	json_t *t = json_array_get(tools, i), *f, *p;
	const char *ty, *name;
	char k[96];
	size_t j;

	snprintf(k, sizeof k, "tools[%zu]", i);
	ty = json_string_value(json_object_get(t, "type"));
	if (!json_is_object(t) || ty == NULL || strcmp(ty, "function") != 0)
		return ds_api_fail(e, 400, k, "%s: must be {\"type\": \"function\", "
				   "\"function\": {...}}", k);
	snprintf(k, sizeof k, "tools[%zu].function", i);
	if (!json_is_object(f = field(t, "function")))
		return ds_api_fail(e, 400, k, "%s: must be an object", k);
	snprintf(k, sizeof k, "tools[%zu].function.name", i);
	name = json_string_value(json_object_get(f, "name"));
	if (name == NULL || !name_ok(name))
		return ds_api_fail(e, 400, k, "%s: 1 to 64 letters, digits, '_' or '-'", k);
	for (j = 0; j < i; j++)
		if (strcmp(name, json_string_value(json_object_get(json_object_get(
			   json_array_get(tools, j), "function"), "name"))) == 0)
			return ds_api_fail(e, 400, k, "%s: '%s' is tools[%zu]'s name too",
					   k, name, j);
	snprintf(k, sizeof k, "tools[%zu].function.description", i);
	if ((p = field(f, "description")) && !json_is_string(p))
		return ds_api_fail(e, 400, k, "%s: must be a string", k);
	snprintf(k, sizeof k, "tools[%zu].function.parameters", i);
	if ((p = field(f, "parameters")) && !json_is_object(p))
		return ds_api_fail(e, 400, k, "%s: must be an object (a JSON schema)", k);
	return 0;
}

static const json_t *tool_fn(const ds_api_req *r, size_t i)
{
	return json_object_get(json_array_get(r->tools, i), "function");
}

static const char *tool_name(const ds_api_req *r, size_t i)
{
	return json_string_value(json_object_get(tool_fn(r, i), "name"));
}

static int get_choice(json_t *o, ds_api_req *r, ds_api_err *e)
{
	const char *K = "tool_choice", *KN = "tool_choice.function.name";
	json_t *v = field(o, K);
	const char *s = json_string_value(v), *n;
	size_t i;

	r->tool_choice = DS_TOOLS_AUTO;
	if (v == NULL || (s && strcmp(s, "auto") == 0))
		return 0;
	if (s && strcmp(s, "none") == 0) {
		r->tool_choice = DS_TOOLS_NONE;
		return 0;
	}
	if (s && strcmp(s, "required") == 0)
		r->tool_choice = DS_TOOLS_REQUIRED;
	else if (s || !json_is_object(v) || !json_is_object(field(v, "function")) ||
		 !json_is_string(json_object_get(v, "type")) ||
		 strcmp(json_string_value(json_object_get(v, "type")), "function"))
		return ds_api_fail(e, 400, K, "%s: \"auto\", \"none\", \"required\" or "
				   "{\"type\": \"function\", \"function\": {\"name\": ...}}", K);
	if (r->tools == NULL)
		return ds_api_fail(e, 400, K, "%s: no tools given", K);
	if (s)
		return 0;
	n = json_string_value(json_object_get(field(v, "function"), "name"));
	if (n == NULL)
		return ds_api_fail(e, 400, KN, "%s: must be a string", KN);
	for (i = 0; i < json_array_size(r->tools); i++)
		if (strcmp(n, tool_name(r, i)) == 0) {
			r->tool_choice = DS_TOOLS_NAMED;
			r->tool_index = i;
			return 0;
		}
	return ds_api_fail(e, 400, KN, "%s: no tool is named '%.64s'", KN, n);
}

int ds_api_get_tools(json_t *o, ds_api_req *r, ds_api_err *e)
{
	json_t *v = field(o, "tools");
	size_t i;

	r->parallel_tools = 1;
	if (v != NULL && !json_is_array(v))
		return ds_api_fail(e, 400, "tools", "tools: must be an array");
	if (json_array_size(v) > MAX_TOOLS)
		return ds_api_fail(e, 400, "tools", "tools: %zu tools, more than %d",
				   json_array_size(v), MAX_TOOLS);
	for (i = 0; i < json_array_size(v); i++)
		if (check_tool(v, i, e))
			return -1;
	if (json_array_size(v) > 0) {
		if (r->kind == DS_API_COMPLETION)
			return ds_api_fail(e, 400, "tools", "tools: only on "
					   "/v1/chat/completions");
		r->tools = json_incref(v);
	}
	if (get_choice(o, r, e))
		return -1;
	if ((v = field(o, "parallel_tool_calls")) && !json_is_boolean(v))
		return ds_api_fail(e, 400, "parallel_tool_calls", "parallel_tool_calls: "
				   "must be true or false");
	if (v)
		r->parallel_tools = json_is_true(v);
	if (ds_api_tools_on(r) && r->grammar)
		return ds_api_fail(e, 400, "response_format", "response_format: not "
				   "with tools unless tool_choice is \"none\"");
	return 0;
}

int ds_api_tools_on(const ds_api_req *r)
{
	return r->tools != NULL && r->tool_choice != DS_TOOLS_NONE;
}

/* Every tool message answers a call an earlier assistant message made. */
int ds_api_check_tool_ids(const ds_api_req *r, ds_api_err *e)
{
	json_t *seen = json_object(), *m, *c;
	size_t i, j;
	char k[96];
	int rc = 0;

	if (seen == NULL)
		return oom(e);
	json_array_foreach(r->messages, i, m) {
		const char *role = json_string_value(json_object_get(m, "role"));
		const char *id;

		json_array_foreach(field(m, "tool_calls"), j, c) {
			snprintf(k, sizeof k, "messages[%zu].tool_calls[%zu].id", i, j);
			if ((id = json_string_value(json_object_get(c, "id"))) == NULL) {
				rc = ds_api_fail(e, 400, k, "%s: must be a string", k);
				goto out;
			}
			json_object_set_new(seen, id, json_true());
		}
		if (role == NULL || strcmp(role, "tool") != 0)
			continue;
		snprintf(k, sizeof k, "messages[%zu].tool_call_id", i);
		id = json_string_value(json_object_get(m, "tool_call_id"));
		if (id == NULL) {
			rc = ds_api_fail(e, 400, k, "%s: must be a string", k);
			goto out;
		}
		if (json_object_get(seen, id) == NULL) {
			rc = ds_api_fail(e, 400, k, "%s: '%.64s' is no call of an earlier "
					 "assistant message", k, id);
			goto out;
		}
	}
out:
	json_decref(seen);
	return rc;
}

/* ---- a call as text, in a template's format ------------------------------------------------------- */

static int cat(char **s, size_t *n, size_t *cap, const char *t)
{
	size_t l = strlen(t);

	if (ds_grow((void **)s, cap, *n + l + 1, 1))
		return -1;
	memcpy(*s + *n, t, l + 1);
	*n += l;
	return 0;
}

/* One call: its opening, name, arguments and end (not DeepSeek's outer
 * markers). */
static int call_text(enum ds_tool_fmt f, const char *name, const char *args,
		     char **s, size_t *n, size_t *cap)
{
	if (f == DS_TOOLFMT_DEEPSEEK)
		return cat(s, n, cap, DS_CALL_BEGIN "function" DS_SEP) ||
		       cat(s, n, cap, name) || cat(s, n, cap, "\n```json\n") ||
		       cat(s, n, cap, args) || cat(s, n, cap, "\n```" DS_CALL_END);
	return cat(s, n, cap, f == DS_TOOLFMT_LLAMA3 ? "{\"name\": \"" :
		   "<tool_call>\n{\"name\": \"") || cat(s, n, cap, name) ||
	       cat(s, n, cap, f == DS_TOOLFMT_LLAMA3 ? "\", \"parameters\": " :
		   "\", \"arguments\": ") || cat(s, n, cap, args) ||
	       cat(s, n, cap, f == DS_TOOLFMT_LLAMA3 ? "}" : "}\n</tool_call>");
}

/* An assistant message's tool_calls (OpenAI's shape) as the model writes
 * them, appended to *s. */
static int calls_text(enum ds_tool_fmt f, const json_t *calls, char **s,
		      size_t *n, size_t *cap)
{
	const json_t *c;
	size_t i;

	if (f == DS_TOOLFMT_DEEPSEEK && cat(s, n, cap, DS_CALLS_BEGIN))
		return -1;
	json_array_foreach(calls, i, c) {
		const json_t *fn = json_object_get(c, "function");
		const char *name = json_string_value(json_object_get(fn, "name"));
		const char *args = json_string_value(json_object_get(fn, "arguments"));

		if ((i > 0 && cat(s, n, cap, "\n")) ||
		    call_text(f, name ? name : "", args ? args : "{}", s, n, cap))
			return -1;
	}
	return f == DS_TOOLFMT_DEEPSEEK ? cat(s, n, cap, DS_CALLS_END) : 0;
}

const char *ds_tool_trigger(enum ds_tool_fmt f)
{
	return f == DS_TOOLFMT_DEEPSEEK ? DS_CALLS_BEGIN :
	       f == DS_TOOLFMT_LLAMA3 ? "{\"name\": \"" : "<tool_call>";
}

/* ---- the conversation with its tools ---------------------------------------------------------- */

/* The system text that tells a template without tools about them. */
static char *tools_prompt(const ds_api_req *r, enum ds_tool_fmt f)
{
	char *s = NULL, *j;
	size_t n = 0, cap = 0, i;
	int bad = cat(&s, &n, &cap, "You can call these tools; each is a JSON "
		      "object with its name, description and the JSON schema of its "
		      "arguments:\n");

	for (i = 0; !bad && i < json_array_size(r->tools); i++) {
		j = json_dumps(tool_fn(r, i), JSON_COMPACT | JSON_PRESERVE_ORDER);
		bad = j == NULL || cat(&s, &n, &cap, j) || cat(&s, &n, &cap, "\n");
		free(j);
	}
	bad = bad || cat(&s, &n, &cap, "To call a tool, answer with the call "
			 "alone, written as\n") ||
	      (f == DS_TOOLFMT_DEEPSEEK && cat(&s, &n, &cap, DS_CALLS_BEGIN)) ||
	      call_text(f, "NAME", "{ARGUMENTS}", &s, &n, &cap) ||
	      (f == DS_TOOLFMT_DEEPSEEK && cat(&s, &n, &cap, DS_CALLS_END));
	if (bad) {
		free(s);
		return NULL;
	}
	return s;
}

/* A message as a template without tool_calls or the tool role reads it:
 * calls appended to the content, a tool's result as the user's turn. */
static json_t *plain_msg(const json_t *m, enum ds_tool_fmt f)
{
	const char *role = json_string_value(json_object_get(m, "role"));
	const char *c = json_string_value(json_object_get(m, "content"));
	const json_t *calls = field((json_t *)m, "tool_calls");
	char *s = NULL;
	size_t n = 0, cap = 0;
	json_t *o;
	int bad;

	if (strcmp(role, "tool") == 0) {
		bad = cat(&s, &n, &cap, "<tool_response>\n") || cat(&s, &n, &cap, c ? c : "") ||
		      cat(&s, &n, &cap, "\n</tool_response>");
		o = bad ? NULL : json_pack("{s:s, s:s}", "role", "user", "content", s);
	} else if (calls != NULL && json_array_size(calls) > 0) {
		bad = cat(&s, &n, &cap, c ? c : "") || (c && *c && cat(&s, &n, &cap, "\n")) ||
		      calls_text(f, calls, &s, &n, &cap);
		o = bad ? NULL : json_pack("{s:s, s:s}", "role", role, "content", s);
	} else {
		o = json_deep_copy(m);
	}
	free(s);
	return o;
}

int ds_tool_messages(const ds_api_req *r, const ds_chat_tpl *t, json_t **msgs,
		     json_t **vars, ds_api_err *e)
{
	json_t *m, *out = json_array(), *v;
	size_t i;
	char *sys = NULL;

	*msgs = *vars = NULL;
	v = r->tpl_vars ? json_deep_copy(r->tpl_vars) : json_object();
	if (out == NULL || v == NULL)
		goto oom;
	if (r->tools && t->renders_tools && json_object_set(v, "tools", r->tools))
		goto oom;
	if (r->tools && !t->renders_tools) {
		if ((sys = tools_prompt(r, t->tool_fmt)) == NULL ||
		    json_array_append_new(out, json_pack("{s:s, s:s}", "role", "system",
							 "content", sys)))
			goto oom;
	}
	json_array_foreach(r->messages, i, m) {
		json_t *c = t->renders_calls ? json_deep_copy(m) : plain_msg(m, t->tool_fmt);

		if (c == NULL || json_array_append_new(out, c))
			goto oom;
	}
	free(sys);
	*msgs = out;
	*vars = v;
	return 0;
oom:
	free(sys);
	json_decref(out);
	json_decref(v);
	return oom(e);
}

/* ---- the grammar of the calls ---------------------------------------------------------------- */

/* call ::= one alternative per tool allowed: its name, then arguments
 * valid under its parameters. */
static int call_rules(ds_gbuilder *b, const ds_api_req *r, enum ds_tool_fmt f,
		      ds_err *err)
{
	char name[32], path[64], *body = NULL, *lit = NULL;
	size_t n = 0, cap = 0, i, i0 = 0, i1 = json_array_size(r->tools);
	json_t *any = json_pack("{s:s}", "type", "object");
	int rc = 0;

	if (r->tool_choice == DS_TOOLS_NAMED) {
		i0 = r->tool_index;
		i1 = i0 + 1;
	}
	rc = any == NULL || cat(&body, &n, &cap, "open (");
	for (i = i0; rc == 0 && i < i1; i++) {
		const json_t *p = field((json_t *)tool_fn(r, i), "parameters");

		snprintf(name, sizeof name, "args%zu", i);
		snprintf(path, sizeof path, "tools[%zu].function.parameters", i);
		rc = ds_gbuilder_schema(b, name, p ? p : any, path, err);
		if (rc == 0) {
			rc = asprintf(&lit, f == DS_TOOLFMT_DEEPSEEK ? "%s\n```json\n" :
				      f == DS_TOOLFMT_LLAMA3 ? "%s\", \"parameters\": " :
				      "%s\", \"arguments\": ", tool_name(r, i)) < 0;
			snprintf(name, sizeof name, "name%zu", i);
			rc = rc || ds_gbuilder_literal(b, name, lit, strlen(lit), err);
			free(lit);
			lit = NULL;
		}
		snprintf(path, sizeof path, "%sname%zu args%zu", i > i0 ? " | " : "", i, i);
		rc = rc || cat(&body, &n, &cap, path);
	}
	rc = rc || cat(&body, &n, &cap, ") close") ||
	     ds_gbuilder_rule(b, "call", body, err);
	free(body);
	json_decref(any);
	return rc ? -1 : 0;
}

static int fmt_rules(ds_gbuilder *b, enum ds_tool_fmt f, int parallel, ds_err *err)
{
	const char *open = f == DS_TOOLFMT_DEEPSEEK ? DS_CALL_BEGIN "function" DS_SEP :
			   f == DS_TOOLFMT_LLAMA3 ? "{\"name\": \"" : "<tool_call>\n{\"name\": \"";
	const char *close = f == DS_TOOLFMT_DEEPSEEK ? "\n```" DS_CALL_END :
			    f == DS_TOOLFMT_LLAMA3 ? "}" : "}\n</tool_call>";

	if (ds_gbuilder_literal(b, "open", open, strlen(open), err) ||
	    ds_gbuilder_literal(b, "close", close, strlen(close), err))
		return -1;
	if (f == DS_TOOLFMT_DEEPSEEK &&
	    (ds_gbuilder_literal(b, "begin", DS_CALLS_BEGIN, strlen(DS_CALLS_BEGIN), err) ||
	     ds_gbuilder_literal(b, "end", DS_CALLS_END, strlen(DS_CALLS_END), err)))
		return -1;
	parallel = parallel && f != DS_TOOLFMT_LLAMA3;
	return ds_gbuilder_rule(b, "calls", parallel ? "call (\"\\n\" call)*" : "call", err) ||
	       ds_gbuilder_rule(b, "root", f == DS_TOOLFMT_DEEPSEEK ? "begin calls end" :
				"calls", err);
}

int ds_tool_grammar(const ds_api_req *r, enum ds_tool_fmt f, ds_grammar **g,
		    ds_api_err *e)
{
	ds_gbuilder *b = NULL;
	ds_err err;
	int rc;

	*g = NULL;
	if (r->tools == NULL)
		return 0;
	if (ds_gbuilder_new(&b, &err))
		return oom(e);
	err.msg[0] = '\0';
	rc = call_rules(b, r, f, &err) || fmt_rules(b, f, r->parallel_tools, &err) ||
	     ds_gbuilder_finish(b, "root", g, &err);
	ds_gbuilder_free(b);
	if (rc == 0)
		return 0;
	if (strncmp(err.msg, "tools[", 6) == 0 && strstr(err.msg, ".parameters")) {
		char k[64];

		snprintf(k, sizeof k, "%.*s", (int)(strstr(err.msg, ".parameters") - err.msg +
						    strlen(".parameters")), err.msg);
		return ds_api_fail(e, 400, k, "%s", err.msg);
	}
	return ds_api_fail(e, 400, "tools", "tools: %s", err.msg[0] ? err.msg :
			   "out of memory");
}

/* ---- the calls in the output --------------------------------------------------------------- */

static int blank(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* s[a..b) without blanks at the ends. */
static void trim(const char *s, size_t *a, size_t *b)
{
	while (*a < *b && blank(s[*a]))
		(*a)++;
	while (*b > *a && blank(s[*b - 1]))
		(*b)--;
}

static const char *find(const char *s, size_t n, const char *t)
{
	return memmem(s, n, t, strlen(t));
}

/* One call into calls: name, arguments text (JSON, checked). */
static int add_call(json_t *calls, const char *id, const char *name, size_t nn,
		    const char *args, size_t na)
{
	json_t *v = json_loadb(args, na, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, NULL);
	char cid[96];

	if (v == NULL || nn == 0)
		return json_decref(v), -1;
	json_decref(v);
	snprintf(cid, sizeof cid, "call_%s_%zu", id, json_array_size(calls));
	return json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s%, s:s%}}",
		"id", cid, "type", "function", "function", "name", name, nn,
		"arguments", args, na));
}

/* {"name": "N", "KEY": ARGS} in s[0..n): the name and ARGS' text. */
static int json_call(json_t *calls, const char *id, const char *s, size_t n,
		     const char *key)
{
	json_t *o = json_loadb(s, n, JSON_DECODE_INT_AS_REAL, NULL);
	const char *name = json_string_value(json_object_get(o, "name"));
	char qk[32];
	const char *k;
	size_t a, b = n;
	int rc = -1;

	snprintf(qk, sizeof qk, "\"%s\"", key);
	k = find(s, n, qk);
	if (name && k && json_object_get(o, key) != NULL && json_object_size(o) == 2) {
		a = (size_t)(k - s) + strlen(qk);
		while (a < n && (blank(s[a]) || s[a] == ':'))
			a++;
		while (b > a && s[b - 1] != '}')
			b--;
		if (b > a)
			b--;        /* the object's own brace */
		trim(s, &a, &b);
		rc = add_call(calls, id, name, strlen(name), s + a, b - a);
	}
	json_decref(o);
	return rc;
}

static int parse_hermes(json_t *calls, const char *id, const char *s, size_t n)
{
	const char *p = s, *end = s + n, *q, *c;

	while ((q = find(p, (size_t)(end - p), "<tool_call>")) != NULL) {
		q += strlen("<tool_call>");
		if ((c = find(q, (size_t)(end - q), "</tool_call>")) == NULL ||
		    json_call(calls, id, q, (size_t)(c - q), "arguments"))
			return -1;
		p = c + strlen("</tool_call>");
	}
	return 0;
}

static int parse_deepseek(json_t *calls, const char *id, const char *s, size_t n)
{
	const char *p = s, *end = s + n, *q, *nl, *c;
	size_t a, b;

	while ((q = find(p, (size_t)(end - p), DS_CALL_BEGIN "function" DS_SEP)) != NULL) {
		q += strlen(DS_CALL_BEGIN "function" DS_SEP);
		if ((nl = find(q, (size_t)(end - q), "\n```json\n")) == NULL ||
		    (c = find(nl, (size_t)(end - nl), "```" DS_CALL_END)) == NULL)
			return -1;
		a = (size_t)(nl - s) + strlen("\n```json\n");
		b = (size_t)(c - s);
		trim(s, &a, &b);
		if (add_call(calls, id, q, (size_t)(nl - q), s + a, b - a))
			return -1;
		p = c + strlen("```" DS_CALL_END);
	}
	return 0;
}

int ds_tool_parse(enum ds_tool_fmt f, const char *text, size_t n, const char *id,
		  size_t *content, json_t **calls)
{
	const char *tr = ds_tool_trigger(f), *at = find(text, n, tr);
	size_t b;
	int rc;

	*content = n;
	*calls = NULL;
	if (at == NULL)
		return 0;
	if ((*calls = json_array()) == NULL)
		return -1;
	b = (size_t)(at - text);
	if (f == DS_TOOLFMT_DEEPSEEK)
		rc = parse_deepseek(*calls, id, at, n - b);
	else if (f == DS_TOOLFMT_LLAMA3)
		rc = json_call(*calls, id, at, n - b, "parameters");
	else
		rc = parse_hermes(*calls, id, at, n - b);
	if (rc || json_array_size(*calls) == 0) {
		json_decref(*calls);
		*calls = NULL;
		return 0;
	}
	*content = b;
	return 1;
}

size_t ds_tool_shown(enum ds_tool_fmt f, const char *text, size_t n)
{
	const char *tr = ds_tool_trigger(f), *at = find(text, n, tr);
	size_t l = strlen(tr), k;

	if (at != NULL)
		return (size_t)(at - text);
	for (k = l - 1 < n ? l - 1 : n; k > 0; k--)
		if (memcmp(text + n - k, tr, k) == 0)
			return n - k;
	return n;
}

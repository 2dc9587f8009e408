/* msgs.c - the messages of an OpenAI-style chat request, checked and made
 * into the conversation a template reads (template.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template.h"

/* param := the field, err := "field: why"; -1. */
static int bad(char *param, size_t cap, ds_err *err, const char *field,
	       const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int bad(char *param, size_t cap, ds_err *err, const char *field,
	       const char *fmt, ...)
{
	char why[200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	snprintf(param, cap, "%s", field);
	return ds_errf(err, "%s: %s", field, why);
}

/* The field, or NULL when absent or null. */
static const json_t *field(const json_t *o, const char *k)
{
	const json_t *v = json_object_get(o, k);

	return json_is_null(v) ? NULL : v;
}

/* Text parts [{"type": "text", "text": ...}] joined with newlines. */
static json_t *join_parts(const json_t *c, const char *pc, char *param,
			  size_t cap, ds_err *err)
{
	char p[128];
	size_t i, n = 0;
	const json_t *part;
	char *s, *w;
	json_t *out;

	json_array_foreach(c, i, part) {
		const json_t *t = json_object_get(part, "type"),
			     *x = json_object_get(part, "text");

		snprintf(p, sizeof p, "%s[%zu]", pc, i);
		if (!json_is_string(t) || strcmp(json_string_value(t), "text") != 0)
			return bad(param, cap, err, p, "only parts of type \"text\" "
				   "are supported"), NULL;
		if (!json_is_string(x))
			return snprintf(p + strlen(p), sizeof p - strlen(p), ".text"),
			       bad(param, cap, err, p, "must be a string"), NULL;
		n += json_string_length(x) + 1;
	}
	if ((w = s = malloc(n + 1)) == NULL)
		return ds_errf(err, "out of memory"), NULL;
	json_array_foreach(c, i, part) {
		const json_t *x = json_object_get(part, "text");

		if (i)
			*w++ = '\n';     /* not strcat: linear in the parts */
		memcpy(w, json_string_value(x), json_string_length(x));
		w += json_string_length(x);
	}
	out = json_stringn(s, (size_t)(w - s));
	free(s);
	if (out == NULL)
		ds_errf(err, "out of memory");
	return out;
}

/* The role, checked: its canonical name or NULL. */
static const char *role_of(const json_t *m, const char *p, unsigned flags,
			   char *param, size_t cap, ds_err *err)
{
	static const char *const roles[] = { "system", "user", "assistant", "tool" };
	const json_t *role = json_object_get(m, "role");
	char pr[80];
	const char *rs;
	size_t k, n = flags & DS_CHAT_TOOLS ? 4 : 3;

	snprintf(pr, sizeof pr, "%s.role", p);
	if (!json_is_string(role))
		return bad(param, cap, err, pr, "must be a string"), NULL;
	rs = json_string_value(role);
	if (strcmp(rs, "developer") == 0)   /* OpenAI's newer name */
		rs = "system";
	for (k = 0; k < n && strcmp(rs, roles[k]) != 0; k++)
		;
	if (k == n)
		return bad(param, cap, err, pr, "\"%.40s\" is not system, user%s or "
			   "assistant", json_string_value(role),
			   n == 4 ? ", tool" : ""), NULL;
	return roles[k];
}

static json_t *message(const json_t *m, size_t i, unsigned flags, char *param,
		       size_t cap, ds_err *err)
{
	char p[64], pc[80];
	const json_t *c;
	const char *role;
	json_t *out, *content = NULL;

	snprintf(p, sizeof p, "messages[%zu]", i);
	if (!json_is_object(m))
		return bad(param, cap, err, p, "must be an object"), NULL;
	if ((role = role_of(m, p, flags, param, cap, err)) == NULL)
		return NULL;
	if (!(flags & DS_CHAT_TOOLS) && (field(m, "tool_calls") || field(m, "function_call")))
		return bad(param, cap, err, p, "tool calls are not supported"), NULL;
	snprintf(pc, sizeof pc, "%s.content", p);
	c = field(m, "content");
	if (c == NULL && strcmp(role, "assistant") != 0)
		return bad(param, cap, err, pc, "missing"), NULL;
	if (c != NULL && !json_is_string(c) && !json_is_array(c))
		return bad(param, cap, err, pc, "must be a string or an array of "
			   "text parts"), NULL;
	if (json_is_array(c) && (content = join_parts(c, pc, param, cap, err)) == NULL)
		return NULL;
	out = json_deep_copy(m);
	if (out == NULL || json_object_set_new(out, "role", json_string(role)) ||
	    (content && json_object_set(out, "content", content))) {
		json_decref(out);
		json_decref(content);
		return ds_errf(err, "out of memory"), NULL;
	}
	json_decref(content);
	return out;
}

int ds_chat_messages(const json_t *in, unsigned flags, json_t **out,
		     char *param, size_t param_len, ds_err *err)
{
	const json_t *m;
	json_t *a;
	size_t i;

	*out = NULL;
	if (in == NULL || json_is_null(in))
		return bad(param, param_len, err, "messages", "missing");
	if (!json_is_array(in))
		return bad(param, param_len, err, "messages", "must be an array");
	if (json_array_size(in) == 0)
		return bad(param, param_len, err, "messages", "empty");
	if ((a = json_array()) == NULL)
		return ds_errf(err, "out of memory");
	json_array_foreach(in, i, m) {
		json_t *e = message(m, i, flags, param, param_len, err);

		if (e == NULL || json_array_append_new(a, e)) {
			json_decref(a);
			return -1;
		}
	}
	*out = a;
	return 0;
}

int ds_chat_kwargs(const json_t *in, json_t **out, char *param,
		   size_t param_len, ds_err *err)
{
	static const char *const reserved[] = { "messages", "tools", "documents",
						"add_generation_prompt" };
	const char *k = "chat_template_kwargs";
	size_t i;

	*out = NULL;
	if (in == NULL || json_is_null(in))
		return 0;
	if (!json_is_object(in))
		return bad(param, param_len, err, k, "must be an object");
	for (i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
		if (json_object_get(in, reserved[i]) != NULL) {
			char p[64];

			snprintf(p, sizeof p, "%s.%s", k, reserved[i]);
			return bad(param, param_len, err, p, "not a template "
				   "variable that can be set here");
		}
	if ((*out = json_deep_copy(in)) == NULL)
		return ds_errf(err, "out of memory");
	return 0;
}

/* tools or documents: an array (kept in vars), or null. */
static int list_var(const json_t *o, const char *k, json_t **vars, ds_err *err)
{
	const json_t *v = field(o, k);

	if (v == NULL)
		return 0;
	if (!json_is_array(v))
		return ds_errf(err, "%s: must be an array", k);
	if (*vars == NULL && (*vars = json_object()) == NULL)
		return ds_errf(err, "out of memory");
	return json_object_set(*vars, k, (json_t *)v) ? ds_errf(err, "out of memory") : 0;
}

static int body_fields(const json_t *o, unsigned flags, json_t **messages,
		       json_t **vars, int *add_gen, ds_err *err)
{
	const json_t *g = field(o, "add_generation_prompt");
	char param[96];

	if (g != NULL && !json_is_boolean(g))
		return ds_errf(err, "add_generation_prompt: must be true or false");
	*add_gen = g == NULL || json_is_true(g);
	if (ds_chat_messages(field(o, "messages"), flags, messages, param,
			     sizeof param, err) ||
	    ds_chat_kwargs(field(o, "chat_template_kwargs"), vars, param,
			   sizeof param, err))
		return -1;
	if (!(flags & DS_CHAT_TOOLS)) {
		if (field(o, "tools") && json_array_size(field(o, "tools")) > 0)
			return ds_errf(err, "tools: not supported");
		return 0;
	}
	return list_var(o, "tools", vars, err) || list_var(o, "documents", vars, err)
	       ? -1 : 0;
}

int ds_chat_body(const char *text, size_t len, unsigned flags,
		 json_t **messages, json_t **vars, int *add_gen, ds_err *err)
{
	json_error_t je;
	json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	int rc;

	*messages = *vars = NULL;
	if (o == NULL)
		return ds_errf(err, "invalid JSON at line %d column %d: %s", je.line,
			       je.column, je.text);
	if (!json_is_object(o)) {
		json_decref(o);
		return ds_errf(err, "not a JSON object");
	}
	rc = body_fields(o, flags, messages, vars, add_gen, err);
	json_decref(o);
	if (rc) {
		json_decref(*messages);
		json_decref(*vars);
		*messages = *vars = NULL;
	}
	return rc;
}

/*
 * api.c - OpenAI request bodies in, answers and chunks out (serve.h).
 *
 * The request shapes are OpenAI's (platform.openai.com/docs/api-reference:
 * completions, chat), with llama.cpp server's extensions top_k, min_p,
 * repeat_penalty and ignore_eos, and ds's speculative (false: no drafts
 * for this request).  Unknown fields are ignored, as OpenAI's
 * own clients send fields a server may not know; known fields with a
 * value we cannot honour (n > 1, logprobs, penalties, tools) are refused
 * rather than silently dropped.
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "serve.h"

int ds_api_fail(ds_api_err *e, int status, const char *param,
		const char *fmt, ...)
{
	va_list ap;

	e->status = status;
	e->type = status == 401 ? "authentication_error" :
		  status == 404 ? "not_found_error" :
		  status == 503 ? "unavailable_error" :
		  status >= 500 ? "server_error" : "invalid_request_error";
	e->code = NULL;
	snprintf(e->param, sizeof e->param, "%s", param ? param : "");
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	return -1;
}

static int oom(ds_api_err *e)
{
	return ds_api_fail(e, 500, NULL, "out of memory");
}

/* ---- reading a body ----------------------------------------------------------- */

/* The key whose value ends at body[pos] ("key": value), for a number
 * jansson cannot hold: copied to k (a plain name, or "" when there is
 * none to be sure of). */
static void key_before(const char *body, size_t pos, char *k, size_t cap)
{
	size_t i = pos, end;

	k[0] = '\0';
	while (i > 0 && body[i - 1] != ':' && strchr("[], \t\r\n0123456789+-.eE",
						  body[i - 1]) != NULL)
		i--;
	if (i == 0 || body[--i] != ':')
		return;
	while (i > 0 && strchr(" \t\r\n", body[i - 1]) != NULL)
		i--;
	if (i == 0 || body[--i] != '"')
		return;
	for (end = i; i > 0 && body[i - 1] != '"'; i--)
		if (!(body[i - 1] == '_' || (body[i - 1] >= 'a' && body[i - 1] <= 'z')) ||
		    end - i >= cap - 1)
			return;
	/* the quote that opens it, not an escaped one */
	if (i > 0 && end > i && (i < 2 || body[i - 2] != '\\'))
		snprintf(k, cap, "%.*s", (int)(end - i), body + i);
}

/* The body as a JSON object; jansson refuses invalid UTF-8, NUL in
 * strings, lone surrogates, duplicate keys and trailing bytes.  A number
 * too large for it names its field when that can be told. */
static json_t *load_object(const char *body, size_t len, ds_api_err *e)
{
	json_error_t je;
	json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
	char k[48] = "";

	if (j == NULL) {
		if ((strstr(je.text, "too big") ||
		     strstr(je.text, "real number overflow")) &&
		    je.position > 0 && (size_t)je.position <= len)
			key_before(body, (size_t)je.position, k, sizeof k);
		if (k[0])
			return ds_api_fail(e, 400, k, "%s: the number at column %d "
					   "is out of range (%s)", k, je.column,
					   je.text), NULL;
		ds_api_fail(e, 400, NULL, "request body: invalid JSON at line %d "
			    "column %d: %s", je.line, je.column, je.text);
		return NULL;
	}
	if (!json_is_object(j)) {
		json_decref(j);
		ds_api_fail(e, 400, NULL, "request body: not a JSON object");
		return NULL;
	}
	return j;
}

/* The field, or NULL when absent or null. */
static json_t *field(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	return json_is_null(v) ? NULL : v;
}

static int get_bool(json_t *o, const char *k, int *out, ds_api_err *e)
{
	json_t *v = field(o, k);

	if (v == NULL)
		return 0;
	if (!json_is_boolean(v))
		return ds_api_fail(e, 400, k, "%s: must be true or false", k);
	*out = json_is_true(v);
	return 0;
}

static int get_num(json_t *o, const char *k, double lo, double hi,
		   float *out, ds_api_err *e)
{
	json_t *v = field(o, k);
	double d;

	if (v == NULL)
		return 0;
	if (!json_is_number(v))
		return ds_api_fail(e, 400, k, "%s: must be a number", k);
	d = json_number_value(v);
	if (!(d >= lo && d <= hi))
		return ds_api_fail(e, 400, k, "%s: %g is not in [%g, %g]", k, d,
				   lo, hi);
	*out = (float)d;
	return 0;
}

static int get_int(json_t *o, const char *k, json_int_t lo, json_int_t hi,
		   json_int_t *out, ds_api_err *e)
{
	json_t *v = field(o, k);
	json_int_t x;

	if (v == NULL)
		return 0;
	if (!json_is_integer(v))
		return ds_api_fail(e, 400, k, "%s: must be an integer", k);
	x = json_integer_value(v);
	if (x < lo || x > hi)
		return ds_api_fail(e, 400, k, "%s: %lld is not in [%lld, %lld]", k,
				   (long long)x, (long long)lo, (long long)hi);
	*out = x;
	return 0;
}

/* ---- fields we know but do not implement --------------------------------------- */

/* Present with other than its neutral value: refused, naming it. */
static int unsupported(json_t *o, ds_api_err *e)
{
	static const char *const zero_num[] = { "presence_penalty",
						"frequency_penalty" };
	json_t *v;
	size_t i;

	for (i = 0; i < 2; i++) {
		v = field(o, zero_num[i]);
		if (v && !json_is_number(v))
			return ds_api_fail(e, 400, zero_num[i], "%s: must be a number",
					   zero_num[i]);
		if (v && json_number_value(v) != 0)
			return ds_api_fail(e, 400, zero_num[i], "%s: not supported "
					   "(only 0); repeat_penalty is", zero_num[i]);
	}
	if ((v = field(o, "n")) && !(json_is_integer(v) && json_integer_value(v) == 1))
		return ds_api_fail(e, 400, "n", "n: only 1 choice per request is "
				   "supported");
	if ((v = field(o, "best_of")) &&
	    !(json_is_integer(v) && json_integer_value(v) == 1))
		return ds_api_fail(e, 400, "best_of", "best_of: only 1 is supported");
	if ((v = field(o, "logprobs")) && !json_is_false(v) &&
	    !(json_is_integer(v) && json_integer_value(v) == 0))
		return ds_api_fail(e, 400, "logprobs", "logprobs: not supported");
	if ((v = field(o, "top_logprobs")) &&
	    !(json_is_integer(v) && json_integer_value(v) == 0))
		return ds_api_fail(e, 400, "top_logprobs", "top_logprobs: not supported");
	if ((v = field(o, "echo")) && !json_is_false(v))
		return ds_api_fail(e, 400, "echo", "echo: not supported");
	if ((v = field(o, "suffix")) &&
	    !(json_is_string(v) && json_string_length(v) == 0))
		return ds_api_fail(e, 400, "suffix", "suffix: not supported");
	if ((v = field(o, "logit_bias")) &&
	    !(json_is_object(v) && json_object_size(v) == 0))
		return ds_api_fail(e, 400, "logit_bias", "logit_bias: not supported");
	if ((v = field(o, "functions")) &&
	    !(json_is_array(v) && json_array_size(v) == 0))
		return ds_api_fail(e, 400, "functions", "functions: not supported");
	return 0;
}

/* ---- the common fields ------------------------------------------------------------ */

static int get_sampling(json_t *o, ds_api_req *r, ds_api_err *e)
{
	json_int_t x = 0;
	json_t *v;

	if (get_num(o, "temperature", 0, 2, &r->sp.temp, e) ||
	    get_num(o, "top_p", 0, 1, &r->sp.top_p, e) ||
	    get_num(o, "min_p", 0, 1, &r->sp.min_p, e) ||
	    get_num(o, "repeat_penalty", 0.01, 100, &r->sp.repeat_penalty, e))
		return -1;
	if (get_int(o, "top_k", 0, 1 << 30, &x, e))
		return -1;
	if (field(o, "top_k"))
		r->sp.top_k = (int)x;
	if ((v = field(o, "seed")) != NULL) {
		if (!json_is_integer(v))
			return ds_api_fail(e, 400, "seed", "seed: must be an integer");
		r->sp.seed = (uint64_t)json_integer_value(v);
		r->seed_set = 1;
	}
	return 0;
}

static int get_max_tokens(json_t *o, ds_api_req *r, ds_api_err *e)
{
	const char *k = r->kind == DS_API_CHAT && field(o, "max_completion_tokens")
			? "max_completion_tokens" : "max_tokens";
	json_int_t x;

	r->max_tokens = -1;
	if (field(o, k) == NULL)
		return 0;
	if (get_int(o, k, 0, (json_int_t)1 << 40, &x, e))
		return -1;
	r->max_tokens = (int64_t)x;
	return 0;
}

static int add_stop(ds_api_req *r, json_t *v, const char *param, ds_api_err *e)
{
	size_t n;

	if (!json_is_string(v))
		return ds_api_fail(e, 400, param, "%s: must be a string", param);
	n = json_string_length(v);
	if (n > DS_API_MAX_STOP_LEN)
		return ds_api_fail(e, 400, param, "%s: %zu bytes, more than %d",
				   param, n, DS_API_MAX_STOP_LEN);
	if (n == 0)
		return 0;
	r->stops[r->n_stops] = strdup(json_string_value(v));
	if (r->stops[r->n_stops] == NULL)
		return oom(e);
	r->n_stops++;
	return 0;
}

static int get_stops(json_t *o, ds_api_req *r, ds_api_err *e)
{
	json_t *v = field(o, "stop"), *s;
	char param[32];
	size_t i;

	if (v == NULL)
		return 0;
	if (!json_is_string(v) && !json_is_array(v))
		return ds_api_fail(e, 400, "stop", "stop: must be a string or an "
				   "array of strings");
	if (json_is_array(v) && json_array_size(v) > DS_API_MAX_STOPS)
		return ds_api_fail(e, 400, "stop", "stop: %zu strings, more than %d",
				   json_array_size(v), DS_API_MAX_STOPS);
	r->stops = calloc(DS_API_MAX_STOPS, sizeof *r->stops);
	if (r->stops == NULL)
		return oom(e);
	if (json_is_string(v))
		return add_stop(r, v, "stop", e);
	json_array_foreach(v, i, s) {
		snprintf(param, sizeof param, "stop[%zu]", i);
		if (add_stop(r, s, param, e))
			return -1;
	}
	return 0;
}

static int get_stream(json_t *o, ds_api_req *r, ds_api_err *e)
{
	json_t *so = field(o, "stream_options");

	if (get_bool(o, "stream", &r->stream, e))
		return -1;
	if (so == NULL)
		return 0;
	if (!json_is_object(so))
		return ds_api_fail(e, 400, "stream_options", "stream_options: must "
				   "be an object");
	if (get_bool(so, "include_usage", &r->include_usage, e))
		return ds_api_fail(e, 400, "stream_options.include_usage",
				   "stream_options.include_usage: must be true or "
				   "false");
	return 0;
}

/* ---- prompt (completions) ----------------------------------------------------------- */

static int get_ids(json_t *a, const char *param, const ds_api_limits *lim,
		   ds_api_req *r, ds_api_err *e)
{
	char p[64];
	json_t *v;
	size_t i;

	if (json_array_size(a) == 0)
		return ds_api_fail(e, 400, param, "%s: no tokens", param);
	r->ids = malloc(json_array_size(a) * sizeof *r->ids);
	if (r->ids == NULL)
		return oom(e);
	json_array_foreach(a, i, v) {
		json_int_t x = json_integer_value(v);

		snprintf(p, sizeof p, "%s[%zu]", param, i);
		if (!json_is_integer(v))
			return ds_api_fail(e, 400, p, "%s: must be a token id", p);
		if (x < 0 || x >= lim->n_vocab)
			return ds_api_fail(e, 400, p, "%s: token id %lld is not in "
					   "[0, %u)", p, (long long)x, lim->n_vocab);
		r->ids[i] = (int32_t)x;
	}
	r->n_ids = json_array_size(a);
	return 0;
}

/* A string, an array of ids, or an array holding one of those (OpenAI
 * takes several prompts in one request; we answer one per request). */
static int get_prompt(json_t *o, const ds_api_limits *lim, ds_api_req *r,
		      ds_api_err *e)
{
	json_t *v = field(o, "prompt"), *first;
	const char *param = "prompt";

	if (v == NULL)
		return ds_api_fail(e, 400, "prompt", "prompt: missing");
	first = json_array_get(v, 0);
	if (json_is_array(v) && (json_is_string(first) || json_is_array(first))) {
		if (json_array_size(v) > 1)
			return ds_api_fail(e, 400, "prompt", "prompt: %zu prompts in "
					   "one request; send one request per "
					   "prompt", json_array_size(v));
		v = first;
		param = "prompt[0]";
	}
	if (json_is_string(v)) {
		r->prompt = strdup(json_string_value(v));
		return r->prompt ? 0 : oom(e);
	}
	if (json_is_array(v))
		return get_ids(v, param, lim, r, e);
	return ds_api_fail(e, 400, param, "%s: must be a string or an array of "
			   "token ids", param);
}

/* ---- messages (chat) ------------------------------------------------------------------ */

static int get_messages(json_t *o, ds_api_req *r, ds_api_err *e)
{
	char param[96];
	ds_err err;

	if (ds_chat_messages(field(o, "messages"), DS_CHAT_TOOLS, &r->messages, param,
			     sizeof param, &err) ||
	    ds_chat_kwargs(field(o, "chat_template_kwargs"), &r->tpl_vars, param,
			   sizeof param, &err))
		return ds_api_fail(e, strcmp(err.msg, "out of memory") ? 400 : 500,
				   param, "%s", err.msg);
	return 0;
}

/* llama.cpp server's names: "auto" is the server's choice. */
static int get_reasoning(json_t *o, ds_api_req *r, ds_api_err *e)
{
	json_t *v = field(o, "reasoning_format");
	const char *s;

	r->reasoning = DS_REASON_AUTO;
	if (v == NULL)
		return 0;
	s = json_string_value(v);
	if (s != NULL && strcmp(s, "none") == 0)
		r->reasoning = DS_REASON_NONE;
	else if (s != NULL && strcmp(s, "deepseek") == 0)
		r->reasoning = DS_REASON_DEEPSEEK;
	else if (s == NULL || strcmp(s, "auto") != 0)
		return ds_api_fail(e, 400, "reasoning_format", "reasoning_format: "
				   "none, deepseek or auto");
	return 0;
}

/* ---- the request ------------------------------------------------------------------------ */

static int parse_fields(json_t *o, ds_api_req *r, const ds_api_limits *lim,
			ds_api_err *e)
{
	json_t *model = json_object_get(o, "model");

	if (model && !json_is_null(model) && !json_is_string(model))
		return ds_api_fail(e, 400, "model", "model: must be a string");
	if (r->kind == DS_API_TEMPLATE)
		return get_bool(o, "add_generation_prompt", &r->add_gen, e) ||
		       ds_api_get_tools(o, r, e) || get_messages(o, r, e) ||
		       ds_api_check_tool_ids(r, e) ? -1 : 0;
	if (unsupported(o, e) || ds_api_get_format(o, r, e) ||
	    ds_api_get_tools(o, r, e) || get_sampling(o, r, e) || get_max_tokens(o, r, e) ||
	    get_stops(o, r, e) || get_stream(o, r, e) ||
	    get_bool(o, "ignore_eos", &r->ignore_eos, e) ||
	    get_bool(o, "return_tokens", &r->return_tokens, e) ||
	    get_bool(o, "speculative", &r->speculative, e))
		return -1;
	if (r->kind == DS_API_CHAT)
		return get_reasoning(o, r, e) || get_messages(o, r, e) ||
		       ds_api_check_tool_ids(r, e) ? -1 : 0;
	return get_prompt(o, lim, r, e);
}

int ds_api_parse(ds_api_req *r, enum ds_api_kind kind, const char *body,
		 size_t len, const ds_api_limits *lim, ds_api_err *e)
{
	json_t *o;
	int rc;

	memset(r, 0, sizeof *r);
	r->kind = kind;
	r->speculative = 1;
	r->add_gen = 1;
	r->reasoning = DS_REASON_AUTO;
	ds_sampler_defaults(&r->sp);
	if ((o = load_object(body, len, e)) == NULL)
		return -1;
	rc = parse_fields(o, r, lim, e);
	json_decref(o);
	if (rc) {
		ds_api_req_free(r);
		r->kind = kind;
	}
	return rc;
}

void ds_api_req_free(ds_api_req *r)
{
	size_t i;

	free(r->prompt);
	free(r->ids);
	json_decref(r->messages);
	json_decref(r->tpl_vars);
	json_decref(r->tools);
	ds_grammar_free(r->grammar);
	for (i = 0; i < r->n_stops; i++)
		free(r->stops[i]);
	free(r->stops);
	memset(r, 0, sizeof *r);
}

/* ---- /tokenize, /detokenize ------------------------------------------------------------------ */

int ds_api_parse_tokenize(ds_api_tokreq *r, const char *body, size_t len,
			  ds_api_err *e)
{
	json_t *o, *c;
	int rc = -1;

	memset(r, 0, sizeof *r);
	if ((o = load_object(body, len, e)) == NULL)
		return -1;
	c = field(o, "content");
	if (c == NULL)
		ds_api_fail(e, 400, "content", "content: missing");
	else if (!json_is_string(c))
		ds_api_fail(e, 400, "content", "content: must be a string");
	else if (get_bool(o, "add_special", &r->add_special, e) == 0 &&
		 get_bool(o, "with_pieces", &r->with_pieces, e) == 0)
		rc = (r->content = strdup(json_string_value(c))) ? 0 : oom(e);
	json_decref(o);
	return rc;
}

void ds_api_tokreq_free(ds_api_tokreq *r)
{
	free(r->content);
	memset(r, 0, sizeof *r);
}

int ds_api_parse_detokenize(int32_t **ids, size_t *n, const char *body,
			    size_t len, const ds_api_limits *lim,
			    ds_api_err *e)
{
	ds_api_req r;
	json_t *o, *t;
	int rc;

	*ids = NULL;
	*n = 0;
	if ((o = load_object(body, len, e)) == NULL)
		return -1;
	t = field(o, "tokens");
	memset(&r, 0, sizeof r);
	if (t == NULL)
		rc = ds_api_fail(e, 400, "tokens", "tokens: missing");
	else if (!json_is_array(t))
		rc = ds_api_fail(e, 400, "tokens", "tokens: must be an array of "
				 "token ids");
	else if (json_array_size(t) == 0)
		rc = 0;
	else
		rc = get_ids(t, "tokens", lim, &r, e);
	json_decref(o);
	if (rc) {
		free(r.ids);
		return -1;
	}
	*ids = r.ids;
	*n = r.n_ids;
	return 0;
}

/* ---- answers ------------------------------------------------------------------------------------ */

static json_t *text_json(const ds_api_out *o)
{
	return ds_json_text(o->text, o->text ? o->n_text : 0);
}

static json_t *usage_json(const ds_api_out *o)
{
	return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens",
			 (json_int_t)o->prompt_tokens, "completion_tokens",
			 (json_int_t)o->completion_tokens, "total_tokens",
			 (json_int_t)(o->prompt_tokens + o->completion_tokens),
			 "prompt_tokens_details", "cached_tokens",
			 (json_int_t)o->cached_tokens);
}

/* {"id", "object", "created", "model"} */
static json_t *head_json(const ds_api_out *o, const char *object)
{
	return json_pack("{s:s, s:s, s:I, s:s}", "id", o->id, "object", object,
			 "created", (json_int_t)o->created, "model", o->model);
}

static char *dump(json_t *j)
{
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;

	json_decref(j);
	return s;
}

/* choices[0].tokens: the ids of the answer, or of a chunk's text. */
static void add_tokens(json_t *choice, const ds_api_out *o)
{
	json_t *t = json_array();
	size_t i;

	for (i = 0; t && i < o->n_tokens; i++)
		json_array_append_new(t, json_integer(o->tokens[i]));
	json_object_set_new(choice, "tokens", t);
}

/* Nothing but blanks (content beside tool calls: null). */
static int blank_text(const ds_api_out *o)
{
	size_t i;

	for (i = 0; o->text && i < o->n_text; i++)
		if (!strchr(" \t\r\n", o->text[i]))
			return 0;
	return 1;
}

/* delta.tool_calls: each call with its index. */
static json_t *delta_calls(const ds_api_out *o)
{
	json_t *a = o->tool_calls ? json_deep_copy(o->tool_calls) : json_array(), *c;
	size_t i;

	json_array_foreach(a, i, c)
		json_object_set_new(c, "index", json_integer((json_int_t)i));
	return json_pack("{s:i, s:{s:o}, s:n, s:n}", "index", 0, "delta",
			 "tool_calls", a, "logprobs", "finish_reason");
}

char *ds_api_answer(const ds_api_out *o)
{
	int chat = o->kind == DS_API_CHAT;
	json_t *j = head_json(o, chat ? "chat.completion" : "text_completion");
	json_t *choice;

	if (chat) {
		choice = json_pack("{s:i, s:{s:s, s:o}, s:n, s:s?}", "index", 0,
				   "message", "role", "assistant", "content",
				   o->tool_calls && blank_text(o) ? json_null() : text_json(o),
				   "logprobs", "finish_reason", o->finish);
		if (choice && o->tool_calls)
			json_object_set_new(json_object_get(choice, "message"),
					    "tool_calls", json_deep_copy(o->tool_calls));
		if (choice && o->n_reasoning > 0)
			json_object_set_new(json_object_get(choice, "message"),
					    "reasoning_content",
					    ds_json_text(o->reasoning, o->n_reasoning));
	} else
		choice = json_pack("{s:i, s:o, s:n, s:s?}", "index", 0, "text",
				   text_json(o), "logprobs", "finish_reason",
				   o->finish);
	if (choice && o->with_tokens)
		add_tokens(choice, o);
	if (j == NULL || choice == NULL ||
	    json_object_set_new(j, "choices", json_pack("[o]", choice)) ||
	    json_object_set_new(j, "usage", usage_json(o))) {
		json_decref(j);
		return NULL;
	}
	return dump(j);
}

static json_t *chunk_choice(const ds_api_out *o, enum ds_api_chunk what)
{
	const char *fin = what == DS_CHUNK_FINISH ? o->finish : NULL;
	json_t *t = what == DS_CHUNK_TEXT ? text_json(o) : json_string("");

	if (o->kind == DS_API_COMPLETION)
		return json_pack("{s:i, s:o, s:n, s:s?}", "index", 0, "text", t,
				 "logprobs", "finish_reason", fin);
	if (what == DS_CHUNK_ROLE)
		return json_pack("{s:i, s:{s:s, s:o}, s:n, s:n}", "index", 0, "delta",
				 "role", "assistant", "content", t, "logprobs",
				 "finish_reason");
	if (what == DS_CHUNK_TOOLS) {
		json_decref(t);
		return delta_calls(o);
	}
	if (what == DS_CHUNK_FINISH) {
		json_decref(t);
		return json_pack("{s:i, s:{}, s:n, s:s?}", "index", 0, "delta",
				 "logprobs", "finish_reason", fin);
	}
	if (what == DS_CHUNK_REASONING) {
		json_decref(t);
		return json_pack("{s:i, s:{s:o}, s:n, s:n}", "index", 0, "delta",
				 "reasoning_content",
				 ds_json_text(o->reasoning, o->reasoning ? o->n_reasoning : 0),
				 "logprobs", "finish_reason");
	}
	return json_pack("{s:i, s:{s:o}, s:n, s:n}", "index", 0, "delta",
			 "content", t, "logprobs", "finish_reason");
}

char *ds_api_chunk(const ds_api_out *o, enum ds_api_chunk what, size_t *len)
{
	json_t *j = head_json(o, o->kind == DS_API_CHAT ? "chat.completion.chunk"
							: "text_completion");
	char *s, *ev;
	int rc;

	if (j == NULL)
		return NULL;
	if (what == DS_CHUNK_USAGE)
		rc = json_object_set_new(j, "choices", json_array()) ||
		     json_object_set_new(j, "usage", usage_json(o));
	else {
		json_t *c = chunk_choice(o, what);

		if (c && what == DS_CHUNK_TEXT && o->with_tokens)
			add_tokens(c, o);
		rc = json_object_set_new(j, "choices", json_pack("[o]", c));
	}
	if (rc) {
		json_decref(j);
		return NULL;
	}
	if ((s = dump(j)) == NULL)
		return NULL;
	rc = asprintf(&ev, "data: %s\n\n", s);
	free(s);
	if (rc < 0)
		return NULL;
	*len = (size_t)rc;
	return ev;
}

char *ds_api_error_json(const ds_api_err *e)
{
	char *m = ds_utf8_repair(e->msg, strlen(e->msg), NULL);
	json_t *j;

	if (m == NULL)
		return NULL;
	j = json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error", "message", m, "type",
		      e->type ? e->type : "server_error", "param",
		      e->param[0] ? e->param : NULL, "code", e->code);
	free(m);
	return dump(j);
}

/* ---- headers ------------------------------------------------------------------------------------ */

int ds_api_length_check(const char *value, size_t max)
{
	size_t x = 0;
	int big = 0;

	if (value == NULL || *value == '\0')
		return -1;
	for (; *value; value++) {
		unsigned d = (unsigned char)*value - '0';

		if (d > 9)
			return -1;
		if (big || d > max || x > (max - d) / 10)
			big = 1;    /* x * 10 + d > max, without overflow */
		else
			x = x * 10 + d;
	}
	return big;
}

/* ---- the API key ------------------------------------------------------------------------------ */

int ds_api_key_ok(const char *header, const char *key)
{
	static const char bearer[] = "Bearer ";
	size_t kl = strlen(key), hl, i;
	const char *v;
	unsigned diff;

	if (header == NULL || strncasecmp(header, bearer, 7) != 0)
		return 0;
	v = header + 7;
	hl = strlen(v);
	/* Every key byte is compared, whatever the value; a value of another
	 * length differs by that alone. */
	diff = hl != kl;
	for (i = 0; i < kl; i++)
		diff |= (unsigned char)key[i] ^ (unsigned char)(i < hl ? v[i] : 0);
	return diff == 0;
}

/* fuzz_servereq.c - ds-serve's request bodies (libcore/serve/api.c): the
 * first byte picks the endpoint (low 2 bits: /v1/completions,
 * /v1/chat/completions, /tokenize and /detokenize, /apply-template) and
 * the vocabulary size the ids are checked against (next 2 bits); the rest
 * is the body.  A
 * parsed request must hold what the server relies on; a refusal must be a
 * 400 (or 500) whose error object is valid JSON naming the field; an
 * answer and every stream chunk built from the request's text, and from
 * the raw body as generated text, must be valid JSON. */
#include <jansson.h>

#include "fuzz.h"
#include "serve/serve.h"

static const uint32_t vocabs[4] = { 1000, 1, 129280, 1u << 22 };

/* The error object: {"error": {"message": s, "type": s, "param": p, ...}}. */
static void check_err(const ds_api_err *e)
{
	char *s = ds_api_error_json(e);
	json_t *j, *er, *p;

	FZ_CHECK(e->status == 400 || e->status == 500);
	FZ_CHECK(memchr(e->msg, '\0', sizeof e->msg) != NULL);
	FZ_CHECK(s != NULL);
	j = json_loads(s, JSON_REJECT_DUPLICATES, NULL);
	FZ_CHECK(j != NULL);
	er = json_object_get(j, "error");
	FZ_CHECK(json_is_string(json_object_get(er, "message")));
	FZ_CHECK(json_is_string(json_object_get(er, "type")));
	p = json_object_get(er, "param");
	FZ_CHECK(e->param[0] ? json_is_string(p) &&
		 strcmp(json_string_value(p), e->param) == 0 : json_is_null(p));
	json_decref(j);
	free(s);
}

/* The answer and the chunks with text (n bytes, any) must be JSON whose
 * text is the input where that was valid UTF-8. */
static void check_out(enum ds_api_kind kind, const char *text, size_t n)
{
	static const int32_t toks[3] = { 0, 7, 42 };
	ds_api_out o = { .kind = kind, .id = "cmpl-1", .created = 1, .model = "m",
			 .text = text, .n_text = n, .reasoning = text,
			 .n_reasoning = n, .finish = "stop", .prompt_tokens = 3,
			 .completion_tokens = 4, .tokens = toks, .n_tokens = 3,
			 .with_tokens = 1 };
	json_t *raw = json_stringn(text, n), *j;
	char *a = ds_api_answer(&o), *c;
	size_t len, k;

	FZ_CHECK(a != NULL);
	j = json_loads(a, JSON_ALLOW_NUL, NULL);
	FZ_CHECK(j != NULL);
	if (raw != NULL) {          /* valid UTF-8: shown as it was */
		json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
		json_t *t = kind == DS_API_CHAT
			    ? json_object_get(json_object_get(ch, "message"), "content")
			    : json_object_get(ch, "text");

		FZ_CHECK(json_equal(t, raw));
		if (kind == DS_API_CHAT && n > 0)
			FZ_CHECK(json_equal(json_object_get(json_object_get(ch, "message"),
							    "reasoning_content"), raw));
	}
	json_decref(j);
	json_decref(raw);
	free(a);
	for (k = DS_CHUNK_ROLE; k <= DS_CHUNK_USAGE; k++) {
		c = ds_api_chunk(&o, (enum ds_api_chunk)k, &len);
		FZ_CHECK(c != NULL && len == strlen(c) && len > 8);
		FZ_CHECK(strncmp(c, "data: ", 6) == 0 && strcmp(c + len - 2, "\n\n") == 0);
		j = json_loadb(c + 6, len - 8, JSON_ALLOW_NUL, NULL);
		FZ_CHECK(j != NULL);
		json_decref(j);
		free(c);
	}
}

static void check_req(const ds_api_req *r, const ds_api_limits *lim)
{
	size_t i;

	if (r->kind == DS_API_TEMPLATE)
		FZ_CHECK(r->add_gen == 0 || r->add_gen == 1);
	if (r->kind == DS_API_COMPLETION) {
		FZ_CHECK((r->prompt != NULL) != (r->n_ids > 0));
		for (i = 0; i < r->n_ids; i++)
			FZ_CHECK(r->ids[i] >= 0 && (uint32_t)r->ids[i] < lim->n_vocab);
		if (r->prompt)
			check_out(r->kind, r->prompt, strlen(r->prompt));
	} else {
		json_t *m, *c = NULL;

		FZ_CHECK(json_array_size(r->messages) > 0 && r->prompt == NULL &&
			 r->n_ids == 0);
		json_array_foreach(r->messages, i, m) {
			const char *role = json_string_value(json_object_get(m, "role"));
			json_t *ci = json_object_get(m, "content");

			FZ_CHECK(role && (strcmp(role, "system") == 0 ||
					  strcmp(role, "user") == 0 ||
					  strcmp(role, "assistant") == 0 ||
					  strcmp(role, "tool") == 0));
			FZ_CHECK(json_is_string(ci) || (strcmp(role, "assistant") == 0 &&
							(ci == NULL || json_is_null(ci))));
			if (strcmp(role, "tool") == 0)
				FZ_CHECK(json_is_string(json_object_get(m, "tool_call_id")));
			if (c == NULL && json_is_string(ci))
				c = ci;
		}
		FZ_CHECK(r->tpl_vars == NULL || json_is_object(r->tpl_vars));
		if (c != NULL)
			check_out(r->kind, json_string_value(c), json_string_length(c));
	}
	FZ_CHECK(r->n_stops <= DS_API_MAX_STOPS);
	for (i = 0; i < r->n_stops; i++)
		FZ_CHECK(strlen(r->stops[i]) >= 1 &&
			 strlen(r->stops[i]) <= DS_API_MAX_STOP_LEN);
	FZ_CHECK(r->max_tokens == -1 ||
		 (r->max_tokens >= 0 && r->max_tokens <= (int64_t)1 << 40));
	FZ_CHECK(r->sp.temp >= 0 && r->sp.temp <= 2);
	FZ_CHECK(r->sp.top_p >= 0 && r->sp.top_p <= 1);
	FZ_CHECK(r->sp.min_p >= 0 && r->sp.min_p <= 1);
	FZ_CHECK(r->sp.top_k >= 0);
	FZ_CHECK(r->stream == 0 || r->stream == 1);
	FZ_CHECK(r->tools == NULL || (json_array_size(r->tools) > 0 &&
				      r->kind != DS_API_COMPLETION));
	FZ_CHECK(r->tool_choice != DS_TOOLS_NAMED ||
		 r->tool_index < json_array_size(r->tools));
	FZ_CHECK(!(ds_api_tools_on(r) && r->grammar));
}

/* The conversation each kind of template renders, and the calls'
 * grammar in each format: made, or refused naming the tools. */
static void check_tools(const ds_api_req *r)
{
	ds_chat_tpl t;
	ds_api_err e;
	ds_grammar *g;
	json_t *m, *v, *x;
	size_t i;
	int k;

	if (r->kind == DS_API_COMPLETION)
		return;
	for (k = 0; k < 12; k++) {
		memset(&t, 0, sizeof t);
		t.tool_fmt = (enum ds_tool_fmt)(k % 3);
		t.renders_tools = k / 3 & 1;
		t.renders_calls = k / 6 & 1;
		if (ds_tool_messages(r, &t, &m, &v, &e)) {
			check_err(&e);
			continue;
		}
		FZ_CHECK(json_array_size(m) >= json_array_size(r->messages));
		json_array_foreach(m, i, x)
			FZ_CHECK(json_is_string(json_object_get(x, "role")));
		json_decref(m);
		json_decref(v);
		if (k >= 3)
			continue;
		if (ds_tool_grammar(r, t.tool_fmt, &g, &e) == 0) {
			FZ_CHECK((g != NULL) == (r->tools != NULL));
			ds_grammar_free(g);
		} else {
			check_err(&e);
			FZ_CHECK(strncmp(e.param, "tools", 5) == 0);
		}
	}
}

/* Any text as an answer with tools: the calls it holds, each with a name
 * and JSON arguments, and the answer and chunks with them JSON. */
static void check_calls(const char *text, size_t n)
{
	size_t content, i;
	json_t *calls, *c;
	int f;

	for (f = 0; f < 3; f++) {
		FZ_CHECK(ds_tool_shown((enum ds_tool_fmt)f, text, n) <= n);
		if (ds_tool_parse((enum ds_tool_fmt)f, text, n, "x", &content, &calls) != 1) {
			FZ_CHECK(content == n && calls == NULL);
			continue;
		}
		FZ_CHECK(content < n && json_array_size(calls) > 0);
		json_array_foreach(calls, i, c) {
			json_t *fn = json_object_get(c, "function");
			const char *a = json_string_value(json_object_get(fn, "arguments"));
			json_t *av = a ? json_loads(a, JSON_DECODE_ANY |
						JSON_DECODE_INT_AS_REAL, NULL) : NULL;

			FZ_CHECK(json_is_string(json_object_get(fn, "name")) && av != NULL);
			json_decref(av);
		}
		{
			ds_api_out o = { .kind = DS_API_CHAT, .id = "c-1", .model = "m",
					 .text = text, .n_text = content,
					 .finish = "tool_calls", .tool_calls = calls };
			char *s = ds_api_answer(&o);
			size_t len;

			FZ_CHECK(s != NULL);
			free(s);
			s = ds_api_chunk(&o, DS_CHUNK_TOOLS, &len);
			FZ_CHECK(s != NULL);
			free(s);
		}
		json_decref(calls);
	}
}

static void generation(enum ds_api_kind kind, const char *body, size_t n,
		       const ds_api_limits *lim)
{
	ds_api_req r;
	ds_api_err e;

	if (ds_api_parse(&r, kind, body, n, lim, &e) != 0) {
		check_err(&e);
		FZ_CHECK(r.prompt == NULL && r.ids == NULL && r.messages == NULL &&
			 r.stops == NULL);
		return;
	}
	check_req(&r, lim);
	check_tools(&r);
	ds_api_req_free(&r);
}

static void tokenize(const char *body, size_t n, const ds_api_limits *lim)
{
	ds_api_tokreq t;
	ds_api_err e;
	int32_t *ids;
	size_t k, i;

	if (ds_api_parse_tokenize(&t, body, n, &e) == 0) {
		FZ_CHECK(t.content != NULL);
		ds_api_tokreq_free(&t);
	} else {
		check_err(&e);
	}
	if (ds_api_parse_detokenize(&ids, &k, body, n, lim, &e) == 0) {
		for (i = 0; i < k; i++)
			FZ_CHECK(ids[i] >= 0 && (uint32_t)ids[i] < lim->n_vocab);
		FZ_CHECK((k == 0) == (ids == NULL));
		free(ids);
	} else {
		check_err(&e);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	ds_api_limits lim = { 1000, 64 };
	const char *body = (const char *)data + 1;

	if (size < 1)
		return 0;
	lim.n_vocab = vocabs[(data[0] >> 2) & 3];
	switch (data[0] & 3) {
	case 0: generation(DS_API_COMPLETION, body, size - 1, &lim); break;
	case 1: generation(DS_API_CHAT, body, size - 1, &lim); break;
	case 2: tokenize(body, size - 1, &lim); break;
	default: generation(DS_API_TEMPLATE, body, size - 1, &lim); break;
	}
	/* the body itself as generated text: any bytes at all */
	check_out(data[0] & 1 ? DS_API_CHAT : DS_API_COMPLETION, body, size - 1);
	check_calls(body, size - 1);
	return 0;
}

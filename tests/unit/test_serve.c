/*
 * test_serve.c - ds-serve's request parsing and validation, answers and
 * stream chunks, the UTF-8 repair, the API key check and the metrics page
 * (serve.h).  The shapes checked are OpenAI's API reference (completions,
 * chat, chat.completion.chunk); the UTF-8 cases are the Unicode standard's
 * own example; the metrics page is checked against the exposition
 * format's rules.  The HTTP side is tests/cli/ds-serve.bats.
 */
#include <jansson.h>
#include <string.h>

#include "harness.h"
#include "base/json.h"
#include "serve/serve.h"

static uint64_t seed;
static const ds_api_limits lim = { 384, 512 };

static int parse(ds_api_req *r, enum ds_api_kind k, const char *body,
		 ds_api_err *e)
{
	return ds_api_parse(r, k, body, strlen(body), &lim, e);
}

/* The body is refused with status and param (NULL: none). */
static int refused(enum ds_api_kind k, const char *body, int status,
		   const char *param)
{
	ds_api_req r;
	ds_api_err e;

	memset(&e, 0, sizeof e);
	if (parse(&r, k, body, &e) == 0) {
		printf("#   accepted: %s\n", body);
		ds_api_req_free(&r);
		return 0;
	}
	if (e.status != status || strcmp(e.param, param ? param : "") != 0 ||
	    e.msg[0] == '\0' || e.type == NULL) {
		printf("#   %s: status %d param \"%s\" msg \"%s\"\n", body, e.status,
		       e.param, e.msg);
		return 0;
	}
	if (param && strncmp(e.msg, param, strlen(param)) != 0) {
		printf("#   %s: the message \"%s\" does not name %s\n", body, e.msg,
		       param);
		return 0;
	}
	return 1;
}

/* ---- requests ----------------------------------------------------------------- */

static void test_completion_fields(void)
{
	ds_api_req r;
	ds_api_err e;
	ds_sampler_params d;
	int rc;

	ds_sampler_defaults(&d);
	rc = parse(&r, DS_API_COMPLETION,
		   "{\"model\": \"x\", \"prompt\": \"Hello\", \"max_tokens\": 7,"
		   " \"temperature\": 0.5, \"top_p\": 0.9, \"top_k\": 12, \"min_p\": 0.1,"
		   " \"repeat_penalty\": 1.1, \"seed\": -3, \"stop\": [\"a\", \"\", \"bc\"],"
		   " \"stream\": true, \"stream_options\": {\"include_usage\": true},"
		   " \"ignore_eos\": true, \"user\": \"u\", \"n\": 1, \"logprobs\": null,"
		   " \"presence_penalty\": 0, \"unknown\": {\"x\": [1]}}", &e);
	T_CHECKF(rc == 0, "%s", e.msg);
	if (rc)
		return;
	T_CHECK(r.kind == DS_API_COMPLETION && r.prompt && !strcmp(r.prompt, "Hello"));
	T_CHECK(r.ids == NULL && r.max_tokens == 7);
	T_NEAR(r.sp.temp, 0.5, 1e-7);
	T_NEAR(r.sp.top_p, 0.9, 1e-7);
	T_NEAR(r.sp.min_p, 0.1, 1e-7);
	T_NEAR(r.sp.repeat_penalty, 1.1, 1e-6);
	T_CHECK(r.sp.top_k == 12 && r.seed_set && r.sp.seed == (uint64_t)-3);
	T_CHECK(r.n_stops == 2 && !strcmp(r.stops[0], "a") && !strcmp(r.stops[1], "bc"));
	T_CHECK(r.stream && r.include_usage && r.ignore_eos);
	ds_api_req_free(&r);
	/* absent fields: the sampler's defaults, no limit, no seed */
	T_CHECK(parse(&r, DS_API_COMPLETION, "{\"prompt\": \"\"}", &e) == 0);
	T_CHECK(r.max_tokens == -1 && !r.seed_set && !r.stream && r.n_stops == 0);
	T_CHECK(r.sp.temp == d.temp && r.sp.top_k == d.top_k && r.sp.top_p == d.top_p);
	ds_api_req_free(&r);
	/* null is absent */
	T_CHECK(parse(&r, DS_API_COMPLETION, "{\"prompt\": \"a\", \"max_tokens\": null,"
		      " \"stop\": null, \"temperature\": null}", &e) == 0);
	T_CHECK(r.max_tokens == -1 && r.sp.temp == d.temp);
	ds_api_req_free(&r);
}

static void test_prompt_forms(void)
{
	ds_api_req r;
	ds_api_err e;
	char body[4096];
	int32_t want[64];
	size_t n = 1 + t_rand(&seed) % 60, i, k;

	k = (size_t)snprintf(body, sizeof body, "{\"prompt\": [");
	for (i = 0; i < n; i++) {
		want[i] = (int32_t)(t_rand(&seed) % lim.n_vocab);
		k += (size_t)snprintf(body + k, sizeof body - k, "%s%d", i ? ", " : "",
				      want[i]);
	}
	snprintf(body + k, sizeof body - k, "]}");
	T_CHECKF(parse(&r, DS_API_COMPLETION, body, &e) == 0, "%s", e.msg);
	T_CHECK(r.n_ids == n && r.prompt == NULL &&
		memcmp(r.ids, want, n * sizeof *want) == 0);
	ds_api_req_free(&r);
	T_CHECK(parse(&r, DS_API_COMPLETION, "{\"prompt\": [\"one\"]}", &e) == 0);
	T_CHECK(r.prompt && !strcmp(r.prompt, "one"));
	ds_api_req_free(&r);
	T_CHECK(parse(&r, DS_API_COMPLETION, "{\"prompt\": [[5, 383]]}", &e) == 0);
	T_CHECK(r.n_ids == 2 && r.ids[0] == 5 && r.ids[1] == 383);
	ds_api_req_free(&r);
	T_CHECK(refused(DS_API_COMPLETION, "{\"prompt\": [\"a\", \"b\"]}", 400, "prompt"));
	T_CHECK(refused(DS_API_COMPLETION, "{\"prompt\": [[1], [2]]}", 400, "prompt"));
	T_CHECK(refused(DS_API_COMPLETION, "{\"prompt\": [1, 384]}", 400, "prompt[1]"));
	T_CHECK(refused(DS_API_COMPLETION, "{\"prompt\": [1, -1]}", 400, "prompt[1]"));
	T_CHECK(refused(DS_API_COMPLETION, "{\"prompt\": [1, 2.5]}", 400, "prompt[1]"));
	T_CHECK(refused(DS_API_COMPLETION, "{\"prompt\": [[1, \"x\"]]}", 400, "prompt[0][1]"));
	T_CHECK(refused(DS_API_COMPLETION, "{\"prompt\": []}", 400, "prompt"));
	T_CHECK(refused(DS_API_COMPLETION, "{\"prompt\": 5}", 400, "prompt"));
	T_CHECK(refused(DS_API_COMPLETION, "{\"prompt\": {}}", 400, "prompt"));
	T_CHECK(refused(DS_API_COMPLETION, "{\"prompt\": null}", 400, "prompt"));
	T_CHECK(refused(DS_API_COMPLETION, "{}", 400, "prompt"));
}

static void test_messages(void)
{
	ds_api_req r;
	ds_api_err e;
	json_t *want;

	T_CHECK(parse(&r, DS_API_CHAT,
		      "{\"messages\": [{\"role\": \"developer\", \"content\": \"S\"},"
		      " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"},"
		      " {\"type\": \"text\", \"text\": \"b\"}], \"name\": \"n\"},"
		      " {\"role\": \"assistant\"}, {\"role\": \"user\", \"content\": \"U\"}],"
		      " \"max_completion_tokens\": 3, \"max_tokens\": 9}", &e) == 0);
	T_CHECK(json_array_size(r.messages) == 4 && r.max_tokens == 3);
	T_CHECK(r.tpl_vars == NULL && r.reasoning == DS_REASON_AUTO);
	want = json_loads("[{\"role\": \"system\", \"content\": \"S\"},"
			  " {\"role\": \"user\", \"content\": \"a\\nb\", \"name\": \"n\"},"
			  " {\"role\": \"assistant\"}, {\"role\": \"user\", \"content\": \"U\"}]",
			  0, NULL);
	T_CHECK(json_equal(r.messages, want));
	json_decref(want);
	ds_api_req_free(&r);
	/* the template's variables; reasoning_format */
	T_CHECK(parse(&r, DS_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}],"
		      " \"chat_template_kwargs\": {\"enable_thinking\": false},"
		      " \"reasoning_format\": \"none\"}", &e) == 0);
	T_CHECK(json_is_false(json_object_get(r.tpl_vars, "enable_thinking")));
	T_CHECK(r.reasoning == DS_REASON_NONE);
	ds_api_req_free(&r);
	T_CHECK(refused(DS_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}],"
			" \"chat_template_kwargs\": {\"messages\": 1}}", 400,
			"chat_template_kwargs.messages"));
	T_CHECK(refused(DS_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}],"
			" \"chat_template_kwargs\": []}", 400, "chat_template_kwargs"));
	T_CHECK(refused(DS_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}],"
			" \"reasoning_format\": \"xml\"}", 400, "reasoning_format"));
	/* /apply-template: the messages and add_generation_prompt alone */
	T_CHECK(parse(&r, DS_API_TEMPLATE, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}],"
		      " \"add_generation_prompt\": false, \"temperature\": 99}", &e) == 0);
	T_CHECK(r.add_gen == 0 && json_array_size(r.messages) == 1);
	ds_api_req_free(&r);
	T_CHECK(refused(DS_API_TEMPLATE, "{\"messages\": []}", 400, "messages"));
	T_CHECK(refused(DS_API_TEMPLATE, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}],"
			" \"add_generation_prompt\": 1}", 400, "add_generation_prompt"));
	T_CHECK(refused(DS_API_CHAT, "{}", 400, "messages"));
	T_CHECK(refused(DS_API_CHAT, "{\"messages\": []}", 400, "messages"));
	T_CHECK(refused(DS_API_CHAT, "{\"messages\": {}}", 400, "messages"));
	T_CHECK(refused(DS_API_CHAT, "{\"messages\": [1]}", 400, "messages[0]"));
	T_CHECK(refused(DS_API_CHAT, "{\"messages\": [{\"content\": \"x\"}]}", 400,
			"messages[0].role"));
	T_CHECK(refused(DS_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"},"
			" {\"role\": \"tool\", \"content\": \"x\"}]}", 400,
			"messages[1].tool_call_id"));
	T_CHECK(refused(DS_API_CHAT, "{\"messages\": [{\"role\": \"user\"}]}", 400,
			"messages[0].content"));
	T_CHECK(refused(DS_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": 7}]}",
			400, "messages[0].content"));
	T_CHECK(refused(DS_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\":"
			" [{\"type\": \"image_url\"}]}]}", 400, "messages[0].content[0]"));
	T_CHECK(refused(DS_API_CHAT, "{\"messages\": [{\"role\": \"assistant\","
			" \"tool_calls\": [{}]}]}", 400, "messages[0].tool_calls[0].id"));
}

#define TOOL "{\"type\": \"function\", \"function\": {\"name\": \"f\", " \
	"\"parameters\": {\"type\": \"object\", \"properties\": {\"x\": " \
	"{\"type\": \"integer\"}}, \"required\": [\"x\"]}}}"
#define USER "{\"role\": \"user\", \"content\": \"a\"}"
#define CALLS "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": " \
	"[{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": " \
	"\"f\", \"arguments\": \"{\\\"x\\\": 1}\"}}]}"

/* response_format, tools, tool_choice, parallel_tool_calls and tool
 * results: each wrong one a 400 naming it. */
static void test_tools_fields(void)
{
	static const struct { const char *body, *param; } c[] = {
		{ "\"tools\": {}", "tools" },
		{ "\"tools\": [{}]", "tools[0]" },
		{ "\"tools\": [{\"type\": \"function\"}]", "tools[0].function" },
		{ "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a b\"}}]",
		  "tools[0].function.name" },
		{ "\"tools\": [" TOOL ", " TOOL "]", "tools[1].function.name" },
		{ "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"g\", "
		  "\"parameters\": []}}]", "tools[0].function.parameters" },
		{ "\"tools\": [" TOOL "], \"tool_choice\": \"sometimes\"", "tool_choice" },
		{ "\"tool_choice\": \"required\"", "tool_choice" },
		{ "\"tools\": [" TOOL "], \"tool_choice\": {\"type\": \"function\", "
		  "\"function\": {\"name\": \"g\"}}", "tool_choice.function.name" },
		{ "\"tools\": [" TOOL "], \"parallel_tool_calls\": 1", "parallel_tool_calls" },
		{ "\"tools\": [" TOOL "], \"response_format\": {\"type\": \"json_object\"}",
		  "response_format" },
		{ "\"response_format\": {\"type\": \"xml\"}", "response_format.type" },
		{ "\"response_format\": \"json\"", "response_format" },
		{ "\"response_format\": {\"type\": \"json_schema\"}",
		  "response_format.json_schema" },
		{ "\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {}}",
		  "response_format.json_schema.schema" },
		{ "\"response_format\": {\"type\": \"json_schema\", \"json_schema\": "
		  "{\"schema\": {\"properties\": {\"x\": {\"not\": {}}}}}}",
		  "response_format.json_schema.schema" },
	};
	char body[2048];
	ds_api_req r;
	ds_api_err e;
	size_t i;

	for (i = 0; i < sizeof c / sizeof c[0]; i++) {
		snprintf(body, sizeof body, "{\"messages\": [" USER "], %s}", c[i].body);
		T_CHECKF(refused(DS_API_CHAT, body, 400, c[i].param), "%s", body);
	}
	T_CHECK(refused(DS_API_COMPLETION, "{\"prompt\": \"p\", \"tools\": [" TOOL "]}",
			400, "tools"));
	/* a tool result answers a call made before it */
	T_CHECK(refused(DS_API_CHAT, "{\"messages\": [" USER ", {\"role\": \"tool\", "
			"\"tool_call_id\": \"c1\", \"content\": \"2\"}]}", 400,
			"messages[1].tool_call_id"));
	T_CHECK(refused(DS_API_CHAT, "{\"messages\": [" USER ", " CALLS ", {\"role\": "
			"\"tool\", \"tool_call_id\": \"c2\", \"content\": \"2\"}]}", 400,
			"messages[2].tool_call_id"));
	/* the message names the schema's keyword */
	T_CHECK(parse(&r, DS_API_CHAT, "{\"messages\": [" USER "], \"response_format\": "
		      "{\"type\": \"json_schema\", \"json_schema\": {\"schema\": "
		      "{\"properties\": {\"x\": {\"not\": {}}}}}}}", &e) == -1);
	T_CHECKF(strcmp(e.msg, "response_format.json_schema.schema.properties.x: "
			"unsupported keyword 'not'") == 0, "%s", e.msg);
	/* accepted */
	T_CHECK(parse(&r, DS_API_CHAT, "{\"messages\": [" USER ", " CALLS ", {\"role\": "
		      "\"tool\", \"tool_call_id\": \"c1\", \"content\": \"2\"}], "
		      "\"tools\": [" TOOL "], \"tool_choice\": {\"type\": \"function\", "
		      "\"function\": {\"name\": \"f\"}}, \"parallel_tool_calls\": false}",
		      &e) == 0);
	T_CHECK(r.tool_choice == DS_TOOLS_NAMED && r.tool_index == 0 && !r.parallel_tools);
	ds_api_req_free(&r);
	T_CHECK(parse(&r, DS_API_COMPLETION, "{\"prompt\": \"p\", \"response_format\": "
		      "{\"type\": \"json_object\"}}", &e) == 0);
	T_CHECK(r.grammar != NULL);
	ds_api_req_free(&r);
}

/* Calls written as each format writes them parse back; the grammar of
 * each format accepts them. */
static void test_tool_calls(void)
{
	static const char *const text[] = {
		"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
		"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 22} }\n</tool_call>",
		"<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
		"<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
		"function<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>f\n```json\n{\"x\": 1}"
		"\n```<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>\n"
		"<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
		"function<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>f\n```json\n{\"x\": 22}"
		"\n```<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
		"<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>",
		"{\"name\": \"f\", \"parameters\": {\"x\": 1}}",
	};
	static const enum ds_tool_fmt fmt[] = { DS_TOOLFMT_HERMES, DS_TOOLFMT_DEEPSEEK,
						DS_TOOLFMT_LLAMA3 };
	ds_api_req r;
	ds_api_err e;
	size_t i, content;
	json_t *calls;
	char buf[1024];

	T_CHECK(parse(&r, DS_API_CHAT, "{\"messages\": [" USER "], \"tools\": [" TOOL "], "
		      "\"tool_choice\": \"required\"}", &e) == 0);
	for (i = 0; i < 3; i++) {
		ds_grammar *g = NULL;
		ds_gmatch *m = NULL;
		ds_err err;

		snprintf(buf, sizeof buf, "Sure.\n%s", text[i]);
		T_CHECK(ds_tool_parse(fmt[i], buf, strlen(buf), "x", &content, &calls) == 1);
		T_CHECK(content == 6);
		T_CHECK(json_array_size(calls) == (i < 2 ? 2u : 1u));
		T_CHECK(strcmp(json_string_value(json_object_get(json_object_get(
			json_array_get(calls, 0), "function"), "arguments")), "{\"x\": 1}") == 0);
		T_CHECK(strcmp(json_string_value(json_object_get(json_array_get(calls, 0),
			"id")), "call_x_0") == 0);
		json_decref(calls);
		/* the shown part stops at the marker, and before a tail that may start it */
		T_CHECK(ds_tool_shown(fmt[i], buf, strlen(buf)) == 6);
		T_CHECK(ds_tool_shown(fmt[i], buf, 7) == 6);
		T_CHECK(ds_tool_grammar(&r, fmt[i], &g, &e) == 0);
		T_CHECK(ds_gmatch_new(g, &m, &err) == 0);
		T_CHECKF(ds_gmatch_accept_bytes(m, text[i], strlen(text[i]), &err) ==
			 DS_GMATCH_OK && ds_gmatch_complete(m), "format %zu", i);
		ds_gmatch_free(m);
		ds_grammar_free(g);
	}
	/* no marker, or calls that do not parse: all content */
	T_CHECK(ds_tool_parse(DS_TOOLFMT_HERMES, "plain", 5, "x", &content, &calls) == 0);
	T_CHECK(content == 5 && calls == NULL);
	T_CHECK(ds_tool_parse(DS_TOOLFMT_HERMES, "<tool_call>{", 12, "x", &content, &calls) == 0);
	T_CHECK(content == 12 && calls == NULL);
	ds_api_req_free(&r);
}

/* Every field of the wrong type or out of range: 400 naming it. */
static void test_wrong_fields(void)
{
	static const struct { const char *body, *param; } c[] = {
		{ "\"max_tokens\": \"7\"", "max_tokens" },
		{ "\"max_tokens\": 7.5", "max_tokens" },
		{ "\"max_tokens\": -1", "max_tokens" },
		{ "\"max_tokens\": 1e300", "max_tokens" },
		{ "\"max_tokens\": 99999999999999", "max_tokens" },
		{ "\"temperature\": \"hot\"", "temperature" },
		{ "\"temperature\": -0.1", "temperature" },
		{ "\"temperature\": 2.5", "temperature" },
		{ "\"top_p\": 1.5", "top_p" },
		{ "\"top_p\": true", "top_p" },
		{ "\"top_k\": -1", "top_k" },
		{ "\"top_k\": 1.5", "top_k" },
		{ "\"min_p\": 2", "min_p" },
		{ "\"repeat_penalty\": 0", "repeat_penalty" },
		{ "\"seed\": \"1\"", "seed" },
		{ "\"seed\": 1.5", "seed" },
		{ "\"stop\": 5", "stop" },
		{ "\"stop\": [\"a\", 5]", "stop[1]" },
		{ "\"stop\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\","
		  "\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]", "stop" },
		{ "\"stream\": 1", "stream" },
		{ "\"stream\": \"true\"", "stream" },
		{ "\"stream_options\": 1", "stream_options" },
		{ "\"stream_options\": {\"include_usage\": 1}", "stream_options.include_usage" },
		{ "\"ignore_eos\": 0", "ignore_eos" },
		{ "\"model\": 5", "model" },
		{ "\"n\": 2", "n" },
		{ "\"best_of\": 3", "best_of" },
		{ "\"logprobs\": 5", "logprobs" },
		{ "\"echo\": true", "echo" },
		{ "\"suffix\": \"x\"", "suffix" },
		{ "\"logit_bias\": {\"5\": 1}", "logit_bias" },
		{ "\"presence_penalty\": 0.5", "presence_penalty" },
		{ "\"frequency_penalty\": \"x\"", "frequency_penalty" },
		{ "\"tools\": [{}]", "tools[0]" },
		{ "\"response_format\": {\"type\": \"json\"}", "response_format.type" },
	};
	char body[512];
	size_t i;

	for (i = 0; i < sizeof c / sizeof c[0]; i++) {
		snprintf(body, sizeof body, "{\"prompt\": \"p\", %s}", c[i].body);
		T_CHECKF(refused(DS_API_COMPLETION, body, 400, c[i].param), "%s", body);
	}
	/* a long stop string */
	{
		char *b = malloc(DS_API_MAX_STOP_LEN + 64);

		memset(b, 'x', DS_API_MAX_STOP_LEN + 64);
		memcpy(b, "{\"prompt\":\"p\",\"stop\":[\"", 23);
		memcpy(b + 23 + DS_API_MAX_STOP_LEN + 1, "\"]}", 4);
		T_CHECK(refused(DS_API_COMPLETION, b, 400, "stop[0]"));
		free(b);
	}
}

/* Bodies that are not JSON objects, or not valid UTF-8 JSON. */
static void test_malformed(void)
{
	static const char *const bad[] = {
		"", "{", "[]", "\"x\"", "null", "{\"prompt\": \"a\"} x",
		"{\"prompt\": \"a\", \"prompt\": \"b\"}",
		"{\"prompt\": \"\\u0000\"}", "{\"prompt\": \"\\ud800\"}",
		"{\"prompt\": \"a\xff\"}", "{\"prompt\": \"\xc0\xaf\"}",
		"{\"prompt\": \"\xed\xa0\x80\"}", "{\"prompt\": \"\xf4\x90\x80\x80\"}",
		"{\"prompt\": NaN}", "{\"prompt\": \"a\", \"temperature\": Infinity}",
		"{prompt: \"a\"}", "{\"prompt\": 'a'}",
	};
	size_t i;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
		T_CHECKF(refused(DS_API_COMPLETION, bad[i], 400, NULL), "%zu", i);
}

/* Mutated bodies: parsed or refused with 400, never anything else (ASan
 * and UBSan watch the rest). */
static void test_fuzz(void)
{
	static const char base[] =
		"{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\","
		" \"text\": \"h\\u00e9\"}]}], \"prompt\": [[1, 2]], \"stop\": [\"x\"],"
		" \"max_tokens\": 5, \"temperature\": 0.2, \"stream_options\": {}}";
	char b[sizeof base];
	int it, bad = 0;

	for (it = 0; it < 4000; it++) {
		enum ds_api_kind k = it & 1 ? DS_API_CHAT : DS_API_COMPLETION;
		size_t n = sizeof base - 1, m = 1 + t_rand(&seed) % 4, j;
		ds_api_req r;
		ds_api_err e;

		memcpy(b, base, sizeof base);
		for (j = 0; j < m; j++)
			b[t_rand(&seed) % n] = (char)(t_rand(&seed) % 256);
		if (t_rand(&seed) % 4 == 0)
			n = t_rand(&seed) % n;
		if (ds_api_parse(&r, k, b, n, &lim, &e) == 0)
			ds_api_req_free(&r);
		else if (e.status != 400 || e.msg[0] == '\0')
			bad++;
	}
	T_CHECK(bad == 0);
}

static void test_tokenize_bodies(void)
{
	ds_api_tokreq t;
	ds_api_err e;
	int32_t *ids;
	size_t n;
	const char *b;

	b = "{\"content\": \"Hi\", \"add_special\": true, \"with_pieces\": true}";
	T_CHECK(ds_api_parse_tokenize(&t, b, strlen(b), &e) == 0);
	T_CHECK(!strcmp(t.content, "Hi") && t.add_special && t.with_pieces);
	ds_api_tokreq_free(&t);
	b = "{\"content\": 5}";
	T_CHECK(ds_api_parse_tokenize(&t, b, strlen(b), &e) && !strcmp(e.param, "content"));
	b = "{\"content\": \"x\", \"with_pieces\": \"yes\"}";
	T_CHECK(ds_api_parse_tokenize(&t, b, strlen(b), &e) &&
		!strcmp(e.param, "with_pieces"));
	b = "{\"tokens\": [3, 1, 4]}";
	T_CHECK(ds_api_parse_detokenize(&ids, &n, b, strlen(b), &lim, &e) == 0);
	T_CHECK(n == 3 && ids[0] == 3 && ids[2] == 4);
	free(ids);
	b = "{\"tokens\": []}";
	T_CHECK(ds_api_parse_detokenize(&ids, &n, b, strlen(b), &lim, &e) == 0 && n == 0);
	b = "{\"tokens\": [1, 400]}";
	T_CHECK(ds_api_parse_detokenize(&ids, &n, b, strlen(b), &lim, &e) &&
		e.status == 400 && !strcmp(e.param, "tokens[1]"));
	b = "{\"tokens\": \"1 2\"}";
	T_CHECK(ds_api_parse_detokenize(&ids, &n, b, strlen(b), &lim, &e) &&
		!strcmp(e.param, "tokens"));
}

/* ---- answers ---------------------------------------------------------------------- */

static json_t *load(const char *s)
{
	json_error_t je;
	json_t *j = s ? json_loads(s, JSON_REJECT_DUPLICATES, &je) : NULL;

	if (j == NULL)
		printf("#   not JSON: %s\n", s ? je.text : "(null)");
	return j;
}

static const char *str(json_t *j, const char *path)
{
	json_t *v = json_object_get(j, path);

	return json_is_string(v) ? json_string_value(v) : "";
}

static void test_answers(void)
{
	static const int32_t ids[3] = { 7, 0, 383 };
	ds_api_out o = { .kind = DS_API_COMPLETION, .id = "cmpl-1",
			 .created = 1700000000, .model = "m", .text = "Hi\n\"x\"",
			 .n_text = 6, .finish = "stop", .prompt_tokens = 4,
			 .completion_tokens = 3 };
	json_t *j, *c, *u;
	char *s;

	s = ds_api_answer(&o);
	j = load(s);
	c = json_array_get(json_object_get(j, "choices"), 0);
	u = json_object_get(j, "usage");
	T_CHECK(!strcmp(str(j, "id"), "cmpl-1") && !strcmp(str(j, "object"), "text_completion"));
	T_CHECK(json_integer_value(json_object_get(j, "created")) == 1700000000);
	T_CHECK(!strcmp(str(j, "model"), "m"));
	T_CHECK(json_array_size(json_object_get(j, "choices")) == 1);
	T_CHECK(json_integer_value(json_object_get(c, "index")) == 0);
	T_CHECK(!strcmp(str(c, "text"), "Hi\n\"x\"") && !strcmp(str(c, "finish_reason"), "stop"));
	T_CHECK(json_is_null(json_object_get(c, "logprobs")));
	T_CHECK(json_object_get(c, "tokens") == NULL);
	T_CHECK(json_integer_value(json_object_get(u, "prompt_tokens")) == 4);
	T_CHECK(json_integer_value(json_object_get(u, "completion_tokens")) == 3);
	T_CHECK(json_integer_value(json_object_get(u, "total_tokens")) == 7);
	json_decref(j);
	free(s);

	o.kind = DS_API_CHAT;
	o.id = "chatcmpl-2";
	o.finish = "length";
	o.tokens = ids;
	o.n_tokens = 3;
	o.with_tokens = 1;
	s = ds_api_answer(&o);
	j = load(s);
	c = json_array_get(json_object_get(j, "choices"), 0);
	T_CHECK(json_array_size(json_object_get(c, "tokens")) == 3 &&
		json_integer_value(json_array_get(json_object_get(c, "tokens"), 2)) == 383);
	T_CHECK(!strcmp(str(j, "object"), "chat.completion"));
	T_CHECK(!strcmp(str(json_object_get(c, "message"), "role"), "assistant"));
	T_CHECK(!strcmp(str(json_object_get(c, "message"), "content"), "Hi\n\"x\""));
	T_CHECK(!strcmp(str(c, "finish_reason"), "length"));
	json_decref(j);
	free(s);
}

/* "data: " + one JSON object + "\n\n" */
static json_t *event(const char *ev, size_t n)
{
	char buf[4096];

	if (n < 8 || n >= sizeof buf || strncmp(ev, "data: ", 6) != 0 ||
	    strcmp(ev + n - 2, "\n\n") != 0 || strlen(ev) != n ||
	    memchr(ev, '\n', n - 2) != NULL)
		return NULL;
	memcpy(buf, ev + 6, n - 8);
	buf[n - 8] = '\0';
	return load(buf);
}

static void test_chunks(void)
{
	ds_api_out o = { .kind = DS_API_CHAT, .id = "chatcmpl-3", .created = 1,
			 .model = "m", .text = "a\nb", .n_text = 3,
			 .prompt_tokens = 2, .completion_tokens = 5 };
	json_t *j, *c;
	size_t n;
	char *s;

	s = ds_api_chunk(&o, DS_CHUNK_ROLE, &n);
	j = event(s, n);
	c = json_array_get(json_object_get(j, "choices"), 0);
	T_CHECK(!strcmp(str(j, "object"), "chat.completion.chunk"));
	T_CHECK(!strcmp(str(json_object_get(c, "delta"), "role"), "assistant"));
	T_CHECK(json_is_null(json_object_get(c, "finish_reason")));
	json_decref(j);
	free(s);
	s = ds_api_chunk(&o, DS_CHUNK_TEXT, &n);
	j = event(s, n);       /* the newline in the text is escaped */
	c = json_array_get(json_object_get(j, "choices"), 0);
	T_CHECK(!strcmp(str(json_object_get(c, "delta"), "content"), "a\nb"));
	T_CHECK(json_object_get(json_object_get(c, "delta"), "role") == NULL);
	json_decref(j);
	free(s);
	o.finish = "stop";
	s = ds_api_chunk(&o, DS_CHUNK_FINISH, &n);
	j = event(s, n);
	c = json_array_get(json_object_get(j, "choices"), 0);
	T_CHECK(json_object_size(json_object_get(c, "delta")) == 0);
	T_CHECK(!strcmp(str(c, "finish_reason"), "stop"));
	json_decref(j);
	free(s);
	s = ds_api_chunk(&o, DS_CHUNK_USAGE, &n);
	j = event(s, n);
	T_CHECK(json_array_size(json_object_get(j, "choices")) == 0);
	T_CHECK(json_integer_value(json_object_get(json_object_get(j, "usage"),
						   "total_tokens")) == 7);
	json_decref(j);
	free(s);
	o.kind = DS_API_COMPLETION;
	o.finish = NULL;
	s = ds_api_chunk(&o, DS_CHUNK_TEXT, &n);
	j = event(s, n);
	c = json_array_get(json_object_get(j, "choices"), 0);
	T_CHECK(!strcmp(str(j, "object"), "text_completion") && !strcmp(str(c, "text"), "a\nb"));
	T_CHECK(json_is_null(json_object_get(c, "finish_reason")));
	json_decref(j);
	free(s);
}

static void test_error_object(void)
{
	ds_api_err e;
	json_t *j, *x;
	char *s;

	ds_api_fail(&e, 400, "stop[2]", "stop[2]: must be a string \xff");
	s = ds_api_error_json(&e);
	j = load(s);
	x = json_object_get(j, "error");
	T_CHECK(!strcmp(str(x, "type"), "invalid_request_error"));
	T_CHECK(!strcmp(str(x, "param"), "stop[2]"));
	T_CHECK(!strcmp(str(x, "message"), "stop[2]: must be a string \xef\xbf\xbd"));
	T_CHECK(json_is_null(json_object_get(x, "code")));
	json_decref(j);
	free(s);
	ds_api_fail(&e, 503, NULL, "busy");
	e.code = "queue_full";
	s = ds_api_error_json(&e);
	j = load(s);
	x = json_object_get(j, "error");
	T_CHECK(json_is_null(json_object_get(x, "param")));
	T_CHECK(!strcmp(str(x, "code"), "queue_full"));
	json_decref(j);
	free(s);
}

/* Unicode 15, chapter 3, U+FFFD Substitution of Maximal Subparts, its
 * examples: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 and the table of
 * ill-formed sequences each replaced per byte (C0 AF, E0 80 BF, F4 90 80
 * 80, ED A0 80). */
static void test_utf8_repair(void)
{
	static const struct { const char *in, *out; } c[] = {
		{ "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64",
		  "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c"
		  "\xEF\xBF\xBD\xEF\xBF\xBD" "d" },
		{ "\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD" },
		{ "\xE0\x80\xBF", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" },
		{ "\xF4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" },
		{ "\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" },
		{ "\x41\xC0\xAF\x41\xF4\x80\x80\x41", "A\xEF\xBF\xBD\xEF\xBF\xBD" "A"
		  "\xEF\xBF\xBD" "A" },
		{ "h\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", "h\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80" },
		{ "\xE2\x82", "\xEF\xBF\xBD" },
	};
	size_t i, n;

	for (i = 0; i < sizeof c / sizeof c[0]; i++) {
		char *o = ds_utf8_repair(c[i].in, strlen(c[i].in), &n);

		T_CHECKF(o && n == strlen(c[i].out) && !strcmp(o, c[i].out), "case %zu", i);
		free(o);
	}
}

static void test_api_key(void)
{
	T_CHECK(ds_api_key_ok("Bearer k3y-x", "k3y-x"));
	T_CHECK(ds_api_key_ok("bearer k3y-x", "k3y-x"));
	T_CHECK(!ds_api_key_ok(NULL, "k3y-x"));
	T_CHECK(!ds_api_key_ok("", "k3y-x"));
	T_CHECK(!ds_api_key_ok("k3y-x", "k3y-x"));
	T_CHECK(!ds_api_key_ok("Basic k3y-x", "k3y-x"));
	T_CHECK(!ds_api_key_ok("Bearer k3y-", "k3y-x"));
	T_CHECK(!ds_api_key_ok("Bearer k3y-xx", "k3y-x"));
	T_CHECK(!ds_api_key_ok("Bearer k3y-y", "k3y-x"));
	T_CHECK(!ds_api_key_ok("Bearer ", "k3y-x"));
	T_CHECK(!ds_api_key_ok("Bearer K3Y-X", "k3y-x"));
}

/* A number past what jansson holds (2^63, 1e308) fails the parse; the
 * error names the field when the text before it shows a plain key. */
static void test_number_overflow(void)
{
	static const struct { const char *body, *param; } c[] = {
		{ "{\"prompt\": \"p\", \"max_tokens\": 99999999999999999999}", "max_tokens" },
		{ "{\"prompt\": [1, 2, -99999999999999999999]}", "prompt" },
		{ "{\"temperature\" :\n 1e309, \"prompt\": \"a\"}", "temperature" },
		{ "{\"stop\": \"a:b\", \"top_p\": [1e999]}", "top_p" },
		{ "[1e999]", "" },
		{ "{\"a\\\"b\": 1e999}", "" },
		{ "{\"Weird-Key\": 1e999}", "" },
	};
	ds_api_limits lim = { 1000, 64 };
	ds_api_req r;
	ds_api_err e;
	size_t i;

	for (i = 0; i < sizeof c / sizeof c[0]; i++) {
		T_CHECKF(ds_api_parse(&r, DS_API_COMPLETION, c[i].body, strlen(c[i].body),
				      &lim, &e) == -1 && e.status == 400 &&
			 strcmp(e.param, c[i].param) == 0, "case %zu: param '%s'", i,
			 e.param);
	}
}

/* Content-Length: RFC 9110 8.6, 1*DIGIT; any other value is refused. */
static void test_length_check(void)
{
	T_CHECK(ds_api_length_check("0", 0) == 0);
	T_CHECK(ds_api_length_check("1048576", 1048576) == 0);
	T_CHECK(ds_api_length_check("01048576", 1048576) == 0);
	T_CHECK(ds_api_length_check("1048577", 1048576) == 1);
	T_CHECK(ds_api_length_check("18446744073709551615", SIZE_MAX) == 0);
	T_CHECK(ds_api_length_check("18446744073709551616", SIZE_MAX) == 1);
	T_CHECK(ds_api_length_check("99999999999999999999999999999", 100) == 1);
	T_CHECK(ds_api_length_check("7", 5) == 1);
	T_CHECK(ds_api_length_check("", 100) == -1);
	T_CHECK(ds_api_length_check(NULL, 100) == -1);
	T_CHECK(ds_api_length_check("-1", 100) == -1);
	T_CHECK(ds_api_length_check("+5", 100) == -1);
	T_CHECK(ds_api_length_check(" 5", 100) == -1);
	T_CHECK(ds_api_length_check("5x", 100) == -1);
	T_CHECK(ds_api_length_check("999999999999999999999x", 100) == -1);
}

/* ---- metrics ------------------------------------------------------------------------ */

/* The value of the sample line that starts with `series ` (-1: none). */
static double sample(const char *page, const char *series)
{
	const char *p = page;
	size_t n = strlen(series);

	while ((p = strstr(p, series)) != NULL) {
		if ((p == page || p[-1] == '\n') && p[n] == ' ')
			return atof(p + n + 1);
		p += n;
	}
	return -1;
}

/* The exposition format: lines are "# HELP name text", "# TYPE name type"
 * (before the samples of name) or "name{labels} value"; histograms'
 * buckets are cumulative up to le="+Inf", which equals _count. */
static int well_formed(const char *page)
{
	char typed[64][64], line[512];
	int nt = 0;
	const char *p = page;

	while (*p) {
		const char *e = strchr(p, '\n');
		char name[64];
		size_t n;

		if (e == NULL || (n = (size_t)(e - p)) >= sizeof line)
			return 0;
		memcpy(line, p, n);
		line[n] = '\0';
		p = e + 1;
		if (!strncmp(line, "# HELP ", 7))
			continue;
		if (!strncmp(line, "# TYPE ", 7)) {
			char type[32];

			if (sscanf(line + 7, "%63s %31s", name, type) != 2 || nt == 64 ||
			    (strcmp(type, "counter") && strcmp(type, "gauge") &&
			     strcmp(type, "histogram")))
				return 0;
			snprintf(typed[nt++], sizeof typed[0], "%s", name);
			continue;
		}
		if (sscanf(line, "%63[a-zA-Z0-9_:]", name) != 1)
			return 0;
		{
			int k, found = 0;

			for (k = 0; k < nt && !found; k++) {
				size_t l = strlen(typed[k]);

				found = !strncmp(name, typed[k], l) &&
					(name[l] == '\0' || !strcmp(name + l, "_bucket") ||
					 !strcmp(name + l, "_sum") || !strcmp(name + l, "_count"));
			}
			if (!found || strchr(line, ' ') == NULL)
				return 0;
		}
	}
	return 1;
}

static void test_metrics(void)
{
	ds_metrics *m;
	ds_metrics_now g = { .ready = 1, .queued = 3, .running = 2, .slots = 4,
			     .queue_limit = 64, .cache_bytes = 4096,
			     .cache_limit = 1 << 20, .cache_blocks = 2 };
	double now = 1000.0, lat[5], sum = 0;
	char *page;
	size_t i, gen = 0;
	ds_err err;

	T_CHECK(ds_metrics_init(&m, &err) == 0);
	for (i = 0; i < 5; i++) {
		lat[i] = (double)(t_rand(&seed) % 20000) / 1000.0;
		sum += lat[i];
		gen += i + 1;
		/* the first and third took 4 and 6 of their 10 from the cache */
		ds_metrics_finish(m, i < 3 ? DS_FINISH_STOP : DS_FINISH_CANCEL, 10,
				  i == 0 ? 4 : i == 2 ? 6 : 0, i + 1, lat[i],
				  i == 4 ? -1 : lat[i] / 10);
		ds_metrics_answer(m, DS_EP_COMPLETIONS, 200);
	}
	ds_metrics_answer(m, DS_EP_CHAT, 400);
	ds_metrics_answer(m, DS_EP_OTHER, 404);
	ds_metrics_answer(m, DS_EP_OTHER, 418);
	ds_metrics_answer(m, (enum ds_ep)99, 200);
	/* 30 tokens in each of the 10 seconds before now, some long before */
	ds_metrics_tokens(m, 500, 1);
	for (i = 0; i < 10; i++)
		ds_metrics_tokens(m, 30, now - 10 + (double)i + 0.5);
	ds_metrics_tokens(m, 7, now + 0.25);   /* the current second is left out */
	page = ds_metrics_render(m, &g, now + 0.5);
	T_CHECK(page && well_formed(page));
	if (page == NULL)
		return;
	T_CHECK(sample(page, "ds_requests_total{endpoint=\"/v1/completions\",status=\"200\"}") == 5);
	T_CHECK(sample(page, "ds_requests_total{endpoint=\"/v1/chat/completions\",status=\"400\"}") == 1);
	T_CHECK(sample(page, "ds_requests_total{endpoint=\"other\",status=\"404\"}") == 1);
	T_CHECK(sample(page, "ds_requests_total{endpoint=\"other\",status=\"other\"}") == 1);
	T_CHECK(sample(page, "ds_requests_total{endpoint=\"other\",status=\"200\"}") == 1);
	T_CHECK(sample(page, "ds_generations_total{finish_reason=\"stop\"}") == 3);
	T_CHECK(sample(page, "ds_generations_total{finish_reason=\"cancelled\"}") == 2);
	T_CHECK(sample(page, "ds_prompt_tokens_total") == 50);
	T_CHECK(sample(page, "ds_prompt_cache_hits_total") == 2);
	T_CHECK(sample(page, "ds_prompt_cache_tokens_total") == 10);
	T_CHECK(sample(page, "ds_prompt_cache_bytes") == 4096);
	T_CHECK(sample(page, "ds_prompt_cache_limit_bytes") == 1 << 20);
	T_CHECK(sample(page, "ds_prompt_cache_blocks") == 2);
	T_CHECK(sample(page, "ds_generated_tokens_total") == (double)gen);
	T_CHECK(sample(page, "ds_queue_depth") == 3 && sample(page, "ds_active_slots") == 2);
	T_CHECK(sample(page, "ds_slots") == 4 && sample(page, "ds_queue_limit") == 64);
	T_NEAR(sample(page, "ds_generation_tokens_per_second"), 30, 1e-9);
	T_CHECK(sample(page, "ds_request_duration_seconds_count") == 5);
	T_NEAR(sample(page, "ds_request_duration_seconds_sum"), sum, 1e-5);
	T_CHECK(sample(page, "ds_request_duration_seconds_bucket{le=\"+Inf\"}") == 5);
	T_CHECK(sample(page, "ds_time_to_first_token_seconds_count") == 4);
	{
		/* each bucket counts the observations <= its bound */
		static const char *const le[] = { "0.05", "0.5", "1", "2.5", "10", "30" };
		size_t k, want;
		char series[96];

		for (k = 0; k < 6; k++) {
			for (want = 0, i = 0; i < 5; i++)
				want += lat[i] <= atof(le[k]);
			snprintf(series, sizeof series,
				 "ds_request_duration_seconds_bucket{le=\"%s\"}", le[k]);
			T_CHECKF(sample(page, series) == (double)want, "le %s", le[k]);
		}
	}
	free(page);
	ds_metrics_free(m);
}

int main(void)
{
	seed = t_seed();
	T_RUN(test_completion_fields);
	T_RUN(test_prompt_forms);
	T_RUN(test_messages);
	T_RUN(test_wrong_fields);
	T_RUN(test_tools_fields);
	T_RUN(test_tool_calls);
	T_RUN(test_malformed);
	T_RUN(test_fuzz);
	T_RUN(test_tokenize_bodies);
	T_RUN(test_answers);
	T_RUN(test_chunks);
	T_RUN(test_error_object);
	T_RUN(test_utf8_repair);
	T_RUN(test_api_key);
	T_RUN(test_length_check);
	T_RUN(test_number_overflow);
	T_RUN(test_metrics);
	return t_done();
}

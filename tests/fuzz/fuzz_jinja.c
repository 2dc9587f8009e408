/* fuzz_jinja.c - a chat template (libcore/chat/jinja_*.c): parsed, then
 * rendered twice with a fixed conversation (every role, tool calls,
 * tools, unicode, empty and whitespace contents) and the clock pinned.
 * Invariants: a rendering is NUL-terminated at its length, within the
 * output bound, and the same both times. */
#include "fuzz.h"

#include <jansson.h>

#include "chat/jinja.h"

static const char ctx_json[] =
	"{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\",\"add_generation_prompt\":true,"
	"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
	"\"description\":\"d\",\"parameters\":{\"type\":\"object\",\"properties\":"
	"{\"a\":{\"type\":\"number\"}},\"required\":[\"a\"]}}}],"
	"\"documents\":null,\"enable_thinking\":false,"
	"\"messages\":["
	"{\"role\":\"system\",\"content\":\" Be brief.\\n\"},"
	"{\"role\":\"user\",\"content\":\"Hi \\u00e9\\u4f60\\ud83d\\ude00\"},"
	"{\"role\":\"assistant\",\"content\":\"<think>\\nhm\\n</think>\\n\\nHello\","
	"\"reasoning_content\":\"r\"},"
	"{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\","
	"\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1}\"}},"
	"{\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{\"a\":2.5}}}]},"
	"{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"3\"},"
	"{\"role\":\"user\",\"content\":\"\"}]}";

static json_t *ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	json_error_t je;

	(void)argc;
	(void)argv;
	ctx = json_loads(ctx_json, 0, &je);
	if (ctx == NULL) {
		fprintf(stderr, "fuzz_jinja: context: %s\n", je.text);
		abort();
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	ds_jinja_opts o = { .pin_time = 1, .now = 1700000000 };
	ds_jinja *t;
	ds_err err;
	char *a = NULL, *b = NULL;
	size_t na = 0, nb = 0;
	int ra, rb;

	if (ds_jinja_parse((const char *)data, size, &t, &err) != 0)
		return 0;
	ra = ds_jinja_render_opts(t, ctx, &o, &a, &na, &err);
	rb = ds_jinja_render_opts(t, ctx, &o, &b, &nb, &err);
	FZ_CHECK(ra == rb);
	if (ra == 0) {
		FZ_CHECK(a[na] == '\0' && na <= (64u << 20));
		FZ_CHECK(na == nb && memcmp(a, b, na) == 0);
	} else {
		FZ_CHECK(a == NULL && b == NULL);
	}
	free(a);
	free(b);
	ds_jinja_free(t);
	return 0;
}

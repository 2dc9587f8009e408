/* test_chat.c - chat templates against the strings the models' own
 * templates produce (tokenizer_config.json Jinja, as rendered by HF). */
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "harness.h"

#define BOS "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define ASST "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"

static const ds_chat_msg conv[] = {
	{ "system", "Be brief." },
	{ "user", "Hi" },
	{ "assistant", "<think>\nhm\n</think>\n\nHello!" },
	{ "user", "2+2?" },
};

static int render_is(enum ds_chat_tmpl t, const char *bos, const char *want)
{
	char *got = NULL;
	int ok;

	if (ds_chat_render(t, conv, 4, 1, bos, EOS, &got, NULL) != 0)
		return 0;
	ok = strcmp(got, want) == 0;
	if (!ok)
		printf("#   got  [%s]\n#   want [%s]\n", got, want);
	free(got);
	return ok;
}

static void test_deepseek2(void)
{
	T_CHECK(render_is(DS_CHAT_DEEPSEEK2, BOS,
		BOS "Be brief.\n\nUser: Hi\n\nAssistant: <think>\nhm\n</think>\n\nHello!"
		EOS "User: 2+2?\n\nAssistant:"));
}

static void test_deepseek3(void)
{
	T_CHECK(render_is(DS_CHAT_DEEPSEEK3, BOS,
		BOS "Be brief." USER "Hi" ASST "<think>\nhm\n</think>\n\nHello!" EOS
		USER "2+2?" ASST));
}

static void test_r1(void)
{
	T_CHECK(render_is(DS_CHAT_DEEPSEEK_R1, BOS,
		BOS "Be brief." USER "Hi" ASST "\n\nHello!" EOS USER "2+2?" ASST
		"<think>\n"));
}

static void test_llama3_chatml(void)
{
	T_CHECK(render_is(DS_CHAT_LLAMA3, "<|begin_of_text|>",
		"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
		"<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
		"<|start_header_id|>assistant<|end_header_id|>\n\n<think>\nhm\n</think>\n\nHello!<|eot_id|>"
		"<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
		"<|start_header_id|>assistant<|end_header_id|>\n\n"));
	T_CHECK(render_is(DS_CHAT_CHATML, NULL,
		"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
		"<|im_start|>assistant\n<think>\nhm\n</think>\n\nHello!<|im_end|>\n"
		"<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"));
}

static void test_names_and_errors(void)
{
	enum ds_chat_tmpl t;
	ds_err e;
	ds_chat_msg bad = { "tool", "x" };
	char *out = (char *)1;

	T_CHECK(ds_chat_parse("deepseek-r1", &t, &e) == 0 && t == DS_CHAT_DEEPSEEK_R1);
	T_CHECK(strcmp(ds_chat_name(t), "deepseek-r1") == 0);
	T_CHECK(ds_chat_parse("vicuna", &t, &e) == -1 && strstr(e.msg, "vicuna") != NULL);
	T_CHECK(ds_chat_render(DS_CHAT_CHATML, &bad, 1, 1, NULL, NULL, &out, &e) == -1);
	T_CHECK(out == NULL && strstr(e.msg, "tool") != NULL);
	T_CHECK(ds_chat_render(DS_CHAT_CHATML, NULL, 0, 0, NULL, NULL, &out, &e) == 0 &&
		out[0] == '\0');
	free(out);
}

int main(void)
{
	T_RUN(test_deepseek2);
	T_RUN(test_deepseek3);
	T_RUN(test_r1);
	T_RUN(test_llama3_chatml);
	T_RUN(test_names_and_errors);
	return t_done();
}

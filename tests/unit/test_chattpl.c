/* test_chattpl.c - chat templates of either kind (chat/template.h): where
 * they come from (model.meta, a checkpoint's tokenizer_config.json,
 * chat_template.jinja, special_tokens_map.json), what a render is given,
 * and the checks on a request's messages.  The real templates against
 * Jinja2 are test_jinja's; ds-tok --chat end to end is tests/cli/chat.bats. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat/template.h"
#include "harness.h"

#define BOS "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define ASST "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"

static char dir[64];

static void put(const char *name, const char *text)
{
	char p[256];
	FILE *f;

	snprintf(p, sizeof p, "%s/%s", dir, name);
	f = fopen(p, "w");
	if (f == NULL)
		abort();
	fputs(text, f);
	fclose(f);
}

static void rm(const char *name)
{
	char p[256];

	snprintf(p, sizeof p, "%s/%s", dir, name);
	unlink(p);
}

static json_t *J(const char *s)
{
	json_t *j = json_loads(s, 0, NULL);

	if (j == NULL)
		abort();
	return j;
}

/* a equals the JSON text b */
static int jeq(const json_t *a, const char *b)
{
	json_t *j = J(b);
	int ok = json_equal(a, j);

	json_decref(j);
	return ok;
}

/* Render msgs (JSON text) with t; the text or NULL (err printed). */
static char *render(const ds_chat_tpl *t, const char *msgs, const char *vars,
		    int gen)
{
	json_t *m = J(msgs), *v = vars ? J(vars) : NULL;
	char *out = NULL;
	ds_err err;

	if (ds_chat_tpl_render(t, m, v, gen, &out, NULL, &err))
		printf("#   render: %s\n", err.msg);
	json_decref(m);
	json_decref(v);
	return out;
}

static int render_is(const ds_chat_tpl *t, const char *msgs, const char *vars,
		     int gen, const char *want)
{
	char *got = render(t, msgs, vars, gen);
	int ok = got != NULL && strcmp(got, want) == 0;

	if (got && !ok)
		printf("#   got  [%s]\n#   want [%s]\n", got, want);
	free(got);
	return ok;
}

static const char *CONV = "[{\"role\": \"system\", \"content\": \"S\"},"
	"{\"role\": \"user\", \"content\": \"Hi\"}]";

static void test_named(void)
{
	json_t *sp = J("{\"bos_token\": \"" BOS "\", \"eos_token\": \"" EOS "\"}");
	ds_chat_tpl t;
	ds_err err;

	T_CHECK(ds_chat_tpl_named(&t, "deepseek3", sp, &err) == 0);
	T_CHECK(t.jt == NULL && !t.think && strcmp(ds_chat_tpl_kind(&t), "deepseek3") == 0);
	T_CHECK(render_is(&t, CONV, NULL, 1, BOS "S" USER "Hi" ASST));
	T_CHECK(render_is(&t, CONV, NULL, 0, BOS "S" USER "Hi"));
	/* text only: a null assistant content is empty, a list is refused */
	T_CHECK(render_is(&t, "[{\"role\": \"assistant\", \"content\": null}]", NULL, 0,
			  BOS ASST EOS));
	T_CHECK(render(&t, "[{\"role\": \"user\", \"content\": [1]}]", NULL, 1) == NULL);
	ds_chat_tpl_free(&t);
	T_CHECK(ds_chat_tpl_named(&t, "deepseek-r1", sp, &err) == 0 && t.think);
	ds_chat_tpl_free(&t);
	T_CHECK(ds_chat_tpl_named(&t, "vicuna", sp, &err) == -1 && strstr(err.msg, "vicuna"));
	json_decref(sp);
}

static void test_jinja_context(void)
{
	/* every variable apply_chat_template passes, as the template sees it */
	const char *src = "{{ bos_token }}|{{ eos_token }}|{{ tools }}|{{ documents }}|"
		"{{ add_generation_prompt }}|{{ messages | length }}|{{ x }}|"
		"{{ messages[1].content }}<|im_end|>{% if 0 %}</think>{% endif %}";
	json_t *sp = J("{\"bos_token\": \"B\", \"eos_token\": \"E\"}");
	ds_chat_tpl t;
	ds_err err;

	T_CHECK(ds_chat_tpl_jinja(&t, src, strlen(src), sp, "test", &err) == 0);
	T_CHECK(t.jt != NULL && t.think && strcmp(t.end_marker, "<|im_end|>") == 0);
	T_CHECK(render_is(&t, CONV, NULL, 1, "B|E|None|None|True|2||Hi<|im_end|>"));
	/* the caller's variables, over the special tokens; tools given */
	T_CHECK(render_is(&t, CONV, "{\"x\": 7, \"eos_token\": \"F\", \"tools\": [1]}", 0,
			  "B|F|[1]|None|False|2|7|Hi<|im_end|>"));
	ds_chat_tpl_free(&t);
	/* a syntax error names where it came from */
	T_CHECK(ds_chat_tpl_jinja(&t, "{% if %}", 8, sp, "here.jinja", &err) == -1);
	T_CHECKF(strncmp(err.msg, "here.jinja: chat_template:1:", 28) == 0, "%s", err.msg);
	/* raise_exception's message alone */
	src = "{{ raise_exception('no system role') }}";
	T_CHECK(ds_chat_tpl_jinja(&t, src, strlen(src), NULL, "t", &err) == 0);
	T_CHECK(render(&t, CONV, NULL, 1) == NULL);
	ds_chat_tpl_free(&t);
	json_decref(sp);
}

static void test_opens_think(void)
{
	T_CHECK(ds_chat_opens_think(ASST "<think>\n", strlen(ASST "<think>\n")));
	T_CHECK(ds_chat_opens_think("<think>", 7));
	T_CHECK(!ds_chat_opens_think(ASST, strlen(ASST)));
	T_CHECK(!ds_chat_opens_think("<think>\n\n</think>\n\n", 19));
	T_CHECK(!ds_chat_opens_think("", 0));
}

static const char *CFG_HEAD = "{\"add_bos_token\": true, \"model_max_length\": 1e30,"
	" \"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<s>\"},"
	" \"eos_token\": \"</s>\", \"unk_token\": null,";

static void cfg(const char *ct)
{
	char b[1024];

	snprintf(b, sizeof b, "%s \"chat_template\": %s}", CFG_HEAD, ct);
	put("tokenizer_config.json", b);
}

static void test_extract(void)
{
	json_t *o;
	ds_err err;

	rm("chat_template.jinja");
	rm("special_tokens_map.json");
	/* no template: nothing stored */
	cfg("null");
	T_CHECK(ds_chat_tpl_extract(dir, &o, &err) == 0 && o == NULL);
	/* a string; the special tokens as their text, null ones left out,
	 * special_tokens_map.json filling what the config lacks */
	cfg("\"{{ bos_token }}T\"");
	put("special_tokens_map.json", "{\"pad_token\": {\"content\": \"<pad>\"},"
	    " \"eos_token\": \"ignored\", \"additional_special_tokens\": [\"<a>\", {\"content\": \"<b>\"}]}");
	T_CHECK(ds_chat_tpl_extract(dir, &o, &err) == 0 && o != NULL);
	T_CHECK(strcmp(json_string_value(json_object_get(o, "template")), "{{ bos_token }}T") == 0);
	T_CHECK(strcmp(json_string_value(json_object_get(o, "source")), "tokenizer_config.json") == 0);
	T_CHECK(jeq(json_object_get(o, "special"),
			   ("{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"pad_token\": "
			     "\"<pad>\", \"additional_special_tokens\": [\"<a>\", \"<b>\"]}")));
	json_decref(o);
	/* a list: "default", the others kept by name */
	cfg("[{\"name\": \"tool_use\", \"template\": \"U\"}, {\"name\": \"default\", \"template\": \"D\"}]");
	T_CHECK(ds_chat_tpl_extract(dir, &o, &err) == 0 && o != NULL);
	T_CHECK(strcmp(json_string_value(json_object_get(o, "template")), "D") == 0);
	T_CHECK(jeq(json_object_get(o, "named"), "{\"tool_use\": \"U\"}"));
	json_decref(o);
	/* chat_template.jinja first, as transformers reads it */
	put("chat_template.jinja", "F{{ eos_token }}");
	T_CHECK(ds_chat_tpl_extract(dir, &o, &err) == 0 && o != NULL);
	T_CHECK(strcmp(json_string_value(json_object_get(o, "template")), "F{{ eos_token }}") == 0);
	T_CHECK(strcmp(json_string_value(json_object_get(o, "source")), "chat_template.jinja") == 0);
	json_decref(o);
	/* refused, naming the file and field */
	put("chat_template.jinja", "bad \xff");
	T_CHECK(ds_chat_tpl_extract(dir, &o, &err) == -1 && strstr(err.msg, "chat_template.jinja: not valid UTF-8"));
	rm("chat_template.jinja");
	cfg("3");
	T_CHECK(ds_chat_tpl_extract(dir, &o, &err) == -1 && strstr(err.msg, "tokenizer_config.json: chat_template: must be"));
	cfg("[{\"name\": \"default\"}]");
	T_CHECK(ds_chat_tpl_extract(dir, &o, &err) == -1 && strstr(err.msg, "chat_template[0]"));
	put("tokenizer_config.json", "{\"chat_template\": ");
	T_CHECK(ds_chat_tpl_extract(dir, &o, &err) == -1 && strstr(err.msg, "tokenizer_config.json: line 1"));
	put("tokenizer_config.json", "[]");
	T_CHECK(ds_chat_tpl_extract(dir, &o, &err) == -1 && strstr(err.msg, "not a JSON object"));
	rm("special_tokens_map.json");
	rm("tokenizer_config.json");
	T_CHECK(ds_chat_tpl_extract(dir, &o, &err) == 0 && o == NULL);
}

static void test_dir(void)
{
	ds_chat_tpl t;
	ds_err err;

	cfg("\"{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}\"");
	T_CHECK(ds_chat_tpl_dir(&t, dir, &err) == 1);
	T_CHECK(strstr(t.origin, "tokenizer_config.json") != NULL);
	T_CHECK(render_is(&t, CONV, NULL, 1, "<s>[system:S][user:Hi]"));
	ds_chat_tpl_free(&t);
	cfg("\"{% for %}\"");
	T_CHECK(ds_chat_tpl_dir(&t, dir, &err) == -1);
	T_CHECKF(strstr(err.msg, "tokenizer_config.json: chat_template:1:") != NULL, "%s", err.msg);
	cfg("null");
	T_CHECK(ds_chat_tpl_dir(&t, dir, &err) == 0);
	rm("tokenizer_config.json");
}

static void test_meta(void)
{
	ds_chat_tpl t;
	char warn[512];
	ds_err err;
	json_t *m;

	/* the stored template with its special tokens */
	m = J("{\"tokenizer\": {\"bos_token\": \"<b>\"}, \"chat_template\": \"deepseek3\","
	      " \"chat_template_jinja\": {\"template\": \"{{ bos_token }}J\","
	      " \"special\": {\"bos_token\": \"<s>\"}}}");
	T_CHECK(ds_chat_tpl_meta(&t, m, warn, sizeof warn, &err) == 1 && t.jt && !warn[0]);
	T_CHECK(render_is(&t, CONV, NULL, 1, "<s>J"));
	ds_chat_tpl_free(&t);
	json_decref(m);
	/* one that does not parse: the name, with a warning */
	m = J("{\"tokenizer\": {\"bos_token\": \"<b>\", \"eos_token\": \"<e>\"},"
	      " \"chat_template\": \"chatml\", \"chat_template_jinja\": {\"template\": \"{% x %}\"}}");
	T_CHECK(ds_chat_tpl_meta(&t, m, warn, sizeof warn, &err) == 1 && t.jt == NULL);
	T_CHECKF(strstr(warn, "unknown statement") && strstr(warn, "chatml"), "%s", warn);
	ds_chat_tpl_free(&t);
	json_object_del(m, "chat_template");
	T_CHECK(ds_chat_tpl_meta(&t, m, warn, sizeof warn, &err) == -1);
	T_CHECK(strstr(err.msg, "model.meta chat_template_jinja: chat_template:1:") != NULL);
	json_decref(m);
	/* a model converted before: the name, BOS and EOS from the tokenizer */
	m = J("{\"tokenizer\": {\"bos_token\": \"<b>\", \"eos_token\": \"<e>\"},"
	      " \"chat_template\": \"deepseek2\"}");
	T_CHECK(ds_chat_tpl_meta(&t, m, warn, sizeof warn, &err) == 1);
	T_CHECK(render_is(&t, CONV, NULL, 1, "<b>S\n\nUser: Hi\n\nAssistant:"));
	ds_chat_tpl_free(&t);
	json_decref(m);
	/* none, and names ds does not know */
	m = J("{\"tokenizer\": {}, \"chat_template\": \"nonesuch\"}");
	T_CHECK(ds_chat_tpl_meta(&t, m, warn, sizeof warn, &err) == 0);
	json_decref(m);
	m = J("{\"chat_template_jinja\": 3}");
	T_CHECK(ds_chat_tpl_meta(&t, m, warn, sizeof warn, &err) == -1 &&
		strstr(err.msg, "must be an object"));
	json_decref(m);
}

/* ds_chat_messages on body's "messages": the param at fault, or "". */
static const char *msgs_param(const char *body, unsigned flags, json_t **out)
{
	static char param[96];
	json_t *b = J(body);
	ds_err err;

	param[0] = '\0';
	if (ds_chat_messages(json_object_get(b, "messages"), flags, out, param,
			     sizeof param, &err) == 0)
		param[0] = '\0';
	else if (strncmp(err.msg, param, strlen(param)) != 0)
		printf("#   message [%s] does not start with [%s]\n", err.msg, param);
	json_decref(b);
	return param;
}

static void test_messages(void)
{
	static const struct { const char *body, *param; } bad[] = {
		{ "{}", "messages" },
		{ "{\"messages\": {}}", "messages" },
		{ "{\"messages\": []}", "messages" },
		{ "{\"messages\": [3]}", "messages[0]" },
		{ "{\"messages\": [{\"content\": \"x\"}]}", "messages[0].role" },
		{ "{\"messages\": [{\"role\": \"bot\", \"content\": \"x\"}]}", "messages[0].role" },
		{ "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", "messages[0].role" },
		{ "{\"messages\": [{\"role\": \"user\"}]}", "messages[0].content" },
		{ "{\"messages\": [{\"role\": \"user\", \"content\": 1}]}", "messages[0].content" },
		{ "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}",
		  "messages[0].content[0]" },
		{ "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}",
		  "messages[0].content[0].text" },
		{ "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": "
		  "\"assistant\", \"tool_calls\": []}]}", "messages[1]" },
	};
	json_t *out;
	size_t i;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
		T_CHECKF(strcmp(msgs_param(bad[i].body, 0, &out), bad[i].param) == 0,
			 "%s: got [%s]", bad[i].body, msgs_param(bad[i].body, 0, &out));
	/* developer is system, text parts joined, other fields kept, a
	 * missing assistant content left missing */
	T_CHECK(msgs_param("{\"messages\": [{\"role\": \"developer\", \"content\": \"d\"},"
			   "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"},"
			   "{\"type\": \"text\", \"text\": \"b\"}], \"name\": \"n\"},"
			   "{\"role\": \"assistant\"}]}", 0, &out)[0] == '\0');
	T_CHECK(jeq(out, ("[{\"role\": \"system\", \"content\": \"d\"},"
				  "{\"role\": \"user\", \"content\": \"a\\nb\", \"name\": \"n\"},"
				  "{\"role\": \"assistant\"}]")));
	json_decref(out);
	/* tools: the tool role and tool_calls pass */
	T_CHECK(msgs_param("{\"messages\": [{\"role\": \"assistant\", \"content\": null, "
			   "\"tool_calls\": [{\"id\": \"c\"}]}, {\"role\": \"tool\", "
			   "\"content\": \"r\"}]}", DS_CHAT_TOOLS, &out)[0] == '\0');
	json_decref(out);
}

static void test_kwargs(void)
{
	char param[96];
	json_t *o, *in = J("{\"enable_thinking\": false}");
	ds_err err;

	T_CHECK(ds_chat_kwargs(in, &o, param, sizeof param, &err) == 0 && json_equal(o, in));
	json_decref(o);
	json_decref(in);
	T_CHECK(ds_chat_kwargs(NULL, &o, param, sizeof param, &err) == 0 && o == NULL);
	in = J("{\"messages\": []}");
	T_CHECK(ds_chat_kwargs(in, &o, param, sizeof param, &err) == -1 &&
		strcmp(param, "chat_template_kwargs.messages") == 0);
	json_decref(in);
	in = J("[1]");
	T_CHECK(ds_chat_kwargs(in, &o, param, sizeof param, &err) == -1 &&
		strcmp(param, "chat_template_kwargs") == 0);
	json_decref(in);
}

int main(void)
{
	snprintf(dir, sizeof dir, "/tmp/ds-chattpl.XXXXXX");
	if (mkdtemp(dir) == NULL)
		return 1;
	T_RUN(test_named);
	T_RUN(test_jinja_context);
	T_RUN(test_opens_think);
	T_RUN(test_extract);
	T_RUN(test_dir);
	T_RUN(test_meta);
	T_RUN(test_messages);
	T_RUN(test_kwargs);
	ds_remove_tree(dir);
	return t_done();
}

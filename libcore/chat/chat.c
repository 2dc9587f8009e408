/* chat.c - rendering conversations with the models' chat templates. */
#include <stdlib.h>
#include <string.h>

#include "chat.h"

static const char *const names[] = {
	[DS_CHAT_DEEPSEEK2] = "deepseek2",
	[DS_CHAT_DEEPSEEK3] = "deepseek3",
	[DS_CHAT_DEEPSEEK_R1] = "deepseek-r1",
	[DS_CHAT_LLAMA3] = "llama3",
	[DS_CHAT_CHATML] = "chatml",
};

int ds_chat_parse(const char *name, enum ds_chat_tmpl *t, ds_err *err)
{
	size_t i;

	for (i = 0; i < sizeof names / sizeof names[0]; i++)
		if (strcmp(name, names[i]) == 0) {
			*t = (enum ds_chat_tmpl)i;
			return 0;
		}
	return ds_errf(err, "unknown chat template '%s' (known: deepseek2, "
		       "deepseek3, deepseek-r1, llama3, chatml)", name);
}

const char *ds_chat_name(enum ds_chat_tmpl t)
{
	return names[t];
}

const char *ds_chat_end_marker(enum ds_chat_tmpl t)
{
	return t == DS_CHAT_LLAMA3 ? "<|eot_id|>"
	       : t == DS_CHAT_CHATML ? "<|im_end|>" : NULL;
}

/* A growing string. */
typedef struct sbuf {
	char *s;
	size_t len, cap;
	int oom;
} sbuf;

static void put(sbuf *b, const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (b->oom || n == 0)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = (b->len + n + 1) * 2;
		char *p = realloc(b->s, cap);

		if (p == NULL) {
			b->oom = 1;
			return;
		}
		b->s = p;
		b->cap = cap;
	}
	memcpy(b->s + b->len, s, n + 1);
	b->len += n;
}

/* R1 history: keep what follows the last "</think>". */
static const char *after_think(const char *c)
{
	const char *p = c, *q;

	while ((q = strstr(p, "</think>")) != NULL)
		p = q + strlen("</think>");
	return p;
}

static void deepseek(sbuf *b, enum ds_chat_tmpl t, const ds_chat_msg *m,
		     const char *eos)
{
	int v2 = t == DS_CHAT_DEEPSEEK2;

	if (strcmp(m->role, "system") == 0) {
		put(b, m->content);
		if (v2)
			put(b, "\n\n");
	} else if (strcmp(m->role, "user") == 0) {
		put(b, v2 ? "User: " : "<\xef\xbd\x9cUser\xef\xbd\x9c>");
		put(b, m->content);
		if (v2)
			put(b, "\n\n");
	} else {
		put(b, v2 ? "Assistant: " : "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>");
		put(b, t == DS_CHAT_DEEPSEEK_R1 ? after_think(m->content)
						: m->content);
		put(b, v2 ? eos : "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
	}
}

static void tagged(sbuf *b, enum ds_chat_tmpl t, const ds_chat_msg *m)
{
	if (t == DS_CHAT_LLAMA3) {
		put(b, "<|start_header_id|>");
		put(b, m->role);
		put(b, "<|end_header_id|>\n\n");
		put(b, m->content);
		put(b, "<|eot_id|>");
	} else {
		put(b, "<|im_start|>");
		put(b, m->role);
		put(b, "\n");
		put(b, m->content);
		put(b, "<|im_end|>\n");
	}
}

static const char *gen_prompt(enum ds_chat_tmpl t)
{
	switch (t) {
	case DS_CHAT_DEEPSEEK2: return "Assistant:";
	case DS_CHAT_DEEPSEEK3: return "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>";
	case DS_CHAT_DEEPSEEK_R1: return "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>\n";
	case DS_CHAT_LLAMA3: return "<|start_header_id|>assistant<|end_header_id|>\n\n";
	case DS_CHAT_CHATML: return "<|im_start|>assistant\n";
	}
	return "";
}

int ds_chat_render(enum ds_chat_tmpl t, const ds_chat_msg *msgs, size_t n,
		   int gen, const char *bos, const char *eos, char **out,
		   ds_err *err)
{
	sbuf b = { 0 };
	size_t i;

	*out = NULL;
	for (i = 0; i < n; i++) {
		const char *r = msgs[i].role;

		if (strcmp(r, "system") != 0 && strcmp(r, "user") != 0 &&
		    strcmp(r, "assistant") != 0) {
			free(b.s);
			return ds_errf(err, "chat message %zu: unknown role '%s'", i, r);
		}
	}
	if (t != DS_CHAT_CHATML)
		put(&b, bos);
	for (i = 0; i < n; i++) {
		if (t == DS_CHAT_LLAMA3 || t == DS_CHAT_CHATML)
			tagged(&b, t, &msgs[i]);
		else
			deepseek(&b, t, &msgs[i], eos);
	}
	if (gen)
		put(&b, gen_prompt(t));
	put(&b, "");
	if (b.s == NULL && !b.oom)
		b.s = calloc(1, 1);
	if (b.oom || b.s == NULL) {
		free(b.s);
		return ds_errf(err, "chat: out of memory");
	}
	*out = b.s;
	return 0;
}

/*
 * template.h - a conversation turned into the prompt text the model was
 * trained on: by the checkpoint's own chat template (Jinja, rendered as
 * transformers' apply_chat_template renders it, jinja.h), or, for a
 * checkpoint without one, by a named template of chat.h.
 *
 * Where a template comes from (docs/chat.md):
 *   a model directory   model.meta "chat_template_jinja" (ds-convert
 *                       stores it, ds-model(5)); else model.meta
 *                       "chat_template", a name (models converted before)
 *   a checkpoint        chat_template.jinja, else tokenizer_config.json's
 *                       "chat_template" (a string, or a list of named
 *                       templates of which "default" is used), with the
 *                       special tokens of tokenizer_config.json and
 *                       special_tokens_map.json
 *   a file, a name      --chat-template-file FILE, --chat-template NAME
 *
 * Rendering passes what apply_chat_template passes: the special tokens'
 * strings by name (bos_token, eos_token, ...), the caller's extra
 * variables (chat_template_kwargs: enable_thinking, thinking, ...),
 * messages, tools and documents (None when not given) and
 * add_generation_prompt.  The text carries its own BOS: it is encoded
 * with special tokens matched and nothing added (DS_TOK_NO_BOS), as
 * apply_chat_template(tokenize=True) does.
 *
 * A template is immutable once made: any number of threads may render
 * with it at once.
 */
#ifndef DS_CHAT_TEMPLATE_H
#define DS_CHAT_TEMPLATE_H

#include <stddef.h>

#include <jansson.h>

#include "base/util.h"
#include "chat/chat.h"
#include "chat/jinja.h"

typedef struct ds_chat_tpl {
	ds_jinja *jt;               /* the Jinja template; NULL: named */
	enum ds_chat_tmpl named;    /* when jt is NULL */
	json_t *special;            /* {"bos_token": "...", ...} (owned) */
	char origin[192];           /* where it came from, for messages */
	int think;                  /* it handles <think> blocks (R1 style) */
	const char *end_marker;     /* its end of turn besides EOS, or NULL */
	ds_jinja_opts jo;           /* the clock strftime_now() reads */
	/* tools (serve/tools.c): the format its tool calls take, and what
	 * it renders itself */
	enum ds_tool_fmt {
		DS_TOOLFMT_HERMES,      /* <tool_call>{"name", "arguments"}</tool_call>
					   (Qwen; ds's own for templates
					   without one) */
		DS_TOOLFMT_DEEPSEEK,    /* <｜tool▁calls▁begin｜>... (V3, R1) */
		DS_TOOLFMT_LLAMA3,      /* {"name", "parameters"} (Llama 3.1+) */
	} tool_fmt;
	int renders_tools;          /* it reads the "tools" variable */
	int renders_calls;          /* it reads messages' tool_calls */
} ds_chat_tpl;

/* The special tokens transformers passes to a template: the
 * tokenizer_config.json keys below (AddedToken objects as their content;
 * null ones left out), a key missing there taken from
 * special_tokens_map.json. */
#define DS_CHAT_SPECIAL_KEYS { "bos_token", "eos_token", "unk_token", \
	"sep_token", "pad_token", "cls_token", "mask_token", \
	"additional_special_tokens" }

/* A named template (chat.h); special gives its bos_token and eos_token
 * (may be NULL). */
int ds_chat_tpl_named(ds_chat_tpl *t, const char *name, const json_t *special,
		      ds_err *err);
/* Jinja source src[0..len), parsed; origin names it in messages. */
int ds_chat_tpl_jinja(ds_chat_tpl *t, const char *src, size_t len,
		      const json_t *special, const char *origin, ds_err *err);
/* A .jinja file. */
int ds_chat_tpl_file(ds_chat_tpl *t, const char *path, const json_t *special,
		     ds_err *err);
/* The template of a model.meta: 1 made, 0 the model names none, -1 on
 * error.  A stored Jinja template that does not parse falls back to the
 * model's named template with *warn saying why (when it names none, the
 * parse error is the error). */
int ds_chat_tpl_meta(ds_chat_tpl *t, const json_t *meta, char *warn,
		     size_t warn_len, ds_err *err);
/* The template of a checkpoint directory: 1 made, 0 it has none, -1 on
 * error (a file that cannot be read, a template of the wrong type or that
 * does not parse). */
int ds_chat_tpl_dir(ds_chat_tpl *t, const char *dir, ds_err *err);
void ds_chat_tpl_free(ds_chat_tpl *t);

/* What ds-convert stores as model.meta "chat_template_jinja" for the
 * checkpoint in dir: {"source", "template", "special", "named"} ("named":
 * the other named templates of a list, such as "tool_use", by name);
 * *out NULL when the checkpoint has no template.  -1 on a file that
 * cannot be read or is not UTF-8, or a chat_template of the wrong type. */
int ds_chat_tpl_extract(const char *dir, json_t **out, ds_err *err);

/* Render messages (a JSON array of message objects, as
 * ds_chat_messages makes them) with vars (extra variables, may be NULL;
 * "tools" and "documents" among them) and the generation prompt when
 * add_gen.  *out malloc'd and NUL-terminated, *len (may be NULL) its
 * length. */
int ds_chat_tpl_render(const ds_chat_tpl *t, const json_t *messages,
		       const json_t *vars, int add_gen, char **out, size_t *len,
		       ds_err *err);

/* The template's name for logs: "jinja" or the named template's. */
const char *ds_chat_tpl_kind(const ds_chat_tpl *t);

/* Does a rendered prompt leave the model inside a <think> block (the
 * generation prompt opened it: R1's "<｜Assistant｜><think>\n")? */
int ds_chat_opens_think(const char *prompt, size_t len);

/* ---- OpenAI-style request bodies (msgs.c) --------------------------------- */

enum {
	DS_CHAT_TOOLS = 1u << 0,    /* tool messages and tool_calls pass */
};

/* The "messages" array of a chat request, checked, into the conversation
 * the template reads: each an object with a role ("developer" read as
 * "system"; "tool" only with DS_CHAT_TOOLS) and a content that is a
 * string, text parts [{"type": "text", "text"}] (joined with newlines),
 * or, for an assistant, null or absent; every other field kept as given.
 * On failure -1, param the field at fault ("messages[2].role") and err's
 * message starting with it. */
int ds_chat_messages(const json_t *in, unsigned flags, json_t **out,
		     char *param, size_t param_len, ds_err *err);
/* "chat_template_kwargs": an object of extra template variables (not
 * messages, tools, documents or add_generation_prompt); *out a copy, or
 * NULL when in is NULL or null. */
int ds_chat_kwargs(const json_t *in, json_t **out, char *param,
		   size_t param_len, ds_err *err);
/* A whole chat request body (text[0..len), JSON) as ds-tok --chat reads
 * it: "messages" (with DS_CHAT_TOOLS as flags allow), "add_generation_prompt"
 * (default true), "chat_template_kwargs", and with DS_CHAT_TOOLS "tools"
 * and "documents" (arrays, or null); other fields are ignored, so a chat
 * completion's body will do.  *vars: the variables for ds_chat_tpl_render
 * (NULL when none).  Errors are one line naming the field. */
int ds_chat_body(const char *text, size_t len, unsigned flags,
		 json_t **messages, json_t **vars, int *add_gen, ds_err *err);

#endif

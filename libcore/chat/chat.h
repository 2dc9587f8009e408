/*
 * chat.h - chat templates: a conversation rendered to the prompt text the
 * model was trained on.  The rendered text carries its own BOS and special
 * markers; tokenize it with special tokens matched and no extra BOS.
 *
 *   deepseek2    BOS, system "S\n\n", "User: U\n\n", "Assistant: A" EOS;
 *                generation prompt "Assistant:"       (V2, V2-Lite Chat)
 *   deepseek3    BOS, system S, "<｜User｜>U", "<｜Assistant｜>A<｜end▁of▁sentence｜>";
 *                generation prompt "<｜Assistant｜>"  (V3)
 *   deepseek-r1  as deepseek3, but earlier answers are cut to the text after
 *                their last "</think>" and the generation prompt opens the
 *                thinking block: "<｜Assistant｜><think>\n"  (R1, R1 distills)
 *   llama3       "<|start_header_id|>R<|end_header_id|>\n\nC<|eot_id|>"
 *   chatml       "<|im_start|>R\nC<|im_end|>\n"
 */
#ifndef DS_CHAT_H
#define DS_CHAT_H

#include <stddef.h>

#include "base/util.h"

enum ds_chat_tmpl {
	DS_CHAT_DEEPSEEK2,
	DS_CHAT_DEEPSEEK3,
	DS_CHAT_DEEPSEEK_R1,
	DS_CHAT_LLAMA3,
	DS_CHAT_CHATML,
};

typedef struct ds_chat_msg {
	const char *role;    /* "system", "user" or "assistant" */
	const char *content;
} ds_chat_msg;

/* By name ("deepseek3"); -1 with a message listing the names. */
int ds_chat_parse(const char *name, enum ds_chat_tmpl *t, ds_err *err);
const char *ds_chat_name(enum ds_chat_tmpl t);

/* Render msgs[0..n) into a malloc'd NUL-terminated string.  bos and eos are
 * the tokenizer's BOS/EOS token strings (NULL: none).  With gen, the
 * assistant's generation prompt is appended. */
int ds_chat_render(enum ds_chat_tmpl t, const ds_chat_msg *msgs, size_t n,
		   int gen, const char *bos, const char *eos, char **out,
		   ds_err *err);

/* The end-of-turn marker the template uses besides EOS ("<|eot_id|>",
 * "<|im_end|>"), or NULL. */
const char *ds_chat_end_marker(enum ds_chat_tmpl t);

#endif

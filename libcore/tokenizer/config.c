/* config.c - the tokenizer_config.json settings that change what a plain
 * encode produces (add_bos_token, add_eos_token, bos/eos tokens), and the
 * chat template, recognized by name from its text. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "tok_int.h"

/* (model_max_length can be 1e30: integers are read as reals, which the
 * settings used here do not care about) */

/* A token given as a string or as {"content": ...}; its id or -1. */
static int32_t token_id(const struct tb_builder *b, json_t *v)
{
	const char *s = NULL;
	size_t n;

	if (json_is_string(v))
		s = json_string_value(v);
	else if (json_is_object(v) && json_is_string(json_object_get(v, "content")))
		s = json_string_value(json_object_get(v, "content"));
	if (s == NULL)
		return -1;
	n = strlen(s);
	/* added tokens first, as Hugging Face looks them up */
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t i = 0; i < b->n_tok; i++) {
			const struct tb_token *t = &b->tok[i];

			if ((pass == 0) != !!(t->attr & TA_ADDED))
				continue;
			if (t->piece_len == n &&
			    memcmp(b->pool.p + t->piece_off, s, n) == 0)
				return (int32_t)i;
		}
	return -2; /* named but not in the vocabulary */
}

/* The template families of chat.h, told apart by their markers. */
static const char *template_name(const char *t)
{
	if (strstr(t, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>") != NULL)
		/* R1 cuts earlier answers to what follows their </think> */
		return strstr(t, "</think>") ? "deepseek-r1" : "deepseek3";
	if (strstr(t, "<|start_header_id|>") != NULL)
		return "llama3";
	if (strstr(t, "<|im_start|>") != NULL)
		return "chatml";
	if (strstr(t, "'User: '") != NULL || strstr(t, "Assistant:") != NULL)
		return "deepseek2";
	return "";
}

static void set_chat(struct tb_builder *b, json_t *ct)
{
	const char *t = NULL, *name;
	const char *eot = NULL;

	if (json_is_string(ct)) {
		t = json_string_value(ct);
	} else if (json_is_array(ct)) { /* [{"name": "default", "template": ...}] */
		json_t *e;
		size_t i;

		json_array_foreach(ct, i, e) {
			const char *n = json_string_value(json_object_get(e, "name"));

			if (t == NULL || (n && strcmp(n, "default") == 0))
				t = json_string_value(json_object_get(e, "template"));
		}
	}
	if (t == NULL)
		return;
	name = template_name(t);
	snprintf(b->chat, sizeof b->chat, "%s", name);
	if (strcmp(name, "llama3") == 0)
		eot = "<|eot_id|>";
	else if (strcmp(name, "chatml") == 0)
		eot = "<|im_end|>";
	if (eot != NULL) {
		json_t *s = json_string(eot);
		int32_t id = token_id(b, s);

		json_decref(s);
		if (id >= 0)
			b->eot = id;
	}
}

/* The special tokens tokenizer_config.json names are matched in the text,
 * as Hugging Face's (slow) tokenizers do for a SentencePiece model: its
 * CONTROL and UNKNOWN pieces become special added tokens (they still decode
 * as before, and stay out of the Unigram lattice).  A tokenizer.json's are
 * added tokens already. */
static void mark_special(struct tb_builder *b, json_t *root)
{
	static const char *const keys[] = { "bos_token", "eos_token",
					    "unk_token", "pad_token" };

	if (b->model != TB_SP_BPE && b->model != TB_SP_UNIGRAM)
		return;
	for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
		int32_t id = token_id(b, json_object_get(root, keys[k]));

		if (id >= 0 && (b->tok[id].attr & (TA_CONTROL | TA_UNKNOWN)))
			b->tok[id].attr |= TA_ADDED | TA_SPECIAL;
	}
}

int ds_tok_read_config(struct tb_builder *b, const char *config, ds_err *err)
{
	json_error_t je;
	json_t *root, *v;
	int32_t id;
	int rc = -1;

	if (config != NULL) {
		char *text;
		size_t len;

		if (ds_read_file(config, TB_MAX_CONFIG, &text, &len, err) != 0)
			return -1;
		root = json_loadb(text, len, JSON_DECODE_INT_AS_REAL, &je);
		free(text);
		if (root == NULL)
			return ds_errf(err, "%s: line %d: %s", config, je.line,
				       je.text);
		v = json_object_get(root, "bos_token");
		if (v != NULL && !json_is_null(v)) {
			if ((id = token_id(b, v)) < 0) {
				ds_errf(err, "%s: bos_token not in the vocabulary",
					config);
				goto out;
			}
			b->bos = id;
		}
		v = json_object_get(root, "eos_token");
		if (v != NULL && !json_is_null(v)) {
			if ((id = token_id(b, v)) < 0) {
				ds_errf(err, "%s: eos_token not in the vocabulary",
					config);
				goto out;
			}
			b->eos = id;
		}
		v = json_object_get(root, "pad_token");
		if (v != NULL && (id = token_id(b, v)) >= 0)
			b->pad = id;
		v = json_object_get(root, "add_bos_token");
		if (json_is_boolean(v))
			b->flags = json_is_true(v) ? b->flags | TBF_ADD_BOS
						   : b->flags & ~TBF_ADD_BOS;
		v = json_object_get(root, "add_eos_token");
		if (json_is_boolean(v))
			b->flags = json_is_true(v) ? b->flags | TBF_ADD_EOS
						   : b->flags & ~TBF_ADD_EOS;
		set_chat(b, json_object_get(root, "chat_template"));
		mark_special(b, root);
		rc = 0;
out:
		json_decref(root);
		if (rc != 0)
			return -1;
	}
	if ((b->flags & TBF_ADD_BOS) && b->bos < 0)
		return ds_errf(err, "add_bos_token without a bos_token");
	if ((b->flags & TBF_ADD_EOS) && b->eos < 0)
		return ds_errf(err, "add_eos_token without an eos_token");
	if (b->eot < 0)
		b->eot = b->eos;
	return 0;
}

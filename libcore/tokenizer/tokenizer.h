/*
 * tokenizer.h - text <-> token ids, exactly as the model's own tokenizer.
 *
 * Formats read: Hugging Face tokenizer.json with a BPE model (byte-level as
 * DeepSeek V2/V3/R1, DeepSeek LLM/Coder, Llama-3 and Qwen2 ship it, or
 * SentencePiece-style with byte fallback), SentencePiece .model files (BPE
 * and Unigram), and ds's own compiled tokenizer.bin (ds-tok(1) FILES).
 * Whatever the source, the tokenizer runs on the tokenizer.bin layout:
 * a .json or .model is compiled into that image in memory first.
 *
 * A loaded ds_tok is immutable: any number of threads may encode and decode
 * with one at the same time.  Per-call scratch lives in the call; the
 * streaming decoder's state lives in a caller-owned ds_tok_stream.
 */
#ifndef DS_TOKENIZER_H
#define DS_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

typedef struct ds_tok ds_tok;

/* A growable array of token ids, owned by the caller.  Zero-initialize;
 * encode appends; ds_tok_ids_free releases. */
typedef struct ds_tok_ids {
	int32_t *v;
	size_t n, cap;
} ds_tok_ids;

/* A growable byte string, owned by the caller (NUL-terminated when s is
 * not NULL).  Zero-initialize; decode appends; ds_tok_text_free releases. */
typedef struct ds_tok_text {
	char *s;
	size_t n, cap;
} ds_tok_text;

void ds_tok_ids_free(ds_tok_ids *ids);
void ds_tok_text_free(ds_tok_text *t);

/* ---- loading -------------------------------------------------------------- */

/* Load a tokenizer from `path`: a tokenizer.bin (mapped and used in place,
 * validated: magic, version, bounds, counts), a tokenizer.json or a
 * SentencePiece .model (compiled in memory).  For a .json or .model the
 * tokenizer_config.json beside it, if any, supplies add_bos_token, the
 * bos/eos tokens and the chat template. */
int ds_tok_load(ds_tok **out, const char *path, ds_err *err);
void ds_tok_free(ds_tok *tok);

/* Compile a tokenizer.json or .model (plus an optional tokenizer_config.json,
 * `config` may be NULL) into a tokenizer.bin image: *out is malloc'd,
 * *len its size.  ds_tok_compile_file writes it to `dst` (via a temporary
 * file renamed into place). */
int ds_tok_compile(const char *src, const char *config, uint8_t **out,
		   size_t *len, ds_err *err);
int ds_tok_compile_file(const char *src, const char *config, const char *dst,
			ds_err *err);

/* ---- conversion (ds-convert) ------------------------------------------------ */

struct json_t;

/* Compile the checkpoint's tokenizer (src/tokenizer.json, else
 * src/tokenizer.model, with src/tokenizer_config.json if present) into
 * dst/tokenizer.bin and set the "tokenizer" and "chat_template" keys of
 * meta (ds-model(5)); chat_template is left out when not recognized.
 * The checkpoint's template itself goes into "chat_template_jinja"
 * (chat/template.h ds_chat_tpl_extract). */
int ds_tok_convert(const char *src, const char *dst, struct json_t *meta,
		   ds_err *err);
/* Just the meta keys, for a loaded tokenizer; source names its file. */
int ds_tok_meta(const ds_tok *tok, const char *source, struct json_t *meta,
		ds_err *err);

/* ---- encoding -------------------------------------------------------------- */

enum {
	DS_TOK_BOS = 1 << 0,        /* prepend BOS even if the config says not */
	DS_TOK_NO_BOS = 1 << 1,     /* never prepend BOS */
	DS_TOK_NO_SPECIAL = 1 << 2, /* encode: special tokens' text is plain
				       text; decode: drop special tokens */
	DS_TOK_NO_EOS = 1 << 3,     /* never append EOS (with DS_TOK_NO_BOS:
				       Hugging Face's add_special_tokens=False) */
};

/* Append the ids of text[0..len) to *out.  BOS (and EOS) as the tokenizer's
 * config says, unless flags override.  Special-token strings in the text
 * match as added tokens, as Hugging Face does, unless DS_TOK_NO_SPECIAL.
 * Invalid UTF-8 never fails: see ds-tok(1) for what each model does. */
int ds_tok_encode(const ds_tok *tok, const char *text, size_t len,
		  unsigned flags, ds_tok_ids *out, ds_err *err);

/* ---- decoding -------------------------------------------------------------- */

/* Append the text of ids[0..n) to *out, as the reference decoder does
 * (byte-level pieces joined into UTF-8, invalid sequences as U+FFFD;
 * SentencePiece's U+2581 as a space and its dummy prefix dropped).
 * An id outside the vocabulary fails naming it and its position. */
int ds_tok_decode(const ds_tok *tok, const int32_t *ids, size_t n,
		  unsigned flags, ds_tok_text *out, ds_err *err);

/* Incremental decoding for streaming: push ids one at a time; text is
 * appended to *out only once it is final, so a multi-byte UTF-8 sequence is
 * never cut.  The concatenation of everything appended (after
 * ds_tok_stream_finish) equals ds_tok_decode of all the ids pushed. */
typedef struct ds_tok_stream {
	const ds_tok *tok;
	unsigned flags;
	int started;         /* some text (or a leading space) was produced */
	int in_bytes;        /* pending[] holds a run of byte-fallback tokens */
	size_t npend;        /* bytes held back in pending[] */
	uint8_t pending[64];
} ds_tok_stream;

void ds_tok_stream_init(ds_tok_stream *st, const ds_tok *tok, unsigned flags);
int ds_tok_stream_push(ds_tok_stream *st, int32_t id, ds_tok_text *out,
		       ds_err *err);
int ds_tok_stream_finish(ds_tok_stream *st, ds_tok_text *out, ds_err *err);

/* The bytes token id adds in the middle of a text (out is replaced): as
 * decoding writes them after other text (no leading space dropped), a
 * byte token as its byte, nothing for special, control, unknown and
 * unused tokens.  What a grammar's token mask matches (grammar.h). */
int ds_tok_token_bytes(const ds_tok *tok, int32_t id, ds_tok_text *out,
		       ds_err *err);

/* ---- the token stream ---------------------------------------------------- */

/* One line of ds-tok's output and ds-run's input (ds-tok(1)): decimal ids
 * separated by blanks (space, tab, CR), line[0..len) without its '\n'.
 * *out is emptied, then gets the ids, each below `limit` (the vocabulary
 * size; UINT32_MAX leaves that check to the decoder).  Any other byte, a
 * sign, a NUL or a number past INT32_MAX is an error quoting the word:
 * "\"x2\" is not a token id", "token id 99999 is not below the
 * vocabulary size 384". */
int ds_tok_ids_parse(const char *line, size_t len, uint32_t limit,
		     ds_tok_ids *out, ds_err *err);

/* ---- vocabulary ------------------------------------------------------------ */

/* The id of a token given as written in the tokenizer file (an added
 * token's content such as "<｜User｜>", or a model piece such as "Ġthe"
 * or "▁the"); -1 if there is none. */
int32_t ds_tok_piece_id(const ds_tok *tok, const char *s, size_t len);
/* The token's string as written in the file (not NUL-terminated);
 * NULL for an id outside the vocabulary. */
const char *ds_tok_piece(const ds_tok *tok, int32_t id, size_t *len);
int ds_tok_is_special(const ds_tok *tok, int32_t id);

/* Settings, as compiled from the tokenizer and its config. */
typedef struct ds_tok_info {
	const char *type;      /* "bpe-bytelevel", "bpe", "sp-bpe", "sp-unigram" */
	const char *chat_template; /* a chat.h name: "deepseek2",
				      "deepseek3", "deepseek-r1", "llama3",
				      "chatml"; "" when not recognized */
	uint32_t n_vocab;      /* ids are 0 .. n_vocab-1 */
	int32_t bos, eos, eot, unk, pad; /* -1 when absent; eot ends a chat turn */
	int add_bos, add_eos;  /* what plain encodes add */
} ds_tok_info;

void ds_tok_get_info(const ds_tok *tok, ds_tok_info *info);
uint32_t ds_tok_n_vocab(const ds_tok *tok);
int32_t ds_tok_bos(const ds_tok *tok);
int32_t ds_tok_eos(const ds_tok *tok);
int32_t ds_tok_eot(const ds_tok *tok);

/* The Unicode version of the pre-tokenizer's character classes. */
const char *ds_tok_unicode_version(void);

#endif

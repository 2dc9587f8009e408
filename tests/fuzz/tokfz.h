/*
 * tokfz.h - what the tokenizer targets do with a tokenizer they could
 * load: encode texts (ASCII, multi-byte UTF-8, invalid UTF-8, special
 * tokens' text) under every flag, decode what came out at once and
 * streamed, decode ids of the whole vocabulary's range.
 *
 * Invariants (tokenizer.h): encoded ids are inside the vocabulary;
 * streaming decode gives exactly what ds_tok_decode gives.
 */
#ifndef DS_TOKFZ_H
#define DS_TOKFZ_H

#include "fuzz.h"
#include "tokenizer/tokenizer.h"

static const char *const tokfz_texts[] = {
	"Hello, world! 123 4567 the quick brown fox",
	"  leading spaces\tand\ttabs\r\nnew lines\n\n",
	"caf\xc3\xa9 na\xc3\xafve \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 "
	"\xe2\x96\x81piece",
	"bad \xff\xfe utf-8 \xc3 \xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80 end\xc3",
	"<s></s><unk><|begin_of_text|><\xef\xbd\x9c" "User\xef\xbd\x9c>"
	"<think>x</think><|im_start|>user",
	"",
};

/* Decode ids[0..n) at once and streamed; both must agree when both
 * succeed. */
static inline void tokfz_decode(const ds_tok *tok, const int32_t *ids, size_t n,
			 unsigned flags)
{
	ds_tok_text all = { 0 }, st = { 0 };
	ds_tok_stream s;
	ds_err err;
	int ok_all, ok_st = 1;
	size_t i;

	ok_all = ds_tok_decode(tok, ids, n, flags, &all, &err) == 0;
	ds_tok_stream_init(&s, tok, flags);
	for (i = 0; i < n && ok_st; i++)
		ok_st = ds_tok_stream_push(&s, ids[i], &st, &err) == 0;
	if (ok_st)
		ok_st = ds_tok_stream_finish(&s, &st, &err) == 0;
	if (ok_all && ok_st)
		FZ_CHECK(all.n == st.n && (all.n == 0 ||
					   memcmp(all.s, st.s, all.n) == 0));
	ds_tok_text_free(&all);
	ds_tok_text_free(&st);
}

static inline void tokfz_encode(const ds_tok *tok, const char *text, size_t len)
{
	static const unsigned flags[] = { 0, DS_TOK_BOS, DS_TOK_NO_BOS,
					  DS_TOK_NO_SPECIAL };
	uint32_t nv = ds_tok_n_vocab(tok);
	size_t f, i;

	for (f = 0; f < sizeof flags / sizeof *flags; f++) {
		ds_tok_ids ids = { 0 };
		ds_err err;

		if (ds_tok_encode(tok, text, len, flags[f], &ids, &err) == 0) {
			for (i = 0; i < ids.n; i++)
				FZ_CHECK(ids.v[i] >= 0 && (uint32_t)ids.v[i] < nv);
			tokfz_decode(tok, ids.v, ids.n, 0);
			tokfz_decode(tok, ids.v, ids.n, DS_TOK_NO_SPECIAL);
		}
		ds_tok_ids_free(&ids);
	}
}

/* Everything above on a loaded tokenizer.  `compiled`: the image was
 * built by ds itself (from a .json or .model), so its tables agree with
 * each other and every piece is found by its string. */
static inline void tokfz_exercise(const ds_tok *tok, int compiled)
{
	ds_tok_info info;
	uint32_t nv = ds_tok_n_vocab(tok), step;
	int32_t ids[64];
	size_t i, n = 0, len;

	ds_tok_get_info(tok, &info);
	FZ_CHECK(info.n_vocab == nv && nv > 0);
	for (i = 0; i < sizeof tokfz_texts / sizeof *tokfz_texts; i++)
		tokfz_encode(tok, tokfz_texts[i], strlen(tokfz_texts[i]));
	/* ids spread over the vocabulary, its ends, and a few outside */
	step = nv / 48 + 1;
	for (uint32_t id = 0; id < nv && n < 56; id += step)
		ids[n++] = (int32_t)id;
	ids[n++] = (int32_t)nv - 1;
	ids[n++] = info.bos;
	ids[n++] = info.eos;
	for (i = 0; i < n; i++) {
		const char *p = ds_tok_piece(tok, ids[i], &len);

		if (p != NULL) {
			FZ_CHECK(!compiled || ds_tok_piece_id(tok, p, len) >= 0);
			(void)fz_touch(p, len);
		}
		(void)ds_tok_is_special(tok, ids[i]);
	}
	tokfz_decode(tok, ids, n, 0);
	tokfz_decode(tok, ids, n, DS_TOK_NO_SPECIAL);
	ids[0] = (int32_t)nv;
	ids[1] = -1;
	tokfz_decode(tok, ids, 2, 0);
}

#endif

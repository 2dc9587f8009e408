/* encode.c - the encode pipeline.
 *
 * Hugging Face (tokenizer/mod.rs encode_single_sequence): added tokens that
 * are not normalized are matched on the raw text; the rest is normalized;
 * normalized added tokens are matched on that; the pre-tokenizer splits
 * what is left and the model encodes each piece.  Matching is
 * leftmost-longest (the Aho-Corasick automaton of added_vocabulary.rs),
 * with single_word, lstrip and rstrip applied to each match.
 * SentencePiece: normalize the whole text, then the model.
 *
 * Invalid UTF-8 (HF models only; SentencePiece's normalizer turns each bad
 * byte into U+FFFD itself): each invalid byte is kept apart from the text
 * around it and becomes its byte token (byte-level), its <0xHH> token (byte
 * fallback) or unk; with none of these it is dropped, as HF drops chars it
 * cannot encode. */
#include <stdlib.h>
#include <string.h>

#include "tok_int.h"
#include "tok_work.h"
#include "unitab.h"

#define MARK_BYTE(b) (-2 - (int32_t)(b)) /* span id of an invalid byte */

struct enc {
	const ds_tok *t;
	unsigned flags;
	tb_buf wb;                /* normalized text the spans point into */
	struct tk_spans a, b;
	pcre2_match_data *md;
	struct tk_work *w;
	ds_err *err;
};

static int oom(ds_err *err)
{
	return ds_errf(err, "out of memory");
}

/* ---- added tokens ------------------------------------------------------------ */

/* single_word's \w: that of Rust's regex crate, which added_vocabulary.rs
 * uses (Alphabetic, M, Nd, Pc, Join_Control): letters, marks, decimal and
 * letter numbers, connectors, ZWNJ/ZWJ, and the symbols that are
 * Other_Alphabetic (circled and squared letters).  Not Oniguruma's \w,
 * which also holds superscript digits and vulgar fractions. */
static int is_word(uint32_t cp)
{
	static const uint32_t other_alpha_so[][2] = {
		{ 0x24b6, 0x24e9 }, { 0x1f130, 0x1f149 }, { 0x1f150, 0x1f169 },
		{ 0x1f170, 0x1f189 },
	};
	const char *n = ds_uni_cat_names[ds_uni_cat(cp)];

	if (n[0] == 'L' || n[0] == 'M' || (n[0] == 'N' && (n[1] == 'd' || n[1] == 'l')) ||
	    (n[0] == 'P' && n[1] == 'c') || cp == 0x200c || cp == 0x200d)
		return 1;
	for (size_t i = 0; i < sizeof other_alpha_so / sizeof other_alpha_so[0]; i++)
		if (cp >= other_alpha_so[i][0] && cp <= other_alpha_so[i][1])
			return 1;
	return 0;
}

/* The code point ending at s[n) (n > 0). */
static uint32_t last_cp(const uint8_t *s, size_t n)
{
	size_t j = n - 1;
	uint32_t cp = 0xfffd;

	while (j > 0 && (s[j] & 0xc0) == 0x80 && n - j < 4)
		j--;
	tk_utf8_len(s + j, n - j, &cp);
	return cp;
}

/* Split s[0..n) (at offset base of the buffer) on added tokens of one
 * class, appending spans to out. */
static int split_added(struct enc *e, const uint8_t *s, size_t n, size_t base,
		       int norm, uint32_t first, struct tk_spans *out)
{
	const ds_tok *t = e->t;
	const uint8_t *bm = norm ? t->first_norm : t->first_raw;
	size_t done = 0, i = 0;

	while (i < n) {
		int32_t id = -1;
		size_t m, st, en;
		uint32_t attr;

		if (!(bm[s[i] >> 3] >> (s[i] & 7) & 1) ||
		    (m = tk_added_match(t, s + i, n - i, TA_NORMALIZED, norm,
					  &id)) == 0) {
			i++;
			continue;
		}
		attr = t->tok[id].attr;
		st = i;
		en = i + m;
		i = en; /* matches never overlap: go on after this one */
		if ((e->flags & DS_TOK_NO_SPECIAL) && (attr & TA_SPECIAL))
			continue;
		if ((attr & TA_SINGLE_WORD) &&
		    ((st > 0 && is_word(last_cp(s, st))) ||
		     (en < n && is_word(({ uint32_t c = 0xfffd;
					  tk_utf8_len(s + en, n - en, &c); c; })))))
			continue;
		if (attr & TA_LSTRIP)
			while (st > done && tk_is_space(last_cp(s, st))) {
				size_t j = st - 1;

				while (j > done && (s[j] & 0xc0) == 0x80)
					j--;
				st = j;
			}
		if (attr & TA_RSTRIP)
			for (;;) {
				uint32_t cp;
				size_t l = tk_utf8_len(s + en, n - en, &cp);

				if (l == 0 || !tk_is_space(cp))
					break;
				en += l;
			}
		if (st > done && tk_spans_push(out, base + done, st - done, -1,
					       first && done == 0))
			return oom(e->err);
		if (tk_spans_push(out, base + st, en - st, id, 0))
			return oom(e->err);
		done = en;
		i = i > en ? i : en;
	}
	if (done < n && tk_spans_push(out, base + done, n - done, -1,
				      first && done == 0))
		return oom(e->err);
	return 0;
}

/* ---- the Hugging Face pipeline --------------------------------------------------- */

/* Raw text -> spans over e->wb: valid UTF-8 runs (split on non-normalized
 * added tokens), invalid bytes as marks. */
static int stage_raw(struct enc *e, const uint8_t *s, size_t n)
{
	size_t i = 0, run = 0;

	if (tb_buf_put(&e->wb, s, n))
		return oom(e->err);
	while (i <= n) {
		uint32_t cp;
		size_t l = i < n ? tk_utf8_len(s + i, n - i, &cp) : 0;

		if (i < n && l > 0) {
			i += l;
			continue;
		}
		if (i > run && split_added(e, s + run, i - run, run, 0, run == 0,
					   &e->a))
			return -1;
		if (i == n)
			break;
		if (tk_spans_push(&e->a, i, 1, MARK_BYTE(s[i]), 0))
			return oom(e->err);
		run = ++i;
	}
	return 0;
}

/* Normalize each text span (appending to wb), then split the normalized
 * text on normalized added tokens; e->a -> e->b -> e->a. */
static int stage_norm(struct enc *e)
{
	const ds_tok *t = e->t;

	if (t->n_norm == 0 && !t->has_norm_added)
		return 0;
	e->b.n = 0;
	for (size_t i = 0; i < e->a.n; i++) {
		struct tk_span sp = e->a.v[i];
		size_t at = e->wb.n;

		if (sp.id != -1) {
			if (tk_spans_push(&e->b, sp.off, sp.len, sp.id, 0))
				return oom(e->err);
			continue;
		}
		if (t->n_norm > 0) {
			/* wb may move while it grows: normalize a copy */
			tb_buf src = { 0 };

			if (tb_buf_put(&src, e->wb.p + sp.off, sp.len)) {
				tb_buf_free(&src);
				return oom(e->err);
			}
			if (tk_normalize_hf(t, src.p, src.n, &e->wb, e->md, e->err)) {
				tb_buf_free(&src);
				return -1;
			}
			tb_buf_free(&src);
			sp.off = at;
			sp.len = e->wb.n - at;
		}
		if (t->has_norm_added) {
			if (split_added(e, e->wb.p + sp.off, sp.len, sp.off, 1,
					sp.first, &e->b))
				return -1;
		} else if (sp.len > 0 &&
			   tk_spans_push(&e->b, sp.off, sp.len, -1, sp.first)) {
			return oom(e->err);
		}
	}
	{
		struct tk_spans x = e->a;

		e->a = e->b;
		e->b = x;
	}
	return 0;
}

static int stage_model(struct enc *e, ds_tok_ids *out)
{
	const ds_tok *t = e->t;

	for (size_t i = 0; i < e->a.n; i++) {
		const struct tk_span *sp = &e->a.v[i];

		if (sp->id >= 0) {
			if (tk_ids_push(out, sp->id, e->err))
				return -1;
		} else if (sp->id <= -2) {
			int32_t id = t->byte_ids[-2 - sp->id];

			if (id < 0 && !(t->h->flags & TBF_BYTE_LEVEL))
				id = t->h->unk;
			if (id >= 0 && tk_ids_push(out, id, e->err))
				return -1;
		} else if (tk_bpe_hf(t, e->wb.p + sp->off, sp->len, out, e->w,
				     e->err)) {
			return -1;
		}
	}
	return 0;
}

static int encode_hf(struct enc *e, const uint8_t *s, size_t n, ds_tok_ids *out)
{
	if (stage_raw(e, s, n) || stage_norm(e))
		return -1;
	if (e->t->n_pretok > 0 &&
	    tk_pretokenize(e->t, &e->wb, &e->a, &e->b, e->md, e->err))
		return -1;
	return stage_model(e, out);
}

static int encode_sp_run(struct enc *e, const uint8_t *s, size_t n,
			 ds_tok_ids *out)
{
	e->wb.n = 0;
	if (tk_normalize_sp(e->t, s, n, &e->wb, e->err))
		return -1;
	if (e->t->h->model == TB_SP_UNIGRAM)
		return tk_unigram(e->t, e->wb.p, e->wb.n, out, e->w, e->err);
	return tk_bpe_sp(e->t, e->wb.p, e->wb.n, out, e->w, e->err);
}

/* SentencePiece as Hugging Face's (slow) tokenizers run it: the text is cut
 * at the special tokens SentencePiece itself would not match (the CONTROL
 * and UNKNOWN pieces tokenizer_config.json names), and each piece between
 * is encoded on its own. */
static int encode_sp(struct enc *e, const uint8_t *s, size_t n, ds_tok_ids *out)
{
	const ds_tok *t = e->t;
	size_t i = 0, run = 0, m;
	int32_t id = -1;

	if (e->flags & DS_TOK_NO_SPECIAL)
		return encode_sp_run(e, s, n, out);
	while (i < n) {
		if (!(t->first_raw[s[i] >> 3] >> (s[i] & 7) & 1) ||
		    (m = tk_added_match(t, s + i, n - i,
					  TA_CONTROL | TA_UNKNOWN, 1, &id)) == 0) {
			i++;
			continue;
		}
		if (i > run && encode_sp_run(e, s + run, i - run, out))
			return -1;
		if (tk_ids_push(out, id, e->err))
			return -1;
		run = i += m;
	}
	return n > run || run == 0 ? encode_sp_run(e, s + run, n - run, out) : 0;
}

int ds_tok_encode(const ds_tok *t, const char *text, size_t len,
		  unsigned flags, ds_tok_ids *out, ds_err *err)
{
	const struct tb_header *h = t->h;
	struct enc e = { .t = t, .flags = flags, .err = err };
	size_t n0 = out->n;
	int bos = (flags & DS_TOK_BOS) ||
		  (!(flags & DS_TOK_NO_BOS) && (h->flags & TBF_ADD_BOS));
	int rc = -1;

	if (bos && h->bos < 0)
		return ds_errf(err, "%s: the tokenizer has no BOS token", t->name);
	if (bos && tk_ids_push(out, h->bos, err))
		return -1;
	e.w = tk_work_new(err);
	e.md = pcre2_match_data_create(4, NULL);
	if (e.w == NULL || e.md == NULL) {
		oom(err);
		goto out;
	}
	rc = h->model == TB_HF_BPE ? encode_hf(&e, (const uint8_t *)text, len, out)
				   : encode_sp(&e, (const uint8_t *)text, len, out);
	if (rc == 0 && (h->flags & TBF_ADD_EOS) && h->eos >= 0 &&
	    !(flags & DS_TOK_NO_EOS))
		rc = tk_ids_push(out, h->eos, err);
out:
	if (rc != 0)
		out->n = n0;
	pcre2_match_data_free(e.md);
	tk_work_free(e.w);
	tb_buf_free(&e.wb);
	free(e.a.v);
	free(e.b.v);
	return rc;
}

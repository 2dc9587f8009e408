/* decode.c - ids back to text, as each reference decoder does, built on
 * the streaming decoder so that both agree by construction.
 *
 * Byte-level (HF ByteLevel decoder): every token's bytes are concatenated
 * and decoded as UTF-8 lossily (String::from_utf8_lossy: each maximal
 * invalid subpart becomes one U+FFFD).  An added token whose characters are
 * all in the byte map is un-mapped like any piece; otherwise its UTF-8 is
 * used as it is.  An added token decodes from its content as written,
 * also when it is matched in its normalized form (tokenizers 0.22).
 * HF byte fallback (Replace U+2581 -> ' ', ByteFallback, Fuse, Strip):
 * a run of <0xHH> tokens becomes its bytes if they are valid UTF-8, else
 * one U+FFFD per byte; then one leading space of the whole text goes.
 * SentencePiece (sentencepiece_processor.cc Decode): CONTROL -> nothing,
 * unk -> " \u2047 ", byte-piece runs decoded char by char with U+FFFD per
 * invalid byte, U+2581 -> ' ', and the dummy prefix's space dropped from
 * the first piece (from every leading piece while the text is still empty
 * when remove_extra_whitespaces is set). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "tok_int.h"

#define U_FFFD "\xef\xbf\xbd"

static int emit(ds_tok_text *o, const void *p, size_t n, ds_err *err)
{
	if (o->n + n + 1 > o->cap) {
		size_t cap = o->cap ? o->cap : 256;
		char *s;

		while (cap < o->n + n + 1)
			cap *= 2;
		s = realloc(o->s, cap);
		if (s == NULL)
			return ds_errf(err, "out of memory");
		o->s = s;
		o->cap = cap;
	}
	memcpy(o->s + o->n, p, n);
	o->n += n;
	o->s[o->n] = '\0';
	return 0;
}

void ds_tok_text_free(ds_tok_text *t)
{
	free(t->s);
	memset(t, 0, sizeof *t);
}

void ds_tok_ids_free(ds_tok_ids *ids)
{
	free(ids->v);
	memset(ids, 0, sizeof *ids);
}

/* Could s[0..n) (n < 4) still grow into a valid UTF-8 sequence? */
static int utf8_prefix(const uint8_t *s, size_t n)
{
	uint8_t c = s[0], lo = 0x80, hi = 0xbf;
	size_t need;

	if (c >= 0xc2 && c <= 0xdf)
		need = 2;
	else if (c >= 0xe0 && c <= 0xef)
		need = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		need = 4;
	else
		return 0;
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (n >= need)
		return 0;
	if (n >= 2 && (s[1] < lo || s[1] > hi))
		return 0;
	for (size_t i = 2; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return 1;
}

/* Decode st->pending lossily; keep an incomplete tail unless final.
 * per_byte: SentencePiece's rule (U+FFFD per invalid byte) instead of
 * one per maximal invalid subpart. */
static int flush_utf8(ds_tok_stream *st, ds_tok_text *o, int final, int per_byte,
		      ds_err *err)
{
	size_t i = 0, n = st->npend;
	const uint8_t *p = st->pending;

	while (i < n) {
		uint32_t cp;
		size_t l = tk_utf8_len(p + i, n - i, &cp);

		if (l > 0) {
			if (emit(o, p + i, l, err))
				return -1;
			i += l;
			continue;
		}
		if (!final && utf8_prefix(p + i, n - i))
			break;
		/* maximal invalid subpart: the longest valid prefix, min 1 */
		l = 1;
		if (!per_byte)
			while (i + l < n && l < 4 && utf8_prefix(p + i, l + 1))
				l++;
		if (emit(o, U_FFFD, 3, err))
			return -1;
		i += l;
	}
	memmove(st->pending, p + i, n - i);
	st->npend = n - i;
	if (st->npend == 0)
		st->in_bytes = 0;
	return 0;
}

/* HF ByteFallback: the whole run is valid UTF-8, or all U+FFFD. */
static int flush_run_all(ds_tok_stream *st, ds_tok_text *o, ds_err *err)
{
	size_t i = 0, n = st->npend;

	while (i < n) {
		uint32_t cp;
		size_t l = tk_utf8_len(st->pending + i, n - i, &cp);

		if (l == 0)
			break;
		i += l;
	}
	if (i == n) {
		if (emit(o, st->pending, n, err))
			return -1;
	} else {
		for (i = 0; i < n; i++)
			if (emit(o, U_FFFD, 3, err))
				return -1;
	}
	st->npend = 0;
	st->in_bytes = 0;
	return 0;
}

/* Text with U+2581 as spaces, the first space dropped if asked. */
static int emit_meta(ds_tok_stream *st, const uint8_t *s, size_t n,
		     int drop_lead, ds_tok_text *o, ds_err *err)
{
	size_t i = 0;

	if (drop_lead && n >= 3 && memcmp(s, "\xe2\x96\x81", 3) == 0)
		i = 3;
	else if (drop_lead && n >= 1 && s[0] == ' ')
		i = 1;
	while (i < n) {
		const uint8_t *q = memmem(s + i, n - i, "\xe2\x96\x81", 3);
		size_t e = q ? (size_t)(q - s) : n;

		if (emit(o, s + i, e - i, err))
			return -1;
		if (q == NULL)
			break;
		if (emit(o, " ", 1, err))
			return -1;
		i = e + 3;
	}
	(void)st;
	return 0;
}

void ds_tok_stream_init(ds_tok_stream *st, const ds_tok *tok, unsigned flags)
{
	memset(st, 0, sizeof *st);
	st->tok = tok;
	st->flags = flags;
}

static int push_pending(ds_tok_stream *st, const uint8_t *s, size_t n,
			ds_tok_text *o, ds_err *err)
{
	for (size_t i = 0; i < n; i++) {
		if (st->npend == sizeof st->pending) {
			/* a run this long holds no char still open: the HF
			 * all-or-nothing rule is approximated here */
			if (flush_utf8(st, o, 0, 0, err))
				return -1;
			if (st->npend == sizeof st->pending &&
			    flush_utf8(st, o, 1, 0, err))
				return -1;
		}
		st->pending[st->npend++] = s[i];
	}
	return 0;
}

/* A byte-level added token's content un-mapped into buf[256] when every
 * char is in the byte map: 1 with *m bytes, else 0. */
static int unmap_added(const uint8_t *s, size_t n, uint8_t *buf, size_t *m)
{
	size_t i = 0;
	int ok = 1;

	*m = 0;
	while (i < n && ok) {
		uint32_t cp;
		size_t l = tk_utf8_len(s + i, n - i, &cp);
		int b = -1;

		if (l == 0)
			break;
		if ((cp >= 0x21 && cp <= 0x7e) || (cp >= 0xa1 && cp <= 0xac) ||
		    (cp >= 0xae && cp <= 0xff))
			b = (int)cp;
		else if (cp >= 0x100 && cp < 0x144) {
			/* U+0100 + k is the k-th byte outside the ranges */
			uint32_t k = cp - 0x100, c;

			for (c = 0; c < 256; c++) {
				int keep = (c >= 0x21 && c <= 0x7e) ||
					   (c >= 0xa1 && c <= 0xac) || c >= 0xae;

				if (!keep && k-- == 0)
					break;
			}
			b = (int)c;
		}
		if (b < 0 || *m == 256)
			ok = 0;
		else
			buf[(*m)++] = (uint8_t)b;
		i += l;
	}
	return ok && i == n;
}

/* Byte-level: a token's bytes. */
static int push_bytelevel(ds_tok_stream *st, int32_t id, ds_tok_text *o,
			  ds_err *err)
{
	const ds_tok *t = st->tok;
	const struct tb_token *e = &t->tok[id];
	size_t n, m;
	const uint8_t *s;
	uint8_t buf[256];

	if (e->attr & TA_ADDED) {
		s = tb_piece(t, id, &n); /* the content, even if normalized */
		if (unmap_added(s, n, buf, &m))
			return push_pending(st, buf, m, o, err) ||
			       flush_utf8(st, o, 0, 0, err);
	} else {
		s = tb_text(t, id, &n);
	}
	return push_pending(st, s, n, o, err) || flush_utf8(st, o, 0, 0, err);
}

static int push_hf(ds_tok_stream *st, int32_t id, ds_tok_text *o, ds_err *err)
{
	const ds_tok *t = st->tok;
	const struct tb_token *e = &t->tok[id];
	uint32_t f = t->h->flags;
	size_t n;
	const uint8_t *s;
	tb_buf tmp = { 0 };
	int rc, drop;

	if ((e->attr & TA_BYTE) && (f & TBF_DEC_BYTES_ALL)) {
		uint8_t b = (uint8_t)(e->attr >> 24);

		st->in_bytes = 1;
		return push_pending(st, &b, 1, o, err);
	}
	if (st->in_bytes && flush_run_all(st, o, err))
		return -1;
	/* an added token decodes to its content, normalized or not */
	s = (e->attr & TA_ADDED) ? tb_piece(t, id, &n) : tb_text(t, id, &n);
	if (!(f & TBF_DEC_META))
		return emit(o, s, n, err);
	drop = (f & TBF_DEC_STRIP1) && !st->started;
	if (drop && n == 0)
		return 0; /* the strip waits for the first char */
	st->started = 1;
	rc = emit_meta(st, s, n, drop, o, err);
	tb_buf_free(&tmp);
	return rc;
}

static int push_sp(ds_tok_stream *st, int32_t id, ds_tok_text *o, ds_err *err)
{
	const ds_tok *t = st->tok;
	const struct tb_token *e = &t->tok[id];
	uint32_t f = t->h->flags;
	size_t n, before;
	const uint8_t *s;
	int bos_ws;

	if (e->attr & TA_BYTE) {
		uint8_t b = (uint8_t)(e->attr >> 24);

		st->in_bytes = 1;
		before = o->n;
		if (push_pending(st, &b, 1, o, err) || flush_utf8(st, o, 0, 1, err))
			return -1;
		st->started |= o->n > before;
		return 0;
	}
	if (st->in_bytes) {
		before = o->n;
		if (flush_utf8(st, o, 1, 1, err))
			return -1;
		st->started |= o->n > before;
	}
	/* is_bos_ws: still at the start (no text yet, no space eaten) */
	bos_ws = !st->started && !st->in_bytes;
	if (e->attr & TA_CONTROL)
		return 0;
	if (e->attr & TA_UNKNOWN) {
		st->started = 1;
		return emit(o, " \xe2\x81\x87 ", 5, err);
	}
	s = tb_piece(t, id, &n);
	before = o->n;
	if (bos_ws && (f & (TBF_SP_DUMMY_PREFIX | TBF_SP_REMOVE_WS)) && n >= 3 &&
	    memcmp(s, "\xe2\x96\x81", 3) == 0) {
		s += 3;
		n -= 3;
		/* without remove_extra_whitespaces only one space is eaten */
		if (!(f & TBF_SP_REMOVE_WS))
			st->started = 1;
	}
	if (emit_meta(st, s, n, 0, o, err))
		return -1;
	st->started |= o->n > before;
	return 0;
}

int ds_tok_stream_push(ds_tok_stream *st, int32_t id, ds_tok_text *out,
		       ds_err *err)
{
	const ds_tok *t = st->tok;
	const struct tb_token *e;

	if (id < 0 || (uint32_t)id >= t->h->n_vocab)
		return ds_errf(err, "token %d is outside the vocabulary (0..%u)",
			       id, t->h->n_vocab - 1);
	e = &t->tok[id];
	if ((uint64_t)e->piece_off + e->piece_len > t->pool_len ||
	    (uint64_t)e->text_off + e->text_len > t->pool_len)
		return ds_errf(err, "%s: token %d: string outside the pool",
			       t->name, id);
	if (e->piece_len == 0 && e->attr == 0)
		return ds_errf(err, "token %d is not in the vocabulary", id);
	if ((st->flags & DS_TOK_NO_SPECIAL) && (e->attr & TA_SPECIAL))
		return 0;
	if (t->h->flags & TBF_DEC_SP)
		return push_sp(st, id, out, err);
	if (t->h->flags & TBF_BYTE_LEVEL)
		return push_bytelevel(st, id, out, err);
	return push_hf(st, id, out, err);
}

int ds_tok_stream_finish(ds_tok_stream *st, ds_tok_text *out, ds_err *err)
{
	uint32_t f = st->tok->h->flags;

	if (st->npend == 0)
		return 0;
	if (f & TBF_DEC_SP)
		return flush_utf8(st, out, 1, 1, err);
	if (f & TBF_BYTE_LEVEL)
		return flush_utf8(st, out, 1, 0, err);
	return flush_run_all(st, out, err);
}

int ds_tok_decode(const ds_tok *t, const int32_t *ids, size_t n,
		  unsigned flags, ds_tok_text *out, ds_err *err)
{
	ds_tok_stream st;
	size_t n0 = out->n;

	ds_tok_stream_init(&st, t, flags);
	if (emit(out, "", 0, err))
		return -1;
	for (size_t i = 0; i < n; i++)
		if (ds_tok_stream_push(&st, ids[i], out, err) != 0) {
			ds_err_prefix(err, "position %zu", i + 1);
			out->n = n0;
			out->s[n0] = '\0';
			return -1;
		}
	if (ds_tok_stream_finish(&st, out, err) != 0) {
		out->n = n0;
		out->s[n0] = '\0';
		return -1;
	}
	return 0;
}

/* ---- a token's bytes (constrained decoding) ------------------------------- */

/* Text with U+2581 as spaces, appended to o. */
static int meta_bytes(const uint8_t *s, size_t n, ds_tok_text *o, ds_err *err)
{
	return emit_meta(NULL, s, n, 0, o, err);
}

int ds_tok_token_bytes(const ds_tok *t, int32_t id, ds_tok_text *out,
		       ds_err *err)
{
	const struct tb_token *e;
	uint32_t f = t->h->flags;
	uint8_t buf[256], b;
	size_t n, m;
	const uint8_t *s;

	out->n = 0;
	if (emit(out, "", 0, err))
		return -1;
	if (id < 0 || (uint32_t)id >= t->h->n_vocab)
		return ds_errf(err, "token %d is outside the vocabulary", id);
	e = &t->tok[id];
	if ((uint64_t)e->piece_off + e->piece_len > t->pool_len ||
	    (uint64_t)e->text_off + e->text_len > t->pool_len)
		return ds_errf(err, "%s: token %d: string outside the pool",
			       t->name, id);
	if (e->attr & (TA_SPECIAL | TA_CONTROL | TA_UNKNOWN | TA_UNUSED))
		return 0;
	b = (uint8_t)(e->attr >> 24);
	if ((e->attr & TA_BYTE) && ((f & TBF_DEC_SP) || (f & TBF_DEC_BYTES_ALL)))
		return emit(out, &b, 1, err);
	if (f & TBF_DEC_SP) {
		s = tb_piece(t, id, &n);
		return meta_bytes(s, n, out, err);
	}
	if (f & TBF_BYTE_LEVEL) {
		if (e->attr & TA_ADDED) {
			s = tb_piece(t, id, &n);
			if (unmap_added(s, n, buf, &m))
				return emit(out, buf, m, err);
			return emit(out, s, n, err);
		}
		s = tb_text(t, id, &n);
		return emit(out, s, n, err);
	}
	s = (e->attr & TA_ADDED) ? tb_piece(t, id, &n) : tb_text(t, id, &n);
	return (f & TBF_DEC_META) ? meta_bytes(s, n, out, err)
				  : emit(out, s, n, err);
}

/* bpe.c - the two BPE models.
 *
 * Hugging Face (models/bpe/word.rs merge_all): repeatedly merge the adjacent
 * pair with the lowest merge rank, the leftmost among equals.
 * SentencePiece (bpe_model.cc): repeatedly merge the adjacent pair whose
 * concatenation is the piece with the highest score, the leftmost among
 * equals; pieces of type UNUSED are split back into what they were made of.
 * Both keep a heap of candidate pairs and skip entries that went stale. */
#include <stdlib.h>
#include <string.h>

#include "tok_int.h"
#include "tok_work.h"

int tk_ids_push(ds_tok_ids *ids, int32_t id, ds_err *err)
{
	if (ids->n == ids->cap) {
		size_t cap = ids->cap ? ids->cap * 2 : 256;
		int32_t *v = realloc(ids->v, cap * sizeof *v);

		if (v == NULL)
			return ds_errf(err, "out of memory");
		ids->v = v;
		ids->cap = cap;
	}
	ids->v[ids->n++] = id;
	return 0;
}

struct tk_work *tk_work_new(ds_err *err)
{
	struct tk_work *w = calloc(1, sizeof *w);

	if (w == NULL)
		ds_errf(err, "out of memory");
	return w;
}

void tk_work_free(struct tk_work *w)
{
	if (w == NULL)
		return;
	free(w->sym);
	free(w->heap);
	free(w->node);
	free(w->rev);
	free(w);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	size_t c = *cap ? *cap : 64;
	void *q;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	q = realloc(*p, c * elem);
	if (q == NULL)
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

/* ---- heap of candidate pairs ------------------------------------------------ */

/* key: smaller is better.  HF: rank; SP: -score, as bits that order like
 * the float (scores compared as floats, then left position). */
static int better(const struct tk_cand *a, const struct tk_cand *b)
{
	if (a->key != b->key)
		return a->key < b->key;
	return a->pos < b->pos;
}

static int heap_push(struct tk_work *w, struct tk_cand c)
{
	size_t i;

	if (grow((void **)&w->heap, &w->heap_cap, w->nheap + 1, sizeof c))
		return -1;
	i = w->nheap++;
	while (i > 0) {
		size_t p = (i - 1) / 2;

		if (!better(&c, &w->heap[p]))
			break;
		w->heap[i] = w->heap[p];
		i = p;
	}
	w->heap[i] = c;
	return 0;
}

static struct tk_cand heap_pop(struct tk_work *w)
{
	struct tk_cand top = w->heap[0], last = w->heap[--w->nheap];
	size_t i = 0, n = w->nheap;

	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		const struct tk_cand *best = &last;

		if (l < n && better(&w->heap[l], best)) {
			m = l;
			best = &w->heap[l];
		}
		if (r < n && better(&w->heap[r], best))
			m = r;
		if (m == i)
			break;
		w->heap[i] = w->heap[m];
		i = m;
	}
	if (n > 0)
		w->heap[i] = last;
	return top;
}

/* ---- Hugging Face ---------------------------------------------------------------- */

static int sym_push(struct tk_work *w, int32_t id, uint32_t off, uint32_t len)
{
	if (grow((void **)&w->sym, &w->sym_cap, w->nsym + 1, sizeof *w->sym))
		return -1;
	w->sym[w->nsym] = (struct tk_sym){ id, (int32_t)w->nsym - 1,
					   (int32_t)w->nsym + 1, off, len, 0 };
	w->nsym++;
	return 0;
}

static int hf_pair(const ds_tok *t, struct tk_work *w, int32_t i)
{
	const struct tb_merge *m;
	int32_t j = w->sym[i].next;

	if (i < 0 || j >= (int32_t)w->nsym || j < 0)
		return 0;
	m = tb_merge_find(t, (uint32_t)w->sym[i].id, (uint32_t)w->sym[j].id);
	if (m == NULL)
		return 0;
	return heap_push(w, (struct tk_cand){ m->rank, (uint32_t)i, m->id });
}

/* Initial symbols of a non-byte-level word: one per char, else its byte
 * tokens (byte_fallback), else unk (fused), else dropped. */
static int hf_chars(const ds_tok *t, const uint8_t *s, size_t n,
		    struct tk_work *w)
{
	uint32_t f = t->h->flags;

	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t l = tk_utf8_len(s + i, n - i, &cp);
		int32_t id;

		l = l ? l : 1;
		id = tb_enc_lookup(t, s + i, l);
		if (id >= 0) {
			if (sym_push(w, id, (uint32_t)i, (uint32_t)l))
				return -1;
		} else {
			size_t k = 0;

			if (f & TBF_BYTE_FALLBACK)
				for (k = 0; k < l && t->byte_ids[s[i + k]] >= 0; k++)
					;
			if ((f & TBF_BYTE_FALLBACK) && k == l) {
				for (k = 0; k < l; k++)
					if (sym_push(w, t->byte_ids[s[i + k]],
						     (uint32_t)(i + k), 1))
						return -1;
			} else if (t->h->unk >= 0) {
				if ((f & TBF_FUSE_UNK) && w->nsym > 0 &&
				    w->sym[w->nsym - 1].id == t->h->unk)
					w->sym[w->nsym - 1].len += (uint32_t)l;
				else if (sym_push(w, t->h->unk, (uint32_t)i,
						  (uint32_t)l))
					return -1;
			}
		}
		i += l;
	}
	return 0;
}

int tk_bpe_hf(const ds_tok *t, const uint8_t *s, size_t n, ds_tok_ids *out,
	      struct tk_work *w, ds_err *err)
{
	uint32_t f = t->h->flags;

	if (f & TBF_IGNORE_MERGES) {
		int32_t id = tb_enc_lookup(t, s, n);

		if (id >= 0)
			return tk_ids_push(out, id, err);
	}
	w->nsym = 0;
	w->nheap = 0;
	if (f & TBF_BYTE_LEVEL) {
		for (size_t i = 0; i < n; i++)
			if (t->byte_ids[s[i]] >= 0 &&
			    sym_push(w, t->byte_ids[s[i]], (uint32_t)i, 1))
				return ds_errf(err, "out of memory");
	} else if (hf_chars(t, s, n, w)) {
		return ds_errf(err, "out of memory");
	}
	if (w->nsym == 0)
		return 0;
	w->sym[w->nsym - 1].next = -1;
	for (int32_t i = 0; i + 1 < (int32_t)w->nsym; i++)
		if (hf_pair(t, w, i))
			return ds_errf(err, "out of memory");
	while (w->nheap > 0) {
		struct tk_cand c = heap_pop(w);
		struct tk_sym *a = &w->sym[c.pos], *b;
		const struct tb_merge *m;

		if (a->len == 0 || a->next < 0)
			continue;
		b = &w->sym[a->next];
		m = tb_merge_find(t, (uint32_t)a->id, (uint32_t)b->id);
		if (m == NULL || m->id != c.id)
			continue; /* stale */
		a->id = (int32_t)c.id;
		a->len += b->len;
		b->len = 0;
		a->next = b->next;
		if (a->next >= 0)
			w->sym[a->next].prev = (int32_t)c.pos;
		if ((a->prev >= 0 && hf_pair(t, w, a->prev)) ||
		    hf_pair(t, w, (int32_t)c.pos))
			return ds_errf(err, "out of memory");
	}
	for (int32_t i = 0; i >= 0; i = w->sym[i].next)
		if (tk_ids_push(out, w->sym[i].id, err))
			return -1;
	return 0;
}

/* ---- SentencePiece ------------------------------------------------------------------ */

/* Order-preserving key for "higher score first": flip the float's bits so
 * that a larger float gives a smaller unsigned key. */
static uint64_t score_key(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* ascending order */
	return (uint64_t)(0xffffffffu - u);
}

static int sp_pair(const ds_tok *t, struct tk_work *w, const uint8_t *s,
		   int32_t l)
{
	int32_t r;
	struct tk_sym *a, *b;
	int32_t id;

	if (l < 0 || (r = w->sym[l].next) < 0)
		return 0;
	a = &w->sym[l];
	b = &w->sym[r];
	if (a->frozen || b->frozen)
		return 0;
	id = tb_enc_lookup(t, s + a->off, a->len + b->len);
	if (id < 0)
		return 0;
	if (t->tok[id].attr & TA_UNUSED) {
		struct tk_rev *rv;

		if (grow((void **)&w->rev, &w->rev_cap, w->nrev + 1, sizeof *rv))
			return -1;
		rv = &w->rev[w->nrev++];
		*rv = (struct tk_rev){ id, a->off, a->len, b->off, b->len };
	}
	return heap_push(w, (struct tk_cand){ score_key(t->tok[id].score),
					      (uint32_t)l, a->len + b->len });
}

/* The id SentencePiece's PieceToId gives a string: the piece, else unk. */
static int32_t sp_piece_id(const ds_tok *t, const uint8_t *s, size_t n)
{
	int32_t id = ds_tok_piece_id(t, (const char *)s, n);

	return id >= 0 ? id : t->h->unk;
}

/* The text is named by its bytes in hex: it may be anything. */
static int no_unk(const ds_tok *t, const uint8_t *s, size_t n, ds_err *err)
{
	char hex[3 * 8 + 4] = "";
	size_t i, k = 0;

	for (i = 0; i < n && i < 8; i++)
		k += (size_t)snprintf(hex + k, sizeof hex - k, "%s%02x",
				      i ? " " : "", s[i]);
	if (n > 8)
		snprintf(hex + k, sizeof hex - k, " ..");
	return ds_errf(err, "%s: no token for the text %s and no unknown "
		       "token to stand for it", t->name, hex);
}

/* Emit (piece, id) as SentencePiece's PopulateSentencePieceText does: an
 * unknown piece becomes its bytes' <0xHH> tokens (byte_fallback), or merges
 * with an unknown piece just before it. */
int tk_sp_emit(const ds_tok *t, const uint8_t *s, size_t n, int32_t id,
	       int *prev_unk, ds_tok_ids *out, ds_err *err)
{
	int unk = id >= 0 && (t->tok[id].attr & TA_UNKNOWN);

	if (id < 0) /* as Hugging Face's Unigram: an error, not a dropped piece */
		return no_unk(t, s, n, err);
	if (unk && (t->h->flags & TBF_BYTE_FALLBACK)) {
		for (size_t i = 0; i < n; i++) {
			int32_t b = t->byte_ids[s[i]];

			if (b < 0)
				b = t->h->unk;
			if (b < 0)
				return no_unk(t, s + i, 1, err);
			if (tk_ids_push(out, b, err))
				return -1;
		}
	} else if (!(unk && *prev_unk)) {
		if (tk_ids_push(out, id, err))
			return -1;
	}
	*prev_unk = unk;
	return 0;
}

static int sp_resegment(const ds_tok *t, struct tk_work *w, const uint8_t *s,
			uint32_t off, uint32_t len, int depth, int *prev_unk,
			ds_tok_ids *out, ds_err *err)
{
	int32_t id = sp_piece_id(t, s + off, len);

	if (id >= 0 && (t->tok[id].attr & TA_UNUSED) && depth < 64)
		for (size_t i = w->nrev; i-- > 0;) {
			const struct tk_rev *r = &w->rev[i];

			if (r->id != id)
				continue;
			/* the last split recorded for this piece (rev_merge) */
			return sp_resegment(t, w, s, r->loff, r->llen,
					    depth + 1, prev_unk, out, err) ||
			       sp_resegment(t, w, s, r->roff, r->rlen, depth + 1,
					    prev_unk, out, err);
		}
	return tk_sp_emit(t, s + off, len, id, prev_unk, out, err);
}

static int bpe_sp_run(const ds_tok *t, const uint8_t *s, size_t n,
		      int *prev_unk, ds_tok_ids *out, struct tk_work *w,
		      ds_err *err)
{
	w->nsym = 0;
	w->nheap = 0;
	w->nrev = 0;
	for (size_t i = 0; i < n;) {
		size_t m = tk_user_match(t, s + i, n - i);
		int frozen = m > 0;

		if (m == 0) {
			/* OneCharLen: by the lead byte */
			m = "\1\1\1\1\1\1\1\1\1\1\1\1\2\2\3\4"[s[i] >> 4];
			m = m > n - i ? n - i : m;
		}
		if (sym_push(w, -1, (uint32_t)i, (uint32_t)m))
			return ds_errf(err, "out of memory");
		w->sym[w->nsym - 1].frozen = (uint8_t)frozen;
		i += m;
	}
	if (w->nsym == 0)
		return 0;
	w->sym[w->nsym - 1].next = -1;
	for (int32_t i = 0; i + 1 < (int32_t)w->nsym; i++)
		if (sp_pair(t, w, s, i))
			return ds_errf(err, "out of memory");
	while (w->nheap > 0) {
		struct tk_cand c = heap_pop(w);
		struct tk_sym *a = &w->sym[c.pos], *b;

		if (a->len == 0 || a->next < 0)
			continue;
		b = &w->sym[a->next];
		if (b->len == 0 || a->len + b->len != c.id)
			continue; /* stale: SentencePiece checks the size */
		a->len += b->len;
		b->len = 0;
		a->next = b->next;
		if (a->next >= 0)
			w->sym[a->next].prev = (int32_t)c.pos;
		if (sp_pair(t, w, s, a->prev) || sp_pair(t, w, s, (int32_t)c.pos))
			return ds_errf(err, "out of memory");
	}
	for (int32_t i = 0; i >= 0; i = w->sym[i].next)
		if (sp_resegment(t, w, s, w->sym[i].off, w->sym[i].len, 0,
				 prev_unk, out, err))
			return -1;
	return 0;
}

int tk_bpe_sp(const ds_tok *t, const uint8_t *s, size_t n, ds_tok_ids *out,
	      struct tk_work *w, ds_err *err)
{
	int prev_unk = 0;
	size_t a = 0;

	if (!(t->h->flags & TBF_SP_WORDS))
		return bpe_sp_run(t, s, n, &prev_unk, out, w, err);
	/* the same merges as over the whole text, one word at a time: each
	 * word starts at a U+2581 */
	while (a < n) {
		size_t b = a + 1;

		while (b + 3 <= n && memcmp(s + b, "\xe2\x96\x81", 3) != 0)
			b++;
		if (b + 3 > n)
			b = n;
		if (bpe_sp_run(t, s + a, b - a, &prev_unk, out, w, err))
			return -1;
		a = b;
	}
	return 0;
}

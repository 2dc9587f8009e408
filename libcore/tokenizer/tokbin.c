/* tokbin.c - tokenizer.bin: the builder that lays out the image, the
 * validating opener, and the lookups over its tables (layout: tok_int.h). */
#include <stdlib.h>
#include <string.h>

#include "tok_int.h"

/* ---- small buffers ------------------------------------------------------- */

int tb_buf_reserve(tb_buf *b, size_t n)
{
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		uint8_t *q;

		while (cap < b->n + n)
			cap *= 2;
		q = realloc(b->p, cap);
		if (q == NULL)
			return -1;
		b->p = q;
		b->cap = cap;
	}
	return 0;
}

int tb_buf_put(tb_buf *b, const void *p, size_t n)
{
	if (tb_buf_reserve(b, n) != 0)
		return -1;
	if (n > 0)
		memcpy(b->p + b->n, p, n);
	b->n += n;
	return 0;
}

void tb_buf_free(tb_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof *b);
}

uint32_t tb_hash(const void *p, size_t n)
{
	const uint8_t *s = p;
	uint32_t h = 2166136261u; /* FNV-1a */

	for (size_t i = 0; i < n; i++)
		h = (h ^ s[i]) * 16777619u;
	return h;
}

static uint32_t pair_hash(uint32_t a, uint32_t b)
{
	uint64_t x = ((uint64_t)a << 32 | b) * 0x9E3779B97F4A7C15ull;

	return (uint32_t)(x >> 32) ^ (uint32_t)x;
}

/* ---- builder --------------------------------------------------------------- */

void tb_init(struct tb_builder *b)
{
	memset(b, 0, sizeof *b);
	b->bos = b->eos = b->eot = b->unk = b->pad = -1;
	for (int i = 0; i < 256; i++)
		b->byte_ids[i] = -1;
}

void tb_free(struct tb_builder *b)
{
	tb_buf_free(&b->pool);
	free(b->tok);
	free(b->merge_a);
	free(b->merge_b);
	free(b->merge_id);
	memset(b, 0, sizeof *b);
}

int64_t tb_str(struct tb_builder *b, const void *s, size_t n, ds_err *err)
{
	size_t off = b->pool.n;

	if (off + n > UINT32_MAX)
		return ds_errf(err, "string pool over 4 GiB");
	if (tb_buf_put(&b->pool, s, n) != 0)
		return ds_errf(err, "out of memory");
	return (int64_t)off;
}

int tb_set_vocab_size(struct tb_builder *b, uint32_t n, ds_err *err)
{
	struct tb_token *t;

	if (n > TB_MAX_VOCAB)
		return ds_errf(err, "vocabulary of %u tokens, more than %u", n,
			       TB_MAX_VOCAB);
	if (n <= b->n_tok)
		return 0;
	t = realloc(b->tok, (size_t)n * sizeof *t);
	if (t == NULL)
		return ds_errf(err, "out of memory");
	memset(t + b->n_tok, 0, (size_t)(n - b->n_tok) * sizeof *t);
	b->tok = t;
	b->n_tok = n;
	return 0;
}

int tb_add_merge(struct tb_builder *b, uint32_t a, uint32_t bb, uint32_t id,
		 ds_err *err)
{
	if (b->n_merge == b->cap_merge) {
		uint32_t cap = b->cap_merge ? b->cap_merge * 2 : 1024;
		uint32_t *x = realloc(b->merge_a, cap * sizeof *x);

		if (x != NULL)
			b->merge_a = x;
		x = x ? realloc(b->merge_b, cap * sizeof *x) : NULL;
		if (x != NULL)
			b->merge_b = x;
		x = x ? realloc(b->merge_id, cap * sizeof *x) : NULL;
		if (x == NULL)
			return ds_errf(err, "out of memory");
		b->merge_id = x;
		b->cap_merge = cap;
	}
	b->merge_a[b->n_merge] = a;
	b->merge_b[b->n_merge] = bb;
	b->merge_id[b->n_merge] = id;
	b->n_merge++;
	return 0;
}

static uint32_t slots_for(uint64_t n)
{
	uint32_t s = 16;

	while (s < 2 * n)
		s *= 2;
	return s;
}

/* A hash table of token ids keyed by piece (enc = 0) or by text (enc = 1). */
static uint32_t *build_token_hash(const struct tb_builder *b, int enc,
				  uint32_t *nslots)
{
	uint32_t n = 0, mask, *slots;

	for (uint32_t i = 0; i < b->n_tok; i++)
		n += !enc || (b->tok[i].attr & TA_ENC);
	*nslots = slots_for(n);
	mask = *nslots - 1;
	slots = calloc(*nslots, sizeof *slots);
	if (slots == NULL)
		return NULL;
	for (uint32_t i = 0; i < b->n_tok; i++) {
		const struct tb_token *t = &b->tok[i];
		uint32_t off = enc ? t->text_off : t->piece_off;
		uint32_t len = enc ? t->text_len : t->piece_len, h, dup = 0;

		if (enc && !(t->attr & TA_ENC))
			continue;
		h = tb_hash(b->pool.p + off, len) & mask;
		for (; slots[h] != 0; h = (h + 1) & mask) {
			const struct tb_token *o = &b->tok[slots[h] - 1];
			uint32_t ooff = enc ? o->text_off : o->piece_off;
			uint32_t olen = enc ? o->text_len : o->piece_len;

			if (olen == len && memcmp(b->pool.p + ooff,
						  b->pool.p + off, len) == 0) {
				dup = 1; /* the first id keeps the string */
				break;
			}
		}
		if (!dup)
			slots[h] = i + 1;
	}
	return slots;
}

static struct tb_merge *build_merges(const struct tb_builder *b,
				     uint32_t *nslots)
{
	struct tb_merge *m;
	uint32_t mask;

	*nslots = slots_for(b->n_merge);
	mask = *nslots - 1;
	m = malloc((size_t)*nslots * sizeof *m);
	if (m == NULL)
		return NULL;
	memset(m, 0xff, (size_t)*nslots * sizeof *m);
	for (uint32_t r = 0; r < b->n_merge; r++) {
		uint32_t h = pair_hash(b->merge_a[r], b->merge_b[r]) & mask;

		for (; m[h].a != UINT32_MAX; h = (h + 1) & mask)
			if (m[h].a == b->merge_a[r] && m[h].b == b->merge_b[r])
				break;
		if (m[h].a != UINT32_MAX)
			continue; /* a repeated merge keeps its first rank */
		m[h].a = b->merge_a[r];
		m[h].b = b->merge_b[r];
		m[h].rank = r;
		m[h].id = b->merge_id[r];
	}
	return m;
}

/* Tries: the keys are the texts of the tokens with attribute `want`.
 * First a tree (nodes in creation order, children found by a linear scan
 * of a per-node list), then laid out as a double array breadth first. */
struct tnode {
	int32_t id;
	uint32_t first, next; /* first child, next sibling (index + 1) */
	uint8_t byte;
};

struct trie_out {
	struct tb_da *da;
	uint32_t n; /* slots */
};

static int tree_add(struct tnode *nd, uint32_t *nn, const uint8_t *s,
		    uint32_t len, int32_t id)
{
	uint32_t cur = 0;

	for (uint32_t k = 0; k < len; k++) {
		uint32_t ch = nd[cur].first;

		while (ch != 0 && nd[ch - 1].byte != s[k])
			ch = nd[ch - 1].next;
		if (ch == 0) {
			nd[*nn] = (struct tnode){ -1, 0, nd[cur].first, s[k] };
			nd[cur].first = ++*nn;
			ch = *nn;
		}
		cur = ch - 1;
	}
	if (nd[cur].id < 0)
		nd[cur].id = id;
	return 0;
}

static int da_grow(struct trie_out *o, uint64_t need, uint64_t *cap)
{
	struct tb_da *d;
	uint64_t c = *cap ? *cap : 1024;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	if (c > UINT32_MAX / 2)
		return -1;
	d = realloc(o->da, c * sizeof *d);
	if (d == NULL)
		return -1;
	memset(d + *cap, 0, (c - *cap) * sizeof *d);
	o->da = d;
	*cap = c;
	return 0;
}

static int build_trie(const struct tb_builder *b, uint32_t want,
		      uint32_t skip, struct trie_out *o)
{
	uint64_t total = 1, cap = 0;
	struct tnode *nd;
	uint32_t nn = 1, *slot, *queue, qh = 0, qt = 0, free_from = 1;
	int rc = -1;

	memset(o, 0, sizeof *o);
	for (uint32_t i = 0; i < b->n_tok; i++)
		if ((b->tok[i].attr & want) && !(b->tok[i].attr & skip))
			total += b->tok[i].text_len;
	if (total > UINT32_MAX / 64)
		return -1;
	nd = calloc(total, sizeof *nd);
	slot = calloc(total, sizeof *slot);
	queue = calloc(total, sizeof *queue);
	if (nd == NULL || slot == NULL || queue == NULL)
		goto out;
	nd[0].id = -1;
	for (uint32_t i = 0; i < b->n_tok; i++) {
		const struct tb_token *t = &b->tok[i];

		if ((t->attr & want) && !(t->attr & skip) && t->text_len > 0)
			tree_add(nd, &nn, b->pool.p + t->text_off, t->text_len,
				 (int32_t)i);
	}
	if (da_grow(o, 256, &cap))
		goto out;
	o->da[0] = (struct tb_da){ 0, UINT32_MAX, -1 };
	o->n = 1;
	queue[qt++] = 0;
	while (qh < qt) {
		uint32_t u = queue[qh++], s = slot[u], base, lo = 255;

		if (nd[u].first == 0)
			continue;
		for (uint32_t ch = nd[u].first; ch; ch = nd[ch - 1].next)
			lo = nd[ch - 1].byte < lo ? nd[ch - 1].byte : lo;
		while (free_from < o->n && o->da[free_from].check != 0)
			free_from++;
		/* the lowest base at which every child's slot is free */
		for (base = free_from > lo ? free_from - lo : 1;; base++) {
			uint32_t ch;

			if (da_grow(o, (uint64_t)base + 256, &cap))
				goto out;
			for (ch = nd[u].first; ch; ch = nd[ch - 1].next)
				if (o->da[base + nd[ch - 1].byte].check != 0)
					break;
			if (ch == 0)
				break;
		}
		o->da[s].base = base;
		for (uint32_t ch = nd[u].first; ch; ch = nd[ch - 1].next) {
			uint32_t k = ch - 1, at = base + nd[k].byte;

			o->da[at] = (struct tb_da){ 0, s + 1, nd[k].id };
			slot[k] = at;
			queue[qt++] = k;
			if (at + 1 > o->n)
				o->n = at + 1;
		}
	}
	rc = 0;
out:
	free(nd);
	free(slot);
	free(queue);
	return rc;
}

static void added_info(const struct tb_builder *b, struct tb_added_info *ai)
{
	memset(ai, 0, sizeof *ai);
	for (uint32_t i = 0; i < b->n_tok; i++) {
		const struct tb_token *t = &b->tok[i];
		uint8_t c;

		if (!(t->attr & TA_ADDED) || t->text_len == 0)
			continue;
		c = b->pool.p[t->text_off];
		if (t->attr & TA_NORMALIZED) {
			ai->first_norm[c >> 3] |= (uint8_t)(1u << (c & 7));
			ai->has_norm = 1;
		} else {
			ai->first_raw[c >> 3] |= (uint8_t)(1u << (c & 7));
		}
		if (t->text_len > ai->max_len)
			ai->max_len = t->text_len;
	}
}

struct layout {
	struct tb_sect s[TS_NKIND];
	const void *data[TS_NKIND];
	uint32_t n;
	uint64_t end;
};

static void lay(struct layout *l, uint32_t kind, const void *p, uint32_t count,
		uint64_t size)
{
	l->end = ds_round_up(l->end, 8);
	l->s[l->n] = (struct tb_sect){ kind, count, l->end, size };
	l->data[l->n] = p;
	l->n++;
	l->end += size;
}

/* The tables built for the image; freed by free_tables. */
struct tables {
	uint32_t *ph, *eh, np, ne, nm;
	struct tb_merge *mg;
	struct trie_out added, uni;
	struct tb_added_info ai;
};

static int build_tables(struct tb_builder *b, struct tables *tb, ds_err *err)
{
	int bad;

	tb->ph = build_token_hash(b, 0, &tb->np);
	tb->eh = build_token_hash(b, 1, &tb->ne);
	if (b->model == TB_HF_BPE)
		tb->mg = build_merges(b, &tb->nm);
	bad = build_trie(b, TA_ADDED, 0, &tb->added);
	/* (CONTROL and UNKNOWN pieces are added tokens when a config names
	 * them special; the lattice never uses them) */
	bad |= build_trie(b, b->model == TB_SP_UNIGRAM ?
			  (TA_NORMAL | TA_ADDED | TA_UNUSED) : 0,
			  TA_CONTROL | TA_UNKNOWN, &tb->uni);
	added_info(b, &tb->ai);
	if (tb->ph == NULL || tb->eh == NULL || bad ||
	    (b->model == TB_HF_BPE && tb->mg == NULL))
		return ds_errf(err, "out of memory building the tokenizer tables");
	return 0;
}

static void free_tables(struct tables *tb)
{
	free(tb->ph);
	free(tb->eh);
	free(tb->mg);
	free(tb->added.da);
	free(tb->uni.da);
}

/* Every section, in file order. */
static void lay_out(struct layout *l, struct tb_builder *b, struct tables *tb)
{
	l->end = sizeof(struct tb_header) + TS_NKIND * sizeof(struct tb_sect);
	lay(l, TS_BYTE_IDS, b->byte_ids, 256, sizeof b->byte_ids);
	lay(l, TS_ADDED_INFO, &tb->ai, 1, sizeof tb->ai);
	lay(l, TS_NORM, b->norm, b->n_norm,
	    (uint64_t)b->n_norm * sizeof(struct tb_op));
	lay(l, TS_PRETOK, b->pretok, b->n_pretok,
	    (uint64_t)b->n_pretok * sizeof(struct tb_op));
	lay(l, TS_POOL, b->pool.p, (uint32_t)b->pool.n, b->pool.n);
	lay(l, TS_TOKENS, b->tok, b->n_tok, (uint64_t)b->n_tok * sizeof *b->tok);
	lay(l, TS_PIECE_HASH, tb->ph, tb->np, (uint64_t)tb->np * 4);
	lay(l, TS_ENC_HASH, tb->eh, tb->ne, (uint64_t)tb->ne * 4);
	if (tb->mg != NULL)
		lay(l, TS_MERGES, tb->mg, tb->nm, (uint64_t)tb->nm * sizeof *tb->mg);
	lay(l, TS_ADDED_DA, tb->added.da, tb->added.n,
	    (uint64_t)tb->added.n * sizeof *tb->added.da);
	if (b->model == TB_SP_UNIGRAM)
		lay(l, TS_UNI_DA, tb->uni.da, tb->uni.n,
		    (uint64_t)tb->uni.n * sizeof *tb->uni.da);
	if (b->charsmap_len > 0)
		lay(l, TS_CHARSMAP, b->pool.p + b->charsmap_off, b->charsmap_len,
		    b->charsmap_len);
}

static void fill_header(struct tb_header *h, const struct tb_builder *b,
			const struct layout *l)
{
	memcpy(h->magic, TB_MAGIC, 8);
	h->version = TB_VERSION;
	h->header_size = sizeof *h;
	h->file_size = l->end;
	h->model = b->model;
	h->flags = b->flags;
	h->n_vocab = b->n_tok;
	h->n_sect = l->n;
	h->bos = b->bos;
	h->eos = b->eos;
	h->eot = b->eot;
	h->unk = b->unk;
	h->pad = b->pad;
	h->min_score = b->min_score;
	h->max_score = b->max_score;
	memcpy(h->chat, b->chat, sizeof h->chat);
	h->chat[sizeof h->chat - 1] = '\0';
	memcpy(h->pcre_unicode, b->pcre_unicode, sizeof h->pcre_unicode);
	h->pcre_unicode[sizeof h->pcre_unicode - 1] = '\0';
}

int tb_finish(struct tb_builder *b, uint8_t **out, size_t *len, ds_err *err)
{
	struct tables tb = { 0 };
	struct layout l = { 0 };
	struct tb_header h = { 0 };
	uint8_t *img = NULL;

	if (build_tables(b, &tb, err) != 0)
		goto out;
	lay_out(&l, b, &tb);
	fill_header(&h, b, &l);
	img = calloc(1, l.end);
	if (img == NULL) {
		ds_errf(err, "out of memory (%llu bytes)", (unsigned long long)l.end);
		goto out;
	}
	memcpy(img, &h, sizeof h);
	memcpy(img + sizeof h, l.s, l.n * sizeof(struct tb_sect));
	for (uint32_t i = 0; i < l.n; i++)
		if (l.s[i].size > 0)
			memcpy(img + l.s[i].off, l.data[i], l.s[i].size);
	*out = img;
	*len = l.end;
out:
	free_tables(&tb);
	return img != NULL ? 0 : -1;
}

/* ---- opening an image -------------------------------------------------------- */

static int sect(ds_tok *t, const struct tb_sect *s, size_t elem, int pow2,
		const void **p, uint32_t *count, ds_err *err)
{
	uint64_t want;

	if (s->off % 8 != 0 || s->off > t->size || s->size > t->size - s->off)
		return ds_errf(err, "%s: section %u: [%llu, +%llu) outside the "
			       "file of %zu bytes", t->name, s->kind,
			       (unsigned long long)s->off,
			       (unsigned long long)s->size, t->size);
	if (ds_mul_u64(s->count, elem, &want) != 0 || want != s->size)
		return ds_errf(err, "%s: section %u: %u entries of %zu bytes "
			       "do not make %llu bytes", t->name, s->kind,
			       s->count, elem, (unsigned long long)s->size);
	if (pow2 && (s->count == 0 || (s->count & (s->count - 1)) != 0))
		return ds_errf(err, "%s: section %u: %u slots, not a power of 2",
			       t->name, s->kind, s->count);
	*p = t->base + s->off;
	*count = s->count;
	return 0;
}

static int check_ops(ds_tok *t, const struct tb_op *ops, uint32_t n,
		     const char *what, ds_err *err)
{
	if (n > TB_MAX_OPS)
		return ds_errf(err, "%s: %s: %u steps, more than %u", t->name,
			       what, n, TB_MAX_OPS);
	for (uint32_t i = 0; i < n; i++) {
		const struct tb_op *o = &ops[i];

		if ((uint64_t)o->s1_off + o->s1_len > t->pool_len ||
		    (uint64_t)o->s2_off + o->s2_len > t->pool_len)
			return ds_errf(err, "%s: %s step %u: string outside the "
				       "pool", t->name, what, i);
		if (!((o->op >= OP_NFC && o->op <= OP_STRIP) ||
		      (o->op >= OP_SPLIT && o->op <= OP_WSSPLIT)))
			return ds_errf(err, "%s: %s step %u: unknown op %u",
				       t->name, what, i, o->op);
	}
	return 0;
}

static int check_header(const ds_tok *t, const struct tb_header *h,
			ds_err *err)
{
	if (t->size < sizeof *h || memcmp(h->magic, TB_MAGIC, 8) != 0)
		return ds_errf(err, "%s: not a ds tokenizer.bin (bad magic)",
			       t->name);
	if (h->version != TB_VERSION)
		return ds_errf(err, "%s: tokenizer.bin version %u, this ds "
			       "reads version %u", t->name, h->version,
			       TB_VERSION);
	if (h->header_size != sizeof *h || h->file_size != t->size)
		return ds_errf(err, "%s: header says %llu bytes, the file has "
			       "%zu", t->name, (unsigned long long)h->file_size,
			       t->size);
	if (h->n_sect > TS_NKIND ||
	    sizeof *h + (uint64_t)h->n_sect * sizeof(struct tb_sect) > t->size)
		return ds_errf(err, "%s: %u sections", t->name, h->n_sect);
	if (h->model < TB_HF_BPE || h->model > TB_SP_UNIGRAM ||
	    h->n_vocab == 0 || h->n_vocab > TB_MAX_VOCAB)
		return ds_errf(err, "%s: model %u with %u tokens", t->name,
			       h->model, h->n_vocab);
	if (memchr(h->chat, '\0', sizeof h->chat) == NULL ||
	    memchr(h->pcre_unicode, '\0', sizeof h->pcre_unicode) == NULL)
		return ds_errf(err, "%s: chat template name not terminated",
			       t->name);
	return 0;
}

/* Each section kind: its entry size and whether its count is a power
 * of 2 (hash tables, probed with a mask). */
static const struct {
	uint16_t elem;
	uint8_t pow2;
} sect_rule[TS_NKIND] = {
	[TS_POOL] = { 1, 0 },
	[TS_TOKENS] = { sizeof(struct tb_token), 0 },
	[TS_PIECE_HASH] = { 4, 1 },
	[TS_ENC_HASH] = { 4, 1 },
	[TS_MERGES] = { sizeof(struct tb_merge), 1 },
	[TS_BYTE_IDS] = { 4, 0 },
	[TS_ADDED_DA] = { sizeof(struct tb_da), 0 },
	[TS_UNI_DA] = { sizeof(struct tb_da), 0 },
	[TS_CHARSMAP] = { 1, 0 },
	[TS_NORM] = { sizeof(struct tb_op), 0 },
	[TS_PRETOK] = { sizeof(struct tb_op), 0 },
	[TS_ADDED_INFO] = { sizeof(struct tb_added_info), 0 },
};

/* Point the tokenizer's table for section kind K at P, N entries. */
static void bind_sect(ds_tok *t, uint32_t k, const void *p, uint32_t n)
{
	const struct tb_added_info *ai = p;

	switch (k) {
	case TS_POOL: t->pool = p; t->pool_len = n; break;
	case TS_TOKENS: t->tok = p; break;
	case TS_PIECE_HASH: t->piece_hash = p; t->piece_mask = n - 1; break;
	case TS_ENC_HASH: t->enc_hash = p; t->enc_mask = n - 1; break;
	case TS_MERGES: t->merges = p; t->merge_mask = n - 1; break;
	case TS_BYTE_IDS: t->byte_ids = p; break;
	case TS_ADDED_DA: t->added = p; t->n_added = n; break;
	case TS_UNI_DA: t->uni = p; t->n_uni = n; break;
	case TS_CHARSMAP: t->charsmap = p; t->charsmap_len = n; break;
	case TS_NORM: t->norm = p; t->n_norm = n; break;
	case TS_PRETOK: t->pretok = p; t->n_pretok = n; break;
	case TS_ADDED_INFO:
		t->max_added_len = ai->max_len;
		t->has_norm_added = ai->has_norm != 0;
		t->first_raw = ai->first_raw;
		t->first_norm = ai->first_norm;
		break;
	}
}

/* The entry counts a section kind must have, where it is fixed. */
static int check_count(const ds_tok *t, uint32_t k, uint32_t n, ds_err *err)
{
	if (k == TS_TOKENS && n != t->h->n_vocab)
		return ds_errf(err, "%s: %u token entries for a vocabulary of "
			       "%u", t->name, n, t->h->n_vocab);
	if (k == TS_BYTE_IDS && n != 256)
		return ds_errf(err, "%s: %u byte ids", t->name, n);
	if (k == TS_ADDED_INFO && n != 1)
		return ds_errf(err, "%s: %u added-token infos", t->name, n);
	return 0;
}

/* Read the section table; *seen gets a bit per kind present. */
static int read_sects(ds_tok *t, uint32_t *seen, ds_err *err)
{
	const struct tb_sect *st = (const void *)(t->base + sizeof *t->h);

	*seen = 0;
	for (uint32_t i = 0; i < t->h->n_sect; i++) {
		const struct tb_sect *s = &st[i];
		const void *p = NULL;
		uint32_t n = 0;

		if (s->kind == 0 || s->kind >= TS_NKIND || (*seen >> s->kind & 1))
			return ds_errf(err, "%s: section %u: kind %u unknown or "
				       "repeated", t->name, i, s->kind);
		*seen |= 1u << s->kind;
		if (sect(t, s, sect_rule[s->kind].elem, sect_rule[s->kind].pow2,
			 &p, &n, err) != 0 ||
		    check_count(t, s->kind, n, err) != 0)
			return -1;
		bind_sect(t, s->kind, p, n);
	}
	return 0;
}

static int check_required(const ds_tok *t, uint32_t seen, ds_err *err)
{
	uint32_t need = 1u << TS_POOL | 1u << TS_TOKENS | 1u << TS_PIECE_HASH |
			1u << TS_ENC_HASH | 1u << TS_BYTE_IDS |
			1u << TS_ADDED_DA | 1u << TS_NORM | 1u << TS_PRETOK |
			1u << TS_ADDED_INFO;

	if (t->h->model == TB_HF_BPE)
		need |= 1u << TS_MERGES;
	if (t->h->model == TB_SP_UNIGRAM)
		need |= 1u << TS_UNI_DA;
	if ((seen & need) != need)
		return ds_errf(err, "%s: sections missing (have %#x, need %#x)",
			       t->name, seen, need);
	return 0;
}

/* Byte and special-token ids inside the vocabulary (-1: none). */
static int check_ids(const ds_tok *t, ds_err *err)
{
	const struct tb_header *h = t->h;
	const int32_t ids[5] = { h->bos, h->eos, h->eot, h->unk, h->pad };
	int32_t nv = (int32_t)h->n_vocab;

	for (int i = 0; i < 256; i++)
		if (t->byte_ids[i] < -1 || t->byte_ids[i] >= nv)
			return ds_errf(err, "%s: byte %d: token %d outside the "
				       "vocabulary", t->name, i, t->byte_ids[i]);
	for (int i = 0; i < 5; i++)
		if (ids[i] < -1 || ids[i] >= nv)
			return ds_errf(err, "%s: special token id %d outside "
				       "the vocabulary", t->name, ids[i]);
	return 0;
}

int tb_open(ds_tok *t, ds_err *err)
{
	const struct tb_header *h = (const void *)t->base;
	uint32_t seen;

	if (check_header(t, h, err) != 0)
		return -1;
	t->h = h;
	if (read_sects(t, &seen, err) != 0 || check_required(t, seen, err) != 0 ||
	    check_ops(t, t->norm, t->n_norm, "normalizer", err) != 0 ||
	    check_ops(t, t->pretok, t->n_pretok, "pre-tokenizer", err) != 0 ||
	    check_ids(t, err) != 0)
		return -1;
	memcpy(t->chat, h->chat, sizeof h->chat);
	/* Entries are checked where they are used: a check of every one
	 * here would read all 12 MB of a 128k vocabulary at load. */
	return 0;
}

/* ---- lookups ------------------------------------------------------------------- */

static int tok_ok(const ds_tok *t, uint32_t id)
{
	const struct tb_token *e = &t->tok[id];

	return (uint64_t)e->piece_off + e->piece_len <= t->pool_len &&
	       (uint64_t)e->text_off + e->text_len <= t->pool_len;
}

static int32_t hash_lookup(const ds_tok *t, const uint32_t *slots,
			   uint32_t mask, int enc, const void *s, size_t n)
{
	uint32_t h = tb_hash(s, n) & mask;

	for (uint32_t probe = 0; probe <= mask; probe++, h = (h + 1) & mask) {
		uint32_t v = slots[h], off, len;
		const struct tb_token *e;

		if (v == 0)
			return -1;
		if (v > t->h->n_vocab || !tok_ok(t, v - 1))
			return -1; /* corrupt slot: treat as absent */
		e = &t->tok[v - 1];
		off = enc ? e->text_off : e->piece_off;
		len = enc ? e->text_len : e->piece_len;
		if (len == n && memcmp(t->pool + off, s, n) == 0)
			return (int32_t)(v - 1);
	}
	return -1;
}

int32_t tb_enc_lookup(const ds_tok *t, const void *s, size_t n)
{
	return hash_lookup(t, t->enc_hash, t->enc_mask, 1, s, n);
}

int32_t ds_tok_piece_id(const ds_tok *t, const char *s, size_t n)
{
	return hash_lookup(t, t->piece_hash, t->piece_mask, 0, s, n);
}

const struct tb_merge *tb_merge_find(const ds_tok *t, uint32_t a, uint32_t b)
{
	uint32_t mask = t->merge_mask, h = pair_hash(a, b) & mask;

	for (uint32_t probe = 0; probe <= mask; probe++, h = (h + 1) & mask) {
		const struct tb_merge *m = &t->merges[h];

		if (m->a == UINT32_MAX)
			return NULL;
		if (m->a == a && m->b == b)
			return m->id < t->h->n_vocab ? m : NULL;
	}
	return NULL;
}

const char *ds_tok_piece(const ds_tok *t, int32_t id, size_t *len)
{
	if (id < 0 || (uint32_t)id >= t->h->n_vocab || !tok_ok(t, (uint32_t)id))
		return NULL;
	*len = t->tok[id].piece_len;
	return (const char *)t->pool + t->tok[id].piece_off;
}

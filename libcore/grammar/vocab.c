/*
 * vocab.c - a tokenizer's tokens as a byte trie for the mask walk.
 *
 * The tokens that can match (not special, not eos, not empty) are sorted
 * by their bytes; in that order the trie's nodes come out depth-first, so
 * a node's subtree is a range of nodes and its tokens a range of the
 * sorted list.  The walk (match.c) goes through the nodes in order,
 * skipping a subtree when the grammar rejects its prefix.
 *
 * Nodes with at least AUX_MIN tokens below also record which bytes the
 * rest of those tokens use, how long the longest rest is and whether the
 * rest is whole UTF-8 characters: inside a JSON string most of the
 * vocabulary can be taken without descending (match.c, skip_ok).
 */
#include "gint.h"

#define AUX_MIN 8

typedef struct tref {
	const uint8_t *p;
	uint32_t len, id;
} tref;

static int cmp_tref(const void *a, const void *b)
{
	const tref *x = a, *y = b;
	uint32_t n = x->len < y->len ? x->len : y->len;
	int c = n ? memcmp(x->p, y->p, n) : 0;

	if (c != 0)
		return c;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

static uint32_t lcp(const tref *a, const tref *b)
{
	uint32_t n = a->len < b->len ? a->len : b->len, i;

	for (i = 0; i < n && a->p[i] == b->p[i]; i++)
		;
	return i;
}

static int copy_tokens(ds_gvocab *v, const uint8_t *const *bytes,
		       const uint32_t *lens, const uint8_t *is_special,
		       ds_err *err)
{
	size_t total = 0, i;

	for (i = 0; i < v->n; i++) {
		if (lens[i] > DS_GVOCAB_MAX_TOKEN_LEN)
			return ds_errf(err, "token %zu: %u bytes (over %u)", i,
				       lens[i], DS_GVOCAB_MAX_TOKEN_LEN);
		if (lens[i] && bytes[i] == NULL)
			return ds_errf(err, "token %zu: no bytes", i);
		if (ds_add_sz(total, lens[i], &total) != 0)
			return ds_errf(err, "vocabulary too large");
	}
	v->bytes = ds_calloc(total + 1, 1, err);
	v->off = ds_calloc(v->n + 1, sizeof *v->off, err);
	v->special = ds_calloc(v->n + 1, 1, err);
	if (!v->bytes || !v->off || !v->special)
		return -1;
	for (i = 0, total = 0; i < v->n; i++) {
		v->off[i] = total;
		if (lens[i])
			memcpy(v->bytes + total, bytes[i], lens[i]);
		total += lens[i];
		v->special[i] = (is_special && is_special[i]) ||
				(int64_t)i == v->eos;
		if (lens[i] > v->max_len)
			v->max_len = lens[i];
	}
	v->off[v->n] = total;
	return 0;
}

/* The tokens that can match, sorted by bytes. */
static tref *sorted_tokens(ds_gvocab *v, ds_err *err)
{
	tref *t = ds_calloc(v->n + 1, sizeof *t, err);
	size_t i;

	if (t == NULL)
		return NULL;
	for (i = 0; i < v->n; i++) {
		uint32_t len = (uint32_t)(v->off[i + 1] - v->off[i]);

		if (!v->special[i] && len)
			t[v->n_toks++] = (tref){ .p = v->bytes + v->off[i],
				.len = len, .id = (uint32_t)i };
	}
	qsort(t, v->n_toks, sizeof *t, cmp_tref);
	return t;
}

/* Nodes and, for each sorted token, the node it ends at. */
static int build_nodes(ds_gvocab *v, const tref *t, uint32_t *endnode,
		       uint32_t *parent, ds_err *err)
{
	uint32_t *path = ds_calloc((size_t)v->max_len + 1, sizeof *path, err);
	uint32_t depth = 0, k;
	size_t nn = 1, cap = 0;

	if (path == NULL)
		return -1;
	for (k = 0; k < v->n_toks; k++)
		cap += t[k].len; /* no more nodes than bytes */
	v->nodes = ds_calloc(cap + 2, sizeof *v->nodes, err);
	if (v->nodes == NULL) {
		free(path);
		return -1;
	}
	v->nodes[0] = (gtnode){ .aux = UINT32_MAX };
	parent[0] = UINT32_MAX;
	for (k = 0; k < v->n_toks; k++) {
		uint32_t c = k ? lcp(&t[k - 1], &t[k]) : 0, d;

		for (; depth > c; depth--)
			v->nodes[path[depth]].end = (uint32_t)nn;
		for (d = c + 1; d <= t[k].len; d++) {
			v->nodes[nn] = (gtnode){ .tok = k, .aux = UINT32_MAX,
				.depth = (uint16_t)d, .byte = t[k].p[d - 1] };
			parent[nn] = path[d - 1];
			path[d] = (uint32_t)nn++;
		}
		depth = t[k].len;
		endnode[k] = path[depth];
	}
	for (; depth > 0; depth--)
		v->nodes[path[depth]].end = (uint32_t)nn;
	v->nodes[0].end = (uint32_t)nn;
	v->nodes[nn] = (gtnode){ .end = (uint32_t)nn, .tok = v->n_toks,
		.aux = UINT32_MAX };
	v->n_nodes = (uint32_t)nn;
	free(path);
	return 0;
}

/* ok[d]: token bytes [d, len) are whole UTF-8 characters. */
static void utf8_suffixes(const uint8_t *p, uint32_t len, uint8_t *ok)
{
	uint32_t d;

	ok[len] = 1;
	for (d = len; d-- > 0;) {
		uint32_t cp;
		size_t n = gutf8_dec(p + d, len - d, &cp);

		ok[d] = n ? ok[d + n] : 0;
	}
}

static int build_aux(ds_gvocab *v, const tref *t, const uint32_t *endnode,
		     const uint32_t *parent, ds_err *err)
{
	uint8_t *ok = ds_calloc((size_t)v->max_len + 2, 1, err);
	uint32_t i, k;

	if (ok == NULL)
		return -1;
	for (i = 0; i < v->n_nodes; i++)
		if (v->nodes[v->nodes[i].end].tok - v->nodes[i].tok >= AUX_MIN)
			v->nodes[i].aux = v->n_aux++;
	v->aux = ds_calloc((size_t)v->n_aux + 1, sizeof *v->aux, err);
	if (v->aux == NULL) {
		free(ok);
		return -1;
	}
	for (i = 0; i < v->n_aux; i++)
		v->aux[i].utf8 = 1;
	for (k = 0; k < v->n_toks; k++) {
		uint64_t asc[2] = { 0, 0 };
		uint32_t node = endnode[k], d = t[k].len;
		uint16_t len = t[k].len > UINT16_MAX ? UINT16_MAX : (uint16_t)t[k].len;
		int high = 0;

		utf8_suffixes(t[k].p, t[k].len, ok);
		/* node is at depth d: its suffix is bytes [d, len) */
		for (;;) {
			gtaux *a = v->nodes[node].aux != UINT32_MAX ?
				   &v->aux[v->nodes[node].aux] : NULL;

			if (a) {
				a->ascii[0] |= asc[0], a->ascii[1] |= asc[1];
				a->high |= (uint8_t)high;
				a->utf8 &= ok[d];
				if (len - d > a->maxlen)
					a->maxlen = (uint16_t)(len - d);
			}
			if (node == 0)
				break;
			node = parent[node];
			d--;
			if (t[k].p[d] < 0x80)
				asc[t[k].p[d] >> 6] |= 1ull << (t[k].p[d] & 63);
			else
				high = 1;
		}
	}
	free(ok);
	return 0;
}

int ds_gvocab_build(size_t n, const uint8_t *const *bytes,
		    const uint32_t *lens, const uint8_t *is_special,
		    int32_t eos, ds_gvocab **out, ds_err *err)
{
	ds_gvocab *v;
	tref *t = NULL;
	uint32_t *endnode = NULL, *parent = NULL;
	size_t cap = 0, i;

	*out = NULL;
	if (n == 0 || n > DS_GVOCAB_MAX_TOKENS)
		return ds_errf(err, "vocabulary of %zu tokens (1 to %u)", n,
			       DS_GVOCAB_MAX_TOKENS);
	if (eos < -1 || (eos >= 0 && (size_t)eos >= n))
		return ds_errf(err, "eos token %d outside the vocabulary", eos);
	v = ds_calloc(1, sizeof *v, err);
	if (v == NULL)
		return -1;
	v->n = n;
	v->eos = eos;
	if (copy_tokens(v, bytes, lens, is_special, err) != 0 ||
	    (t = sorted_tokens(v, err)) == NULL)
		goto fail;
	for (i = 0; i < v->n_toks; i++)
		cap += t[i].len;
	if (cap > UINT32_MAX - 2) {
		ds_errf(err, "vocabulary of %zu token bytes: too large", cap);
		goto fail;
	}
	endnode = ds_calloc(v->n_toks + 1, sizeof *endnode, err);
	parent = ds_calloc(cap + 2, sizeof *parent, err);
	v->toks = ds_calloc(v->n_toks + 1, sizeof *v->toks, err);
	if (!endnode || !parent || !v->toks ||
	    build_nodes(v, t, endnode, parent, err) != 0 ||
	    build_aux(v, t, endnode, parent, err) != 0)
		goto fail;
	for (i = 0; i < v->n_toks; i++)
		v->toks[i] = t[i].id;
	free(t);
	free(endnode);
	free(parent);
	*out = v;
	return 0;
fail:
	free(t);
	free(endnode);
	free(parent);
	ds_gvocab_free(v);
	return -1;
}

void ds_gvocab_free(ds_gvocab *v)
{
	if (v == NULL)
		return;
	free(v->bytes);
	free(v->off);
	free(v->special);
	free(v->nodes);
	free(v->toks);
	free(v->aux);
	free(v);
}

size_t ds_gvocab_size(const ds_gvocab *v)
{
	return v->n;
}

size_t ds_gvocab_mask_words(const ds_gvocab *v)
{
	return (v->n + 63) / 64;
}

const uint8_t *ds_gvocab_token(const ds_gvocab *v, int32_t id, uint32_t *len)
{
	if (id < 0 || (size_t)id >= v->n)
		return NULL;
	*len = (uint32_t)(v->off[id + 1] - v->off[id]);
	return v->bytes + v->off[id];
}

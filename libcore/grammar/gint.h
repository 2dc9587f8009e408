/*
 * gint.h - what the grammar files share: the lowered grammar, a growable
 * byte buffer, UTF-8.
 *
 * A grammar is lowered to bytes: every terminal is a set of bytes, and a
 * character class becomes alternatives of byte-set sequences (its UTF-8
 * forms).  Rule r's alternatives start at elems[alt_start[k]] for k in
 * [rule_alt[r], rule_alt[r+1]); each runs to an END element.
 */
#ifndef DS_GINT_H
#define DS_GINT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"

enum { GE_END = 0, GE_SET = 1, GE_REF = 2 };

static inline uint32_t ge_make(unsigned kind, uint32_t arg)
{
	return (uint32_t)kind << 28 | arg;
}
static inline unsigned ge_kind(uint32_t e)
{
	return e >> 28;
}
static inline uint32_t ge_arg(uint32_t e)
{
	return e & 0x0fffffffu;
}

typedef struct gset {
	uint64_t w[4];
} gset;

static inline int gset_has(const gset *s, unsigned b)
{
	return (int)(s->w[b >> 6] >> (b & 63) & 1);
}
static inline void gset_add(gset *s, unsigned b)
{
	s->w[b >> 6] |= 1ull << (b & 63);
}

struct ds_grammar {
	uint32_t *elems, n_elems;
	uint32_t *alt_start, n_alts;
	uint32_t *rule_alt, n_rules;  /* n_rules + 1 entries */
	uint32_t root;
	gset *sets;
	uint32_t n_sets;
	/* Bytes no set tells apart share a class; transitions are kept per
	 * class.  rep[c] is a byte of class c. */
	uint8_t cls[256], rep[256];
	uint32_t n_cls;
};

/* ---- vocabularies: a byte trie of the tokens ------------------------------ */

/* Nodes in depth-first order: node i's subtree is [i, end); its tokens are
 * toks[tok, nodes[end].tok), those ending at i itself toks[tok,
 * nodes[i+1].tok).  nodes[n_nodes] is a sentinel (tok = n_toks). */
typedef struct gtnode {
	uint32_t end, tok;
	uint32_t aux;          /* index into aux, or UINT32_MAX */
	uint16_t depth;
	uint8_t byte, pad;
} gtnode;

/* For nodes with many tokens below: what the walk needs to take the whole
 * subtree at once.  The suffixes are the tokens' bytes after the node. */
typedef struct gtaux {
	uint64_t ascii[2];     /* ASCII bytes in the suffixes */
	uint16_t maxlen;       /* the longest suffix, in bytes (saturated) */
	uint8_t high;          /* some suffix has a byte >= 0x80 */
	uint8_t utf8;          /* every suffix is whole UTF-8 characters */
} gtaux;

struct ds_gvocab {
	size_t n;
	int32_t eos;
	uint8_t *bytes;        /* token i: bytes[off[i], off[i+1]) */
	size_t *off;
	uint8_t *special;
	gtnode *nodes;
	uint32_t n_nodes;
	uint32_t *toks, n_toks;
	gtaux *aux;
	uint32_t n_aux;
	uint32_t max_len;
};

/* ---- a growable byte buffer (text being generated) ---------------------- */

typedef struct gbuf {
	char *p;
	size_t n, cap;
	int oom;          /* an append failed or passed DS_GRAMMAR_MAX_TEXT */
} gbuf;

int gbuf_put(gbuf *b, const void *s, size_t n);
int gbuf_puts(gbuf *b, const char *s);
int gbuf_printf(gbuf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* s as a grammar string literal: "..." with " \ and control bytes
 * escaped. */
int gbuf_literal(gbuf *b, const void *s, size_t n);
/* One code point written for use inside a [...] class. */
int gbuf_class_cp(gbuf *b, uint32_t cp);
void gbuf_free(gbuf *b);

/* Grow *p (an array of *cap elements of size sz) to hold need; 0 or -1. */
int ggrow(void *pp, size_t *cap, size_t need, size_t sz);

/* ---- UTF-8 ----------------------------------------------------------------- */

/* Decode one well-formed code point at s (n bytes left): its length, or 0
 * when the bytes are not UTF-8 (overlong, surrogate, past U+10FFFF,
 * truncated). */
size_t gutf8_dec(const uint8_t *s, size_t n, uint32_t *cp);
/* Encode cp (a scalar value) into out[4]; its length. */
size_t gutf8_enc(uint32_t cp, uint8_t *out);

/* Messages quote names from the input (keys, keywords): their control
 * characters become '?', so that a message stays one line. */
void gerr_oneline(ds_err *err);

/* ---- code point sets ------------------------------------------------------- */

typedef struct grv {
	uint32_t *p;   /* pairs lo, hi */
	size_t n, cap; /* pairs */
} grv;

int grv_add(grv *r, uint32_t lo, uint32_t hi);
/* Sort and merge, drop the surrogates; complement within the scalar
 * values first when neg. */
int grv_norm(grv *r, int neg);

/* ---- the parser's entry with a chosen start rule --------------------------- */

int gbnf_parse(const char *text, size_t len, const char *root,
	       ds_grammar **g, ds_err *err);

/* ---- pattern (ECMAScript regex subset) to grammar text -------------------------- */

/* Emit into out a grammar expression for the JSON string contents (between
 * the quotes) whose decoded value matches re.  `any` names the rule for
 * any one JSON string character (for unanchored ends); icase folds ASCII
 * letters.  Refusals name the construct. */
int gregex_emit(gbuf *out, const char *re, size_t len, int icase,
		const char *any, ds_err *err);
/* Code point set helpers the regex and schema code share: emit the JSON
 * string forms (raw or escaped) of every code point in the sorted, merged
 * ranges r[0..n) (pairs lo, hi). */
int gjson_cpset(gbuf *out, const uint32_t *r, size_t n);

#endif

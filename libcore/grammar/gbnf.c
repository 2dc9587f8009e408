/*
 * gbnf.c - the grammar text parser (docs/grammar.md) and its lowering to
 * byte sets.
 *
 * Parsing builds the alternatives of every rule as element lists.  Groups,
 * repetitions and multi-byte character classes become generated rules, so
 * that an element is only ever a byte set or a rule reference:
 *	x?      r ::= x |
 *	x*      r ::= x r |            (the reference to r is last: the
 *	                                matcher reuses the frame, no growth)
 *	x{m,n}  x ... x (m times) then r1, ri ::= x r(i+1) |
 * A class becomes its UTF-8 forms: one byte set when every code point is
 * ASCII, else a rule with one alternative per byte-range sequence.
 *
 * Then the checks the matcher relies on: every rule defined, `root`
 * present, and no left recursion that grows the stack (a rule reaching
 * itself before consuming a byte through a reference that is not last in
 * its alternative), which would make the matcher's closure endless.
 */
#include <stdarg.h>
#include <stdio.h>

#include "gint.h"

typedef struct prule {
	const char *name;      /* NULL for generated rules */
	uint32_t name_len;
	uint32_t owner;        /* the named rule a generated one belongs to */
	const char *at;        /* definition, or first reference */
	uint8_t defined;
} prule;

typedef struct palt {
	uint32_t rule, off, len;  /* elements ir[off, off+len) */
} palt;

typedef struct evec {
	uint32_t *p;
	size_t n, cap;
} evec;

typedef struct hslot {
	uint64_t hash;
	uint32_t id, used;
} hslot;

/* An open-addressing table from a hash to an id (callers compare the
 * candidates' contents). */
typedef struct htab {
	hslot *s;
	size_t cap, n;
} htab;

typedef struct parser {
	const char *text, *end, *p;
	ds_err *err;
	prule *rules;
	size_t nrules, rcap;
	palt *alts;
	size_t nalts, acap;
	uint32_t *ir;
	size_t nir, ircap;
	gset *sets;
	size_t nsets, scap;
	htab names, setmap, clsmap;
	uint32_t *clsr;            /* ranges of cached classes, by offset */
	size_t nclsr, clsrcap;
	uint32_t *clsinfo;         /* per cached class: off, n, rule */
	size_t ncls, clscap;
	uint32_t cur;              /* the named rule being defined */
	unsigned nest;
} parser;

/* ---- errors ------------------------------------------------------------- */

static int perr(parser *ps, const char *at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int perr(parser *ps, const char *at, const char *fmt, ...)
{
	unsigned line = 1, col = 1;
	const char *q;
	char msg[400];
	va_list ap;

	for (q = ps->text; q < at && q < ps->end; q++) {
		if (*q == '\n')
			line++, col = 1;
		else
			col++;
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return ds_errf(ps->err, "%u:%u: %s", line, col, msg);
}

/* "unexpected 'c'" for the byte at ps->p. */
static int unexpected(parser *ps)
{
	unsigned char c = (unsigned char)*ps->p;

	if (c > ' ' && c < 0x7f)
		return perr(ps, ps->p, "unexpected '%c'", c);
	return perr(ps, ps->p, "unexpected byte 0x%02x", c);
}

static int oom(parser *ps)
{
	return perr(ps, ps->p, "grammar too large (out of memory)");
}

/* ---- hash tables ----------------------------------------------------------- */

static uint64_t fnv(const void *p, size_t n, uint64_t h)
{
	const uint8_t *b = p;
	size_t i;

	for (i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

#define FNV0 0xcbf29ce484222325ull

static int htab_grow(htab *t)
{
	size_t cap = t->cap ? t->cap * 2 : 64, i;
	hslot *s = calloc(cap, sizeof *s);

	if (s == NULL)
		return -1;
	for (i = 0; i < t->cap; i++) {
		size_t j;

		if (!t->s[i].used)
			continue;
		for (j = t->s[i].hash & (cap - 1); s[j].used; j = (j + 1) & (cap - 1))
			;
		s[j] = t->s[i];
	}
	free(t->s);
	t->s = s;
	t->cap = cap;
	return 0;
}

/* The slot index of the first candidate for hash, or of an empty slot. */
static size_t htab_first(const htab *t, uint64_t hash)
{
	return hash & (t->cap - 1);
}

static int htab_add(htab *t, uint64_t hash, uint32_t id)
{
	size_t j;

	if ((t->n + 1) * 2 > t->cap && htab_grow(t) != 0)
		return -1;
	for (j = htab_first(t, hash); t->s[j].used; j = (j + 1) & (t->cap - 1))
		;
	t->s[j] = (hslot){ .hash = hash, .id = id, .used = 1 };
	t->n++;
	return 0;
}

/* ---- rules, alternatives, sets ---------------------------------------------- */

static int new_rule(parser *ps, const char *name, uint32_t len,
		    const char *at, uint32_t *id)
{
	if (ps->nrules >= DS_GRAMMAR_MAX_RULES)
		return perr(ps, ps->p, "more than %u rules", DS_GRAMMAR_MAX_RULES);
	if (ggrow(&ps->rules, &ps->rcap, ps->nrules + 1, sizeof *ps->rules) != 0)
		return oom(ps);
	ps->rules[ps->nrules] = (prule){ .name = name, .name_len = len,
		.owner = name ? (uint32_t)ps->nrules : ps->cur, .at = at };
	*id = (uint32_t)ps->nrules++;
	return 0;
}

/* The named rule's id, or UINT32_MAX. */
static uint32_t find_rule(const parser *ps, const char *name, size_t len)
{
	uint64_t h = fnv(name, len, FNV0);
	size_t j;

	if (!ps->names.cap)
		return UINT32_MAX;
	for (j = htab_first(&ps->names, h); ps->names.s[j].used;
	     j = (j + 1) & (ps->names.cap - 1)) {
		const prule *r = &ps->rules[ps->names.s[j].id];

		if (ps->names.s[j].hash == h && r->name_len == len &&
		    memcmp(r->name, name, len) == 0)
			return ps->names.s[j].id;
	}
	return UINT32_MAX;
}

static int rule_by_name(parser *ps, const char *name, uint32_t len,
			uint32_t *id)
{
	uint64_t h = fnv(name, len, FNV0);

	*id = find_rule(ps, name, len);
	if (*id != UINT32_MAX)
		return 0;
	if (new_rule(ps, name, len, name, id) != 0)
		return -1;
	if (htab_add(&ps->names, h, *id) != 0)
		return oom(ps);
	return 0;
}

static int gen_rule(parser *ps, uint32_t *id)
{
	if (new_rule(ps, NULL, 0, ps->p, id) != 0)
		return -1;
	ps->rules[*id].defined = 1;
	return 0;
}

static int add_alt(parser *ps, uint32_t rule, const uint32_t *e, size_t n)
{
	size_t need;

	if (ds_add_sz(ps->nir, n, &need) != 0 || need > DS_GRAMMAR_MAX_ELEMS ||
	    ps->nalts >= DS_GRAMMAR_MAX_ELEMS)
		return perr(ps, ps->p, "more than %u grammar elements",
			    DS_GRAMMAR_MAX_ELEMS);
	if (ggrow(&ps->ir, &ps->ircap, need, sizeof *ps->ir) != 0 ||
	    ggrow(&ps->alts, &ps->acap, ps->nalts + 1, sizeof *ps->alts) != 0)
		return oom(ps);
	if (n)
		memcpy(ps->ir + ps->nir, e, n * sizeof *e);
	ps->alts[ps->nalts++] = (palt){ .rule = rule, .off = (uint32_t)ps->nir,
		.len = (uint32_t)n };
	ps->nir = need;
	return 0;
}

static int set_id(parser *ps, const gset *s, uint32_t *id)
{
	uint64_t h = fnv(s, sizeof *s, FNV0);
	size_t j;

	if (ps->setmap.cap) {
		for (j = htab_first(&ps->setmap, h); ps->setmap.s[j].used;
		     j = (j + 1) & (ps->setmap.cap - 1)) {
			if (ps->setmap.s[j].hash == h &&
			    memcmp(&ps->sets[ps->setmap.s[j].id], s, sizeof *s) == 0) {
				*id = ps->setmap.s[j].id;
				return 0;
			}
		}
	}
	if (ggrow(&ps->sets, &ps->scap, ps->nsets + 1, sizeof *ps->sets) != 0 ||
	    htab_add(&ps->setmap, h, (uint32_t)ps->nsets) != 0)
		return oom(ps);
	ps->sets[ps->nsets] = *s;
	*id = (uint32_t)ps->nsets++;
	return 0;
}

static int evec_push(parser *ps, evec *v, uint32_t e)
{
	if (v->n >= DS_GRAMMAR_MAX_ELEMS)
		return perr(ps, ps->p, "more than %u grammar elements",
			    DS_GRAMMAR_MAX_ELEMS);
	if (ggrow(&v->p, &v->cap, v->n + 1, sizeof *v->p) != 0)
		return oom(ps);
	v->p[v->n++] = e;
	return 0;
}

static int push_byte(parser *ps, evec *v, unsigned b)
{
	gset s = { { 0 } };
	uint32_t id;

	gset_add(&s, b);
	if (set_id(ps, &s, &id) != 0)
		return -1;
	return evec_push(ps, v, ge_make(GE_SET, id));
}

/* ---- characters ------------------------------------------------------------- */

static int is_name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int valid_cp(uint32_t cp)
{
	return cp <= 0x10ffff && (cp < 0xd800 || cp > 0xdfff);
}

/* One character of a literal or class at ps->p (escape or UTF-8). */
static int parse_char(parser *ps, uint32_t *cp)
{
	const char *at = ps->p;
	unsigned digits = 0, i;
	uint32_t v = 0;
	char c;
	size_t n;

	if (ps->p >= ps->end)
		return perr(ps, at, "unexpected end of text");
	if (*ps->p != '\\') {
		n = gutf8_dec((const uint8_t *)ps->p, (size_t)(ps->end - ps->p), cp);
		if (n == 0)
			return perr(ps, at, "invalid UTF-8");
		ps->p += n;
		return 0;
	}
	if (++ps->p >= ps->end)
		return perr(ps, at, "unexpected end of text after '\\'");
	c = *ps->p++;
	switch (c) {
	case 'n': *cp = '\n'; return 0;
	case 'r': *cp = '\r'; return 0;
	case 't': *cp = '\t'; return 0;
	case 'x': digits = 2; break;
	case 'u': digits = 4; break;
	case 'U': digits = 8; break;
	default:
		if ((unsigned char)c < 0x7f && c > ' ' && !(c >= 'a' && c <= 'z') &&
		    !(c >= 'A' && c <= 'Z') && !(c >= '0' && c <= '9')) {
			*cp = (uint32_t)c;
			return 0;
		}
		return perr(ps, at, "unknown escape '\\%c'",
			    (unsigned char)c >= ' ' && (unsigned char)c < 0x7f ? c : '?');
	}
	for (i = 0; i < digits; i++) {
		int h = ps->p < ps->end ? hexval(*ps->p) : -1;

		if (h < 0)
			return perr(ps, at, "'\\%c' needs %u hex digits", c, digits);
		v = v << 4 | (uint32_t)h;
		ps->p++;
	}
	if (!valid_cp(v))
		return perr(ps, at, "U+%X is not a Unicode scalar value", (unsigned)v);
	*cp = v;
	return 0;
}

/* Blanks and comments; newlines too when nl. */
static void skip_space(parser *ps, int nl)
{
	while (ps->p < ps->end) {
		char c = *ps->p;

		if (c == ' ' || c == '\t' || c == '\r' || (nl && c == '\n'))
			ps->p++;
		else if (c == '#')
			while (ps->p < ps->end && *ps->p != '\n')
				ps->p++;
		else
			break;
	}
}

/* ---- literals and classes ------------------------------------------------------- */

static int parse_literal(parser *ps, evec *v)
{
	const char *at = ps->p++;

	for (;;) {
		uint8_t u[4];
		uint32_t cp;
		size_t n, i;

		if (ps->p >= ps->end || *ps->p == '\n')
			return perr(ps, at, "unterminated string");
		if (*ps->p == '"') {
			ps->p++;
			return 0;
		}
		if (parse_char(ps, &cp) != 0)
			return -1;
		n = gutf8_enc(cp, u);
		for (i = 0; i < n; i++)
			if (push_byte(ps, v, u[i]) != 0)
				return -1;
	}
}

/* A byte-range sequence: len sets. */
typedef struct useq {
	gset s[4];
	uint32_t len;
} useq;

typedef struct uvec {
	useq *p;
	size_t n, cap;
} uvec;

static int useq_add(uvec *u, uint32_t lo, uint32_t hi)
{
	uint8_t a[4], b[4];
	size_t n = gutf8_enc(lo, a), k;
	useq q = { .len = (uint32_t)n };

	gutf8_enc(hi, b);
	for (k = 0; k < n; k++) {
		unsigned x;

		for (x = a[k]; x <= b[k]; x++)
			gset_add(&q.s[k], x);
	}
	if (ggrow(&u->p, &u->cap, u->n + 1, sizeof *u->p) != 0)
		return -1;
	u->p[u->n++] = q;
	return 0;
}

/* [lo, hi] (scalar values of one encoded length) as products of byte
 * ranges: split where a lower byte position does not span its full
 * range. */
static int utf8_split(uvec *u, uint32_t lo, uint32_t hi, unsigned n)
{
	unsigned i;

	for (i = 1; i < n; i++) {
		uint32_t m = (1u << (6 * i)) - 1;

		if ((lo & ~m) == (hi & ~m))
			continue;
		if ((lo & m) != 0) {
			if (utf8_split(u, lo, lo | m, n) != 0)
				return -1;
			return utf8_split(u, (lo | m) + 1, hi, n);
		}
		if ((hi & m) != m) {
			if (utf8_split(u, lo, (hi & ~m) - 1, n) != 0)
				return -1;
			return utf8_split(u, hi & ~m, hi, n);
		}
	}
	return useq_add(u, lo, hi);
}

static int utf8_ranges(uvec *u, const grv *r)
{
	static const uint32_t top[4] = { 0x7f, 0x7ff, 0xffff, 0x10ffff };
	size_t i;

	for (i = 0; i < r->n; i++) {
		uint32_t lo = r->p[2 * i], hi = r->p[2 * i + 1];
		unsigned n;

		for (n = 0; n < 4 && lo <= hi; n++) {
			uint32_t h;

			if (lo > top[n])
				continue;
			h = hi < top[n] ? hi : top[n];
			if (utf8_split(u, lo, h, n + 1) != 0)
				return -1;
			lo = h + 1;
		}
	}
	return 0;
}

static int cmp_useq_tail(const void *a, const void *b)
{
	const useq *x = a, *y = b;

	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return memcmp(&x->s[1], &y->s[1], (x->len - 1) * sizeof x->s[0]);
}

/* Sequences of one length whose bytes after the first agree become one
 * (the first byte sets joined). */
static void useq_merge(uvec *u)
{
	size_t i, k = 0, w;

	if (u->n == 0)
		return;
	qsort(u->p, u->n, sizeof *u->p, cmp_useq_tail);
	for (i = 1; i < u->n; i++) {
		if (cmp_useq_tail(&u->p[k], &u->p[i]) == 0) {
			for (w = 0; w < 4; w++)
				u->p[k].s[0].w[w] |= u->p[i].s[0].w[w];
		} else {
			u->p[++k] = u->p[i];
		}
	}
	u->n = k + 1;
}

static int lower_seqs(parser *ps, const uvec *u, uint32_t rule)
{
	size_t i;
	uint32_t k;

	for (i = 0; i < u->n; i++) {
		uint32_t e[4];

		for (k = 0; k < u->p[i].len; k++) {
			if (set_id(ps, &u->p[i].s[k], &e[k]) != 0)
				return -1;
			e[k] = ge_make(GE_SET, e[k]);
		}
		if (add_alt(ps, rule, e, u->p[i].len) != 0)
			return -1;
	}
	return 0;
}

/* A cached class: the element it lowered to, found by its ranges. */
static int class_cached(parser *ps, const grv *r, uint64_t h, uint32_t *e)
{
	size_t j;

	if (!ps->clsmap.cap)
		return 0;
	for (j = htab_first(&ps->clsmap, h); ps->clsmap.s[j].used;
	     j = (j + 1) & (ps->clsmap.cap - 1)) {
		const uint32_t *ci = &ps->clsinfo[3 * ps->clsmap.s[j].id];

		if (ps->clsmap.s[j].hash == h && ci[1] == r->n &&
		    (r->n == 0 || memcmp(ps->clsr + ci[0], r->p,
					 r->n * 2 * sizeof *r->p) == 0)) {
			*e = ci[2];
			return 1;
		}
	}
	return 0;
}

static int class_cache(parser *ps, const grv *r, uint64_t h, uint32_t e)
{
	size_t need;

	if (ds_mul_sz(r->n, 2, &need) != 0 || ds_add_sz(need, ps->nclsr, &need) != 0 ||
	    need > DS_GRAMMAR_MAX_ELEMS)
		return perr(ps, ps->p, "character classes too large");
	if (ggrow(&ps->clsr, &ps->clsrcap, need, sizeof *ps->clsr) != 0 ||
	    ggrow(&ps->clsinfo, &ps->clscap, 3 * (ps->ncls + 1), sizeof *ps->clsinfo) != 0 ||
	    htab_add(&ps->clsmap, h, (uint32_t)ps->ncls) != 0)
		return oom(ps);
	if (r->n)
		memcpy(ps->clsr + ps->nclsr, r->p, r->n * 2 * sizeof *r->p);
	ps->clsinfo[3 * ps->ncls] = (uint32_t)ps->nclsr;
	ps->clsinfo[3 * ps->ncls + 1] = (uint32_t)r->n;
	ps->clsinfo[3 * ps->ncls + 2] = e;
	ps->ncls++;
	ps->nclsr = need;
	return 0;
}

/* The element for normalized ranges: a set, or a (cached) rule. */
static int class_elem(parser *ps, const grv *r, uint32_t *e)
{
	uint64_t h = fnv(r->p, r->n * 2 * sizeof *r->p, FNV0);
	uvec u = { 0 };
	uint32_t rule;
	int rc = -1;

	if (class_cached(ps, r, h, e))
		return 0;
	if (utf8_ranges(&u, r) != 0) {
		oom(ps);
		goto out;
	}
	useq_merge(&u);
	if (u.n <= 1 && (u.n == 0 || u.p[0].len == 1)) {
		gset empty = { { 0 } };

		if (set_id(ps, u.n ? &u.p[0].s[0] : &empty, e) != 0)
			goto out;
		*e = ge_make(GE_SET, *e);
	} else {
		if (gen_rule(ps, &rule) != 0 || lower_seqs(ps, &u, rule) != 0)
			goto out;
		*e = ge_make(GE_REF, rule);
	}
	rc = class_cache(ps, r, h, *e);
out:
	free(u.p);
	return rc;
}

static int parse_class(parser *ps, evec *v)
{
	const char *at = ps->p++;
	grv r = { 0 };
	int neg = 0, rc = -1;
	uint32_t e;

	if (ps->p < ps->end && *ps->p == '^')
		neg = 1, ps->p++;
	for (;;) {
		uint32_t lo, hi;

		if (ps->p >= ps->end || *ps->p == '\n') {
			perr(ps, at, "unterminated character class");
			goto out;
		}
		if (*ps->p == ']')
			break;
		if (parse_char(ps, &lo) != 0)
			goto out;
		hi = lo;
		if (ps->p + 1 < ps->end && ps->p[0] == '-' && ps->p[1] != ']') {
			const char *rat = ps->p++;

			if (parse_char(ps, &hi) != 0)
				goto out;
			if (hi < lo) {
				perr(ps, rat, "range end below its start");
				goto out;
			}
		}
		if (r.n >= DS_GRAMMAR_MAX_ELEMS || grv_add(&r, lo, hi) != 0) {
			oom(ps);
			goto out;
		}
	}
	ps->p++;
	if (grv_norm(&r, neg) != 0) {
		oom(ps);
		goto out;
	}
	if (class_elem(ps, &r, &e) != 0 || evec_push(ps, v, e) != 0)
		goto out;
	rc = 0;
out:
	free(r.p);
	return rc;
}

/* '.': every scalar value. */
static int parse_any(parser *ps, evec *v)
{
	uint32_t all[4] = { 0, 0xd7ff, 0xe000, 0x10ffff }, e;
	grv r = { .p = all, .n = 2 };

	ps->p++;
	if (class_elem(ps, &r, &e) != 0)
		return -1;
	return evec_push(ps, v, e);
}

/* ---- repetition ------------------------------------------------------------------ */

static int parse_count(parser *ps, uint32_t *out)
{
	const char *at = ps->p;
	uint32_t v = 0;

	if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
		return perr(ps, at, "expected a repetition count");
	while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
		v = v * 10 + (uint32_t)(*ps->p++ - '0');
		if (v > DS_GRAMMAR_MAX_REPEAT)
			return perr(ps, at, "repetition count over %u",
				    DS_GRAMMAR_MAX_REPEAT);
	}
	*out = v;
	return 0;
}

/* {m}, {m,}, {m,n}: *max UINT32_MAX when open. */
static int parse_braces(parser *ps, uint32_t *min, uint32_t *max)
{
	const char *at = ps->p++;

	skip_space(ps, 0);
	if (parse_count(ps, min) != 0)
		return -1;
	skip_space(ps, 0);
	*max = *min;
	if (ps->p < ps->end && *ps->p == ',') {
		ps->p++;
		skip_space(ps, 0);
		*max = UINT32_MAX;
		if (ps->p < ps->end && *ps->p != '}' && parse_count(ps, max) != 0)
			return -1;
		skip_space(ps, 0);
	}
	if (ps->p >= ps->end || *ps->p != '}')
		return perr(ps, at, "expected '}' after a repetition count");
	ps->p++;
	if (*max < *min)
		return perr(ps, at, "repetition {%u,%u}: maximum below minimum",
			    *min, *max);
	return 0;
}

/* r ::= x r | */
static int star_rule(parser *ps, uint32_t x, uint32_t *ref)
{
	uint32_t r, e[2];

	if (gen_rule(ps, &r) != 0)
		return -1;
	e[0] = x;
	e[1] = ge_make(GE_REF, r);
	if (add_alt(ps, r, e, 2) != 0 || add_alt(ps, r, NULL, 0) != 0)
		return -1;
	*ref = e[1];
	return 0;
}

/* r1 ... rk, ri ::= x r(i+1) | , rk ::= x | */
static int chain_rule(parser *ps, uint32_t x, uint32_t k, uint32_t *ref)
{
	uint32_t first = 0, i, id;

	for (i = 0; i < k; i++) {
		if (gen_rule(ps, &id) != 0)
			return -1;
		if (i == 0)
			first = id;
	}
	for (i = 0; i < k; i++) {
		uint32_t e[2] = { x, ge_make(GE_REF, first + i + 1) };

		if (add_alt(ps, first + i, e, i + 1 < k ? 2 : 1) != 0 ||
		    add_alt(ps, first + i, NULL, 0) != 0)
			return -1;
	}
	*ref = ge_make(GE_REF, first);
	return 0;
}

/* Append piece to seq under the quantifier at ps->p (if any). */
static int quantify(parser *ps, evec *seq, evec *piece)
{
	uint32_t min = 1, max = 1, x, ref, i;
	char q = ps->p < ps->end ? *ps->p : '\0';

	if (q == '*' || q == '+' || q == '?') {
		ps->p++;
		min = q == '+';
		max = q == '?' ? 1 : UINT32_MAX;
	} else if (q == '{') {
		if (parse_braces(ps, &min, &max) != 0)
			return -1;
	} else {
		for (i = 0; i < piece->n; i++)
			if (evec_push(ps, seq, piece->p[i]) != 0)
				return -1;
		return 0;
	}
	if (piece->n == 0)
		return 0;
	if (piece->n == 1) {
		x = piece->p[0];
	} else {
		uint32_t g;

		if (gen_rule(ps, &g) != 0 || add_alt(ps, g, piece->p, piece->n) != 0)
			return -1;
		x = ge_make(GE_REF, g);
	}
	for (i = 0; i < min; i++)
		if (evec_push(ps, seq, x) != 0)
			return -1;
	if (max == min)
		return 0;
	if (max == UINT32_MAX) {
		if (star_rule(ps, x, &ref) != 0)
			return -1;
	} else if (chain_rule(ps, x, max - min, &ref) != 0) {
		return -1;
	}
	return evec_push(ps, seq, ref);
}

/* ---- rules ------------------------------------------------------------------------ */

static int parse_alts(parser *ps, uint32_t rule, int nested);

static int parse_name(parser *ps, const char **name, uint32_t *len)
{
	const char *s = ps->p;

	while (ps->p < ps->end && is_name_char(*ps->p))
		ps->p++;
	if (ps->p == s)
		return -1;
	if (ps->p - s > 256)
		return perr(ps, s, "rule name longer than 256 bytes");
	*name = s;
	*len = (uint32_t)(ps->p - s);
	return 0;
}

static int parse_group(parser *ps, evec *piece)
{
	const char *at = ps->p++;
	uint32_t g;

	if (ps->nest >= DS_GRAMMAR_MAX_NEST)
		return perr(ps, at, "parentheses nested deeper than %u",
			    DS_GRAMMAR_MAX_NEST);
	ps->nest++;
	if (gen_rule(ps, &g) != 0 || parse_alts(ps, g, 1) != 0)
		return -1;
	ps->nest--;
	if (ps->p >= ps->end || *ps->p != ')')
		return perr(ps, at, "unclosed '('");
	ps->p++;
	return evec_push(ps, piece, ge_make(GE_REF, g));
}

static int parse_ref(parser *ps, evec *piece)
{
	const char *name;
	uint32_t len, id;

	if (parse_name(ps, &name, &len) != 0)
		return unexpected(ps);
	if (rule_by_name(ps, name, len, &id) != 0)
		return -1;
	return evec_push(ps, piece, ge_make(GE_REF, id));
}

static int parse_item(parser *ps, evec *piece)
{
	switch (*ps->p) {
	case '"': return parse_literal(ps, piece);
	case '[': return parse_class(ps, piece);
	case '.': return parse_any(ps, piece);
	case '(': return parse_group(ps, piece);
	default:  return parse_ref(ps, piece);
	}
}

static int parse_seq(parser *ps, uint32_t rule, int nested)
{
	evec seq = { 0 }, piece = { 0 };
	int rc = -1;

	for (;;) {
		skip_space(ps, nested);
		if (ps->p >= ps->end || *ps->p == '|' || *ps->p == ')' ||
		    *ps->p == '\n')
			break;
		piece.n = 0;
		if (parse_item(ps, &piece) != 0)
			goto out;
		skip_space(ps, nested);
		if (quantify(ps, &seq, &piece) != 0)
			goto out;
	}
	rc = add_alt(ps, rule, seq.p, seq.n);
out:
	free(seq.p);
	free(piece.p);
	return rc;
}

/* At the end of a line outside parentheses: does the rule go on with a
 * line starting with '|'?  If so, move there. */
static int continues(parser *ps)
{
	const char *save = ps->p;

	skip_space(ps, 1);
	if (ps->p < ps->end && *ps->p == '|')
		return 1;
	ps->p = save;
	return 0;
}

static int parse_alts(parser *ps, uint32_t rule, int nested)
{
	for (;;) {
		if (parse_seq(ps, rule, nested) != 0)
			return -1;
		skip_space(ps, nested);
		if (ps->p < ps->end && *ps->p == '|') {
			ps->p++;
			skip_space(ps, 1);
			continue;
		}
		if (!nested && continues(ps)) {
			ps->p++;
			skip_space(ps, 1);
			continue;
		}
		return 0;
	}
}

static int parse_rule(parser *ps)
{
	const char *at = ps->p, *name;
	uint32_t len, id;

	if (parse_name(ps, &name, &len) != 0)
		return perr(ps, at, "expected a rule name");
	skip_space(ps, 0);
	if (ps->end - ps->p < 3 || memcmp(ps->p, "::=", 3) != 0)
		return perr(ps, ps->p, "expected '::=' after '%.*s'", (int)len, name);
	ps->p += 3;
	if (rule_by_name(ps, name, len, &id) != 0)
		return -1;
	if (ps->rules[id].defined)
		return perr(ps, at, "rule '%.*s' defined twice", (int)len, name);
	ps->rules[id].defined = 1;
	ps->rules[id].at = at;
	ps->cur = id;
	if (parse_alts(ps, id, 0) != 0)
		return -1;
	if (ps->p < ps->end && *ps->p == ')')
		return perr(ps, ps->p, "unmatched ')'");
	if (ps->p < ps->end && *ps->p != '\n')
		return unexpected(ps);
	return 0;
}

/* ---- checks ---------------------------------------------------------------------- */

static const prule *owner(const parser *ps, uint32_t r)
{
	return &ps->rules[ps->rules[r].owner];
}

static int check_defined(parser *ps)
{
	size_t i;

	for (i = 0; i < ps->nrules; i++) {
		const prule *r = &ps->rules[i];

		if (!r->defined)
			return perr(ps, r->at, "undefined rule '%.*s'",
				    (int)r->name_len, r->name);
	}
	return 0;
}

static int set_empty(const ds_grammar *g, uint32_t e)
{
	const gset *s = &g->sets[ge_arg(e)];

	return !(s->w[0] | s->w[1] | s->w[2] | s->w[3]);
}

/* The rules that can end having matched (productive: sets are fine when
 * not empty) or having matched nothing (nullable: no set is): out[r]. */
static int rules_ending(const ds_grammar *g, int productive, uint8_t *null)
{
	/* Worklist: an alternative's count of elements not yet known to
	 * end; occurrences of each rule as an element, by rule. */
	uint32_t *cnt = NULL, *occ_off = NULL, *occ = NULL, *work = NULL;
	uint32_t *alt_rule = NULL, r, k, nwork = 0;
	int rc = -1;

	cnt = calloc(g->n_alts + 1, sizeof *cnt);
	alt_rule = calloc(g->n_alts + 1, sizeof *alt_rule);
	occ_off = calloc((size_t)g->n_rules + 2, sizeof *occ_off);
	occ = calloc(g->n_elems + 1, sizeof *occ);
	work = calloc((size_t)g->n_rules + 1, sizeof *work);
	if (!cnt || !alt_rule || !occ_off || !occ || !work)
		goto out;
	for (r = 0; r < g->n_rules; r++)
		for (k = g->rule_alt[r]; k < g->rule_alt[r + 1]; k++) {
			const uint32_t *e;

			alt_rule[k] = r;
			for (e = g->elems + g->alt_start[k]; ge_kind(*e) != GE_END; e++) {
				if (ge_kind(*e) == GE_SET && productive && !set_empty(g, *e))
					continue;
				cnt[k]++;
				if (ge_kind(*e) == GE_REF)
					occ_off[ge_arg(*e) + 2]++;
			}
		}
	for (r = 0; r < g->n_rules; r++)
		occ_off[r + 2] += occ_off[r + 1];
	for (k = 0; k < g->n_alts; k++) {
		const uint32_t *e;

		for (e = g->elems + g->alt_start[k]; ge_kind(*e) != GE_END; e++)
			if (ge_kind(*e) == GE_REF)
				occ[occ_off[ge_arg(*e) + 1]++] = k;
		if (cnt[k] == 0 && !null[alt_rule[k]])
			null[alt_rule[k]] = 1, work[nwork++] = alt_rule[k];
	}
	while (nwork) {
		r = work[--nwork];
		for (k = occ_off[r]; k < occ_off[r + 1]; k++) {
			uint32_t a = occ[k];

			if (--cnt[a] == 0 && !null[alt_rule[a]])
				null[alt_rule[a]] = 1, work[nwork++] = alt_rule[a];
		}
	}
	rc = 0;
out:
	free(cnt);
	free(alt_rule);
	free(occ_off);
	free(occ);
	free(work);
	return rc;
}

/* Drop the alternatives that can never end (an element that matches no
 * text: an empty set, a rule all of whose alternatives are such): they
 * add nothing to the language, and without them every live parse can be
 * completed, so the matcher never follows a dead end.  The start rule
 * must be left with something. */
static int prune_unproductive(parser *ps, ds_grammar *g)
{
	uint8_t *prod = calloc((size_t)g->n_rules + 1, 1);
	uint32_t *elems = malloc(((size_t)g->n_elems + 1) * sizeof *elems);
	uint32_t r, k, n = 0, na = 0;
	int rc = -1;

	if (prod == NULL || elems == NULL || rules_ending(g, 1, prod) != 0) {
		oom(ps);
		goto out;
	}
	if (!prod[g->root]) {
		const prule *o = &ps->rules[g->root];

		perr(ps, o->at, "rule '%.*s' matches no text", (int)o->name_len, o->name);
		goto out;
	}
	for (r = 0; r < g->n_rules; r++) {
		uint32_t first = na;

		for (k = g->rule_alt[r]; k < g->rule_alt[r + 1]; k++) {
			const uint32_t *e = g->elems + g->alt_start[k], *p;

			for (p = e; ge_kind(*p) != GE_END; p++)
				if ((ge_kind(*p) == GE_REF && !prod[ge_arg(*p)]) ||
				    (ge_kind(*p) == GE_SET && set_empty(g, *p)))
					break;
			if (ge_kind(*p) != GE_END)
				continue;
			g->alt_start[na++] = n;
			memcpy(elems + n, e, (size_t)(p - e + 1) * sizeof *e);
			n += (uint32_t)(p - e + 1);
		}
		g->rule_alt[r] = first;
	}
	g->rule_alt[g->n_rules] = na;
	g->n_alts = na;
	g->n_elems = n;
	free(g->elems);
	g->elems = elems;
	elems = NULL;
	rc = 0;
out:
	free(prod);
	free(elems);
	return rc;
}

/* Left edges: r -> s when s is referenced before anything that consumes a
 * byte; `tail` when that reference is the last element.  Kept in CSR form,
 * the tail bit in the top bit of the target. */
typedef struct ledges {
	uint32_t *off, *to;
} ledges;

static int left_edges(const ds_grammar *g, const uint8_t *null, ledges *le)
{
	uint32_t r, k, n = 0, pass;

	le->off = calloc((size_t)g->n_rules + 1, sizeof *le->off);
	le->to = calloc(g->n_elems + 1, sizeof *le->to);
	if (le->off == NULL || le->to == NULL)
		return -1;
	for (pass = 0; pass < 2; pass++)
		for (r = 0, n = 0; r < g->n_rules; r++) {
			if (pass)
				le->off[r] = n;
			for (k = g->rule_alt[r]; k < g->rule_alt[r + 1]; k++) {
				const uint32_t *e;

				for (e = g->elems + g->alt_start[k]; ge_kind(*e) == GE_REF; e++) {
					uint32_t tail = ge_kind(e[1]) == GE_END ? 0x80000000u : 0;

					if (pass)
						le->to[n] = ge_arg(*e) | tail;
					n++;
					if (!null[ge_arg(*e)])
						break;
				}
			}
		}
	le->off[g->n_rules] = n;
	return 0;
}

/* Tarjan's strongly connected components, iteratively: comp[r]. */
static int scc(const ds_grammar *g, const ledges *le, uint32_t *comp)
{
	uint32_t n = g->n_rules, r, ncomp = 0, idx = 0, sp = 0, cs = 0;
	uint32_t *index = malloc(((size_t)n + 1) * sizeof *index);
	uint32_t *low = malloc(((size_t)n + 1) * sizeof *low);
	uint32_t *stk = malloc(((size_t)n + 1) * sizeof *stk);
	uint32_t *cstk = malloc(((size_t)n + 1) * sizeof *cstk);
	uint32_t *cedge = malloc(((size_t)n + 1) * sizeof *cedge);
	uint8_t *on = calloc((size_t)n + 1, 1);
	int rc = -1;

	if (!index || !low || !stk || !cstk || !cedge || !on)
		goto out;
	for (r = 0; r < n; r++)
		index[r] = UINT32_MAX;
	for (r = 0; r < n; r++) {
		if (index[r] != UINT32_MAX)
			continue;
		cstk[cs] = r, cedge[cs++] = le->off[r];
		index[r] = low[r] = idx++, stk[sp++] = r, on[r] = 1;
		while (cs) {
			uint32_t v = cstk[cs - 1];

			if (cedge[cs - 1] < le->off[v + 1]) {
				uint32_t w = le->to[cedge[cs - 1]++] & 0x7fffffffu;

				if (index[w] == UINT32_MAX) {
					index[w] = low[w] = idx++;
					stk[sp++] = w, on[w] = 1;
					cstk[cs] = w, cedge[cs++] = le->off[w];
				} else if (on[w] && index[w] < low[v]) {
					low[v] = index[w];
				}
				continue;
			}
			if (low[v] == index[v]) {
				uint32_t w;

				do {
					w = stk[--sp];
					on[w] = 0;
					comp[w] = ncomp;
				} while (w != v);
				ncomp++;
			}
			cs--;
			if (cs && low[v] < low[cstk[cs - 1]])
				low[cstk[cs - 1]] = low[v];
		}
	}
	rc = 0;
out:
	free(index);
	free(low);
	free(stk);
	free(cstk);
	free(cedge);
	free(on);
	return rc;
}

static int check_left_recursion(parser *ps, const ds_grammar *g)
{
	uint8_t *null = calloc((size_t)g->n_rules + 1, 1);
	uint32_t *comp = calloc((size_t)g->n_rules + 1, sizeof *comp);
	ledges le = { 0 };
	uint32_t r, k;
	int rc = -1;

	if (null == NULL || comp == NULL || rules_ending(g, 0, null) != 0 ||
	    left_edges(g, null, &le) != 0 || scc(g, &le, comp) != 0) {
		oom(ps);
		goto out;
	}
	for (r = 0; r < g->n_rules; r++)
		for (k = le.off[r]; k < le.off[r + 1]; k++) {
			uint32_t to = le.to[k];
			const prule *o = owner(ps, r);

			if ((to & 0x80000000u) || comp[to] != comp[r])
				continue;
			perr(ps, o->at, "rule '%.*s' is left-recursive",
			     (int)o->name_len, o->name);
			goto out;
		}
	rc = 0;
out:
	free(null);
	free(comp);
	free(le.off);
	free(le.to);
	return rc;
}

/* ---- lowering -------------------------------------------------------------------- */

static int flatten(parser *ps, ds_grammar *g)
{
	size_t n, i;
	uint32_t *fill;

	if (ds_add_sz(ps->nir, ps->nalts, &n) != 0 || n > DS_GRAMMAR_MAX_ELEMS)
		return perr(ps, ps->p, "more than %u grammar elements",
			    DS_GRAMMAR_MAX_ELEMS);
	g->n_rules = (uint32_t)ps->nrules;
	g->n_alts = (uint32_t)ps->nalts;
	g->n_elems = (uint32_t)n;
	g->elems = malloc((n + 1) * sizeof *g->elems);
	g->alt_start = malloc((ps->nalts + 1) * sizeof *g->alt_start);
	g->rule_alt = calloc(ps->nrules + 2, sizeof *g->rule_alt);
	fill = calloc(ps->nrules + 1, sizeof *fill);
	if (!g->elems || !g->alt_start || !g->rule_alt || !fill) {
		free(fill);
		return oom(ps);
	}
	for (i = 0; i < ps->nalts; i++)
		g->rule_alt[ps->alts[i].rule + 1]++;
	for (i = 0; i < ps->nrules; i++)
		g->rule_alt[i + 1] += g->rule_alt[i];
	for (i = 0, n = 0; i < ps->nalts; i++) {
		const palt *a = &ps->alts[i];
		uint32_t k = g->rule_alt[a->rule] + fill[a->rule]++;

		g->alt_start[k] = (uint32_t)n;
		if (a->len)
			memcpy(g->elems + n, ps->ir + a->off, a->len * sizeof *g->elems);
		n += a->len;
		g->elems[n++] = ge_make(GE_END, 0);
	}
	free(fill);
	g->sets = ps->sets;
	g->n_sets = (uint32_t)ps->nsets;
	ps->sets = NULL;
	return 0;
}

/* Refine the partition of the 256 bytes by every set. */
static void byte_classes(ds_grammar *g)
{
	uint32_t s, b, n = 1;

	memset(g->cls, 0, sizeof g->cls);
	for (s = 0; s < g->n_sets; s++) {
		int16_t in[256], out[256];
		uint32_t m = 0;

		memset(in, -1, sizeof in);
		memset(out, -1, sizeof out);
		for (b = 0; b < 256; b++) {
			int16_t *t = gset_has(&g->sets[s], b) ? in : out;

			if (t[g->cls[b]] < 0)
				t[g->cls[b]] = (int16_t)m++;
			g->cls[b] = (uint8_t)t[g->cls[b]];
		}
		n = m;
	}
	g->n_cls = n;
	for (b = 256; b-- > 0;)
		g->rep[g->cls[b]] = (uint8_t)b;
}

static void parser_free(parser *ps)
{
	free(ps->rules);
	free(ps->alts);
	free(ps->ir);
	free(ps->sets);
	free(ps->names.s);
	free(ps->setmap.s);
	free(ps->clsmap.s);
	free(ps->clsr);
	free(ps->clsinfo);
}

static int parse_all(parser *ps)
{
	for (;;) {
		skip_space(ps, 1);
		if (ps->p >= ps->end)
			return 0;
		if (parse_rule(ps) != 0)
			return -1;
	}
}

int gbnf_parse(const char *text, size_t len, const char *root,
	       ds_grammar **out, ds_err *err)
{
	parser ps = { .text = text, .end = text + len, .p = text, .err = err };
	ds_grammar *g = NULL;
	uint32_t rid;

	*out = NULL;
	if (len > DS_GRAMMAR_MAX_TEXT)
		return ds_errf(err, "grammar text over %zu bytes", DS_GRAMMAR_MAX_TEXT);
	if (parse_all(&ps) != 0 || check_defined(&ps) != 0)
		goto fail;
	ps.p = text;
	rid = find_rule(&ps, root, strlen(root));
	if (rid == UINT32_MAX) {
		perr(&ps, text, "no rule '%s'", root);
		goto fail;
	}
	g = calloc(1, sizeof *g);
	if (g == NULL) {
		oom(&ps);
		goto fail;
	}
	g->root = rid;
	if (flatten(&ps, g) != 0 || prune_unproductive(&ps, g) != 0 ||
	    check_left_recursion(&ps, g) != 0)
		goto fail;
	byte_classes(g);
	parser_free(&ps);
	*out = g;
	return 0;
fail:
	parser_free(&ps);
	ds_grammar_free(g);
	gerr_oneline(err);
	return -1;
}

int ds_grammar_parse(const char *text, size_t len, ds_grammar **g, ds_err *err)
{
	return gbnf_parse(text, len, "root", g, err);
}

void ds_grammar_free(ds_grammar *g)
{
	if (g == NULL)
		return;
	free(g->elems);
	free(g->alt_start);
	free(g->rule_alt);
	free(g->sets);
	free(g);
}

void ds_grammar_get_info(const ds_grammar *g, ds_grammar_info *info)
{
	*info = (ds_grammar_info){ .rules = g->n_rules, .elems = g->n_elems,
		.byte_sets = g->n_sets, .byte_classes = g->n_cls };
}

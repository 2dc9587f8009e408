/*
 * regex.c - a JSON schema "pattern" (ECMAScript regex, unicode mode) as
 * grammar text for the JSON string contents that match it.
 *
 * Supported: literals and escapes, classes [...] [^...] with ranges,
 * \d \w \s and their negations, '.', groups ( ) (?: ) (?<name> ),
 * alternation, quantifiers * + ? {n} {n,} {n,m} (lazy forms alike: the
 * language is the same), '^' at the start and '$' at the end of a
 * top-level alternative.  A pattern is not anchored by default: an end
 * without its anchor may have any text there.  Refused with an error
 * naming them: backreferences, lookaround, \b \B, \p{...}, \c, anchors
 * elsewhere.
 *
 * A character matched by the regex is its decoded value; in the JSON text
 * it is written raw, or escaped when JSON requires it (" \ and controls),
 * in JSON.stringify's spelling (gjson_cpset).
 */
#include "gint.h"

#define RX_MAX_LEN   65536
#define RX_MAX_DEPTH 64

typedef struct rx {
	const char *s, *p, *end;
	gbuf *out;
	int icase;
	const char *any;
	ds_err *err;
	unsigned depth;
} rx;

static int rerr(rx *r, const char *what)
{
	return ds_errf(r->err, "%s at offset %zu", what, (size_t)(r->p - r->s));
}

static int more(const rx *r)
{
	return r->p < r->end;
}

/* ---- JSON string forms of a code point set ------------------------------- */

static int class_text(gbuf *out, const grv *r)
{
	size_t i;

	gbuf_put(out, "[", 1);
	for (i = 0; i < r->n; i++) {
		gbuf_class_cp(out, r->p[2 * i]);
		if (r->p[2 * i + 1] != r->p[2 * i]) {
			gbuf_put(out, "-", 1);
			gbuf_class_cp(out, r->p[2 * i + 1]);
		}
	}
	return gbuf_put(out, "]", 1);
}

static int in_set(const uint32_t *r, size_t n, uint32_t cp)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (cp >= r[2 * i] && cp <= r[2 * i + 1])
			return 1;
	return 0;
}

/* The controls JSON.stringify writes \u00XX, high nibble hi, in the set:
 * "h" then a class of low nibbles; 0 when none. */
static int hex_controls(gbuf *out, const uint32_t *r, size_t n, unsigned hi,
			int *first)
{
	static const char hex[] = "0123456789abcdef";
	char cls[40];
	size_t k = 0;
	unsigned lo;

	for (lo = 0; lo < 16; lo++) {
		uint32_t c = hi << 4 | lo;

		if (c == 8 || c == 9 || c == 10 || c == 12 || c == 13 ||
		    !in_set(r, n, c))
			continue;
		cls[k++] = hex[lo];
	}
	if (k == 0)
		return 0;
	gbuf_puts(out, *first ? "" : " | ");
	*first = 0;
	return gbuf_printf(out, "\"%u\" [%.*s]", hi, (int)k, cls);
}

/* r minus the controls, '"' and '\\': what JSON writes raw. */
static int raw_part(const uint32_t *r, size_t n, grv *raw)
{
	static const uint32_t cut[] = { '"', '\\' };
	size_t i, k;

	for (i = 0; i < n; i++) {
		uint32_t lo = r[2 * i] < 0x20 ? 0x20 : r[2 * i], hi = r[2 * i + 1];

		for (k = 0; k < 2 && lo <= hi; k++) {
			if (cut[k] < lo || cut[k] > hi)
				continue;
			if (lo < cut[k] && grv_add(raw, lo, cut[k] - 1) != 0)
				return -1;
			lo = cut[k] + 1;
		}
		if (lo <= hi && grv_add(raw, lo, hi) != 0)
			return -1;
	}
	return 0;
}

/* After the backslash of an escape: the letters of \" \\ \b \t \n \f
 * \r in the set, then u00XX for the other controls. */
static void escapes(gbuf *out, const uint32_t *r, size_t n)
{
	static const struct { uint32_t cp; const char *cls; } named[] = {
		{ '"', "\"" }, { '\\', "\\\\" }, { 8, "b" }, { 9, "t" },
		{ 10, "n" }, { 12, "f" }, { 13, "r" },
	};
	gbuf cls = { 0 }, u = { 0 };
	size_t i;
	int first = 1;

	for (i = 0; i < sizeof named / sizeof named[0]; i++)
		if (in_set(r, n, named[i].cp))
			gbuf_puts(&cls, named[i].cls);
	hex_controls(&u, r, n, 0, &first);
	hex_controls(&u, r, n, 1, &first);
	gbuf_puts(out, "\"\\\\\" ( ");
	if (cls.n)
		gbuf_printf(out, "[%s]", cls.p);
	if (u.n)
		gbuf_printf(out, "%s\"u00\" ( %s )", cls.n ? " | " : "", u.p);
	gbuf_puts(out, " )");
	gbuf_free(&cls);
	gbuf_free(&u);
}

/* Whether the set has a character JSON writes escaped. */
static int has_escaped(const uint32_t *r, size_t n)
{
	return r[0] < 0x20 || in_set(r, n, '"') || in_set(r, n, '\\');
}

int gjson_cpset(gbuf *out, const uint32_t *r, size_t n)
{
	grv raw = { 0 };
	int esc = n && has_escaped(r, n);

	if (raw_part(r, n, &raw) != 0) {
		free(raw.p);
		out->oom = 1;
		return -1;
	}
	gbuf_puts(out, "(");
	if (raw.n)
		class_text(out, &raw);
	if (raw.n && esc)
		gbuf_puts(out, " | ");
	if (esc)
		escapes(out, r, n);
	if (!raw.n && !esc)
		gbuf_puts(out, "[]");
	free(raw.p);
	return gbuf_puts(out, ")");
}

/* ---- parsing ------------------------------------------------------------ */

static int hexv(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int hexn(rx *r, unsigned n, uint32_t *v)
{
	unsigned i;

	*v = 0;
	for (i = 0; i < n; i++) {
		int h = more(r) ? hexv(*r->p) : -1;

		if (h < 0)
			return rerr(r, "bad hex escape");
		*v = *v << 4 | (uint32_t)h;
		r->p++;
	}
	return 0;
}

/* \u: HHHH (a surrogate pair of two escapes is one character) or {H...}. */
static int esc_u(rx *r, uint32_t *cp)
{
	if (more(r) && *r->p == '{') {
		uint32_t v = 0;
		int n = 0;

		r->p++;
		while (more(r) && hexv(*r->p) >= 0 && n < 8) {
			v = v << 4 | (uint32_t)hexv(*r->p++);
			n++;
		}
		if (n == 0 || !more(r) || *r->p != '}' || v > 0x10ffff)
			return rerr(r, "bad \\u{...} escape");
		r->p++;
		*cp = v;
	} else if (hexn(r, 4, cp) != 0) {
		return -1;
	}
	if (*cp >= 0xd800 && *cp <= 0xdbff && r->end - r->p >= 6 &&
	    r->p[0] == '\\' && r->p[1] == 'u') {
		const char *save = r->p;
		uint32_t lo;

		r->p += 2;
		if (hexn(r, 4, &lo) == 0 && lo >= 0xdc00 && lo <= 0xdfff) {
			*cp = 0x10000 + ((*cp - 0xd800) << 10) + (lo - 0xdc00);
			return 0;
		}
		r->p = save;
	}
	if (*cp >= 0xd800 && *cp <= 0xdfff)
		return rerr(r, "lone surrogate");
	return 0;
}

static int add_class_escape(grv *set, char c)
{
	static const uint32_t digit[] = { '0', '9' };
	static const uint32_t word[] = { '0', '9', 'A', 'Z', '_', '_', 'a', 'z' };
	static const uint32_t space[] = { 9, 13, ' ', ' ', 0xa0, 0xa0, 0x1680, 0x1680,
		0x2000, 0x200a, 0x2028, 0x2029, 0x202f, 0x202f, 0x205f, 0x205f,
		0x3000, 0x3000, 0xfeff, 0xfeff };
	const uint32_t *t;
	size_t n, i;
	grv tmp = { 0 };
	int neg = c == 'D' || c == 'W' || c == 'S';

	switch (c | 0x20) {
	case 'd': t = digit, n = 1; break;
	case 'w': t = word, n = 4; break;
	default: t = space, n = 10; break;
	}
	for (i = 0; i < n; i++)
		if (grv_add(&tmp, t[2 * i], t[2 * i + 1]) != 0)
			goto oom;
	if (neg && grv_norm(&tmp, 1) != 0)
		goto oom;
	for (i = 0; i < tmp.n; i++)
		if (grv_add(set, tmp.p[2 * i], tmp.p[2 * i + 1]) != 0)
			goto oom;
	free(tmp.p);
	return 0;
oom:
	free(tmp.p);
	return -1;
}

enum { ESC_CHAR, ESC_CLASS };

/* After a backslash: one character (*cp) or a class escape added to set. */
static int parse_escape(rx *r, int in_class, grv *set, uint32_t *cp)
{
	char c;

	if (!more(r))
		return rerr(r, "'\\' at the end");
	c = *r->p++;
	switch (c) {
	case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
		if (add_class_escape(set, c) != 0)
			return rerr(r, "out of memory");
		return ESC_CLASS;
	case 't': *cp = 9; return ESC_CHAR;
	case 'n': *cp = 10; return ESC_CHAR;
	case 'v': *cp = 11; return ESC_CHAR;
	case 'f': *cp = 12; return ESC_CHAR;
	case 'r': *cp = 13; return ESC_CHAR;
	case 'x': return hexn(r, 2, cp) != 0 ? -1 : ESC_CHAR;
	case 'u': return esc_u(r, cp) != 0 ? -1 : ESC_CHAR;
	case '0':
		if (more(r) && *r->p >= '0' && *r->p <= '9')
			return rerr(r, "octal escape unsupported");
		*cp = 0;
		return ESC_CHAR;
	case 'b':
		if (in_class) {
			*cp = 8;
			return ESC_CHAR;
		}
		return rerr(r, "word boundary '\\b' unsupported");
	case 'B': return rerr(r, "'\\B' unsupported");
	case 'c': return rerr(r, "control escape '\\c' unsupported");
	case 'k': return rerr(r, "backreference unsupported");
	case 'p': case 'P': return rerr(r, "Unicode property escape unsupported");
	default:
		break;
	}
	if (c >= '1' && c <= '9')
		return rerr(r, "backreference unsupported");
	if (strchr("^$\\.*+?()[]{}|/", c) != NULL || (in_class && c == '-')) {
		*cp = (uint32_t)c;
		return ESC_CHAR;
	}
	return rerr(r, "unknown escape");
}

/* One literal character (UTF-8) at r->p. */
static int raw_char(rx *r, uint32_t *cp)
{
	size_t n = gutf8_dec((const uint8_t *)r->p, (size_t)(r->end - r->p), cp);

	if (n == 0)
		return rerr(r, "invalid UTF-8");
	r->p += n;
	return 0;
}

static int fold_case(grv *set)
{
	size_t i, n = set->n;

	for (i = 0; i < n; i++) {
		uint32_t lo = set->p[2 * i], hi = set->p[2 * i + 1], c;

		for (c = lo < 'A' ? 'A' : lo; c <= hi && c <= 'z'; c++) {
			uint32_t o = c >= 'a' ? c - 32 : c >= 'A' && c <= 'Z' ? c + 32 : 0;

			if (((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) &&
			    grv_add(set, o, o) != 0)
				return -1;
		}
	}
	return 0;
}

static int class_item(rx *r, grv *set, uint32_t *cp)
{
	if (*r->p != '\\')
		return raw_char(r, cp) != 0 ? -1 : ESC_CHAR;
	r->p++;
	return parse_escape(r, 1, set, cp);
}

static int parse_class(rx *r, grv *set)
{
	int neg = 0;

	r->p++;
	if (more(r) && *r->p == '^')
		neg = 1, r->p++;
	for (;;) {
		uint32_t lo, hi;
		int k;

		if (!more(r))
			return rerr(r, "unterminated class");
		if (*r->p == ']')
			break;
		k = class_item(r, set, &lo);
		if (k < 0)
			return -1;
		if (k == ESC_CLASS)
			continue;
		hi = lo;
		if (r->end - r->p >= 2 && r->p[0] == '-' && r->p[1] != ']') {
			r->p++;
			k = class_item(r, set, &hi);
			if (k < 0)
				return -1;
			if (k == ESC_CLASS || hi < lo)
				return rerr(r, "bad class range");
		}
		if (grv_add(set, lo, hi) != 0)
			return rerr(r, "out of memory");
	}
	r->p++;
	if ((r->icase && fold_case(set) != 0) || grv_norm(set, neg) != 0)
		return rerr(r, "out of memory");
	return 0;
}

/* An atom that is a character set: class, '.', escape or literal. */
static int parse_set(rx *r, grv *set)
{
	uint32_t cp;
	int k;

	if (*r->p == '[')
		return parse_class(r, set);
	if (*r->p == '.') {
		r->p++;
		if (grv_add(set, 10, 10) != 0 || grv_add(set, 13, 13) != 0 ||
		    grv_add(set, 0x2028, 0x2029) != 0 || grv_norm(set, 1) != 0)
			return rerr(r, "out of memory");
		return 0;
	}
	if (*r->p == '\\') {
		r->p++;
		k = parse_escape(r, 0, set, &cp);
		if (k < 0)
			return -1;
		if (k == ESC_CHAR && grv_add(set, cp, cp) != 0)
			return rerr(r, "out of memory");
	} else {
		if (raw_char(r, &cp) != 0)
			return -1;
		if (grv_add(set, cp, cp) != 0)
			return rerr(r, "out of memory");
	}
	if ((r->icase && fold_case(set) != 0) || grv_norm(set, 0) != 0)
		return rerr(r, "out of memory");
	return 0;
}

static int parse_alt(rx *r, int top);

static int parse_group(rx *r)
{
	r->p++;
	if (r->end - r->p >= 2 && r->p[0] == '?') {
		if (r->p[1] == ':') {
			r->p += 2;
		} else if (r->p[1] == '<' && r->end - r->p >= 3 &&
			   r->p[2] != '=' && r->p[2] != '!') {
			r->p += 2;
			while (more(r) && *r->p != '>')
				r->p++;
			if (!more(r))
				return rerr(r, "unterminated group name");
			r->p++;
		} else {
			return rerr(r, "lookaround unsupported");
		}
	}
	if (++r->depth > RX_MAX_DEPTH)
		return rerr(r, "groups nested too deep");
	gbuf_puts(r->out, "(");
	if (parse_alt(r, 0) != 0)
		return -1;
	r->depth--;
	if (!more(r) || *r->p != ')')
		return rerr(r, "unclosed '('");
	r->p++;
	return gbuf_puts(r->out, ")");
}

static int count(rx *r, uint32_t *v)
{
	*v = 0;
	if (!more(r) || *r->p < '0' || *r->p > '9')
		return -1;
	while (more(r) && *r->p >= '0' && *r->p <= '9') {
		*v = *v * 10 + (uint32_t)(*r->p++ - '0');
		if (*v > DS_GRAMMAR_MAX_REPEAT)
			return rerr(r, "repetition count too large");
	}
	return 0;
}

static int parse_quant(rx *r)
{
	uint32_t lo, hi;
	char q = *r->p;

	if (q == '*' || q == '+' || q == '?') {
		r->p++;
		gbuf_put(r->out, &q, 1);
	} else {
		r->p++;
		if (count(r, &lo) != 0)
			return rerr(r, "lone '{'");
		hi = lo;
		if (more(r) && *r->p == ',') {
			r->p++;
			hi = UINT32_MAX;
			if (more(r) && *r->p != '}' && count(r, &hi) != 0)
				return rerr(r, "bad repetition");
		}
		if (!more(r) || *r->p != '}' || hi < lo)
			return rerr(r, "bad repetition");
		r->p++;
		if (hi == UINT32_MAX)
			gbuf_printf(r->out, "{%u,}", lo);
		else
			gbuf_printf(r->out, "{%u,%u}", lo, hi);
	}
	if (more(r) && *r->p == '?')
		r->p++;
	if (more(r) && strchr("*+?{", *r->p) != NULL)
		return rerr(r, "nothing to repeat");
	return 0;
}

static int parse_atom(rx *r)
{
	char c = *r->p;
	grv set = { 0 };
	int rc;

	if (c == '(')
		return parse_group(r);
	if (c == '^' || c == '$')
		return rerr(r, "anchor inside the pattern unsupported");
	if (c == '*' || c == '+' || c == '?')
		return rerr(r, "nothing to repeat");
	if (c == '{' || c == '}' || c == ']')
		return rerr(r, c == '{' ? "lone '{'" : "lone bracket");
	rc = parse_set(r, &set);
	if (rc == 0)
		rc = gjson_cpset(r->out, set.p, set.n);
	free(set.p);
	return rc;
}

/* A sequence; at the top level with its anchors. */
static int parse_seq(rx *r, int top)
{
	int start = 0;

	if (top && more(r) && *r->p == '^')
		start = 1, r->p++;
	gbuf_puts(r->out, "(");
	if (top && !start)
		gbuf_printf(r->out, " %s*", r->any);
	while (more(r) && *r->p != '|' && *r->p != ')') {
		if (top && *r->p == '$' &&
		    (r->p + 1 == r->end || r->p[1] == '|')) {
			r->p++;
			return gbuf_puts(r->out, " )");
		}
		gbuf_puts(r->out, " ");
		if (parse_atom(r) != 0)
			return -1;
		if (more(r) && strchr("*+?{", *r->p) != NULL && parse_quant(r) != 0)
			return -1;
	}
	if (top)
		gbuf_printf(r->out, " %s*", r->any);
	return gbuf_puts(r->out, " )");
}

static int parse_alt(rx *r, int top)
{
	for (;;) {
		if (parse_seq(r, top) != 0)
			return -1;
		if (!more(r) || *r->p != '|')
			return 0;
		r->p++;
		gbuf_puts(r->out, " | ");
	}
}

int gregex_emit(gbuf *out, const char *re, size_t len, int icase,
		const char *any, ds_err *err)
{
	rx r = { .s = re, .p = re, .end = re + len, .out = out, .icase = icase,
		 .any = any, .err = err };

	if (len > RX_MAX_LEN)
		return ds_errf(err, "longer than %d bytes", RX_MAX_LEN);
	gbuf_puts(out, "(");
	if (parse_alt(&r, 1) != 0)
		return -1;
	if (more(&r))
		return rerr(&r, "unmatched ')'");
	if (gbuf_puts(out, ")") != 0)
		return ds_errf(err, "grammar too large");
	return 0;
}

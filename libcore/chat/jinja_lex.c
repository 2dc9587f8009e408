/*
 * jinja_lex.c - the Jinja lexer (jinja_int.h): template text to tokens,
 * with Jinja2's whitespace rules as transformers configures them.
 *
 * Source: "\r\n" and "\r" read as "\n" and one final newline dropped
 * (keep_trailing_newline off; ds_jinja_parse does that before).
 * Whitespace: "{%-", "{{-", "{#-" strip all whitespace before the tag,
 * "-%}", "-}}", "-#}" all after it; trim_blocks drops the first newline
 * after "%}" and "#}"; lstrip_blocks drops the spaces and tabs (any
 * whitespace but newlines) between a line's start and "{%" or "{#"; "{%+"
 * and "+%}" turn those two off for a tag.  Whitespace is Python's
 * (Unicode) throughout, as Jinja2's regexps.  Inside a tag, "}}" and "%}"
 * end it only outside brackets.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_int.h"

/* ---- tokens ---------------------------------------------------------------- */

/* Operators, longest first so that "//" is not read as "/" "/". */
const char *const jj_ops[JJ_NOPS] = {
	"//", "**", "==", "!=", ">=", "<=",
	"+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}",
	">", "<", "=", ".", ":", "|", ",", ";",
};

typedef struct lexer {
	jj_env *e;
	const char *src;
	size_t n, pos;
	jj_tok *toks;
	size_t ntok, cap;
	bool line_starting; /* the last tag's match ended with a newline */
	char stack[JINJA_MAX_NEST]; /* open brackets */
	int depth;
} lexer;

static jj_tok *push_tok(lexer *L, int type, size_t pos)
{
	jj_tok *t;

	if (L->ntok == L->cap) {
		size_t cap = L->cap < 64 ? 64 : L->cap * 2;
		jj_tok *n = jj_alloc_n(L->e, cap, sizeof *n);

		if (L->ntok > 0)
			memcpy(n, L->toks, L->ntok * sizeof *n);
		L->toks = n;
		L->cap = cap;
	}
	t = &L->toks[L->ntok++];
	t->t = (uint8_t)type;
	t->pos = (uint32_t)pos;
	return t;
}

static bool starts(const lexer *L, size_t at, const char *s)
{
	size_t n = strlen(s);

	return at <= L->n && L->n - at >= n && memcmp(L->src + at, s, n) == 0;
}

/* Emit text [a, b) as data, with the strip rules of the tag that follows:
 * sign '-' strips all trailing whitespace; lstrip (a block or comment tag
 * without '+') drops the last line's whitespace-only start. */
static void emit_data(lexer *L, size_t a, size_t b, char sign, bool lstrip)
{
	const char *s = L->src + a;
	size_t n = b - a;

	if (sign == '-') {
		n -= jj_space_before(s, n);
	} else if (sign != '+' && lstrip) {
		size_t l = n;

		while (l > 0 && s[l - 1] != '\n')
			l--;
		if ((l > 0 || L->line_starting) && l < n &&
		    jj_space_at(s + l, n - l) == n - l)
			n = l;
	}
	if (n > 0) {
		jj_tok *t = push_tok(L, TK_DATA, a);

		t->s = s;
		t->n = n;
	}
}

/* After a tag's closing delimiter at L->pos: "-" skips all whitespace,
 * trim skips one newline. */
static void after_tag(lexer *L, bool minus, bool trim)
{
	size_t st = L->pos;

	if (minus)
		L->pos += jj_space_at(L->src + L->pos, L->n - L->pos);
	else if (trim && L->pos < L->n && L->src[L->pos] == '\n')
		L->pos++;
	L->line_starting = L->pos > st && L->src[L->pos - 1] == '\n';
}

static void lex_comment(lexer *L, size_t tag)
{
	size_t i = L->pos;

	for (; i + 1 < L->n; i++) {
		if (L->src[i] == '+' && starts(L, i + 1, "#}")) {
			L->pos = i + 3;
			after_tag(L, false, false);
			return;
		}
		if (L->src[i] == '-' && starts(L, i + 1, "#}")) {
			L->pos = i + 3;
			after_tag(L, true, false);
			return;
		}
		if (L->src[i] == '#' && L->src[i + 1] == '}') {
			L->pos = i + 2;
			after_tag(L, false, true);
			return;
		}
	}
	jj_fail(L->e, (uint32_t)tag, "missing end of comment tag");
}

/* "{%[-+]? raw %}" at tag: its end, or 0. */
static size_t raw_begin(lexer *L, size_t tag, bool *minus)
{
	size_t i = tag + 2;

	if (i < L->n && (L->src[i] == '-' || L->src[i] == '+'))
		i++;
	i += jj_space_at(L->src + i, L->n - i);
	if (!starts(L, i, "raw"))
		return 0;
	i += 3;
	i += jj_space_at(L->src + i, L->n - i);
	*minus = starts(L, i, "-%}");
	if (*minus)
		return i + 3;
	return starts(L, i, "%}") ? i + 2 : 0;
}

/* The raw block's text up to "{% endraw %}" is data. */
static void lex_raw(lexer *L, size_t tag)
{
	for (size_t i = L->pos; i + 1 < L->n; i++) {
		size_t j = i + 2;
		char sign = 0;

		if (L->src[i] != '{' || L->src[i + 1] != '%')
			continue;
		if (j < L->n && (L->src[j] == '-' || L->src[j] == '+'))
			sign = L->src[j++];
		j += jj_space_at(L->src + j, L->n - j);
		if (!starts(L, j, "endraw"))
			continue;
		j += 6;
		j += jj_space_at(L->src + j, L->n - j);
		if (starts(L, j, "+%}") || starts(L, j, "-%}") ||
		    starts(L, j, "%}")) {
			char close = L->src[j];

			emit_data(L, L->pos, i, sign, true);
			L->pos = j + (close == '%' ? 2 : 3);
			after_tag(L, close == '-', close == '%');
			return;
		}
	}
	jj_fail(L->e, (uint32_t)tag, "missing end of raw directive");
}

/* ---- tokens inside tags ------------------------------------------------------ */

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

static void put_cp(lexer *L, jj_buf *b, uint32_t c, size_t at)
{
	char u[4];

	if (c > 0x10ffff || (c >= 0xd800 && c < 0xe000))
		jj_fail(L->e, (uint32_t)at, "string escape U+%04X is not a character",
			(unsigned)c);
	jj_buf_add(L->e, b, u, jj_utf8_put(u, c));
}

/* One escape after the backslash at s[*i] (Python's unicode-escape codec,
 * which Jinja2 decodes string literals with). */
static void lex_escape(lexer *L, jj_buf *b, size_t *i, size_t end)
{
	const char *s = L->src;
	size_t at = *i, k = at + 1;
	char c = s[k];
	int digits = 0;
	uint32_t v = 0;
	static const char simple[] = "\\\\''\"\"a\ab\bf\fn\nr\rt\tv\v";

	for (size_t j = 0; simple[j] != '\0'; j += 2)
		if (c == simple[j]) {
			jj_buf_addc(L->e, b, simple[j + 1]);
			*i = k + 1;
			return;
		}
	if (c == '\n') { /* a continued line */
		*i = k + 1;
		return;
	}
	if (c >= '0' && c <= '7') {
		while (digits < 3 && k < end && s[k] >= '0' && s[k] <= '7')
			v = v * 8 + (uint32_t)(s[k++] - '0'), digits++;
		put_cp(L, b, v, at);
		*i = k;
		return;
	}
	if (c == 'x' || c == 'u' || c == 'U') {
		int want = c == 'x' ? 2 : c == 'u' ? 4 : 8;

		k++;
		for (; digits < want; digits++, k++) {
			int h = k < end ? hexval(s[k]) : -1;

			if (h < 0)
				jj_fail(L->e, (uint32_t)at, "truncated \\%c escape", c);
			v = v * 16 + (uint32_t)h;
		}
		put_cp(L, b, v, at);
		*i = k;
		return;
	}
	if (c == 'N')
		jj_fail(L->e, (uint32_t)at, "\\N{...} escapes are not supported");
	/* anything else stays as written; a non-ASCII character after the
	 * backslash reads as its Python escape (Jinja2 escapes the source
	 * to ASCII before decoding) */
	jj_buf_addc(L->e, b, '\\');
	if ((unsigned char)c >= 0x80) {
		size_t j = k;
		uint32_t cp = jj_utf8_next(s, end, &j);

		if (cp < 0x100)
			jj_buf_addf(L->e, b, "x%02x", cp);
		else if (cp < 0x10000)
			jj_buf_addf(L->e, b, "u%04x", cp);
		else
			jj_buf_addf(L->e, b, "U%08x", cp);
		*i = j;
		return;
	}
	*i = k;
}

static void lex_string(lexer *L)
{
	const char *s = L->src;
	size_t at = L->pos, i = at + 1;
	char q = s[at];
	jj_buf b = { 0 };
	jj_tok *t;

	for (;;) {
		size_t run = i;

		while (i < L->n && s[i] != q && s[i] != '\\')
			i++;
		jj_buf_add(L->e, &b, s + run, i - run);
		if (i < L->n && s[i] == q)
			break;
		if (i + 1 >= L->n)
			jj_fail(L->e, (uint32_t)at, "unterminated string");
		lex_escape(L, &b, &i, L->n);
	}
	t = push_tok(L, TK_STRING, at);
	t->s = b.p != NULL ? b.p : "";
	t->n = b.n;
	L->pos = i + 1;
}

static bool isdig(char c) { return c >= '0' && c <= '9'; }

/* Digits with single underscores between them ("1_000"); the end. */
static size_t digits_end(const lexer *L, size_t i)
{
	if (i >= L->n || !isdig(L->src[i]))
		return i;
	while (i < L->n) {
		if (isdig(L->src[i]))
			i++;
		else if (L->src[i] == '_' && i + 1 < L->n && isdig(L->src[i + 1]))
			i++;
		else
			break;
	}
	return i;
}

static void lex_number(lexer *L)
{
	size_t at = L->pos, i = digits_end(L, at), j;
	char buf[64];
	size_t bn = 0;
	bool is_float = false;
	jj_tok *t;

	if (i + 1 < L->n && L->src[i] == '.' && isdig(L->src[i + 1])) {
		i = digits_end(L, i + 1);
		is_float = true;
	}
	if (i < L->n && (L->src[i] == 'e' || L->src[i] == 'E')) {
		j = i + 1;
		if (j < L->n && (L->src[j] == '+' || L->src[j] == '-'))
			j++;
		if (j < L->n && isdig(L->src[j])) {
			i = digits_end(L, j);
			is_float = true;
		}
	}
	for (j = at; j < i; j++)
		if (L->src[j] != '_') {
			if (bn + 1 >= sizeof buf)
				jj_fail(L->e, (uint32_t)at, "number too long");
			buf[bn++] = L->src[j];
		}
	buf[bn] = '\0';
	if (is_float) {
		t = push_tok(L, TK_FLOAT, at);
		t->f = strtod(buf, NULL);
	} else {
		unsigned long long v = 0;

		if (bn > 1 && buf[0] == '0')
			for (j = 1; j < bn; j++)
				if (buf[j] != '0')
					jj_fail(L->e, (uint32_t)at,
						"leading zeros in a number");
		for (j = 0; j < bn; j++) {
			if (v > (unsigned long long)INT64_MAX / 10 ||
			    v * 10 + (unsigned)(buf[j] - '0') > (unsigned long long)INT64_MAX)
				jj_fail(L->e, (uint32_t)at,
					"integer too large (past 64 bits)");
			v = v * 10 + (unsigned)(buf[j] - '0');
		}
		t = push_tok(L, TK_INT, at);
		t->i = (int64_t)v;
	}
	L->pos = i;
}

static bool isname0(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool isname(char c) { return isname0(c) || isdig(c); }

static void lex_op(lexer *L)
{
	size_t at = L->pos;
	size_t k;

	for (k = 0; k < JJ_NOPS; k++)
		if (starts(L, at, jj_ops[k]))
			break;
	if (k == JJ_NOPS) {
		size_t j = at;
		uint32_t c = jj_utf8_next(L->src, L->n, &j);

		jj_fail(L->e, (uint32_t)at, c < 0x80 && c >= 0x20 ?
			"unexpected character '%c'" : "unexpected character U+%04X",
			c);
	}
	const char *op = jj_ops[k];
	if (strchr("([{", op[0]) != NULL && op[1] == '\0') {
		if (L->depth >= JINJA_MAX_NEST)
			jj_fail(L->e, (uint32_t)at, "brackets nested too deep");
		L->stack[L->depth++] = op[0] == '(' ? ')' : op[0] == '[' ? ']' : '}';
	} else if (strchr(")]}", op[0]) != NULL && op[1] == '\0') {
		if (L->depth == 0)
			jj_fail(L->e, (uint32_t)at, "unexpected '%c'", op[0]);
		if (L->stack[L->depth - 1] != op[0])
			jj_fail(L->e, (uint32_t)at, "unexpected '%c', expected '%c'",
				op[0], L->stack[L->depth - 1]);
		L->depth--;
	}
	push_tok(L, TK_OP, at)->op = (uint8_t)k;
	L->pos = at + strlen(op);
}

/* The tokens of a block or variable tag up to its end. */
static void lex_tag(lexer *L, bool block, size_t tag)
{
	L->depth = 0;
	for (;;) {
		char c;

		L->pos += jj_space_at(L->src + L->pos, L->n - L->pos);
		if (L->pos >= L->n)
			jj_fail(L->e, (uint32_t)tag, "unexpected end of template: "
				"%s tag not closed", block ? "block" : "variable");
		if (L->depth == 0) {
			bool plus = block && starts(L, L->pos, "+%}");
			bool minus = starts(L, L->pos, block ? "-%}" : "-}}");
			bool end = starts(L, L->pos, block ? "%}" : "}}");

			if (plus || minus || end) {
				push_tok(L, block ? TK_BLOCK_END : TK_VAR_END, L->pos);
				L->pos += end ? 2 : 3;
				after_tag(L, minus, block && end);
				return;
			}
		}
		c = L->src[L->pos];
		if (c == '\'' || c == '"') {
			lex_string(L);
		} else if (isdig(c)) {
			lex_number(L);
		} else if (isname0(c)) {
			size_t at = L->pos;
			jj_tok *t;

			while (L->pos < L->n && isname(L->src[L->pos]))
				L->pos++;
			t = push_tok(L, TK_NAME, at);
			t->s = L->src + at;
			t->n = L->pos - at;
		} else {
			lex_op(L);
		}
	}
}

/* The first "{{", "{%" or "{#" at or after from, or n. */
static size_t next_tag(const lexer *L, size_t from)
{
	const char *p = L->src + from, *end = L->src + L->n;

	while (p + 1 < end) {
		const char *q = memchr(p, '{', (size_t)(end - p - 1));

		if (q == NULL)
			break;
		if (q[1] == '{' || q[1] == '%' || q[1] == '#')
			return (size_t)(q - L->src);
		p = q + 1;
	}
	return L->n;
}

static void lex(lexer *L)
{
	while (L->pos < L->n) {
		size_t tag = next_tag(L, L->pos);
		char kind, sign = 0;
		bool minus = false;
		size_t rawend;

		if (tag == L->n) {
			emit_data(L, L->pos, L->n, 0, false);
			break;
		}
		kind = L->src[tag + 1];
		if (tag + 2 < L->n && (L->src[tag + 2] == '-' || L->src[tag + 2] == '+'))
			sign = L->src[tag + 2];
		emit_data(L, L->pos, tag, sign, kind != '{');
		L->pos = tag + 2 + (sign != 0);
		if (kind == '%' && (rawend = raw_begin(L, tag, &minus)) != 0) {
			L->pos = rawend;
			after_tag(L, minus, false);
			lex_raw(L, tag);
		} else if (kind == '#') {
			lex_comment(L, tag);
		} else {
			push_tok(L, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, tag);
			lex_tag(L, kind == '%', tag);
		}
	}
	push_tok(L, TK_EOF, L->n);
}

jj_tok *jj_lex(jj_env *e, const char *src, size_t n)
{
	lexer L = { .e = e, .src = src, .n = n, .line_starting = true };

	lex(&L);
	return L.toks;
}

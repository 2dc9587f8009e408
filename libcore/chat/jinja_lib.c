/*
 * jinja_lib.c - the Jinja interpreter's builtins (jinja_int.h): filters,
 * tests, the methods of str, dict and list, and the global functions,
 * each with the semantics of Jinja2 3.1 and Python 3 that transformers
 * renders with (its tojson, raise_exception and strftime_now included).
 *
 * Case mapping is ICU's: upper() and lower() full mappings (as Python's),
 * title() and capitalize() a code point at a time.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include "jinja_int.h"

/* ---- arguments --------------------------------------------------------------- */

/* Bind a's arguments to params (NULL-terminated names): out[i] the value
 * (JV_UNDEF if not given); returns the mask of those given. */
static unsigned bind(jj_rt *rt, jj_args *a, const char *const *params, jv *out)
{
	size_t np = 0;
	unsigned mask = 0;

	while (params[np] != NULL)
		out[np] = jv_undef(NULL), np++;
	if (a->npos > np)
		jj_fail(&rt->env, a->at, "%s takes at most %zu argument(s), %zu given",
			a->what, np, a->npos);
	for (size_t i = 0; i < a->npos; i++) {
		out[i] = a->pos[i];
		mask |= 1u << i;
	}
	for (size_t k = 0; k < a->nkw; k++) {
		size_t i;

		for (i = 0; i < np; i++)
			if (strlen(params[i]) == a->kwlen[k] &&
			    memcmp(params[i], a->kwn[k], a->kwlen[k]) == 0)
				break;
		if (i == np)
			jj_fail(&rt->env, a->at, "%s got an unexpected keyword argument '%.*s'",
				a->what, (int)a->kwlen[k], a->kwn[k]);
		if (mask & (1u << i))
			jj_fail(&rt->env, a->at, "%s got multiple values for argument '%s'",
				a->what, params[i]);
		out[i] = a->kwv[k];
		mask |= 1u << i;
	}
	return mask;
}

static void no_args(jj_rt *rt, jj_args *a)
{
	static const char *const none[] = { NULL };

	bind(rt, a, none, NULL);
}

static jv want_str(jj_rt *rt, jv v, jj_args *a, const char *what)
{
	if (v.t != JV_STR)
		jj_fail(&rt->env, a->at, "%s: %s must be a string, not %s", a->what,
			what, jv_type_name(v));
	return v;
}

static int64_t want_int(jj_rt *rt, jv v, jj_args *a, const char *what)
{
	if (v.t != JV_INT && v.t != JV_BOOL)
		jj_fail(&rt->env, a->at, "%s: %s must be an integer, not %s", a->what,
			what, jv_type_name(v));
	return v.t == JV_INT ? v.u.i : v.u.b;
}

static jv str_of(jj_rt *rt, jv v, jj_args *a)
{
	return jv_to_str(&rt->env, v, a->at);
}

/* ---- strings ------------------------------------------------------------------ */

static jj_buf newbuf(void)
{
	return (jj_buf){ .max = JINJA_MAX_OUT };
}

static jv buf_val(jj_buf *b)
{
	return b->p != NULL ? jj_buf_jv(b) : jv_str("", 0);
}

/* ICU full case mapping of s (upper: 1, lower: 0). */
static jv case_full(jj_rt *rt, jv s, int upper)
{
	UErrorCode st = U_ZERO_ERROR;
	int32_t n16 = 0, m16, n8 = 0;
	UChar *a, *b;
	char *o;

	if (s.u.s.n > JINJA_MAX_OUT / 4)
		jj_fail(&rt->env, UINT32_MAX, "string too long to change case");
	a = jj_alloc_n(&rt->env, s.u.s.n + 1, sizeof *a);
	u_strFromUTF8(a, (int32_t)s.u.s.n + 1, &n16, s.u.s.p, (int32_t)s.u.s.n, &st);
	if (U_FAILURE(st))
		jj_fail(&rt->env, UINT32_MAX, "case mapping: %s", u_errorName(st));
	/* a full mapping grows a string at most threefold */
	b = jj_alloc_n(&rt->env, (size_t)n16 * 3 + 1, sizeof *b);
	m16 = upper ? u_strToUpper(b, n16 * 3 + 1, a, n16, "", &st) :
		u_strToLower(b, n16 * 3 + 1, a, n16, "", &st);
	o = jj_alloc(&rt->env, (size_t)m16 * 3 + 1);
	u_strToUTF8(o, m16 * 3 + 1, &n8, b, m16, &st);
	if (U_FAILURE(st))
		jj_fail(&rt->env, UINT32_MAX, "case mapping: %s", u_errorName(st));
	return jv_str(o, (size_t)n8);
}

static void put_cp(jj_rt *rt, jj_buf *b, uint32_t c)
{
	char u[4];

	jj_buf_add(&rt->env, b, u, jj_utf8_put(u, c));
}

/* Python's str.title(): a cased character after a cased one lowered,
 * any other titled. */
static jv str_title(jj_rt *rt, jv s)
{
	jj_buf b = newbuf();
	bool prev_cased = false;
	size_t i = 0;

	while (i < s.u.s.n) {
		uint32_t c = jj_utf8_next(s.u.s.p, s.u.s.n, &i);

		put_cp(rt, &b, (uint32_t)(prev_cased ? u_tolower((UChar32)c) :
					  u_totitle((UChar32)c)));
		prev_cased = u_hasBinaryProperty((UChar32)c, UCHAR_CASED);
	}
	return buf_val(&b);
}

/* Python's str.capitalize(): the first character titled, the rest
 * lowered. */
static jv str_capitalize(jj_rt *rt, jv s)
{
	jj_buf b = newbuf();
	size_t i = 0;

	while (i < s.u.s.n) {
		bool first = i == 0;
		uint32_t c = jj_utf8_next(s.u.s.p, s.u.s.n, &i);

		put_cp(rt, &b, (uint32_t)(first ? u_totitle((UChar32)c) :
					  u_tolower((UChar32)c)));
	}
	return buf_val(&b);
}

/* Jinja2's title filter: each word (after "-", whitespace, "(", "{", "[",
 * "<") its first character upper, the rest lower. */
static jv filter_title_str(jj_rt *rt, jv s)
{
	jj_buf b = newbuf();
	bool start = true;
	size_t i = 0;

	while (i < s.u.s.n) {
		size_t st = i;
		uint32_t c = jj_utf8_next(s.u.s.p, s.u.s.n, &i);
		bool delim = jj_isspace(c) || (c < 0x80 && strchr("-({[<", (int)c) != NULL);
		jv one;

		if (delim) {
			put_cp(rt, &b, c);
			start = true;
			continue;
		}
		one = case_full(rt, jv_str(s.u.s.p + st, i - st), start);
		jj_buf_add(&rt->env, &b, one.u.s.p, one.u.s.n);
		start = false;
	}
	return buf_val(&b);
}

static bool in_chars(jv chars, uint32_t c)
{
	size_t i = 0;

	while (i < chars.u.s.n)
		if (jj_utf8_next(chars.u.s.p, chars.u.s.n, &i) == c)
			return true;
	return false;
}

/* str.strip/lstrip/rstrip: chars a string, or undefined/None for
 * whitespace. */
static jv strip(jv s, jv chars, bool left, bool right)
{
	const char *p = s.u.s.p;
	size_t a = 0, b = s.u.s.n;
	bool ws = chars.t != JV_STR;

	while (left && a < b) {
		size_t j = a;
		uint32_t c = jj_utf8_next(p, b, &j);

		if (ws ? !jj_isspace(c) : !in_chars(chars, c))
			break;
		a = j;
	}
	while (right && b > a) {
		size_t st = b - 1, j;

		while (st > a && ((unsigned char)p[st] & 0xc0) == 0x80)
			st--;
		j = st;
		uint32_t c = jj_utf8_next(p, b, &j);
		if (ws ? !jj_isspace(c) : !in_chars(chars, c))
			break;
		b = st;
	}
	return jv_str(p + a, b - a);
}

static const char *find_bytes(const char *h, size_t hn, const char *nd, size_t nn)
{
	if (nn == 0)
		return h;
	return memmem(h, hn, nd, nn);
}

/* Python's str.replace(old, new, count) (count < 0: all). */
static jv replace(jj_rt *rt, jv s, jv old, jv new, int64_t count)
{
	jj_buf b = newbuf();
	size_t i = 0;

	if (old.u.s.n == 0) { /* between every character, and at both ends */
		while (count != 0) {
			jj_buf_add(&rt->env, &b, new.u.s.p, new.u.s.n);
			count--;
			if (i >= s.u.s.n)
				break;
			size_t st = i;
			jj_utf8_next(s.u.s.p, s.u.s.n, &i);
			jj_buf_add(&rt->env, &b, s.u.s.p + st, i - st);
		}
		jj_buf_add(&rt->env, &b, s.u.s.p + i, s.u.s.n - i);
		return buf_val(&b);
	}
	while (count != 0) {
		const char *f = find_bytes(s.u.s.p + i, s.u.s.n - i, old.u.s.p, old.u.s.n);

		if (f == NULL)
			break;
		jj_buf_add(&rt->env, &b, s.u.s.p + i, (size_t)(f - s.u.s.p) - i);
		jj_buf_add(&rt->env, &b, new.u.s.p, new.u.s.n);
		i = (size_t)(f - s.u.s.p) + old.u.s.n;
		count--;
	}
	jj_buf_add(&rt->env, &b, s.u.s.p + i, s.u.s.n - i);
	return buf_val(&b);
}

/* str.split(sep, maxsplit) with sep a string */
static jv split_sep(jj_rt *rt, jv s, jv sep, int64_t max, jj_args *a)
{
	jv out = jv_list_new(&rt->env, 0);
	size_t i = 0;

	if (sep.u.s.n == 0)
		jj_fail(&rt->env, a->at, "empty separator");
	for (;;) {
		const char *f = max != 0 ? memmem(s.u.s.p + i, s.u.s.n - i,
						  sep.u.s.p, sep.u.s.n) : NULL;

		jj_count_iter(rt, 1, a->at);
		if (f == NULL) {
			jv_list_push(&rt->env, out, jv_str(s.u.s.p + i, s.u.s.n - i));
			return out;
		}
		jv_list_push(&rt->env, out, jv_str(s.u.s.p + i, (size_t)(f - s.u.s.p) - i));
		i = (size_t)(f - s.u.s.p) + sep.u.s.n;
		max--;
	}
}

/* str.split() on whitespace runs */
static jv split_ws(jj_rt *rt, jv s, int64_t max, jj_args *a)
{
	jv out = jv_list_new(&rt->env, 0);
	const char *p = s.u.s.p;
	size_t n = s.u.s.n, i = 0;

	for (;;) {
		size_t st;

		i += jj_space_at(p + i, n - i);
		if (i >= n)
			return out;
		jj_count_iter(rt, 1, a->at);
		if (max == 0) { /* the rest, its trailing whitespace kept */
			jv_list_push(&rt->env, out, jv_str(p + i, n - i));
			return out;
		}
		st = i;
		while (i < n) {
			size_t j = i;

			if (jj_isspace(jj_utf8_next(p, n, &j)))
				break;
			i = j;
		}
		jv_list_push(&rt->env, out, jv_str(p + st, i - st));
		max--;
	}
}

/* str.rsplit(sep, maxsplit) */
static jv rsplit(jj_rt *rt, jv s, jv sep, int64_t max, jj_args *a)
{
	jv parts, out;
	size_t n, first;

	if (max < 0)
		return sep.t == JV_STR ? split_sep(rt, s, sep, -1, a) : split_ws(rt, s, -1, a);
	parts = sep.t == JV_STR ? split_sep(rt, s, sep, -1, a) : split_ws(rt, s, -1, a);
	n = parts.u.l->n;
	if ((uint64_t)max + 1 >= n)
		return parts;
	first = n - (size_t)max; /* parts [0, first) join into one */
	out = jv_list_new(&rt->env, (size_t)max + 1);
	if (sep.t == JV_STR) {
		const char *end = parts.u.l->v[first - 1].u.s.p +
				  parts.u.l->v[first - 1].u.s.n;

		jv_list_push(&rt->env, out, jv_str(s.u.s.p, (size_t)(end - s.u.s.p)));
	} else {
		const char *st = parts.u.l->v[first].u.s.p;
		jv head = jv_str(s.u.s.p, (size_t)(st - s.u.s.p));

		/* its leading whitespace kept */
		jv_list_push(&rt->env, out, strip(head, jv_undef(NULL), false, true));
	}
	for (size_t i = first; i < n; i++)
		jv_list_push(&rt->env, out, parts.u.l->v[i]);
	return out;
}

/* Python's line boundaries for str.splitlines(): the length of the one at
 * s[i], or 0. */
static size_t line_break(const char *s, size_t n, size_t i)
{
	size_t j = i;
	uint32_t c = jj_utf8_next(s, n, &j);

	if (c == '\r' && j < n && s[j] == '\n')
		return j + 1 - i;
	if (c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c ||
	    c == 0x1d || c == 0x1e || c == 0x85 || c == 0x2028 || c == 0x2029)
		return j - i;
	return 0;
}

static jv splitlines(jj_rt *rt, jv s, bool keepends, uint32_t at)
{
	jv out = jv_list_new(&rt->env, 0);
	size_t i = 0, st = 0;

	while (i < s.u.s.n) {
		size_t br = line_break(s.u.s.p, s.u.s.n, i);

		if (br == 0) {
			jj_utf8_next(s.u.s.p, s.u.s.n, &i);
			continue;
		}
		jj_count_iter(rt, 1, at);
		jv_list_push(&rt->env, out, jv_str(s.u.s.p + st, i - st + (keepends ? br : 0)));
		i += br;
		st = i;
	}
	if (st < s.u.s.n)
		jv_list_push(&rt->env, out, jv_str(s.u.s.p + st, s.u.s.n - st));
	return out;
}

static bool has_prefix(jv s, jv p, bool suffix)
{
	if (p.u.s.n > s.u.s.n)
		return false;
	return memcmp(s.u.s.p + (suffix ? s.u.s.n - p.u.s.n : 0), p.u.s.p, p.u.s.n) == 0;
}

/* startswith/endswith: a string or a tuple of strings */
static jv starts_ends(jj_rt *rt, jv s, jj_args *a, bool suffix)
{
	static const char *const P[] = { "prefix", NULL };
	jv arg[1];

	bind(rt, a, P, arg);
	if (arg[0].t == JV_LIST && (arg[0].flags & JVF_TUPLE)) {
		for (size_t i = 0; i < arg[0].u.l->n; i++)
			if (has_prefix(s, want_str(rt, arg[0].u.l->v[i], a, "an item"), suffix))
				return jv_bool(true);
		return jv_bool(false);
	}
	return jv_bool(has_prefix(s, want_str(rt, arg[0], a, "the argument"), suffix));
}

/* ---- string methods ------------------------------------------------------------- */

enum {
	M_STRIP, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_SPLITLINES,
	M_STARTSWITH, M_ENDSWITH, M_REPLACE, M_UPPER, M_LOWER, M_TITLE,
	M_CAPITALIZE, M_FIND, M_RFIND, M_COUNT, M_JOIN, M_REMOVEPREFIX,
	M_REMOVESUFFIX,
	M_ITEMS, M_KEYS, M_VALUES, M_GET,
	M_LCOUNT, M_LINDEX,
	M_UNSAFE, /* what the immutable sandbox refuses: the ones after */
};

static const struct { const char *name; uint8_t type; uint8_t id; } METHODS[] = {
	{ "strip", JV_STR, M_STRIP }, { "lstrip", JV_STR, M_LSTRIP },
	{ "rstrip", JV_STR, M_RSTRIP }, { "split", JV_STR, M_SPLIT },
	{ "rsplit", JV_STR, M_RSPLIT }, { "splitlines", JV_STR, M_SPLITLINES },
	{ "startswith", JV_STR, M_STARTSWITH }, { "endswith", JV_STR, M_ENDSWITH },
	{ "replace", JV_STR, M_REPLACE }, { "upper", JV_STR, M_UPPER },
	{ "lower", JV_STR, M_LOWER }, { "title", JV_STR, M_TITLE },
	{ "capitalize", JV_STR, M_CAPITALIZE }, { "find", JV_STR, M_FIND },
	{ "rfind", JV_STR, M_RFIND }, { "count", JV_STR, M_COUNT },
	{ "join", JV_STR, M_JOIN }, { "removeprefix", JV_STR, M_REMOVEPREFIX },
	{ "removesuffix", JV_STR, M_REMOVESUFFIX },
	{ "items", JV_DICT, M_ITEMS }, { "keys", JV_DICT, M_KEYS },
	{ "values", JV_DICT, M_VALUES }, { "get", JV_DICT, M_GET },
	{ "count", JV_LIST, M_LCOUNT }, { "index", JV_LIST, M_LINDEX },
	{ "pop", JV_DICT, M_UNSAFE }, { "popitem", JV_DICT, M_UNSAFE },
	{ "setdefault", JV_DICT, M_UNSAFE }, { "update", JV_DICT, M_UNSAFE },
	{ "clear", JV_DICT, M_UNSAFE }, { "append", JV_LIST, M_UNSAFE },
	{ "extend", JV_LIST, M_UNSAFE }, { "insert", JV_LIST, M_UNSAFE },
	{ "pop", JV_LIST, M_UNSAFE }, { "remove", JV_LIST, M_UNSAFE },
	{ "reverse", JV_LIST, M_UNSAFE }, { "sort", JV_LIST, M_UNSAFE },
	{ "clear", JV_LIST, M_UNSAFE },
};
#define NMETHODS (sizeof METHODS / sizeof METHODS[0])

int jj_method_id(jv self, const char *name, size_t n)
{
	for (size_t i = 0; i < NMETHODS; i++)
		if (METHODS[i].type == self.t && strlen(METHODS[i].name) == n &&
		    memcmp(METHODS[i].name, name, n) == 0)
			return (int)i;
	return -1;
}

/* find/rfind/count of sub in s, in code points */
static jv find_sub(jj_rt *rt, jv s, jv sub, int id)
{
	const char *f = NULL;
	int64_t k = 0;

	if (id == M_COUNT) {
		size_t i = 0;

		if (sub.u.s.n == 0)
			return jv_int((int64_t)jj_utf8_len(s.u.s.p, s.u.s.n) + 1);
		while ((f = memmem(s.u.s.p + i, s.u.s.n - i, sub.u.s.p, sub.u.s.n)) != NULL) {
			k++;
			i = (size_t)(f - s.u.s.p) + sub.u.s.n;
		}
		return jv_int(k);
	}
	if (id == M_FIND) {
		f = find_bytes(s.u.s.p, s.u.s.n, sub.u.s.p, sub.u.s.n);
	} else {
		for (size_t i = s.u.s.n + 1; i-- > 0;)
			if (s.u.s.n - i >= sub.u.s.n &&
			    memcmp(s.u.s.p + i, sub.u.s.p, sub.u.s.n) == 0) {
				f = s.u.s.p + i;
				break;
			}
	}
	(void)rt;
	return jv_int(f == NULL ? -1 : (int64_t)jj_utf8_len(s.u.s.p, (size_t)(f - s.u.s.p)));
}

static jv join_items(jj_rt *rt, jv sep, jv items, jj_args *a, bool strict)
{
	jj_buf b = newbuf();

	for (size_t i = 0; i < items.u.l->n; i++) {
		jv it = items.u.l->v[i];

		if (i > 0)
			jj_buf_add(&rt->env, &b, sep.u.s.p, sep.u.s.n);
		if (strict && it.t != JV_STR)
			jj_fail(&rt->env, a->at, "sequence item %zu: expected str instance, "
				"%s found", i, jv_type_name(it));
		jv_str_to(&rt->env, &b, it, a->at);
	}
	return buf_val(&b);
}

static jv str_method(jj_rt *rt, jv s, int id, jj_args *a)
{
	static const char *const P_CHARS[] = { "chars", NULL };
	static const char *const P_SPLIT[] = { "sep", "maxsplit", NULL };
	static const char *const P_REPL[] = { "old", "new", "count", NULL };
	static const char *const P_SUB[] = { "sub", NULL };
	static const char *const P_KEEP[] = { "keepends", NULL };
	static const char *const P_IT[] = { "iterable", NULL };
	jv v[3];

	switch (id) {
	case M_STRIP:
	case M_LSTRIP:
	case M_RSTRIP:
		bind(rt, a, P_CHARS, v);
		if (v[0].t != JV_UNDEF && v[0].t != JV_NONE)
			want_str(rt, v[0], a, "chars");
		return strip(s, v[0], id != M_RSTRIP, id != M_LSTRIP);
	case M_SPLIT:
	case M_RSPLIT: {
		int64_t max = -1;

		bind(rt, a, P_SPLIT, v);
		if (v[1].t != JV_UNDEF)
			max = want_int(rt, v[1], a, "maxsplit");
		if (v[0].t != JV_UNDEF && v[0].t != JV_NONE)
			want_str(rt, v[0], a, "sep");
		else
			v[0] = jv_none();
		if (id == M_RSPLIT)
			return rsplit(rt, s, v[0], max, a);
		return v[0].t == JV_STR ? split_sep(rt, s, v[0], max, a) :
			split_ws(rt, s, max, a);
	}
	case M_SPLITLINES:
		bind(rt, a, P_KEEP, v);
		return splitlines(rt, s, jv_truthy(v[0]), a->at);
	case M_STARTSWITH:
	case M_ENDSWITH:
		return starts_ends(rt, s, a, id == M_ENDSWITH);
	case M_REPLACE: {
		unsigned m = bind(rt, a, P_REPL, v);

		if ((m & 3) != 3)
			jj_fail(&rt->env, a->at, "replace takes old and new");
		return replace(rt, s, want_str(rt, v[0], a, "old"),
			       want_str(rt, v[1], a, "new"),
			       (m & 4) ? want_int(rt, v[2], a, "count") : -1);
	}
	case M_UPPER:
	case M_LOWER:
		no_args(rt, a);
		return case_full(rt, s, id == M_UPPER);
	case M_TITLE:
		no_args(rt, a);
		return str_title(rt, s);
	case M_CAPITALIZE:
		no_args(rt, a);
		return str_capitalize(rt, s);
	case M_FIND:
	case M_RFIND:
	case M_COUNT:
		if (!(bind(rt, a, P_SUB, v) & 1))
			jj_fail(&rt->env, a->at, "%s takes a substring", a->what);
		return find_sub(rt, s, want_str(rt, v[0], a, "sub"), id);
	case M_JOIN:
		if (!(bind(rt, a, P_IT, v) & 1))
			jj_fail(&rt->env, a->at, "join takes an iterable");
		return join_items(rt, s, jj_iterate(rt, v[0], a->at), a, true);
	case M_REMOVEPREFIX:
	case M_REMOVESUFFIX:
		if (!(bind(rt, a, P_SUB, v) & 1))
			jj_fail(&rt->env, a->at, "%s takes a string", a->what);
		want_str(rt, v[0], a, "the argument");
		if (!has_prefix(s, v[0], id == M_REMOVESUFFIX))
			return s;
		return jv_str(s.u.s.p + (id == M_REMOVEPREFIX ? v[0].u.s.n : 0),
			      s.u.s.n - v[0].u.s.n);
	}
	jj_fail(&rt->env, a->at, "no method %s", a->what);
}

static jv items_of(jj_rt *rt, jv d)
{
	jv out = jv_list_new(&rt->env, d.u.d->n);

	for (size_t i = 0; i < d.u.d->n; i++) {
		jv t = jv_list_new(&rt->env, 2);

		t.flags = JVF_TUPLE;
		jv_list_push(&rt->env, t, d.u.d->k[i]);
		jv_list_push(&rt->env, t, d.u.d->v[i]);
		jv_list_push(&rt->env, out, t);
	}
	return out;
}

static jv dict_method(jj_rt *rt, jv d, int id, jj_args *a)
{
	static const char *const P_GET[] = { "key", "default", NULL };
	jv v[2], out;

	switch (id) {
	case M_ITEMS:
		no_args(rt, a);
		return items_of(rt, d);
	case M_KEYS:
		no_args(rt, a);
		return jj_iterate(rt, d, a->at);
	case M_VALUES:
		no_args(rt, a);
		out = jv_list_new(&rt->env, d.u.d->n);
		for (size_t i = 0; i < d.u.d->n; i++)
			jv_list_push(&rt->env, out, d.u.d->v[i]);
		return out;
	case M_GET: {
		jv *got;

		if (!(bind(rt, a, P_GET, v) & 1))
			jj_fail(&rt->env, a->at, "get takes a key");
		got = jv_dict_get(d, v[0]);
		if (got != NULL)
			return *got;
		return v[1].t == JV_UNDEF ? jv_none() : v[1];
	}
	}
	jj_fail(&rt->env, a->at, "no method %s", a->what);
}

static jv list_method(jj_rt *rt, jv l, int id, jj_args *a)
{
	static const char *const P_X[] = { "x", NULL };
	jv v[1];
	int64_t k = 0;

	if (!(bind(rt, a, P_X, v) & 1))
		jj_fail(&rt->env, a->at, "%s takes one argument", a->what);
	for (size_t i = 0; i < l.u.l->n; i++)
		if (jv_eq(l.u.l->v[i], v[0])) {
			if (id == M_LINDEX)
				return jv_int((int64_t)i);
			k++;
		}
	if (id == M_LINDEX)
		jj_fail(&rt->env, a->at, "list.index(x): x not in list");
	return jv_int(k);
}

jv jj_call_method(jj_rt *rt, jv self, int id, jj_args *a)
{
	int m = METHODS[id].id;

	if (m == M_UNSAFE)
		jj_fail(&rt->env, a->at, "access to attribute '%s' of '%s' object is "
			"unsafe (transformers renders in an immutable sandbox)",
			METHODS[id].name, jv_type_name(self));
	if (self.t == JV_STR)
		return str_method(rt, self, m, a);
	if (self.t == JV_DICT)
		return dict_method(rt, self, m, a);
	return list_method(rt, self, m, a);
}

/* ---- filters ------------------------------------------------------------------------ */

typedef jv (*filter_fn)(jj_rt *rt, jv v, jj_args *a);

static jv f_abs(jj_rt *rt, jv v, jj_args *a)
{
	no_args(rt, a);
	if (v.t == JV_INT || v.t == JV_BOOL) {
		int64_t i = v.t == JV_INT ? v.u.i : v.u.b;

		if (i == INT64_MIN)
			jj_fail(&rt->env, a->at, "integer overflow (past 64 bits)");
		return jv_int(i < 0 ? -i : i);
	}
	if (v.t == JV_FLOAT)
		return jv_float(fabs(v.u.f));
	jj_fail(&rt->env, a->at, "bad operand type for abs(): '%s'", jv_type_name(v));
}

static jv f_capitalize(jj_rt *rt, jv v, jj_args *a)
{
	no_args(rt, a);
	return str_capitalize(rt, str_of(rt, v, a));
}

static jv f_length(jj_rt *rt, jv v, jj_args *a)
{
	no_args(rt, a);
	switch (v.t) {
	case JV_UNDEF:
		return jv_int(0);
	case JV_STR:
		return jv_int((int64_t)jj_utf8_len(v.u.s.p, v.u.s.n));
	case JV_LIST:
		return jv_int((int64_t)v.u.l->n);
	case JV_DICT:
		if (!(v.flags & JVF_NS))
			return jv_int((int64_t)v.u.d->n);
		break;
	case JV_LOOP:
		return jv_int((int64_t)v.u.loop->items.u.l->n);
	default:
		break;
	}
	jj_fail(&rt->env, a->at, "object of type '%s' has no len()", jv_type_name(v));
}

static jv f_default(jj_rt *rt, jv v, jj_args *a)
{
	static const char *const P[] = { "default_value", "boolean", NULL };
	jv arg[2];
	unsigned m = bind(rt, a, P, arg);

	if (v.t == JV_UNDEF || (jv_truthy(arg[1]) && !jv_truthy(v)))
		return (m & 1) ? arg[0] : jv_str("", 0);
	return v;
}

static jv f_escape(jj_rt *rt, jv v, jj_args *a)
{
	jv s;
	jj_buf b = newbuf();

	no_args(rt, a);
	s = str_of(rt, v, a);
	for (size_t i = 0; i < s.u.s.n; i++) {
		char c = s.u.s.p[i];
		const char *r = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" :
			c == '"' ? "&#34;" : c == '\'' ? "&#39;" : NULL;

		if (r != NULL)
			jj_buf_adds(&rt->env, &b, r);
		else
			jj_buf_addc(&rt->env, &b, c);
	}
	return buf_val(&b);
}

static jv f_first(jj_rt *rt, jv v, jj_args *a)
{
	jv items;

	no_args(rt, a);
	items = jj_iterate(rt, v, a->at);
	if (items.u.l->n == 0)
		return jv_undef("No first item, sequence was empty.");
	return items.u.l->v[0];
}

static jv f_last(jj_rt *rt, jv v, jj_args *a)
{
	jv items;

	no_args(rt, a);
	items = jj_iterate(rt, v, a->at);
	if (items.u.l->n == 0)
		return jv_undef("No last item, sequence was empty.");
	return items.u.l->v[items.u.l->n - 1];
}

/* Python's float(str): whitespace around, an optional sign, digits with
 * single underscores between, inf/nan; false if not a number. */
static bool parse_float(jv s, double *out)
{
	char buf[128];
	size_t n = 0;
	jv t = strip(s, jv_undef(NULL), true, true);
	char *end;

	if (t.u.s.n == 0 || t.u.s.n >= sizeof buf)
		return false;
	for (size_t i = 0; i < t.u.s.n; i++) {
		char c = t.u.s.p[i];

		if (c == '_') {
			if (i == 0 || i + 1 == t.u.s.n || !(t.u.s.p[i - 1] >= '0' &&
			    t.u.s.p[i - 1] <= '9') || !(t.u.s.p[i + 1] >= '0' &&
			    t.u.s.p[i + 1] <= '9'))
				return false;
			continue;
		}
		if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' ||
		      c == '+' || c == '-' || (c >= 'a' && c <= 'z') ||
		      (c >= 'A' && c <= 'Z')))
			return false;
		buf[n++] = c;
	}
	buf[n] = '\0';
	/* strtod also reads hex floats, which Python does not */
	if (strchr(buf, 'x') != NULL || strchr(buf, 'X') != NULL)
		return false;
	*out = strtod(buf, &end);
	return end == buf + n;
}

static jv f_float(jj_rt *rt, jv v, jj_args *a)
{
	static const char *const P[] = { "default", NULL };
	jv arg[1];
	double d;
	unsigned m = bind(rt, a, P, arg);

	if (jv_is_number(v))
		return jv_float(jv_num(v));
	if (v.t == JV_STR && parse_float(v, &d))
		return jv_float(d);
	return (m & 1) ? arg[0] : jv_float(0.0);
}

/* Python's int(str, 10): whitespace around, a sign, digits (underscores
 * between them). */
static bool parse_int(jv s, int64_t *out)
{
	jv t = strip(s, jv_undef(NULL), true, true);
	size_t i = 0;
	bool neg = false, any = false;
	uint64_t v = 0;

	if (i < t.u.s.n && (t.u.s.p[i] == '+' || t.u.s.p[i] == '-'))
		neg = t.u.s.p[i++] == '-';
	for (; i < t.u.s.n; i++) {
		char c = t.u.s.p[i];

		if (c == '_' && any && i + 1 < t.u.s.n && t.u.s.p[i + 1] != '_')
			continue;
		if (c < '0' || c > '9' || v > (uint64_t)INT64_MAX / 10)
			return false;
		v = v * 10 + (uint64_t)(c - '0');
		if (v > (uint64_t)INT64_MAX)
			return false;
		any = true;
	}
	*out = neg ? -(int64_t)v : (int64_t)v;
	return any;
}

static jv f_int(jj_rt *rt, jv v, jj_args *a)
{
	static const char *const P[] = { "default", "base", NULL };
	jv arg[2];
	unsigned m = bind(rt, a, P, arg);
	int64_t i;
	double d;

	if ((m & 2) && !(arg[1].t == JV_INT && arg[1].u.i == 10))
		jj_fail(&rt->env, a->at, "int: only base 10 is supported");
	if (v.t == JV_INT || v.t == JV_BOOL)
		return jv_int(v.t == JV_INT ? v.u.i : v.u.b);
	if (v.t == JV_FLOAT && isfinite(v.u.f) && fabs(v.u.f) < 9.2e18)
		return jv_int((int64_t)v.u.f);
	if (v.t == JV_STR && parse_int(v, &i))
		return jv_int(i);
	if (v.t == JV_STR && parse_float(v, &d) && isfinite(d) && fabs(d) < 9.2e18)
		return jv_int((int64_t)d);
	return (m & 1) ? arg[0] : jv_int(0);
}

static jv f_items(jj_rt *rt, jv v, jj_args *a)
{
	no_args(rt, a);
	if (v.t == JV_UNDEF)
		return jv_list_new(&rt->env, 0);
	if (v.t != JV_DICT || (v.flags & JVF_NS))
		jj_fail(&rt->env, a->at, "Can only get item pairs from a mapping.");
	return items_of(rt, v);
}

/* An item's attribute as Jinja2's attribute arguments name it: dotted
 * parts, integer parts as indices. */
static jv attr_path(jj_rt *rt, jv item, jv attr, jj_args *a)
{
	const char *p, *end;

	if (attr.t == JV_INT)
		return jj_getitem(rt, item, attr, a->at);
	want_str(rt, attr, a, "attribute");
	p = attr.u.s.p;
	end = p + attr.u.s.n;
	for (;;) {
		const char *dot = memchr(p, '.', (size_t)(end - p));
		size_t n = dot != NULL ? (size_t)(dot - p) : (size_t)(end - p);
		int64_t idx;
		jv part = jv_str(p, n);

		if (n > 0 && p[0] >= '0' && p[0] <= '9' && parse_int(part, &idx))
			item = jj_getitem(rt, item, jv_int(idx), a->at);
		else
			item = jj_getitem(rt, item, part, a->at);
		if (dot == NULL)
			return item;
		p = dot + 1;
	}
}

static jv f_join(jj_rt *rt, jv v, jj_args *a)
{
	static const char *const P[] = { "d", "attribute", NULL };
	jv arg[2], items, sep;
	unsigned m = bind(rt, a, P, arg);

	items = jj_iterate(rt, v, a->at);
	sep = (m & 1) ? str_of(rt, arg[0], a) : jv_str("", 0);
	if (m & 2) {
		jv mapped = jv_list_new(&rt->env, items.u.l->n);

		for (size_t i = 0; i < items.u.l->n; i++)
			jv_list_push(&rt->env, mapped, attr_path(rt, items.u.l->v[i], arg[1], a));
		items = mapped;
	}
	return join_items(rt, sep, items, a, false);
}

static jv f_list(jj_rt *rt, jv v, jj_args *a)
{
	jv items, out;

	no_args(rt, a);
	items = jj_iterate(rt, v, a->at);
	out = jv_list_new(&rt->env, items.u.l->n);
	for (size_t i = 0; i < items.u.l->n; i++)
		jv_list_push(&rt->env, out, items.u.l->v[i]);
	return out;
}

static jv f_lower(jj_rt *rt, jv v, jj_args *a)
{
	no_args(rt, a);
	return case_full(rt, str_of(rt, v, a), 0);
}

static jv f_upper(jj_rt *rt, jv v, jj_args *a)
{
	no_args(rt, a);
	return case_full(rt, str_of(rt, v, a), 1);
}

/* a's arguments from index `from` on, as a call of their own */
static jj_args shift_args(jj_args *a, size_t from, const char *what)
{
	jj_args r = *a;

	r.pos = a->pos + from;
	r.npos = a->npos - from;
	r.what = what;
	return r;
}

static jv f_map(jj_rt *rt, jv v, jj_args *a)
{
	jv items = jj_iterate(rt, v, a->at), out = jv_list_new(&rt->env, items.u.l->n);

	if (a->npos == 0) { /* map(attribute='x', default=d) */
		static const char *const P[] = { "attribute", "default", NULL };
		jv arg[2];
		unsigned m = bind(rt, a, P, arg);

		if (!(m & 1))
			jj_fail(&rt->env, a->at, "map needs a filter name or attribute=");
		for (size_t i = 0; i < items.u.l->n; i++) {
			jv x = attr_path(rt, items.u.l->v[i], arg[0], a);

			jv_list_push(&rt->env, out, x.t == JV_UNDEF && (m & 2) ? arg[1] : x);
		}
		return out;
	}
	jv name = want_str(rt, a->pos[0], a, "the filter name");
	int id = jj_filter_id(name.u.s.p, name.u.s.n);
	char what[64];

	if (id < 0)
		jj_fail(&rt->env, a->at, "map: unknown filter '%.*s'",
			(int)(name.u.s.n > 40 ? 40 : name.u.s.n), name.u.s.p);
	snprintf(what, sizeof what, "%.*s", (int)name.u.s.n, name.u.s.p);
	for (size_t i = 0; i < items.u.l->n; i++) {
		jj_args sub = shift_args(a, 1, what);

		jv_list_push(&rt->env, out, jj_apply_filter(rt, id, items.u.l->v[i], &sub));
	}
	return out;
}

/* select/reject (attr false), selectattr/rejectattr (attr true) */
static jv select_common(jj_rt *rt, jv v, jj_args *a, bool attr, bool keep)
{
	jv items = jj_iterate(rt, v, a->at), out = jv_list_new(&rt->env, 0);
	size_t first = attr ? 1 : 0;
	int id = -1;
	char what[64] = "";

	if (a->nkw > 0)
		jj_fail(&rt->env, a->at, "%s takes no keyword arguments", a->what);
	if (attr && a->npos == 0)
		jj_fail(&rt->env, a->at, "%s needs an attribute", a->what);
	if (a->npos > first) {
		jv name = want_str(rt, a->pos[first], a, "the test name");

		id = jj_test_id(name.u.s.p, name.u.s.n);
		if (id < 0)
			jj_fail(&rt->env, a->at, "%s: unknown test '%.*s'", a->what,
				(int)(name.u.s.n > 40 ? 40 : name.u.s.n), name.u.s.p);
		snprintf(what, sizeof what, "%.*s", (int)name.u.s.n, name.u.s.p);
	}
	for (size_t i = 0; i < items.u.l->n; i++) {
		jv x = items.u.l->v[i], t = attr ? attr_path(rt, x, a->pos[0], a) : x;
		bool ok;

		jj_count_iter(rt, 1, a->at);
		if (id < 0) {
			ok = jv_truthy(t);
		} else {
			jj_args sub = shift_args(a, first + 1, what);

			ok = jj_apply_test(rt, id, t, &sub);
		}
		if (ok == keep)
			jv_list_push(&rt->env, out, x);
	}
	return out;
}

static jv f_select(jj_rt *rt, jv v, jj_args *a) { return select_common(rt, v, a, false, true); }
static jv f_reject(jj_rt *rt, jv v, jj_args *a) { return select_common(rt, v, a, false, false); }
static jv f_selectattr(jj_rt *rt, jv v, jj_args *a) { return select_common(rt, v, a, true, true); }
static jv f_rejectattr(jj_rt *rt, jv v, jj_args *a) { return select_common(rt, v, a, true, false); }

static jv f_replace(jj_rt *rt, jv v, jj_args *a)
{
	static const char *const P[] = { "old", "new", "count", NULL };
	jv arg[3];
	unsigned m = bind(rt, a, P, arg);

	if ((m & 3) != 3)
		jj_fail(&rt->env, a->at, "replace takes old and new");
	return replace(rt, str_of(rt, v, a), str_of(rt, arg[0], a), str_of(rt, arg[1], a),
		       (m & 4) && arg[2].t != JV_NONE ? want_int(rt, arg[2], a, "count") : -1);
}

static jv f_reverse(jj_rt *rt, jv v, jj_args *a)
{
	jv items, out;

	no_args(rt, a);
	if (v.t == JV_STR) {
		jj_buf b = newbuf();

		items = jj_iterate(rt, v, a->at);
		for (size_t i = items.u.l->n; i-- > 0;)
			jj_buf_add(&rt->env, &b, items.u.l->v[i].u.s.p, items.u.l->v[i].u.s.n);
		return buf_val(&b);
	}
	items = jj_iterate(rt, v, a->at);
	out = jv_list_new(&rt->env, items.u.l->n);
	for (size_t i = items.u.l->n; i-- > 0;)
		jv_list_push(&rt->env, out, items.u.l->v[i]);
	return out;
}

static jv f_safe(jj_rt *rt, jv v, jj_args *a)
{
	no_args(rt, a);
	return str_of(rt, v, a);
}

/* The key sort and unique compare by: the attribute, lowered strings
 * unless case_sensitive. */
static jv sort_key(jj_rt *rt, jv x, jv attr, bool has_attr, bool cs, jj_args *a)
{
	if (has_attr)
		x = attr_path(rt, x, attr, a);
	if (!cs && x.t == JV_STR)
		x = case_full(rt, x, 0);
	return x;
}

/* A stable merge sort of idx by keys (Python's sorted is stable; qsort is
 * not, and a comparison may fail). */
static void merge_sort(jj_rt *rt, size_t *idx, size_t *tmp, size_t n, jv *keys,
		       bool rev, uint32_t at)
{
	size_t h = n / 2, i = 0, j = h, k = 0;

	if (n < 2)
		return;
	merge_sort(rt, idx, tmp, h, keys, rev, at);
	merge_sort(rt, idx + h, tmp, n - h, keys, rev, at);
	while (i < h && j < n) {
		int c = jj_compare(rt, keys[idx[j]], keys[idx[i]], at);

		/* take the right one only if strictly before the left */
		if (rev ? c > 0 : c < 0)
			tmp[k++] = idx[j++];
		else
			tmp[k++] = idx[i++];
	}
	while (i < h)
		tmp[k++] = idx[i++];
	while (j < n)
		tmp[k++] = idx[j++];
	memcpy(idx, tmp, n * sizeof *idx);
}

static jv f_sort(jj_rt *rt, jv v, jj_args *a)
{
	static const char *const P[] = { "reverse", "case_sensitive", "attribute", NULL };
	jv arg[3], items = jj_iterate(rt, v, a->at), out, *keys;
	unsigned m = bind(rt, a, P, arg);
	size_t n = items.u.l->n, *idx, *tmp;

	keys = jj_alloc_n(&rt->env, n + 1, sizeof *keys);
	idx = jj_alloc_n(&rt->env, n + 1, sizeof *idx);
	tmp = jj_alloc_n(&rt->env, n + 1, sizeof *tmp);
	jj_count_iter(rt, n, a->at);
	for (size_t i = 0; i < n; i++) {
		keys[i] = sort_key(rt, items.u.l->v[i], arg[2], m & 4, jv_truthy(arg[1]), a);
		idx[i] = i;
	}
	merge_sort(rt, idx, tmp, n, keys, jv_truthy(arg[0]), a->at);
	out = jv_list_new(&rt->env, n);
	for (size_t i = 0; i < n; i++)
		jv_list_push(&rt->env, out, items.u.l->v[idx[i]]);
	return out;
}

static jv f_string(jj_rt *rt, jv v, jj_args *a)
{
	no_args(rt, a);
	return str_of(rt, v, a);
}

static jv f_title(jj_rt *rt, jv v, jj_args *a)
{
	no_args(rt, a);
	return filter_title_str(rt, str_of(rt, v, a));
}

/* transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False) */
static jv f_tojson(jj_rt *rt, jv v, jj_args *a)
{
	static const char *const P[] = { "ensure_ascii", "indent", "separators",
					  "sort_keys", NULL };
	jv arg[4];
	unsigned m = bind(rt, a, P, arg);
	jj_json_fmt f = { .item_sep = ", ", .key_sep = ": " };
	jj_buf b = newbuf();
	char *ind;

	if ((m & 1) && jv_truthy(arg[0]))
		jj_fail(&rt->env, a->at, "tojson: ensure_ascii=True is not supported");
	if ((m & 2) && arg[1].t != JV_NONE) {
		if (arg[1].t == JV_STR) {
			f.indent = arg[1].u.s.p;
			f.indent_n = arg[1].u.s.n;
		} else {
			int64_t n = want_int(rt, arg[1], a, "indent");

			n = n < 0 ? 0 : n > 64 ? -1 : n;
			if (n < 0)
				jj_fail(&rt->env, a->at, "tojson: indent over 64");
			ind = jj_alloc(&rt->env, (size_t)n + 1);
			memset(ind, ' ', (size_t)n);
			f.indent = ind;
			f.indent_n = (size_t)n;
		}
		f.item_sep = ",";
	}
	if ((m & 4) && arg[2].t != JV_NONE) {
		jv s = arg[2];

		if (s.t != JV_LIST || s.u.l->n != 2 || s.u.l->v[0].t != JV_STR ||
		    s.u.l->v[1].t != JV_STR)
			jj_fail(&rt->env, a->at, "tojson: separators must be two strings");
		f.item_sep = jv_strdup(&rt->env, s.u.l->v[0].u.s.p, s.u.l->v[0].u.s.n + 1).u.s.p;
		f.key_sep = jv_strdup(&rt->env, s.u.l->v[1].u.s.p, s.u.l->v[1].u.s.n + 1).u.s.p;
		((char *)f.item_sep)[s.u.l->v[0].u.s.n] = '\0';
		((char *)f.key_sep)[s.u.l->v[1].u.s.n] = '\0';
		if (strlen(f.item_sep) != s.u.l->v[0].u.s.n ||
		    strlen(f.key_sep) != s.u.l->v[1].u.s.n)
			jj_fail(&rt->env, a->at, "tojson: a separator holds a NUL");
	}
	f.sort_keys = (m & 8) && jv_truthy(arg[3]);
	jv_json_to(&rt->env, &b, v, &f, 0, a->at);
	return buf_val(&b);
}

static jv f_trim(jj_rt *rt, jv v, jj_args *a)
{
	static const char *const P[] = { "chars", NULL };
	jv arg[1];

	bind(rt, a, P, arg);
	if (arg[0].t != JV_UNDEF && arg[0].t != JV_NONE)
		want_str(rt, arg[0], a, "chars");
	return strip(str_of(rt, v, a), arg[0], true, true);
}

static jv f_unique(jj_rt *rt, jv v, jj_args *a)
{
	static const char *const P[] = { "case_sensitive", "attribute", NULL };
	jv arg[2], items = jj_iterate(rt, v, a->at), out = jv_list_new(&rt->env, 0);
	jv seen = jv_list_new(&rt->env, 0);
	unsigned m = bind(rt, a, P, arg);

	for (size_t i = 0; i < items.u.l->n; i++) {
		jv k = sort_key(rt, items.u.l->v[i], arg[1], m & 2, jv_truthy(arg[0]), a);
		bool dup = false;

		jj_count_iter(rt, seen.u.l->n + 1, a->at);
		for (size_t j = 0; j < seen.u.l->n && !dup; j++)
			dup = jv_eq(seen.u.l->v[j], k);
		if (!dup) {
			jv_list_push(&rt->env, seen, k);
			jv_list_push(&rt->env, out, items.u.l->v[i]);
		}
	}
	return out;
}

static jv f_wordcount(jj_rt *rt, jv v, jj_args *a)
{
	jv s;
	int64_t n = 0;
	bool in = false;
	size_t i = 0;

	no_args(rt, a);
	s = str_of(rt, v, a);
	while (i < s.u.s.n) {
		uint32_t c = jj_utf8_next(s.u.s.p, s.u.s.n, &i);
		bool w = c == '_' || u_isalnum((UChar32)c);

		n += w && !in;
		in = w;
	}
	return jv_int(n);
}

/* Jinja2's indent: lines after the first (and the first with first=True)
 * get the indent; blank lines only with blank=True. */
static jv f_indent(jj_rt *rt, jv v, jj_args *a)
{
	static const char *const P[] = { "width", "first", "blank", NULL };
	jv arg[3], s, lines, ind;
	jj_buf b = newbuf(), t = newbuf();
	unsigned m = bind(rt, a, P, arg);

	if ((m & 1) && arg[0].t == JV_STR) {
		ind = arg[0];
	} else {
		int64_t w = (m & 1) ? want_int(rt, arg[0], a, "width") : 4;

		if (w > 1024)
			jj_fail(&rt->env, a->at, "indent: width over 1024");
		for (int64_t i = 0; i < w; i++)
			jj_buf_addc(&rt->env, &t, ' ');
		ind = buf_val(&t);
	}
	s = str_of(rt, v, a);
	jj_buf_add(&rt->env, &b, s.u.s.p, s.u.s.n);
	jj_buf_addc(&rt->env, &b, '\n');
	lines = splitlines(rt, buf_val(&b), false, a->at);
	b = newbuf();
	if (jv_truthy(arg[1]))
		jj_buf_add(&rt->env, &b, ind.u.s.p, ind.u.s.n);
	for (size_t i = 0; i < lines.u.l->n; i++) {
		jv l = lines.u.l->v[i];

		if (i > 0) {
			jj_buf_addc(&rt->env, &b, '\n');
			if (l.u.s.n > 0 || jv_truthy(arg[2]))
				jj_buf_add(&rt->env, &b, ind.u.s.p, ind.u.s.n);
		}
		jj_buf_add(&rt->env, &b, l.u.s.p, l.u.s.n);
	}
	return buf_val(&b);
}

static const struct { const char *name; filter_fn fn; } FILTERS[] = {
	{ "abs", f_abs }, { "capitalize", f_capitalize }, { "count", f_length },
	{ "d", f_default }, { "default", f_default }, { "e", f_escape },
	{ "escape", f_escape }, { "first", f_first }, { "float", f_float },
	{ "indent", f_indent }, { "int", f_int }, { "items", f_items },
	{ "join", f_join }, { "last", f_last }, { "length", f_length },
	{ "list", f_list }, { "lower", f_lower }, { "map", f_map },
	{ "reject", f_reject }, { "rejectattr", f_rejectattr },
	{ "replace", f_replace }, { "reverse", f_reverse }, { "safe", f_safe },
	{ "select", f_select }, { "selectattr", f_selectattr }, { "sort", f_sort },
	{ "string", f_string }, { "title", f_title }, { "tojson", f_tojson },
	{ "trim", f_trim }, { "unique", f_unique }, { "upper", f_upper },
	{ "wordcount", f_wordcount },
};
#define NFILTERS (sizeof FILTERS / sizeof FILTERS[0])

static bool name_in(const char *const *list, const char *name, size_t n)
{
	for (size_t i = 0; list[i] != NULL; i++)
		if (strlen(list[i]) == n && memcmp(list[i], name, n) == 0)
			return true;
	return false;
}

int jj_filter_id(const char *name, size_t n)
{
	for (size_t i = 0; i < NFILTERS; i++)
		if (strlen(FILTERS[i].name) == n && memcmp(FILTERS[i].name, name, n) == 0)
			return (int)i;
	return -1;
}

bool jj_jinja2_filter(const char *name, size_t n)
{
	static const char *const others[] = {
		"attr", "batch", "center", "dictsort", "filesizeformat", "forceescape",
		"format", "groupby", "max", "min", "pprint", "random", "round", "slice",
		"striptags", "sum", "truncate", "urlencode", "urlize", "wordwrap",
		"xmlattr", NULL,
	};

	return name_in(others, name, n);
}

jv jj_apply_filter(jj_rt *rt, int id, jv v, jj_args *a)
{
	return FILTERS[id].fn(rt, v, a);
}

/* ---- tests ---------------------------------------------------------------------------- */

enum {
	T_DEFINED, T_UNDEFINED, T_NONE, T_BOOLEAN, T_FALSE, T_TRUE, T_INTEGER,
	T_FLOAT, T_NUMBER, T_STRING, T_MAPPING, T_ITERABLE, T_SEQUENCE,
	T_CALLABLE, T_SAMEAS, T_ESCAPED, T_IN, T_EQ, T_NE, T_LT, T_LE, T_GT,
	T_GE, T_EVEN, T_ODD, T_DIVISIBLEBY, T_LOWER, T_UPPER, T_FILTER, T_TEST,
};

static const struct { const char *name; int id; } TESTS[] = {
	{ "defined", T_DEFINED }, { "undefined", T_UNDEFINED }, { "none", T_NONE },
	{ "boolean", T_BOOLEAN }, { "false", T_FALSE }, { "true", T_TRUE },
	{ "integer", T_INTEGER }, { "float", T_FLOAT }, { "number", T_NUMBER },
	{ "string", T_STRING }, { "mapping", T_MAPPING }, { "iterable", T_ITERABLE },
	{ "sequence", T_SEQUENCE }, { "callable", T_CALLABLE }, { "sameas", T_SAMEAS },
	{ "escaped", T_ESCAPED }, { "in", T_IN }, { "eq", T_EQ }, { "equalto", T_EQ },
	{ "==", T_EQ }, { "ne", T_NE }, { "!=", T_NE }, { "lt", T_LT },
	{ "lessthan", T_LT }, { "<", T_LT }, { "le", T_LE }, { "<=", T_LE },
	{ "gt", T_GT }, { "greaterthan", T_GT }, { ">", T_GT }, { "ge", T_GE },
	{ ">=", T_GE }, { "even", T_EVEN }, { "odd", T_ODD },
	{ "divisibleby", T_DIVISIBLEBY }, { "lower", T_LOWER }, { "upper", T_UPPER },
	{ "filter", T_FILTER }, { "test", T_TEST },
};
#define NTESTS (sizeof TESTS / sizeof TESTS[0])

int jj_test_id(const char *name, size_t n)
{
	for (size_t i = 0; i < NTESTS; i++)
		if (strlen(TESTS[i].name) == n && memcmp(TESTS[i].name, name, n) == 0)
			return (int)i;
	return -1;
}

bool jj_jinja2_test(const char *name, size_t n)
{
	(void)name;
	(void)n;
	return false; /* all of Jinja2's tests are here */
}

static jv one_arg(jj_rt *rt, jj_args *a)
{
	static const char *const P[] = { "other", NULL };
	jv arg[1];

	if (!(bind(rt, a, P, arg) & 1))
		jj_fail(&rt->env, a->at, "test %s takes an argument", a->what);
	return arg[0];
}

/* Python's is: the same object (None, True, False and equal small
 * scalars read as one; containers by identity). */
static bool same_as(jv x, jv y)
{
	if (x.t != y.t)
		return false;
	switch (x.t) {
	case JV_LIST: return x.u.l == y.u.l;
	case JV_DICT: return x.u.d == y.u.d;
	case JV_FUNC: return x.u.fn == y.u.fn;
	case JV_LOOP: return x.u.loop == y.u.loop;
	default: return jv_eq(x, y);
	}
}

static bool case_test(jj_rt *rt, jv v, jj_args *a, bool upper)
{
	jv s = str_of(rt, v, a);
	bool cased = false;
	size_t i = 0;

	while (i < s.u.s.n) {
		UChar32 c = (UChar32)jj_utf8_next(s.u.s.p, s.u.s.n, &i);

		if (upper ? (u_islower(c) || u_istitle(c)) : (u_isupper(c) || u_istitle(c)))
			return false;
		cased |= upper ? u_isupper(c) : u_islower(c);
	}
	return cased;
}

static int64_t int_for_test(jj_rt *rt, jv v, jj_args *a)
{
	if (v.t == JV_UNDEF)
		jj_fail(&rt->env, a->at, "%s", v.u.s.p != NULL ? v.u.s.p : "undefined value");
	return want_int(rt, v, a, "the value");
}

bool jj_apply_test(jj_rt *rt, int id, jv v, jj_args *a)
{
	int t = TESTS[id].id;
	jv o;

	if (t > T_SAMEAS && t != T_EQ && t != T_NE && t != T_IN &&
	    t != T_LT && t != T_LE && t != T_GT && t != T_GE && t != T_DIVISIBLEBY)
		no_args(rt, a);
	switch (t) {
	case T_DEFINED: no_args(rt, a); return v.t != JV_UNDEF;
	case T_UNDEFINED: no_args(rt, a); return v.t == JV_UNDEF;
	case T_NONE: no_args(rt, a); return v.t == JV_NONE;
	case T_BOOLEAN: no_args(rt, a); return v.t == JV_BOOL;
	case T_FALSE: no_args(rt, a); return v.t == JV_BOOL && !v.u.b;
	case T_TRUE: no_args(rt, a); return v.t == JV_BOOL && v.u.b;
	case T_INTEGER: no_args(rt, a); return v.t == JV_INT;
	case T_FLOAT: no_args(rt, a); return v.t == JV_FLOAT;
	case T_NUMBER: no_args(rt, a); return jv_is_number(v);
	case T_STRING: no_args(rt, a); return v.t == JV_STR;
	case T_MAPPING:
		no_args(rt, a);
		return v.t == JV_DICT && !(v.flags & JVF_NS);
	case T_ITERABLE:
		no_args(rt, a);
		return v.t == JV_UNDEF || v.t == JV_STR || v.t == JV_LIST ||
		       (v.t == JV_DICT && !(v.flags & JVF_NS));
	case T_SEQUENCE:
		no_args(rt, a);
		return v.t == JV_UNDEF || v.t == JV_STR || v.t == JV_LIST ||
		       (v.t == JV_DICT && !(v.flags & JVF_NS));
	case T_CALLABLE:
		no_args(rt, a);
		return v.t == JV_FUNC || v.t == JV_UNDEF;
	case T_SAMEAS: return same_as(v, one_arg(rt, a));
	case T_ESCAPED: return false;
	case T_IN: return jj_contains(rt, one_arg(rt, a), v, a->at);
	case T_EQ: return jv_eq(v, one_arg(rt, a));
	case T_NE: return !jv_eq(v, one_arg(rt, a));
	case T_LT: return jj_compare(rt, v, one_arg(rt, a), a->at) < 0;
	case T_LE: return jj_compare(rt, v, one_arg(rt, a), a->at) <= 0;
	case T_GT: return jj_compare(rt, v, one_arg(rt, a), a->at) > 0;
	case T_GE: return jj_compare(rt, v, one_arg(rt, a), a->at) >= 0;
	case T_EVEN: return int_for_test(rt, v, a) % 2 == 0;
	case T_ODD: return int_for_test(rt, v, a) % 2 != 0;
	case T_DIVISIBLEBY: {
		int64_t x = int_for_test(rt, v, a);
		int64_t d = want_int(rt, one_arg(rt, a), a, "the divisor");

		if (d == 0)
			jj_fail(&rt->env, a->at, "integer division or modulo by zero");
		return d == -1 || x % d == 0;
	}
	case T_LOWER: return case_test(rt, v, a, false);
	case T_UPPER: return case_test(rt, v, a, true);
	case T_FILTER:
		return v.t == JV_STR && jj_filter_id(v.u.s.p, v.u.s.n) >= 0;
	case T_TEST:
		return v.t == JV_STR && jj_test_id(v.u.s.p, v.u.s.n) >= 0;
	}
	(void)o;
	return false;
}

/* ---- global functions ----------------------------------------------------------------- */

enum { G_RANGE, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME };

int jj_global_id(const char *name, size_t n)
{
	static const char *const ids[] = {
		[G_RANGE] = "range", [G_NAMESPACE] = "namespace", [G_DICT] = "dict",
		[G_RAISE] = "raise_exception", [G_STRFTIME] = "strftime_now",
	};
	static const char *const unsupported[] = { "lipsum", "cycler", "joiner", NULL };

	for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
		if (strlen(ids[i]) == n && memcmp(ids[i], name, n) == 0)
			return (int)i;
	return name_in(unsupported, name, n) ? -2 : -1;
}

static jv g_range(jj_rt *rt, jj_args *a)
{
	int64_t v[3] = { 0, 0, 1 }, n;
	jv out;

	if (a->nkw > 0 || a->npos == 0 || a->npos > 3)
		jj_fail(&rt->env, a->at, "range takes 1 to 3 integers");
	for (size_t i = 0; i < a->npos; i++)
		v[a->npos == 1 ? 1 : i] = want_int(rt, a->pos[i], a, "an argument");
	if (v[2] == 0)
		jj_fail(&rt->env, a->at, "range() arg 3 must not be zero");
	/* items: ceil((stop - start) / step), in 128 bits to be safe */
	__int128 span = (__int128)v[1] - v[0], step = v[2];
	__int128 cnt = step > 0 ? (span + step - 1) / step : (span + step + 1) / step;

	if (cnt < 0)
		cnt = 0;
	if (cnt > JINJA_MAX_RANGE)
		jj_fail(&rt->env, a->at, "range too big: the sandbox allows %d items",
			JINJA_MAX_RANGE);
	n = (int64_t)cnt;
	jj_count_iter(rt, (size_t)n, a->at);
	out = jv_list_new(&rt->env, (size_t)n);
	for (int64_t i = 0; i < n; i++)
		jv_list_push(&rt->env, out, jv_int(v[0] + i * v[2]));
	return out;
}

/* namespace(mapping?, **kw), dict(mapping?, **kw) */
static jv g_mapping(jj_rt *rt, jj_args *a, bool ns)
{
	jv d = jv_dict_new(&rt->env, a->nkw);

	if (a->npos > 1)
		jj_fail(&rt->env, a->at, "%s takes at most one positional argument", a->what);
	if (a->npos == 1) {
		jv src = a->pos[0];

		if (src.t != JV_DICT || (src.flags & JVF_NS))
			jj_fail(&rt->env, a->at, "%s: the argument must be a dict", a->what);
		for (size_t i = 0; i < src.u.d->n; i++)
			jv_dict_set(&rt->env, d, src.u.d->k[i], src.u.d->v[i]);
	}
	for (size_t i = 0; i < a->nkw; i++)
		jv_dict_set(&rt->env, d, jv_str(a->kwn[i], a->kwlen[i]), a->kwv[i]);
	if (ns) {
		if (jv_has_ns(d))
			jj_fail(&rt->env, a->at, "a namespace cannot hold a namespace");
		d.flags = JVF_NS;
	}
	return d;
}

static jv g_strftime(jj_rt *rt, jj_args *a)
{
	static const char *const P[] = { "format", NULL };
	jv arg[1], fmt;
	char f[256], out[512];
	size_t n;

	if (!(bind(rt, a, P, arg) & 1))
		jj_fail(&rt->env, a->at, "strftime_now takes a format");
	fmt = want_str(rt, arg[0], a, "the format");
	if (fmt.u.s.n >= sizeof f || memchr(fmt.u.s.p, '\0', fmt.u.s.n) != NULL)
		jj_fail(&rt->env, a->at, "strftime_now: format too long");
	memcpy(f, fmt.u.s.p, fmt.u.s.n);
	f[fmt.u.s.n] = '\0';
	n = strftime(out, sizeof out, f, &rt->now);
	if (n == 0 && fmt.u.s.n > 0)
		jj_fail(&rt->env, a->at, "strftime_now: result too long");
	return jv_strdup(&rt->env, out, n);
}

jv jj_call_global(jj_rt *rt, int id, jj_args *a)
{
	switch (id) {
	case G_RANGE:
		return g_range(rt, a);
	case G_NAMESPACE:
		return g_mapping(rt, a, true);
	case G_DICT:
		return g_mapping(rt, a, false);
	case G_RAISE: {
		static const char *const P[] = { "message", NULL };
		jv arg[1], msg;

		bind(rt, a, P, arg);
		msg = str_of(rt, arg[0], a);
		jj_raise(&rt->env, msg.u.s.p, msg.u.s.n);
	}
	case G_STRFTIME:
		return g_strftime(rt, a);
	}
	jj_fail(&rt->env, a->at, "no function %s", a->what);
}

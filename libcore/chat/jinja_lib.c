/*
 * jinja_lib.c - the Jinja interpreter's builtins (jinja_int.h): argument
 * binding, Python's string functions, the methods of str, dict and list,
 * and the global functions, each with the semantics of Jinja2 3.1 and
 * Python 3 that transformers renders with (its raise_exception and
 * strftime_now included); the filters and tests are in jinja_filter.c.
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
unsigned jj_bind(jj_rt *rt, jj_args *a, const char *const *params, jv *out)
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

void jj_no_args(jj_rt *rt, jj_args *a)
{
	static const char *const none[] = { NULL };

	jj_bind(rt, a, none, NULL);
}

jv jj_want_str(jj_rt *rt, jv v, jj_args *a, const char *what)
{
	if (v.t != JV_STR)
		jj_fail(&rt->env, a->at, "%s: %s must be a string, not %s", a->what,
			what, jv_type_name(v));
	return v;
}

int64_t jj_want_int(jj_rt *rt, jv v, jj_args *a, const char *what)
{
	if (v.t != JV_INT && v.t != JV_BOOL)
		jj_fail(&rt->env, a->at, "%s: %s must be an integer, not %s", a->what,
			what, jv_type_name(v));
	return v.t == JV_INT ? v.u.i : v.u.b;
}

jv jj_str_of(jj_rt *rt, jv v, jj_args *a)
{
	return jv_to_str(&rt->env, v, a->at);
}

/* ---- strings ------------------------------------------------------------------ */

jj_buf jj_newbuf(void)
{
	return (jj_buf){ .max = JINJA_MAX_OUT };
}

jv jj_buf_val(jj_buf *b)
{
	return b->p != NULL ? jj_buf_jv(b) : jv_str("", 0);
}

/* ICU full case mapping of s (upper: 1, lower: 0). */
jv jj_case_full(jj_rt *rt, jv s, int upper)
{
	UErrorCode st = U_ZERO_ERROR;
	int32_t n16 = 0, m16, n8 = 0;
	UChar *a, *b;
	char *o;

	if (s.u.s.n > JINJA_MAX_OUT / 4)
		jj_fail(&rt->env, UINT32_MAX, "string too long to change case");
	jj_work(&rt->env, s.u.s.n);
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
	jj_buf b = jj_newbuf();
	bool prev_cased = false;
	size_t i = 0;

	while (i < s.u.s.n) {
		uint32_t c = jj_utf8_next(s.u.s.p, s.u.s.n, &i);

		put_cp(rt, &b, (uint32_t)(prev_cased ? u_tolower((UChar32)c) :
					  u_totitle((UChar32)c)));
		prev_cased = u_hasBinaryProperty((UChar32)c, UCHAR_CASED);
	}
	return jj_buf_val(&b);
}

/* Python's str.capitalize(): the first character titled, the rest
 * lowered. */
jv jj_str_capitalize(jj_rt *rt, jv s)
{
	jj_buf b = jj_newbuf();
	size_t i = 0;

	while (i < s.u.s.n) {
		bool first = i == 0;
		uint32_t c = jj_utf8_next(s.u.s.p, s.u.s.n, &i);

		put_cp(rt, &b, (uint32_t)(first ? u_totitle((UChar32)c) :
					  u_tolower((UChar32)c)));
	}
	return jj_buf_val(&b);
}

/* Jinja2's title filter: each word (after "-", whitespace, "(", "{", "[",
 * "<") its first character upper, the rest lower. */
jv jj_filter_title_str(jj_rt *rt, jv s)
{
	jj_buf b = jj_newbuf();
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
		one = jj_case_full(rt, jv_str(s.u.s.p + st, i - st), start);
		jj_buf_add(&rt->env, &b, one.u.s.p, one.u.s.n);
		start = false;
	}
	return jj_buf_val(&b);
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
jv jj_strip(jv s, jv chars, bool left, bool right)
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

/* Python's str.jj_replace(old, new, count) (count < 0: all). */
jv jj_replace(jj_rt *rt, jv s, jv old, jv new, int64_t count)
{
	jj_buf b = jj_newbuf();
	size_t i = 0;

	jj_work(&rt->env, s.u.s.n);
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
		return jj_buf_val(&b);
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
	return jj_buf_val(&b);
}

/* str.split(sep, maxsplit) with sep a string */
static jv split_sep(jj_rt *rt, jv s, jv sep, int64_t max, jj_args *a)
{
	jv out = jv_list_new(&rt->env, 0);
	size_t i = 0;

	if (sep.u.s.n == 0)
		jj_fail(&rt->env, a->at, "empty separator");
	jj_work(&rt->env, s.u.s.n);
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

	jj_work(&rt->env, n);
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
		jv_list_push(&rt->env, out, jj_strip(head, jv_undef(NULL), false, true));
	}
	for (size_t i = first; i < n; i++)
		jv_list_push(&rt->env, out, parts.u.l->v[i]);
	return out;
}

/* Python's line boundaries for str.jj_splitlines(): the length of the one at
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

jv jj_splitlines(jj_rt *rt, jv s, bool keepends, uint32_t at)
{
	jv out = jv_list_new(&rt->env, 0);
	size_t i = 0, st = 0;

	jj_work(&rt->env, s.u.s.n);
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

	jj_bind(rt, a, P, arg);
	if (arg[0].t == JV_LIST && (arg[0].flags & JVF_TUPLE)) {
		for (size_t i = 0; i < arg[0].u.l->n; i++)
			if (has_prefix(s, jj_want_str(rt, arg[0].u.l->v[i], a, "an item"), suffix))
				return jv_bool(true);
		return jv_bool(false);
	}
	return jv_bool(has_prefix(s, jj_want_str(rt, arg[0], a, "the argument"), suffix));
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

	jj_work(&rt->env, s.u.s.n);
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

jv jj_join_items(jj_rt *rt, jv sep, jv items, jj_args *a, bool strict)
{
	jj_buf b = jj_newbuf();

	for (size_t i = 0; i < items.u.l->n; i++) {
		jv it = items.u.l->v[i];

		if (i > 0)
			jj_buf_add(&rt->env, &b, sep.u.s.p, sep.u.s.n);
		if (strict && it.t != JV_STR)
			jj_fail(&rt->env, a->at, "sequence item %zu: expected str instance, "
				"%s found", i, jv_type_name(it));
		jv_str_to(&rt->env, &b, it, a->at);
	}
	return jj_buf_val(&b);
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
		jj_bind(rt, a, P_CHARS, v);
		if (v[0].t != JV_UNDEF && v[0].t != JV_NONE)
			jj_want_str(rt, v[0], a, "chars");
		return jj_strip(s, v[0], id != M_RSTRIP, id != M_LSTRIP);
	case M_SPLIT:
	case M_RSPLIT: {
		int64_t max = -1;

		jj_bind(rt, a, P_SPLIT, v);
		if (v[1].t != JV_UNDEF)
			max = jj_want_int(rt, v[1], a, "maxsplit");
		if (v[0].t != JV_UNDEF && v[0].t != JV_NONE)
			jj_want_str(rt, v[0], a, "sep");
		else
			v[0] = jv_none();
		if (id == M_RSPLIT)
			return rsplit(rt, s, v[0], max, a);
		return v[0].t == JV_STR ? split_sep(rt, s, v[0], max, a) :
			split_ws(rt, s, max, a);
	}
	case M_SPLITLINES:
		jj_bind(rt, a, P_KEEP, v);
		return jj_splitlines(rt, s, jv_truthy(v[0]), a->at);
	case M_STARTSWITH:
	case M_ENDSWITH:
		return starts_ends(rt, s, a, id == M_ENDSWITH);
	case M_REPLACE: {
		unsigned m = jj_bind(rt, a, P_REPL, v);

		if ((m & 3) != 3)
			jj_fail(&rt->env, a->at, "replace takes old and new");
		return jj_replace(rt, s, jj_want_str(rt, v[0], a, "old"),
			       jj_want_str(rt, v[1], a, "new"),
			       (m & 4) ? jj_want_int(rt, v[2], a, "count") : -1);
	}
	case M_UPPER:
	case M_LOWER:
		jj_no_args(rt, a);
		return jj_case_full(rt, s, id == M_UPPER);
	case M_TITLE:
		jj_no_args(rt, a);
		return str_title(rt, s);
	case M_CAPITALIZE:
		jj_no_args(rt, a);
		return jj_str_capitalize(rt, s);
	case M_FIND:
	case M_RFIND:
	case M_COUNT:
		if (!(jj_bind(rt, a, P_SUB, v) & 1))
			jj_fail(&rt->env, a->at, "%s takes a substring", a->what);
		return find_sub(rt, s, jj_want_str(rt, v[0], a, "sub"), id);
	case M_JOIN:
		if (!(jj_bind(rt, a, P_IT, v) & 1))
			jj_fail(&rt->env, a->at, "join takes an iterable");
		return jj_join_items(rt, s, jj_iterate(rt, v[0], a->at), a, true);
	case M_REMOVEPREFIX:
	case M_REMOVESUFFIX:
		if (!(jj_bind(rt, a, P_SUB, v) & 1))
			jj_fail(&rt->env, a->at, "%s takes a string", a->what);
		jj_want_str(rt, v[0], a, "the argument");
		if (!has_prefix(s, v[0], id == M_REMOVESUFFIX))
			return s;
		return jv_str(s.u.s.p + (id == M_REMOVEPREFIX ? v[0].u.s.n : 0),
			      s.u.s.n - v[0].u.s.n);
	}
	jj_fail(&rt->env, a->at, "no method %s", a->what);
}

jv jj_items_of(jj_rt *rt, jv d)
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
		jj_no_args(rt, a);
		return jj_items_of(rt, d);
	case M_KEYS:
		jj_no_args(rt, a);
		return jj_iterate(rt, d, a->at);
	case M_VALUES:
		jj_no_args(rt, a);
		out = jv_list_new(&rt->env, d.u.d->n);
		for (size_t i = 0; i < d.u.d->n; i++)
			jv_list_push(&rt->env, out, d.u.d->v[i]);
		return out;
	case M_GET: {
		jv *got;

		if (!(jj_bind(rt, a, P_GET, v) & 1))
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

	if (!(jj_bind(rt, a, P_X, v) & 1))
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

static bool name_in(const char *const *list, const char *name, size_t n)
{
	for (size_t i = 0; list[i] != NULL; i++)
		if (strlen(list[i]) == n && memcmp(list[i], name, n) == 0)
			return true;
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
		v[a->npos == 1 ? 1 : i] = jj_want_int(rt, a->pos[i], a, "an argument");
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

	if (!(jj_bind(rt, a, P, arg) & 1))
		jj_fail(&rt->env, a->at, "strftime_now takes a format");
	fmt = jj_want_str(rt, arg[0], a, "the format");
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

		jj_bind(rt, a, P, arg);
		msg = jj_str_of(rt, arg[0], a);
		jj_raise(&rt->env, msg.u.s.p, msg.u.s.n);
	}
	case G_STRFTIME:
		return g_strftime(rt, a);
	}
	jj_fail(&rt->env, a->at, "no function %s", a->what);
}

/*
 * jinja_filter.c - the Jinja interpreter's filters and tests
 * (jinja_int.h), with the semantics of Jinja2 3.1 and transformers' tojson.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unicode/uchar.h>

#include "jinja_int.h"

/* ---- filters ------------------------------------------------------------------------ */

typedef jv (*filter_fn)(jj_rt *rt, jv v, jj_args *a);

static jv f_abs(jj_rt *rt, jv v, jj_args *a)
{
	jj_no_args(rt, a);
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
	jj_no_args(rt, a);
	return jj_str_capitalize(rt, jj_str_of(rt, v, a));
}

static jv f_length(jj_rt *rt, jv v, jj_args *a)
{
	jj_no_args(rt, a);
	switch (v.t) {
	case JV_UNDEF:
		return jv_int(0);
	case JV_STR:
		jj_work(&rt->env, v.u.s.n);
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
	unsigned m = jj_bind(rt, a, P, arg);

	if (v.t == JV_UNDEF || (jv_truthy(arg[1]) && !jv_truthy(v)))
		return (m & 1) ? arg[0] : jv_str("", 0);
	return v;
}

static jv f_escape(jj_rt *rt, jv v, jj_args *a)
{
	jv s;
	jj_buf b = jj_newbuf();

	jj_no_args(rt, a);
	s = jj_str_of(rt, v, a);
	for (size_t i = 0; i < s.u.s.n; i++) {
		char c = s.u.s.p[i];
		const char *r = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" :
			c == '"' ? "&#34;" : c == '\'' ? "&#39;" : NULL;

		if (r != NULL)
			jj_buf_adds(&rt->env, &b, r);
		else
			jj_buf_addc(&rt->env, &b, c);
	}
	return jj_buf_val(&b);
}

static jv f_first(jj_rt *rt, jv v, jj_args *a)
{
	jv items;

	jj_no_args(rt, a);
	items = jj_iterate(rt, v, a->at);
	if (items.u.l->n == 0)
		return jv_undef("No first item, sequence was empty.");
	return items.u.l->v[0];
}

static jv f_last(jj_rt *rt, jv v, jj_args *a)
{
	jv items;

	jj_no_args(rt, a);
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
	jv t = jj_strip(s, jv_undef(NULL), true, true);
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
	unsigned m = jj_bind(rt, a, P, arg);

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
	jv t = jj_strip(s, jv_undef(NULL), true, true);
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
	unsigned m = jj_bind(rt, a, P, arg);
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
	jj_no_args(rt, a);
	if (v.t == JV_UNDEF)
		return jv_list_new(&rt->env, 0);
	if (v.t != JV_DICT || (v.flags & JVF_NS))
		jj_fail(&rt->env, a->at, "Can only get item pairs from a mapping.");
	return jj_items_of(rt, v);
}

/* An item's attribute as Jinja2's attribute arguments name it: dotted
 * parts, integer parts as indices. */
static jv attr_path(jj_rt *rt, jv item, jv attr, jj_args *a)
{
	const char *p, *end;

	if (attr.t == JV_INT)
		return jj_getitem(rt, item, attr, a->at);
	jj_want_str(rt, attr, a, "attribute");
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
	unsigned m = jj_bind(rt, a, P, arg);

	items = jj_iterate(rt, v, a->at);
	sep = (m & 1) ? jj_str_of(rt, arg[0], a) : jv_str("", 0);
	if (m & 2) {
		jv mapped = jv_list_new(&rt->env, items.u.l->n);

		for (size_t i = 0; i < items.u.l->n; i++)
			jv_list_push(&rt->env, mapped, attr_path(rt, items.u.l->v[i], arg[1], a));
		items = mapped;
	}
	return jj_join_items(rt, sep, items, a, false);
}

static jv f_list(jj_rt *rt, jv v, jj_args *a)
{
	jv items, out;

	jj_no_args(rt, a);
	items = jj_iterate(rt, v, a->at);
	out = jv_list_new(&rt->env, items.u.l->n);
	for (size_t i = 0; i < items.u.l->n; i++)
		jv_list_push(&rt->env, out, items.u.l->v[i]);
	return out;
}

static jv f_lower(jj_rt *rt, jv v, jj_args *a)
{
	jj_no_args(rt, a);
	return jj_case_full(rt, jj_str_of(rt, v, a), 0);
}

static jv f_upper(jj_rt *rt, jv v, jj_args *a)
{
	jj_no_args(rt, a);
	return jj_case_full(rt, jj_str_of(rt, v, a), 1);
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
		unsigned m = jj_bind(rt, a, P, arg);

		if (!(m & 1))
			jj_fail(&rt->env, a->at, "map needs a filter name or attribute=");
		for (size_t i = 0; i < items.u.l->n; i++) {
			jv x = attr_path(rt, items.u.l->v[i], arg[0], a);

			jv_list_push(&rt->env, out, x.t == JV_UNDEF && (m & 2) ? arg[1] : x);
		}
		return out;
	}
	jv name = jj_want_str(rt, a->pos[0], a, "the filter name");
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
		jv name = jj_want_str(rt, a->pos[first], a, "the test name");

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
	unsigned m = jj_bind(rt, a, P, arg);

	if ((m & 3) != 3)
		jj_fail(&rt->env, a->at, "replace takes old and new");
	return jj_replace(rt, jj_str_of(rt, v, a), jj_str_of(rt, arg[0], a), jj_str_of(rt, arg[1], a),
		       (m & 4) && arg[2].t != JV_NONE ? jj_want_int(rt, arg[2], a, "count") : -1);
}

static jv f_reverse(jj_rt *rt, jv v, jj_args *a)
{
	jv items, out;

	jj_no_args(rt, a);
	if (v.t == JV_STR) {
		jj_buf b = jj_newbuf();

		items = jj_iterate(rt, v, a->at);
		for (size_t i = items.u.l->n; i-- > 0;)
			jj_buf_add(&rt->env, &b, items.u.l->v[i].u.s.p, items.u.l->v[i].u.s.n);
		return jj_buf_val(&b);
	}
	items = jj_iterate(rt, v, a->at);
	out = jv_list_new(&rt->env, items.u.l->n);
	for (size_t i = items.u.l->n; i-- > 0;)
		jv_list_push(&rt->env, out, items.u.l->v[i]);
	return out;
}

static jv f_safe(jj_rt *rt, jv v, jj_args *a)
{
	jj_no_args(rt, a);
	return jj_str_of(rt, v, a);
}

/* The key sort and unique compare by: the attribute, lowered strings
 * unless case_sensitive. */
static jv sort_key(jj_rt *rt, jv x, jv attr, bool has_attr, bool cs, jj_args *a)
{
	if (has_attr)
		x = attr_path(rt, x, attr, a);
	if (!cs && x.t == JV_STR)
		x = jj_case_full(rt, x, 0);
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
	unsigned m = jj_bind(rt, a, P, arg);
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
	jj_no_args(rt, a);
	return jj_str_of(rt, v, a);
}

static jv f_title(jj_rt *rt, jv v, jj_args *a)
{
	jj_no_args(rt, a);
	return jj_filter_title_str(rt, jj_str_of(rt, v, a));
}

/* transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False) */
static jv f_tojson(jj_rt *rt, jv v, jj_args *a)
{
	static const char *const P[] = { "ensure_ascii", "indent", "separators",
					  "sort_keys", NULL };
	jv arg[4];
	unsigned m = jj_bind(rt, a, P, arg);
	jj_json_fmt f = { .item_sep = ", ", .key_sep = ": " };
	jj_buf b = jj_newbuf();
	char *ind;

	if ((m & 1) && jv_truthy(arg[0]))
		jj_fail(&rt->env, a->at, "tojson: ensure_ascii=True is not supported");
	if ((m & 2) && arg[1].t != JV_NONE) {
		if (arg[1].t == JV_STR) {
			f.indent = arg[1].u.s.p;
			f.indent_n = arg[1].u.s.n;
		} else {
			int64_t n = jj_want_int(rt, arg[1], a, "indent");

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
	return jj_buf_val(&b);
}

static jv f_trim(jj_rt *rt, jv v, jj_args *a)
{
	static const char *const P[] = { "chars", NULL };
	jv arg[1];

	jj_bind(rt, a, P, arg);
	if (arg[0].t != JV_UNDEF && arg[0].t != JV_NONE)
		jj_want_str(rt, arg[0], a, "chars");
	return jj_strip(jj_str_of(rt, v, a), arg[0], true, true);
}

static jv f_unique(jj_rt *rt, jv v, jj_args *a)
{
	static const char *const P[] = { "case_sensitive", "attribute", NULL };
	jv arg[2], items = jj_iterate(rt, v, a->at), out = jv_list_new(&rt->env, 0);
	jv seen = jv_list_new(&rt->env, 0);
	unsigned m = jj_bind(rt, a, P, arg);

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

	jj_no_args(rt, a);
	s = jj_str_of(rt, v, a);
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
	jj_buf b = jj_newbuf(), t = jj_newbuf();
	unsigned m = jj_bind(rt, a, P, arg);

	if ((m & 1) && arg[0].t == JV_STR) {
		ind = arg[0];
	} else {
		int64_t w = (m & 1) ? jj_want_int(rt, arg[0], a, "width") : 4;

		if (w > 1024)
			jj_fail(&rt->env, a->at, "indent: width over 1024");
		for (int64_t i = 0; i < w; i++)
			jj_buf_addc(&rt->env, &t, ' ');
		ind = jj_buf_val(&t);
	}
	s = jj_str_of(rt, v, a);
	jj_buf_add(&rt->env, &b, s.u.s.p, s.u.s.n);
	jj_buf_addc(&rt->env, &b, '\n');
	lines = jj_splitlines(rt, jj_buf_val(&b), false, a->at);
	b = jj_newbuf();
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
	return jj_buf_val(&b);
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

	if (!(jj_bind(rt, a, P, arg) & 1))
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
	jv s = jj_str_of(rt, v, a);
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
	return jj_want_int(rt, v, a, "the value");
}

bool jj_apply_test(jj_rt *rt, int id, jv v, jj_args *a)
{
	int t = TESTS[id].id;
	jv o;

	if (t > T_SAMEAS && t != T_EQ && t != T_NE && t != T_IN &&
	    t != T_LT && t != T_LE && t != T_GT && t != T_GE && t != T_DIVISIBLEBY)
		jj_no_args(rt, a);
	switch (t) {
	case T_DEFINED: jj_no_args(rt, a); return v.t != JV_UNDEF;
	case T_UNDEFINED: jj_no_args(rt, a); return v.t == JV_UNDEF;
	case T_NONE: jj_no_args(rt, a); return v.t == JV_NONE;
	case T_BOOLEAN: jj_no_args(rt, a); return v.t == JV_BOOL;
	case T_FALSE: jj_no_args(rt, a); return v.t == JV_BOOL && !v.u.b;
	case T_TRUE: jj_no_args(rt, a); return v.t == JV_BOOL && v.u.b;
	case T_INTEGER: jj_no_args(rt, a); return v.t == JV_INT;
	case T_FLOAT: jj_no_args(rt, a); return v.t == JV_FLOAT;
	case T_NUMBER: jj_no_args(rt, a); return jv_is_number(v);
	case T_STRING: jj_no_args(rt, a); return v.t == JV_STR;
	case T_MAPPING:
		jj_no_args(rt, a);
		return v.t == JV_DICT && !(v.flags & JVF_NS);
	case T_ITERABLE:
		jj_no_args(rt, a);
		return v.t == JV_UNDEF || v.t == JV_STR || v.t == JV_LIST ||
		       (v.t == JV_DICT && !(v.flags & JVF_NS));
	case T_SEQUENCE:
		jj_no_args(rt, a);
		return v.t == JV_UNDEF || v.t == JV_STR || v.t == JV_LIST ||
		       (v.t == JV_DICT && !(v.flags & JVF_NS));
	case T_CALLABLE:
		jj_no_args(rt, a);
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
		int64_t d = jj_want_int(rt, one_arg(rt, a), a, "the divisor");

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


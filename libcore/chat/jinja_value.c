/*
 * jinja_value.c - the Jinja interpreter's values (jinja_int.h): the arena,
 * errors, strings and UTF-8, lists and dicts, Python's str() and repr(),
 * json.dumps, and the context's JSON as values.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unicode/uchar.h>

#include "jinja_int.h"

/* ---- arena ----------------------------------------------------------------- */

struct jj_chunk {
	jj_chunk *next;
	size_t cap, used;
	_Alignas(16) unsigned char mem[];
};

#define CHUNK_MIN ((size_t)64 << 10)

void jj_arena_free(jj_arena *a)
{
	jj_chunk *c = a->head, *n;

	for (; c != NULL; c = n) {
		n = c->next;
		free(c);
	}
	a->head = NULL;
	a->used = 0;
}

/* NULL when over the limit or out of memory. */
static void *arena_take(jj_arena *a, size_t n)
{
	jj_chunk *c = a->head;
	size_t need, cap, total;

	if (ds_add_sz(n, 15, &need) != 0)
		return NULL;
	need &= ~(size_t)15;
	if (c != NULL && c->cap - c->used >= need) {
		void *p = c->mem + c->used;

		c->used += need;
		memset(p, 0, n);
		return p;
	}
	cap = need > CHUNK_MIN ? need : CHUNK_MIN;
	if (ds_add_sz(cap, sizeof *c, &total) != 0 ||
	    ds_add_sz(a->used, total, &a->used) != 0 || a->used > a->limit)
		return NULL;
	c = malloc(total);
	if (c == NULL)
		return NULL;
	c->cap = cap;
	c->used = need;
	/* a big block goes behind the current chunk, whose free space
	 * stays in use */
	if (a->head != NULL && need > CHUNK_MIN) {
		c->next = a->head->next;
		a->head->next = c;
	} else {
		c->next = a->head;
		a->head = c;
	}
	memset(c->mem, 0, n);
	return c->mem;
}

void *jj_alloc(jj_env *e, size_t n)
{
	void *p = arena_take(e->arena, n == 0 ? 1 : n);

	if (p == NULL)
		jj_fail(e, UINT32_MAX, "out of memory (over %u MiB)",
			(unsigned)(e->arena->limit >> 20));
	return p;
}

void *jj_alloc_n(jj_env *e, size_t n, size_t size)
{
	size_t b;

	if (ds_mul_sz(n, size, &b) != 0)
		jj_fail(e, UINT32_MAX, "out of memory (size overflow)");
	return jj_alloc(e, b);
}

void jj_work(jj_env *e, size_t n)
{
	e->work += n;
	if (e->work > JINJA_MAX_WORK)
		jj_fail(e, UINT32_MAX, "over %llu bytes of string work",
			(unsigned long long)JINJA_MAX_WORK);
}

/* ---- errors ---------------------------------------------------------------- */

_Noreturn void jj_fail(jj_env *e, uint32_t pos, const char *fmt, ...)
{
	char msg[sizeof e->err->msg];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (pos == UINT32_MAX) {
		ds_errf(e->err, "%s: %s", JINJA_NAME, msg);
	} else {
		size_t line = 1, col = 1, i = 0, end = pos;

		if (end > e->srclen)
			end = e->srclen;
		while (i < end) {
			if (e->src[i] == '\n') {
				line++;
				col = 1;
				i++;
				continue;
			}
			jj_utf8_next(e->src, end, &i);
			col++;
		}
		ds_errf(e->err, "%s:%zu:%zu: %s", JINJA_NAME, line, col, msg);
	}
	longjmp(e->jb, 1);
}

_Noreturn void jj_raise(jj_env *e, const char *msg, size_t n)
{
	size_t cap = sizeof e->err->msg - 1;

	ds_errf(e->err, "%.*s", (int)(n < cap ? n : cap), msg);
	e->raised = true;
	longjmp(e->jb, 1);
}

/* ---- UTF-8 ----------------------------------------------------------------- */

uint32_t jj_utf8_next(const char *s, size_t n, size_t *i)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t k = *i;
	uint32_t c = u[k];
	int extra = c < 0x80 ? 0 : c < 0xe0 ? 1 : c < 0xf0 ? 2 : 3;

	if (extra == 0) {
		*i = k + 1;
		return c;
	}
	c &= 0x3f >> extra;
	for (int j = 1; j <= extra && k + j < n; j++)
		c = c << 6 | (u[k + j] & 0x3f);
	*i = k + 1 + (size_t)extra > n ? n : k + 1 + (size_t)extra;
	return c;
}

size_t jj_utf8_put(char *out, uint32_t c)
{
	unsigned char *o = (unsigned char *)out;

	if (c < 0x80) {
		o[0] = (unsigned char)c;
		return 1;
	}
	if (c < 0x800) {
		o[0] = (unsigned char)(0xc0 | c >> 6);
		o[1] = (unsigned char)(0x80 | (c & 0x3f));
		return 2;
	}
	if (c < 0x10000) {
		o[0] = (unsigned char)(0xe0 | c >> 12);
		o[1] = (unsigned char)(0x80 | (c >> 6 & 0x3f));
		o[2] = (unsigned char)(0x80 | (c & 0x3f));
		return 3;
	}
	o[0] = (unsigned char)(0xf0 | c >> 18);
	o[1] = (unsigned char)(0x80 | (c >> 12 & 0x3f));
	o[2] = (unsigned char)(0x80 | (c >> 6 & 0x3f));
	o[3] = (unsigned char)(0x80 | (c & 0x3f));
	return 4;
}

size_t jj_utf8_len(const char *s, size_t n)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += ((unsigned char)s[i] & 0xc0) != 0x80;
	return k;
}

size_t jj_utf8_off(const char *s, size_t n, size_t k)
{
	size_t i = 0;

	while (k > 0 && i < n) {
		jj_utf8_next(s, n, &i);
		k--;
	}
	return i;
}

/* Well-formed UTF-8 (no overlongs, surrogates or code points past
 * U+10FFFF): what a Python str can be encoded from. */
bool jj_utf8_valid(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;

	while (i < n) {
		unsigned c = u[i];
		size_t len;
		uint32_t cp, min;

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c < 0xe0)
			len = 2, cp = c & 0x1f, min = 0x80;
		else if (c >= 0xe0 && c < 0xf0)
			len = 3, cp = c & 0x0f, min = 0x800;
		else if (c >= 0xf0 && c < 0xf5)
			len = 4, cp = c & 0x07, min = 0x10000;
		else
			return false;
		if (n - i < len)
			return false;
		for (size_t j = 1; j < len; j++) {
			if ((u[i + j] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (u[i + j] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000))
			return false;
		i += len;
	}
	return true;
}

/* Python's str.isspace(): bidirectional class WS, B or S, or Zs. */
bool jj_isspace(uint32_t c)
{
	if (c < 0x80)
		return c == ' ' || (c >= 0x09 && c <= 0x0d) ||
		       (c >= 0x1c && c <= 0x1f);
	return c == 0x85 || c == 0xa0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
	       c == 0x202f || c == 0x205f || c == 0x3000;
}

size_t jj_space_at(const char *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		size_t j = i;

		if (!jj_isspace(jj_utf8_next(s, n, &j)))
			break;
		i = j;
	}
	return i;
}

size_t jj_space_before(const char *s, size_t n)
{
	size_t end = n;

	while (end > 0) {
		size_t st = end - 1, j;

		while (st > 0 && ((unsigned char)s[st] & 0xc0) == 0x80)
			st--;
		j = st;
		if (!jj_isspace(jj_utf8_next(s, n, &j)))
			break;
		end = st;
	}
	return n - end;
}

/* ---- buffers, lists, dicts ------------------------------------------------- */

void jj_buf_add(jj_env *e, jj_buf *b, const char *s, size_t n)
{
	size_t need;

	if (n == 0)
		return;
	jj_work(e, n);
	if (ds_add_sz(b->n, n, &need) != 0 || (b->max != 0 && need > b->max))
		jj_fail(e, UINT32_MAX, "output over %zu bytes", b->max);
	if (need > b->cap) {
		size_t cap = b->cap < 64 ? 64 : b->cap;
		char *p;

		while (cap < need)
			if (ds_mul_sz(cap, 2, &cap) != 0)
				jj_fail(e, UINT32_MAX, "out of memory");
		p = jj_alloc(e, cap);
		if (b->n > 0)
			memcpy(p, b->p, b->n);
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n = need;
}

void jj_buf_addc(jj_env *e, jj_buf *b, char c)
{
	jj_buf_add(e, b, &c, 1);
}

void jj_buf_addf(jj_env *e, jj_buf *b, const char *fmt, ...)
{
	char tmp[128];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	if (n > 0)
		jj_buf_add(e, b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

jv jv_strdup(jj_env *e, const char *p, size_t n)
{
	char *c = jj_alloc(e, n);

	if (n > 0)
		memcpy(c, p, n);
	return jv_str(c, n);
}

jv jv_list_new(jj_env *e, size_t cap)
{
	jj_list *l = jj_alloc(e, sizeof *l);

	if (cap > 0)
		l->v = jj_alloc_n(e, cap, sizeof *l->v);
	l->cap = cap;
	return (jv){ .t = JV_LIST, .u.l = l };
}

uint32_t jv_depth(jv v)
{
	if (v.t == JV_LIST)
		return v.u.l->depth;
	if (v.t == JV_DICT)
		return v.u.d->depth;
	return 0;
}

bool jv_has_ns(jv v)
{
	if (v.t == JV_LIST)
		return v.u.l->has_ns;
	if (v.t == JV_DICT)
		return (v.flags & JVF_NS) || v.u.d->has_ns;
	return false;
}

/* The depth and namespace marks of a container that gets item. */
static void note_item(jj_env *e, uint32_t *depth, bool *has_ns, jv item)
{
	uint32_t d = jv_depth(item) + 1;

	if (d > JINJA_MAX_VALUE_DEPTH)
		jj_fail(e, UINT32_MAX, "lists and dicts nested deeper than %d",
			JINJA_MAX_VALUE_DEPTH);
	if (d > *depth)
		*depth = d;
	*has_ns |= jv_has_ns(item);
}

void jv_list_push(jj_env *e, jv list, jv item)
{
	jj_list *l = list.u.l;

	note_item(e, &l->depth, &l->has_ns, item);

	if (l->n == l->cap) {
		size_t cap = l->cap < 4 ? 4 : l->cap;
		jv *v;

		if (ds_mul_sz(cap, 2, &cap) != 0)
			jj_fail(e, UINT32_MAX, "out of memory");
		v = jj_alloc_n(e, cap, sizeof *v);
		if (l->n > 0)
			memcpy(v, l->v, l->n * sizeof *v);
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = item;
}

jv jv_dict_new(jj_env *e, size_t cap)
{
	jj_dict *d = jj_alloc(e, sizeof *d);

	if (cap > 0) {
		d->k = jj_alloc_n(e, cap, sizeof *d->k);
		d->v = jj_alloc_n(e, cap, sizeof *d->v);
	}
	d->cap = cap;
	return (jv){ .t = JV_DICT, .u.d = d };
}

/* Python dict keys: 1, 1.0 and True are one key; the types that hash. */
jv *jv_dict_get(jv dict, jv key)
{
	jj_dict *d = dict.u.d;

	for (size_t i = 0; i < d->n; i++)
		if (jv_eq(d->k[i], key))
			return &d->v[i];
	return NULL;
}

jv *jv_dict_gets(jv dict, const char *key, size_t n)
{
	jj_dict *d = dict.u.d;

	for (size_t i = 0; i < d->n; i++)
		if (d->k[i].t == JV_STR && d->k[i].u.s.n == n &&
		    memcmp(d->k[i].u.s.p, key, n) == 0)
			return &d->v[i];
	return NULL;
}

void jv_dict_set(jj_env *e, jv dict, jv key, jv val)
{
	jj_dict *d = dict.u.d;
	jv *have = jv_dict_get(dict, key);

	note_item(e, &d->depth, &d->has_ns, val);
	if (have != NULL) {
		*have = val;
		return;
	}
	if (d->n == d->cap) {
		size_t cap = d->cap < 4 ? 4 : d->cap;
		jv *k, *v;

		if (ds_mul_sz(cap, 2, &cap) != 0)
			jj_fail(e, UINT32_MAX, "out of memory");
		k = jj_alloc_n(e, cap, sizeof *k);
		v = jj_alloc_n(e, cap, sizeof *v);
		if (d->n > 0) {
			memcpy(k, d->k, d->n * sizeof *k);
			memcpy(v, d->v, d->n * sizeof *v);
		}
		d->k = k;
		d->v = v;
		d->cap = cap;
	}
	d->k[d->n] = key;
	d->v[d->n] = val;
	d->n++;
}

/* ---- Python semantics ------------------------------------------------------ */

bool jv_truthy(jv v)
{
	switch (v.t) {
	case JV_UNDEF:
	case JV_NONE:
		return false;
	case JV_BOOL:
		return v.u.b;
	case JV_INT:
		return v.u.i != 0;
	case JV_FLOAT:
		return v.u.f != 0.0;
	case JV_STR:
		return v.u.s.n > 0;
	case JV_LIST:
		return v.u.l->n > 0;
	case JV_DICT:
		return (v.flags & JVF_NS) != 0 || v.u.d->n > 0;
	default:
		return true;
	}
}

bool jv_is_number(jv v)
{
	return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
}

double jv_num(jv v)
{
	return v.t == JV_INT ? (double)v.u.i : v.t == JV_FLOAT ? v.u.f : v.u.b;
}

static bool dict_eq(jv a, jv b)
{
	if (a.u.d->n != b.u.d->n)
		return false;
	for (size_t i = 0; i < a.u.d->n; i++) {
		jv *o = jv_dict_get(b, a.u.d->k[i]);

		if (o == NULL || !jv_eq(a.u.d->v[i], *o))
			return false;
	}
	return true;
}

bool jv_eq(jv a, jv b)
{
	if (jv_is_number(a) && jv_is_number(b)) {
		if (a.t != JV_FLOAT && b.t != JV_FLOAT)
			return (a.t == JV_INT ? a.u.i : a.u.b) ==
			       (b.t == JV_INT ? b.u.i : b.u.b);
		return jv_num(a) == jv_num(b);
	}
	if (a.t != b.t)
		return false;
	switch (a.t) {
	case JV_UNDEF:
	case JV_NONE:
		return true;
	case JV_STR:
		return a.u.s.n == b.u.s.n &&
		       (a.u.s.n == 0 || memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0);
	case JV_LIST:
		if ((a.flags & JVF_TUPLE) != (b.flags & JVF_TUPLE) ||
		    a.u.l->n != b.u.l->n)
			return false;
		for (size_t i = 0; i < a.u.l->n; i++)
			if (!jv_eq(a.u.l->v[i], b.u.l->v[i]))
				return false;
		return true;
	case JV_DICT:
		if ((a.flags & JVF_NS) || (b.flags & JVF_NS))
			return a.u.d == b.u.d;
		return dict_eq(a, b);
	case JV_FUNC:
		return a.u.fn == b.u.fn;
	case JV_LOOP:
		return a.u.loop == b.u.loop;
	}
	return false;
}

const char *jv_type_name(jv v)
{
	static const char *const names[] = {
		[JV_UNDEF] = "Undefined", [JV_NONE] = "NoneType",
		[JV_BOOL] = "bool", [JV_INT] = "int", [JV_FLOAT] = "float",
		[JV_STR] = "str", [JV_LIST] = "list", [JV_DICT] = "dict",
		[JV_FUNC] = "function", [JV_LOOP] = "LoopContext",
	};

	if (v.t == JV_LIST && (v.flags & JVF_TUPLE))
		return "tuple";
	if (v.t == JV_DICT && (v.flags & JVF_NS))
		return "Namespace";
	if (v.t == JV_FUNC && v.u.fn->kind == F_MACRO)
		return "Macro";
	if (v.t == JV_FUNC && v.u.fn->kind == F_METHOD)
		return "builtin_function_or_method";
	return names[v.t];
}

/* ---- printing ---------------------------------------------------------------- */

/* Python's repr(float): the shortest digits that read back the same,
 * positional between 1e-4 and 1e16, else with an exponent of at least
 * two digits. */
void jj_float_repr(char *out, size_t cap, double f)
{
	char tmp[40], digits[24];
	int prec, exp, nd = 0;
	char *p;

	if (isnan(f)) {
		snprintf(out, cap, "nan");
		return;
	}
	if (isinf(f)) {
		snprintf(out, cap, f < 0 ? "-inf" : "inf");
		return;
	}
	for (prec = 0; prec < 17; prec++) {
		snprintf(tmp, sizeof tmp, "%.*e", prec, f);
		if (strtod(tmp, NULL) == f)
			break;
	}
	/* tmp: [-]d[.ddd]e[+-]xx */
	p = tmp;
	if (*p == '-')
		p++;
	for (; *p != 'e'; p++)
		if (*p != '.')
			digits[nd++] = *p;
	digits[nd] = '\0';
	exp = atoi(p + 1);
	while (nd > 1 && digits[nd - 1] == '0')
		digits[--nd] = '\0';
	const char *sign = f < 0 || (f == 0 && signbit(f)) ? "-" : "";
	if (exp < -4 || exp >= 16) {
		snprintf(out, cap, "%s%c%s%s%se%c%02d", sign, digits[0],
			 nd > 1 ? "." : "", digits + 1, "", exp < 0 ? '-' : '+',
			 exp < 0 ? -exp : exp);
	} else if (exp < 0) {
		snprintf(out, cap, "%s0.%.*s%s", sign, -exp - 1, "0000", digits);
	} else if (nd <= exp + 1) {
		snprintf(out, cap, "%s%s%.*s.0", sign, digits, exp + 1 - nd,
			 "0000000000000000");
	} else {
		snprintf(out, cap, "%s%.*s.%s", sign, exp + 1, digits,
			 digits + exp + 1);
	}
}

/* Python's str.isprintable() of one code point: not Cc, Cf, Cs, Co, Cn,
 * Zl, Zp, nor Zs other than the space. */
static bool printable(uint32_t c)
{
	int t;

	if (c < 0x80)
		return c >= 0x20 && c < 0x7f;
	t = u_charType((UChar32)c);
	return !(t == U_CONTROL_CHAR || t == U_FORMAT_CHAR ||
		 t == U_SURROGATE || t == U_PRIVATE_USE_CHAR ||
		 t == U_UNASSIGNED || t == U_LINE_SEPARATOR ||
		 t == U_PARAGRAPH_SEPARATOR || t == U_SPACE_SEPARATOR);
}

/* Python's repr(str). */
static void str_repr(jj_env *e, jj_buf *b, const char *s, size_t n)
{
	bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
	char q = sq && !dq ? '"' : '\'';
	size_t i = 0;

	jj_buf_addc(e, b, q);
	while (i < n) {
		size_t st = i;
		uint32_t c = jj_utf8_next(s, n, &i);

		if (c == (uint32_t)q || c == '\\') {
			jj_buf_addc(e, b, '\\');
			jj_buf_addc(e, b, (char)c);
		} else if (c == '\n') {
			jj_buf_adds(e, b, "\\n");
		} else if (c == '\r') {
			jj_buf_adds(e, b, "\\r");
		} else if (c == '\t') {
			jj_buf_adds(e, b, "\\t");
		} else if (printable(c)) {
			jj_buf_add(e, b, s + st, i - st);
		} else if (c < 0x100) {
			jj_buf_addf(e, b, "\\x%02x", c);
		} else if (c < 0x10000) {
			jj_buf_addf(e, b, "\\u%04x", c);
		} else {
			jj_buf_addf(e, b, "\\U%08x", c);
		}
	}
	jj_buf_addc(e, b, q);
}

static void seq_to(jj_env *e, jj_buf *b, jv v, uint32_t pos)
{
	bool tuple = (v.flags & JVF_TUPLE) != 0;

	jj_buf_addc(e, b, tuple ? '(' : '[');
	for (size_t i = 0; i < v.u.l->n; i++) {
		if (i > 0)
			jj_buf_adds(e, b, ", ");
		jv_repr_to(e, b, v.u.l->v[i], pos);
	}
	if (tuple && v.u.l->n == 1)
		jj_buf_addc(e, b, ',');
	jj_buf_addc(e, b, tuple ? ')' : ']');
}

static void dict_to(jj_env *e, jj_buf *b, jv v, uint32_t pos)
{
	jj_buf_addc(e, b, '{');
	for (size_t i = 0; i < v.u.d->n; i++) {
		if (i > 0)
			jj_buf_adds(e, b, ", ");
		jv_repr_to(e, b, v.u.d->k[i], pos);
		jj_buf_adds(e, b, ": ");
		jv_repr_to(e, b, v.u.d->v[i], pos);
	}
	jj_buf_addc(e, b, '}');
}

static void scalar_to(jj_env *e, jj_buf *b, jv v)
{
	char tmp[40];

	switch (v.t) {
	case JV_NONE:
		jj_buf_adds(e, b, "None");
		break;
	case JV_BOOL:
		jj_buf_adds(e, b, v.u.b ? "True" : "False");
		break;
	case JV_INT:
		jj_buf_addf(e, b, "%lld", (long long)v.u.i);
		break;
	case JV_FLOAT:
		jj_float_repr(tmp, sizeof tmp, v.u.f);
		jj_buf_adds(e, b, tmp);
		break;
	default:
		break;
	}
}

static void other_to(jj_env *e, jj_buf *b, jv v, uint32_t pos)
{
	if (v.t == JV_DICT && (v.flags & JVF_NS)) {
		jj_buf_adds(e, b, "<Namespace ");
		dict_to(e, b, v, pos);
		jj_buf_addc(e, b, '>');
	} else if (v.t == JV_FUNC && v.u.fn->kind == F_MACRO) {
		jj_buf_addf(e, b, "<Macro '%.*s'>", (int)v.u.fn->node->name_n,
			    v.u.fn->node->name);
	} else {
		jj_fail(e, pos, "cannot print a %s (its Python text is an address)",
			jv_type_name(v));
	}
}

void jv_repr_to(jj_env *e, jj_buf *b, jv v, uint32_t pos)
{
	switch (v.t) {
	case JV_UNDEF:
		jj_buf_adds(e, b, "Undefined");
		break;
	case JV_STR:
		str_repr(e, b, v.u.s.p, v.u.s.n);
		break;
	case JV_LIST:
		seq_to(e, b, v, pos);
		break;
	case JV_DICT:
		if (v.flags & JVF_NS)
			other_to(e, b, v, pos);
		else
			dict_to(e, b, v, pos);
		break;
	case JV_FUNC:
	case JV_LOOP:
		other_to(e, b, v, pos);
		break;
	default:
		scalar_to(e, b, v);
	}
}

void jv_str_to(jj_env *e, jj_buf *b, jv v, uint32_t pos)
{
	if (v.t == JV_UNDEF)
		return;
	if (v.t == JV_STR)
		jj_buf_add(e, b, v.u.s.p, v.u.s.n);
	else
		jv_repr_to(e, b, v, pos);
}

jv jv_to_str(jj_env *e, jv v, uint32_t pos)
{
	jj_buf b = { 0 };

	if (v.t == JV_STR)
		return v;
	jv_str_to(e, &b, v, pos);
	return jj_buf_jv(&b);
}

/* ---- json.dumps ---------------------------------------------------------------- */

static void json_str(jj_env *e, jj_buf *b, const char *s, size_t n)
{
	size_t i, run = 0;

	jj_buf_addc(e, b, '"');
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		const char *esc = NULL;
		char u[8];

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		jj_buf_add(e, b, s + run, i - run);
		run = i + 1;
		switch (c) {
		case '"': esc = "\\\""; break;
		case '\\': esc = "\\\\"; break;
		case '\n': esc = "\\n"; break;
		case '\r': esc = "\\r"; break;
		case '\t': esc = "\\t"; break;
		case '\b': esc = "\\b"; break;
		case '\f': esc = "\\f"; break;
		default:
			snprintf(u, sizeof u, "\\u%04x", c);
			esc = u;
		}
		jj_buf_adds(e, b, esc);
	}
	jj_buf_add(e, b, s + run, n - run);
	jj_buf_addc(e, b, '"');
}

static void json_newline(jj_env *e, jj_buf *b, const jj_json_fmt *f, int depth)
{
	jj_buf_addc(e, b, '\n');
	for (int i = 0; i < depth; i++)
		jj_buf_add(e, b, f->indent, f->indent_n);
}

/* A dict key as json.dumps writes it: str as is; int, float, bool and
 * None as their JSON text in quotes. */
static void json_key(jj_env *e, jj_buf *b, jv k, uint32_t pos)
{
	jj_buf t = { 0 };

	if (k.t == JV_STR) {
		json_str(e, b, k.u.s.p, k.u.s.n);
		return;
	}
	if (k.t == JV_NONE || k.t == JV_BOOL || k.t == JV_INT || k.t == JV_FLOAT) {
		jv_json_to(e, &t, k, NULL, 0, pos);
		json_str(e, b, t.p, t.n);
		return;
	}
	jj_fail(e, pos, "tojson: keys must be str, int, float, bool or None, not %s",
		jv_type_name(k));
}

static int key_cmp(const void *x, const void *y)
{
	const jv *a = *(const jv *const *)x, *b = *(const jv *const *)y;
	size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
	int c = n > 0 ? memcmp(a->u.s.p, b->u.s.p, n) : 0;

	return c != 0 ? c : (a->u.s.n > b->u.s.n) - (a->u.s.n < b->u.s.n);
}

static void json_dict(jj_env *e, jj_buf *b, jv v, const jj_json_fmt *f,
		      int depth, uint32_t pos)
{
	jj_dict *d = v.u.d;
	const jv **order = jj_alloc_n(e, d->n + 1, sizeof *order);

	for (size_t i = 0; i < d->n; i++)
		order[i] = &d->k[i];
	if (f->sort_keys) {
		for (size_t i = 0; i < d->n; i++)
			if (d->k[i].t != JV_STR)
				jj_fail(e, pos, "tojson: sort_keys needs str keys");
		qsort(order, d->n, sizeof *order, key_cmp);
	}
	jj_buf_addc(e, b, '{');
	for (size_t i = 0; i < d->n; i++) {
		size_t k = (size_t)(order[i] - d->k);

		if (i > 0)
			jj_buf_adds(e, b, f->item_sep);
		if (f->indent != NULL)
			json_newline(e, b, f, depth + 1);
		json_key(e, b, d->k[k], pos);
		jj_buf_adds(e, b, f->key_sep);
		jv_json_to(e, b, d->v[k], f, depth + 1, pos);
	}
	if (f->indent != NULL && d->n > 0)
		json_newline(e, b, f, depth);
	jj_buf_addc(e, b, '}');
}

void jv_json_to(jj_env *e, jj_buf *b, jv v, const jj_json_fmt *f, int depth,
		uint32_t pos)
{
	static const jj_json_fmt plain = { .item_sep = ", ", .key_sep = ": " };
	char tmp[40];

	if (f == NULL)
		f = &plain;
	if (depth > JINJA_MAX_JSON_DEPTH * 4)
		jj_fail(e, pos, "tojson: nested too deep");
	switch (v.t) {
	case JV_NONE:
		jj_buf_adds(e, b, "null");
		return;
	case JV_BOOL:
		jj_buf_adds(e, b, v.u.b ? "true" : "false");
		return;
	case JV_INT:
		jj_buf_addf(e, b, "%lld", (long long)v.u.i);
		return;
	case JV_FLOAT:
		if (isnan(v.u.f))
			jj_buf_adds(e, b, "NaN");
		else if (isinf(v.u.f))
			jj_buf_adds(e, b, v.u.f < 0 ? "-Infinity" : "Infinity");
		else {
			jj_float_repr(tmp, sizeof tmp, v.u.f);
			jj_buf_adds(e, b, tmp);
		}
		return;
	case JV_STR:
		json_str(e, b, v.u.s.p, v.u.s.n);
		return;
	case JV_LIST:
		jj_buf_addc(e, b, '[');
		for (size_t i = 0; i < v.u.l->n; i++) {
			if (i > 0)
				jj_buf_adds(e, b, f->item_sep);
			if (f->indent != NULL)
				json_newline(e, b, f, depth + 1);
			jv_json_to(e, b, v.u.l->v[i], f, depth + 1, pos);
		}
		if (f->indent != NULL && v.u.l->n > 0)
			json_newline(e, b, f, depth);
		jj_buf_addc(e, b, ']');
		return;
	case JV_DICT:
		if (!(v.flags & JVF_NS)) {
			json_dict(e, b, v, f, depth, pos);
			return;
		}
		break;
	default:
		break;
	}
	jj_fail(e, pos, "tojson: Object of type %s is not JSON serializable",
		jv_type_name(v));
}

/* ---- the context ------------------------------------------------------------ */

jv jv_from_json(jj_env *e, const json_t *j, int depth)
{
	if (depth > JINJA_MAX_JSON_DEPTH)
		jj_fail(e, UINT32_MAX, "context: JSON nested deeper than %d",
			JINJA_MAX_JSON_DEPTH);
	switch (json_typeof(j)) {
	case JSON_OBJECT: {
		jv d = jv_dict_new(e, json_object_size(j));
		const char *k;
		json_t *v;

		/* the keys are distinct: appended without a look-up */
		json_object_foreach((json_t *)j, k, v) {
			jj_dict *dd = d.u.d;

			if (dd->n == dd->cap)
				jj_fail(e, UINT32_MAX, "context: object changed");
			dd->k[dd->n] = jv_cstr(k);
			dd->v[dd->n] = jv_from_json(e, v, depth + 1);
			note_item(e, &dd->depth, &dd->has_ns, dd->v[dd->n]);
			dd->n++;
		}
		return d;
	}
	case JSON_ARRAY: {
		jv l = jv_list_new(e, json_array_size(j));
		size_t i;
		json_t *v;

		json_array_foreach(j, i, v)
			jv_list_push(e, l, jv_from_json(e, v, depth + 1));
		return l;
	}
	case JSON_STRING:
		return jv_str(json_string_value(j), json_string_length(j));
	case JSON_INTEGER:
		return jv_int(json_integer_value(j));
	case JSON_REAL:
		return jv_float(json_real_value(j));
	case JSON_TRUE:
		return jv_bool(true);
	case JSON_FALSE:
		return jv_bool(false);
	default:
		return jv_none();
	}
}

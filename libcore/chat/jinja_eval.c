/*
 * jinja_eval.c - the Jinja renderer (jinja_int.h): statements, scopes,
 * expressions and Python's operators, with Jinja2's semantics.
 *
 * Scopes: the context and the template's top-level sets are one frame; a
 * for loop's body runs in a fresh frame each iteration (what it sets is
 * gone at the next one and after the loop: namespace() is how templates
 * carry state out); a macro call runs in a frame over the one it was
 * defined in.  `if` makes no scope.
 *
 * Undefined is Jinja2's default Undefined: it prints as nothing, is
 * false, iterates as empty and has length 0, but an attribute, an item,
 * arithmetic, ordering or a call on it is an error naming what was
 * missing.  A missing attribute, key or index of a defined value is
 * undefined.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_int.h"

/* An undefined value whose hint (the error when it is used) is fmt. */
static jv undef_fmt(jj_rt *rt, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static jv undef_fmt(jj_rt *rt, const char *fmt, ...)
{
	char tmp[256];
	va_list ap;
	jv v;

	va_start(ap, fmt);
	vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	v = jv_strdup(&rt->env, tmp, strlen(tmp) + 1);
	return jv_undef(v.u.s.p);
}

_Noreturn static void fail_undef(jj_rt *rt, jv u, uint32_t pos)
{
	jj_fail(&rt->env, pos, "%s", u.u.s.p != NULL ? u.u.s.p : "undefined value");
}

void jj_count_iter(jj_rt *rt, size_t n, uint32_t pos)
{
	if (n > JINJA_MAX_ITERS || rt->iters > JINJA_MAX_ITERS - n)
		jj_fail(&rt->env, pos, "over %d loop iterations", JINJA_MAX_ITERS);
	rt->iters += n;
}

/* ---- variables -------------------------------------------------------------- */

static jj_frame *frame_new(jj_rt *rt, jj_frame *parent)
{
	jj_frame *f = jj_alloc(&rt->env, sizeof *f);

	f->parent = parent;
	f->vars = jv_dict_new(&rt->env, 4);
	return f;
}

static void set_var(jj_rt *rt, const char *name, size_t n, jv v)
{
	jv_dict_set(&rt->env, rt->frame->vars, jv_str(name, n), v);
}

static jv lookup(jj_rt *rt, const jj_node *n)
{
	int g;

	for (jj_frame *f = rt->frame; f != NULL; f = f->parent) {
		jv *v = jv_dict_gets(f->vars, n->name, n->name_n);

		if (v != NULL)
			return *v;
	}
	g = jj_global_id(n->name, n->name_n);
	if (g != -1) {
		jj_func *fn = jj_alloc(&rt->env, sizeof *fn);

		fn->kind = g >= 0 ? F_GLOBAL : F_UNSUPPORTED;
		fn->id = (uint16_t)(g >= 0 ? g : 0);
		fn->name = jv_strdup(&rt->env, n->name, n->name_n + 1).u.s.p;
		((char *)fn->name)[n->name_n] = '\0';
		return (jv){ .t = JV_FUNC, .u.fn = fn };
	}
	return undef_fmt(rt, "'%.*s' is undefined", (int)n->name_n, n->name);
}

/* ---- attributes and items ------------------------------------------------------ */

static jv method(jj_rt *rt, jv self, int id, const char *name, size_t n)
{
	jj_func *fn = jj_alloc(&rt->env, sizeof *fn);
	jv nm = jv_strdup(&rt->env, name, n + 1);

	((char *)nm.u.s.p)[n] = '\0';
	fn->kind = F_METHOD;
	fn->id = (uint16_t)id;
	fn->name = nm.u.s.p;
	fn->self = self;
	return (jv){ .t = JV_FUNC, .u.fn = fn };
}

static bool name_is(const char *name, size_t n, const char *s)
{
	return strlen(s) == n && memcmp(name, s, n) == 0;
}

static jv loop_attr(jj_rt *rt, jv lv, const char *name, size_t n)
{
	jj_loop *l = lv.u.loop;
	size_t len = l->items.u.l->n, i = l->index0;

	if (name_is(name, n, "index"))
		return jv_int((int64_t)i + 1);
	if (name_is(name, n, "index0"))
		return jv_int((int64_t)i);
	if (name_is(name, n, "revindex"))
		return jv_int((int64_t)(len - i));
	if (name_is(name, n, "revindex0"))
		return jv_int((int64_t)(len - i - 1));
	if (name_is(name, n, "first"))
		return jv_bool(i == 0);
	if (name_is(name, n, "last"))
		return jv_bool(i + 1 == len);
	if (name_is(name, n, "length"))
		return jv_int((int64_t)len);
	if (name_is(name, n, "depth"))
		return jv_int(1);
	if (name_is(name, n, "depth0"))
		return jv_int(0);
	if (name_is(name, n, "previtem"))
		return i > 0 ? l->items.u.l->v[i - 1] :
			undef_fmt(rt, "there is no previous item");
	if (name_is(name, n, "nextitem"))
		return i + 1 < len ? l->items.u.l->v[i + 1] :
			undef_fmt(rt, "there is no next item");
	if (name_is(name, n, "cycle")) {
		jj_func *fn = jj_alloc(&rt->env, sizeof *fn);

		fn->kind = F_CYCLE;
		fn->name = "cycle";
		fn->self = lv;
		return (jv){ .t = JV_FUNC, .u.fn = fn };
	}
	return undef_fmt(rt, "'LoopContext' object has no attribute '%.*s'",
			 (int)n, name);
}

jv jj_getattr(jj_rt *rt, jv obj, const char *name, size_t n, uint32_t pos)
{
	int id;

	if (obj.t == JV_UNDEF)
		fail_undef(rt, obj, pos);
	if (obj.t == JV_LOOP)
		return loop_attr(rt, obj, name, n);
	/* the sandbox hides what starts with an underscore */
	if (n > 0 && name[0] != '_' && !(obj.t == JV_DICT && (obj.flags & JVF_NS)) &&
	    (id = jj_method_id(obj, name, n)) >= 0)
		return method(rt, obj, id, name, n);
	if (obj.t == JV_DICT) {
		jv *v = jv_dict_gets(obj, name, n);

		if (v != NULL)
			return *v;
	}
	if (obj.t == JV_DICT || obj.t == JV_LIST || obj.t == JV_STR)
		return undef_fmt(rt, "'%s object' has no attribute '%.*s'",
				 jv_type_name(obj), (int)n > 60 ? 60 : (int)n, name);
	return undef_fmt(rt, "'%s' has no attribute '%.*s'", jv_type_name(obj),
			 (int)n > 60 ? 60 : (int)n, name);
}

/* An index of a sequence of n items, Python's way (negative from the end);
 * -1 if out of range. */
static int64_t seq_index(jv key, size_t n)
{
	int64_t i = key.t == JV_BOOL ? key.u.b : key.u.i;

	if (i < 0)
		i += (int64_t)n;
	return i < 0 || (uint64_t)i >= n ? -1 : i;
}

jv jj_getitem(jj_rt *rt, jv obj, jv key, uint32_t pos)
{
	bool intkey = key.t == JV_INT || key.t == JV_BOOL;

	if (obj.t == JV_UNDEF)
		fail_undef(rt, obj, pos);
	if (key.t == JV_UNDEF && obj.t != JV_DICT)
		fail_undef(rt, key, pos);
	if (obj.t == JV_DICT && !(obj.flags & JVF_NS)) {
		jv *v = jv_dict_get(obj, key);

		if (v != NULL)
			return *v;
	} else if (obj.t == JV_LIST && intkey) {
		int64_t i = seq_index(key, obj.u.l->n);

		if (i >= 0)
			return obj.u.l->v[i];
		return undef_fmt(rt, "%s index out of range", jv_type_name(obj));
	} else if (obj.t == JV_STR && intkey) {
		int64_t i;

		jj_work(&rt->env, obj.u.s.n);
		i = seq_index(key, jj_utf8_len(obj.u.s.p, obj.u.s.n));
		size_t a, b;

		if (i < 0)
			return undef_fmt(rt, "string index out of range");
		a = jj_utf8_off(obj.u.s.p, obj.u.s.n, (size_t)i);
		b = a;
		jj_utf8_next(obj.u.s.p, obj.u.s.n, &b);
		return jv_str(obj.u.s.p + a, b - a);
	}
	if (key.t == JV_STR)
		return jj_getattr(rt, obj, key.u.s.p, key.u.s.n, pos);
	if (key.t == JV_UNDEF)
		fail_undef(rt, key, pos);
	return undef_fmt(rt, "'%s object' has no item of that key", jv_type_name(obj));
}

/* ---- slices --------------------------------------------------------------------- */

static bool slice_arg(jj_rt *rt, const jj_node *n, int64_t *out)
{
	jv v;

	if (n == NULL)
		return false;
	v = jj_eval(rt, n);
	if (v.t == JV_NONE)
		return false;
	if (v.t != JV_INT && v.t != JV_BOOL)
		jj_fail(&rt->env, n->pos, "slice indices must be integers or None");
	*out = v.t == JV_INT ? v.u.i : v.u.b;
	return true;
}

/* Python's slice.indices(len) */
static void slice_bounds(int64_t len, bool has_a, int64_t a, bool has_b,
			 int64_t b, int64_t step, int64_t *start, int64_t *stop)
{
	int64_t lo = step < 0 ? -1 : 0, hi = step < 0 ? len - 1 : len;

	if (!has_a)
		*start = step < 0 ? hi : lo;
	else {
		*start = a < 0 ? a + len : a;
		*start = *start < lo ? lo : *start > hi ? hi : *start;
	}
	if (!has_b)
		*stop = step < 0 ? lo : hi;
	else {
		*stop = b < 0 ? b + len : b;
		*stop = *stop < lo ? lo : *stop > hi ? hi : *stop;
	}
}

static jv eval_slice(jj_rt *rt, const jj_node *n)
{
	jv obj = jj_eval(rt, n->a);
	int64_t a = 0, b = 0, step = 1, start, stop, len;
	bool ha, hb;
	jv out;

	if (obj.t == JV_UNDEF)
		fail_undef(rt, obj, n->pos);
	ha = slice_arg(rt, n->b, &a);
	hb = slice_arg(rt, n->c, &b);
	slice_arg(rt, n->d, &step);
	if (step == 0)
		jj_fail(&rt->env, n->pos, "slice step cannot be zero");
	if (step == INT64_MIN)
		step = INT64_MIN + 1;
	if (obj.t == JV_STR) {
		jj_work(&rt->env, obj.u.s.n);
		len = (int64_t)jj_utf8_len(obj.u.s.p, obj.u.s.n);
	}
	else if (obj.t == JV_LIST)
		len = (int64_t)obj.u.l->n;
	else
		jj_fail(&rt->env, n->pos, "'%s' object is not subscriptable",
			jv_type_name(obj));
	slice_bounds(len, ha, a, hb, b, step, &start, &stop);
	if (obj.t == JV_LIST) {
		out = jv_list_new(&rt->env, 0);
		out.flags = obj.flags & JVF_TUPLE;
		for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
			jv_list_push(&rt->env, out, obj.u.l->v[i]);
			if ((step > 0 && i > INT64_MAX - step) ||
			    (step < 0 && i < INT64_MIN - step))
				break;
		}
		return out;
	}
	if (step == 1) {
		size_t x = jj_utf8_off(obj.u.s.p, obj.u.s.n, (size_t)start);
		size_t y = start < stop ?
			jj_utf8_off(obj.u.s.p, obj.u.s.n, (size_t)stop) : x;

		return jv_str(obj.u.s.p + x, y - x);
	}
	/* other steps: by code point */
	size_t *offs = jj_alloc_n(&rt->env, (size_t)len + 1, sizeof *offs);
	jj_buf buf = { .max = JINJA_MAX_OUT };
	size_t k = 0, i = 0;

	while (i < obj.u.s.n) {
		offs[k++] = i;
		jj_utf8_next(obj.u.s.p, obj.u.s.n, &i);
	}
	offs[k] = i;
	for (int64_t c = start; step > 0 ? c < stop : c > stop; c += step) {
		jj_buf_add(&rt->env, &buf, obj.u.s.p + offs[c],
			   offs[c + 1] - offs[c]);
		if ((step > 0 && c > INT64_MAX - step) || (step < 0 && c < INT64_MIN - step))
			break;
	}
	return jj_buf_jv(&buf);
}

/* ---- operators ------------------------------------------------------------------- */

_Noreturn static void bad_operands(jj_rt *rt, const char *op, jv a, jv b,
				   uint32_t pos)
{
	if (a.t == JV_UNDEF)
		fail_undef(rt, a, pos);
	if (b.t == JV_UNDEF)
		fail_undef(rt, b, pos);
	jj_fail(&rt->env, pos, "unsupported operand type(s) for %s: '%s' and '%s'",
		op, jv_type_name(a), jv_type_name(b));
}

static bool is_intlike(jv v) { return v.t == JV_INT || v.t == JV_BOOL; }
static int64_t ival(jv v) { return v.t == JV_INT ? v.u.i : v.u.b; }

_Noreturn static void overflow(jj_rt *rt, uint32_t pos)
{
	jj_fail(&rt->env, pos, "integer overflow (past 64 bits)");
}

static jv repeat(jj_rt *rt, jv seq, int64_t times, uint32_t pos)
{
	if (times < 0)
		times = 0;
	if (seq.t == JV_STR) {
		jj_buf b = { .max = JINJA_MAX_OUT };
		size_t total;

		if (ds_mul_sz(seq.u.s.n, (size_t)times, &total) != 0 ||
		    total > JINJA_MAX_OUT)
			jj_fail(&rt->env, pos, "string over %u bytes", JINJA_MAX_OUT);
		for (int64_t i = 0; i < times; i++)
			jj_buf_add(&rt->env, &b, seq.u.s.p, seq.u.s.n);
		return jj_buf_jv(&b);
	}
	jv out = jv_list_new(&rt->env, 0);
	size_t total;

	out.flags = seq.flags & JVF_TUPLE;
	if (ds_mul_sz(seq.u.l->n, (size_t)times, &total) != 0)
		jj_fail(&rt->env, pos, "list too long");
	jj_count_iter(rt, total, pos);
	for (int64_t i = 0; i < times; i++)
		for (size_t k = 0; k < seq.u.l->n; k++)
			jv_list_push(&rt->env, out, seq.u.l->v[k]);
	return out;
}

static jv concat_seq(jj_rt *rt, jv a, jv b, uint32_t pos)
{
	if (a.t == JV_STR) {
		jj_buf s = { .max = JINJA_MAX_OUT };

		jj_buf_add(&rt->env, &s, a.u.s.p, a.u.s.n);
		jj_buf_add(&rt->env, &s, b.u.s.p, b.u.s.n);
		return jj_buf_jv(&s);
	}
	jv out = jv_list_new(&rt->env, a.u.l->n + b.u.l->n);

	jj_count_iter(rt, a.u.l->n + b.u.l->n, pos);
	out.flags = a.flags & JVF_TUPLE;
	for (size_t k = 0; k < a.u.l->n; k++)
		jv_list_push(&rt->env, out, a.u.l->v[k]);
	for (size_t k = 0; k < b.u.l->n; k++)
		jv_list_push(&rt->env, out, b.u.l->v[k]);
	return out;
}

static double floor_mod(double a, double b)
{
	double m = fmod(a, b);

	if (m != 0 && (m < 0) != (b < 0))
		m += b;
	return m;
}

static jv int_arith(jj_rt *rt, int op, int64_t x, int64_t y, uint32_t pos)
{
	int64_t r;

	switch (op) {
	case OP_ADD:
		if (__builtin_add_overflow(x, y, &r))
			overflow(rt, pos);
		return jv_int(r);
	case OP_SUB:
		if (__builtin_sub_overflow(x, y, &r))
			overflow(rt, pos);
		return jv_int(r);
	case OP_MUL:
		if (__builtin_mul_overflow(x, y, &r))
			overflow(rt, pos);
		return jv_int(r);
	case OP_DIV:
		if (y == 0)
			jj_fail(&rt->env, pos, "division by zero");
		return jv_float((double)x / (double)y);
	case OP_FLOORDIV:
	case OP_MOD:
		if (y == 0)
			jj_fail(&rt->env, pos, "integer division or modulo by zero");
		if (x == INT64_MIN && y == -1) {
			if (op == OP_MOD)
				return jv_int(0);
			overflow(rt, pos);
		}
		r = x / y;
		if ((x % y != 0) && ((x < 0) != (y < 0)))
			r--;
		return jv_int(op == OP_FLOORDIV ? r : x - r * y);
	case OP_POW:
		if (y < 0)
			return jv_float(pow((double)x, (double)y));
		r = 1;
		for (int64_t base = x; y > 0; y >>= 1) {
			if ((y & 1) && __builtin_mul_overflow(r, base, &r))
				overflow(rt, pos);
			if (y > 1 && __builtin_mul_overflow(base, base, &base))
				overflow(rt, pos);
		}
		return jv_int(r);
	}
	return jv_none();
}

static jv float_arith(jj_rt *rt, int op, double x, double y, uint32_t pos)
{
	switch (op) {
	case OP_ADD: return jv_float(x + y);
	case OP_SUB: return jv_float(x - y);
	case OP_MUL: return jv_float(x * y);
	case OP_DIV:
		if (y == 0)
			jj_fail(&rt->env, pos, "float division by zero");
		return jv_float(x / y);
	case OP_FLOORDIV:
		if (y == 0)
			jj_fail(&rt->env, pos, "float floor division by zero");
		return jv_float(floor(x / y));
	case OP_MOD:
		if (y == 0)
			jj_fail(&rt->env, pos, "float modulo");
		return jv_float(floor_mod(x, y));
	case OP_POW:
		if (x == 0 && y < 0)
			jj_fail(&rt->env, pos, "0.0 cannot be raised to a negative power");
		return jv_float(pow(x, y));
	}
	return jv_none();
}

static const char *op_text(int op)
{
	static const char *const t[] = {
		[OP_ADD] = "+", [OP_SUB] = "-", [OP_MUL] = "*", [OP_DIV] = "/",
		[OP_FLOORDIV] = "//", [OP_MOD] = "%", [OP_POW] = "** or pow()",
	};

	return t[op];
}

static jv arith(jj_rt *rt, int op, jv a, jv b, uint32_t pos)
{
	if (is_intlike(a) && is_intlike(b))
		return int_arith(rt, op, ival(a), ival(b), pos);
	if (jv_is_number(a) && jv_is_number(b))
		return float_arith(rt, op, jv_num(a), jv_num(b), pos);
	if (op == OP_ADD && a.t == b.t && (a.t == JV_STR ||
	    (a.t == JV_LIST && (a.flags & JVF_TUPLE) == (b.flags & JVF_TUPLE))))
		return concat_seq(rt, a, b, pos);
	if (op == OP_MUL && (a.t == JV_STR || a.t == JV_LIST) && is_intlike(b))
		return repeat(rt, a, ival(b), pos);
	if (op == OP_MUL && (b.t == JV_STR || b.t == JV_LIST) && is_intlike(a))
		return repeat(rt, b, ival(a), pos);
	if (op == OP_MOD && a.t == JV_STR)
		jj_fail(&rt->env, pos, "string formatting with %% is not supported");
	bad_operands(rt, op_text(op), a, b, pos);
}

static jv eval_bin(jj_rt *rt, const jj_node *n)
{
	jv a = jj_eval(rt, n->a), b = jj_eval(rt, n->b);

	if (n->op == OP_CONCAT) {
		jj_buf s = { .max = JINJA_MAX_OUT };

		jv_str_to(&rt->env, &s, a, n->pos);
		jv_str_to(&rt->env, &s, b, n->pos);
		return jj_buf_jv(&s);
	}
	return arith(rt, n->op, a, b, n->pos);
}

static jv eval_unary(jj_rt *rt, const jj_node *n)
{
	jv a = jj_eval(rt, n->a);

	if (a.t == JV_UNDEF)
		fail_undef(rt, a, n->pos);
	if (is_intlike(a)) {
		if (n->op == OP_POS)
			return jv_int(ival(a));
		if (ival(a) == INT64_MIN)
			overflow(rt, n->pos);
		return jv_int(-ival(a));
	}
	if (a.t == JV_FLOAT)
		return jv_float(n->op == OP_POS ? a.u.f : -a.u.f);
	jj_fail(&rt->env, n->pos, "bad operand type for unary %c: '%s'",
		n->op == OP_POS ? '+' : '-', jv_type_name(a));
}

/* ---- comparisons ------------------------------------------------------------------ */

static int cmp_bytes(jv a, jv b)
{
	size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
	int c = n > 0 ? memcmp(a.u.s.p, b.u.s.p, n) : 0;

	/* UTF-8 byte order is code point order */
	return c != 0 ? c : (a.u.s.n > b.u.s.n) - (a.u.s.n < b.u.s.n);
}

int jj_compare(jj_rt *rt, jv a, jv b, uint32_t pos)
{
	if (jv_is_number(a) && jv_is_number(b)) {
		if (is_intlike(a) && is_intlike(b))
			return (ival(a) > ival(b)) - (ival(a) < ival(b));
		double x = jv_num(a), y = jv_num(b);

		return (x > y) - (x < y);
	}
	if (a.t == JV_STR && b.t == JV_STR)
		return cmp_bytes(a, b);
	if (a.t == JV_LIST && b.t == JV_LIST &&
	    (a.flags & JVF_TUPLE) == (b.flags & JVF_TUPLE)) {
		size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;

		for (size_t i = 0; i < n; i++)
			if (!jv_eq(a.u.l->v[i], b.u.l->v[i]))
				return jj_compare(rt, a.u.l->v[i], b.u.l->v[i], pos);
		return (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
	}
	if (a.t == JV_UNDEF)
		fail_undef(rt, a, pos);
	if (b.t == JV_UNDEF)
		fail_undef(rt, b, pos);
	jj_fail(&rt->env, pos, "'<' not supported between instances of '%s' and '%s'",
		jv_type_name(a), jv_type_name(b));
}

bool jj_contains(jj_rt *rt, jv c, jv item, uint32_t pos)
{
	switch (c.t) {
	case JV_STR:
		if (item.t != JV_STR) {
			if (item.t == JV_UNDEF)
				fail_undef(rt, item, pos);
			jj_fail(&rt->env, pos, "'in <string>' requires string as "
				"left operand, not %s", jv_type_name(item));
		}
		if (item.u.s.n == 0)
			return true;
		jj_work(&rt->env, c.u.s.n);
		return memmem(c.u.s.p, c.u.s.n, item.u.s.p, item.u.s.n) != NULL;
	case JV_LIST:
		for (size_t i = 0; i < c.u.l->n; i++)
			if (jv_eq(c.u.l->v[i], item))
				return true;
		return false;
	case JV_DICT:
		if (c.flags & JVF_NS)
			break;
		return jv_dict_get(c, item) != NULL;
	case JV_UNDEF:
		return false;
	default:
		break;
	}
	jj_fail(&rt->env, pos, "argument of type '%s' is not iterable", jv_type_name(c));
}

static bool compare_op(jj_rt *rt, int op, jv a, jv b, uint32_t pos)
{
	switch (op) {
	case OP_EQ: return jv_eq(a, b);
	case OP_NE: return !jv_eq(a, b);
	case OP_LT: return jj_compare(rt, a, b, pos) < 0;
	case OP_LE: return jj_compare(rt, a, b, pos) <= 0;
	case OP_GT: return jj_compare(rt, a, b, pos) > 0;
	case OP_GE: return jj_compare(rt, a, b, pos) >= 0;
	case OP_IN: return jj_contains(rt, b, a, pos);
	case OP_NOTIN: return !jj_contains(rt, b, a, pos);
	}
	return false;
}

/* a < b < c: each pair, stopping at the first false */
static jv eval_cmp(jj_rt *rt, const jj_node *n)
{
	jv a = jj_eval(rt, n->a);

	for (size_t i = 0; i < n->nkids; i++) {
		jv b = jj_eval(rt, n->kids[i]->a);

		if (!compare_op(rt, n->kids[i]->op, a, b, n->kids[i]->pos))
			return jv_bool(false);
		a = b;
	}
	return jv_bool(true);
}

/* ---- calls ----------------------------------------------------------------------- */

/* Evaluate a call's arguments (kids: expressions and N_KWARG). */
static void eval_args(jj_rt *rt, const jj_node *call, jj_args *a, const char *what)
{
	size_t n = call->nkids;

	*a = (jj_args){ .at = call->pos, .what = what };
	if (n == 0)
		return;
	a->pos = jj_alloc_n(&rt->env, n, sizeof *a->pos);
	a->kwn = jj_alloc_n(&rt->env, n, sizeof *a->kwn);
	a->kwlen = jj_alloc_n(&rt->env, n, sizeof *a->kwlen);
	a->kwv = jj_alloc_n(&rt->env, n, sizeof *a->kwv);
	for (size_t i = 0; i < n; i++) {
		const jj_node *k = call->kids[i];

		if (k->kind == N_KWARG) {
			a->kwn[a->nkw] = k->name;
			a->kwlen[a->nkw] = k->name_n;
			a->kwv[a->nkw++] = jj_eval(rt, k->a);
		} else {
			a->pos[a->npos++] = jj_eval(rt, k);
		}
	}
}

static void render_body(jj_rt *rt, const jj_node *body);

static jv call_macro(jj_rt *rt, jj_func *fn, jj_args *a)
{
	const jj_node *m = fn->node;
	jj_frame *saved = rt->frame;
	jj_buf *out = rt->out, buf = { .max = JINJA_MAX_OUT };
	int brk = rt->brk;

	if (a->npos > m->nkids)
		jj_fail(&rt->env, a->at, "macro '%.*s' takes not more than %zu argument(s)",
			(int)m->name_n, m->name, m->nkids);
	for (size_t k = 0; k < a->nkw; k++) {
		size_t i;

		for (i = 0; i < m->nkids; i++)
			if (m->kids[i]->name_n == a->kwlen[k] &&
			    memcmp(m->kids[i]->name, a->kwn[k], a->kwlen[k]) == 0)
				break;
		if (i == m->nkids || i < a->npos)
			jj_fail(&rt->env, a->at, "macro '%.*s' takes no keyword argument '%.*s'",
				(int)m->name_n, m->name, (int)a->kwlen[k], a->kwn[k]);
	}
	if (++rt->calls > JINJA_MAX_CALLS)
		jj_fail(&rt->env, a->at, "macro calls nested deeper than %d", JINJA_MAX_CALLS);
	rt->frame = frame_new(rt, fn->closure);
	for (size_t i = 0; i < m->nkids; i++) {
		const jj_node *p = m->kids[i];
		jv v = jv_undef(NULL);
		size_t k;

		if (i < a->npos) {
			v = a->pos[i];
		} else {
			for (k = 0; k < a->nkw; k++)
				if (p->name_n == a->kwlen[k] &&
				    memcmp(p->name, a->kwn[k], a->kwlen[k]) == 0)
					break;
			if (k < a->nkw)
				v = a->kwv[k];
			else if (p->kind == N_KWARG)
				v = jj_eval(rt, p->a);
			else
				v = undef_fmt(rt, "parameter '%.*s' was not provided",
					      (int)p->name_n, p->name);
		}
		set_var(rt, p->name, p->name_n, v);
	}
	rt->out = &buf;
	render_body(rt, m->b);
	rt->out = out;
	rt->frame = saved;
	rt->brk = brk;
	rt->calls--;
	return buf.p != NULL ? jj_buf_jv(&buf) : jv_str("", 0);
}

jv jj_call_value(jj_rt *rt, jv f, jv *args, size_t nargs, const char **kwn,
		 const size_t *kwlen, jv *kwv, size_t nkw, uint32_t pos)
{
	jj_args a = { .pos = args, .npos = nargs, .kwn = kwn,
		      .kwlen = (size_t *)kwlen, .kwv = kwv, .nkw = nkw, .at = pos };

	if (f.t == JV_UNDEF)
		fail_undef(rt, f, pos);
	if (f.t != JV_FUNC)
		jj_fail(&rt->env, pos, "'%s' object is not callable", jv_type_name(f));
	a.what = f.u.fn->name;
	switch (f.u.fn->kind) {
	case F_MACRO:
		return call_macro(rt, f.u.fn, &a);
	case F_GLOBAL:
		return jj_call_global(rt, f.u.fn->id, &a);
	case F_METHOD:
		return jj_call_method(rt, f.u.fn->self, f.u.fn->id, &a);
	case F_CYCLE: {
		jj_loop *l = f.u.fn->self.u.loop;

		if (nargs == 0 || nkw > 0)
			jj_fail(&rt->env, pos, "loop.cycle takes its values as arguments");
		return args[l->index0 % nargs];
	}
	default:
		jj_fail(&rt->env, pos, "unsupported function '%s'", f.u.fn->name);
	}
}

static jv eval_call(jj_rt *rt, const jj_node *n)
{
	jv f = jj_eval(rt, n->a);
	jj_args a;

	eval_args(rt, n, &a, NULL);
	return jj_call_value(rt, f, a.pos, a.npos, a.kwn, a.kwlen, a.kwv, a.nkw,
			     n->pos);
}

static jv apply_filter_node(jj_rt *rt, const jj_node *n, jv v)
{
	jj_args a;
	char name[64];

	snprintf(name, sizeof name, "%.*s", (int)n->name_n, n->name);
	eval_args(rt, n, &a, name);
	return jj_apply_filter(rt, n->id, v, &a);
}

/* A filter chain: the innermost (first written) first. */
static jv filter_chain(jj_rt *rt, const jj_node *n, jv v)
{
	if (n == NULL)
		return v;
	v = filter_chain(rt, n->a, v);
	return apply_filter_node(rt, n, v);
}

/* ---- expressions ----------------------------------------------------------------- */

static jv eval_collection(jj_rt *rt, const jj_node *n)
{
	jv out;

	if (n->kind == N_DICT) {
		out = jv_dict_new(&rt->env, n->nkids / 2);
		for (size_t i = 0; i + 1 < n->nkids; i += 2) {
			jv k = jj_eval(rt, n->kids[i]);

			if (k.t == JV_LIST && !(k.flags & JVF_TUPLE))
				jj_fail(&rt->env, n->kids[i]->pos, "unhashable type: 'list'");
			if (k.t == JV_DICT || k.t == JV_UNDEF)
				jj_fail(&rt->env, n->kids[i]->pos, "unhashable type: '%s'",
					jv_type_name(k));
			jv_dict_set(&rt->env, out, k, jj_eval(rt, n->kids[i + 1]));
		}
		return out;
	}
	out = jv_list_new(&rt->env, n->nkids);
	if (n->kind == N_TUPLE)
		out.flags = JVF_TUPLE;
	for (size_t i = 0; i < n->nkids; i++)
		jv_list_push(&rt->env, out, jj_eval(rt, n->kids[i]));
	return out;
}

static jv eval_node(jj_rt *rt, const jj_node *n)
{
	jv v;
	jj_args a;

	switch (n->kind) {
	case N_LIT:
		return n->lit;
	case N_NAME:
		return lookup(rt, n);
	case N_LIST:
	case N_TUPLE:
	case N_DICT:
		return eval_collection(rt, n);
	case N_ATTR:
		return jj_getattr(rt, jj_eval(rt, n->a), n->name, n->name_n, n->pos);
	case N_ITEM:
		v = jj_eval(rt, n->a);
		return jj_getitem(rt, v, jj_eval(rt, n->b), n->pos);
	case N_SLICE:
		return eval_slice(rt, n);
	case N_CALL:
		return eval_call(rt, n);
	case N_FILTER:
		return apply_filter_node(rt, n, jj_eval(rt, n->a));
	case N_TEST: {
		char name[64];

		v = jj_eval(rt, n->a);
		snprintf(name, sizeof name, "%.*s", (int)n->name_n, n->name);
		eval_args(rt, n, &a, name);
		return jv_bool(jj_apply_test(rt, n->id, v, &a) != (n->op != 0));
	}
	case N_UNARY:
		return eval_unary(rt, n);
	case N_BIN:
		return eval_bin(rt, n);
	case N_AND:
		v = jj_eval(rt, n->a);
		return jv_truthy(v) ? jj_eval(rt, n->b) : v;
	case N_OR:
		v = jj_eval(rt, n->a);
		return jv_truthy(v) ? v : jj_eval(rt, n->b);
	case N_NOT:
		return jv_bool(!jv_truthy(jj_eval(rt, n->a)));
	case N_CMP:
		return eval_cmp(rt, n);
	case N_COND:
		if (jv_truthy(jj_eval(rt, n->a)))
			return jj_eval(rt, n->b);
		return n->c != NULL ? jj_eval(rt, n->c) :
			undef_fmt(rt, "the inline if expression on %s evaluated "
				  "to false and no else section was defined",
				  "this line");
	}
	jj_fail(&rt->env, n->pos, "not an expression");
}

jv jj_eval(jj_rt *rt, const jj_node *n)
{
	jv v;

	if (++rt->depth > JINJA_MAX_EVAL_DEPTH)
		jj_fail(&rt->env, n->pos, "evaluation nested deeper than %d",
			JINJA_MAX_EVAL_DEPTH);
	v = eval_node(rt, n);
	rt->depth--;
	return v;
}

/* ---- iteration ---------------------------------------------------------------------- */

jv jj_iterate(jj_rt *rt, jv v, uint32_t pos)
{
	jv out;

	switch (v.t) {
	case JV_LIST:
		return v;
	case JV_UNDEF:
		return jv_list_new(&rt->env, 0);
	case JV_DICT:
		if (v.flags & JVF_NS)
			break;
		out = jv_list_new(&rt->env, v.u.d->n);
		for (size_t i = 0; i < v.u.d->n; i++)
			jv_list_push(&rt->env, out, v.u.d->k[i]);
		return out;
	case JV_STR: {
		size_t i = 0;

		jj_work(&rt->env, v.u.s.n);
		out = jv_list_new(&rt->env, 0);
		while (i < v.u.s.n) {
			size_t st = i;

			jj_utf8_next(v.u.s.p, v.u.s.n, &i);
			jj_count_iter(rt, 1, pos);
			jv_list_push(&rt->env, out, jv_str(v.u.s.p + st, i - st));
		}
		return out;
	}
	default:
		break;
	}
	jj_fail(&rt->env, pos, "'%s' object is not iterable", jv_type_name(v));
}

/* ---- statements ------------------------------------------------------------------- */

static void emit(jj_rt *rt, const char *s, size_t n)
{
	jj_buf_add(&rt->env, rt->out, s, n);
}

/* Assign v to a for/set target: a name or names to unpack into. */
static void assign(jj_rt *rt, const jj_node *target, jv v)
{
	jv items;

	if (target->kind == N_NAME) {
		set_var(rt, target->name, target->name_n, v);
		return;
	}
	if (v.t == JV_UNDEF)
		fail_undef(rt, v, target->pos);
	items = jj_iterate(rt, v, target->pos);
	if (items.u.l->n != target->nkids)
		jj_fail(&rt->env, target->pos, "%s values to unpack (expected %zu, got %zu)",
			items.u.l->n > target->nkids ? "too many" : "not enough",
			target->nkids, items.u.l->n);
	for (size_t i = 0; i < target->nkids; i++)
		set_var(rt, target->kids[i]->name, target->kids[i]->name_n,
			items.u.l->v[i]);
}

static void exec_set(jj_rt *rt, const jj_node *n)
{
	jv v = jj_eval(rt, n->b);

	if (n->a->kind == N_ATTR) { /* ns.attr = v */
		jv ns = lookup(rt, n->a->a);

		if (ns.t != JV_DICT || !(ns.flags & JVF_NS))
			jj_fail(&rt->env, n->pos, "cannot assign attribute on non-namespace object");
		if (jv_has_ns(v))
			jj_fail(&rt->env, n->pos, "a namespace cannot hold a namespace");
		jv_dict_set(&rt->env, ns, jv_str(n->a->name, n->a->name_n), v);
		return;
	}
	assign(rt, n->a, v);
}

/* Render body into a string (block set, filter block). */
static jv capture(jj_rt *rt, const jj_node *body)
{
	jj_buf *out = rt->out, buf = { .max = JINJA_MAX_OUT };

	rt->out = &buf;
	render_body(rt, body);
	rt->out = out;
	return buf.p != NULL ? jj_buf_jv(&buf) : jv_str("", 0);
}

static jv for_items(jj_rt *rt, const jj_node *n)
{
	jv items = jj_iterate(rt, jj_eval(rt, n->b), n->b->pos), kept;
	jj_frame *outer = rt->frame;

	if (n->c == NULL)
		return items;
	kept = jv_list_new(&rt->env, 0);
	for (size_t i = 0; i < items.u.l->n; i++) {
		jj_count_iter(rt, 1, n->pos);
		rt->frame = frame_new(rt, outer);
		assign(rt, n->a, items.u.l->v[i]);
		if (jv_truthy(jj_eval(rt, n->c)))
			jv_list_push(&rt->env, kept, items.u.l->v[i]);
		rt->frame = outer;
	}
	return kept;
}

static void exec_for(jj_rt *rt, const jj_node *n)
{
	jv items = for_items(rt, n);
	jj_frame *outer = rt->frame;
	jj_loop *loop = jj_alloc(&rt->env, sizeof *loop);

	loop->items = items;
	for (size_t i = 0; i < items.u.l->n; i++) {
		jj_count_iter(rt, 1, n->pos);
		rt->frame = frame_new(rt, outer);
		assign(rt, n->a, items.u.l->v[i]);
		loop->index0 = i;
		set_var(rt, "loop", 4, (jv){ .t = JV_LOOP, .u.loop = loop });
		render_body(rt, n->d);
		rt->frame = outer;
		if (rt->brk == 1) {
			rt->brk = 0;
			break;
		}
		rt->brk = 0;
	}
	if (items.u.l->n == 0 && n->e != NULL) {
		rt->frame = frame_new(rt, outer);
		render_body(rt, n->e);
		rt->frame = outer;
	}
}

static void define_macro(jj_rt *rt, const jj_node *n)
{
	jj_func *fn = jj_alloc(&rt->env, sizeof *fn);
	char *name = jj_alloc(&rt->env, n->name_n + 1);

	memcpy(name, n->name, n->name_n);
	fn->kind = F_MACRO;
	fn->name = name;
	fn->node = n;
	fn->closure = rt->frame;
	set_var(rt, n->name, n->name_n, (jv){ .t = JV_FUNC, .u.fn = fn });
}

static void exec_stmt(jj_rt *rt, const jj_node *n)
{
	jv v;

	switch (n->kind) {
	case N_TEXT:
		emit(rt, n->lit.u.s.p, n->lit.u.s.n);
		break;
	case N_OUT:
		v = jj_eval(rt, n->a);
		jv_str_to(&rt->env, rt->out, v, n->pos);
		break;
	case N_IF:
		if (jv_truthy(jj_eval(rt, n->a)))
			render_body(rt, n->b);
		else if (n->c != NULL)
			exec_stmt(rt, n->c);
		break;
	case N_BODY:
		render_body(rt, n);
		break;
	case N_FOR:
		exec_for(rt, n);
		break;
	case N_SET:
		exec_set(rt, n);
		break;
	case N_SETBLOCK:
		v = filter_chain(rt, n->b, capture(rt, n->c));
		assign(rt, n->a, v);
		break;
	case N_FILTERBLOCK:
		v = filter_chain(rt, n->b, capture(rt, n->c));
		jv_str_to(&rt->env, rt->out, v, n->pos);
		break;
	case N_MACRO:
		define_macro(rt, n);
		break;
	case N_BREAK:
		rt->brk = 1;
		break;
	case N_CONTINUE:
		rt->brk = 2;
		break;
	default:
		jj_fail(&rt->env, n->pos, "not a statement");
	}
}

static void render_body(jj_rt *rt, const jj_node *body)
{
	if (++rt->depth > JINJA_MAX_EVAL_DEPTH)
		jj_fail(&rt->env, body->pos, "statements nested deeper than %d",
			JINJA_MAX_EVAL_DEPTH);
	for (size_t i = 0; i < body->nkids && rt->brk == 0; i++)
		exec_stmt(rt, body->kids[i]);
	rt->depth--;
}

/* ---- entry points --------------------------------------------------------------------- */

int ds_jinja_render(const ds_jinja *t, const json_t *ctx, char **out,
		    size_t *outlen, ds_err *err)
{
	return ds_jinja_render_opts(t, ctx, NULL, out, outlen, err);
}

int ds_jinja_render_opts(const ds_jinja *t, const json_t *ctx,
			 const ds_jinja_opts *o, char **out, size_t *outlen,
			 ds_err *err)
{
	jj_arena arena = { .limit = JINJA_MAX_MEM };
	jj_buf buf = { .max = JINJA_MAX_OUT };
	jj_rt rt = { .t = t, .out = &buf };
	time_t now;
	char *res;

	*out = NULL;
	if (outlen != NULL)
		*outlen = 0;
	rt.env = (jj_env){ .err = err, .src = t->src, .srclen = t->srclen,
			   .arena = &arena };
	if (o != NULL && o->pin_time) {
		now = o->now;
		gmtime_r(&now, &rt.now);
	} else {
		now = time(NULL);
		localtime_r(&now, &rt.now);
	}
	if (ctx != NULL && !json_is_object(ctx))
		return ds_errf(err, "%s: the context is not a JSON object", JINJA_NAME);
	if (setjmp(rt.env.jb) != 0) {
		jj_arena_free(&arena);
		return -1;
	}
	rt.globals = jj_alloc(&rt.env, sizeof *rt.globals);
	rt.globals->vars = ctx != NULL ? jv_from_json(&rt.env, ctx, 0) :
		jv_dict_new(&rt.env, 0);
	rt.frame = rt.globals;
	render_body(&rt, t->root);
	res = malloc(buf.n + 1);
	if (res == NULL) {
		jj_arena_free(&arena);
		return ds_errf(err, "%s: out of memory", JINJA_NAME);
	}
	if (buf.n > 0)
		memcpy(res, buf.p, buf.n);
	res[buf.n] = '\0';
	jj_arena_free(&arena);
	*out = res;
	if (outlen != NULL)
		*outlen = buf.n;
	return 0;
}

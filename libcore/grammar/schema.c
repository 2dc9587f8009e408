/*
 * schema.c - JSON schema to grammar text, and the grammar builder.
 *
 * Every subschema becomes a rule for "a value valid under it, then the
 * bounded whitespace" (j-ws: nothing, a space, or a newline and up to 20
 * blanks).  Rules are named after where they come from (root-name,
 * root-items, ...).  A rule's children are written first and its own text
 * last, so that each rule is one line of the output.
 *
 * Policies (docs/grammar.md says why):
 *  - properties come in the order of `properties`; optional ones may be
 *    left out;
 *  - additionalProperties absent counts as false when `properties` is
 *    given (as XGrammar and vLLM do), as true when it is not (so that
 *    {"type": "object"} is any object);
 *  - extra members' keys are strings without escapes, unequal to every
 *    declared key;
 *  - oneOf is anyOf (exact when the branches exclude each other);
 *  - without `type`, the type follows from the keywords present;
 *  - a keyword outside the subset is an error naming it and its path.
 */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "sint.h"

/* ---- rule names ------------------------------------------------------------ */

typedef struct nameset {
	char **s;
	size_t n, cap;
	uint32_t *h;        /* index + 1, 0 empty */
	size_t hcap;
} nameset;

static uint64_t hstr(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	return h;
}

static int ns_has(const nameset *ns, const char *name)
{
	size_t j;

	if (!ns->hcap)
		return 0;
	for (j = hstr(name) & (ns->hcap - 1); ns->h[j]; j = (j + 1) & (ns->hcap - 1))
		if (strcmp(ns->s[ns->h[j] - 1], name) == 0)
			return 1;
	return 0;
}

static int ns_rehash(nameset *ns, size_t cap)
{
	uint32_t *h = calloc(cap, sizeof *h);
	size_t i, j;

	if (h == NULL)
		return -1;
	for (i = 0; i < ns->n; i++) {
		for (j = hstr(ns->s[i]) & (cap - 1); h[j]; j = (j + 1) & (cap - 1))
			;
		h[j] = (uint32_t)i + 1;
	}
	free(ns->h);
	ns->h = h;
	ns->hcap = cap;
	return 0;
}

static const char *ns_add(nameset *ns, const char *name)
{
	char *copy;

	if (ns->n >= DS_GRAMMAR_MAX_RULES)
		return NULL;
	if ((ns->n + 1) * 2 > ns->hcap &&
	    ns_rehash(ns, ns->hcap ? ns->hcap * 2 : 256) != 0)
		return NULL;
	if (ggrow(&ns->s, &ns->cap, ns->n + 1, sizeof *ns->s) != 0 ||
	    (copy = strdup(name)) == NULL)
		return NULL;
	ns->s[ns->n++] = copy;
	{
		size_t j;

		for (j = hstr(copy) & (ns->hcap - 1); ns->h[j]; j = (j + 1) & (ns->hcap - 1))
			;
		ns->h[j] = (uint32_t)ns->n;
	}
	return copy;
}

static void ns_truncate(nameset *ns, size_t n)
{
	while (ns->n > n)
		free(ns->s[--ns->n]);
	if (ns->hcap)
		ns_rehash(ns, ns->hcap);
}

static void ns_free(nameset *ns)
{
	ns_truncate(ns, 0);
	free(ns->s);
	free(ns->h);
	*ns = (nameset){ 0 };
}

struct ds_gbuilder {
	gbuf text;
	nameset names;
	unsigned prims;
};

/* ---- the compiler's state ----------------------------------------------------- */

typedef struct sref {
	char *ref;
	const char *name;
} sref;

typedef struct sc {
	ds_gbuilder *b;
	gbuf *out;
	const json_t *root;
	const char *root_path;
	sref *refs;
	size_t nrefs, rcap;
	char path[600];
	size_t plen;
	unsigned depth;
	ds_err *err;
} sc;

static int serr(sc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int serr(sc *c, const char *fmt, ...)
{
	char msg[300];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return ds_errf(c->err, "%s: %s", c->path, msg);
}

/* Append to the path; returns the old length for path_pop. */
static size_t path_push(sc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static size_t path_push(sc *c, const char *fmt, ...)
{
	size_t old = c->plen;
	va_list ap;
	int n;

	if (c->plen < sizeof c->path - 1) {
		va_start(ap, fmt);
		n = vsnprintf(c->path + c->plen, sizeof c->path - c->plen, fmt, ap);
		va_end(ap);
		if (n > 0)
			c->plen += (size_t)n < sizeof c->path - c->plen ?
				   (size_t)n : sizeof c->path - c->plen - 1;
	}
	return old;
}

static void path_pop(sc *c, size_t old)
{
	c->plen = old;
	c->path[old] = '\0';
}

static const char *prim(sc *c, unsigned p)
{
	return sjson_prim(c->out, &c->b->prims, p);
}

/* A new rule name from a hint: [A-Za-z0-9-] only, unique. */
static const char *new_name(sc *c, const char *hint)
{
	char base[80], name[96];
	size_t i, k = 0;
	unsigned n;

	for (i = 0; hint[i] && k < 56; i++) {
		char ch = hint[i];
		int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			 (ch >= '0' && ch <= '9');

		if (ok)
			base[k++] = ch;
		else if (k && base[k - 1] != '-')
			base[k++] = '-';
	}
	while (k && base[k - 1] == '-')
		k--;
	if (k == 0)
		base[k++] = 'r';
	base[k] = '\0';
	snprintf(name, sizeof name, "%s", base);
	for (n = 2; ns_has(&c->b->names, name); n++)
		snprintf(name, sizeof name, "%s-%u", base, n);
	return ns_add(&c->b->names, name);
}

/* name ::= body (name already taken). */
static const char *emit_named(sc *c, const char *name, const gbuf *body)
{
	if (name == NULL || body->oom) {
		ds_errf(c->err, "%s: grammar too large", c->path);
		return NULL;
	}
	gbuf_printf(c->out, "%s ::= ", name);
	gbuf_put(c->out, body->p ? body->p : "", body->n);
	gbuf_puts(c->out, "\n");
	if (c->out->oom) {
		ds_errf(c->err, "%s: grammar too large", c->path);
		return NULL;
	}
	return name;
}

/* A new rule: hint ::= body. */
static const char *emit_rule(sc *c, const char *hint, const gbuf *body)
{
	return emit_named(c, new_name(c, hint), body);
}

/* ---- keywords ---------------------------------------------------------------- */

static const char *const k_notes[] = {
	"title", "description", "$comment", "default", "examples", "deprecated",
	"readOnly", "writeOnly", "$schema", "contentEncoding",
	"contentMediaType", "$defs", "definitions", NULL
};
static const char *const k_known[] = {
	"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref",
	"properties", "required", "additionalProperties",
	"items", "prefixItems", "minItems", "maxItems", "uniqueItems",
	"minLength", "maxLength", "pattern", "format",
	"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL
};

static int in_list(const char *const *l, const char *k)
{
	for (; *l; l++)
		if (strcmp(*l, k) == 0)
			return 1;
	return 0;
}

static int is_note(const char *k)
{
	return in_list(k_notes, k);
}

static int check_keys(sc *c, const json_t *s)
{
	const char *k;
	json_t *v;

	json_object_foreach((json_t *)s, k, v) {
		if (is_note(k) || in_list(k_known, k))
			continue;
		if (strcmp(k, "$id") == 0 && s == c->root)
			continue;
		if (strcmp(k, "uniqueItems") == 0 && json_is_false(v))
			continue;
		return serr(c, "unsupported keyword '%s'", k);
	}
	if (json_is_true(json_object_get(s, "uniqueItems")))
		return serr(c, "unsupported keyword 'uniqueItems' (true)");
	return 0;
}

/* A non-negative integer keyword; *v untouched when absent. */
static int get_count(sc *c, const json_t *s, const char *k, uint64_t *v)
{
	const json_t *x = json_object_get(s, k);
	double d;

	if (x == NULL)
		return 0;
	if (json_is_integer(x) && json_integer_value(x) >= 0) {
		*v = (uint64_t)json_integer_value(x);
		return 0;
	}
	d = json_is_real(x) ? json_real_value(x) : -1;
	if (d >= 0 && d == floor(d) && d < 1e18) {
		*v = (uint64_t)d;
		return 0;
	}
	return serr(c, "'%s' must be a non-negative integer", k);
}

/* ---- fixed values (const, enum) ------------------------------------------------------ */

static int value_text(sc *c, gbuf *b, const json_t *v, unsigned depth);

static int literal_ws(sc *c, gbuf *b, const char *text, size_t n)
{
	gbuf_literal(b, text, n);
	gbuf_printf(b, " %s", prim(c, SP_WS));
	return 0;
}

static int container_text(sc *c, gbuf *b, const json_t *v, unsigned depth)
{
	const char *ws = prim(c, SP_WS), *k;
	json_t *x;
	size_t i = 0;

	gbuf_printf(b, "\"%s\" %s", json_is_object(v) ? "{" : "[", ws);
	if (json_is_object(v)) {
		json_object_foreach((json_t *)v, k, x) {
			gbuf t = { 0 };

			gbuf_printf(b, i++ ? " \",\" %s " : " ", ws);
			sjson_string_text(&t, k, strlen(k));
			literal_ws(c, b, t.p, t.n);
			gbuf_free(&t);
			gbuf_printf(b, " \":\" %s ", ws);
			if (value_text(c, b, x, depth + 1) != 0)
				return -1;
		}
	} else {
		json_array_foreach(v, i, x) {
			gbuf_printf(b, i ? " \",\" %s " : " ", ws);
			if (value_text(c, b, x, depth + 1) != 0)
				return -1;
		}
	}
	gbuf_printf(b, " \"%s\" %s", json_is_object(v) ? "}" : "]", ws);
	return 0;
}

/* Grammar text for exactly v (compact spelling, whitespace between tokens
 * allowed as everywhere). */
static int value_text(sc *c, gbuf *b, const json_t *v, unsigned depth)
{
	gbuf t = { 0 };

	if (depth > DS_SCHEMA_MAX_DEPTH)
		return serr(c, "value nested deeper than %u", DS_SCHEMA_MAX_DEPTH);
	if (json_is_object(v) || json_is_array(v))
		return container_text(c, b, v, depth);
	if (json_is_string(v))
		sjson_string_text(&t, json_string_value(v), json_string_length(v));
	else if (json_is_integer(v))
		gbuf_printf(&t, "%lld", (long long)json_integer_value(v));
	else if (json_is_real(v))
		sjson_number_text(&t, json_real_value(v));
	else
		gbuf_puts(&t, json_is_true(v) ? "true" : json_is_false(v) ? "false" : "null");
	if (t.oom) {
		gbuf_free(&t);
		return serr(c, "value too large");
	}
	literal_ws(c, b, t.p, t.n);
	gbuf_free(&t);
	return 0;
}

/* ---- types ----------------------------------------------------------------------- */

enum { T_NULL = 1, T_BOOL = 2, T_OBJECT = 4, T_ARRAY = 8, T_STRING = 16,
       T_NUMBER = 32, T_INTEGER = 64 };

static const char *const type_names[] = {
	"null", "boolean", "object", "array", "string", "number", "integer", NULL
};

static int type_bit(const char *name)
{
	int i;

	for (i = 0; type_names[i]; i++)
		if (strcmp(type_names[i], name) == 0)
			return 1 << i;
	return 0;
}

/* The `type` keyword as bits; 0 when absent. */
static int get_types(sc *c, const json_t *s, unsigned *types)
{
	const json_t *t = json_object_get(s, "type"), *x;
	size_t i;

	*types = 0;
	if (t == NULL)
		return 0;
	if (json_is_string(t)) {
		*types = (unsigned)type_bit(json_string_value(t));
		if (*types == 0)
			return serr(c, "unknown type '%s'", json_string_value(t));
		return 0;
	}
	if (!json_is_array(t) || json_array_size(t) == 0)
		return serr(c, "'type' must be a string or a non-empty array");
	json_array_foreach(t, i, x) {
		int bit = json_is_string(x) ? type_bit(json_string_value(x)) : 0;

		if (bit == 0)
			return serr(c, "'type' has an unknown type");
		*types |= (unsigned)bit;
	}
	return 0;
}

static int has_any(const json_t *s, const char *const *keys)
{
	for (; *keys; keys++)
		if (json_object_get(s, *keys))
			return 1;
	return 0;
}

/* Without `type`: the types whose keywords are present (none: any). */
static unsigned inferred_types(const json_t *s)
{
	static const char *const obj[] = { "properties", "required",
		"additionalProperties", NULL };
	static const char *const arr[] = { "items", "prefixItems", "minItems",
		"maxItems", "uniqueItems", NULL };
	static const char *const str[] = { "minLength", "maxLength", "pattern",
		"format", NULL };
	static const char *const num[] = { "minimum", "maximum",
		"exclusiveMinimum", "exclusiveMaximum", NULL };
	unsigned t = 0;

	t |= has_any(s, obj) ? T_OBJECT : 0;
	t |= has_any(s, arr) ? T_ARRAY : 0;
	t |= has_any(s, str) ? T_STRING : 0;
	t |= has_any(s, num) ? T_NUMBER : 0;
	return t;
}

static int value_has_type(const json_t *v, unsigned types)
{
	if (json_is_null(v))
		return types & T_NULL;
	if (json_is_boolean(v))
		return types & T_BOOL;
	if (json_is_object(v))
		return types & T_OBJECT;
	if (json_is_array(v))
		return types & T_ARRAY;
	if (json_is_string(v))
		return types & T_STRING;
	if (types & T_NUMBER)
		return 1;
	if (json_is_integer(v))
		return types & T_INTEGER;
	return (types & T_INTEGER) && json_real_value(v) == floor(json_real_value(v));
}

/* ---- the walk --------------------------------------------------------------------- */

static const char *gen(sc *c, const json_t *s, const char *hint);

/* Body alternatives: the rules of each branch. */
static const char *alt_rule(sc *c, const char *hint, const char *const *names,
			    size_t n)
{
	gbuf body = { 0 };
	const char *r;
	size_t i;

	for (i = 0; i < n; i++)
		gbuf_printf(&body, "%s%s", i ? " | " : "", names[i]);
	r = emit_rule(c, hint, &body);
	gbuf_free(&body);
	return r;
}

static const char *gen_enum(sc *c, const json_t *s, const char *hint)
{
	const json_t *en = json_object_get(s, "enum"), *cst = json_object_get(s, "const"), *v;
	const char *k;
	json_t *x;
	unsigned types;
	gbuf body = { 0 };
	const char *r = NULL;
	size_t i, n = 0;

	json_object_foreach((json_t *)s, k, x)
		if (!is_note(k) && strcmp(k, "enum") && strcmp(k, "const") &&
		    strcmp(k, "type")) {
			serr(c, "'%s' beside enum/const unsupported", k);
			return NULL;
		}
	if (en && !json_is_array(en)) {
		serr(c, "'enum' must be an array");
		return NULL;
	}
	if (get_types(c, s, &types) != 0)
		return NULL;
	for (i = 0; i < (en ? json_array_size(en) : 1); i++) {
		v = en ? json_array_get(en, i) : cst;
		if ((types && !value_has_type(v, types)) ||
		    (en && cst && !json_equal((json_t *)v, (json_t *)cst)))
			continue;
		gbuf_puts(&body, n++ ? " | " : "");
		if (value_text(c, &body, v, 0) != 0)
			goto out;
	}
	if (n == 0) {
		serr(c, "no value satisfies enum/const and type");
		goto out;
	}
	r = emit_rule(c, hint, &body);
out:
	gbuf_free(&body);
	return r;
}

/* ---- strings ---- */

static const char *string_format(sc *c, const char *fmt, gbuf *body)
{
	static const struct { const char *name, *re; unsigned prim; } fmts[] = {
		{ "date", NULL, SP_DATE },
		{ "time", NULL, SP_TIME },
		{ "date-time", NULL, SP_DATETIME },
		{ "uuid", "^(urn:uuid:)?[0-9a-f]{8}-([0-9a-f]{4}-){3}[0-9a-f]{12}$", 0 },
		{ "email", "^[a-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
			   "@([a-z0-9]([a-z0-9-]*[a-z0-9])?\\.)+[a-z0-9]([a-z0-9-]*[a-z0-9])?$", 0 },
		{ "ipv4", "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}"
			  "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$", 0 },
	};
	size_t i;

	for (i = 0; i < sizeof fmts / sizeof fmts[0]; i++) {
		if (strcmp(fmts[i].name, fmt) != 0)
			continue;
		if (fmts[i].re == NULL)
			return sjson_prim(c->out, &c->b->prims, fmts[i].prim);
		if (gregex_emit(body, fmts[i].re, strlen(fmts[i].re), 1,
				prim(c, SP_CHAR), c->err) != 0)
			return NULL;
		return "";
	}
	serr(c, "unsupported format '%s'", fmt);
	return NULL;
}

static const char *gen_string(sc *c, const json_t *s, const char *hint)
{
	const json_t *fmt = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
	uint64_t min = 0, max = UINT64_MAX;
	int lens = json_object_get(s, "minLength") || json_object_get(s, "maxLength");
	gbuf body = { 0 };
	const char *r = NULL, *f;

	if (get_count(c, s, "minLength", &min) != 0 ||
	    get_count(c, s, "maxLength", &max) != 0)
		return NULL;
	if ((fmt || pat) && lens) {
		serr(c, "'%s' with minLength/maxLength unsupported", fmt ? "format" : "pattern");
		return NULL;
	}
	if (fmt && pat) {
		serr(c, "'format' with 'pattern' unsupported");
		return NULL;
	}
	if (!fmt && !pat && !lens)
		return prim(c, SP_STRING);
	gbuf_puts(&body, "\"\\\"\" ");
	if (fmt) {
		size_t old = path_push(c, ".format");

		f = json_is_string(fmt) ? string_format(c, json_string_value(fmt), &body) : NULL;
		if (!json_is_string(fmt))
			serr(c, "must be a string");
		path_pop(c, old);
		if (f == NULL)
			goto out;
		gbuf_puts(&body, f);
	} else if (pat) {
		if (!json_is_string(pat)) {
			serr(c, "'pattern' must be a string");
			goto out;
		}
		if (gregex_emit(&body, json_string_value(pat), json_string_length(pat),
				0, prim(c, SP_CHAR), c->err) != 0) {
			ds_err_prefix(c->err, "%s.pattern", c->path);
			goto out;
		}
	} else {
		if (min > max || min > DS_GRAMMAR_MAX_REPEAT ||
		    (max != UINT64_MAX && max > DS_GRAMMAR_MAX_REPEAT)) {
			serr(c, min > max ? "minLength above maxLength" :
			     "minLength/maxLength over 10000 unsupported");
			goto out;
		}
		if (max == UINT64_MAX)
			gbuf_printf(&body, "%s{%llu,}", prim(c, SP_CHAR), (unsigned long long)min);
		else
			gbuf_printf(&body, "%s{%llu,%llu}", prim(c, SP_CHAR),
				    (unsigned long long)min, (unsigned long long)max);
	}
	gbuf_printf(&body, " \"\\\"\" %s", prim(c, SP_WS));
	r = emit_rule(c, hint, &body);
out:
	gbuf_free(&body);
	return r;
}

/* ---- numbers ---- */

/* A bound keyword as a whole number (integer: rounded inward). */
static int get_bound(sc *c, const json_t *s, const char *k, int is_min,
		     int integer, sbound *b)
{
	const json_t *x = json_object_get(s, k);
	int excl = k[0] == 'e';
	double d, r;

	if (x == NULL)
		return 0;
	if (!json_is_number(x))
		return serr(c, "'%s' must be a number", k);
	d = json_number_value(x);
	if (fabs(d) > (double)SJSON_MAX_BOUND)
		return serr(c, "'%s': magnitude over 2^53 unsupported", k);
	r = is_min ? ceil(d) : floor(d);
	if (r != d) {
		if (!integer)
			return serr(c, "'%s': only whole-number bounds on numbers", k);
		excl = 0; /* rounded inward: now inclusive */
	}
	if (json_is_integer(x))
		r = (double)json_integer_value(x);
	{
		sbound nb = { .set = 1, .excl = excl,
			.v = json_is_integer(x) ? (int64_t)json_integer_value(x) : (int64_t)r };

		if (integer && nb.excl)
			nb.v += is_min ? 1 : -1, nb.excl = 0;
		/* keep the tighter of minimum and exclusiveMinimum */
		if (!b->set || (is_min ? nb.v > b->v || (nb.v == b->v && nb.excl) :
				nb.v < b->v || (nb.v == b->v && nb.excl)))
			*b = nb;
	}
	return 0;
}

static const char *gen_number(sc *c, const json_t *s, const char *hint, int integer)
{
	sbound lo = { 0 }, hi = { 0 };
	gbuf body = { 0 };
	const char *r = NULL;

	if (get_bound(c, s, "minimum", 1, integer, &lo) != 0 ||
	    get_bound(c, s, "exclusiveMinimum", 1, integer, &lo) != 0 ||
	    get_bound(c, s, "maximum", 0, integer, &hi) != 0 ||
	    get_bound(c, s, "exclusiveMaximum", 0, integer, &hi) != 0)
		return NULL;
	if (!lo.set && !hi.set)
		return prim(c, integer ? SP_INTEGER : SP_NUMBER);
	if (sjson_num_range(&body, &lo, &hi, integer) != 0) {
		serr(c, body.oom ? "grammar too large" : "no number satisfies the bounds");
		goto out;
	}
	gbuf_printf(&body, " %s", prim(c, SP_WS));
	r = emit_rule(c, hint, &body);
out:
	gbuf_free(&body);
	return r;
}

/* ---- objects ---- */

typedef struct sprop {
	const char *key;
	const json_t *schema;
	int required;
	const char *kv;        /* its member rule */
} sprop;

/* "key" : value */
static const char *kv_rule(sc *c, const char *base, const sprop *p)
{
	size_t old = path_push(c, ".properties.%s", p->key);
	char hint[160];
	const char *val, *r = NULL;
	gbuf body = { 0 }, t = { 0 };

	snprintf(hint, sizeof hint, "%s-%s", base, p->key);
	val = gen(c, p->schema, hint);
	path_pop(c, old);
	if (val == NULL)
		return NULL;
	sjson_string_text(&t, p->key, strlen(p->key));
	if (!t.oom) {
		gbuf_literal(&body, t.p, t.n);
		gbuf_printf(&body, " %s \":\" %s %s", prim(c, SP_WS), prim(c, SP_WS), val);
		snprintf(hint, sizeof hint, "%s-%s-kv", base, p->key);
		r = emit_rule(c, hint, &body);
	} else {
		serr(c, "key too long");
	}
	gbuf_free(&t);
	gbuf_free(&body);
	return r;
}

typedef struct knode {
	uint32_t cp, child, next, end;  /* end: a key ends here */
	const char *name;               /* its rule */
} knode;

typedef struct ktrie {
	knode *n;
	size_t len, cap;
} ktrie;

static int kt_add(ktrie *t, uint32_t cp, uint32_t next)
{
	if (ggrow(&t->n, &t->cap, t->len + 1, sizeof *t->n) != 0)
		return -1;
	t->n[t->len++] = (knode){ .cp = cp, .child = UINT32_MAX, .next = next };
	return 0;
}

/* The keys an extra member could repeat (those without escapes) as a
 * trie of code points. */
static int kt_build(ktrie *t, const sprop *p, size_t n)
{
	size_t i;

	if (kt_add(t, 0, UINT32_MAX) != 0)
		return -1;
	for (i = 0; i < n; i++) {
		const uint8_t *k = (const uint8_t *)p[i].key;
		size_t len = strlen(p[i].key), at = 0, d;
		uint32_t node = 0, cp;

		for (d = 0; d < len && k[d] >= 0x20 && k[d] != '"' && k[d] != '\\'; d++)
			;
		if (d < len)
			continue;
		while (at < len) {
			size_t w = gutf8_dec(k + at, len - at, &cp);
			uint32_t ch;

			if (w == 0)
				break;
			at += w;
			for (ch = t->n[node].child; ch != UINT32_MAX && t->n[ch].cp != cp;
			     ch = t->n[ch].next)
				;
			if (ch == UINT32_MAX) {
				if (kt_add(t, cp, t->n[node].child) != 0)
					return -1;
				ch = (uint32_t)t->len - 1;
				t->n[node].child = ch;
			}
			node = ch;
		}
		t->n[node].end = 1;
	}
	return 0;
}

/* Trie node u's rule: the end (unless a key ends at u), a child's
 * character and then its rule, or any other character and anything. */
static int notkey_rule(sc *c, const ktrie *t, size_t u)
{
	const knode *k = &t->n[u];
	gbuf body = { 0 };
	uint32_t ch;
	int first = 1;
	uint8_t enc[4];

	if (!k->end) {
		gbuf_puts(&body, "\"\"");
		first = 0;
	}
	for (ch = k->child; ch != UINT32_MAX; ch = t->n[ch].next) {
		gbuf_puts(&body, first ? "" : " | ");
		gbuf_literal(&body, enc, gutf8_enc(t->n[ch].cp, enc));
		gbuf_printf(&body, " %s", t->n[ch].name);
		first = 0;
	}
	gbuf_printf(&body, "%s[^\"\\\\\\x00-\\x1F", first ? "" : " | ");
	for (ch = k->child; ch != UINT32_MAX; ch = t->n[ch].next)
		gbuf_class_cp(&body, t->n[ch].cp);
	gbuf_printf(&body, "] %s*", prim(c, SP_XCHAR));
	k = emit_named(c, k->name, &body) ? k : NULL;
	gbuf_free(&body);
	return k ? 0 : -1;
}

/* An extra member: a key unequal to the declared ones, then a value. */
static const char *extra_rule(sc *c, const char *base, const sprop *p,
			      size_t n, const char *val)
{
	ktrie t = { 0 };
	gbuf body = { 0 };
	const char *r = NULL;
	char hint[160];
	size_t i;

	if (kt_build(&t, p, n) != 0) {
		serr(c, "out of memory");
		goto out;
	}
	for (i = 0; i < t.len; i++) {
		snprintf(hint, sizeof hint, "%s-xkey", base);
		if ((t.n[i].name = new_name(c, hint)) == NULL) {
			serr(c, "grammar too large");
			goto out;
		}
	}
	for (i = 0; i < t.len; i++)
		if (notkey_rule(c, &t, i) != 0)
			goto out;
	gbuf_printf(&body, "\"\\\"\" %s \"\\\"\" %s \":\" %s %s", t.n[0].name,
		    prim(c, SP_WS), prim(c, SP_WS), val);
	snprintf(hint, sizeof hint, "%s-extra", base);
	r = emit_rule(c, hint, &body);
out:
	free(t.n);
	gbuf_free(&body);
	return r;
}

static int is_required(const json_t *req, const char *key)
{
	const json_t *x;
	size_t i;

	json_array_foreach(req, i, x)
		if (json_is_string(x) && strcmp(json_string_value(x), key) == 0)
			return 1;
	return 0;
}

/* The members in order: `properties`, then required keys not among them
 * (with the additionalProperties schema). */
static int object_props(sc *c, const json_t *s, sprop **out, size_t *n)
{
	const json_t *props = json_object_get(s, "properties");
	const json_t *req = json_object_get(s, "required");
	const json_t *addl = json_object_get(s, "additionalProperties"), *x;
	size_t cap = 0, i;
	const char *k;
	json_t *v;

	*n = 0;
	if (props && !json_is_object(props))
		return serr(c, "'properties' must be an object");
	if (req && !json_is_array(req))
		return serr(c, "'required' must be an array");
	json_object_foreach((json_t *)props, k, v) {
		if (ggrow(out, &cap, *n + 1, sizeof **out) != 0)
			return serr(c, "out of memory");
		(*out)[(*n)++] = (sprop){ .key = k, .schema = v,
			.required = req && is_required(req, k) };
	}
	json_array_foreach(req, i, x) {
		if (!json_is_string(x))
			return serr(c, "'required' must hold strings");
		if (props && json_object_get(props, json_string_value(x)))
			continue;
		if (json_is_false(addl))
			return serr(c, "required '%s' is not in properties and "
				    "additionalProperties is false", json_string_value(x));
		if (ggrow(out, &cap, *n + 1, sizeof **out) != 0)
			return serr(c, "out of memory");
		(*out)[(*n)++] = (sprop){ .key = json_string_value(x),
			.schema = json_is_object(addl) ? addl : json_true(), .required = 1 };
	}
	return 0;
}

/* The value rule of extra members, NULL when there are none (and no
 * error). */
static const char *extra_value(sc *c, const json_t *s, const char *base, int *bad)
{
	const json_t *props = json_object_get(s, "properties");
	const json_t *addl = json_object_get(s, "additionalProperties");
	char hint[160];
	const char *r;
	size_t old;

	*bad = 0;
	if (json_is_false(addl))
		return NULL;
	if (addl == NULL)
		return props ? NULL : prim(c, SP_VALUE);
	if (!json_is_object(addl) && !json_is_true(addl)) {
		*bad = 1;
		serr(c, "'additionalProperties' must be a schema");
		return NULL;
	}
	old = path_push(c, ".additionalProperties");
	snprintf(hint, sizeof hint, "%s-additional", base);
	r = gen(c, addl, hint);
	path_pop(c, old);
	*bad = r == NULL;
	return r;
}

/* Members i..n-1 after at least one was written (a) or none yet (f):
 *	a(i) = "," m(i) a(i+1)          | ( "," m(i) )? a(i+1)   (optional)
 *	f(i) = m(i) a(i+1)              | m(i) a(i+1) | f(i+1)   (optional)
 * and after the last, extra members if any. */
static const char *object_chain(sc *c, const char *base, const sprop *p,
				size_t n, const char *extra)
{
	const char *ws = prim(c, SP_WS), *a = NULL, *f = NULL;
	char hint[160];
	size_t i;

	snprintf(hint, sizeof hint, "%s-rest", base);
	if (extra) {
		gbuf b = { 0 };

		gbuf_printf(&b, "( \",\" %s %s )*", ws, extra);
		a = emit_rule(c, hint, &b);
		b.n = 0;
		gbuf_printf(&b, "( %s ( \",\" %s %s )* )?", extra, ws, extra);
		f = a ? emit_rule(c, hint, &b) : NULL;
		gbuf_free(&b);
		if (f == NULL)
			return NULL;
	}
	for (i = n; i-- > 0;) {
		gbuf ab = { 0 }, fb = { 0 };
		const char *na, *nf;

		gbuf_printf(&ab, p[i].required ? "\",\" %s %s %s" : "( \",\" %s %s )? %s",
			    ws, p[i].kv, a ? a : "");
		gbuf_printf(&fb, "%s %s", p[i].kv, a ? a : "");
		if (!p[i].required)
			gbuf_printf(&fb, " | %s", f ? f : "\"\"");
		na = emit_rule(c, hint, &ab);
		nf = na ? emit_rule(c, hint, &fb) : NULL;
		gbuf_free(&ab);
		gbuf_free(&fb);
		if (nf == NULL)
			return NULL;
		a = na, f = nf;
	}
	return f ? f : "";
}

static const char *gen_object(sc *c, const json_t *s, const char *hint)
{
	sprop *p = NULL;
	size_t n = 0, i;
	const char *extra = NULL, *val, *chain, *r = NULL;
	gbuf body = { 0 };
	int bad;

	if (object_props(c, s, &p, &n) != 0)
		goto out;
	for (i = 0; i < n; i++)
		if ((p[i].kv = kv_rule(c, hint, &p[i])) == NULL)
			goto out;
	val = extra_value(c, s, hint, &bad);
	if (bad || (val && (extra = extra_rule(c, hint, p, n, val)) == NULL))
		goto out;
	chain = object_chain(c, hint, p, n, extra);
	if (chain == NULL)
		goto out;
	gbuf_printf(&body, "\"{\" %s %s \"}\" %s", prim(c, SP_WS), chain, prim(c, SP_WS));
	r = emit_rule(c, hint, &body);
out:
	free(p);
	gbuf_free(&body);
	return r;
}

/* ---- arrays ---- */

typedef struct sarr {
	const char **e;        /* prefix item rules */
	size_t k;
	const char *tail;      /* items rule; NULL: no more items */
	uint64_t min, max;     /* max UINT64_MAX: open */
} sarr;

static int array_parts(sc *c, const json_t *s, const char *base, sarr *a)
{
	const json_t *pre = json_object_get(s, "prefixItems");
	const json_t *items = json_object_get(s, "items");
	char hint[160];
	size_t i, old;

	if (get_count(c, s, "minItems", &a->min) != 0 ||
	    get_count(c, s, "maxItems", &a->max) != 0)
		return -1;
	if (pre && (!json_is_array(pre)))
		return serr(c, "'prefixItems' must be an array");
	if (json_is_array(items))
		return serr(c, "'items' as an array unsupported (use prefixItems)");
	a->k = pre ? json_array_size(pre) : 0;
	if (json_is_false(items) && a->max > a->k)
		a->max = a->k;
	if (a->min > a->max)
		return serr(c, "minItems above maxItems (or the tuple's length)");
	if (a->min > DS_GRAMMAR_MAX_REPEAT ||
	    (a->max != UINT64_MAX && a->max > DS_GRAMMAR_MAX_REPEAT))
		return serr(c, "minItems/maxItems over %u unsupported", DS_GRAMMAR_MAX_REPEAT);
	if (a->k > a->max)
		a->k = (size_t)a->max;
	a->e = calloc(a->k + 1, sizeof *a->e);
	if (a->e == NULL)
		return serr(c, "out of memory");
	for (i = 0; i < a->k; i++) {
		old = path_push(c, ".prefixItems[%zu]", i);
		snprintf(hint, sizeof hint, "%s-%zu", base, i);
		a->e[i] = gen(c, json_array_get(pre, i), hint);
		path_pop(c, old);
		if (a->e[i] == NULL)
			return -1;
	}
	if (json_is_false(items) || a->max <= a->k)
		return 0;
	old = path_push(c, ".items");
	snprintf(hint, sizeof hint, "%s-item", base);
	a->tail = items ? gen(c, items, hint) : prim(c, SP_VALUE);
	path_pop(c, old);
	return a->tail ? 0 : -1;
}

/* After i items: the rest, as text (may be empty). */
static int array_rest(sc *c, const sarr *a, size_t i, const char *base, gbuf *out)
{
	const char *ws = prim(c, SP_WS);
	gbuf in = { 0 };
	char hint[160];
	const char *r;

	if (i >= a->k) {
		uint64_t lo = a->min > i ? a->min - i : 0;

		if (a->tail == NULL || a->max == i)
			return 0;
		if (a->max == UINT64_MAX)
			return gbuf_printf(out, "( \",\" %s %s ){%llu,}", ws, a->tail,
					   (unsigned long long)lo);
		return gbuf_printf(out, "( \",\" %s %s ){%llu,%llu}", ws, a->tail,
				   (unsigned long long)lo, (unsigned long long)(a->max - i));
	}
	if (i >= a->max)
		return 0;
	gbuf_printf(&in, "%s\",\" %s %s ", i >= a->min ? "( " : "", ws, a->e[i]);
	if (array_rest(c, a, i + 1, base, &in) != 0) {
		gbuf_free(&in);
		return -1;
	}
	gbuf_puts(&in, i >= a->min ? " )?" : "");
	snprintf(hint, sizeof hint, "%s-after%zu", base, i);
	r = emit_rule(c, hint, &in);
	gbuf_free(&in);
	return r ? gbuf_puts(out, r) : -1;
}

static const char *gen_array(sc *c, const json_t *s, const char *hint)
{
	sarr a = { .max = UINT64_MAX };
	gbuf body = { 0 };
	const char *r = NULL, *first;

	if (array_parts(c, s, hint, &a) != 0)
		goto out;
	gbuf_printf(&body, "\"[\" %s ", prim(c, SP_WS));
	first = a.k ? a.e[0] : a.tail;
	if (a.max > 0 && first) {
		gbuf_printf(&body, "%s%s ", a.min ? "" : "( ", first);
		if (array_rest(c, &a, 1, hint, &body) != 0)
			goto out;
		gbuf_puts(&body, a.min ? " " : " )? ");
	}
	gbuf_printf(&body, "\"]\" %s", prim(c, SP_WS));
	r = emit_rule(c, hint, &body);
out:
	free(a.e);
	gbuf_free(&body);
	return r;
}

/* ---- dispatch by type ---- */

static const char *gen_type(sc *c, const json_t *s, const char *hint,
			    unsigned type)
{
	switch (type) {
	case T_NULL: return prim(c, SP_NULL);
	case T_BOOL: return prim(c, SP_BOOLEAN);
	case T_OBJECT: return gen_object(c, s, hint);
	case T_ARRAY: return gen_array(c, s, hint);
	case T_STRING: return gen_string(c, s, hint);
	case T_NUMBER: return gen_number(c, s, hint, 0);
	default: return gen_number(c, s, hint, 1);
	}
}

static const char *gen_types(sc *c, const json_t *s, const char *hint)
{
	const char *names[7];
	unsigned types, bit;
	size_t n = 0;

	if (get_types(c, s, &types) != 0)
		return NULL;
	if (types == 0)
		types = inferred_types(s);
	if (types == 0)
		return prim(c, SP_VALUE);
	if ((types & T_NUMBER) && (types & T_INTEGER))
		types &= ~(unsigned)T_INTEGER;
	for (bit = 1; bit <= T_INTEGER; bit <<= 1) {
		if (!(types & bit))
			continue;
		names[n] = gen_type(c, s, hint, bit);
		if (names[n++] == NULL)
			return NULL;
	}
	return n == 1 ? names[0] : alt_rule(c, hint, names, n);
}

/* ---- references ---- */

/* One JSON pointer segment, unescaped (~1 /, ~0 ~, %XX). */
static size_t ptr_segment(const char *p, char *seg, size_t cap)
{
	size_t i = 0, k = 0;

	while (p[i] && p[i] != '/' && k + 1 < cap) {
		if (p[i] == '~' && (p[i + 1] == '0' || p[i + 1] == '1')) {
			seg[k++] = p[i + 1] == '0' ? '~' : '/';
			i += 2;
		} else if (p[i] == '%' && isxdigit((unsigned char)p[i + 1]) &&
			   isxdigit((unsigned char)p[i + 2])) {
			char hx[3] = { p[i + 1], p[i + 2], 0 };

			seg[k++] = (char)strtol(hx, NULL, 16);
			i += 3;
		} else {
			seg[k++] = p[i++];
		}
	}
	seg[k] = '\0';
	while (p[i] && p[i] != '/')
		i++;
	return i;
}

/* The subschema ref points to; the path to it in *path. */
static const json_t *resolve(sc *c, const char *ref, char *path, size_t cap)
{
	const json_t *x = c->root;
	const char *p = ref + 1;
	char seg[256];
	size_t pl;

	snprintf(path, cap, "%s", c->root_path);
	if (ref[0] != '#') {
		serr(c, "'$ref' %.80s: only local references ('#...') supported", ref);
		return NULL;
	}
	if (*p && *p != '/') {
		serr(c, "'$ref' %.80s: anchors unsupported", ref);
		return NULL;
	}
	while (*p == '/' && x) {
		p++;
		p += ptr_segment(p, seg, sizeof seg);
		pl = strlen(path);
		snprintf(path + pl, cap - pl, ".%s", seg);
		if (json_is_object(x)) {
			x = json_object_get(x, seg);
		} else if (json_is_array(x) && seg[0] >= '0' && seg[0] <= '9' &&
			   (seg[0] != '0' || seg[1] == '\0')) {
			x = json_array_get(x, strtoul(seg, NULL, 10));
		} else {
			x = NULL;
		}
	}
	if (x == NULL)
		serr(c, "'$ref' %.80s not found", ref);
	return x;
}

static const char *ref_memo(const sc *c, const char *ref)
{
	size_t i;

	for (i = 0; i < c->nrefs; i++)
		if (strcmp(c->refs[i].ref, ref) == 0)
			return c->refs[i].name;
	return NULL;
}

static const char *gen_merged(sc *c, const json_t *s, const char *hint);

static const char *gen_ref(sc *c, const json_t *s, const char *hint)
{
	const json_t *rv = json_object_get(s, "$ref"), *target;
	const char *k, *name, *body;
	char tpath[sizeof c->path], save[sizeof c->path], h[160];
	json_t *v;
	gbuf b = { 0 };
	size_t slen;

	json_object_foreach((json_t *)s, k, v)
		if (strcmp(k, "$ref") != 0 && !is_note(k))
			return gen_merged(c, s, hint);
	if (!json_is_string(rv)) {
		serr(c, "'$ref' must be a string");
		return NULL;
	}
	if ((name = ref_memo(c, json_string_value(rv))) != NULL)
		return name;
	target = resolve(c, json_string_value(rv), tpath, sizeof tpath);
	if (target == NULL)
		return NULL;
	k = strrchr(json_string_value(rv), '/');
	snprintf(h, sizeof h, "%s", k && k[1] ? k + 1 : "ref");
	name = new_name(c, h);
	if (name == NULL || ggrow(&c->refs, &c->rcap, c->nrefs + 1, sizeof *c->refs) != 0 ||
	    (c->refs[c->nrefs].ref = strdup(json_string_value(rv))) == NULL) {
		serr(c, "out of memory");
		return NULL;
	}
	c->refs[c->nrefs++].name = name;
	memcpy(save, c->path, sizeof save);
	slen = c->plen;
	snprintf(c->path, sizeof c->path, "%s", tpath);
	c->plen = strlen(c->path);
	body = gen(c, target, name);
	memcpy(c->path, save, sizeof save);
	c->plen = slen;
	if (body == NULL)
		return NULL;
	gbuf_puts(&b, body);
	name = emit_named(c, name, &b);
	gbuf_free(&b);
	return name;
}

/* ---- allOf, and keywords beside anyOf and $ref ---- */

#define MERGE_DEPTH 16

static int merge_into(sc *c, json_t *m, const json_t *b, json_t *closed,
		      unsigned depth);

static int merge_types(sc *c, json_t *m, const json_t *b)
{
	unsigned ta, tb, t;
	json_t *arr;
	int i;

	if (get_types(c, m, &ta) != 0 || get_types(c, b, &tb) != 0)
		return -1;
	if (tb & T_NUMBER)
		tb |= T_INTEGER;
	if (ta & T_NUMBER)
		ta |= T_INTEGER;
	t = ta & tb;
	if ((ta & T_NUMBER) != (tb & T_NUMBER))
		t &= ~(unsigned)T_NUMBER;
	if (t == 0)
		return serr(c, "allOf: the types exclude each other");
	arr = json_array();
	for (i = 0; type_names[i]; i++)
		if (t & 1u << i)
			json_array_append_new(arr, json_string(type_names[i]));
	return json_object_set_new(m, "type", arr) == 0 ? 0 : serr(c, "out of memory");
}

static int merge_props(sc *c, json_t *m, const json_t *bp)
{
	json_t *mp = json_object_get(m, "properties"), *copy, *v;
	const char *k;

	if (!json_is_object(mp) || !json_is_object(bp))
		return serr(c, "'properties' must be an object");
	copy = json_copy(mp);
	json_object_foreach((json_t *)bp, k, v) {
		json_t *old = json_object_get(copy, k);

		if (old == NULL || json_equal(old, v))
			json_object_set(copy, k, v);
		else
			json_object_set_new(copy, k, json_pack("{s:[O,O]}", "allOf", old, v));
	}
	return json_object_set_new(m, "properties", copy) == 0 ? 0 : serr(c, "out of memory");
}

static int merge_required(sc *c, json_t *m, const json_t *br)
{
	json_t *copy = json_copy(json_object_get(m, "required")), *x;
	size_t i;

	if (!json_is_array(copy) || !json_is_array(br)) {
		json_decref(copy);
		return serr(c, "'required' must be an array");
	}
	json_array_foreach(br, i, x)
		if (json_is_string(x) && !is_required(copy, json_string_value(x)))
			json_array_append(copy, x);
	return json_object_set_new(m, "required", copy) == 0 ? 0 : serr(c, "out of memory");
}

static int merge_key(sc *c, json_t *m, const char *k, const json_t *v)
{
	json_t *old = json_object_get(m, k);

	if (old == NULL)
		return json_object_set(m, k, (json_t *)v) == 0 ? 0 : serr(c, "out of memory");
	if (strcmp(k, "properties") == 0)
		return merge_props(c, m, v);
	if (strcmp(k, "required") == 0)
		return merge_required(c, m, v);
	if (strcmp(k, "type") == 0) {
		json_t *t = json_pack("{s:O}", "type", (json_t *)v);
		int rc = merge_types(c, m, t);

		json_decref(t);
		return rc;
	}
	if (json_equal(old, (json_t *)v))
		return 0;
	return serr(c, "allOf: conflicting '%s' unsupported", k);
}

static int merge_into(sc *c, json_t *m, const json_t *b, json_t *closed,
		      unsigned depth)
{
	const json_t *addl, *x;
	const char *k;
	json_t *v;
	size_t i;

	if (depth > MERGE_DEPTH)
		return serr(c, "allOf nested deeper than %d", MERGE_DEPTH);
	if (json_is_true(b))
		return 0;
	if (!json_is_object(b))
		return serr(c, "allOf: a branch is not a schema object (or is false)");
	if (check_keys(c, b) != 0)
		return -1;
	if (json_object_get(b, "$ref")) {
		char tpath[sizeof c->path];
		const json_t *t = json_is_string(json_object_get(b, "$ref")) ?
			resolve(c, json_string_value(json_object_get(b, "$ref")), tpath,
				sizeof tpath) : NULL;

		if (t == NULL || merge_into(c, m, t, closed, depth + 1) != 0)
			return t ? -1 : serr(c, "allOf: '$ref' must name a schema");
	}
	json_array_foreach(json_object_get(b, "allOf"), i, x)
		if (merge_into(c, m, x, closed, depth + 1) != 0)
			return -1;
	addl = json_object_get(b, "additionalProperties");
	if (addl && !json_is_true(addl) &&
	    !(json_is_object(addl) && json_object_size(addl) == 0))
		json_array_append_new(closed, json_is_object(json_object_get(b, "properties")) ?
			json_copy(json_object_get(b, "properties")) : json_object());
	json_object_foreach((json_t *)b, k, v) {
		if (is_note(k) || !strcmp(k, "$ref") || !strcmp(k, "allOf") || !strcmp(k, "$id"))
			continue;
		if (merge_key(c, m, k, v) != 0)
			return -1;
	}
	return 0;
}

/* Every branch that closes its object (additionalProperties) must declare
 * every property the others add. */
static int check_closed(sc *c, const json_t *m, const json_t *closed)
{
	const json_t *props = json_object_get(m, "properties"), *cp;
	const char *k;
	json_t *v;
	size_t i;

	json_array_foreach(closed, i, cp)
		json_object_foreach((json_t *)props, k, v)
			if (!json_object_get(cp, k))
				return serr(c, "allOf: additionalProperties of one branch "
					    "excludes property '%s' of another", k);
	return 0;
}

/* s with allOf, or $ref or anyOf beside other keywords: one schema with
 * the keywords of all. */
static const char *gen_merged(sc *c, const json_t *s, const char *hint)
{
	json_t *m = json_object(), *closed = json_array();
	const char *r = NULL;
	const json_t *all = json_object_get(s, "allOf");

	if (m == NULL || closed == NULL) {
		serr(c, "out of memory");
		goto out;
	}
	if (all && (!json_is_array(all) || json_array_size(all) == 0)) {
		serr(c, "'allOf' must be a non-empty array");
		goto out;
	}
	if (merge_into(c, m, s, closed, 0) != 0 || check_closed(c, m, closed) != 0)
		goto out;
	r = gen(c, m, hint);
out:
	json_decref(m);
	json_decref(closed);
	return r;
}

static const char *gen_anyof(sc *c, const json_t *s, const char *hint)
{
	const char *kw = json_object_get(s, "anyOf") ? "anyOf" : "oneOf", *k;
	const json_t *arr = json_object_get(s, kw), *x;
	const char **names = NULL, *r = NULL;
	json_t *sib = json_object(), *v;
	char h[160];
	size_t i;

	if (json_object_get(s, "anyOf") && json_object_get(s, "oneOf")) {
		serr(c, "anyOf with oneOf unsupported");
		goto out;
	}
	if (!json_is_array(arr) || json_array_size(arr) == 0) {
		serr(c, "'%s' must be a non-empty array", kw);
		goto out;
	}
	json_object_foreach((json_t *)s, k, v)
		if (strcmp(k, kw) != 0 && !is_note(k))
			json_object_set(sib, k, v);
	names = calloc(json_array_size(arr), sizeof *names);
	if (names == NULL || sib == NULL) {
		serr(c, "out of memory");
		goto out;
	}
	json_array_foreach(arr, i, x) {
		size_t old = path_push(c, ".%s[%zu]", kw, i);

		snprintf(h, sizeof h, "%s-%zu", hint, i);
		if (json_object_size(sib)) {
			json_t *both = json_pack("{s:[O,O]}", "allOf", sib, (json_t *)x);

			names[i] = both ? gen(c, both, h) : NULL;
			json_decref(both);
		} else {
			names[i] = gen(c, x, h);
		}
		path_pop(c, old);
		if (names[i] == NULL)
			goto out;
	}
	r = alt_rule(c, hint, names, json_array_size(arr));
out:
	free(names);
	json_decref(sib);
	return r;
}

/* ---- any schema ---- */

static const char *gen_schema(sc *c, const json_t *s, const char *hint)
{
	if (json_is_true(s))
		return prim(c, SP_VALUE);
	if (json_is_false(s)) {
		serr(c, "schema false: no value is valid");
		return NULL;
	}
	if (!json_is_object(s)) {
		serr(c, "a schema must be an object or a boolean");
		return NULL;
	}
	if (check_keys(c, s) != 0)
		return NULL;
	if (json_object_get(s, "$ref"))
		return gen_ref(c, s, hint);
	if (json_object_get(s, "allOf"))
		return gen_merged(c, s, hint);
	if (json_object_get(s, "anyOf") || json_object_get(s, "oneOf"))
		return gen_anyof(c, s, hint);
	if (json_object_get(s, "enum") || json_object_get(s, "const"))
		return gen_enum(c, s, hint);
	return gen_types(c, s, hint);
}

static const char *gen(sc *c, const json_t *s, const char *hint)
{
	const char *r;

	if (c->depth >= DS_SCHEMA_MAX_DEPTH) {
		serr(c, "schema nested deeper than %u", DS_SCHEMA_MAX_DEPTH);
		return NULL;
	}
	c->depth++;
	r = gen_schema(c, s, hint);
	c->depth--;
	return r;
}

/* ---- the builder ------------------------------------------------------------- */

int ds_gbuilder_new(ds_gbuilder **out, ds_err *err)
{
	ds_gbuilder *b = ds_calloc(1, sizeof *b, err);
	unsigned p;

	*out = NULL;
	if (b == NULL)
		return -1;
	for (p = 0; p < SP_COUNT; p++)
		if (ns_add(&b->names, sjson_prim_name(p)) == NULL) {
			ds_gbuilder_free(b);
			return ds_errf(err, "out of memory");
		}
	*out = b;
	return 0;
}

void ds_gbuilder_free(ds_gbuilder *b)
{
	if (b == NULL)
		return;
	gbuf_free(&b->text);
	ns_free(&b->names);
	free(b);
}

static int check_name(const ds_gbuilder *b, const char *name, ds_err *err)
{
	size_t i, n = strlen(name);
	int bad = n == 0 || n > 128;

	for (i = 0; i < n && !bad; i++) {
		char ch = name[i];

		bad = !((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			(ch >= '0' && ch <= '9') || ch == '-' || ch == '_');
	}
	if (bad) {
		ds_errf(err, "rule name '%.40s': 1 to 128 letters, digits, '-' "
			"or '_'", name);
		gerr_oneline(err);
		return -1;
	}
	if (ns_has(&b->names, name))
		return ds_errf(err, "rule '%s' defined twice", name);
	return 0;
}

/* Undo a failed addition. */
typedef struct bmark {
	size_t text, names;
	unsigned prims;
} bmark;

static bmark bmark_get(const ds_gbuilder *b)
{
	return (bmark){ .text = b->text.n, .names = b->names.n, .prims = b->prims };
}

static void bmark_restore(ds_gbuilder *b, bmark m)
{
	b->text.n = m.text;
	if (b->text.p)
		b->text.p[m.text] = '\0';
	b->text.oom = 0;
	ns_truncate(&b->names, m.names);
	b->prims = m.prims;
}

int ds_gbuilder_schema(ds_gbuilder *b, const char *name, const json_t *schema,
		       const char *path, ds_err *err)
{
	bmark mk = bmark_get(b);
	sc c = { .b = b, .out = &b->text, .root = schema,
		 .root_path = path ? path : "schema", .err = err };
	const char *top, *own;
	gbuf body = { 0 };
	size_t i;
	int rc = -1;

	if (check_name(b, name, err) != 0)
		return -1;
	snprintf(c.path, sizeof c.path, "%s", c.root_path);
	c.plen = strlen(c.path);
	own = ns_add(&b->names, name);
	top = own ? gen(&c, schema, name) : NULL;
	if (own == NULL)
		ds_errf(err, "out of memory");
	if (top != NULL) {
		gbuf_puts(&body, top);
		rc = emit_named(&c, own, &body) ? 0 : -1;
	}
	gbuf_free(&body);
	for (i = 0; i < c.nrefs; i++)
		free(c.refs[i].ref);
	free(c.refs);
	if (rc != 0) {
		bmark_restore(b, mk);
		gerr_oneline(err);
	}
	return rc;
}

int ds_gbuilder_literal(ds_gbuilder *b, const char *name, const char *s,
			size_t len, ds_err *err)
{
	size_t i = 0;
	uint32_t cp;

	if (check_name(b, name, err) != 0)
		return -1;
	while (i < len) {
		size_t n = gutf8_dec((const uint8_t *)s + i, len - i, &cp);

		if (n == 0)
			return ds_errf(err, "literal '%s': not UTF-8 at byte %zu", name, i);
		i += n;
	}
	if (!ns_add(&b->names, name))
		return ds_errf(err, "out of memory");
	gbuf_printf(&b->text, "%s ::= ", name);
	gbuf_literal(&b->text, s, len);
	if (gbuf_puts(&b->text, "\n") != 0)
		return ds_errf(err, "grammar text over %zu bytes", DS_GRAMMAR_MAX_TEXT);
	return 0;
}

int ds_gbuilder_rule(ds_gbuilder *b, const char *name, const char *body,
		     ds_err *err)
{
	if (check_name(b, name, err) != 0)
		return -1;
	if (strchr(body, '\n') != NULL)
		return ds_errf(err, "rule '%s': the body must be one line", name);
	if (!ns_add(&b->names, name))
		return ds_errf(err, "out of memory");
	gbuf_printf(&b->text, "%s ::= ", name);
	gbuf_puts(&b->text, body);
	if (gbuf_puts(&b->text, "\n") != 0)
		return ds_errf(err, "grammar text over %zu bytes", DS_GRAMMAR_MAX_TEXT);
	return 0;
}

const char *ds_gbuilder_text(const ds_gbuilder *b, size_t *len)
{
	if (len)
		*len = b->text.n;
	return b->text.p ? b->text.p : "";
}

int ds_gbuilder_finish(const ds_gbuilder *b, const char *root, ds_grammar **g,
		       ds_err *err)
{
	if (b->text.oom)
		return ds_errf(err, "grammar text over %zu bytes", DS_GRAMMAR_MAX_TEXT);
	return gbnf_parse(b->text.p ? b->text.p : "", b->text.n, root, g, err);
}

/* ---- whole grammars ------------------------------------------------------------ */

int ds_grammar_from_schema(const json_t *schema, const char *path,
			   ds_grammar **g, ds_err *err)
{
	ds_gbuilder *b;
	int rc;

	*g = NULL;
	if (ds_gbuilder_new(&b, err) != 0)
		return -1;
	rc = ds_gbuilder_schema(b, "root", schema, path, err);
	if (rc == 0)
		rc = ds_gbuilder_finish(b, "root", g, err);
	ds_gbuilder_free(b);
	return rc;
}

int ds_grammar_json_object(ds_grammar **g, ds_err *err)
{
	json_t *s = json_pack("{s:s}", "type", "object");
	int rc;

	if (s == NULL)
		return ds_errf(err, "out of memory");
	rc = ds_grammar_from_schema(s, "json_object", g, err);
	json_decref(s);
	return rc;
}

int ds_grammar_schema_text(const json_t *schema, const char *path,
			   char **text, size_t *len, ds_err *err)
{
	ds_gbuilder *b;
	int rc;

	*text = NULL;
	if (ds_gbuilder_new(&b, err) != 0)
		return -1;
	rc = ds_gbuilder_schema(b, "root", schema, path, err);
	if (rc == 0) {
		*text = strdup(ds_gbuilder_text(b, len));
		if (*text == NULL)
			rc = ds_errf(err, "out of memory");
	}
	ds_gbuilder_free(b);
	return rc;
}

int ds_grammar_load(const char *path, int schema, ds_grammar **g, ds_err *err)
{
	json_error_t je;
	json_t *j;
	char *text;
	size_t len;
	int rc;

	if (ds_read_file(path, DS_GRAMMAR_MAX_TEXT, &text, &len, err))
		return -1;
	if (!schema) {
		rc = ds_grammar_parse(text, len, g, err);
	} else if ((j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je)) == NULL) {
		rc = ds_errf(err, "line %d column %d: %s", je.line, je.column,
			     je.text);
	} else {
		rc = ds_grammar_from_schema(j, "schema", g, err);
		json_decref(j);
	}
	free(text);
	return rc ? ds_err_prefix(err, "%s", path) : 0;
}

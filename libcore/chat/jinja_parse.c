/*
 * jinja_parse.c - the Jinja parser (jinja_int.h): the lexer's tokens to a
 * syntax tree, with Jinja2's grammar and precedence.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_int.h"

/* ---- parser ------------------------------------------------------------------ */

typedef struct parser {
	jj_env *e;
	jj_tok *t;
	size_t i;
	int depth;
	int loops;     /* enclosing for loops (break, continue) */
} parser;

static jj_tok *cur(parser *P) { return &P->t[P->i]; }
static jj_tok *peek(parser *P, size_t k)
{
	size_t j = P->i;

	while (k-- > 0 && P->t[j].t != TK_EOF)
		j++;
	return &P->t[j];
}
static jj_tok *next(parser *P)
{
	jj_tok *t = &P->t[P->i];

	if (t->t != TK_EOF)
		P->i++;
	return t;
}

static bool is_op(const jj_tok *t, const char *op)
{
	return t->t == TK_OP && strcmp(jj_ops[t->op], op) == 0;
}

static bool is_name(const jj_tok *t, const char *name)
{
	size_t n = strlen(name);

	return t->t == TK_NAME && t->n == n && memcmp(t->s, name, n) == 0;
}

static const char *describe(const jj_tok *t, char *buf, size_t cap)
{
	switch (t->t) {
	case TK_EOF: return "end of template";
	case TK_DATA: return "template data";
	case TK_VAR_BEGIN: return "'{{'";
	case TK_VAR_END: return "end of print statement";
	case TK_BLOCK_BEGIN: return "'{%'";
	case TK_BLOCK_END: return "end of statement block";
	case TK_STRING: return "string";
	case TK_INT: return "integer";
	case TK_FLOAT: return "float";
	case TK_NAME:
		snprintf(buf, cap, "'%.*s'", t->n > 40 ? 40 : (int)t->n, t->s);
		return buf;
	default:
		snprintf(buf, cap, "'%s'", jj_ops[t->op]);
		return buf;
	}
}

_Noreturn static void unexpected(parser *P, const char *want)
{
	char buf[64];
	jj_tok *t = cur(P);

	jj_fail(P->e, t->pos, "expected %s, got %s", want, describe(t, buf, sizeof buf));
}

static void expect_op(parser *P, const char *op)
{
	char want[8];

	if (!is_op(cur(P), op)) {
		snprintf(want, sizeof want, "'%s'", op);
		unexpected(P, want);
	}
	next(P);
}

static bool skip_op(parser *P, const char *op)
{
	if (!is_op(cur(P), op))
		return false;
	next(P);
	return true;
}

static void expect(parser *P, int type, const char *what)
{
	if (cur(P)->t != type)
		unexpected(P, what);
	next(P);
}

static jj_node *node(parser *P, int kind, uint32_t pos)
{
	jj_node *n = jj_alloc(P->e, sizeof *n);

	n->kind = (uint8_t)kind;
	n->pos = pos;
	return n;
}

static void add_kid(parser *P, jj_node *n, jj_node *kid)
{
	if ((n->nkids & (n->nkids - 1)) == 0) { /* 0, 1, 2, 4, ...: grow */
		size_t cap = n->nkids == 0 ? 1 : n->nkids * 2;
		jj_node **k = jj_alloc_n(P->e, cap, sizeof *k);

		if (n->nkids > 0)
			memcpy(k, n->kids, n->nkids * sizeof *k);
		n->kids = k;
	}
	n->kids[n->nkids++] = kid;
}

static void enter(parser *P)
{
	if (++P->depth > JINJA_MAX_NEST)
		jj_fail(P->e, cur(P)->pos, "nested deeper than %d", JINJA_MAX_NEST);
}

static jj_node *parse_expr(parser *P, bool condexpr);
static jj_node *parse_tuple(parser *P, bool condexpr, bool explicit_parens,
			    const char *extra_end);
static jj_node *parse_or(parser *P);
static jj_node *parse_unary(parser *P, bool filters);

static jj_node *name_node(parser *P, int kind)
{
	jj_tok *t = cur(P);
	jj_node *n;

	if (t->t != TK_NAME)
		unexpected(P, "a name");
	next(P);
	n = node(P, kind, t->pos);
	n->name = t->s;
	n->name_n = t->n;
	return n;
}

/* ( args ): positional, then name=value. */
static void parse_args(parser *P, jj_node *call)
{
	bool kw = false;

	expect_op(P, "(");
	while (!is_op(cur(P), ")")) {
		if (call->nkids > 0)
			expect_op(P, ",");
		if (is_op(cur(P), ")"))
			break;
		if (is_op(cur(P), "*") || is_op(cur(P), "**"))
			jj_fail(P->e, cur(P)->pos, "*args and **kwargs calls are not supported");
		if (cur(P)->t == TK_NAME && is_op(peek(P, 1), "=")) {
			jj_node *k = name_node(P, N_KWARG);

			next(P);
			k->a = parse_expr(P, true);
			add_kid(P, call, k);
			kw = true;
		} else {
			if (kw)
				jj_fail(P->e, cur(P)->pos,
					"positional argument after a keyword argument");
			add_kid(P, call, parse_expr(P, true));
		}
	}
	next(P);
}

static jj_node *lit(parser *P, jv v, uint32_t pos)
{
	jj_node *n = node(P, N_LIT, pos);

	n->lit = v;
	return n;
}

static jj_node *parse_list_or_dict(parser *P, bool dict)
{
	jj_node *n = node(P, dict ? N_DICT : N_LIST, cur(P)->pos);
	const char *close = dict ? "}" : "]";
	size_t items = 0;

	next(P);
	while (!is_op(cur(P), close)) {
		if (items++ > 0)
			expect_op(P, ",");
		if (is_op(cur(P), close))
			break;
		add_kid(P, n, parse_expr(P, true));
		if (dict) {
			expect_op(P, ":");
			add_kid(P, n, parse_expr(P, true));
		}
	}
	next(P);
	return n;
}

static jj_node *parse_primary(parser *P)
{
	jj_tok *t = cur(P);

	switch (t->t) {
	case TK_NAME: {
		static const struct { const char *n; int v; } k[] = {
			{ "true", 1 }, { "True", 1 }, { "false", 0 },
			{ "False", 0 }, { "none", 2 }, { "None", 2 },
		};

		for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
			if (is_name(t, k[i].n)) {
				next(P);
				return lit(P, k[i].v == 2 ? jv_none() : jv_bool(k[i].v),
					   t->pos);
			}
		return name_node(P, N_NAME);
	}
	case TK_STRING: {
		jj_buf b = { 0 };

		/* adjacent literals are one string */
		while (cur(P)->t == TK_STRING) {
			jj_buf_add(P->e, &b, cur(P)->s, cur(P)->n);
			next(P);
		}
		return lit(P, jv_str(b.p != NULL ? b.p : "", b.n), t->pos);
	}
	case TK_INT:
		next(P);
		return lit(P, jv_int(t->i), t->pos);
	case TK_FLOAT:
		next(P);
		return lit(P, jv_float(t->f), t->pos);
	default:
		break;
	}
	if (is_op(t, "(")) {
		jj_node *n;

		next(P);
		n = parse_tuple(P, true, true, NULL);
		expect_op(P, ")");
		return n;
	}
	if (is_op(t, "["))
		return parse_list_or_dict(P, false);
	if (is_op(t, "{"))
		return parse_list_or_dict(P, true);
	unexpected(P, "an expression");
}

/* [ index ] or [ start : stop : step ] */
static jj_node *parse_subscript(parser *P, jj_node *obj, uint32_t pos)
{
	jj_node *parts[3] = { NULL, NULL, NULL }, *n;
	int k = 0;

	if (!is_op(cur(P), ":")) {
		parts[0] = parse_expr(P, true);
		if (!is_op(cur(P), ":")) {
			if (is_op(cur(P), ","))
				jj_fail(P->e, cur(P)->pos, "tuple subscripts are not supported");
			expect_op(P, "]");
			n = node(P, N_ITEM, pos);
			n->a = obj;
			n->b = parts[0];
			return n;
		}
	}
	while (k < 2 && skip_op(P, ":")) {
		k++;
		if (!is_op(cur(P), ":") && !is_op(cur(P), "]"))
			parts[k] = parse_expr(P, true);
	}
	expect_op(P, "]");
	n = node(P, N_SLICE, pos);
	n->a = obj;
	n->b = parts[0];
	n->c = parts[1];
	n->d = parts[2];
	return n;
}

static jj_node *parse_postfix(parser *P, jj_node *n)
{
	for (;;) {
		jj_tok *t = cur(P);

		if (is_op(t, ".")) {
			jj_node *a;

			next(P);
			if (cur(P)->t == TK_INT) {
				a = node(P, N_ITEM, t->pos);
				a->b = lit(P, jv_int(cur(P)->i), cur(P)->pos);
				next(P);
			} else {
				a = name_node(P, N_ATTR);
				a->pos = t->pos;
			}
			a->a = n;
			n = a;
		} else if (is_op(t, "[")) {
			next(P);
			n = parse_subscript(P, n, t->pos);
		} else if (is_op(t, "(")) {
			jj_node *c = node(P, N_CALL, t->pos);

			c->a = n;
			parse_args(P, c);
			n = c;
		} else {
			return n;
		}
	}
}

/* | name(args) ... ; obj NULL in a filter block */
static jj_node *parse_filter(parser *P, jj_node *obj, bool first_bar_read)
{
	while (first_bar_read || skip_op(P, "|")) {
		jj_node *f = name_node(P, N_FILTER);
		int id;

		first_bar_read = false;
		if (is_op(cur(P), "."))
			jj_fail(P->e, cur(P)->pos, "dotted filter names are not supported");
		id = jj_filter_id(f->name, f->name_n);
		if (id < 0)
			jj_fail(P->e, f->pos, "%s filter '%.*s'",
				jj_jinja2_filter(f->name, f->name_n) ?
				"unsupported" : "unknown", (int)f->name_n, f->name);
		f->id = (uint16_t)id;
		f->a = obj;
		if (is_op(cur(P), "("))
			parse_args(P, f);
		obj = f;
	}
	return obj;
}

static jj_node *parse_test(parser *P, jj_node *obj)
{
	uint32_t pos = cur(P)->pos;
	bool neg = false;
	jj_node *n;
	jj_tok *t;
	int id;

	next(P); /* is */
	if (is_name(cur(P), "not")) {
		next(P);
		neg = true;
	}
	n = name_node(P, N_TEST);
	n->pos = pos;
	n->op = neg;
	n->a = obj;
	id = jj_test_id(n->name, n->name_n);
	if (id < 0)
		jj_fail(P->e, pos, "%s test '%.*s'",
			jj_jinja2_test(n->name, n->name_n) ? "unsupported" : "unknown",
			(int)n->name_n, n->name);
	n->id = (uint16_t)id;
	t = cur(P);
	if (is_op(t, "(")) {
		parse_args(P, n);
	} else if ((t->t == TK_NAME || t->t == TK_STRING || t->t == TK_INT ||
		    t->t == TK_FLOAT || is_op(t, "[") || is_op(t, "{")) &&
		   !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and")) {
		/* one argument without parentheses: "is divisibleby 3" */
		add_kid(P, n, parse_postfix(P, parse_primary(P)));
	}
	return n;
}

static jj_node *parse_filter_expr(parser *P, jj_node *n)
{
	for (;;) {
		if (is_op(cur(P), "|")) {
			n = parse_filter(P, n, false);
		} else if (is_name(cur(P), "is")) {
			n = parse_test(P, n);
		} else if (is_op(cur(P), "(")) {
			jj_node *c = node(P, N_CALL, cur(P)->pos);

			c->a = n;
			parse_args(P, c);
			n = c;
		} else {
			return n;
		}
	}
}

static jj_node *parse_unary(parser *P, bool filters)
{
	jj_tok *t = cur(P);
	jj_node *n;

	enter(P);
	if (is_op(t, "-") || is_op(t, "+")) {
		next(P);
		n = node(P, N_UNARY, t->pos);
		n->op = is_op(t, "-") ? OP_NEG : OP_POS;
		n->a = parse_unary(P, false);
	} else {
		n = parse_primary(P);
	}
	n = parse_postfix(P, n);
	if (filters)
		n = parse_filter_expr(P, n);
	P->depth--;
	return n;
}

static jj_node *binary(parser *P, int op, jj_node *a, jj_node *b, uint32_t pos)
{
	jj_node *n = node(P, N_BIN, pos);

	n->op = (uint8_t)op;
	n->a = a;
	n->b = b;
	return n;
}

/* Jinja2's levels, tightest last: or, and, not, comparisons, + -, ~,
 * * / // %, ** (left-associative, as Jinja2 has it), unary. */
static jj_node *parse_pow(parser *P)
{
	jj_node *n = parse_unary(P, true);

	while (is_op(cur(P), "**")) {
		uint32_t pos = next(P)->pos;

		n = binary(P, OP_POW, n, parse_unary(P, true), pos);
	}
	return n;
}

static jj_node *parse_math2(parser *P)
{
	static const struct { const char *s; int op; } ops[] = {
		{ "*", OP_MUL }, { "/", OP_DIV }, { "//", OP_FLOORDIV }, { "%", OP_MOD },
	};
	jj_node *n = parse_pow(P);

	for (;;) {
		size_t k;

		for (k = 0; k < 4; k++)
			if (is_op(cur(P), ops[k].s))
				break;
		if (k == 4)
			return n;
		uint32_t pos = next(P)->pos;
		n = binary(P, ops[k].op, n, parse_pow(P), pos);
	}
}

static jj_node *parse_concat(parser *P)
{
	jj_node *n = parse_math2(P);

	while (is_op(cur(P), "~")) {
		uint32_t pos = next(P)->pos;

		n = binary(P, OP_CONCAT, n, parse_math2(P), pos);
	}
	return n;
}

static jj_node *parse_math1(parser *P)
{
	jj_node *n = parse_concat(P);

	while (is_op(cur(P), "+") || is_op(cur(P), "-")) {
		int op = is_op(cur(P), "+") ? OP_ADD : OP_SUB;
		uint32_t pos = next(P)->pos;

		n = binary(P, op, n, parse_concat(P), pos);
	}
	return n;
}

static int cmp_op(parser *P)
{
	static const struct { const char *s; int op; } ops[] = {
		{ "==", OP_EQ }, { "!=", OP_NE }, { "<", OP_LT }, { "<=", OP_LE },
		{ ">", OP_GT }, { ">=", OP_GE },
	};
	jj_tok *t = cur(P);

	for (size_t k = 0; k < 6; k++)
		if (is_op(t, ops[k].s))
			return ops[k].op;
	if (is_name(t, "in"))
		return OP_IN;
	if (is_name(t, "not") && is_name(peek(P, 1), "in"))
		return OP_NOTIN;
	return OP_NONE;
}

static jj_node *parse_compare(parser *P)
{
	jj_node *first = parse_math1(P), *n = NULL;
	int op;

	while ((op = cmp_op(P)) != OP_NONE) {
		jj_node *o = node(P, N_CMPOP, cur(P)->pos);

		next(P);
		if (op == OP_NOTIN)
			next(P);
		o->op = (uint8_t)op;
		o->a = parse_math1(P);
		if (n == NULL) {
			n = node(P, N_CMP, first->pos);
			n->a = first;
		}
		add_kid(P, n, o);
	}
	return n != NULL ? n : first;
}

static jj_node *parse_not(parser *P)
{
	if (is_name(cur(P), "not")) {
		jj_node *n = node(P, N_NOT, next(P)->pos);

		enter(P);
		n->a = parse_not(P);
		P->depth--;
		return n;
	}
	return parse_compare(P);
}

static jj_node *parse_and(parser *P)
{
	jj_node *n = parse_not(P);

	while (is_name(cur(P), "and")) {
		jj_node *a = node(P, N_AND, next(P)->pos);

		a->a = n;
		a->b = parse_not(P);
		n = a;
	}
	return n;
}

static jj_node *parse_or(parser *P)
{
	jj_node *n = parse_and(P);

	while (is_name(cur(P), "or")) {
		jj_node *o = node(P, N_OR, next(P)->pos);

		o->a = n;
		o->b = parse_and(P);
		n = o;
	}
	return n;
}

/* x if c else y (else optional: undefined) */
static jj_node *parse_expr(parser *P, bool condexpr)
{
	jj_node *n;

	enter(P);
	n = parse_or(P);
	while (condexpr && is_name(cur(P), "if")) {
		jj_node *c = node(P, N_COND, next(P)->pos);

		c->b = n;
		c->a = parse_or(P);
		if (is_name(cur(P), "else")) {
			next(P);
			c->c = parse_expr(P, true);
		}
		n = c;
	}
	P->depth--;
	return n;
}

static bool tuple_end(parser *P, const char *extra_end)
{
	jj_tok *t = cur(P);

	return t->t == TK_VAR_END || t->t == TK_BLOCK_END || t->t == TK_EOF ||
	       is_op(t, ")") || (extra_end != NULL && is_name(t, extra_end));
}

static jj_node *parse_tuple(parser *P, bool condexpr, bool explicit_parens,
			    const char *extra_end)
{
	jj_node *tup = node(P, N_TUPLE, cur(P)->pos);
	bool is_tuple = false;

	for (;;) {
		if (tup->nkids > 0)
			expect_op(P, ",");
		if (tuple_end(P, extra_end))
			break;
		add_kid(P, tup, parse_expr(P, condexpr));
		if (is_op(cur(P), ","))
			is_tuple = true;
		else
			break;
	}
	if (!is_tuple) {
		if (tup->nkids == 1)
			return tup->kids[0];
		if (!explicit_parens)
			unexpected(P, "an expression");
	}
	return tup;
}

/* A for or set target: a name, names separated by commas (in
 * parentheses or not), or with ns_ok name.attr. */
static jj_node *parse_target(parser *P, bool ns_ok)
{
	jj_node *t, *n;
	bool parens;

	if (ns_ok && cur(P)->t == TK_NAME && is_op(peek(P, 1), ".")) {
		jj_node *ns = name_node(P, N_NAME);
		uint32_t pos = next(P)->pos;

		n = name_node(P, N_ATTR); /* ns.name */
		n->pos = pos;
		n->a = ns;
		return n;
	}
	parens = skip_op(P, "(");
	t = node(P, N_TUPLE, cur(P)->pos);
	do {
		if (parens && is_op(cur(P), ")"))
			break;
		add_kid(P, t, name_node(P, N_NAME));
	} while (skip_op(P, ","));
	if (parens)
		expect_op(P, ")");
	if (t->nkids == 1 && !parens)
		return t->kids[0];
	return t;
}

/* ---- statements --------------------------------------------------------------- */

static jj_node *parse_body(parser *P, const char *const *ends);

static void end_block(parser *P)
{
	expect(P, TK_BLOCK_END, "end of statement block");
}

static const char *const ENDIF[] = { "elif", "else", "endif", NULL };
static const char *const ENDIF_ONLY[] = { "endif", NULL };

static jj_node *parse_if(parser *P, uint32_t pos)
{
	jj_node *n = node(P, N_IF, pos);

	n->a = parse_tuple(P, false, false, NULL);
	end_block(P);
	n->b = parse_body(P, ENDIF);
	if (is_name(cur(P), "elif")) {
		uint32_t p2 = next(P)->pos;

		n->c = parse_if(P, p2);
		return n;
	}
	if (is_name(cur(P), "else")) {
		next(P);
		end_block(P);
		n->c = parse_body(P, ENDIF_ONLY);
	}
	next(P); /* endif */
	end_block(P);
	return n;
}

static jj_node *parse_for(parser *P, uint32_t pos)
{
	static const char *const ends[] = { "endfor", "else", NULL };
	static const char *const end_only[] = { "endfor", NULL };
	jj_node *n = node(P, N_FOR, pos);

	n->a = parse_target(P, false);
	if (!is_name(cur(P), "in"))
		unexpected(P, "'in'");
	next(P);
	n->b = parse_tuple(P, false, false, "recursive");
	if (is_name(cur(P), "if")) {
		next(P);
		n->c = parse_expr(P, true);
	}
	if (is_name(cur(P), "recursive"))
		jj_fail(P->e, cur(P)->pos, "recursive loops are not supported");
	end_block(P);
	P->loops++;
	n->d = parse_body(P, ends);
	P->loops--;
	if (is_name(cur(P), "else")) {
		next(P);
		end_block(P);
		n->e = parse_body(P, end_only);
	}
	next(P); /* endfor */
	end_block(P);
	return n;
}

static jj_node *parse_set(parser *P, uint32_t pos)
{
	static const char *const ends[] = { "endset", NULL };
	jj_node *n = node(P, N_SET, pos);

	n->a = parse_target(P, true);
	if (skip_op(P, "=")) {
		n->b = parse_tuple(P, true, false, NULL);
		end_block(P);
		return n;
	}
	if (n->a->kind != N_NAME)
		jj_fail(P->e, pos, "a block set assigns one name");
	n->kind = N_SETBLOCK;
	if (is_op(cur(P), "|"))
		n->b = parse_filter(P, NULL, false);
	end_block(P);
	n->c = parse_body(P, ends);
	next(P);
	end_block(P);
	return n;
}

static jj_node *parse_macro(parser *P, uint32_t pos)
{
	static const char *const ends[] = { "endmacro", NULL };
	jj_node *n = name_node(P, N_MACRO);
	bool defaults = false;
	int loops = P->loops;

	n->pos = pos;
	expect_op(P, "(");
	while (!is_op(cur(P), ")")) {
		jj_node *a;

		if (n->nkids > 0)
			expect_op(P, ",");
		if (is_op(cur(P), ")"))
			break;
		a = name_node(P, N_NAME);
		if (skip_op(P, "=")) {
			a->kind = N_KWARG;
			a->a = parse_expr(P, true);
			defaults = true;
		} else if (defaults) {
			jj_fail(P->e, a->pos, "non-default argument follows default argument");
		}
		add_kid(P, n, a);
	}
	next(P);
	end_block(P);
	P->loops = 0;
	n->b = parse_body(P, ends);
	P->loops = loops;
	next(P);
	end_block(P);
	return n;
}

static jj_node *parse_filter_block(parser *P, uint32_t pos)
{
	static const char *const ends[] = { "endfilter", NULL };
	jj_node *n = node(P, N_FILTERBLOCK, pos);

	n->b = parse_filter(P, NULL, true);
	end_block(P);
	n->c = parse_body(P, ends);
	next(P);
	end_block(P);
	return n;
}

/* transformers' AssistantTracker marks the assistant's tokens of a
 * {% generation %} block; the text renders as if it were not there. */
static jj_node *parse_generation(parser *P)
{
	static const char *const ends[] = { "endgeneration", NULL };
	jj_node *n;

	end_block(P);
	n = parse_body(P, ends);
	next(P);
	end_block(P);
	return n;
}

static jj_node *parse_loop_control(parser *P, jj_tok *t, int kind)
{
	if (P->loops == 0)
		jj_fail(P->e, t->pos, "'%.*s' outside a loop", (int)t->n, t->s);
	end_block(P);
	return node(P, kind, t->pos);
}

static jj_node *parse_statement(parser *P)
{
	static const char *const unsupported[] = {
		"call", "include", "import", "from", "extends", "block", "with",
		"autoescape", "do", "trans", "pluralize", "debug", NULL,
	};
	jj_tok *t = cur(P);

	if (t->t != TK_NAME)
		unexpected(P, "a statement name");
	next(P);
	if (is_name(t, "if"))
		return parse_if(P, t->pos);
	if (is_name(t, "for"))
		return parse_for(P, t->pos);
	if (is_name(t, "set"))
		return parse_set(P, t->pos);
	if (is_name(t, "macro"))
		return parse_macro(P, t->pos);
	if (is_name(t, "filter"))
		return parse_filter_block(P, t->pos);
	if (is_name(t, "generation"))
		return parse_generation(P);
	if (is_name(t, "break"))
		return parse_loop_control(P, t, N_BREAK);
	if (is_name(t, "continue"))
		return parse_loop_control(P, t, N_CONTINUE);
	for (size_t i = 0; unsupported[i] != NULL; i++)
		if (is_name(t, unsupported[i]))
			jj_fail(P->e, t->pos, "unsupported statement '%s'", unsupported[i]);
	if (t->n > 3 && memcmp(t->s, "end", 3) == 0)
		jj_fail(P->e, t->pos, "unexpected '%.*s'", (int)t->n, t->s);
	jj_fail(P->e, t->pos, "unknown statement '%.*s'",
		t->n > 40 ? 40 : (int)t->n, t->s);
}

static bool at_end(parser *P, const char *const *ends)
{
	for (size_t i = 0; ends != NULL && ends[i] != NULL; i++)
		if (is_name(cur(P), ends[i]))
			return true;
	return false;
}

/* Statements up to "{% END" with END one of ends (NULL: the end of the
 * template); leaves the parser at END. */
static jj_node *parse_body(parser *P, const char *const *ends)
{
	jj_node *body = node(P, N_BODY, cur(P)->pos);
	uint32_t start = cur(P)->pos;

	enter(P);
	for (;;) {
		jj_tok *t = cur(P);

		if (t->t == TK_EOF) {
			size_t k = 0;

			if (ends == NULL)
				break;
			while (ends[k + 1] != NULL && strncmp(ends[k], "end", 3) != 0)
				k++;
			jj_fail(P->e, start, "unexpected end of template: '%s' missing",
				ends[k]);
		}
		next(P);
		if (t->t == TK_DATA) {
			jj_node *n = node(P, N_TEXT, t->pos);

			n->lit = jv_str(t->s, t->n);
			add_kid(P, body, n);
		} else if (t->t == TK_VAR_BEGIN) {
			jj_node *n = node(P, N_OUT, t->pos);

			n->a = parse_tuple(P, true, false, NULL);
			expect(P, TK_VAR_END, "end of print statement");
			add_kid(P, body, n);
		} else if (t->t == TK_BLOCK_BEGIN) {
			if (at_end(P, ends))
				break;
			add_kid(P, body, parse_statement(P));
		} else {
			P->i--;
			unexpected(P, "template data or a tag");
		}
	}
	P->depth--;
	return body;
}

/* ---- entry points ---------------------------------------------------------------- */

/* \r\n and \r as \n; the last newline dropped. */
static size_t normalize(char *dst, const char *src, size_t len)
{
	size_t n = 0;

	for (size_t i = 0; i < len; i++) {
		if (src[i] == '\r') {
			dst[n++] = '\n';
			if (i + 1 < len && src[i + 1] == '\n')
				i++;
		} else {
			dst[n++] = src[i];
		}
	}
	if (n > 0 && dst[n - 1] == '\n')
		n--;
	dst[n] = '\0';
	return n;
}

int ds_jinja_parse(const char *src, size_t len, ds_jinja **out, ds_err *err)
{
	ds_jinja *t;
	jj_env env = { .err = err };
	parser P = { 0 };

	*out = NULL;
	if (len > JINJA_MAX_SRC)
		return ds_errf(err, "%s: template of %zu bytes (over %u)", JINJA_NAME,
			       len, JINJA_MAX_SRC);
	if (!jj_utf8_valid(src, len))
		return ds_errf(err, "%s: not UTF-8", JINJA_NAME);
	t = calloc(1, sizeof *t);
	if (t == NULL || (t->src = malloc(len + 1)) == NULL) {
		free(t);
		return ds_errf(err, "%s: out of memory", JINJA_NAME);
	}
	t->srclen = normalize(t->src, src, len);
	t->arena.limit = JINJA_MAX_MEM;
	env.src = t->src;
	env.srclen = t->srclen;
	env.arena = &t->arena;
	if (setjmp(env.jb) != 0) {
		ds_jinja_free(t);
		return -1;
	}
	P = (parser){ .e = &env, .t = jj_lex(&env, t->src, t->srclen) };
	t->root = parse_body(&P, NULL);
	*out = t;
	return 0;
}

void ds_jinja_free(ds_jinja *t)
{
	if (t == NULL)
		return;
	jj_arena_free(&t->arena);
	free(t->src);
	free(t);
}

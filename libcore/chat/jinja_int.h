/*
 * jinja_int.h - what the files of the Jinja interpreter share (jinja.h):
 * the limits, the arena, values, the syntax tree and the renderer's state.
 *
 *   jinja_lex.c     lexer: source -> tokens, whitespace control
 *   jinja_parse.c   parser: tokens -> tree (ds_jinja_parse)
 *   jinja_value.c   values: arena, strings, Python's str()/repr(), JSON
 *   jinja_eval.c    the renderer: statements, expressions, operators
 *   jinja_lib.c     methods, global functions, Python's str functions
 *   jinja_filter.c  filters and tests
 *
 * Errors unwind with longjmp to the entry point (jj_fail); everything a
 * parse or a render allocates lives in its arena, so nothing leaks.
 */
#ifndef DS_JINJA_INT_H
#define DS_JINJA_INT_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jinja.h"

/* ---- limits: a hostile template or context stops here ------------------ */

#define JINJA_MAX_SRC (4u << 20)     /* template bytes */
#define JINJA_MAX_NEST 200           /* parser: expression/statement nesting */
#define JINJA_MAX_CALLS 100          /* renderer: macro and evaluation depth */
#define JINJA_MAX_EVAL_DEPTH 1000    /* renderer: nested evaluations */
#define JINJA_MAX_ITERS 1000000      /* loop iterations and items a render makes */
#define JINJA_MAX_OUT (64u << 20)    /* bytes of output, and of one string */
#define JINJA_MAX_WORK ((uint64_t)2 << 30) /* bytes a render may copy or scan */
#define JINJA_MAX_MEM (512u << 20)   /* arena bytes of one render */
#define JINJA_MAX_RANGE 100000       /* range() items (Jinja2's sandbox) */
#define JINJA_MAX_JSON_DEPTH 64      /* nesting of the context's JSON */
#define JINJA_MAX_VALUE_DEPTH 256    /* nesting of lists and dicts a render makes */
#define JINJA_NAME "chat_template"   /* the file errors name */

/* ---- arena ---------------------------------------------------------------- */

typedef struct jj_chunk jj_chunk;
typedef struct jj_arena {
	jj_chunk *head;
	size_t used;  /* bytes taken from malloc so far */
	size_t limit; /* refuse past this */
} jj_arena;

void jj_arena_free(jj_arena *a);

/* The state an error unwinds to: the message, the jump and the source the
 * error positions refer to. */
typedef struct jj_env {
	jmp_buf jb;
	ds_err *err;
	const char *src; /* the normalized source */
	size_t srclen;
	jj_arena *arena;
	bool raised;     /* raise_exception(): the message is the template's */
	uint64_t work;   /* bytes copied or scanned so far (JINJA_MAX_WORK) */
} jj_env;

/* Unwind with "chat_template:L:C: fmt..." for source offset pos
 * (UINT32_MAX: no position). */
_Noreturn void jj_fail(jj_env *e, uint32_t pos, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Allocation in e's arena (zeroed); fails the render when over the limit. */
void *jj_alloc(jj_env *e, size_t n);
/* Unwind with msg[0..n) as the whole message (raise_exception). */
_Noreturn void jj_raise(jj_env *e, const char *msg, size_t n);
void *jj_alloc_n(jj_env *e, size_t n, size_t size);
/* Charge n bytes of string work (copies, scans); fails past
 * JINJA_MAX_WORK, so that a loop over a big string stays bounded. */
void jj_work(jj_env *e, size_t n);

/* ---- values ---------------------------------------------------------------- */

enum jv_type {
	JV_UNDEF, /* Jinja2's Undefined; s names what was missing */
	JV_NONE,
	JV_BOOL,
	JV_INT,
	JV_FLOAT,
	JV_STR,   /* UTF-8 (always valid), not NUL-terminated */
	JV_LIST,  /* flag JVF_TUPLE: a tuple */
	JV_DICT,  /* flag JVF_NS: a namespace() */
	JV_FUNC,  /* a macro, a global function or a bound method */
	JV_LOOP,  /* a for loop's `loop` */
};

enum { JVF_TUPLE = 1, JVF_NS = 2 };

typedef struct jj_list jj_list;
typedef struct jj_dict jj_dict;
typedef struct jj_func jj_func;
typedef struct jj_loop jj_loop;
typedef struct jj_frame jj_frame;

typedef struct jv {
	uint8_t t;     /* enum jv_type */
	uint8_t flags; /* JVF_* */
	union {
		bool b;
		int64_t i;
		double f;
		struct {
			const char *p;
			size_t n;
		} s;           /* JV_STR; JV_UNDEF: the hint */
		jj_list *l;
		jj_dict *d;
		jj_func *fn;
		jj_loop *loop;
	} u;
} jv;

/* depth: how deep the values inside nest (bounded, so that printing and
 * comparing recurse a bounded depth); has_ns: a namespace is inside (a
 * namespace may not hold one: no value contains itself). */
struct jj_list {
	size_t n, cap;
	jv *v;
	uint32_t depth;
	bool has_ns;
};

struct jj_dict {
	size_t n, cap;
	jv *k, *v;
	uint32_t depth;
	bool has_ns;
};

static inline jv jv_undef(const char *hint)
{
	return (jv){ .t = JV_UNDEF, .u.s = { hint, 0 } };
}
static inline jv jv_none(void) { return (jv){ .t = JV_NONE }; }
static inline jv jv_bool(bool b) { return (jv){ .t = JV_BOOL, .u.b = b }; }
static inline jv jv_int(int64_t i) { return (jv){ .t = JV_INT, .u.i = i }; }
static inline jv jv_float(double f) { return (jv){ .t = JV_FLOAT, .u.f = f }; }
static inline jv jv_str(const char *p, size_t n)
{
	return (jv){ .t = JV_STR, .u.s = { p, n } };
}
static inline jv jv_cstr(const char *p);

/* A growable string in the arena. */
typedef struct jj_buf {
	char *p;
	size_t n, cap;
	size_t max; /* refuse to grow past this */
} jj_buf;

void jj_buf_add(jj_env *e, jj_buf *b, const char *s, size_t n);
static inline void jj_buf_adds(jj_env *e, jj_buf *b, const char *s);
void jj_buf_addc(jj_env *e, jj_buf *b, char c);
void jj_buf_addf(jj_env *e, jj_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The text so far as a string (an empty one points at "": a string's
 * pointer is never NULL, so offsets from it are defined). */
static inline jv jj_buf_jv(const jj_buf *b)
{
	return jv_str(b->p != NULL ? b->p : "", b->n);
}

jv jv_list_new(jj_env *e, size_t cap);
void jv_list_push(jj_env *e, jv list, jv item);
jv jv_dict_new(jj_env *e, size_t cap);
/* Insert or replace key. */
void jv_dict_set(jj_env *e, jv dict, jv key, jv val);
/* The value of key, or NULL. */
jv *jv_dict_get(jv dict, jv key);
jv *jv_dict_gets(jv dict, const char *key, size_t n);

jv jv_strdup(jj_env *e, const char *p, size_t n);

/* Python semantics */
bool jv_truthy(jv v);
uint32_t jv_depth(jv v);        /* 0 for scalars */
bool jv_has_ns(jv v);           /* a namespace, or one inside */
bool jv_eq(jv a, jv b);
const char *jv_type_name(jv v); /* Python's: 'str', 'int', 'NoneType' */
bool jv_is_number(jv v);        /* int, float or bool */
double jv_num(jv v);            /* int, float or bool as a double */

/* str(v) and repr(v) appended to b (Jinja2's printing of values). */
void jv_str_to(jj_env *e, jj_buf *b, jv v, uint32_t pos);
void jv_repr_to(jj_env *e, jj_buf *b, jv v, uint32_t pos);
/* str(v) as a string value (no copy when v is a string). */
jv jv_to_str(jj_env *e, jv v, uint32_t pos);
/* Python's repr of a float ("1.0", "1e+16", "0.30000000000000004"). */
void jj_float_repr(char *out, size_t cap, double f);

/* json.dumps(v, ensure_ascii=False, indent, separators, sort_keys). */
typedef struct jj_json_fmt {
	const char *indent; /* NULL: one line */
	size_t indent_n;
	const char *item_sep, *key_sep;
	bool sort_keys;
} jj_json_fmt;
void jv_json_to(jj_env *e, jj_buf *b, jv v, const jj_json_fmt *f, int depth,
		uint32_t pos);

/* The context's JSON as values. */
jv jv_from_json(jj_env *e, const json_t *j, int depth);

/* ---- UTF-8 and Python's str methods' notions --------------------------- */

/* The code point at s[*i] (valid UTF-8 assumed), *i moved past it. */
uint32_t jj_utf8_next(const char *s, size_t n, size_t *i);
size_t jj_utf8_put(char *out, uint32_t c); /* 1..4 bytes */
size_t jj_utf8_len(const char *s, size_t n); /* code points */
/* Byte offset of code point k (k <= length). */
size_t jj_utf8_off(const char *s, size_t n, size_t k);
bool jj_utf8_valid(const char *s, size_t n);
/* Python's str.isspace() of one code point. */
bool jj_isspace(uint32_t c);
/* Bytes of whitespace (Python's) starting at s[0], 0 if none. */
size_t jj_space_at(const char *s, size_t n);
/* Bytes of whitespace ending at s[n-1]. */
size_t jj_space_before(const char *s, size_t n);

/* ---- tokens (jinja_lex.c) ------------------------------------------------ */

enum jj_tok_type {
	TK_EOF,
	TK_DATA,        /* text between tags; s */
	TK_VAR_BEGIN,
	TK_VAR_END,
	TK_BLOCK_BEGIN,
	TK_BLOCK_END,
	TK_NAME,        /* s */
	TK_STRING,      /* s: the value, escapes done */
	TK_INT,
	TK_FLOAT,
	TK_OP,          /* op: an index in jj_ops */
};

#define JJ_NOPS 26
extern const char *const jj_ops[JJ_NOPS];

typedef struct jj_tok {
	uint8_t t;       /* enum jj_tok_type */
	uint8_t op;      /* TK_OP: index in jj_ops */
	uint32_t pos;    /* source offset */
	const char *s;
	size_t n;
	int64_t i;
	double f;
} jj_tok;

/* The tokens of src[0..n) (normalized), ending with TK_EOF. */
jj_tok *jj_lex(jj_env *e, const char *src, size_t n);

/* ---- syntax tree ----------------------------------------------------------- */

enum jj_kind {
	/* expressions */
	N_LIT,      /* lit */
	N_NAME,     /* name */
	N_LIST,     /* kids */
	N_TUPLE,    /* kids */
	N_DICT,     /* kids: key, value, key, value, ... */
	N_ATTR,     /* a.name */
	N_ITEM,     /* a[b] */
	N_SLICE,    /* a[b:c:d], b c d may be NULL */
	N_CALL,     /* a(kids) */
	N_FILTER,   /* a | name(kids) (a NULL: a filter block's) */
	N_TEST,     /* a is [not] name(kids); op 1: not */
	N_KWARG,    /* name=a, in a call's kids */
	N_UNARY,    /* op a */
	N_BIN,      /* a op b */
	N_AND,
	N_OR,
	N_NOT,
	N_CMP,      /* a, then kids: N_CMPOP (op, a) each */
	N_CMPOP,
	N_COND,     /* b if a else c (c NULL: undefined) */
	/* statements */
	N_BODY,     /* kids */
	N_TEXT,     /* lit: the text */
	N_OUT,      /* {{ a }} */
	N_IF,       /* if a: b (a body) else c (a body or N_IF) */
	N_FOR,      /* for a (target) in b [if c]: d (body) else e */
	N_SET,      /* set a (target) = b */
	N_SETBLOCK, /* set a (target) [| b (N_FILTER chain, a NULL)]: c */
	N_FILTERBLOCK, /* filter b (N_FILTER chain): c */
	N_MACRO,    /* macro name(kids: N_NAME or N_KWARG with default): b */
	N_BREAK,
	N_CONTINUE,
};

enum jj_op {
	OP_NONE,
	OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
	OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN,
	OP_NEG, OP_POS,
};

typedef struct jj_node jj_node;
struct jj_node {
	uint8_t kind;   /* enum jj_kind */
	uint8_t op;     /* enum jj_op; N_TEST: negated */
	uint16_t id;    /* N_FILTER, N_TEST: the builtin's index */
	uint32_t pos;   /* source offset (errors) */
	jj_node *a, *b, *c, *d, *e;
	jj_node **kids;
	size_t nkids;
	jv lit;         /* N_LIT, N_TEXT */
	const char *name;
	size_t name_n;
};

/* The filters and tests by name: their index, or -1. */
int jj_filter_id(const char *name, size_t n);
int jj_test_id(const char *name, size_t n);
/* Jinja2 builtins this interpreter does not have (a better message). */
bool jj_jinja2_filter(const char *name, size_t n);
bool jj_jinja2_test(const char *name, size_t n);

struct ds_jinja {
	char *src;       /* normalized: \r\n and \r as \n, final \n dropped */
	size_t srclen;
	jj_arena arena;
	jj_node *root;   /* N_BODY */
};

/* ---- the renderer ------------------------------------------------------ */

struct jj_frame {
	jj_frame *parent;
	jv vars;         /* JV_DICT */
};

enum jj_fkind {
	F_MACRO,   /* node, closure */
	F_GLOBAL,  /* id: a global function */
	F_METHOD,  /* id: a method of self */
	F_CYCLE,   /* loop.cycle of loop */
	F_UNSUPPORTED, /* a Jinja2 global this interpreter lacks (name) */
};

struct jj_func {
	uint8_t kind;           /* enum jj_fkind */
	uint16_t id;            /* F_GLOBAL, F_METHOD: which */
	const char *name;       /* NUL-terminated (errors) */
	jv self;                /* F_METHOD: the object; F_CYCLE: the loop */
	const jj_node *node;    /* F_MACRO: its N_MACRO */
	jj_frame *closure;      /* F_MACRO: the scope it was defined in */
};

struct jj_loop {
	jv items;        /* JV_LIST */
	size_t index0;
};

typedef struct jj_rt {
	jj_env env;
	const ds_jinja *t;
	jj_frame *globals;
	jj_buf *out;     /* where text goes (a block set redirects it) */
	size_t iters;
	int depth;       /* evaluation depth */
	int calls;       /* macro calls in progress */
	struct tm now;
	int brk;         /* 1: break, 2: continue pending */
	jj_frame *frame; /* the innermost scope */
} jj_rt;

/* jinja_eval.c */
jv jj_eval(jj_rt *rt, const jj_node *n);
jv jj_call_value(jj_rt *rt, jv f, jv *args, size_t nargs, const char **kwn,
		 const size_t *kwlen, jv *kwv, size_t nkw, uint32_t pos);
jv jj_getattr(jj_rt *rt, jv obj, const char *name, size_t n, uint32_t pos);
jv jj_getitem(jj_rt *rt, jv obj, jv key, uint32_t pos);
/* The items a for loop or a filter iterates (a list value); errors for
 * what Python cannot iterate. */
jv jj_iterate(jj_rt *rt, jv v, uint32_t pos);
void jj_count_iter(jj_rt *rt, size_t n, uint32_t pos);
int jj_compare(jj_rt *rt, jv a, jv b, uint32_t pos); /* <0, 0, >0 */
bool jj_contains(jj_rt *rt, jv container, jv item, uint32_t pos);

/* jinja_lib.c, jinja_filter.c: the arguments of a call, evaluated. */
typedef struct jj_args {
	jv *pos;
	size_t npos;
	const char **kwn;
	size_t *kwlen;
	jv *kwv;
	size_t nkw;
	uint32_t at;   /* source offset of the call */
	const char *what; /* the filter/test/method name (errors) */
} jj_args;

/* jinja_lib.c's helpers for jinja_filter.c: bind a call's arguments to
 * parameter names (out[i] JV_UNDEF if not given; the mask of those
 * given), type checks, buffers (bounded at JINJA_MAX_OUT), and Python's
 * str functions: ICU case mapping (upper 1: upper(), 0: lower()),
 * capitalize(), Jinja2's title filter, strip(chars) (chars not a string:
 * whitespace), replace (count < 0: all), splitlines, join (strict: str
 * items only), dict.items() as tuples. */
unsigned jj_bind(jj_rt *rt, jj_args *a, const char *const *params, jv *out);
void jj_no_args(jj_rt *rt, jj_args *a);
jv jj_want_str(jj_rt *rt, jv v, jj_args *a, const char *what);
int64_t jj_want_int(jj_rt *rt, jv v, jj_args *a, const char *what);
jv jj_str_of(jj_rt *rt, jv v, jj_args *a);
jj_buf jj_newbuf(void);
jv jj_buf_val(jj_buf *b);
jv jj_case_full(jj_rt *rt, jv s, int upper);
jv jj_str_capitalize(jj_rt *rt, jv s);
jv jj_filter_title_str(jj_rt *rt, jv s);
jv jj_strip(jv s, jv chars, bool left, bool right);
jv jj_replace(jj_rt *rt, jv s, jv old, jv new, int64_t count);
jv jj_splitlines(jj_rt *rt, jv s, bool keepends, uint32_t at);
jv jj_join_items(jj_rt *rt, jv sep, jv items, jj_args *a, bool strict);
jv jj_items_of(jj_rt *rt, jv d);

jv jj_apply_filter(jj_rt *rt, int id, jv v, jj_args *a);
bool jj_apply_test(jj_rt *rt, int id, jv v, jj_args *a);
jv jj_call_method(jj_rt *rt, jv self, int id, jj_args *a);
jv jj_call_global(jj_rt *rt, int id, jj_args *a);
/* The method id of name on self's type, or -1. */
int jj_method_id(jv self, const char *name, size_t n);
/* A global function's id, or -1; unsupported Jinja2 globals: -2. */
int jj_global_id(const char *name, size_t n);

static inline jv jv_cstr(const char *p)
{
	size_t n = 0;

	while (p[n] != '\0')
		n++;
	return jv_str(p, n);
}

static inline void jj_buf_adds(jj_env *e, jj_buf *b, const char *s)
{
	jv v = jv_cstr(s);

	jj_buf_add(e, b, v.u.s.p, v.u.s.n);
}

#endif

/*
 * grammar.h - constrained decoding: a grammar format (GBNF-like, see
 * docs/grammar.md), a JSON-schema compiler to it, a pushdown matcher over
 * bytes and the token mask a sampler applies at each step.
 *
 *	ds_grammar   compiled, immutable; share it between threads
 *	ds_gvocab    a tokenizer's tokens as a byte trie, built once, read-only
 *	ds_gmatch    one request's matcher: state, history, caches (one thread)
 *
 * Sizes taken from the outside (grammar text, schema, vocabulary) are
 * bounded by the DS_GRAMMAR_* and DS_GMATCH_* limits below; anything past
 * them is an error, not a crash or an unbounded allocation.
 */
#ifndef DS_GRAMMAR_H
#define DS_GRAMMAR_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

/* ---- limits ------------------------------------------------------------ */

#define DS_GRAMMAR_MAX_TEXT    ((size_t)16 << 20) /* bytes of grammar text */
#define DS_GRAMMAR_MAX_RULES   (1u << 18)         /* rules, generated included */
#define DS_GRAMMAR_MAX_ELEMS   (1u << 21)         /* lowered elements */
#define DS_GRAMMAR_MAX_REPEAT  10000u             /* m and n of {m,n} */
#define DS_GRAMMAR_MAX_NEST    200u               /* nested parentheses */
#define DS_SCHEMA_MAX_DEPTH    64u                /* nested subschemas */
/* Parallel parses (stacks) a matcher follows at once: an ambiguous grammar
 * that needs more fails with an error instead of slowing down without end. */
#define DS_GMATCH_MAX_STACKS   1024u
/* Work one call (an accept or a mask) may do: parse positions visited
 * while computing new states.  A grammar that needs more (too ambiguous
 * for the text at hand) fails the call with an error, not a stall. */
#define DS_GMATCH_MAX_WORK     (1u << 20)
/* Steps (tokens or byte strings accepted) ds_gmatch_rollback can undo. */
#define DS_GMATCH_HISTORY      256u
#define DS_GVOCAB_MAX_TOKENS   (1u << 24)
#define DS_GVOCAB_MAX_TOKEN_LEN 65535u

/* ---- grammars ---------------------------------------------------------- */

typedef struct ds_grammar ds_grammar;

/* Parse grammar text (docs/grammar.md); the start rule is `root`.  An
 * error names line:col and the problem. */
int ds_grammar_parse(const char *text, size_t len, ds_grammar **g,
		     ds_err *err);
/* A grammar for the JSON values valid under a JSON schema (the subset in
 * docs/grammar.md).  `path` names the schema in errors ("schema" when
 * NULL): "PATH.properties.x: unsupported keyword 'not'". */
int ds_grammar_from_schema(const json_t *schema, const char *path,
			   ds_grammar **g, ds_err *err);
/* Any JSON object (response_format {"type": "json_object"}). */
int ds_grammar_json_object(ds_grammar **g, ds_err *err);
/* The grammar text a schema compiles to (malloc'd, NUL-terminated). */
int ds_grammar_schema_text(const json_t *schema, const char *path,
			   char **text, size_t *len, ds_err *err);
/* A grammar from file path: grammar text, or with schema set a JSON
 * schema.  Errors start with the path ("FILE: 3:7: ..." or "FILE:
 * schema.properties.x: ..."). */
int ds_grammar_load(const char *path, int schema, ds_grammar **g, ds_err *err);
void ds_grammar_free(ds_grammar *g);

/* Counts for diagnostics: rules (named and generated), lowered elements,
 * byte classes. */
typedef struct ds_grammar_info {
	uint32_t rules, elems, byte_sets, byte_classes;
} ds_grammar_info;
void ds_grammar_get_info(const ds_grammar *g, ds_grammar_info *info);

/* ---- building a grammar from parts ------------------------------------ */

/* Rules from schemas, literals and grammar text, combined by name: e.g. a
 * tool call is a literal marker, then one of several objects
 *	{"name": "get_weather", "arguments": <that tool's schema>}.
 * Rules a schema generates are named NAME-...; the shared JSON rules j-...
 * are added once. */
typedef struct ds_gbuilder ds_gbuilder;

int ds_gbuilder_new(ds_gbuilder **b, ds_err *err);
void ds_gbuilder_free(ds_gbuilder *b);
/* name ::= a JSON value valid under schema, then the bounded whitespace. */
int ds_gbuilder_schema(ds_gbuilder *b, const char *name, const json_t *schema,
		       const char *path, ds_err *err);
/* name ::= exactly these bytes (valid UTF-8). */
int ds_gbuilder_literal(ds_gbuilder *b, const char *name, const char *s,
			size_t len, ds_err *err);
/* name ::= body, alternatives in the grammar format; body may name any
 * rule of the builder, defined before or after. */
int ds_gbuilder_rule(ds_gbuilder *b, const char *name, const char *body,
		     ds_err *err);
/* The text so far (owned by b). */
const char *ds_gbuilder_text(const ds_gbuilder *b, size_t *len);
/* Compile with `root` as the start rule (b stays usable). */
int ds_gbuilder_finish(const ds_gbuilder *b, const char *root,
		       ds_grammar **g, ds_err *err);

/* ---- vocabularies -------------------------------------------------------- */

typedef struct ds_gvocab ds_gvocab;

/* n tokens: bytes[i] (lens[i] bytes) is what token i decodes to.  A token
 * with is_special[i] set (is_special may be NULL) or no bytes never
 * matches; eos (-1: none) is allowed exactly when the grammar is complete. */
int ds_gvocab_build(size_t n, const uint8_t *const *bytes,
		    const uint32_t *lens, const uint8_t *is_special,
		    int32_t eos, ds_gvocab **v, ds_err *err);
void ds_gvocab_free(ds_gvocab *v);
size_t ds_gvocab_size(const ds_gvocab *v);
/* uint64_t words of a mask: (size + 63) / 64. */
size_t ds_gvocab_mask_words(const ds_gvocab *v);
/* The bytes of token id (NULL when out of range). */
const uint8_t *ds_gvocab_token(const ds_gvocab *v, int32_t id, uint32_t *len);

/* ---- matching ------------------------------------------------------------ */

typedef struct ds_gmatch ds_gmatch;

enum { DS_GMATCH_OK = 0, DS_GMATCH_REJECT = 1 };

int ds_gmatch_new(const ds_grammar *g, ds_gmatch **m, ds_err *err);
void ds_gmatch_free(ds_gmatch *m);
/* An independent copy (state, history and caches). */
int ds_gmatch_clone(const ds_gmatch *m, ds_gmatch **out, ds_err *err);
/* Back to the start, history and caches kept. */
void ds_gmatch_reset(ds_gmatch *m);

/* Advance by bytes or by one token: DS_GMATCH_OK, DS_GMATCH_REJECT (the
 * state is unchanged) or -1 with err set (a limit; the state is
 * unchanged).  Each accepted call is one step of history.  The eos token
 * is accepted when the grammar is complete and ends the match. */
int ds_gmatch_accept_bytes(ds_gmatch *m, const void *bytes, size_t len,
			   ds_err *err);
int ds_gmatch_accept_token(ds_gmatch *m, const ds_gvocab *v, int32_t id,
			   ds_err *err);
/* bits (ds_gvocab_mask_words(v) words): bit i set when token i may come
 * next.  0, or -1 with err set. */
int ds_gmatch_mask(ds_gmatch *m, const ds_gvocab *v, uint64_t *bits,
		   ds_err *err);
/* The text so far is a whole sentence of the grammar: output may stop. */
int ds_gmatch_complete(const ds_gmatch *m);
/* Some byte may still follow. */
int ds_gmatch_can_continue(const ds_gmatch *m);
/* The eos token was accepted. */
int ds_gmatch_finished(const ds_gmatch *m);

/* Steps that can be undone now (at most DS_GMATCH_HISTORY). */
size_t ds_gmatch_history(const ds_gmatch *m);
/* Undo the last n steps: 0, or -1 when fewer are kept. */
int ds_gmatch_rollback(ds_gmatch *m, size_t n);
/* Masks kept per matcher, by state (0 turns the cache off). */
void ds_gmatch_mask_cache(ds_gmatch *m, unsigned slots);

/* ---- measuring -------------------------------------------------------------- */

/* Per-step mask cost along a document: doc is cut into tokens (longest
 * token first), and at each step a fresh matcher computes the mask,
 * checks the document's token is in it and accepts it. */
typedef struct ds_gbench {
	size_t steps;
	double mean_us, p50_us, p99_us, max_us; /* mask, cache on */
	double nocache_mean_us, nocache_max_us; /* mask, cache off */
	double accept_mean_us;
	double allowed_mean;                    /* tokens allowed per step */
} ds_gbench;

/* step_us/step_off (may be NULL; room for len + 1 entries): each step's
 * mask time (cache on) and the document offset it was taken at. */
int ds_grammar_bench(const ds_grammar *g, const ds_gvocab *v,
		     const char *doc, size_t len, ds_gbench *r,
		     double *step_us, size_t *step_off, ds_err *err);

#endif

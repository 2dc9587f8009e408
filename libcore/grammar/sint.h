/*
 * sint.h - between the schema compiler (schema.c) and the JSON pieces it
 * writes (sjson.c).
 */
#ifndef DS_SINT_H
#define DS_SINT_H

#include "gint.h"

/* The shared rules, written once per builder (a bit each in *prims). */
enum {
	SP_WS, SP_CHAR, SP_HEX4, SP_XCHAR, SP_STRING, SP_INT, SP_INTEGER,
	SP_NUMBER, SP_BOOLEAN, SP_NULL, SP_VALUE, SP_OBJECT, SP_MEMBER,
	SP_ARRAY, SP_DATE, SP_TIME, SP_DATETIME, SP_COUNT
};

/* The rule's name; its definition (and its dependencies') appended to out
 * the first time. */
const char *sjson_prim(gbuf *out, unsigned *prims, unsigned p);
const char *sjson_prim_name(unsigned p);

/* A whole-number bound: v, exclusive or not; set 0 when absent. */
typedef struct sbound {
	int set, excl;
	int64_t v;
} sbound;

/* Magnitude allowed for a bound: 2^53 - 1.  Past it JSON numbers read as
 * doubles (as validators do) no longer tell neighbouring integers apart,
 * while the grammar compares the decimal text exactly. */
#define SJSON_MAX_BOUND 9007199254740991ll

int sjson_string_text(gbuf *b, const char *s, size_t n);
int sjson_number_text(gbuf *b, double d);
void sjson_uint_range(gbuf *b, uint64_t lo, uint64_t hi);
int sjson_num_range(gbuf *b, const sbound *lo, const sbound *hi, int integer);

#endif

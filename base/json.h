/*
 * json.h - the one way ds writes JSON: jansson values, dumped with the
 * same flags everywhere (", " and ": " separators, keys in insertion
 * order, reals to 6 significant digits), and text from a model made
 * valid UTF-8 first (jansson refuses anything else).
 */
#ifndef DS_JSON_H
#define DS_JSON_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

#define DS_JSON_FLAGS JSON_REAL_PRECISION(6)

/* s[0..n) with every ill-formed sequence replaced by U+FFFD, one per
 * maximal subpart (the Unicode standard's recommended practice, as
 * WHATWG's decoder does); malloc'd and NUL-terminated, its length in
 * *out_len (may be NULL).  NULL when out of memory. */
char *ds_utf8_repair(const char *s, size_t n, size_t *out_len);
/* A JSON string of s[0..n) so repaired (NULL when out of memory). */
json_t *ds_json_text(const char *s, size_t n);
/* j and a newline on f, flushed; -1 on a write error. */
int ds_json_line(FILE *f, const json_t *j);
/* j without a newline (the framing of an array is the caller's). */
int ds_json_put(FILE *f, const json_t *j);

#endif

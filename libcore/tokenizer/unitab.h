/* unitab.h - Unicode 16.0 general categories (generated table unitab.c). */
#ifndef DS_UNITAB_H
#define DS_UNITAB_H

#include <stdint.h>

#define DS_UNI_NCAT 30

extern const char *const ds_uni_version;
/* category index -> two-letter name; index 0 is Cn (unassigned) */
extern const char ds_uni_cat_names[DS_UNI_NCAT][3];
extern const uint32_t ds_uni_nruns;
/* (first code point << 8 | category index), ascending; a run lasts to the
 * next one (the last to U+10FFFF) */
extern const uint32_t ds_uni_runs[];

/* \w (Oniguruma: Alphabetic | M | Nd | Pc | Join_Control) beyond the
 * categories L, M, Nd, Nl and Pc: inclusive ranges */
extern const uint32_t ds_uni_nword_extra;
extern const uint32_t ds_uni_word_extra[][2];

/* Where the Unicode version of Debian 12's PCRE2 tables (base) differs:
 * { first, last, category there, category here } */
extern const char *const ds_uni_base_version;
extern const uint32_t ds_uni_ndiff;
extern const uint32_t ds_uni_diff[][4];

int ds_uni_cat(uint32_t cp); /* pretok.c */

#endif

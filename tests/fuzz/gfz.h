/*
 * gfz.h - what the grammar fuzz targets share: a small vocabulary (every
 * byte, some longer pieces, eos) and a check of a mask against accepting
 * each token.
 */
#ifndef DS_GFZ_H
#define DS_GFZ_H

#include "fuzz.h"
#include "grammar/grammar.h"

#define GFZ_N 290

typedef struct gfz_vocab {
	uint8_t bytes[GFZ_N][8];
	uint32_t lens[GFZ_N];
	int32_t eos;
	ds_gvocab *v;
} gfz_vocab;

/* Built once per process, read-only after. */
static inline const gfz_vocab *gfz_vocab_get(void)
{
	static const char *const pieces[] = { "\": ", "\",\"", "true", "null",
		"{\"", "\"}", "12", "-3.5", "e+2", "\xe4\xb8\xad", "\xe4\xb8",
		"\xad", "\xf0\x9f\x98\x80", "\\n", "\\u00", "ab", "abc", "  ",
		"\n ", "[]", "},", "0x", "a\"", NULL };
	static gfz_vocab gv;
	const uint8_t *p[GFZ_N];
	size_t i, n = 0;

	if (gv.v != NULL)
		return &gv;
	for (i = 0; i < 256; i++) {
		gv.bytes[n][0] = (uint8_t)i;
		gv.lens[n++] = 1;
	}
	for (i = 0; pieces[i] && n < GFZ_N - 1; i++) {
		gv.lens[n] = (uint32_t)strlen(pieces[i]);
		memcpy(gv.bytes[n], pieces[i], gv.lens[n]);
		n++;
	}
	gv.eos = (int32_t)n;
	gv.lens[n++] = 0;
	for (i = 0; i < n; i++)
		p[i] = gv.bytes[i];
	FZ_CHECK(ds_gvocab_build(n, p, gv.lens, NULL, gv.eos, &gv.v, NULL) == 0);
	return &gv;
}

static inline int gfz_bit(const uint64_t *bits, size_t i)
{
	return (int)(bits[i / 64] >> (i % 64) & 1);
}

/* The mask of m equals accepting each token (and rolling back). */
static inline void gfz_check_mask(ds_gmatch *m, const gfz_vocab *gv,
				  const uint64_t *bits)
{
	size_t i, n = ds_gvocab_size(gv->v);
	ds_err err;

	for (i = 0; i < n; i++) {
		int r = ds_gmatch_accept_token(m, gv->v, (int32_t)i, &err);

		if (r == -1)
			continue; /* a limit: the mask walk stops there too */
		FZ_CHECK((r == DS_GMATCH_OK) == gfz_bit(bits, i));
		if (r == DS_GMATCH_OK)
			FZ_CHECK(ds_gmatch_rollback(m, 1) == 0);
	}
}

/* Pick the k-th allowed token (eos last); -1 when none. */
static inline int32_t gfz_pick(const gfz_vocab *gv, const uint64_t *bits,
			       unsigned k)
{
	size_t i, n = ds_gvocab_size(gv->v), cnt = 0;

	for (i = 0; i < n; i++)
		cnt += (size_t)gfz_bit(bits, i);
	if (cnt == 0)
		return -1;
	k %= (unsigned)cnt;
	for (i = 0; i < n; i++)
		if (gfz_bit(bits, i) && k-- == 0)
			return (int32_t)i;
	return -1;
}

#endif

/*
 * ngram.c - prompt-lookup drafts (drafter.h): the sequence's last n
 * tokens, n from NGRAM_MAX down to NGRAM_MIN, found at their latest
 * earlier occurrence in the sequence (prompt and output alike), and the
 * tokens that followed there proposed.  Text that repeats itself (a long
 * reasoning that restates, code, an answer that quotes its prompt) is
 * drafted for free: nothing is computed but comparisons.
 *
 * Where the continuation runs into the tokens just matched (a loop of a
 * short period) it goes on over the drafts themselves, so that a loop is
 * drafted k tokens ahead.
 */
#include <stdlib.h>

#include "drafter.h"

#define NGRAM_MAX 4
#define NGRAM_MIN 2

typedef struct ngram {
	ds_drafter base;
} ngram;

/* Position x of the sequence followed by its drafts. */
static int32_t at(const ds_spec_seq *q, size_t x)
{
	return x < q->n_tok ? q->tok[x] : q->draft[x - q->n_tok];
}

/* The latest i < n_tok - n with tok[i .. i + n) equal to the last n
 * tokens; SIZE_MAX if none. */
static size_t find(const ds_spec_seq *q, size_t n)
{
	const int32_t *t = q->tok, *suf = t + q->n_tok - n;
	size_t i, j;

	for (i = q->n_tok - n; i-- > 0;) {
		for (j = 0; j < n && t[i + j] == suf[j]; j++)
			;
		if (j == n)
			return i;
	}
	return SIZE_MAX;
}

static void draft_one(ds_spec_seq *q)
{
	size_t n, i;

	q->n_draft = 0;
	for (n = NGRAM_MAX; n >= NGRAM_MIN && q->k > 0; n--) {
		if (q->n_tok < n + 1 || (i = find(q, n)) == SIZE_MAX)
			continue;
		for (i += n; q->n_draft < q->k; i++)
			q->draft[q->n_draft++] = at(q, i);
		return;
	}
}

static int ngram_propose(ds_drafter *d, const ds_fwd *target,
			 ds_spec_seq *const *seqs, size_t n, ds_err *err)
{
	size_t i;

	(void)d;
	(void)target;
	(void)err;
	for (i = 0; i < n; i++)
		draft_one(seqs[i]);
	return 0;
}

static void ngram_release(ds_drafter *d, uint32_t slot)
{
	(void)d;
	(void)slot;
}

static void ngram_free(ds_drafter *d)
{
	free(d);
}

int ds_ngram_open(ds_drafter **out, ds_err *err)
{
	ngram *g = ds_calloc(1, sizeof *g, err);

	*out = NULL;
	if (g == NULL)
		return -1;
	g->base = (ds_drafter){ .name = "ngram", .propose = ngram_propose,
				.release = ngram_release, .free = ngram_free };
	*out = &g->base;
	return 0;
}

/* ---- shared by the drafters ------------------------------------------------------------ */

static int32_t nth_recent(const int32_t *tok, size_t n_tok, const int32_t *extra,
			  size_t n_extra, size_t back)
{
	/* back 0: the last token */
	return back < n_extra ? extra[n_extra - 1 - back] : tok[n_tok - 1 - (back - n_extra)];
}

void ds_spec_penalize(float *logits, uint32_t n_vocab, const ds_sampler_params *sp,
		      const int32_t *tok, size_t n_tok, const int32_t *extra,
		      size_t n_extra)
{
	size_t n = n_tok + n_extra, i, j;
	float r = sp->repeat_penalty;

	if (r == 1.0f || sp->repeat_last_n <= 0)
		return;
	if (n > (size_t)sp->repeat_last_n)
		n = (size_t)sp->repeat_last_n;
	for (i = 0; i < n; i++) {
		int32_t t = nth_recent(tok, n_tok, extra, n_extra, i);

		for (j = 0; j < i && nth_recent(tok, n_tok, extra, n_extra, j) != t; j++)
			;
		if (j < i || t < 0 || (uint32_t)t >= n_vocab)
			continue;
		logits[t] = logits[t] > 0 ? logits[t] / r : logits[t] * r;
	}
}

/*
 * perplexity.h - a model's perplexity on a token sequence, windowed as
 * llama.cpp's llama-perplexity does it: non-overlapping windows of n_ctx
 * tokens, each read from position 0 in slot 0 of the cache; in each, the
 * logits at positions n_ctx/2 .. n_ctx-2 score the token that follows.
 * The result is exp of the mean negative log-likelihood of those tokens.
 */
#ifndef DS_PERPLEXITY_H
#define DS_PERPLEXITY_H

#include <stddef.h>
#include <stdint.h>

#include "base/util.h"
#include "model/forward.h"
#include "model/kvcache.h"

typedef struct ds_ppl {
	double ppl;            /* exp(mean NLL) */
	double nll;            /* the summed negative log-likelihood */
	size_t count;          /* tokens scored */
	size_t windows;
} ds_ppl;

/* n_ctx <= the cache's; at least one window of tokens (an error says so
 * otherwise). */
int ds_perplexity(ds_fwd *f, ds_kvcache *kv, const int32_t *ids, size_t n,
		  size_t n_ctx, ds_ppl *out, ds_err *err);

#endif

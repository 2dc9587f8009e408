/*
 * ref.h - the reference forward pass (ref.c): the logits of a whole token
 * sequence, computed the plainest way there is.  One file to read first:
 * llama, qwen2 and DeepSeek-V2/V3 as the equations write them, f32
 * activations, one thread, no cache.  The fast passes (forward.h) are
 * tested against it (tests/unit/test_ref.c, docs/reference.md).
 *
 *	ds_model m;    ds_model_load(&m, dir, 0, &err);
 *	float *lg = malloc(n * m.hp.n_vocab * sizeof *lg);
 *	ds_ref_forward(&m, tokens, n, lg, &err);   // row p: after tokens[0..p]
 */
#ifndef DS_REF_H
#define DS_REF_H

#include <stddef.h>
#include <stdint.h>

#include "format/modelfile.h"
#include "base/util.h"

/* logits [n][n_vocab]: row p is what the model predicts after tokens[0]
 * .. tokens[p], at positions 0 .. p.  -1 with a message for a token id
 * outside the vocabulary, n = 0, a tensor missing, or no memory. */
int ds_ref_forward(const ds_model *m, const int32_t *tokens, size_t n,
		   float *logits, ds_err *err);

/* The multi-token-prediction module's logits (docs/deepseek.md section
 * 10; m loaded with DS_LOAD_MTP): row p, for p = 0 .. n - 2, is what it
 * predicts for tokens[p + 2] from the main model's hidden state at p
 * (through the output norm) and the embedding of tokens[p + 1]:
 *	x = eh_proj [RMSNorm(embd(tokens[p+1]); enorm) ; RMSNorm(h_p; hnorm)]
 * through its decoder layer over positions 0 .. n - 2, then
 * RMSNorm(x; head_norm) through its head.  logits [n - 1][n_vocab]. */
int ds_ref_mtp(const ds_model *m, const int32_t *tokens, size_t n,
	       float *logits, ds_err *err);

#endif

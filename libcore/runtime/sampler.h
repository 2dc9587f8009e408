/*
 * sampler.h - choosing the next token from logits.
 *
 * The chain, in llama.cpp's order: repetition penalty over the last
 * repeat_last_n tokens, top-k, top-p, min-p (all three on the softmax at
 * temperature 1), then temperature, then a draw from the seeded generator.
 * temp == 0 is greedy (argmax; the lowest id wins ties) and ignores the rest
 * except the penalty.  A sampler belongs to one sequence: the same seed and
 * the same logits give the same tokens, however many threads computed them.
 */
#ifndef DS_SAMPLER_H
#define DS_SAMPLER_H

#include <stdint.h>

#include "base/util.h"

typedef struct ds_sampler_params {
	float temp;           /* 0: greedy */
	int top_k;            /* 0: off */
	float top_p;          /* 1: off */
	float min_p;          /* 0: off */
	float repeat_penalty; /* 1: off */
	int repeat_last_n;    /* tokens looked back for the penalty */
	uint64_t seed;
} ds_sampler_params;

/* temp 0.8, top_k 40, top_p 0.95, min_p 0.05, repeat 1.0 over 64, seed 0 */
void ds_sampler_defaults(ds_sampler_params *p);

typedef struct ds_sampler {
	ds_sampler_params p;
	int n_vocab;
	uint64_t rng[4];      /* xoshiro256** state */
	int32_t *recent;      /* ring of the last repeat_last_n tokens */
	int n_recent, head;
	struct ds_cand {
		float logit;
		int32_t id;
	} *cand;              /* scratch: n_vocab candidates */
	float *prob;          /* scratch: n_vocab probabilities */
	float *qd;            /* scratch: a drafter's distribution by id,
				 zero between calls (ds_sampler_verify) */
} ds_sampler;

int ds_sampler_init(ds_sampler *s, const ds_sampler_params *p, int n_vocab,
		    ds_err *err);
void ds_sampler_free(ds_sampler *s);
/* Record a token (prompt or generated) for the repetition penalty. */
void ds_sampler_accept(ds_sampler *s, int32_t token);
/* Pick a token; logits[n_vocab] is modified (penalties applied). */
int32_t ds_sampler_sample(ds_sampler *s, float *logits);

/* The greedy pick: the index of the largest of x[n], the lowest on ties. */
int32_t ds_argmax(const float *x, int n);

/* A uniform double in [0, 1) from the sampler's generator. */
double ds_sampler_uniform(ds_sampler *s);

/* ---- speculative decoding ---------------------------------------------------------
 * A token and its probability under a distribution. */
typedef struct ds_tokprob {
	int32_t id;
	float p;
} ds_tokprob;

/* The chain's final distribution p over logits[n_vocab] (penalties applied
 * in place, as ds_sampler_sample does), into out[0..n) best first with
 * probabilities summing to 1; out has room for n_vocab.  Greedy: the
 * argmax alone, probability 1.  Draws nothing.  Returns n >= 1. */
int ds_sampler_dist(ds_sampler *s, float *logits, ds_tokprob *out);

/* Verify a drafted token d against the target's logits (modified as by
 * ds_sampler_sample) by the speculative-sampling rule (Leviathan et al.
 * 2023, Chen et al. 2023): d is accepted with probability
 * min(1, p(d) / q(d)); otherwise the token is drawn from the residual
 * max(0, p - q), normalized, so that the token returned has distribution
 * p whatever q is.  q: the drafter's distribution as n_q tokens (ids
 * below n_vocab, no id twice); NULL for a drafter that proposes d for
 * certain (greedy, n-gram), where the residual is p without d.  Greedy
 * (temp 0): the argmax, accepted when it is d, nothing drawn.  Draws come
 * from the sampler's generator: one uniform to test, one more on a
 * rejection.  *accepted: 1 if the token returned is d's acceptance. */
int32_t ds_sampler_verify(ds_sampler *s, float *logits, int32_t d,
			  const ds_tokprob *q, int n_q, int *accepted);

#endif

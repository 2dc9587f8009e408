/*
 * pick.c - a draft from a drafting model's logits (drafter.h): what the
 * draft model and the MTP module share.
 */
#include <stdlib.h>

#include "drafter.h"

static double uniform(uint64_t *g)
{
	return (double)(ds_xorshift64s(g) >> 11) * 0x1p-53;
}

/* A sampled draft: the request's chain (its penalty already applied)
 * over the logits, a draw from it with the request's drafting generator,
 * and the distribution kept as the draft's q. */
static int sampled(ds_spec_pick *pk, ds_spec_seq *q, float *logits, uint32_t n_vocab,
		   uint32_t target_vocab, int32_t *t, ds_err *err)
{
	ds_tokprob *dist;
	double u, acc = 0;
	int n, i, m = 0;

	if (!pk->have_smp) {
		ds_sampler_params p = *q->sp;

		p.repeat_penalty = 1;
		if (ds_sampler_init(&pk->smp, &p, (int)n_vocab, err))
			return -1;
		pk->have_smp = 1;
	}
	if (pk->q == NULL &&
	    (pk->q = ds_calloc((size_t)DS_SPEC_MAX_K * n_vocab, sizeof *pk->q, err)) == NULL)
		return -1;
	dist = pk->q + (size_t)q->n_draft * n_vocab;
	n = ds_sampler_dist(&pk->smp, logits, dist);
	u = uniform(q->rng);
	*t = dist[n - 1].id;
	for (i = 0; i < n; i++)
		if (u < (acc += dist[i].p)) {
			*t = dist[i].id;
			break;
		}
	/* the target's vocabulary only: p is 0 elsewhere, so those ids
	 * play no part in the rule (a draft among them ends the drafts) */
	for (i = 0; i < n; i++)
		if ((uint32_t)dist[i].id < target_vocab)
			dist[m++] = dist[i];
	q->q[q->n_draft] = dist;
	q->n_q[q->n_draft] = m;
	return 0;
}

int ds_spec_pick_draft(ds_spec_pick *pk, ds_spec_seq *q, float *logits,
		       uint32_t n_vocab, uint32_t target_vocab, int point,
		       ds_err *err)
{
	int32_t t;

	ds_spec_penalize(logits, n_vocab, q->sp, q->tok, q->n_tok, q->draft, q->n_draft);
	if (q->sp->temp <= 0 || point)
		t = ds_argmax(logits, (int)n_vocab);
	else if (sampled(pk, q, logits, n_vocab, target_vocab, &t, err))
		return -1;
	q->draft[q->n_draft++] = t;
	return 0;
}

void ds_spec_pick_release(ds_spec_pick *pk)
{
	if (pk->have_smp)
		ds_sampler_free(&pk->smp);
	pk->have_smp = 0;
}

void ds_spec_pick_free(ds_spec_pick *pk)
{
	ds_spec_pick_release(pk);
	free(pk->q);
	pk->q = NULL;
}

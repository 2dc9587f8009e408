/*
 * drafter.h - drafts for speculative decoding: tokens a sequence will
 * likely continue with, verified by the scheduler (sched.c) in the
 * forward pass that already batches the running requests.
 *
 * One drafter serves every slot of a scheduler.  After each step the
 * scheduler calls propose once, with every sequence whose cache moved in
 * that step: each tells what is final (the tokens, the positions the
 * target's cache keeps, which batch rows fed them) and how many drafts it
 * wants (0: none now, but a drafter with a cache of its own may catch up).
 * The drafter fills up to k drafts; fewer (or none) is always allowed.
 * A draft is a guess: whatever the drafter proposes, the scheduler's
 * verification keeps the target's output (sampler.h ds_sampler_verify).
 *
 *	ds_drafter *d;
 *	ds_ngram_open(&d, &err);
 *	ds_sched_opts so = { .drafter = d };     // the scheduler calls it
 *	...
 *	d->free(d);                              // after the scheduler
 *
 * Drafters: ngram.c (prompt lookup over the sequence itself), draft.c (a
 * smaller model of the same vocabulary), mtp.c (DeepSeek's
 * multi-token-prediction module).
 */
#ifndef DS_DRAFTER_H
#define DS_DRAFTER_H

#include <stddef.h>
#include <stdint.h>

#include "base/util.h"
#include "model/forward.h"
#include "runtime/sampler.h"

#define DS_SPEC_MAX_K 16    /* most drafts of a sequence per step */

typedef struct ds_spec_seq {
	/* in */
	uint32_t slot;
	const int32_t *tok;         /* the sequence: prompt, then the tokens
				       sampled; tok[n_final] and on are not in
				       the target's cache */
	size_t n_tok;
	size_t n_final;             /* positions 0 .. n_final - 1 of the
				       target's cache hold tok[] for good */
	size_t fed0;                /* the step fed positions fed0 ..
				       n_final - 1 (of those kept) ... */
	uint32_t row0;              /* ... as batch rows row0 .. (ds_fwd_hidden
				       of the target); fed0 == n_final: none */
	uint32_t k;                 /* drafts wanted, <= DS_SPEC_MAX_K */
	const ds_sampler_params *sp;/* the request's sampling: greedy (temp
				       0) wants point drafts; the penalty */
	uint64_t *rng;              /* a generator of the request's own, for
				       drafters that sample */
	/* out */
	int32_t draft[DS_SPEC_MAX_K];
	uint32_t n_draft;
	/* the distribution each draft was drawn from (q of the acceptance
	 * rule), in memory of the drafter valid until its next call; NULL:
	 * the drafts are proposed for certain */
	const ds_tokprob *q[DS_SPEC_MAX_K];
	int n_q[DS_SPEC_MAX_K];
} ds_spec_seq;

typedef struct ds_drafter ds_drafter;

struct ds_drafter {
	const char *name;           /* "ngram" "draft" "mtp" */
	uint64_t active_bytes;      /* weight bytes a draft's pass reads (0:
				       drafts cost nothing): the adaptive K
				       weighs them against the target's */
	/* n sequences of one step; target: the pass that fed them */
	int (*propose)(ds_drafter *d, const ds_fwd *target,
		       ds_spec_seq *const *seqs, size_t n, ds_err *err);
	/* The slot's sequence ended: forget it. */
	void (*release)(ds_drafter *d, uint32_t slot);
	void (*free)(ds_drafter *d);
};

/* ---- the drafters ------------------------------------------------------------------ */

/* Prompt lookup (n-gram): the sequence's last n tokens (n = 4 down to 2)
 * matched at their latest earlier occurrence in the prompt and output,
 * and what followed there proposed. */
int ds_ngram_open(ds_drafter **d, ds_err *err);

/* A second, smaller model of the same vocabulary, run beside the target
 * (its own forward and cache of n_slot x n_ctx, the target's pool). */
typedef struct ds_draft_opts {
	const char *dir;            /* the draft model */
	ds_pool *pool;
	ds_load_opts load;
	uint32_t n_slot, n_ctx;
	enum ds_kvtype kv_type;
	uint32_t target_vocab;      /* the target's n_vocab */
	const void *target_tok;     /* its ds_tok (tokenizer.h), or NULL */
	const char *target_dir;     /* for messages */
	int point;                  /* draft the argmax for sampled requests
				       too (q a point mass) */
} ds_draft_opts;

int ds_draft_open(ds_drafter **d, const ds_draft_opts *o, ds_err *err);

/* DeepSeek's multi-token-prediction module of the target model m (loaded
 * with DS_LOAD_MTP): its own forward over the target's weights, a cache
 * of one layer of n_slot x n_ctx; batches of up to max_batch entries (the
 * target's, whose pass rows it reads). */
typedef struct ds_mtp_opts {
	const ds_model *m;
	ds_pool *pool;
	uint32_t n_slot, n_ctx, max_batch;
	enum ds_kvtype kv_type;
} ds_mtp_opts;

int ds_mtp_open(ds_drafter **d, const ds_mtp_opts *o, ds_err *err);

/* A draft from a model's logits (the draft model's, the MTP module's):
 * the request's repetition penalty over the sequence and the drafts so
 * far, then the argmax (greedy requests, or point drafts), or a draw from
 * the request's chain over them, kept as the draft's q.  One per slot. */
typedef struct ds_spec_pick {
	ds_sampler smp;             /* the request's chain without its penalty */
	int have_smp;
	ds_tokprob *q;              /* [DS_SPEC_MAX_K][n_vocab], NULL until
				       a sampled draft needs it */
} ds_spec_pick;

/* Appends q->draft[q->n_draft++] from logits[n_vocab] (modified); ids
 * below target_vocab only in q. */
int ds_spec_pick_draft(ds_spec_pick *pk, ds_spec_seq *q, float *logits,
		       uint32_t n_vocab, uint32_t target_vocab, int point,
		       ds_err *err);
/* The slot's request ended; _free also gives back q. */
void ds_spec_pick_release(ds_spec_pick *pk);
void ds_spec_pick_free(ds_spec_pick *pk);

/* The request's repetition penalty (sampler.h's rule: each distinct
 * token of the last repeat_last_n once) over tok[0..n_tok) followed by
 * extra[0..n_extra), applied to logits[n_vocab]: drafts made under the
 * penalty the verification applies agree with it more often. */
void ds_spec_penalize(float *logits, uint32_t n_vocab, const ds_sampler_params *sp,
		      const int32_t *tok, size_t n_tok, const int32_t *extra,
		      size_t n_extra);

#endif

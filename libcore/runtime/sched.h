/*
 * sched.h - the request scheduler: continuous batching of generation
 * requests over one forward pass (forward.h) and its KV cache, for ds-run
 * (--parallel) and ds-serve.
 *
 * A request is a prompt (token ids), sampling parameters, stop conditions
 * and callbacks.  Requests queue in submission order; each takes a free
 * cache slot (at most the cache's n_slot run at once) and leaves it when it
 * ends.  Every ds_sched_step builds one batch and runs one forward pass:
 *
 *   1. queued requests join free slots; cancelled ones end (on_done with
 *      DS_FINISH_CANCEL) and free their slots;
 *   2. each running sequence that has a token to feed contributes one
 *      decode entry, so running sequences never wait for a prefill;
 *   3. the rest of the batch (n_batch entries in all) is filled with the
 *      next chunks of the prompts still being read, oldest request first;
 *   4. the forward pass, then per request, in slot order: on_logits for the
 *      positions that asked, a token sampled where a prompt ended or a
 *      decode entry was, on_token, and the stop checks.
 *
 * Speculative decoding (a drafter in the options, spec/drafter.h).  After
 * each step the drafter proposes up to K tokens for every decoding
 * sequence; in the next step such a sequence contributes its token plus
 * its drafts as K + 1 entries of the batch (every weight still read once
 * per batch).  Verification walks the entries' logits in order: each
 * draft is kept while the target agrees (greedy: it is the argmax; sampled:
 * the speculative-sampling rule, ds_sampler_verify, so the tokens follow
 * the target's distribution), the first disagreement is replaced by the
 * target's own token, and when every draft is kept the last entry gives
 * one more.  The slot's cache is then cut after the last kept position.
 * Greedy output is the same as without a drafter, token for token (the
 * kernels compute a row the same way in any batch); sampled output has
 * the same distribution, and with a seed is reproducible, but is not the
 * same sequence of tokens.  K is the options' spec_k, or with spec_k 0
 * adapts per request to its acceptance rate (at most DS_SPEC_K_AUTO):
 * a request's tokens never depend on what else runs beside it.
 *
 *	ds_sched *s;
 *	ds_sched_init(&s, fwd, &kv, NULL, &err);
 *	ds_req r = { .prompt = ids, .n_prompt = n, .n_predict = 128,
 *		     .stop_ids = eos, .n_stop_ids = 1,
 *		     .cb = { .on_token = tok_cb, .on_done = done_cb, .user = u } };
 *	ds_sampler_defaults(&r.sp);
 *	ds_sched_submit(s, &r, &id, &err);      // any thread
 *	while (ds_sched_step(s, &err) > 0)      // one thread: the driver
 *		;
 *
 * Threads.  ds_sched_submit, ds_sched_cancel, ds_sched_pending and
 * ds_sched_stop may be called from any thread at any time.  ds_sched_step,
 * ds_sched_drain and ds_sched_wait are for one driver thread, the only one
 * that uses the forward and the cache; every callback runs on it, one at a
 * time, between forward passes (a callback may submit or cancel).  A
 * server runs the driver as
 *
 *	while (ds_sched_wait(s))                // sleeps while idle
 *		if (ds_sched_step(s, &err) < 0) ...
 *
 * and ends it with ds_sched_stop (from any thread; queued and running
 * requests are then ended with DS_FINISH_CANCEL by ds_sched_free).
 *
 * Determinism.  A request's tokens depend only on its prompt, its sampling
 * parameters (the seed) and the logits, which do not depend on the number
 * of threads, nor (with kernels that compute each row the same way) on
 * which other requests share its batches.
 */
#ifndef DS_SCHED_H
#define DS_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "model/forward.h"
#include "model/kvcache.h"
#include "grammar/grammar.h"
#include "pcache.h"
#include "sampler.h"
#include "base/util.h"

typedef struct ds_sched ds_sched;

enum ds_finish {
	DS_FINISH_LENGTH,   /* n_predict tokens, or the context is full */
	DS_FINISH_STOP,     /* a stop id was sampled, or on_token said stop */
	DS_FINISH_CANCEL,   /* ds_sched_cancel, or the scheduler was freed */
	DS_FINISH_ERROR,    /* the forward pass failed */
};

/* "length" "stop" "cancelled" "error" (as --jsonl and OpenAI name them). */
const char *ds_finish_name(enum ds_finish f);

/* What a request cost, in seconds of ds_now_s(). */
typedef struct ds_req_stats {
	uint64_t id;
	size_t prompt_tokens;       /* fed to the model */
	size_t completion_tokens;   /* sampled, stop ids included */
	double t_submit;            /* ds_sched_submit */
	double t_start;             /* took a slot */
	double t_prompt;            /* the prompt's last logits were out */
	double t_end;
	/* speculative decoding: tokens drafted and accepted, verification
	 * steps (steps that carried drafts) */
	size_t spec_drafted, spec_accepted, spec_steps;
	size_t cached_tokens;       /* prompt positions not computed: taken
				       from the prompt cache */
	/* constrained decoding: steps masked, seconds spent on the masks */
	size_t mask_steps;
	double mask_s;
} ds_req_stats;

typedef struct ds_req_cb {
	/* Logits [n_vocab] of position pos of the sequence (prompt positions
	 * with all_logits; every position that a token is sampled from),
	 * before sampling touches them.  NULL: not wanted. */
	void (*on_logits)(void *user, size_t pos, const float *logits,
			  uint32_t n_vocab);
	/* A sampled token that is not a stop id.  Return nonzero to end the
	 * request (DS_FINISH_STOP: a stop string was seen). */
	int (*on_token)(void *user, int32_t token);
	/* The end: called exactly once per submitted request, last. */
	void (*on_done)(void *user, enum ds_finish why, const ds_req_stats *st);
	void *user;
} ds_req_cb;

typedef struct ds_req {
	const int32_t *prompt;      /* copied by ds_sched_submit */
	size_t n_prompt;            /* >= 1, <= the cache's n_ctx */
	ds_sampler_params sp;
	int64_t n_predict;          /* most tokens sampled; < 0: until the
				       context is full; 0: the prompt only */
	const int32_t *stop_ids;    /* end tokens (EOS, EOT), copied */
	size_t n_stop_ids;
	int all_logits;             /* on_logits for every prompt position */
	int no_spec;                /* no drafts for this request */
	ds_req_cb cb;
	/* Constrained decoding (grammar.h; both NULL: none).  Every token
	 * sampled continues a text the grammar accepts: the logits of the
	 * others are -inf before any sampler setting; a stop id only when
	 * the text is complete; when nothing more can follow the request
	 * ends (DS_FINISH_STOP).  Drafts are checked against it too.  With
	 * a trigger (n_trigger bytes), the output is free until those bytes
	 * appear in it, and the grammar (which must start with them) applies
	 * from their first byte on.  All three must outlive the request. */
	const ds_grammar *grammar;
	const ds_gvocab *gvocab;
	const char *trigger;
	size_t n_trigger;
} ds_req;

struct ds_drafter;

#define DS_SPEC_K_AUTO 8        /* the adaptive K's ceiling */

typedef struct ds_sched_opts {
	uint32_t n_batch;           /* most entries per step; 0: the
				       forward's max_batch */
	struct ds_drafter *drafter; /* speculative decoding (not owned;
				       freed after the scheduler), or NULL */
	uint32_t spec_k;            /* drafts per step and sequence, <=
				       DS_SPEC_MAX_K; 0: adaptive */
	ds_pcache *cache;           /* the prompt cache, or NULL (below) */
} ds_sched_opts;

/* The batch a scheduler needs: n_slot sequences of 1 + K entries each
 * with speculative decoding (spec nonzero), 1 without (so that no draft
 * is ever cut for room, which would make a request's tokens depend on
 * its neighbours). */
uint32_t ds_sched_batch_need(uint32_t n_slot, int spec, uint32_t spec_k);

/*
 * The prompt cache.  With opts.cache a slot keeps what it held when its
 * request ends, and a new request starts from the longest prefix of its
 * prompt already computed (always computing its last prompt token, whose
 * logits it samples from; from nothing when it asks for every prompt
 * position's logits):
 *   - a free slot whose kept tokens share the longest prefix with the
 *     prompt is taken as it is;
 *   - else whole blocks held in the cache are copied into the slot taken
 *     (an empty one, else the one free longest, whose tokens are first
 *     kept in the cache: they are stored when they would be lost);
 *   - then the rows of any other slot (running or not) that holds more of
 *     the prompt are copied;
 *   - and while an older running request is still computing a longer
 *     common prefix (DS_PCACHE_BLOCK positions or more), the new one waits
 *     for it and copies its rows, instead of computing them beside it.
 * Copied rows are the bytes computed for the same tokens at the same
 * positions, so greedy answers are the same with and without the cache.
 * ds_sched_free keeps every slot's tokens in the cache when it is saved to
 * a directory.
 */

int ds_sched_init(ds_sched **s, ds_fwd *f, ds_kvcache *kv,
		  const ds_sched_opts *opts, ds_err *err);
/* Ends every request still queued or running (DS_FINISH_CANCEL, on the
 * calling thread), then frees. */
void ds_sched_free(ds_sched *s);

/* Queue a request; *id (may be NULL) is its id, > 0.  Fails, queuing
 * nothing, for an empty prompt, a prompt longer than the context, an id
 * outside the vocabulary (the message names its index) or bad sampling
 * parameters. */
int ds_sched_submit(ds_sched *s, const ds_req *r, uint64_t *id, ds_err *err);
/* End a request at the next step (its on_done says DS_FINISH_CANCEL);
 * -1 if no queued or running request has that id. */
int ds_sched_cancel(ds_sched *s, uint64_t id);
/* Requests queued or running. */
size_t ds_sched_pending(ds_sched *s);
/* The same, apart: waiting for a slot, and holding one (a server's
 * metrics; any thread, as ds_sched_pending; either pointer may be NULL). */
void ds_sched_counts(ds_sched *s, size_t *queued, size_t *running);

/* One step (above).  Returns the requests still pending after it, or -1
 * when the forward pass failed (the running requests then end with
 * DS_FINISH_ERROR; the scheduler stays usable). */
int ds_sched_step(ds_sched *s, ds_err *err);
/* Steps until nothing is pending. */
int ds_sched_drain(ds_sched *s, ds_err *err);
/* Block until something is pending (1) or ds_sched_stop was called (0). */
int ds_sched_wait(ds_sched *s);
void ds_sched_stop(ds_sched *s);

/* ---- stop strings ---------------------------------------------------------------
 * Text-level stops for a streamed answer: feed each decoded piece; what
 * can be shown is appended to *out (held back while it could still be the
 * start of a stop string); returns 1 when a stop string is complete (the
 * text before it is out, the stop string and anything after are not). */
typedef struct ds_stopper {
	char **stops;
	size_t n_stops, max_len;
	char *hold;                 /* text not yet shown */
	size_t n_hold, cap;
} ds_stopper;

int ds_stopper_init(ds_stopper *st, char *const *stops, size_t n, ds_err *err);
void ds_stopper_free(ds_stopper *st);
/* out: appended bytes (malloc'd growth through *out, *n_out, *cap). */
int ds_stopper_push(ds_stopper *st, const char *text, size_t len, char **out,
		    size_t *n_out, size_t *cap, ds_err *err);
/* The end of the answer: what is held back is shown. */
int ds_stopper_flush(ds_stopper *st, char **out, size_t *n_out, size_t *cap,
		     ds_err *err);

#endif

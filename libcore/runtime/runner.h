/*
 * runner.h - a list of requests run through a session's scheduler, their
 * answers written in the order the requests came in: the batch side of
 * ds-run.
 *
 * Each answer is written as text (streamed, through the stop strings),
 * as a line of ids, or as one JSON object per line (ds-run(1) names its
 * fields); with a logits stream, the logits rows of every prompt position
 * and generated step.  Requests run together (up to the cache's slots),
 * so they may finish out of order; ds_outq puts them back in order.
 */
#ifndef DS_RUNNER_H
#define DS_RUNNER_H

#include <stdio.h>

#include "outq.h"
#include "session.h"

enum ds_run_out { DS_RUN_TEXT, DS_RUN_IDS, DS_RUN_JSONL };

typedef struct ds_runner_opts {
	enum ds_run_out out;
	FILE *text;               /* the answers (stdout) */
	FILE *logits;             /* the logits rows, or NULL */
	ds_sampler_params sp;
	int64_t n_predict;        /* per request; < 0: to the context's end */
	char *const *stops;       /* stop strings (need the tokenizer) */
	size_t n_stops;
	int chat;                 /* chat turns: the template's end of turn
				     stops too */
	const ds_grammar *grammar;/* every answer constrained to it (needs
				     the tokenizer), or NULL */
	/* called as each request ends (may be NULL) */
	void (*on_done)(void *user, size_t index, enum ds_finish why,
			const ds_req_stats *st);
	void *user;
} ds_runner_opts;

typedef struct ds_runner_req ds_runner_req;

typedef struct ds_runner {
	ds_session *s;
	ds_runner_opts o;
	ds_outq oq;
	ds_runner_req **rq;       /* the requests not yet done */
	size_t n, cap;
	size_t next;              /* the first not yet submitted */
	char *last;               /* the last answer's text (chat history) */
	size_t n_last;
	ds_err err;               /* the first error inside a callback */
	int bad;                  /* err is set */
	/* totals: prompt tokens and time to the first token; tokens sampled
	 * after the first and the time after it (summed over requests) */
	size_t tot_prompt, tot_gen, n_dec;
	double t_pre, t_dec, t_first, t_last;
	/* speculative decoding: drafts made and kept, verification steps */
	size_t spec_drafted, spec_accepted, spec_steps;
	/* the grammar's masks: steps and seconds */
	size_t mask_steps;
	double mask_s;
} ds_runner;

void ds_runner_init(ds_runner *r, ds_session *s, const ds_runner_opts *o);
/* Ends what still runs (its callbacks first), then frees. */
void ds_runner_free(ds_runner *r);
/* Queue a prompt (taken: freed on failure); run it with ds_runner_run. */
int ds_runner_add(ds_runner *r, ds_tok_ids *ids, ds_err *err);
/* Submit every queued request, then drive the scheduler until all are
 * done.  -1 on a submit or forward failure, a write error or an error
 * inside a callback (r->err). */
int ds_runner_run(ds_runner *r, ds_err *err);

#endif

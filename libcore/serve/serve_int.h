/*
 * serve_int.h - what engine.c and http.c share inside libcore/serve/.
 */
#ifndef DS_SERVE_INT_H
#define DS_SERVE_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "chat/reasoning.h"
#include "runtime/session.h"
#include "serve.h"

/* The model and everything that generates from it. */
typedef struct ds_eng {
	const ds_srv_opts *o;
	ds_metrics *metrics;
	ds_session s;               /* the scheduler: s.sched (NULL before
				       the load and after ds_eng_stop) */
	int have_s;
	/* smu orders submit and cancel against the scheduler's end */
	pthread_mutex_t smu;
	pthread_t driver;
	int driver_on;
	atomic_size_t inflight;     /* submitted jobs not yet done */
	size_t limit;               /* --parallel + --queue */
	uint64_t seed_ctr;          /* fresh seeds, under smu */
} ds_eng;

/* One generation: shared by its connection and the scheduler (refs). */
typedef struct ds_job {
	pthread_mutex_t mu;
	int efd;                    /* eventfd: written when there is news */
	int refs;                   /* under mu */
	ds_eng *eng;
	uint64_t id;                /* the scheduler's */
	int stream;
	int keep_ids;               /* return_tokens */
	double t_arrival;           /* ds_now_s */
	size_t n_prompt;
	int split;                  /* the reasoning goes apart */
	ds_grammar *grammar;        /* the answer's (owned), or NULL */
	const char *trigger;        /* it applies from there on, or NULL */
	int tools_on;               /* calls are parsed from the answer */
	enum ds_tool_fmt tool_fmt;  /* in this format */
	/* the driver thread's alone */
	ds_textout to;
	ds_reason rs;               /* with split */
	ds_reason_out ro;
	/* under mu */
	char *text;                 /* text shown and not yet taken */
	size_t n_text, cap_text;
	char *think;                /* with split: reasoning not yet taken */
	size_t n_think, cap_think;
	int32_t *ids;               /* with return_tokens: ids sampled */
	size_t n_ids, cap_ids;
	int done, failed;
	enum ds_finish why;
	ds_req_stats st;
} ds_job;

int ds_eng_load(ds_eng *e, const ds_srv_opts *o, ds_metrics *mt, ds_err *err);
/* End the driver; every job still queued or running ends cancelled. */
void ds_eng_stop(ds_eng *e);
void ds_eng_free(ds_eng *e);
/* Queued and running requests (0 before the load). */
void ds_eng_counts(ds_eng *e, size_t *queued, size_t *running);

/* The prompt's ids: given, tokenized, or the chat rendered and tokenized;
 * checked against the context.  *think: the chat prompt leaves the model
 * inside a <think> block. */
int ds_eng_prompt(ds_eng *e, const ds_api_req *r, int32_t **ids, size_t *n,
		  int *think, ds_api_err *ae);
/* The text of ids as answers show it: ids the tokenizer has no string for
 * add nothing. */
int ds_eng_detok(ds_eng *e, const int32_t *ids, size_t n, ds_tok_text *out,
		 ds_err *err);
/* Queue a generation (503 when the queue is full or the engine stopped);
 * think: the prompt opened a <think> block (ds_eng_prompt). */
int ds_job_submit(ds_eng *e, const ds_api_req *r, const int32_t *ids,
		  size_t n, int think, double t_arrival, ds_grammar *g,
		  const char *trigger, ds_job **out, ds_api_err *ae);
/* The grammar r's answer follows (the caller's; g passes to
 * ds_job_submit), and the bytes it applies from (NULL: from the start):
 * response_format's, or the tool calls' when tool_choice is not "none"
 * (lazy, after the calls' marker, with "auto"). */
int ds_eng_grammar(ds_eng *e, ds_api_req *r, ds_grammar **g,
		   const char **trigger, ds_api_err *ae);
/* /apply-template: the chat with its tools, rendered. */
int ds_eng_render(ds_eng *e, const ds_api_req *r, char **text, size_t *len,
		  ds_err *err);
/* The client is gone: end the job at the next step. */
void ds_job_cancel(ds_job *j);
void ds_job_release(ds_job *j);

#endif

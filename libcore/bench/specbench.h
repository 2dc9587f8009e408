/*
 * specbench.h - speculative decoding measured (ds-bench --spec and
 * --verify, ds-bench(1)).
 *
 *   spec     one session with the drafter; a greedy request of n tokens
 *            from the prompt without drafts ("speculative" off) and the
 *            same request with them, in turn, reps times: decode tokens/s
 *            of each (the tokens after the first over the time after the
 *            first, as ds-run --verbose), their ratio, the drafts made
 *            and kept, and the mean accepted length (tokens a
 *            verification step gave).  Greedy, so both give the same
 *            tokens (checked).
 *   verify   one sequence with c positions in its cache: the time of a
 *            pass of e entries (its token and e - 1 drafts) at positions
 *            c .. c + e - 1, e = 1 .. max, each e's passes alternating
 *            with the others' over reps rounds; cost(e) = time(e) /
 *            time(1).  With free drafts kept at rate a, a step of K
 *            drafts gives (1 - a^(K+1)) / (1 - a) tokens for cost(K + 1):
 *            their best ratio over K is the most speculative decoding can
 *            gain at that rate on this machine.
 */
#ifndef DS_SPECBENCH_H
#define DS_SPECBENCH_H

#include <stdint.h>
#include <stdio.h>

#include "model/forward.h"
#include "runtime/session.h"
#include "base/util.h"

typedef struct ds_specbench_row {
	const char *drafter;
	uint32_t k;                 /* --spec-k, 0: adaptive */
	uint32_t n;                 /* tokens per request */
	int reps;
	double plain_ts, spec_ts;   /* decode tokens/s, means */
	double speedup, speedup_lo, speedup_hi;  /* per round: mean, range */
	size_t drafted, accepted, steps;
	double acceptance, mean_len;
	int same;                   /* greedy tokens identical every round */
} ds_specbench_row;

typedef struct ds_specbench_opts {
	ds_session_opts so;         /* with .spec */
	const char *prompt_file;    /* its text is the prompt */
	uint32_t n;
	int reps;
	float repeat_penalty;
	FILE *progress;
} ds_specbench_opts;

int ds_specbench_spec(const ds_specbench_opts *o, ds_specbench_row *row,
		      ds_err *err);

#define DS_VERIFY_MAX 16

typedef struct ds_verify_row {
	uint32_t ctx;               /* positions already cached */
	uint32_t max_e;             /* entries 1 .. max_e */
	int reps, threads;
	double ms[DS_VERIFY_MAX + 1];       /* median ms of a pass of e entries */
	double cost[DS_VERIFY_MAX + 1];     /* ms[e] / ms[1] */
} ds_verify_row;

typedef struct ds_verify_opts {
	const char *dir;
	ds_load_opts load;
	int threads;
	const char *cpus;
	uint32_t ctx, max_e;
	int reps;
	enum ds_kvtype kv_type;     /* the cache's */
	FILE *progress;
} ds_verify_opts;

int ds_specbench_verify(const ds_verify_opts *o, ds_verify_row *row, ds_err *err);

/* The best tokens per unit of cost at acceptance rate a over K = 0 ..
 * max_e - 1 (cost from the row), and the K that gives it. */
double ds_verify_bound(const ds_verify_row *row, double a, uint32_t *best_k);

#endif

/*
 * describe.h - the --verbose lines of a run, on stderr in warnx(3)'s
 * style: what a session loaded (before), what a runner did (after), and
 * under MPI each rank's share and traffic.  ds-run prints them; they are
 * here so that every program that opens a session says the same things.
 */
#ifndef DS_DESCRIBE_H
#define DS_DESCRIBE_H

#include <stdint.h>

#include "dist/dist.h"
#include "runtime/runner.h"

/* The model, kernels, threads, load time, KV cache, drafter, prompt cache
 * and RSS of session s opened from dir; spec_k 0 means K adapts. */
void ds_describe_session(const ds_session *s, const char *dir, uint64_t seed,
			 uint32_t spec_k);
/* Request index (from 0) of a run: its tokens, why it ended and, under a
 * grammar, the masks' time. */
void ds_describe_request(size_t index, enum ds_finish why,
			 const ds_req_stats *st);
/* The prompt and decode rates of runner n, the drafter's acceptance when
 * spec is not DS_SPEC_NONE, and RSS. */
void ds_describe_runner(const ds_runner *n, enum ds_spec_kind spec);
/* A rank's experts and share (end 0) or the exchanges it made (end 1). */
void ds_describe_rank(const ds_dist *d, const ds_session *s, int end);

#endif

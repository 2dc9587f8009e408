/*
 * dist.h - one model run by the ranks of an MPI job: expert parallelism
 * for DeepSeek's MoE layers (docs/distributed.md, ds-run(1) "--mpi").
 *
 * Every rank loads the model's shared parts (embedding, attention, dense
 * layers, routers, shared experts, norms) and its own contiguous range of
 * the routed experts (ds_ep_range), and runs every batch through the
 * same forward pass; rank 0 alone reads the requests, samples and writes
 * the output.  Rank 0's forward sends each batch to the others (its
 * ds_fwd_ep batch callback); the others run them in ds_dist_follow until
 * rank 0 ends the section.  In each MoE layer one MPI_Iallgatherv brings
 * every rank's expert outputs to all (forward.h ds_fwd_ep: the sum is in
 * the single process's order, so the logits equal its bit for bit).
 *
 *	ds_dist *d;
 *	ds_dist_init(&d, &(ds_dist_opts){ .prog = "ds-run" }, &err);  // MPI_Init
 *	ds_dist_model(d, dir, &err);       // the split; checks every rank agrees
 *	... load with ds_dist_load_opts(d, &load), forward with ds_dist_ep(d) ...
 *	if (ds_dist_rank(d) == 0) { ... ds_fwd_decode ...; ds_dist_done(d, 0); }
 *	else ds_dist_follow(d, fwd, &kv, &err);
 *	ds_dist_free(d);                   // MPI_Finalize
 *
 * Failures.  A rank that cannot go on (an MPI error, a message out of
 * step, an exchange that waits longer than the timeout: a rank died or
 * hangs) prints one line, "PROG: rank R: what", and ends the job with
 * MPI_Abort.  mpirun ends the others when one exits; each rank then
 * prints one line saying so on SIGTERM and exits with status 143.
 *
 * Threads.  MPI is initialized MPI_THREAD_SERIALIZED: one thread at a
 * time may use a ds_dist (ds-serve loads on one thread and runs forward
 * passes on another, never at once).
 */
#ifndef DS_DIST_H
#define DS_DIST_H

#include <stdint.h>

#include "model/forward.h"
#include "model/kvcache.h"
#include "base/util.h"

typedef struct ds_dist ds_dist;

typedef struct ds_dist_opts {
	const char *prog;       /* for messages: "ds-run" */
	double timeout_s;       /* an exchange inside a forward pass waiting
				   longer ends the job; 0: 120 */
} ds_dist_opts;

/* What a rank moved and waited for (payload bytes, not the transport's). */
typedef struct ds_dist_stats {
	uint64_t sent, recv;    /* bytes to and from the other ranks */
	uint64_t exchanges;     /* MoE layers exchanged */
	uint64_t batches;       /* batches sent (rank 0) or received */
	double wait_s;          /* seconds inside the exchanges */
	double batch_s;         /* seconds sending or receiving batches
				   (followers: idle time included) */
} ds_dist_stats;

/* MPI_Init_thread; the job's size and this rank; SIGTERM's line. */
int ds_dist_init(ds_dist **d, const ds_dist_opts *o, ds_err *err);
/* MPI_Finalize (after ds_dist_done on rank 0), then free. */
void ds_dist_free(ds_dist *d);

int ds_dist_rank(const ds_dist *d);
int ds_dist_size(const ds_dist *d);

/* The model in dir: its routed experts split over the ranks
 * (ds_ep_range), after checking that every rank could read it, runs the
 * same kernels (DS_ISA) and has the same model.meta.  Collective: every
 * rank calls it and gets the same answer (rank 0 reports it). */
int ds_dist_model(ds_dist *d, const char *dir, ds_err *err);
/* This rank's experts [*first, *end). */
void ds_dist_experts(const ds_dist *d, uint32_t *first, uint32_t *end);
/* The load options of this rank's share (ds_load_opts ep_parts, ep_part,
 * no_output: only rank 0 computes logits), over what o asks. */
void ds_dist_load_opts(const ds_dist *d, ds_load_opts *o);
/* The forward's expert parallelism for this rank (valid until free). */
const ds_fwd_ep *ds_dist_ep(ds_dist *d);

/* Ranks > 0: run rank 0's batches on f and kv (made as rank 0 made its
 * own) until it ends the section; its status (0, or 1 when it failed).
 * Each batch carries every slot's length, so cuts follow; any other
 * change rank 0 makes to its cache (a copy between slots) would have to
 * be sent too: a follower holding fewer positions than rank 0 says it
 * is out of step and ends the job. */
int ds_dist_follow(ds_dist *d, ds_fwd *f, ds_kvcache *kv, ds_err *err);
/* Rank 0: end the others' section with status (0 go on or end well, 1:
 * rank 0 failed).  Before ds_dist_model succeeded the others are not
 * following: nothing is sent; a failure before it was even called (the
 * others wait in it) ends the job with MPI_Abort. */
void ds_dist_done(ds_dist *d, int status);

/* This rank's counters, and zeroing them. */
void ds_dist_local(const ds_dist *d, ds_dist_stats *s);
/* Rank 0, inside a section: every rank's counters zeroed; gathered into
 * all [size]. */
void ds_dist_reset_all(ds_dist *d);
void ds_dist_gather(ds_dist *d, ds_dist_stats *all);

/* Print "PROG: rank R: msg" and end the job (MPI_Abort). */
void ds_dist_fail(ds_dist *d, const char *msg) __attribute__((noreturn));

#endif

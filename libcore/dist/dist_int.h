/*
 * dist_int.h - what dist.c (the job, the model's split, counters) and
 * step.c (batches, exchanges, waiting) share inside libcore/dist/.
 */
#ifndef DS_DIST_INT_H
#define DS_DIST_INT_H

#include <mpi.h>

#include "dist.h"

/* The batch message's header, then tok, pos, seq [n] and len [n_slot]. */
enum { MSG_CMD, MSG_STATUS, MSG_N, MSG_SLOTS, MSG_HDR };
enum { CMD_BATCH = 1, CMD_DONE, CMD_RESET, CMD_STATS };

struct ds_dist {
	MPI_Comm comm;          /* MPI_COMM_WORLD's duplicate, errors returned */
	int rank, size;
	char prog[32];
	double timeout_s;
	uint32_t *first;        /* [size + 1] each rank's experts */
	int asked;              /* ds_dist_model was called (all ranks were
				   in it together) */
	ds_fwd_ep ep;
	MPI_Datatype row;       /* `width` floats, or MPI_DATATYPE_NULL */
	size_t width;
	int32_t *msg;           /* the batch's payload, msg_cap int32s */
	size_t msg_cap;
	uint8_t *no_logits;     /* followers' logits flags, all 0 */
	size_t no_logits_cap;
	ds_dist_stats st;
};

/* Complete req: polls, yields after a while; idle (a follower waiting
 * for the next batch) sleeps when long and never times out; otherwise
 * after timeout_s the job ends.  Returns the seconds waited. */
double ds_dist_wait(ds_dist *d, MPI_Request *req, int idle, const char *what);
/* An MPI call's failure: "what: Open MPI's message", then the job ends. */
void ds_dist_check(ds_dist *d, int rc, const char *what);

/* step.c: the ds_fwd_ep callbacks */
void ds_dist_exchange(void *arg, float *buf, size_t width, const int *cnt,
		      const int *off);
void ds_dist_send_batch(void *arg, const ds_kvcache *kv, const ds_batch *b);
/* Rank 0: a header alone (CMD_DONE, CMD_RESET, CMD_STATS). */
void ds_dist_send_cmd(ds_dist *d, int cmd, int status);

#endif

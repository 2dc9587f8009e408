/*
 * step.c - what passes between the ranks during a run (dist.h): rank 0's
 * batches to the others, each MoE layer's exchange, and the waiting.
 *
 * Everything is a collective on the job's communicator, started
 * nonblocking and polled: a rank waiting for a slow one spins (the wait
 * is short and on the critical path), yields the CPU once it lasts (an
 * oversubscribed node), and gives up after the timeout inside a forward
 * pass; a follower waiting for rank 0's next batch sleeps instead, for
 * as long as rank 0 is idle.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist_int.h"

#define SPIN_S 50e-6        /* polling alone */
#define YIELD_S 10e-3       /* then with sched_yield; then sleeping */
#define SLEEP_NS 100000L    /* 0.1 ms naps in a long wait */
#define IDLE_NS 1000000L    /* 1 ms naps of an idle follower */

double ds_dist_wait(ds_dist *d, MPI_Request *req, int idle, const char *what)
{
	double t0 = ds_now_s(), dt = 0;
	unsigned polls = 0;
	int done = 0;

	for (;;) {
		ds_dist_check(d, MPI_Test(req, &done, MPI_STATUS_IGNORE), what);
		if (done)
			return ds_now_s() - t0;
		if (++polls % 64 != 0)
			continue;
		dt = ds_now_s() - t0;
		if (!idle && dt > d->timeout_s) {
			char line[256];

			snprintf(line, sizeof line, "%s: no answer from the other "
				 "ranks in %g s (one died or hangs)", what, d->timeout_s);
			ds_dist_fail(d, line);
		}
		if (dt < SPIN_S)
			continue;
		if (dt < YIELD_S) {
			sched_yield();
		} else {
			struct timespec ts = { 0, idle ? IDLE_NS : SLEEP_NS };

			nanosleep(&ts, NULL);
		}
	}
}

/* ---- the MoE exchange --------------------------------------------------------------- */

/* The MPI type of a row of width floats. */
static void row_type(ds_dist *d, size_t width)
{
	if (d->row != MPI_DATATYPE_NULL && d->width == width)
		return;
	if (d->row != MPI_DATATYPE_NULL)
		MPI_Type_free(&d->row);
	if (width > (size_t)1 << 30)
		ds_dist_fail(d, "an exchanged row wider than 2^30 floats");
	ds_dist_check(d, MPI_Type_contiguous((int)width, MPI_FLOAT, &d->row),
		      "MPI_Type_contiguous");
	ds_dist_check(d, MPI_Type_commit(&d->row), "MPI_Type_commit");
	d->width = width;
}

void ds_dist_exchange(void *arg, float *buf, size_t width, const int *cnt,
		      const int *off)
{
	ds_dist *d = arg;
	uint64_t rb = (uint64_t)width * sizeof(float);
	int all = off[d->size - 1] + cnt[d->size - 1];
	MPI_Request req;

	row_type(d, width);
	ds_dist_check(d, MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf,
					 cnt, off, d->row, d->comm, &req),
		      "MPI_Iallgatherv");
	d->st.wait_s += ds_dist_wait(d, &req, 0, "the experts' exchange");
	d->st.exchanges++;
	d->st.sent += (uint64_t)cnt[d->rank] * rb * (uint64_t)(d->size - 1);
	d->st.recv += (uint64_t)(all - cnt[d->rank]) * rb;
}

/* ---- rank 0's batches ------------------------------------------------------------------ */

static void bcast(ds_dist *d, void *p, size_t n, int idle, double *sec)
{
	MPI_Request req;

	if (n > (size_t)1 << 30)
		ds_dist_fail(d, "a batch message of more than 2^30 values");
	ds_dist_check(d, MPI_Ibcast(p, (int)n, MPI_INT32_T, 0, d->comm, &req),
		      "MPI_Ibcast");
	*sec += ds_dist_wait(d, &req, idle, "a batch message");
}

static int32_t *msg_room(ds_dist *d, size_t n)
{
	if (n > d->msg_cap) {
		free(d->msg);
		d->msg = malloc(n * sizeof *d->msg);
		if (d->msg == NULL)
			ds_dist_fail(d, "out of memory for a batch message");
		d->msg_cap = n;
	}
	return d->msg;
}

void ds_dist_send_cmd(ds_dist *d, int cmd, int status)
{
	int32_t h[MSG_HDR] = { [MSG_CMD] = cmd, [MSG_STATUS] = status };

	if (d->size > 1)
		bcast(d, h, MSG_HDR, 0, &d->st.batch_s);
}

/* The header, then tok, pos, seq and the prompt flag of each entry and
 * each slot's length once the batch is checked (a slot cut by the batch
 * rules, or emptied by the scheduler, is cut on every rank). */
void ds_dist_send_batch(void *arg, const ds_kvcache *kv, const ds_batch *b)
{
	ds_dist *d = arg;
	int32_t h[MSG_HDR] = { [MSG_CMD] = CMD_BATCH, [MSG_N] = (int32_t)b->n,
			       [MSG_SLOTS] = (int32_t)kv->n_slot };
	size_t n = 4 * b->n + kv->n_slot, i;
	int32_t *m;

	if (d->size == 1)
		return;
	m = msg_room(d, n);
	memcpy(m, b->token, b->n * sizeof *m);
	memcpy(m + b->n, b->pos, b->n * sizeof *m);
	memcpy(m + 2 * b->n, b->seq, b->n * sizeof *m);
	for (i = 0; i < b->n; i++)
		m[3 * b->n + i] = b->prompt && b->prompt[i];
	for (i = 0; i < kv->n_slot; i++)
		m[4 * b->n + i] = (int32_t)kv->len[i];
	bcast(d, h, MSG_HDR, 0, &d->st.batch_s);
	bcast(d, m, n, 0, &d->st.batch_s);
	d->st.batches++;
	d->st.sent += (MSG_HDR + n) * sizeof *m * (uint64_t)(d->size - 1);
}

/* ---- the followers ------------------------------------------------------------------------ */

/* Each slot's length as rank 0 has it, before the batch: cut where this
 * rank holds more; holding less is being out of step. */
static void follow_lens(ds_dist *d, ds_kvcache *kv, const int32_t *len)
{
	uint32_t i;

	for (i = 0; i < kv->n_slot; i++) {
		if (len[i] < 0 || (uint32_t)len[i] > kv->len[i]) {
			char line[160];

			snprintf(line, sizeof line, "slot %u: rank 0 holds %d positions, "
				 "this rank %u: out of step", i, len[i], kv->len[i]);
			ds_dist_fail(d, line);
		}
		if ((uint32_t)len[i] < kv->len[i])
			ds_kvcache_seq_keep(kv, i, (uint32_t)len[i]);
	}
}

static void follow_batch(ds_dist *d, ds_fwd *f, ds_kvcache *kv, const int32_t *h)
{
	ds_fwd_info fi;
	size_t n = (size_t)h[MSG_N], len;
	int32_t *m;
	ds_err err;

	ds_fwd_get_info(f, &fi);
	if (h[MSG_N] < 1 || n > fi.max_batch || h[MSG_SLOTS] != (int32_t)kv->n_slot) {
		char line[200];

		snprintf(line, sizeof line, "rank 0 sent a batch of %d entries over "
			 "%d slots; this rank's forward takes %u over %u", h[MSG_N],
			 h[MSG_SLOTS], fi.max_batch, kv->n_slot);
		ds_dist_fail(d, line);
	}
	len = 4 * n + kv->n_slot;
	m = msg_room(d, len);
	bcast(d, m, len, 0, &d->st.batch_s);
	d->st.batches++;
	d->st.recv += (MSG_HDR + len) * sizeof *m;
	if (n > d->no_logits_cap) {
		free(d->no_logits);
		/* [n] zero, then [n] the prompt flags */
		d->no_logits = calloc(n, 2);
		if (d->no_logits == NULL)
			ds_dist_fail(d, "out of memory");
		d->no_logits_cap = n;
	}
	follow_lens(d, kv, m + 4 * n);
	{
		/* no logits: rank 0 alone samples */
		uint8_t *prompt = d->no_logits + d->no_logits_cap;
		ds_batch b = { .n = n, .token = m, .pos = m + n, .seq = m + 2 * n,
			       .logits = d->no_logits, .prompt = prompt };
		size_t i;

		for (i = 0; i < n; i++)
			prompt[i] = m[3 * n + i] != 0;

		if (ds_fwd_decode(f, kv, &b, &err))
			ds_dist_fail(d, err.msg);
	}
}

int ds_dist_follow(ds_dist *d, ds_fwd *f, ds_kvcache *kv, ds_err *err)
{
	(void)err;
	for (;;) {
		int32_t h[MSG_HDR];

		bcast(d, h, MSG_HDR, 1, &d->st.batch_s);
		switch (h[MSG_CMD]) {
		case CMD_BATCH:
			follow_batch(d, f, kv, h);
			break;
		case CMD_DONE:
			return h[MSG_STATUS] ? 1 : 0;
		case CMD_RESET:
			memset(&d->st, 0, sizeof d->st);
			break;
		case CMD_STATS:
			ds_dist_check(d, MPI_Gather(&d->st, sizeof d->st, MPI_BYTE, NULL, 0,
						    MPI_BYTE, 0, d->comm), "MPI_Gather");
			break;
		default:
			ds_dist_fail(d, "an unknown message from rank 0");
		}
	}
}

void ds_dist_done(ds_dist *d, int status)
{
	if (d->rank != 0 || d->size == 1)
		return;
	/* the others follow once the split is known, and until this; rank
	 * 0 failing before the split leaves them waiting in it */
	if (d->first != NULL)
		ds_dist_send_cmd(d, CMD_DONE, status);
	else if (status != 0 && !d->asked)
		MPI_Abort(d->comm, 1);
}

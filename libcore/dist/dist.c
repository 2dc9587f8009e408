/*
 * dist.c - the MPI job behind expert parallelism (dist.h): start and
 * end, one-line failures, the model's split and the checks that every
 * rank computes alike, the counters.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist_int.h"
#include "format/modelfile.h"
#include "kernels/kernels.h"

#define DEFAULT_TIMEOUT_S 120.0

/* ---- SIGTERM: mpirun ending the job -------------------------------------------- */

/* The line a rank prints when mpirun ends it (written once, before the
 * handler is installed: a signal handler has no other way to its text). */
static char term_line[160];

static void on_term(int sig)
{
	ssize_t n = write(2, term_line, strlen(term_line));

	(void)n;
	(void)sig;
	_exit(143);
}

static void term_init(const ds_dist *d)
{
	struct sigaction sa;

	snprintf(term_line, sizeof term_line, "%s: rank %d: SIGTERM: the MPI job "
		 "is ending (another rank failed, or mpirun was interrupted)\n",
		 d->prog, d->rank);
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_term;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
}

/* ---- failures -------------------------------------------------------------------- */

void ds_dist_fail(ds_dist *d, const char *msg)
{
	signal(SIGTERM, SIG_DFL);       /* this line says it; mpirun ends us */
	fprintf(stderr, "%s: rank %d: %s\n", d->prog, d->rank, msg);
	fflush(stderr);
	MPI_Abort(d->comm, 1);
	_exit(1);
}

void ds_dist_check(ds_dist *d, int rc, const char *what)
{
	char s[MPI_MAX_ERROR_STRING], line[MPI_MAX_ERROR_STRING + 128];
	int n = 0;

	if (rc == MPI_SUCCESS)
		return;
	if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS)
		snprintf(s, sizeof s, "MPI error %d", rc);
	snprintf(line, sizeof line, "%s: %s", what, s);
	ds_dist_fail(d, line);
}

/* ---- the job ------------------------------------------------------------------------ */

int ds_dist_init(ds_dist **out, const ds_dist_opts *o, ds_err *err)
{
	ds_dist *d;
	int provided = 0, rc;

	*out = NULL;
	d = ds_calloc(1, sizeof *d, err);
	if (d == NULL)
		return -1;
	snprintf(d->prog, sizeof d->prog, "%s", o->prog ? o->prog : "ds");
	d->timeout_s = o->timeout_s > 0 ? o->timeout_s : DEFAULT_TIMEOUT_S;
	d->row = MPI_DATATYPE_NULL;
	rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
	if (rc != MPI_SUCCESS) {
		free(d);
		return ds_errf(err, "--mpi: MPI_Init_thread failed (error %d)", rc);
	}
	if (provided < MPI_THREAD_SERIALIZED ||
	    MPI_Comm_dup(MPI_COMM_WORLD, &d->comm) != MPI_SUCCESS ||
	    MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_RETURN) != MPI_SUCCESS) {
		MPI_Finalize();
		free(d);
		return ds_errf(err, "--mpi: the MPI library gives thread level %d, "
			       "ds needs MPI_THREAD_SERIALIZED", provided);
	}
	MPI_Comm_rank(d->comm, &d->rank);
	MPI_Comm_size(d->comm, &d->size);
	/* mpirun joins the ranks' stderr: whole lines, or they interleave */
	setvbuf(stderr, NULL, _IOLBF, BUFSIZ);
	term_init(d);
	*out = d;
	return 0;
}

void ds_dist_free(ds_dist *d)
{
	if (d == NULL)
		return;
	/* ending anyway: a peer's end during it needs no line */
	signal(SIGTERM, SIG_DFL);
	if (d->row != MPI_DATATYPE_NULL)
		MPI_Type_free(&d->row);
	MPI_Comm_free(&d->comm);
	MPI_Finalize();
	free(d->first);
	free(d->msg);
	free(d->no_logits);
	free(d);
}

int ds_dist_rank(const ds_dist *d)
{
	return d->rank;
}

int ds_dist_size(const ds_dist *d)
{
	return d->size;
}

/* ---- the model ------------------------------------------------------------------------ */

/* What every rank must agree on: its kernels and its model.meta. */
typedef struct same_t {
	char isa[32];
	uint32_t meta_crc;
	uint32_t n_expert;
	int32_t ok;
	char msg[sizeof(((ds_err *)0)->msg)];  /* why not ok */
} same_t;

static int read_same(const char *dir, same_t *s, ds_err *err)
{
	char *path = ds_path_join(dir, "model.meta"), *text = NULL;
	size_t len = 0;
	ds_model m;
	int rc;

	memset(s, 0, sizeof *s);
	snprintf(s->isa, sizeof s->isa, "%s", ds_kernels_name());
	if (path == NULL)
		return ds_errf(err, "out of memory");
	rc = ds_read_file(path, DS_MODEL_MAX_META, &text, &len, err);
	free(path);
	if (rc)
		return -1;
	s->meta_crc = ds_crc32(0, text, len);
	free(text);
	/* the meta checked as a load checks it; model.bin mapped, not read */
	if (ds_model_load(&m, dir, 0, err))
		return -1;
	s->n_expert = m.hp.n_expert;
	ds_model_free(&m);
	if (s->n_expert == 0)
		return ds_errf(err, "%s: --mpi splits the routed experts of a MoE "
			       "model over the ranks; this model has none", dir);
	s->ok = 1;
	return 0;
}

/* The first rank that could not read the model, or whose answer
 * differs from rank 0's, described. */
static int check_same(ds_dist *d, const same_t *all, ds_err *err)
{
	int r;

	for (r = 0; r < d->size; r++)
		if (!all[r].ok)
			return r == 0 || strcmp(all[r].msg, all[0].msg) == 0
			       ? ds_errf(err, "%s", all[r].msg)
			       : ds_errf(err, "rank %d: %s", r, all[r].msg);
	for (r = 1; r < d->size; r++) {
		if (strcmp(all[r].isa, all[0].isa) != 0)
			return ds_errf(err, "rank %d runs the %s kernels, rank 0 %s: "
				       "every rank must compute alike (set DS_ISA "
				       "for all, mpirun -x DS_ISA=...)", r,
				       all[r].isa, all[0].isa);
		if (all[r].meta_crc != all[0].meta_crc)
			return ds_errf(err, "rank %d's model.meta differs from rank "
				       "0's: every rank must load the same model", r);
	}
	return 0;
}

int ds_dist_model(ds_dist *d, const char *dir, ds_err *err)
{
	same_t me, *all;
	ds_err mine;
	int r, rc;

	d->asked = 1;
	if (read_same(dir, &me, &mine))
		snprintf(me.msg, sizeof me.msg, "%s", mine.msg);
	all = ds_calloc((size_t)d->size, sizeof *all, err);
	if (all == NULL)
		ds_dist_fail(d, "out of memory");
	ds_dist_check(d, MPI_Allgather(&me, sizeof me, MPI_BYTE, all, sizeof me,
				       MPI_BYTE, d->comm), "MPI_Allgather");
	rc = check_same(d, all, err);
	free(all);
	if (rc)
		return -1;
	free(d->first);
	d->first = ds_calloc((size_t)d->size + 1, sizeof *d->first, err);
	if (d->first == NULL)
		return -1;
	for (r = 0; r < d->size; r++)
		ds_ep_range(me.n_expert, (uint32_t)d->size, (uint32_t)r, &d->first[r],
			    &d->first[r + 1]);
	d->ep = (ds_fwd_ep){
		.n_part = (uint32_t)d->size, .part = (uint32_t)d->rank, .first = d->first,
		.exchange = ds_dist_exchange,
		.batch = d->rank == 0 ? ds_dist_send_batch : NULL, .arg = d,
	};
	return 0;
}

void ds_dist_experts(const ds_dist *d, uint32_t *first, uint32_t *end)
{
	*first = d->first[d->rank];
	*end = d->first[d->rank + 1];
}

void ds_dist_load_opts(const ds_dist *d, ds_load_opts *o)
{
	o->ep_parts = (uint32_t)d->size;
	o->ep_part = (uint32_t)d->rank;
	o->no_output = d->rank > 0;
}

const ds_fwd_ep *ds_dist_ep(ds_dist *d)
{
	return &d->ep;
}

/* ---- counters ------------------------------------------------------------------------------ */

void ds_dist_local(const ds_dist *d, ds_dist_stats *s)
{
	*s = d->st;
}

void ds_dist_reset_all(ds_dist *d)
{
	ds_dist_send_cmd(d, CMD_RESET, 0);
	memset(&d->st, 0, sizeof d->st);
}

void ds_dist_gather(ds_dist *d, ds_dist_stats *all)
{
	ds_dist_send_cmd(d, CMD_STATS, 0);
	ds_dist_check(d, MPI_Gather(&d->st, sizeof d->st, MPI_BYTE, all,
				    sizeof d->st, MPI_BYTE, 0, d->comm), "MPI_Gather");
}

/*
 * nompi.c - dist.h in a build without MPI (make MPI=0: the AArch64 cross
 * build, whose Debian Open MPI package cannot be installed beside the
 * amd64 compilers).  ds_dist_init refuses with one line, so --mpi is an
 * error there and no other function of dist.h is ever reached: they
 * exist so that the programs link, and keep dist.h's contracts trivially
 * (one rank, every expert, nothing moved).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"

struct ds_dist {
	int unused;
};

int ds_dist_init(ds_dist **d, const ds_dist_opts *o, ds_err *err)
{
	(void)o;
	*d = NULL;
	return ds_errf(err, "--mpi: this build has no MPI (built with MPI=0; "
		       "rebuild where pkg-config finds Open MPI's mpi-c)");
}

void ds_dist_free(ds_dist *d)
{
	free(d);
}

int ds_dist_rank(const ds_dist *d)
{
	(void)d;
	return 0;
}

int ds_dist_size(const ds_dist *d)
{
	(void)d;
	return 1;
}

int ds_dist_model(ds_dist *d, const char *dir, ds_err *err)
{
	(void)d;
	(void)dir;
	return ds_errf(err, "--mpi: this build has no MPI");
}

void ds_dist_experts(const ds_dist *d, uint32_t *first, uint32_t *end)
{
	(void)d;
	*first = 0;
	*end = 0;
}

void ds_dist_load_opts(const ds_dist *d, ds_load_opts *o)
{
	(void)d;
	(void)o;
}

const ds_fwd_ep *ds_dist_ep(ds_dist *d)
{
	(void)d;
	return NULL;
}

int ds_dist_follow(ds_dist *d, ds_fwd *f, ds_kvcache *kv, ds_err *err)
{
	(void)d;
	(void)f;
	(void)kv;
	return ds_errf(err, "--mpi: this build has no MPI");
}

void ds_dist_done(ds_dist *d, int status)
{
	(void)d;
	(void)status;
}

void ds_dist_local(const ds_dist *d, ds_dist_stats *s)
{
	(void)d;
	memset(s, 0, sizeof *s);
}

void ds_dist_reset_all(ds_dist *d)
{
	(void)d;
}

void ds_dist_gather(ds_dist *d, ds_dist_stats *all)
{
	(void)d;
	memset(all, 0, sizeof *all);
}

void ds_dist_fail(ds_dist *d, const char *msg)
{
	(void)d;
	fprintf(stderr, "%s\n", msg);
	exit(1);
}

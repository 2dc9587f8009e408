/*
 * afile.h - output written whole or not at all, and what a signal that
 * ends a program leaves behind.
 *
 * A ds_afile is written under a temporary name beside its destination
 * (DST.tmp-PID) and renamed into place only when complete, so a reader
 * never sees half a file and a failure leaves the old one as it was.
 *
 * Signal cleanup.  A signal that ends a program (SIGINT, SIGTERM, SIGHUP,
 * SIGPIPE) would leave its temporaries behind.  Two ways out:
 *  - ds_cleanup_add registers a path; the handler removes every
 *    registered path (unlink, or rmdir for an empty directory: files
 *    before the directory that holds them, last registered first), then
 *    the signal takes its default action.  ds_afile registers its
 *    temporary itself.
 *  - ds_cleanup_flag: the handler only sets *flag, for a long job that
 *    polls it, removes its own temporaries and then calls
 *    ds_cleanup_raise to end as the signal would have.
 * A signal handler can reach only static storage, so the registry is the
 * one piece of global state outside the kernel table; it is written only
 * from the program's main thread.
 */
#ifndef DS_AFILE_H
#define DS_AFILE_H

#include <signal.h>
#include <stdio.h>

#include "util.h"

typedef struct ds_afile {
	char *dst;           /* the name it gets when complete */
	char *tmp;           /* dst.tmp-PID while it is written */
	FILE *f;             /* open for writing (binary) */
} ds_afile;

int ds_afile_open(ds_afile *a, const char *dst, ds_err *err);
/* Close and rename into place; on failure the temporary is removed. */
int ds_afile_commit(ds_afile *a, ds_err *err);
/* Close and remove the temporary (a no-op on a closed or zeroed one). */
void ds_afile_abort(ds_afile *a);

#define DS_CLEANUP_MAX 8

/* Register path (which must stay valid until ds_cleanup_del); installs
 * the handlers on first use.  -1 when DS_CLEANUP_MAX are registered. */
int ds_cleanup_add(const char *path);
void ds_cleanup_del(const char *path);
/* Handlers that set *flag to the signal's number instead (NULL: back
 * to removing the registered paths). */
void ds_cleanup_flag(volatile sig_atomic_t *flag);
/* End the program with signal sig's default action. */
void ds_cleanup_raise(int sig);

#endif

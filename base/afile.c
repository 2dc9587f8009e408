/* afile.c - output written whole, and cleanup on a signal (afile.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "afile.h"

static const int signals[] = { SIGINT, SIGTERM, SIGHUP, SIGPIPE };

/* The registry (see afile.h for why it is global). */
static const char *volatile paths[DS_CLEANUP_MAX];
static volatile sig_atomic_t *volatile caught;

/* unlink and rmdir are async-signal-safe. */
static void on_signal(int sig)
{
	int i;

	if (caught != NULL) {
		*caught = sig;
		return;
	}
	for (i = DS_CLEANUP_MAX - 1; i >= 0; i--)
		if (paths[i] != NULL && unlink(paths[i]) != 0)
			rmdir(paths[i]);
	ds_cleanup_raise(sig);
}

static void install(void)
{
	struct sigaction sa;
	size_t i;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < sizeof signals / sizeof signals[0]; i++)
		sigaction(signals[i], &sa, NULL);
}

void ds_cleanup_raise(int sig)
{
	signal(sig, SIG_DFL);
	raise(sig);
}

int ds_cleanup_add(const char *path)
{
	int i;

	install();
	for (i = 0; i < DS_CLEANUP_MAX; i++)
		if (paths[i] == NULL) {
			paths[i] = path;
			return 0;
		}
	return -1;
}

void ds_cleanup_del(const char *path)
{
	int i;

	for (i = 0; i < DS_CLEANUP_MAX; i++)
		if (paths[i] == path)
			paths[i] = NULL;
}

void ds_cleanup_flag(volatile sig_atomic_t *flag)
{
	caught = flag;
	install();
}

int ds_afile_open(ds_afile *a, const char *dst, ds_err *err)
{
	size_t n = strlen(dst) + 32;

	memset(a, 0, sizeof a[0]);
	a->dst = strdup(dst);
	a->tmp = malloc(n);
	if (a->dst == NULL || a->tmp == NULL) {
		ds_afile_abort(a);
		return ds_errf(err, "out of memory");
	}
	snprintf(a->tmp, n, "%s.tmp-%ld", dst, (long)getpid());
	a->f = fopen(a->tmp, "wb");
	if (a->f == NULL) {
		int e = errno;

		free(a->dst);
		free(a->tmp);
		memset(a, 0, sizeof a[0]);
		return ds_errf(err, "%s: %s", dst, strerror(e));
	}
	ds_cleanup_add(a->tmp);
	return 0;
}

int ds_afile_commit(ds_afile *a, ds_err *err)
{
	int rc = 0, bad = fclose(a->f) != 0;

	a->f = NULL;
	if (bad)
		rc = ds_errf(err, "%s: write error", a->dst);
	else if (rename(a->tmp, a->dst) != 0)
		rc = ds_errf(err, "%s: %s", a->dst, strerror(errno));
	ds_afile_abort(a);
	return rc;
}

void ds_afile_abort(ds_afile *a)
{
	if (a->f != NULL)
		fclose(a->f);
	if (a->tmp != NULL) {
		unlink(a->tmp);     /* after a commit: already renamed, ENOENT */
		ds_cleanup_del(a->tmp);
	}
	free(a->dst);
	free(a->tmp);
	memset(a, 0, sizeof a[0]);
}

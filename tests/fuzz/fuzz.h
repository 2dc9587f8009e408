/*
 * fuzz.h - what the fuzz targets share (tests/fuzz/README).
 *
 * Each tests/fuzz/fuzz_NAME.c defines
 *	int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
 * and is linked two ways: with libFuzzer (`make fuzz`: clang,
 * -fsanitize=fuzzer,address,undefined) into build/fuzz/bin/fuzz_NAME, and
 * with tests/fuzz/replay.c (the normal build, gcc) into
 * build/tests/test_fuzz_NAME, which `make test` and `make sanitize` run
 * over the committed inputs tests/fuzz/regress/NAME/ and
 * tests/fuzz/corpus/NAME/.
 *
 * A target returns 0 whatever the input; a refusal is a normal outcome.
 * An invariant the code promises (a round trip, a bound) that does not
 * hold is reported with FZ_CHECK, which aborts: libFuzzer then keeps the
 * input as a crash.
 *
 * Parsers that read a path get the input through a file in a private
 * directory under /dev/shm (or $TMPDIR), made once per process and
 * removed at exit.
 */
#ifndef DS_FUZZ_H
#define DS_FUZZ_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_CHECK(e)                                                         \
	do {                                                                \
		if (!(e)) {                                                 \
			fprintf(stderr, "%s:%d: invariant failed: %s\n",     \
				__FILE__, __LINE__, #e);                    \
			abort();                                            \
		}                                                           \
	} while (0)

static char fz_dir_path[256];

static inline void fz_dir_remove(void)
{
	if (fz_dir_path[0] != '\0')
		ds_remove_tree(fz_dir_path);
}

/* The private directory (created on first use). */
static inline const char *fz_dir(void)
{
	const char *t;

	if (fz_dir_path[0] != '\0')
		return fz_dir_path;
	t = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
	snprintf(fz_dir_path, sizeof fz_dir_path, "%s/ds-fuzz.XXXXXX",
		 t != NULL && *t != '\0' ? t : "/tmp");
	if (mkdtemp(fz_dir_path) == NULL) {
		perror(fz_dir_path);
		abort();
	}
	atexit(fz_dir_remove);
	return fz_dir_path;
}

/* fz_dir()/name (a static buffer per call site is not enough: up to 8
 * paths live at once, in rotation). */
static inline const char *fz_path(const char *name)
{
	static char bufs[8][512];
	static unsigned next;
	char *b = bufs[next++ % 8];

	snprintf(b, sizeof bufs[0], "%s/%s", fz_dir(), name);
	return b;
}

/* Make fz_dir()/name a directory (parents must exist). */
static inline const char *fz_mkdir(const char *name)
{
	const char *p = fz_path(name);

	if (mkdir(p, 0755) != 0 && errno != EEXIST) {
		perror(p);
		abort();
	}
	return p;
}

/* Write data to fz_dir()/name, replacing it; returns the path. */
static inline const char *fz_write(const char *name, const void *data,
				   size_t size)
{
	const char *p = fz_path(name);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ds_err err;

	if (fd < 0 || ds_write_all(fd, data, size, p, &err) != 0) {
		fprintf(stderr, "%s: %s\n", p, fd < 0 ? strerror(errno) : err.msg);
		abort();
	}
	close(fd);
	return p;
}

static inline void fz_unlink(const char *name)
{
	unlink(fz_path(name));
}

/* A NUL-terminated copy of the input (free it). */
static inline char *fz_strdup(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	if (s == NULL)
		abort();
	memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

/* Read every byte of [p, p+n): a mapping that is shorter than the loader
 * believes faults here rather than somewhere later.  The sum keeps the
 * loads. */
static inline unsigned fz_touch(const void *p, size_t n)
{
	const volatile uint8_t *b = p;
	unsigned s = 0;

	if (n == 0)
		return 0;
	s += b[0];
	s += b[n / 2];
	s += b[n - 1];
	return s;
}

#endif

/* file.c - mapped files, whole-file reads, writes, paths. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

/* size bytes at a 2 MiB-aligned address (so that the kernel can map 2 MiB
 * pages or page-cache folios with one PMD entry each): the file fd, or
 * zeroed anonymous memory for fd -1, inside a reserved range whose slack
 * either side is given back. */
static void *map_aligned(int fd, size_t size, int prot)
{
	size_t span = size + DS_HUGE_2M, len = (size_t)ds_round_up(size, 4096);
	uint8_t *r, *a;

	if (span < size)
		return MAP_FAILED;
	r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS |
		 MAP_NORESERVE, -1, 0);
	if (r == MAP_FAILED)
		return MAP_FAILED;
	a = (uint8_t *)(uintptr_t)ds_round_up((uintptr_t)r, DS_HUGE_2M);
	if (mmap(a, size, prot, MAP_PRIVATE | MAP_FIXED |
		 (fd < 0 ? MAP_ANONYMOUS | MAP_NORESERVE : 0), fd, 0) == MAP_FAILED) {
		munmap(r, span);
		return MAP_FAILED;
	}
	if (a > r)
		munmap(r, (size_t)(a - r));
	if (r + span > a + len)
		munmap(a + len, (size_t)(r + span - (a + len)));
	return a;
}

void *ds_map_anon_huge(size_t size)
{
	void *p = map_aligned(-1, size ? size : 1, PROT_READ | PROT_WRITE);

	if (p == MAP_FAILED)
		return NULL;
	(void)madvise(p, size ? size : 1, MADV_HUGEPAGE);
	return p;
}

/* ---- the page cache in 2 MiB folios ---------------------------------------- */

long long ds_map_pmd_bytes(const void *p)
{
	char line[512], perm[8];
	unsigned long a, b;
	long long kb = -1;
	int in = 0;
	FILE *f = fopen("/proc/self/smaps", "re");

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof line, f) != NULL) {
		if (sscanf(line, "%lx-%lx %7s", &a, &b, perm) == 3) {
			if (in)
				break;  /* the next mapping */
			in = a == (unsigned long)(uintptr_t)p;
		} else if (in && sscanf(line, "FilePmdMapped: %lld kB", &kb) == 1) {
			break;
		}
	}
	fclose(f);
	return kb < 0 ? -1 : kb * 1024;
}

/* Fault [p, p + n) in, with MADV_WILLNEED before Linux 5.14. */
static void populate(void *p, size_t n)
{
#ifdef MADV_POPULATE_READ
	if (madvise(p, n, MADV_POPULATE_READ) == 0 || errno != EINVAL)
		return; /* EFAULT etc.: a short file, found by its reader */
#endif
	(void)madvise(p, n, MADV_WILLNEED);
}

/* Bytes [0, n) of the file out of the page cache (this mapping's pages
 * of them unmapped first; pages that other processes map stay) and read
 * again through the mapping p, which has the huge advice; -1 if they
 * could not be dropped. */
static int reread(int fd, uint8_t *p, size_t n)
{
	int rc;

	if (madvise(p, n, MADV_DONTNEED) != 0)
		return -1;
	(void)fdatasync(fd);    /* dirty pages are not dropped */
	rc = posix_fadvise(fd, 0, (off_t)n, POSIX_FADV_DONTNEED) != 0 ? -1 : 0;
	populate(p, n);
	return rc;
}

/* Files smaller than this are not checked: their pages cost little either
 * way. */
#define REHUGE_MIN ((size_t)16 << 20)
#define PROBE_BYTES (2 * DS_HUGE_2M)
#define HUGE_ENOUGH 0.9  /* of a mapping in 2 MiB pages: not read again */
_Static_assert(REHUGE_MIN >= PROBE_BYTES, "the probe lies in the file");

/* The part of a mapping of size bytes that maps in 2 MiB pages when pmd
 * bytes do (of those that can: the whole 2 MiB pages of it). */
static double pmd_share(long long pmd, size_t size)
{
	return (double)pmd / (double)(size / DS_HUGE_2M * DS_HUGE_2M);
}

int ds_map_small_pages(const ds_map *m, double *share)
{
	if (m->data == NULL || m->pmd < 0)
		return 0;
	*share = pmd_share(m->pmd, m->size);
	return *share < HUGE_ENOUGH;
}

/* 1 if the file's first PROBE_BYTES lie in the page cache in 2 MiB
 * folios: mapped apart (their own entry in smaps), -1 if smaps does not
 * say. */
static int probe_huge(int fd)
{
	void *q = map_aligned(fd, PROBE_BYTES, PROT_READ);
	long long pmd;

	if (q == MAP_FAILED)
		return -1;
	(void)madvise(q, PROBE_BYTES, MADV_HUGEPAGE);
	populate(q, PROBE_BYTES);
	pmd = ds_map_pmd_bytes(q);
	munmap(q, PROBE_BYTES);
	return pmd < 0 ? -1 : pmd >= (long long)DS_HUGE_2M;
}

/* The page cache of a file written or read cold without the huge advice
 * (a copy, a download, a checksum) holds 4 KiB folios, which map in 4
 * KiB pages however the mapping is advised, and decode from them is
 * markedly slower than from 2 MiB folios, though the read probe reads
 * both alike (docs/perf.md, 2026-12-05 15:13).  So when less than 9/10
 * of the mapping p [size] maps in 2 MiB pages, its pages are dropped and
 * read again (once: later loads find the 2 MiB folios) if the file
 * system gives 2 MiB folios to a cold read, as a cold read of the first
 * PROBE_BYTES shows; otherwise nothing more is read.  Returns the bytes
 * in 2 MiB pages then (ds_map.pmd). */
static long long map_rehuge(int fd, uint8_t *p, size_t size)
{
	long long pmd = ds_map_pmd_bytes(p);
	int h;

	if (pmd < 0 || pmd_share(pmd, size) >= HUGE_ENOUGH)
		return pmd;
	h = probe_huge(fd);
	if (h == 0) {           /* small folios there: read them cold */
		if (reread(fd, p, PROBE_BYTES) != 0)
			return pmd;
		h = probe_huge(fd);
	}
	if (h != 1)
		return pmd;
	(void)reread(fd, p, size);
	return ds_map_pmd_bytes(p);
}

/* DS_MAP_HUGE: MADV_HUGEPAGE before the first fault makes a cold read
 * fill the page cache with 2 MiB folios (PMD-sized readahead), which
 * every later mapping of the file, in any process, maps whole.  With
 * 4 KiB entries each page's first touch in a new mapping costs more than
 * a microsecond on some virtual machines, and the TLB misses cost decode
 * speed throughout.  The populate comes after the advice for that. */
static void map_advise(ds_map *m, void *p, int flags)
{
	if (flags & DS_MAP_HUGE)
		(void)madvise(p, m->size, MADV_HUGEPAGE);
	if (!(flags & DS_MAP_POPULATE))
		return;
	populate(p, m->size);
	if ((flags & DS_MAP_HUGE) && m->size >= REHUGE_MIN)
		m->pmd = map_rehuge(m->fd, p, m->size);
}

int ds_map_open(ds_map *m, const char *path, int flags, ds_err *err)
{
	struct stat st;
	void *p;

	memset(m, 0, sizeof *m);
	m->pmd = -1;
	m->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (m->fd < 0)
		return ds_errf(err, "%s: %s", path, strerror(errno));
	if (fstat(m->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(m->fd);
		m->fd = -1;
		return ds_errf(err, "%s: not a regular file", path);
	}
	m->size = (size_t)st.st_size;
	if (m->size == 0)
		return 0;
	if ((flags & DS_MAP_HUGE) && m->size >= DS_HUGE_2M)
		p = map_aligned(m->fd, m->size, PROT_READ);
	else
		p = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, m->fd, 0);
	if (p == MAP_FAILED) {
		close(m->fd);
		m->fd = -1;
		return ds_errf(err, "%s: mmap: %s", path, strerror(errno));
	}
	map_advise(m, p, flags);
	m->data = p;
	return 0;
}

/* ---- a mapped file truncated under us ------------------------------------- */

static void put_str(const char *s)
{
	if (write(2, s, strlen(s)) < 0)
		_exit(1);
}

/* Async-signal-safe: write(2) and _exit(2) only. */
static void on_sigbus(int sig, siginfo_t *si, void *ctx)
{
	static const char hex[] = "0123456789abcdef";
	char a[2 + 16 + 1], *p = a + sizeof a - 1;
	uintptr_t v = (uintptr_t)si->si_addr;

	(void)ctx;
	if (si->si_code != BUS_ADRERR) {
		/* not a page past the end of a file: the default action */
		signal(sig, SIG_DFL);
		raise(sig);
		return;
	}
	*p = '\0';
	do
		*--p = hex[v & 15];
	while ((v >>= 4) != 0 && p > a + 2);
	*--p = 'x';
	*--p = '0';
	put_str(program_invocation_short_name);
	put_str(": a mapped file (model.bin, tokenizer.bin or a checkpoint) "
		"was truncated while in use (bus error at ");
	put_str(p);
	put_str("); replace model directories, never rewrite their files in "
		"place (ds-model(5))\n");
	_exit(1);
}

void ds_map_guard(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, NULL);
}

void ds_map_close(ds_map *m)
{
	if (m->data != NULL)
		munmap((void *)m->data, m->size);
	if (m->fd >= 0)
		close(m->fd);
	m->data = NULL;
	m->size = 0;
	m->fd = -1;
	m->pmd = -1;
}

int ds_read_file(const char *path, size_t max, char **out, size_t *len,
		 ds_err *err)
{
	struct stat st;
	char *buf;
	size_t n = 0;
	ssize_t r;
	int fd;

	*out = NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ds_errf(err, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return ds_errf(err, "%s: not a regular file", path);
	}
	if ((uint64_t)st.st_size > max) {
		close(fd);
		return ds_errf(err, "%s: %lld bytes, more than the %zu allowed",
			       path, (long long)st.st_size, max);
	}
	buf = malloc((size_t)st.st_size + 1);
	if (buf == NULL) {
		close(fd);
		return ds_errf(err, "%s: out of memory", path);
	}
	while (n < (size_t)st.st_size) {
		r = read(fd, buf + n, (size_t)st.st_size - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			free(buf);
			close(fd);
			return ds_errf(err, "%s: read: %s", path,
				       r < 0 ? strerror(errno) : "short file");
		}
		n += (size_t)r;
	}
	close(fd);
	buf[n] = '\0';
	*out = buf;
	if (len != NULL)
		*len = n;
	return 0;
}

int ds_write_all(int fd, const void *buf, size_t len, const char *path,
		 ds_err *err)
{
	const uint8_t *p = buf;
	ssize_t w;

	while (len > 0) {
		w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return ds_errf(err, "%s: write: %s", path,
				       strerror(errno));
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

char *ds_path_join(const char *dir, const char *name)
{
	size_t a = strlen(dir), b = strlen(name);
	char *p = malloc(a + b + 2);

	if (p == NULL)
		return NULL;
	memcpy(p, dir, a);
	if (a > 0 && dir[a - 1] != '/')
		p[a++] = '/';
	memcpy(p + a, name, b + 1);
	return p;
}

int ds_is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int ds_remove_tree(const char *path)
{
	struct stat st;
	struct dirent *de;
	DIR *d;
	int rc = 0;

	if (lstat(path, &st) != 0)
		return errno == ENOENT ? 0 : -1;
	if (!S_ISDIR(st.st_mode))
		return unlink(path);
	d = opendir(path);
	if (d == NULL)
		return -1;
	while ((de = readdir(d)) != NULL) {
		char *sub;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		sub = ds_path_join(path, de->d_name);
		if (sub == NULL || ds_remove_tree(sub) != 0)
			rc = -1;
		free(sub);
	}
	closedir(d);
	if (rmdir(path) != 0)
		rc = -1;
	return rc;
}

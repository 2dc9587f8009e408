/* file.c - mapped files, whole-file reads, writes, paths. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

int ds_map_open(ds_map *m, const char *path, int flags, ds_err *err)
{
	struct stat st;
	int mflags = MAP_PRIVATE;
	void *p;

	memset(m, 0, sizeof *m);
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
	if (flags & DS_MAP_POPULATE)
		mflags |= MAP_POPULATE;
	p = mmap(NULL, m->size, PROT_READ, mflags, m->fd, 0);
	if (p == MAP_FAILED) {
		close(m->fd);
		m->fd = -1;
		return ds_errf(err, "%s: mmap: %s", path, strerror(errno));
	}
	m->data = p;
	return 0;
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

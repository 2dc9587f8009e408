/* source.c - a checkpoint directory, or an archive of one extracted
 * safely (libarchive) into a temporary directory. */
#define _GNU_SOURCE
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "convert.h"

#define MAX_ENTRIES 1000000
#define MAX_PATH_LEN 1024

/* A relative path with no empty, "." or ".." component issues. */
static int safe_rel(const char *p)
{
	const char *c = p;

	if (*p == '\0' || *p == '/' || strlen(p) > MAX_PATH_LEN)
		return 0;
	while (*c) {
		const char *e = strchr(c, '/');
		size_t n = e ? (size_t)(e - c) : strlen(c);

		if (n == 2 && c[0] == '.' && c[1] == '.')
			return 0;
		c += n;
		while (*c == '/')
			c++;
	}
	return 1;
}

static const char *strip_dot(const char *p)
{
	while (p[0] == '.' && p[1] == '/')
		for (p += 2; *p == '/'; p++)
			;
	return p;
}

/* Bytes the extraction may write: what the file system has free. */
static uint64_t space_left(const char *dir)
{
	struct statvfs sv;

	if (statvfs(dir, &sv) != 0)
		return UINT64_MAX;
	return (uint64_t)sv.f_bavail * sv.f_frsize;
}

/* Which entries are let through: files, directories, and symbolic links
 * that point down inside the archive (relative, no ".."). */
static int check_entry(struct archive_entry *e, const char *name,
		       const char *arc, ds_err *err)
{
	mode_t type = archive_entry_filetype(e);
	const char *link;

	if (!safe_rel(name))
		return ds_errf(err, "%s: entry \"%.200s\": unsafe path", arc, name);
	if (archive_entry_hardlink(e) != NULL)
		return ds_errf(err, "%s: entry \"%.200s\": hard links are not "
			       "accepted", arc, name);
	if (type == AE_IFREG || type == AE_IFDIR)
		return 0;
	if (type == AE_IFLNK) {
		link = archive_entry_symlink(e);
		if (link != NULL && safe_rel(link))
			return 0;
		return ds_errf(err, "%s: entry \"%.200s\": symbolic link to "
			       "\"%.200s\" points outside the archive", arc, name,
			       link ? link : "");
	}
	return ds_errf(err, "%s: entry \"%.200s\": not a file, directory or "
		       "symbolic link", arc, name);
}

/* Open (creating) the directory holding the last component of name,
 * below dirfd, never following a symbolic link; *base is that component. */
static int open_parent(int dirfd, char *name, char **base)
{
	int fd = dup(dirfd);
	char *c = name, *slash;

	while (fd >= 0 && (slash = strchr(c, '/')) != NULL) {
		int nfd;

		*slash = '\0';
		if (*c != '\0' && strcmp(c, ".") != 0) {
			if (mkdirat(fd, c, 0755) != 0 && errno != EEXIST)
				nfd = -1;
			else
				nfd = openat(fd, c, O_RDONLY | O_DIRECTORY |
						     O_NOFOLLOW | O_CLOEXEC);
			close(fd);
			fd = nfd;
		}
		*slash = '/';
		c = slash + 1;
	}
	*base = c;
	return fd;
}

static int write_file(struct archive *a, int fd, la_int64_t size,
		      uint64_t *total, uint64_t limit, const char *arc,
		      const char *name, const volatile sig_atomic_t *cancel,
		      ds_err *err)
{
	const void *buf;
	size_t len;
	la_int64_t off;
	int r;

	/* the size the entry will have, holes of a sparse entry included:
	 * a few bytes of archive may not stand for terabytes to convert */
	if (size >= 0) {
		if ((uint64_t)size > limit - *total)
			return ds_errf(err, "%s: entry \"%.200s\" of %lld bytes: "
				       "extracting needs more than the %llu bytes "
				       "free", arc, name, (long long)size,
				       (unsigned long long)limit);
		*total += (uint64_t)size;
	}
	for (;;) {
		if (cancel != NULL && *cancel)
			return ds_errf(err, "interrupted");
		r = archive_read_data_block(a, &buf, &len, &off);
		if (r == ARCHIVE_EOF) /* a trailing hole of a sparse file */
			return size < 0 || ftruncate(fd, (off_t)size) == 0 ? 0 :
				ds_errf(err, "%s: entry \"%.200s\": %s", arc, name,
					strerror(errno));
		if (r != ARCHIVE_OK)
			return ds_errf(err, "%s: entry \"%.200s\": %s", arc, name,
				       archive_error_string(a));
		if (size >= 0 && (off < 0 || (uint64_t)off + len > (uint64_t)size))
			return ds_errf(err, "%s: entry \"%.200s\": more data than "
				       "its size", arc, name);
		if (size < 0)
			*total += len;
		if (*total > limit)
			return ds_errf(err, "%s: extracting it needs more than the "
				       "%llu bytes free", arc,
				       (unsigned long long)limit);
		while (len > 0) {
			ssize_t w = pwrite(fd, buf, len, (off_t)off);

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				return ds_errf(err, "%s: entry \"%.200s\": write: %s",
					       arc, name, strerror(errno));
			buf = (const uint8_t *)buf + w;
			len -= (size_t)w;
			off += w;
		}
	}
}

/* One entry below dirfd: a file, a directory or a symbolic link. */
static int put_entry(struct archive *a, struct archive_entry *e, int dirfd,
		     const char *name, uint64_t *total, uint64_t limit,
		     const char *arc, const volatile sig_atomic_t *cancel,
		     ds_err *err)
{
	char *path = strdup(name), *base;
	mode_t type = archive_entry_filetype(e);
	int pfd, fd, rc = -1;

	if (path == NULL)
		return ds_errf(err, "%s: out of memory", arc);
	while (strlen(path) > 1 && path[strlen(path) - 1] == '/')
		path[strlen(path) - 1] = '\0';
	pfd = open_parent(dirfd, path, &base);
	if (pfd < 0) {
		ds_errf(err, "%s: entry \"%.200s\": %s", arc, name, errno == ELOOP ||
			errno == ENOTDIR ? "through a symbolic link or a file" :
			strerror(errno));
		goto out;
	}
	if (type == AE_IFDIR) {
		if (mkdirat(pfd, base, 0755) == 0 || errno == EEXIST)
			rc = 0;
	} else if (type == AE_IFLNK) {
		if (symlinkat(archive_entry_symlink(e), pfd, base) == 0)
			rc = 0;
	} else {
		fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
					       O_CLOEXEC, 0644);
		if (fd >= 0) {
			rc = write_file(a, fd, archive_entry_size_is_set(e) ?
						archive_entry_size(e) : -1, total, limit,
					arc, name, cancel, err);
			close(fd);
			close(pfd);
			free(path);
			return rc;
		}
	}
	if (rc)
		ds_errf(err, "%s: entry \"%.200s\": %s", arc, name, strerror(errno));
	close(pfd);
out:
	free(path);
	return rc;
}

static int extract(const char *arc, const char *dir,
		   const volatile sig_atomic_t *cancel, ds_err *err)
{
	struct archive *a = archive_read_new();
	struct archive_entry *e;
	uint64_t total = 0, limit = space_left(dir), n = 0;
	int r, rc = -1, dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	archive_read_support_filter_all(a);
	archive_read_support_format_tar(a);
	archive_read_support_format_gnutar(a);
	archive_read_support_format_zip(a);
	if (dirfd < 0) {
		ds_errf(err, "%s: %s", dir, strerror(errno));
		goto out;
	}
	if (archive_read_open_filename(a, arc, 1 << 16) != ARCHIVE_OK) {
		ds_errf(err, "%s: %s", arc, archive_error_string(a));
		goto out;
	}
	while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
		const char *name = strip_dot(archive_entry_pathname(e));

		if (++n > MAX_ENTRIES) {
			ds_errf(err, "%s: more than %d entries", arc, MAX_ENTRIES);
			goto out;
		}
		if (*name == '\0' && archive_entry_filetype(e) == AE_IFDIR)
			continue; /* "./" itself */
		if (check_entry(e, name, arc, err) ||
		    put_entry(a, e, dirfd, name, &total, limit, arc, cancel, err))
			goto out;
	}
	if (r != ARCHIVE_EOF) {
		ds_errf(err, "%s: %s", arc, archive_error_string(a));
		goto out;
	}
	if (n == 0) {
		ds_errf(err, "%s: empty archive", arc);
		goto out;
	}
	rc = 0;
out:
	if (dirfd >= 0)
		close(dirfd);
	archive_read_free(a);
	return rc;
}

static int has_config(const char *dir)
{
	char *p = ds_path_join(dir, "config.json");
	int ok = p != NULL && access(p, F_OK) == 0;

	free(p);
	return ok;
}

/* The checkpoint inside: the top level, or its only directory. */
static char *find_root(const char *dir, const char *arc, ds_err *err)
{
	struct dirent *de;
	char *only = NULL;
	int n = 0;
	DIR *d;

	if (has_config(dir))
		return strdup(dir);
	d = opendir(dir);
	while (d != NULL && (de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		n++;
		free(only);
		only = ds_path_join(dir, de->d_name);
	}
	if (d != NULL)
		closedir(d);
	if (n == 1 && only != NULL && ds_is_dir(only) && has_config(only))
		return only;
	free(only);
	ds_errf(err, "%s: no config.json at the top of the archive or in its "
		"only directory", arc);
	return NULL;
}

int ds_source_open(ds_source *s, const char *src, const char *near,
		   const volatile sig_atomic_t *cancel, ds_err *err)
{
	struct stat st;

	memset(s, 0, sizeof *s);
	s->tmp.fd = -1;
	if (stat(src, &st) != 0)
		return ds_errf(err, "%s: %s", src, strerror(errno));
	if (S_ISDIR(st.st_mode)) {
		s->dir = strdup(src);
		return s->dir ? 0 : ds_errf(err, "%s: out of memory", src);
	}
	if (!S_ISREG(st.st_mode))
		return ds_errf(err, "%s: not a directory or an archive", src);
	if (ds_tmpdir_create(&s->tmp, near, err))
		return -1;
	if (extract(src, s->tmp.path, cancel, err) ||
	    (s->dir = find_root(s->tmp.path, src, err)) == NULL) {
		ds_source_close(s);
		return -1;
	}
	return 0;
}

void ds_source_close(ds_source *s)
{
	ds_tmpdir_remove(&s->tmp);
	free(s->dir);
	s->dir = NULL;
}

/* source.c - a checkpoint directory, or an archive of one extracted
 * safely (libarchive) into a temporary directory. */
#define _GNU_SOURCE
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
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

static int copy_data(struct archive *a, struct archive *w, uint64_t *total,
		     uint64_t limit, const char *arc, const char *name,
		     const volatile sig_atomic_t *cancel, ds_err *err)
{
	const void *buf;
	size_t len;
	la_int64_t off;
	int r;

	for (;;) {
		if (cancel != NULL && *cancel)
			return ds_errf(err, "interrupted");
		r = archive_read_data_block(a, &buf, &len, &off);
		if (r == ARCHIVE_EOF)
			return 0;
		if (r != ARCHIVE_OK)
			return ds_errf(err, "%s: entry \"%.200s\": %s", arc, name,
				       archive_error_string(a));
		*total += len;
		if (*total > limit)
			return ds_errf(err, "%s: extracting it needs more than the "
				       "%llu bytes free", arc,
				       (unsigned long long)limit);
		if (archive_write_data_block(w, buf, len, off) != ARCHIVE_OK)
			return ds_errf(err, "%s: entry \"%.200s\": %s", arc, name,
				       archive_error_string(w));
	}
}

static int extract(const char *arc, const char *dir,
		   const volatile sig_atomic_t *cancel, ds_err *err)
{
	struct archive *a = archive_read_new(), *w = archive_write_disk_new();
	struct archive_entry *e;
	uint64_t total = 0, limit = space_left(dir), n = 0;
	int r, rc = -1;

	archive_read_support_filter_all(a);
	archive_read_support_format_tar(a);
	archive_read_support_format_gnutar(a);
	archive_read_support_format_zip(a);
	archive_write_disk_set_options(w, ARCHIVE_EXTRACT_SECURE_SYMLINKS |
					   ARCHIVE_EXTRACT_SECURE_NODOTDOT |
					   ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS |
					   ARCHIVE_EXTRACT_NO_OVERWRITE);
	if (archive_read_open_filename(a, arc, 1 << 16) != ARCHIVE_OK) {
		ds_errf(err, "%s: %s", arc, archive_error_string(a));
		goto out;
	}
	while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
		const char *name = strip_dot(archive_entry_pathname(e));
		char *full;

		if (++n > MAX_ENTRIES) {
			ds_errf(err, "%s: more than %d entries", arc, MAX_ENTRIES);
			goto out;
		}
		if (*name == '\0' && archive_entry_filetype(e) == AE_IFDIR)
			continue; /* "./" itself */
		if (check_entry(e, name, arc, err))
			goto out;
		full = ds_path_join(dir, name);
		if (full == NULL) {
			ds_errf(err, "%s: out of memory", arc);
			goto out;
		}
		archive_entry_set_pathname(e, full);
		free(full);
		if (archive_write_header(w, e) != ARCHIVE_OK) {
			ds_errf(err, "%s: entry \"%.200s\": %s", arc, name,
				archive_error_string(w));
			goto out;
		}
		if (archive_entry_filetype(e) == AE_IFREG &&
		    copy_data(a, w, &total, limit, arc, name, cancel, err))
			goto out;
		if (archive_write_finish_entry(w) != ARCHIVE_OK) {
			ds_errf(err, "%s: entry \"%.200s\": %s", arc, name,
				archive_error_string(w));
			goto out;
		}
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
	archive_read_free(a);
	archive_write_free(w);
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

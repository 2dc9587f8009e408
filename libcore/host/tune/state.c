/* state.c - the record of what apply changed, so revert can undo it.
 *
 *	{ "format": "ds-tune-state", "version": 1, "root": "/",
 *	  "state_dir_created": false,
 *	  "entries": [ { "op": "write", "path": "/sys/...", "old": "powersave\n" },
 *		       { "op": "write", "path": "/sys/fs/cgroup/ds-tune/cpu.weight",
 *			 "old": null },
 *		       { "op": "mkdir", "path": "/sys/fs/cgroup/ds-tune" } ] }
 *
 * "old" is the file's exact content before the first apply that changed
 * it (null: the file did not exist).  Entries are in the order applied;
 * revert undoes them newest first.  The file is only ever replaced whole
 * (temporary file, fsync, rename, fsync of the directory), so a crash
 * leaves either the old or the new record, never a torn one. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define STATE_MAX (64u << 20)

static char *dir_of(const char *file)
{
	char *copy = strdup(file), *d;

	if (copy == NULL)
		return NULL;
	d = strdup(dirname(copy));
	free(copy);
	return d;
}

int ds_tstate_open(ds_tstate *st, const char *file, const char *root,
		   int create, ds_err *err)
{
	memset(st, 0, sizeof *st);
	st->lock_fd = -1;
	snprintf(st->root, sizeof st->root, "%s", root[0] ? root : "/");
	st->file = strdup(file);
	st->dir = dir_of(file);
	if (st->file == NULL || st->dir == NULL) {
		ds_tstate_close(st);
		return ds_errf(err, "%s: out of memory", file);
	}
	if (!ds_is_dir(st->dir)) {
		if (!create) {
			ds_errf(err, "%s: no ds-tune state (nothing applied)",
				file);
			ds_tstate_close(st);
			return -1;
		}
		if (mkdir(st->dir, 0700) != 0) {
			ds_errf(err, "%s: mkdir: %s", st->dir, strerror(errno));
			ds_tstate_close(st);
			return -1;
		}
		st->dir_created = 1;
	}
	/* one ds-tune at a time: a lock on the state's directory */
	st->lock_fd = open(st->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (st->lock_fd < 0 || flock(st->lock_fd, LOCK_EX | LOCK_NB) != 0) {
		ds_errf(err, "%s: %s", st->dir, errno == EWOULDBLOCK
			? "another ds-tune is applying or reverting"
			: strerror(errno));
		ds_tstate_close(st);
		return -1;
	}
	return 0;
}

void ds_tstate_close(ds_tstate *st)
{
	for (int i = 0; i < st->n; i++) {
		free(st->e[i].path);
		free(st->e[i].old);
	}
	free(st->e);
	if (st->lock_fd >= 0)
		close(st->lock_fd);
	free(st->file);
	free(st->dir);
	memset(st, 0, sizeof *st);
	st->lock_fd = -1;
}

static int load_entry(ds_tstate *st, json_t *o, size_t i, ds_err *err)
{
	const char *op = json_string_value(json_object_get(o, "op"));
	const char *path = json_string_value(json_object_get(o, "path"));
	json_t *old = json_object_get(o, "old");
	char where[300];
	int mk = op != NULL && strcmp(op, "mkdir") == 0;

	snprintf(where, sizeof where, "%s: entries[%zu]", st->file, i);
	if (op == NULL || path == NULL ||
	    (!mk && (strcmp(op, "write") != 0 ||
		     !(json_is_string(old) || json_is_null(old)))))
		return ds_errf(err, "%s: needs op \"write\" with path and old, "
			       "or \"mkdir\" with path", where);
	if (ds_tune_check_path(path, where, err) != 0)
		return -1;
	return ds_tstate_add(st, mk ? DS_TUNE_MKDIR : DS_TUNE_WRITE, path,
			     mk || json_is_null(old) ? NULL
			     : json_string_value(old),
			     mk || json_is_null(old) ? 0
			     : json_string_length(old), err);
}

int ds_tstate_load(ds_tstate *st, int *exists, ds_err *err)
{
	char *text;
	int missing, rc = 0;
	json_error_t je;
	json_t *root, *es, *o;
	const char *fmt, *r;
	size_t i;

	*exists = 0;
	if (ds_sys_read(st->file, STATE_MAX, &text, &missing, err) != 0)
		return missing ? 0 : -1;
	*exists = 1;
	root = json_loads(text, 0, &je);
	free(text);
	if (root == NULL)
		return ds_errf(err, "%s: line %d: %s", st->file, je.line,
			       je.text);
	fmt = json_string_value(json_object_get(root, "format"));
	r = json_string_value(json_object_get(root, "root"));
	es = json_object_get(root, "entries");
	if (fmt == NULL || strcmp(fmt, "ds-tune-state") != 0 ||
	    json_integer_value(json_object_get(root, "version")) != 1 ||
	    r == NULL || !json_is_array(es))
		rc = ds_errf(err, "%s: not a ds-tune state (format "
			     "\"ds-tune-state\", version 1, root, entries)",
			     st->file);
	else if (strcmp(r, st->root) != 0)
		rc = ds_errf(err, "%s: recorded for root %s, not %s", st->file,
			     r, st->root);
	if (rc == 0 && json_is_true(json_object_get(root, "state_dir_created")))
		st->dir_created = 1;
	json_array_foreach(es, i, o) {
		if (rc != 0)
			break;
		rc = load_entry(st, o, i, err);
	}
	json_decref(root);
	return rc;
}

int ds_tstate_find(const ds_tstate *st, int op, const char *path)
{
	for (int i = 0; i < st->n; i++)
		if (st->e[i].op == op && strcmp(st->e[i].path, path) == 0)
			return i;
	return -1;
}

int ds_tstate_add(ds_tstate *st, int op, const char *path, const char *old,
		  size_t old_len, ds_err *err)
{
	ds_tentry *e;

	if (st->n == st->cap) {
		int cap = st->cap ? st->cap * 2 : 16;
		ds_tentry *nv = realloc(st->e, (size_t)cap * sizeof *nv);

		if (nv == NULL)
			return ds_errf(err, "%s: out of memory", st->file);
		st->e = nv;
		st->cap = cap;
	}
	e = &st->e[st->n];
	e->op = op;
	e->path = strdup(path);
	e->old = old != NULL ? strndup(old, old_len) : NULL;
	if (e->path == NULL || (old != NULL && e->old == NULL)) {
		free(e->path);
		free(e->old);
		return ds_errf(err, "%s: out of memory", st->file);
	}
	st->n++;
	return 0;
}

/* Drop the entries from `from` on. */
void ds_tstate_truncate(ds_tstate *st, int from)
{
	while (st->n > from) {
		st->n--;
		free(st->e[st->n].path);
		free(st->e[st->n].old);
	}
}

static char *state_json(const ds_tstate *st)
{
	json_t *es = json_array(), *root;
	char *s;

	for (int i = 0; es != NULL && i < st->n; i++) {
		const ds_tentry *e = &st->e[i];
		json_t *o = json_pack("{s:s, s:s}", "op", e->op == DS_TUNE_MKDIR
				      ? "mkdir" : "write", "path", e->path);

		if (o != NULL && e->op == DS_TUNE_WRITE &&
		    json_object_set_new(o, "old", e->old != NULL
					? json_string(e->old) : json_null()) != 0) {
			json_decref(o);
			o = NULL;
		}
		if (o == NULL || json_array_append_new(es, o) != 0) {
			json_decref(es);
			return NULL;
		}
	}
	root = json_pack("{s:s, s:i, s:s, s:b, s:o}", "format", "ds-tune-state",
			 "version", 1, "root", st->root, "state_dir_created",
			 st->dir_created, "entries", es);
	s = root != NULL ? json_dumps(root, JSON_INDENT(1)) : NULL;
	json_decref(root);
	return s;
}

int ds_tstate_save(const ds_tstate *st, ds_err *err)
{
	char *tmp = NULL, *s = state_json(st);
	int fd = -1, rc = -1;

	if (s == NULL)
		return ds_errf(err, "%s: cannot make JSON (a value that is not "
			       "UTF-8?)", st->file);
	if (asprintf(&tmp, "%s.tmp", st->file) < 0) {
		tmp = NULL;
		ds_errf(err, "%s: out of memory", st->file);
		goto out;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		ds_errf(err, "%s: %s", tmp, strerror(errno));
		goto out;
	}
	if (ds_write_all(fd, s, strlen(s), tmp, err) != 0 ||
	    ds_write_all(fd, "\n", 1, tmp, err) != 0)
		goto out;
	if (fsync(fd) != 0 || close(fd) != 0) {
		fd = -1;
		ds_errf(err, "%s: %s", tmp, strerror(errno));
		goto out;
	}
	fd = -1;
	if (rename(tmp, st->file) != 0) {
		ds_errf(err, "%s: rename: %s", st->file, strerror(errno));
		goto out;
	}
	fsync(st->lock_fd); /* the directory: make the rename durable */
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	if (rc != 0 && tmp != NULL)
		unlink(tmp);
	free(tmp);
	free(s);
	return rc;
}

int ds_tstate_remove(ds_tstate *st, ds_err *err)
{
	char *tmp = NULL;

	if (unlink(st->file) != 0 && errno != ENOENT)
		return ds_errf(err, "%s: %s", st->file, strerror(errno));
	if (asprintf(&tmp, "%s.tmp", st->file) >= 0) {
		unlink(tmp);
		free(tmp);
	}
	if (st->dir_created && rmdir(st->dir) != 0 && errno != ENOTEMPTY &&
	    errno != EEXIST && errno != ENOENT)
		return ds_errf(err, "%s: rmdir: %s", st->dir, strerror(errno));
	return 0;
}

/* apply.c - apply a plan, roll it back when a write fails, revert it.
 *
 * Apply reads every target first, records the values about to change
 * in the state file (state.c) in one atomic write, and only then writes.
 * Killed at any point after that, the state holds every old value, and
 * revert restores them all: restoring a value that was never changed
 * writes what is already there, and removing a directory that was never
 * made finds nothing to remove. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <linux/magic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "internal.h"

#define VALUE_MAX (1u << 20) /* a setting's file, as read before writing */

/* One action as apply sees it. */
typedef struct change {
	const ds_tune_action *act;
	char full[512];    /* root + path */
	char *before;      /* exact content; NULL: absent (or a new dir) */
	int same;          /* nothing to do */
	int recorded;      /* this call added its state entry */
	int done;          /* written */
} change;

static int is_subtree(const char *path)
{
	const char *b = strrchr(path, '/');

	return b != NULL && strcmp(b + 1, "cgroup.subtree_control") == 0;
}

/* A kernel file renders its own content ("always [madvise] never") and
 * takes only a value; a plain file (a fake tree) takes back its bytes. */
static int on_kernel_fs(const char *full)
{
	struct statfs s;
	char *copy = strdup(full);
	int r;

	if (copy == NULL)
		return 0;
	r = statfs(full, &s) == 0 || statfs(dirname(copy), &s) == 0;
	free(copy);
	return r && (s.f_type == SYSFS_MAGIC || s.f_type == PROC_SUPER_MAGIC ||
		     s.f_type == CGROUP2_SUPER_MAGIC ||
		     s.f_type == CGROUP_SUPER_MAGIC);
}

static int write_bytes(const char *full, const char *s, size_t n, int create,
		       ds_err *err)
{
	int fd = open(full, O_WRONLY | O_TRUNC | O_CLOEXEC |
		      (create ? O_CREAT : 0), 0644);

	if (fd < 0)
		return ds_errf(err, "%s: %s", full, strerror(errno));
	/* one write(2): sysfs takes a value in one call */
	if (ds_write_all(fd, s, n, full, err) != 0) {
		close(fd);
		return -1;
	}
	if (close(fd) != 0)
		return ds_errf(err, "%s: write: %s", full, strerror(errno));
	return 0;
}

static int write_value(const char *full, const char *value, int create,
		       ds_err *err)
{
	char *line;
	int rc;

	if (asprintf(&line, "%s\n", value) < 0)
		return ds_errf(err, "%s: out of memory", full);
	rc = write_bytes(full, line, strlen(line), create, err);
	free(line);
	return rc;
}

/* Controllers enabled now that `old` did not have: "-cpu -cpuset". */
static int subtree_restore(const char *full, const char *old, ds_err *err)
{
	char *cur, off[256] = "";
	size_t n = 0;

	if (ds_sys_read(full, VALUE_MAX, &cur, NULL, err) != 0)
		return -1;
	for (char *w = strtok(cur, " \t\n"); w != NULL; w = strtok(NULL, " \t\n"))
		if (!ds_word_in(old, w) && n + strlen(w) + 3 < sizeof off)
			n += (size_t)snprintf(off + n, sizeof off - n, "%s-%s",
					      n ? " " : "", w);
	free(cur);
	return n == 0 ? 0 : write_value(full, off, 0, err);
}

/* Put `full` back as `old` was (NULL: it did not exist). */
static int restore(int op, const char *full, const char *path,
		   const char *old, ds_err *err)
{
	char sel[256];

	if (op == DS_TUNE_MKDIR) {
		if (rmdir(full) != 0 && errno != ENOENT)
			return ds_errf(err, "%s: rmdir: %s", full,
				       strerror(errno));
		return 0;
	}
	if (old == NULL) {
		/* made by the kernel with its directory, which goes next */
		if (on_kernel_fs(full))
			return 0;
		if (unlink(full) != 0 && errno != ENOENT)
			return ds_errf(err, "%s: unlink: %s", full,
				       strerror(errno));
		return 0;
	}
	if (!on_kernel_fs(full))
		return write_bytes(full, old, strlen(old), 0, err);
	if (is_subtree(path))
		return subtree_restore(full, old, err);
	ds_sys_selected(old, sel, sizeof sel);
	return write_value(full, sel, 0, err);
}

/* ---- reading what the plan would change ---------------------------------------- */

static int same_value(const ds_tune_action *a, const char *cur)
{
	char sel[256], *copy, *w;
	int same = 1;

	if (!is_subtree(a->path)) {
		ds_sys_selected(cur, sel, sizeof sel);
		return strcmp(sel, a->value) == 0;
	}
	copy = strdup(a->value);
	if (copy == NULL)
		return 0;
	for (w = strtok(copy, " "); w != NULL; w = strtok(NULL, " "))
		same &= w[0] == '-' ? !ds_word_in(cur, w + 1)
				    : ds_word_in(cur, w + (w[0] == '+'));
	free(copy);
	return same;
}

/* A file may be missing only inside a directory that apply makes (on a
 * fake tree; the kernel fills a new cgroup with its files itself). */
static int parent_made(const ds_tune_plan *p, int upto, const ds_tstate *st,
		       const char *path)
{
	const char *slash = strrchr(path, '/');
	size_t n = slash != NULL ? (size_t)(slash - path) : 0;

	for (int i = 0; i < upto; i++)
		if (p->act[i].op == DS_TUNE_MKDIR &&
		    strlen(p->act[i].path) == n &&
		    strncmp(p->act[i].path, path, n) == 0)
			return 1;
	for (int i = 0; st != NULL && i < st->n; i++)
		if (st->e[i].op == DS_TUNE_MKDIR && strlen(st->e[i].path) == n &&
		    strncmp(st->e[i].path, path, n) == 0)
			return 1;
	return 0;
}

static int read_one(const ds_tune_plan *p, int i, const char *root,
		    const ds_tstate *st, change *c, ds_err *err)
{
	const ds_tune_action *a = &p->act[i];
	int missing;

	c->act = a;
	if (ds_sys_path(root, a->path, c->full, sizeof c->full) != 0)
		return ds_errf(err, "%s%s: path too long", root, a->path);
	if (a->op == DS_TUNE_MKDIR) {
		struct stat sb;

		if (stat(c->full, &sb) == 0 && !S_ISDIR(sb.st_mode))
			return ds_errf(err, "%s: exists and is not a directory",
				       c->full);
		c->same = ds_is_dir(c->full);
		return 0;
	}
	if (ds_sys_read(c->full, VALUE_MAX, &c->before, &missing, err) != 0) {
		if (!missing || !parent_made(p, i, st, a->path))
			return -1;
		c->before = NULL;
		return 0;
	}
	c->same = same_value(a, c->before);
	return 0;
}

static void free_changes(change *c, int n)
{
	for (int i = 0; c != NULL && i < n; i++)
		free(c[i].before);
	free(c);
}

static change *read_all(const ds_tune_plan *p, const char *root,
			const ds_tstate *st, ds_err *err)
{
	change *c = ds_calloc((size_t)p->n_act + 1, sizeof *c, err);

	for (int i = 0; c != NULL && i < p->n_act; i++)
		if (read_one(p, i, root, st, &c[i], err) != 0) {
			free_changes(c, p->n_act);
			return NULL;
		}
	return c;
}

int ds_tune_preview(const ds_tune_plan *p, const char *root,
		    ds_tune_change **out, ds_err *err)
{
	change *c = read_all(p, root != NULL ? root : "", NULL, err);

	*out = NULL;
	if (c == NULL)
		return -1;
	*out = ds_calloc((size_t)p->n_act + 1, sizeof **out, err);
	for (int i = 0; *out != NULL && i < p->n_act; i++) {
		ds_tune_change *o = &(*out)[i];

		o->act = c[i].act;
		o->same = c[i].same;
		if (c[i].act->op == DS_TUNE_MKDIR)
			snprintf(o->before, sizeof o->before, "%s",
				 c[i].same ? "(exists)" : "(none)");
		else if (c[i].before == NULL)
			snprintf(o->before, sizeof o->before, "(none)");
		else
			ds_sys_selected(c[i].before, o->before, sizeof o->before);
	}
	free_changes(c, p->n_act);
	return *out != NULL ? 0 : -1;
}

/* ---- apply ---------------------------------------------------------------------- */

static int warn_add(ds_tune_report *r, const char *msg)
{
	char **nv = realloc(r->warn, (size_t)(r->n_warn + 1) * sizeof *nv);

	if (nv == NULL)
		return -1;
	r->warn = nv;
	r->warn[r->n_warn] = strdup(msg);
	if (r->warn[r->n_warn] == NULL)
		return -1;
	r->n_warn++;
	return 0;
}

/* Record what is about to change (keeping older records) in one save;
 * on failure nothing is recorded (and nothing has been written). */
static int record(ds_tstate *st, change *c, int n, int *first_new,
		  ds_err *err)
{
	int rc = 0;

	*first_new = st->n;
	for (int i = 0; rc == 0 && i < n; i++) {
		const ds_tune_action *a = c[i].act;

		if (c[i].same || ds_tstate_find(st, a->op, a->path) >= 0)
			continue;
		rc = ds_tstate_add(st, a->op, a->path, c[i].before,
				   c[i].before ? strlen(c[i].before) : 0, err);
		c[i].recorded = rc == 0;
	}
	if (rc == 0 && st->n > *first_new)
		rc = ds_tstate_save(st, err);
	if (rc != 0)
		ds_tstate_truncate(st, *first_new);
	return rc;
}

/* The kernel may reserve fewer huge pages than asked (fragmented memory). */
static int check_hugepages(const change *c, ds_err *err)
{
	const char *b = strrchr(c->act->path, '/');
	char *now;
	long long got;

	if (b == NULL || strcmp(b + 1, "nr_hugepages") != 0)
		return 0;
	if (ds_sys_read(c->full, VALUE_MAX, &now, NULL, err) != 0)
		return -1;
	got = atoll(now);
	free(now);
	if (got < atoll(c->act->value))
		return ds_errf(err, "%s: asked for %s huge pages, the kernel "
			       "reserved %lld (not enough free contiguous "
			       "memory: reserve them at boot with hugepages=%s)",
			       c->full, c->act->value, got, c->act->value);
	return 0;
}

/* Make the change; c->done once anything changed, even when the kernel
 * then took less than asked (huge pages). */
static int do_one(change *c, ds_err *err)
{
	if (c->act->op == DS_TUNE_MKDIR) {
		if (mkdir(c->full, 0755) != 0)
			return ds_errf(err, "%s: mkdir: %s", c->full,
				       strerror(errno));
		c->done = 1;
		return 0;
	}
	if (write_value(c->full, c->act->value, c->before == NULL, err) != 0)
		return -1;
	c->done = 1;
	return check_hugepages(c, err);
}

/* Append to err's message, as far as it fits. */
static void err_append(ds_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void err_append(ds_err *err, const char *fmt, ...)
{
	size_t n = strlen(err->msg);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err->msg + n, sizeof err->msg - n, fmt, ap);
	va_end(ap);
}

/* Undo what this call did, newest first; the first failure is appended
 * to err's message. */
static void roll_back(change *c, int n, ds_tstate *st, int first_new,
		      ds_err *err)
{
	int undone = 0, failed = 0;
	ds_err e2;

	for (int i = n - 1; i >= 0; i--) {
		if (!c[i].done)
			continue;
		if (restore(c[i].act->op, c[i].full, c[i].act->path,
			    c[i].before, &e2) != 0) {
			if (failed++ == 0)
				err_append(err, "; and restoring failed: %s",
					   e2.msg);
			continue;
		}
		undone++;
	}
	if (failed) {
		err_append(err, " (the state keeps the old values: run "
			   "ds-tune revert)");
		return;
	}
	ds_tstate_truncate(st, first_new);
	if (st->n == 0)
		ds_tstate_remove(st, NULL);
	else
		ds_tstate_save(st, NULL);
	err_append(err, " (restored the %d change%s made before it)", undone,
		   undone == 1 ? "" : "s");
}

/* A best-effort write failed: forget its record, keep going. */
static int skip_one(change *c, ds_tstate *st, ds_tune_report *r,
		    ds_err *werr, ds_err *err)
{
	if (warn_add(r, werr->msg) != 0)
		return ds_errf(err, "out of memory");
	if (c->recorded) {
		int k = ds_tstate_find(st, c->act->op, c->act->path);

		free(st->e[k].path);
		free(st->e[k].old);
		memmove(&st->e[k], &st->e[k + 1],
			(size_t)(st->n - k - 1) * sizeof *st->e);
		st->n--;
		c->recorded = 0;
		return ds_tstate_save(st, err);
	}
	return 0;
}

static int write_all(change *c, int n, ds_tstate *st, int first_new,
		     ds_tune_report *r, ds_err *err)
{
	for (int i = 0; i < n; i++) {
		ds_err werr;

		if (c[i].same)
			continue;
		if (do_one(&c[i], &werr) == 0) {
			r->changed++;
			continue;
		}
		if (!c[i].done && strncmp(c[i].act->path, "/proc/irq/", 10) == 0) {
			if (skip_one(&c[i], st, r, &werr, err) != 0)
				return -1;
			continue;
		}
		*err = werr;
		roll_back(c, n, st, first_new, err);
		return -1;
	}
	return 0;
}

int ds_tune_apply(const ds_tune_plan *p, const char *root,
		  const char *state, ds_tune_report *r, ds_err *err)
{
	ds_tstate st;
	change *c;
	int exists, first_new, rc = -1;

	memset(r, 0, sizeof *r);
	root = root != NULL ? root : "";
	if (ds_tstate_open(&st, state, root, 1, err) != 0)
		return -1;
	if (ds_tstate_load(&st, &exists, err) != 0 ||
	    (c = read_all(p, root, &st, err)) == NULL) {
		if (!exists && st.dir_created)
			ds_tstate_remove(&st, NULL);
		ds_tstate_close(&st);
		return -1;
	}
	for (int i = 0; i < p->n_act; i++)
		r->same += c[i].same;
	if (record(&st, c, p->n_act, &first_new, err) == 0 &&
	    write_all(c, p->n_act, &st, first_new, r, err) == 0)
		rc = 0;
	if (st.n == 0 && (rc == 0 || !exists))
		ds_tstate_remove(&st, NULL); /* nothing to revert: no state */
	free_changes(c, p->n_act);
	ds_tstate_close(&st);
	return rc;
}

/* ---- revert ----------------------------------------------------------------------- */

int ds_tune_revert(const char *root, const char *state, ds_tune_report *r,
		   ds_err *err)
{
	ds_tstate st;
	int exists, failed = 0, kept = 0;
	char full[512];
	ds_err e2;

	memset(r, 0, sizeof *r);
	root = root != NULL ? root : "";
	if (ds_tstate_open(&st, state, root, 0, err) != 0)
		return -1;
	if (ds_tstate_load(&st, &exists, err) != 0 || !exists) {
		if (!exists)
			ds_errf(err, "%s: no ds-tune state (nothing applied)",
				state);
		ds_tstate_close(&st);
		return -1;
	}
	for (int i = st.n - 1; i >= 0; i--) {
		ds_tentry *e = &st.e[i];

		if (ds_sys_path(root, e->path, full, sizeof full) == 0 &&
		    restore(e->op, full, e->path, e->old, &e2) == 0) {
			r->changed++;
			e->op = -1; /* done */
			continue;
		}
		if (failed++ == 0)
			*err = e2;
	}
	if (failed == 0) {
		int rc = ds_tstate_remove(&st, err);

		ds_tstate_close(&st);
		return rc;
	}
	/* keep what could not be restored, in order, for another try */
	for (int i = 0; i < st.n; i++) {
		if (st.e[i].op < 0) {
			free(st.e[i].path);
			free(st.e[i].old);
		} else {
			st.e[kept++] = st.e[i];
		}
	}
	st.n = kept;
	ds_tstate_save(&st, NULL);
	ds_err_prefix(err, "%d of %d settings not restored, kept in %s; first",
		      failed, failed + r->changed, state);
	ds_tstate_close(&st);
	return -1;
}

/* ---- the rest ---------------------------------------------------------------------- */

void ds_tune_report_free(ds_tune_report *r)
{
	for (int i = 0; i < r->n_warn; i++)
		free(r->warn[i]);
	free(r->warn);
	memset(r, 0, sizeof *r);
}

char *ds_tune_state_default(const char *root)
{
	char *s;

	if (asprintf(&s, "%s/var/lib/ds-tune/state.json",
		     root != NULL ? root : "") < 0)
		return NULL;
	return s;
}

int ds_tune_may_write(const char *root, ds_err *err)
{
	struct stat sb;
	uid_t uid = geteuid();

	if (uid == 0)
		return 0;
	if (root == NULL || root[0] == '\0')
		return ds_errf(err, "changing the system needs root (effective "
			       "uid 0, not %u)", (unsigned)uid);
	if (stat(root, &sb) != 0)
		return ds_errf(err, "%s: %s", root, strerror(errno));
	if (sb.st_uid != uid)
		return ds_errf(err, "changing %s needs root or its owner (uid "
			       "%u, not %u)", root, (unsigned)sb.st_uid,
			       (unsigned)uid);
	return 0;
}

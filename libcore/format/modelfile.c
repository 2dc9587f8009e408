/* modelfile.c - the runtime model directory: writer and loader. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "modelfile.h"

#define TMP_TAG ".tmp-"
#define STALE_AGE_S 2 /* a younger unlocked temporary may be being created */

/* ---- temporary directories ---------------------------------------------------- */

/* dst without trailing slashes, split into parent and base (malloc'd). */
static int split_dst(const char *dst, char **parent, char **base)
{
	size_t n = strlen(dst);
	char *d, *slash;

	while (n > 1 && dst[n - 1] == '/')
		n--;
	d = strndup(dst, n);
	if (d == NULL)
		return -1;
	slash = strrchr(d, '/');
	if (slash == NULL) {
		*parent = strdup(".");
		*base = d;
	} else {
		*base = strdup(slash + 1);
		*parent = slash == d ? strdup("/") : strndup(d, (size_t)(slash - d));
		free(d);
	}
	if (*parent == NULL || *base == NULL) {
		free(*parent);
		free(*base);
		return -1;
	}
	return 0;
}

int ds_tmpdir_create(ds_tmpdir *t, const char *dst, ds_err *err)
{
	size_t n = strlen(dst);
	char *p;

	t->fd = -1;
	while (n > 1 && dst[n - 1] == '/')
		n--;
	p = malloc(n + sizeof TMP_TAG + 6);
	if (p == NULL)
		return ds_errf(err, "%s: out of memory", dst);
	memcpy(p, dst, n);
	memcpy(p + n, TMP_TAG "XXXXXX", sizeof TMP_TAG + 6);
	if (mkdtemp(p) == NULL) {
		ds_errf(err, "%s: cannot create a temporary directory: %s", p,
			strerror(errno));
		free(p);
		return -1;
	}
	t->path = p;
	t->fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (t->fd < 0 || flock(t->fd, LOCK_EX | LOCK_NB) != 0) {
		ds_errf(err, "%s: cannot lock: %s", p, strerror(errno));
		ds_tmpdir_remove(t);
		return -1;
	}
	return 0;
}

void ds_tmpdir_remove(ds_tmpdir *t)
{
	if (t->path != NULL)
		ds_remove_tree(t->path);
	if (t->fd >= 0)
		close(t->fd);
	free(t->path);
	t->path = NULL;
	t->fd = -1;
}

/* name is base + ".tmp-" + 6 characters mkdtemp could have chosen */
static int is_tmp_name(const char *name, const char *base)
{
	size_t n = strlen(base), i;

	if (strncmp(name, base, n) != 0 || strncmp(name + n, TMP_TAG, 5) != 0)
		return 0;
	name += n + 5;
	for (i = 0; i < 6; i++)
		if (!((name[i] >= 'a' && name[i] <= 'z') ||
		      (name[i] >= 'A' && name[i] <= 'Z') ||
		      (name[i] >= '0' && name[i] <= '9')))
			return 0;
	return name[6] == '\0';
}

int ds_tmpdir_clean_stale(const char *dst)
{
	char *parent, *base;
	struct dirent *de;
	int removed = 0;
	DIR *d;

	if (split_dst(dst, &parent, &base) != 0)
		return 0;
	d = opendir(parent);
	while (d != NULL && (de = readdir(d)) != NULL) {
		struct stat st;
		char *p;
		int fd;

		if (!is_tmp_name(de->d_name, base))
			continue;
		p = ds_path_join(parent, de->d_name);
		fd = p ? open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
		if (fd >= 0 && fstat(fd, &st) == 0 &&
		    st.st_mtime + STALE_AGE_S < time(NULL) &&
		    flock(fd, LOCK_EX | LOCK_NB) == 0 && ds_remove_tree(p) == 0)
			removed++;
		if (fd >= 0)
			close(fd);
		free(p);
	}
	if (d != NULL)
		closedir(d);
	free(parent);
	free(base);
	return removed;
}

/* ---- writer ------------------------------------------------------------------------ */

/* An existing dst may be replaced only if it is a model directory or empty. */
static int check_dst(const char *dst, int force, ds_err *err)
{
	struct stat st;
	char *meta;
	DIR *d;
	struct dirent *de;
	int empty = 1, has_meta;

	if (lstat(dst, &st) != 0)
		return errno == ENOENT ? 0 : ds_errf(err, "%s: %s", dst,
						     strerror(errno));
	if (!force)
		return ds_errf(err, "%s: already exists (--force replaces it)", dst);
	if (!S_ISDIR(st.st_mode))
		return ds_errf(err, "%s: exists and is not a directory", dst);
	meta = ds_path_join(dst, "model.meta");
	has_meta = meta != NULL && access(meta, F_OK) == 0;
	free(meta);
	d = opendir(dst);
	while (d != NULL && (de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			empty = 0;
	if (d != NULL)
		closedir(d);
	if (!has_meta && !empty)
		return ds_errf(err, "%s: exists and is not a ds model directory; "
			       "not replacing it", dst);
	return 0;
}

int ds_mwriter_open(ds_mwriter *w, const char *dst, int force, ds_err *err)
{
	memset(w, 0, sizeof *w);
	w->fd = -1;
	w->tmp.fd = -1;
	if (check_dst(dst, force, err))
		return -1;
	w->dst = strdup(dst);
	w->force = force;
	w->tensors = json_array();
	if (w->dst == NULL || w->tensors == NULL) {
		ds_mwriter_abort(w);
		return ds_errf(err, "%s: out of memory", dst);
	}
	ds_tmpdir_clean_stale(dst);
	if (ds_tmpdir_create(&w->tmp, dst, err)) {
		ds_mwriter_abort(w);
		return -1;
	}
	w->bin_path = ds_path_join(w->tmp.path, "model.bin");
	if (w->bin_path != NULL)
		w->fd = open(w->bin_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
			     0644);
	if (w->fd < 0) {
		ds_errf(err, "%s: %s", w->bin_path ? w->bin_path : dst,
			strerror(errno));
		ds_mwriter_abort(w);
		return -1;
	}
	return 0;
}

const char *ds_mwriter_dir(const ds_mwriter *w)
{
	return w->tmp.path;
}

int ds_mwriter_begin(ds_mwriter *w, const char *name, ds_ttype t, int ndim,
		     const uint64_t *shape, ds_err *err)
{
	json_t *sh = json_array();
	char tn[16];
	int i;

	DS_ASSERT(w->cur == NULL && ndim >= 1 && ndim <= 4);
	if (ds_tensor_bytes(t, ndim, shape, &w->cur_size))
		return ds_errf(err, "tensor %s: type %s cannot hold this shape",
			       name, ds_ttype_name(t, tn));
	for (i = 0; i < ndim; i++)
		json_array_append_new(sh, json_integer((json_int_t)shape[i]));
	w->cur_off = ds_round_up(w->end, DS_MODEL_ALIGN);
	w->cur_done = 0;
	w->cur_crc = 0;
	w->cur = json_pack("{s:s, s:s, s:o, s:I, s:I}", "name", name, "type",
			   ds_ttype_name(t, tn), "shape", sh, "offset",
			   (json_int_t)w->cur_off, "size", (json_int_t)w->cur_size);
	if (w->cur == NULL)
		return ds_errf(err, "tensor %s: out of memory", name);
	return 0;
}

/* model.bin goes out in whole, aligned 2 MiB writes (the gaps between
 * tensors zero): the page cache then holds the new file in 2 MiB folios,
 * which ds_map_open's DS_MAP_HUGE maps with one PMD entry each.  The
 * blocks go out in order, each whole but the last, so the file offset is
 * always blk_off and plain sequential writes put them there. */
static int blk_flush(ds_mwriter *w, size_t len, ds_err *err)
{
	return ds_write_all(w->fd, w->blk, len, w->bin_path, err);
}

/* Copies len bytes for file offset off (never before the current block). */
static int blk_put(ds_mwriter *w, uint64_t off, const uint8_t *p, size_t len,
		   ds_err *err)
{
	if (w->blk == NULL && (w->blk = calloc(1, DS_HUGE_2M)) == NULL)
		return ds_errf(err, "%s: out of memory", w->bin_path);
	while (len > 0) {
		uint64_t at = off - w->blk_off;
		size_t n;

		if (at >= DS_HUGE_2M) {
			if (blk_flush(w, DS_HUGE_2M, err))
				return -1;
			memset(w->blk, 0, DS_HUGE_2M);
			w->blk_off += DS_HUGE_2M;
			continue;
		}
		n = DS_HUGE_2M - (size_t)at < len ? DS_HUGE_2M - (size_t)at : len;
		memcpy(w->blk + at, p, n);
		p += n;
		off += n;
		len -= n;
	}
	return 0;
}

/* The last, partial block; the file is end bytes long even where it ends
 * in empty tensors past the data. */
static int blk_finish(ds_mwriter *w, ds_err *err)
{
	uint64_t n = w->end - w->blk_off;

	if (w->blk != NULL && blk_flush(w, n < DS_HUGE_2M ? (size_t)n : DS_HUGE_2M,
					err))
		return -1;
	if (ftruncate(w->fd, (off_t)w->end) != 0)
		return ds_errf(err, "%s: truncate: %s", w->bin_path,
			       strerror(errno));
	return 0;
}

int ds_mwriter_write(ds_mwriter *w, const void *data, size_t len, ds_err *err)
{
	DS_ASSERT(w->cur != NULL && w->cur_done + len <= w->cur_size);
	w->cur_crc = ds_crc32(w->cur_crc, data, len);
	if (blk_put(w, w->cur_off + w->cur_done, data, len, err))
		return -1;
	w->cur_done += len;
	return 0;
}

int ds_mwriter_end(ds_mwriter *w, ds_err *err)
{
	char crc[9];

	DS_ASSERT(w->cur != NULL && w->cur_done == w->cur_size);
	snprintf(crc, sizeof crc, "%08x", w->cur_crc);
	json_object_set_new(w->cur, "crc32", json_string(crc));
	if (json_array_append_new(w->tensors, w->cur) != 0) {
		w->cur = NULL;
		return ds_errf(err, "out of memory");
	}
	w->cur = NULL;
	w->end = w->cur_off + w->cur_size;
	return 0;
}

int ds_mwriter_tensor(ds_mwriter *w, const char *name, ds_ttype t, int ndim,
		      const uint64_t *shape, const void *data, ds_err *err)
{
	if (ds_mwriter_begin(w, name, t, ndim, shape, err) ||
	    ds_mwriter_write(w, data, w->cur_size, err))
		return -1;
	return ds_mwriter_end(w, err);
}

/* The meta as text: top-level keys indented, one line per tensor. */
static char *meta_text(json_t *meta, json_t *tensors)
{
	char *head = json_dumps(meta, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	size_t cap, n, i, len;
	char *out, *end;

	if (head == NULL)
		return NULL;
	end = strrchr(head, '}');
	if (end == NULL) {
		free(head);
		return NULL;
	}
	while (end > head && (end[-1] == '\n' || end[-1] == ' '))
		end--;
	n = (size_t)(end - head);
	cap = n + 64;
	out = malloc(cap);
	if (out == NULL) {
		free(head);
		return NULL;
	}
	memcpy(out, head, n);
	free(head);
	n += (size_t)sprintf(out + n, "%s\n  \"tensors\": [", n > 1 ? "," : "");
	for (i = 0; i < json_array_size(tensors); i++) {
		char *t = json_dumps(json_array_get(tensors, i),
				     JSON_COMPACT | JSON_PRESERVE_ORDER);
		char *nout;

		if (t == NULL)
			goto fail;
		len = strlen(t);
		if (n + len + 16 > cap) {
			cap = 2 * cap + len + 16;
			nout = realloc(out, cap);
			if (nout == NULL) {
				free(t);
				goto fail;
			}
			out = nout;
		}
		n += (size_t)sprintf(out + n, "%s\n    %s", i ? "," : "", t);
		free(t);
	}
	if (n + 16 > cap) {
		char *nout = realloc(out, n + 16);

		if (nout == NULL)
			goto fail;
		out = nout;
	}
	sprintf(out + n, "\n  ]\n}\n");
	return out;
fail:
	free(out);
	return NULL;
}

static int write_meta(ds_mwriter *w, json_t *meta, ds_err *err)
{
	char *path = ds_path_join(w->tmp.path, "model.meta");
	char *text = meta_text(meta, w->tensors);
	int fd = -1, rc = -1;

	if (path == NULL || text == NULL) {
		ds_errf(err, "model.meta: out of memory");
		goto out;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		ds_errf(err, "%s: %s", path, strerror(errno));
		goto out;
	}
	if (ds_write_all(fd, text, strlen(text), path, err))
		goto out;
	if (fsync(fd) != 0) {
		ds_errf(err, "%s: fsync: %s", path, strerror(errno));
		goto out;
	}
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	free(path);
	free(text);
	return rc;
}

/* Move the finished temporary into place; an old dst (when forced) ends
 * up at the temporary's name and is removed by ds_mwriter_abort. */
static int move_into_place(ds_mwriter *w, ds_err *err)
{
	struct stat st;

	if (renameat2(AT_FDCWD, w->tmp.path, AT_FDCWD, w->dst,
		      RENAME_NOREPLACE) == 0)
		return 0;
	if (errno == EEXIST && w->force) {
		if (renameat2(AT_FDCWD, w->tmp.path, AT_FDCWD, w->dst,
			      RENAME_EXCHANGE) == 0)
			return 0;
	} else if (errno == EINVAL && lstat(w->dst, &st) != 0) {
		/* a file system without renameat2 flags */
		if (rename(w->tmp.path, w->dst) == 0)
			return 0;
	} else if (errno == EEXIST) {
		return ds_errf(err, "%s: appeared during the conversion; not "
			       "replacing it", w->dst);
	}
	return ds_errf(err, "%s: cannot rename %s into place: %s", w->dst,
		       w->tmp.path, strerror(errno));
}

static void sync_parent(const char *dst)
{
	char *parent, *base;
	int fd;

	if (split_dst(dst, &parent, &base) != 0)
		return;
	fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
	free(parent);
	free(base);
}

int ds_mwriter_commit(ds_mwriter *w, json_t *meta, ds_err *err)
{
	DS_ASSERT(w->cur == NULL && w->fd >= 0);
	if (blk_finish(w, err))
		return -1;
	if (fsync(w->fd) != 0)
		return ds_errf(err, "%s: fsync: %s", w->bin_path, strerror(errno));
	if (close(w->fd) != 0) {
		w->fd = -1;
		return ds_errf(err, "%s: close: %s", w->bin_path, strerror(errno));
	}
	w->fd = -1;
	if (write_meta(w, meta, err))
		return -1;
	{
		/* mkdtemp made it 0700; a model directory is as public as
		 * any new directory */
		mode_t mask = umask(0);

		umask(mask);
		if (fchmod(w->tmp.fd, 0777 & ~mask) != 0)
			return ds_errf(err, "%s: chmod: %s", w->tmp.path,
				       strerror(errno));
	}
	if (fsync(w->tmp.fd) != 0)
		return ds_errf(err, "%s: fsync: %s", w->tmp.path, strerror(errno));
	if (move_into_place(w, err))
		return -1;
	sync_parent(w->dst);
	ds_mwriter_abort(w); /* removes the replaced model, if any */
	return 0;
}

void ds_mwriter_abort(ds_mwriter *w)
{
	if (w->fd >= 0)
		close(w->fd);
	w->fd = -1;
	ds_tmpdir_remove(&w->tmp);
	json_decref(w->tensors);
	json_decref(w->cur);
	free(w->blk);
	w->blk = NULL;
	free(w->bin_path);
	free(w->dst);
	w->tensors = w->cur = NULL;
	w->bin_path = w->dst = NULL;
}

/* ---- loader: the tensor table ---------------------------------------------------- */

static const char *const entry_keys[] = { "name", "type", "shape", "offset",
					  "size", "crc32" };

static int parse_crc(const char *s, uint32_t *out)
{
	uint32_t v = 0;
	int i;

	if (strlen(s) != 8)
		return -1;
	for (i = 0; i < 8; i++) {
		char c = s[i];
		int d = c >= '0' && c <= '9' ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;

		if (d < 0)
			return -1;
		v = v << 4 | (uint32_t)d;
	}
	*out = v;
	return 0;
}

static int get_u64(const json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

static int parse_tensor(ds_model *m, const json_t *e, size_t i, ds_err *err)
{
	ds_tensor *t = &m->tensors[i];
	const json_t *nm = json_object_get(e, "name"), *ty, *sh, *cr;
	const char *key;
	json_t *v;
	uint64_t want, end;
	size_t j;
	char where[200];

	if (!json_is_object(e) || !json_is_string(nm) ||
	    json_string_length(nm) == 0 || json_string_length(nm) > 127)
		return ds_errf(err, "model.meta: tensors[%zu]: no name of 1 to 127 "
			       "bytes", i);
	t->name = json_string_value(nm);
	snprintf(where, sizeof where, "model.meta: tensor %s", t->name);
	json_object_foreach((json_t *)e, key, v) {
		for (j = 0; j < sizeof entry_keys / sizeof *entry_keys; j++)
			if (strcmp(key, entry_keys[j]) == 0)
				break;
		if (j == sizeof entry_keys / sizeof *entry_keys)
			return ds_errf(err, "%s: unknown key \"%s\"", where, key);
	}
	ty = json_object_get(e, "type");
	if (!json_is_string(ty) || ds_ttype_parse(json_string_value(ty), &t->type))
		return ds_errf(err, "%s: unknown type", where);
	sh = json_object_get(e, "shape");
	if (!json_is_array(sh) || json_array_size(sh) < 1 ||
	    json_array_size(sh) > 4)
		return ds_errf(err, "%s: shape is not 1 to 4 dimensions", where);
	t->ndim = (int)json_array_size(sh);
	for (j = 0; j < (size_t)t->ndim; j++)
		if (get_u64(json_array_get(sh, j), &t->shape[j]) ||
		    t->shape[j] == 0 || t->shape[j] > (1ull << 40))
			return ds_errf(err, "%s: shape[%zu] is not in [1, 2^40]",
				       where, j);
	if (get_u64(json_object_get(e, "offset"), &t->offset) ||
	    get_u64(json_object_get(e, "size"), &t->size))
		return ds_errf(err, "%s: offset or size missing", where);
	cr = json_object_get(e, "crc32");
	if (!json_is_string(cr) || parse_crc(json_string_value(cr), &t->crc32))
		return ds_errf(err, "%s: crc32 is not 8 hexadecimal digits", where);
	if (ds_tensor_bytes(t->type, t->ndim, t->shape, &want))
		return ds_errf(err, "%s: type %s cannot hold its shape", where,
			       json_string_value(ty));
	if (t->size != want)
		return ds_errf(err, "%s: size %llu, but type and shape need %llu",
			       where, (unsigned long long)t->size,
			       (unsigned long long)want);
	if (t->offset % DS_MODEL_MIN_ALIGN)
		return ds_errf(err, "%s: offset %llu is not a multiple of %d", where,
			       (unsigned long long)t->offset, DS_MODEL_MIN_ALIGN);
	if (ds_add_u64(t->offset, t->size, &end) || end > m->bin.size)
		return ds_errf(err, "%s: bytes [%llu, +%llu) past the end of "
			       "model.bin (%zu bytes)", where,
			       (unsigned long long)t->offset,
			       (unsigned long long)t->size, m->bin.size);
	t->data = t->size ? m->bin.data + t->offset : NULL;
	return 0;
}

static int cmp_off(const void *a, const void *b, void *arg)
{
	const ds_tensor *ts = arg;
	const ds_tensor *x = &ts[*(const size_t *)a], *y = &ts[*(const size_t *)b];

	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int cmp_name(const void *a, const void *b, void *arg)
{
	const ds_tensor *ts = arg;

	return strcmp(ts[*(const size_t *)a].name, ts[*(const size_t *)b].name);
}

/* No two tensors overlap; names are unique (and m->by_name is built). */
static int check_layout(ds_model *m, ds_err *err)
{
	size_t i, n = m->n_tensors, *ord = ds_calloc(n ? n : 1, sizeof *ord, err);

	if (ord == NULL)
		return -1;
	for (i = 0; i < n; i++)
		ord[i] = m->by_name[i] = i;
	qsort_r(ord, n, sizeof *ord, cmp_off, m->tensors);
	qsort_r(m->by_name, n, sizeof *m->by_name, cmp_name, m->tensors);
	for (i = 1; i < n; i++) {
		const ds_tensor *a = &m->tensors[ord[i - 1]], *b = &m->tensors[ord[i]];

		if (a->offset + a->size > b->offset && a->size && b->size) {
			free(ord);
			return ds_errf(err, "model.meta: tensor %s overlaps tensor %s",
				       b->name, a->name);
		}
	}
	free(ord);
	for (i = 1; i < n; i++)
		if (strcmp(m->tensors[m->by_name[i - 1]].name,
			   m->tensors[m->by_name[i]].name) == 0)
			return ds_errf(err, "model.meta: tensor %s listed twice",
				       m->tensors[m->by_name[i]].name);
	return 0;
}

const ds_tensor *ds_model_tensor(const ds_model *m, const char *name)
{
	size_t lo = 0, hi = m->n_tensors;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		const ds_tensor *t = &m->tensors[m->by_name[mid]];
		int c = strcmp(name, t->name);

		if (c == 0)
			return t;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

/* ---- loader: the architecture's tensors -------------------------------------- */

static int kind_allows(enum ds_tkind k, ds_ttype t)
{
	if (k == DS_TK_VECTOR || k == DS_TK_ROUTER)
		return t.dt == DS_F32;
	return t.dt != DS_I32;
}

static int same_shape(const ds_tensor *t, const ds_tdesc *d)
{
	int i;

	if (t->ndim != d->ndim)
		return 0;
	for (i = 0; i < d->ndim; i++)
		if (t->shape[i] != d->shape[i])
			return 0;
	return 1;
}

/* NAME.perm: an i32 [K] ([E, K]) companion of a quantized matrix NAME. */
static int check_perm(const ds_model *m, const ds_tensor *p, ds_err *err)
{
	char base[128];
	size_t n = strlen(p->name) - 5;
	const ds_tensor *w;

	memcpy(base, p->name, n);
	base[n] = '\0';
	w = ds_model_tensor(m, base);
	if (w == NULL || (w->type.dt != DS_Q4 && w->type.dt != DS_Q8))
		return ds_errf(err, "model.meta: tensor %s: no quantized matrix %s",
			       p->name, base);
	if (p->type.dt != DS_I32 || p->ndim != w->ndim - 1 ||
	    p->shape[p->ndim - 1] != w->shape[w->ndim - 1] ||
	    (p->ndim == 2 && p->shape[0] != w->shape[0]))
		return ds_errf(err, "model.meta: tensor %s: not i32 of %s's input "
			       "width", p->name, base);
	return 0;
}

/* The tensors of table d must all be there, of their shape and a type
 * their kind allows; each found is marked `mark` in seen. */
static int check_table(const ds_model *m, const ds_tdesc *d, size_t nd,
		       char *seen, char mark, ds_err *err)
{
	size_t i;

	for (i = 0; i < nd; i++) {
		const ds_tensor *t = ds_model_tensor(m, d[i].name);
		char tn[16];

		if (t == NULL)
			return ds_errf(err, "model.meta: tensor %s missing",
				       d[i].name);
		if (!same_shape(t, &d[i]))
			return ds_errf(err, "model.meta: tensor %s: shape differs "
				       "from what the hparams imply", d[i].name);
		if (!kind_allows(d[i].kind, t->type))
			return ds_errf(err, "model.meta: tensor %s: type %s not "
				       "allowed here", d[i].name,
				       ds_ttype_name(t->type, tn));
		seen[t - m->tensors] = mark;
	}
	return 0;
}

/* Every other tensor must be a NAME.perm of a matrix found; it goes with
 * its matrix (main or MTP). */
static int check_rest(const ds_model *m, char *seen, ds_err *err)
{
	size_t i;

	for (i = 0; i < m->n_tensors; i++) {
		const ds_tensor *t = &m->tensors[i], *w;
		size_t n = strlen(t->name);
		char base[128];

		if (seen[i])
			continue;
		if (n <= 5 || strcmp(t->name + n - 5, ".perm") != 0)
			return ds_errf(err, "model.meta: unexpected tensor %s",
				       t->name);
		if (check_perm(m, t, err))
			return -1;
		memcpy(base, t->name, n - 5);
		base[n - 5] = '\0';
		w = ds_model_tensor(m, base);
		seen[i] = seen[w - m->tensors];
	}
	return 0;
}

/* Without DS_LOAD_MTP, the MTP layer's tensors (seen 2) leave tensors[];
 * with it they move after the others.  by_name is rebuilt. */
static int order_mtp(ds_model *m, const char *seen, ds_err *err)
{
	ds_tensor *ts = ds_calloc(m->n_tensors ? m->n_tensors : 1, sizeof *ts,
				  err);
	size_t i, n = 0, n_mtp = 0;

	if (ts == NULL)
		return -1;
	for (i = 0; i < m->n_tensors; i++)
		if (seen[i] == 1)
			ts[n++] = m->tensors[i];
	for (i = 0; i < m->n_tensors; i++)
		if (seen[i] == 2 && (m->flags & DS_LOAD_MTP))
			ts[n + n_mtp++] = m->tensors[i];
	free(m->tensors);
	m->tensors = ts;
	m->n_tensors = n + n_mtp;
	m->n_mtp_tensors = n_mtp;
	for (i = 0; i < m->n_tensors; i++)
		m->by_name[i] = i;
	qsort_r(m->by_name, m->n_tensors, sizeof *m->by_name, cmp_name,
		m->tensors);
	return 0;
}

static int check_arch(ds_model *m, ds_err *err)
{
	char *seen = ds_calloc(m->n_tensors ? m->n_tensors : 1, 1, err);
	ds_tdesc *d = NULL, *dm = NULL;
	size_t nd, nm;
	int rc = -1;

	if (seen != NULL && ds_arch_tensors(&m->hp, &d, &nd, err) == 0 &&
	    ds_arch_mtp_tensors(&m->hp, &dm, &nm, err) == 0 &&
	    check_table(m, d, nd, seen, 1, err) == 0 &&
	    check_table(m, dm, nm, seen, 2, err) == 0 &&
	    check_rest(m, seen, err) == 0)
		rc = order_mtp(m, seen, err);
	free(seen);
	free(d);
	free(dm);
	return rc;
}

/* ---- loader: model.meta ------------------------------------------------------------ */

static int parse_quant(ds_model *m, const json_t *q, ds_err *err)
{
	const json_t *src = json_object_get(q, "source");
	const json_t *ty = json_object_get(q, "type");
	uint64_t bits, gs;
	ds_ttype t;

	if (json_is_object(q) && json_object_size(q) != 4)
		return ds_errf(err, "model.meta: quant has keys other than source, "
			       "bits, group_size and type");
	if (!json_is_object(q) || !json_is_string(src) || !json_is_string(ty) ||
	    get_u64(json_object_get(q, "bits"), &bits) || bits > 16 ||
	    get_u64(json_object_get(q, "group_size"), &gs) || gs > (1u << 20))
		return ds_errf(err, "model.meta: quant is not {source, bits, "
			       "group_size, type}");
	if (strcmp(json_string_value(src), "awq") &&
	    strcmp(json_string_value(src), "gptq") &&
	    strcmp(json_string_value(src), "rtn") &&
	    strcmp(json_string_value(src), "fp8") &&
	    strcmp(json_string_value(src), "none"))
		return ds_errf(err, "model.meta: quant.source \"%.32s\" unknown",
			       json_string_value(src));
	if (ds_ttype_parse(json_string_value(ty), &t))
		return ds_errf(err, "model.meta: quant.type \"%.32s\" unknown",
			       json_string_value(ty));
	snprintf(m->quant.source, sizeof m->quant.source, "%s",
		 json_string_value(src));
	snprintf(m->quant.type, sizeof m->quant.type, "%s", json_string_value(ty));
	m->quant.bits = (uint32_t)bits;
	m->quant.group_size = (uint32_t)gs;
	return 0;
}

static int parse_meta(ds_model *m, ds_err *err)
{
	const json_t *fmt = json_object_get(m->meta, "format");
	const json_t *ver = json_object_get(m->meta, "version");
	const json_t *arch = json_object_get(m->meta, "arch");
	const json_t *ts = json_object_get(m->meta, "tensors");
	size_t i;

	if (!json_is_string(fmt) || strcmp(json_string_value(fmt), DS_MODEL_FORMAT))
		return ds_errf(err, "model.meta: format is not \"%s\"",
			       DS_MODEL_FORMAT);
	if (!json_is_integer(ver))
		return ds_errf(err, "model.meta: version missing");
	if (json_integer_value(ver) != DS_MODEL_VERSION)
		return ds_errf(err, "model.meta: format version %lld; this build "
			       "reads version %d (convert the checkpoint again)",
			       (long long)json_integer_value(ver), DS_MODEL_VERSION);
	if (!json_is_string(arch) || ds_arch_parse(json_string_value(arch),
						   &m->hp.arch))
		return ds_errf(err, "model.meta: arch missing or unknown");
	if (ds_hparams_from_json(&m->hp, json_object_get(m->meta, "hparams"),
				 "model.meta", err) ||
	    parse_quant(m, json_object_get(m->meta, "quant"), err))
		return -1;
	if (!json_is_array(ts))
		return ds_errf(err, "model.meta: tensors is not an array");
	m->n_tensors = json_array_size(ts);
	m->tensors = ds_calloc(m->n_tensors ? m->n_tensors : 1,
			       sizeof *m->tensors, err);
	m->by_name = ds_calloc(m->n_tensors ? m->n_tensors : 1,
			       sizeof *m->by_name, err);
	if (m->tensors == NULL || m->by_name == NULL)
		return -1;
	for (i = 0; i < m->n_tensors; i++)
		if (parse_tensor(m, json_array_get(ts, i), i, err))
			return -1;
	if (check_layout(m, err))
		return -1;
	return check_arch(m, err);
}

int ds_model_load(ds_model *m, const char *dir, unsigned flags, ds_err *err)
{
	char *mp = ds_path_join(dir, "model.meta");
	char *bp = ds_path_join(dir, "model.bin");
	json_error_t jerr;
	char *text = NULL;
	int rc = -1;

	memset(m, 0, sizeof *m);
	m->bin.fd = -1;
	m->flags = flags;
	m->dir = strdup(dir);
	if (mp == NULL || bp == NULL || m->dir == NULL) {
		ds_errf(err, "%s: out of memory", dir);
		goto out;
	}
	if (ds_read_file(mp, DS_MODEL_MAX_META, &text, NULL, err))
		goto out;
	m->meta = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	if (m->meta == NULL || !json_is_object(m->meta)) {
		ds_errf(err, "%s: line %d: %s", mp, jerr.line,
			m->meta ? "not a JSON object" : jerr.text);
		goto out;
	}
	if (ds_map_open(&m->bin, bp, DS_MAP_HUGE | (flags & DS_LOAD_POPULATE ?
						    DS_MAP_POPULATE : 0), err))
		goto out;
	if (parse_meta(m, err)) {
		ds_err_prefix(err, "%s", dir);
		goto out;
	}
	if ((flags & DS_LOAD_MLOCK) && m->bin.data != NULL &&
	    mlock(m->bin.data, m->bin.size) != 0) {
		ds_errf(err, "%s: mlock of %zu bytes: %s", bp, m->bin.size,
			strerror(errno));
		goto out;
	}
	rc = 0;
out:
	free(text);
	free(mp);
	free(bp);
	if (rc)
		ds_model_free(m);
	return rc;
}

int ds_model_verify(const ds_model *m, ds_err *err)
{
	size_t i;

	for (i = 0; i < m->n_tensors; i++) {
		const ds_tensor *t = &m->tensors[i];
		uint32_t c = ds_crc32(0, t->data, t->size);

		if (c != t->crc32)
			return ds_errf(err, "%s/model.bin: tensor %s: CRC-32 %08x, "
				       "model.meta says %08x", m->dir, t->name, c,
				       t->crc32);
	}
	return 0;
}

void ds_model_free(ds_model *m)
{
	if (m->bin.data != NULL && (m->flags & DS_LOAD_MLOCK))
		munlock(m->bin.data, m->bin.size);
	ds_map_close(&m->bin);
	json_decref(m->meta);
	free(m->tensors);
	free(m->by_name);
	free(m->dir);
	memset(m, 0, sizeof *m);
	m->bin.fd = -1;
}

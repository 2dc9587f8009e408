/* pcfile.c - the prompt cache's files: one per block, checked whole before
 * anything of it is used (pcache.h). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pcache_int.h"

#define B DS_PCACHE_BLOCK
#define MAX_NAMED 8                /* files named in warnings; then counted */

_Static_assert(sizeof(ds_pcache_fhdr) == 128, "the file header is 128 bytes");

int pc_dir_open(ds_pcache *pc, const char *dir, ds_err *err)
{
	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		return ds_errf(err, "--cache-dir %s: %s", dir, strerror(errno));
	if (!ds_is_dir(dir))
		return ds_errf(err, "--cache-dir %s: not a directory", dir);
	if (access(dir, R_OK | W_OK | X_OK) != 0)
		return ds_errf(err, "--cache-dir %s: %s", dir, strerror(errno));
	if ((pc->dir = strdup(dir)) == NULL)
		return ds_errf(err, "out of memory");
	return 0;
}

static void file_name(const ds_pcache *pc, uint64_t key, char *out, size_t cap)
{
	snprintf(out, cap, "%s/%016llx.dskv", pc->dir, (unsigned long long)key);
}

void pc_file_remove(ds_pcache *pc, uint64_t key)
{
	char p[4200];

	file_name(pc, key, p, sizeof p);
	unlink(p);
}

/* A file ignored: named, up to MAX_NAMED of them. */
static void ignored(ds_pcache *pc, const char *name, const char *why)
{
	char line[600];

	atomic_fetch_add(&pc->a_ignored, 1);
	if (pc->o.warn == NULL || pc->warned > MAX_NAMED)
		return;
	if (pc->warned++ == MAX_NAMED)
		snprintf(line, sizeof line, "--cache-dir %s: more files ignored "
			 "(counted, not named)", pc->dir);
	else
		snprintf(line, sizeof line, "--cache-dir %s: %.200s: %s: ignored",
			 pc->dir, name, why);
	pc->o.warn(pc->o.user, line);
}

/* "<16 lowercase hex digits>.dskv": its key. */
static int name_key(const char *name, uint64_t *key)
{
	size_t i;

	*key = 0;
	if (strlen(name) != 21 || strcmp(name + 16, ".dskv") != 0)
		return -1;
	for (i = 0; i < 16; i++) {
		int c = name[i], d = c >= '0' && c <= '9' ? c - '0' :
				     c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;

		if (d < 0)
			return -1;
		*key = *key << 4 | (uint64_t)d;
	}
	return 0;
}

static uint32_t header_crc(const ds_pcache_fhdr *h)
{
	ds_pcache_fhdr c = *h;

	c.header_crc = 0;
	return ds_crc32(0, &c, sizeof c);
}

static void fill_header(const ds_pcache *pc, ds_pcache_fhdr *h, uint64_t key,
			uint32_t depth)
{
	memset(h, 0, sizeof *h);
	memcpy(h->magic, DS_PCACHE_MAGIC, 8);
	h->version = DS_PCACHE_VERSION;
	h->header_size = sizeof *h;
	memcpy(h->model, pc->o.model_id, sizeof h->model);
	h->kv_type = (uint32_t)pc->type;
	h->n_layer = pc->n_layer;
	h->n_kv_head = pc->n_kv_head;
	h->k_dim = pc->k_dim;
	h->v_dim = pc->v_dim;
	h->mla = (uint32_t)pc->mla;
	h->block = B;
	h->depth = depth;
	h->pos_bytes = pc->pos_bytes;
	h->key = key;
	h->data_bytes = pc->block_bytes;
}

/* ---- reading ------------------------------------------------------------------------ */

/* The header against this cache and the file's name and size: NULL when
 * it is one of ours, "" when it is sound but deeper than this context
 * (not usable here, not wrong), else why not. */
static const char *check_header(const ds_pcache *pc, const ds_pcache_fhdr *h,
				uint64_t key, uint64_t size, char *why, size_t cap)
{
	uint64_t want;

	if (memcmp(h->magic, DS_PCACHE_MAGIC, 8) != 0)
		return "not a ds prompt cache file";
	if (h->header_size != sizeof *h)
		return snprintf(why, cap, "a header of %u bytes, not %zu",
				h->header_size, sizeof *h), why;
	if (h->version != DS_PCACHE_VERSION)
		return snprintf(why, cap, "version %u (this ds reads %u)", h->version,
				DS_PCACHE_VERSION), why;
	if (h->header_crc != header_crc(h))
		return "its header's CRC-32 does not match";
	if (memcmp(h->model, pc->o.model_id, sizeof h->model) != 0)
		return "made for another model (or by another ds version)";
	if (h->kv_type != (uint32_t)pc->type || h->n_layer != pc->n_layer ||
	    h->n_kv_head != pc->n_kv_head || h->k_dim != pc->k_dim ||
	    h->v_dim != pc->v_dim || h->mla != (uint32_t)pc->mla ||
	    h->pos_bytes != pc->pos_bytes)
		return "made for another KV cache (its type or shape differs)";
	if (h->block != B)
		return snprintf(why, cap, "blocks of %u positions, not %d", h->block, B),
		       why;
	if (h->key != key)
		return "its header names another prefix than its file name";
	if (h->data_bytes != pc->block_bytes)
		return "its rows' size is not a block's";
	if (h->depth >= pc->n_ctx / B)
		return "";
	want = sizeof *h + ((uint64_t)h->depth + 1) * B * sizeof(int32_t) + h->data_bytes;
	if (size != want)
		return snprintf(why, cap, "%llu bytes, not %llu (cut short or grown)",
				(unsigned long long)size, (unsigned long long)want), why;
	return NULL;
}

static int read_full(int fd, void *buf, size_t n)
{
	uint8_t *p = buf;

	while (n > 0) {
		ssize_t k = read(fd, p, n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* A file's place in the load order. */
typedef struct pfile {
	char name[32];
	uint64_t key;
	uint32_t depth;
	struct timespec mtime;
} pfile;

/* Open name and check its header: the descriptor (header read), or -1
 * (said, or skipped when deeper than this context). */
static int open_checked(ds_pcache *pc, const char *name, ds_pcache_fhdr *h,
			pfile *f)
{
	char path[4200], why[160];
	const char *bad;
	struct stat st;
	int fd;

	snprintf(path, sizeof path, "%s/%s", pc->dir, name);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		ignored(pc, name, fd < 0 ? strerror(errno) : "not a regular file");
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if ((uint64_t)st.st_size < sizeof *h || read_full(fd, h, sizeof *h)) {
		ignored(pc, name, "shorter than its header");
		close(fd);
		return -1;
	}
	bad = check_header(pc, h, f->key, (uint64_t)st.st_size, why, sizeof why);
	if (bad != NULL) {
		if (bad[0])
			ignored(pc, name, bad);
		close(fd);
		return -1;
	}
	f->depth = h->depth;
	f->mtime = st.st_mtim;
	return fd;
}

/* The tokens and rows after the header: why not, or NULL. */
static const char *check_body(const ds_pcache *pc, const ds_pcache_fhdr *h,
			      const int32_t *tok, size_t n_tok, const uint8_t *data)
{
	size_t i;

	if (ds_crc32(0, tok, n_tok * sizeof *tok) != h->tok_crc)
		return "its token ids' CRC-32 does not match";
	if (ds_crc32(0, data, h->data_bytes) != h->data_crc)
		return "its rows' CRC-32 does not match";
	for (i = 0; i < n_tok; i++)
		if (tok[i] < 0 || (uint32_t)tok[i] >= pc->o.n_vocab)
			return "a token id is outside the vocabulary";
	if (ds_pcache_key(tok, h->depth + 1) != h->key)
		return "its token ids are not the prefix its name says";
	return NULL;
}

/* One file into the cache (its prefix's blocks loaded before it). */
static void load_one(ds_pcache *pc, const pfile *f)
{
	ds_pcache_fhdr h;
	pfile g = *f;
	int32_t *tok = NULL, i = -1, parent;
	size_t n_tok;
	const char *bad = NULL;
	int fd = open_checked(pc, f->name, &h, &g);

	if (fd < 0)
		return;
	n_tok = ((size_t)h.depth + 1) * B;
	if ((tok = malloc(n_tok * sizeof *tok)) == NULL || (i = pc_new(pc)) < 0)
		bad = "no room";
	else if (read_full(fd, tok, n_tok * sizeof *tok) ||
		 read_full(fd, pc->b[i].data, pc->block_bytes))
		bad = "cannot be read whole";
	else if ((bad = check_body(pc, &h, tok, n_tok, pc->b[i].data)) == NULL &&
		 pc_walk(pc, tok, h.depth, &parent) != h.depth)
		bad = "its prefix is not in the cache (a file missing or ignored)";
	else if (bad == NULL && pc_find(pc, parent, parent >= 0 ? pc->b[parent].key :
					ds_pcache_key(tok, 0), tok + h.depth * B) >= 0)
		bad = "";           /* held already */
	close(fd);
	if (bad != NULL) {
		if (bad[0] && strcmp(bad, "no room") != 0)
			ignored(pc, f->name, bad);
		if (i >= 0)
			pc_drop(pc, i);
	} else {
		pc_link(pc, i, parent, parent >= 0 ? pc->b[parent].key :
			ds_pcache_key(tok, 0), tok + h.depth * B, h.depth, 1);
		/* read back in prefix order: the ancestors stay more recent */
		pc_to_tail(pc, i);
		atomic_fetch_add(&pc->a_loaded, 1);
	}
	free(tok);
}

/* Shallow first (a block needs its prefix), then the newest. */
static int cmp_file(const void *a, const void *b)
{
	const pfile *x = a, *y = b;

	if (x->depth != y->depth)
		return x->depth < y->depth ? -1 : 1;
	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec > y->mtime.tv_sec ? -1 : 1;
	return x->mtime.tv_nsec > y->mtime.tv_nsec ? -1 :
	       x->mtime.tv_nsec < y->mtime.tv_nsec;
}

/* "<name>.dskv.tmp-<pid>" of a process that is gone (killed while it
 * saved): removed. */
static void drop_stale_tmp(const ds_pcache *pc, const char *name)
{
	const char *t = strstr(name, ".dskv.tmp-");
	char path[4200], *end;
	long pid;

	if (t == NULL || t - name != 16)
		return;
	pid = strtol(t + 10, &end, 10);
	if (*end != '\0' || pid <= 0)
		return;
	if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
		return;             /* its writer may still be at it */
	snprintf(path, sizeof path, "%s/%s", pc->dir, name);
	unlink(path);
}

/* The directory's block files, their headers checked. */
static int list_files(ds_pcache *pc, pfile **out, size_t *n, ds_err *err)
{
	DIR *d = opendir(pc->dir);
	struct dirent *de;
	size_t cap = 0;
	pfile f;

	*out = NULL;
	*n = 0;
	if (d == NULL)
		return ds_errf(err, "--cache-dir %s: %s", pc->dir, strerror(errno));
	while ((de = readdir(d)) != NULL) {
		ds_pcache_fhdr h;
		int fd;

		memset(&f, 0, sizeof f);
		if (name_key(de->d_name, &f.key)) {
			drop_stale_tmp(pc, de->d_name);
			continue;           /* not ours to read */
		}
		memcpy(f.name, de->d_name, 22);   /* name_key: 21 bytes and NUL */
		if ((fd = open_checked(pc, f.name, &h, &f)) < 0)
			continue;
		close(fd);
		if (ds_grow((void **)out, &cap, *n + 1, sizeof **out)) {
			closedir(d);
			return ds_errf(err, "out of memory");
		}
		(*out)[(*n)++] = f;
	}
	closedir(d);
	return 0;
}

int ds_pcache_load(ds_pcache *pc, ds_err *err)
{
	pfile *f;
	size_t n, i;

	if (pc->dir == NULL)
		return 0;
	if (list_files(pc, &f, &n, err)) {
		free(f);
		return -1;
	}
	if (n > 1)
		qsort(f, n, sizeof *f, cmp_file);
	for (i = 0; i < n && pc->n_live < pc->max_blocks; i++)
		load_one(pc, &f[i]);
	free(f);
	return 0;
}

/* ---- writing ------------------------------------------------------------------------- */

/* Block i's prefix: every token from the start. */
static int32_t *prefix_of(ds_pcache *pc, int32_t i, size_t *n_tok)
{
	size_t n = ((size_t)pc->b[i].depth + 1) * B;
	int32_t *tok = malloc(n * sizeof *tok), j;

	*n_tok = n;
	for (j = i; tok != NULL && j >= 0; j = pc->b[j].parent)
		memcpy(tok + (size_t)pc->b[j].depth * B, pc->tok + (size_t)j * B,
		       B * sizeof *tok);
	return tok;
}

/* Block i's file, written under a temporary name and renamed whole. */
static int write_one(ds_pcache *pc, int32_t i, ds_err *err)
{
	char path[4200], tmp[4300];
	ds_pcache_fhdr h;
	size_t n_tok;
	int32_t *tok = prefix_of(pc, i, &n_tok);
	int fd, rc;

	if (tok == NULL)
		return ds_errf(err, "out of memory");
	fill_header(pc, &h, pc->b[i].key, pc->b[i].depth);
	h.tok_crc = ds_crc32(0, tok, n_tok * sizeof *tok);
	h.data_crc = ds_crc32(0, pc->b[i].data, pc->block_bytes);
	h.header_crc = header_crc(&h);
	file_name(pc, pc->b[i].key, path, sizeof path);
	snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	rc = fd < 0 ? ds_errf(err, "%s: %s", tmp, strerror(errno)) :
	     ds_write_all(fd, &h, sizeof h, tmp, err) ||
	     ds_write_all(fd, tok, n_tok * sizeof *tok, tmp, err) ||
	     ds_write_all(fd, pc->b[i].data, pc->block_bytes, tmp, err) ? -1 : 0;
	if (fd >= 0 && close(fd) != 0 && rc == 0)
		rc = ds_errf(err, "%s: %s", tmp, strerror(errno));
	if (rc == 0 && rename(tmp, path) != 0)
		rc = ds_errf(err, "%s: %s", path, strerror(errno));
	if (rc != 0 && fd >= 0)
		unlink(tmp);
	free(tok);
	return rc;
}

int ds_pcache_save(ds_pcache *pc, ds_err *err)
{
	size_t i;
	int rc = 0;

	if (pc->dir == NULL)
		return 0;
	for (i = 0; i < pc->n_b; i++) {
		pblock *b = &pc->b[i];

		if (b->data == NULL || b->on_disk)
			continue;
		if (write_one(pc, (int32_t)i, err)) {
			rc = -1;
			break;
		}
		b->on_disk = 1;
	}
	return rc;
}

/* safetensors.c - strict safetensors reader (docs/formats/safetensors.md). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "safetensors.h"

#define MAX_INDEX_BYTES (64u << 20)   /* model.safetensors.index.json */
#define MAX_OFFSET ((1ull << 48) - 1) /* the JSON schema's integer limit */
#define MAX_NAME 1024

static const struct {
	const char *name;
	unsigned bits;
} dtypes[DS_ST_NDTYPES] = {
	[DS_ST_BOOL] = { "BOOL", 8 },       [DS_ST_U8] = { "U8", 8 },
	[DS_ST_I8] = { "I8", 8 },           [DS_ST_I16] = { "I16", 16 },
	[DS_ST_U16] = { "U16", 16 },        [DS_ST_F16] = { "F16", 16 },
	[DS_ST_BF16] = { "BF16", 16 },      [DS_ST_I32] = { "I32", 32 },
	[DS_ST_U32] = { "U32", 32 },        [DS_ST_F32] = { "F32", 32 },
	[DS_ST_I64] = { "I64", 64 },        [DS_ST_U64] = { "U64", 64 },
	[DS_ST_F64] = { "F64", 64 },        [DS_ST_C64] = { "C64", 64 },
	[DS_ST_F8_E4M3] = { "F8_E4M3", 8 }, [DS_ST_F8_E5M2] = { "F8_E5M2", 8 },
	[DS_ST_F8_E4M3FNUZ] = { "F8_E4M3FNUZ", 8 },
	[DS_ST_F8_E5M2FNUZ] = { "F8_E5M2FNUZ", 8 },
	[DS_ST_F8_E8M0] = { "F8_E8M0", 8 }, [DS_ST_F6_E2M3] = { "F6_E2M3", 6 },
	[DS_ST_F6_E3M2] = { "F6_E3M2", 6 }, [DS_ST_F4] = { "F4", 4 },
};

int ds_st_dtype_parse(const char *s, enum ds_st_dtype *dt)
{
	int i;

	for (i = 0; i < DS_ST_NDTYPES; i++)
		if (strcmp(s, dtypes[i].name) == 0) {
			*dt = (enum ds_st_dtype)i;
			return 0;
		}
	return -1;
}

const char *ds_st_dtype_name(enum ds_st_dtype dt)
{
	return (unsigned)dt < DS_ST_NDTYPES ? dtypes[dt].name : "?";
}

unsigned ds_st_dtype_bits(enum ds_st_dtype dt)
{
	return (unsigned)dt < DS_ST_NDTYPES ? dtypes[dt].bits : 0;
}

const char *ds_st_shape_str(int ndim, const uint64_t *shape, char *buf,
			    size_t len)
{
	size_t n = 0;
	int i;

	n += (size_t)snprintf(buf, len, "[");
	for (i = 0; i < ndim && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%llu", i ? ", " : "",
				      (unsigned long long)shape[i]);
	if (n < len)
		snprintf(buf + n, len - n, "]");
	return buf;
}

/* ---- name hash ------------------------------------------------------------ */

static uint64_t hash_name(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	while (*s)
		h = (h ^ (uint8_t)*s++) * 1099511628211ull;
	return h;
}

static int build_hash(ds_st *st, ds_err *err)
{
	size_t cap = 16, i, j;

	while (cap < 2 * st->n_tensors)
		cap *= 2;
	st->slots = ds_calloc(cap, sizeof *st->slots, err);
	if (st->slots == NULL)
		return -1;
	st->n_slots = cap;
	for (i = 0; i < st->n_tensors; i++) {
		const ds_st_tensor *t = &st->tensors[i];

		for (j = hash_name(t->name) & (cap - 1); st->slots[j];
		     j = (j + 1) & (cap - 1)) {
			const ds_st_tensor *o = &st->tensors[st->slots[j] - 1];

			if (strcmp(o->name, t->name) == 0)
				return ds_errf(err, "%s: tensor %s: also in %s",
					       st->files[t->file].name, t->name,
					       st->files[o->file].name);
		}
		st->slots[j] = i + 1;
	}
	return 0;
}

const ds_st_tensor *ds_st_find(const ds_st *st, const char *name)
{
	size_t j;

	if (st->n_slots == 0)
		return NULL;
	for (j = hash_name(name) & (st->n_slots - 1); st->slots[j];
	     j = (j + 1) & (st->n_slots - 1)) {
		const ds_st_tensor *t = &st->tensors[st->slots[j] - 1];

		if (strcmp(t->name, name) == 0)
			return t;
	}
	return NULL;
}

/* ---- one file's header ---------------------------------------------------- */

/* A JSON integer in [0, max]. */
static int get_uint(const json_t *v, uint64_t max, uint64_t *out)
{
	json_int_t i;

	if (!json_is_integer(v))
		return -1;
	i = json_integer_value(v);
	if (i < 0 || (uint64_t)i > max)
		return -1;
	*out = (uint64_t)i;
	return 0;
}

static int parse_shape(const json_t *a, ds_st_tensor *t, const char *where,
		       ds_err *err)
{
	size_t i, n;

	if (!json_is_array(a))
		return ds_errf(err, "%s: shape is not an array", where);
	n = json_array_size(a);
	if (n > DS_ST_MAX_DIMS)
		return ds_errf(err, "%s: shape has %zu dimensions, more than %d",
			       where, n, DS_ST_MAX_DIMS);
	t->ndim = (int)n;
	t->nelem = 1;
	for (i = 0; i < n; i++) {
		if (get_uint(json_array_get(a, i), MAX_OFFSET, &t->shape[i]))
			return ds_errf(err, "%s: shape[%zu] is not an integer "
				       "in [0, 2^48)", where, i);
		if (ds_mul_u64(t->nelem, t->shape[i], &t->nelem))
			return ds_errf(err, "%s: shape overflows", where);
	}
	return 0;
}

/* One header entry into t (begin/end relative to the data buffer). */
static int parse_entry(const char *name, const json_t *v, ds_st_tensor *t,
		       uint64_t *begin, uint64_t *end, const char *fname,
		       ds_err *err)
{
	const char *key;
	const json_t *x;
	char where[MAX_NAME + 300];
	uint64_t bits;

	snprintf(where, sizeof where, "%s: tensor %s", fname, name);
	if (name[0] == '\0' || strlen(name) > MAX_NAME)
		return ds_errf(err, "%s: tensor name empty or over %d bytes",
			       fname, MAX_NAME);
	if (!json_is_object(v))
		return ds_errf(err, "%s: entry is not an object", where);
	json_object_foreach((json_t *)v, key, x)
		if (strcmp(key, "dtype") && strcmp(key, "shape") &&
		    strcmp(key, "data_offsets"))
			return ds_errf(err, "%s: unknown key \"%s\"", where, key);
	x = json_object_get(v, "dtype");
	if (!json_is_string(x))
		return ds_errf(err, "%s: dtype missing or not a string", where);
	if (ds_st_dtype_parse(json_string_value(x), &t->dtype))
		return ds_errf(err, "%s: unknown dtype \"%s\"", where,
			       json_string_value(x));
	x = json_object_get(v, "shape");
	if (x == NULL)
		return ds_errf(err, "%s: shape missing", where);
	if (parse_shape(x, t, where, err))
		return -1;
	x = json_object_get(v, "data_offsets");
	if (!json_is_array(x) || json_array_size(x) != 2 ||
	    get_uint(json_array_get(x, 0), MAX_OFFSET, begin) ||
	    get_uint(json_array_get(x, 1), MAX_OFFSET, end))
		return ds_errf(err, "%s: data_offsets is not two integers in "
			       "[0, 2^48)", where);
	if (*end < *begin)
		return ds_errf(err, "%s: data_offsets [%llu,%llu] out of order",
			       where, (unsigned long long)*begin,
			       (unsigned long long)*end);
	if (ds_mul_u64(t->nelem, ds_st_dtype_bits(t->dtype), &bits))
		return ds_errf(err, "%s: size overflows", where);
	if (bits % 8)
		return ds_errf(err, "%s: %llu elements of %s are not a whole "
			       "number of bytes", where,
			       (unsigned long long)t->nelem,
			       ds_st_dtype_name(t->dtype));
	t->nbytes = bits / 8;
	if (*end - *begin != t->nbytes) {
		char sh[160];

		return ds_errf(err, "%s: shape %s of %s needs %llu bytes, "
			       "data_offsets [%llu,%llu] give %llu", where,
			       ds_st_shape_str(t->ndim, t->shape, sh, sizeof sh),
			       ds_st_dtype_name(t->dtype),
			       (unsigned long long)t->nbytes,
			       (unsigned long long)*begin,
			       (unsigned long long)*end,
			       (unsigned long long)(*end - *begin));
	}
	return 0;
}

static int check_metadata(const json_t *m, const char *fname, ds_err *err)
{
	const char *key;
	const json_t *x;

	if (!json_is_object(m))
		return ds_errf(err, "%s: __metadata__ is not an object", fname);
	json_object_foreach((json_t *)m, key, x)
		if (!json_is_string(x))
			return ds_errf(err, "%s: __metadata__ value \"%s\" is "
				       "not a string", fname, key);
	return 0;
}

typedef struct span {
	uint64_t begin, end;
	size_t idx;
} span;

static int cmp_span(const void *a, const void *b)
{
	const span *x = a, *y = b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return 0;
}

/* Sorted by (begin, end), the tensors must tile [0, data_len) exactly. */
static int check_spans(span *sp, size_t n, const ds_st_tensor *ts,
		       uint64_t data_len, uint64_t data_off, uint64_t fsize,
		       const char *fname, ds_err *err)
{
	uint64_t expect = 0;
	size_t i;

	qsort(sp, n, sizeof *sp, cmp_span);
	for (i = 0; i < n; i++) {
		const char *nm = ts[sp[i].idx].name;

		if (sp[i].begin < expect)
			return ds_errf(err, "%s: tensor %s: data_offsets "
				       "[%llu,%llu] overlap tensor %s", fname, nm,
				       (unsigned long long)sp[i].begin,
				       (unsigned long long)sp[i].end,
				       ts[sp[i - 1].idx].name);
		if (sp[i].begin > expect)
			return ds_errf(err, "%s: tensor %s: data_offsets "
				       "[%llu,%llu] leave a gap after byte %llu",
				       fname, nm, (unsigned long long)sp[i].begin,
				       (unsigned long long)sp[i].end,
				       (unsigned long long)expect);
		expect = sp[i].end;
	}
	if (expect > data_len)
		return ds_errf(err, "%s: tensor %s: data ends at byte %llu, past "
			       "the end of the file (%llu bytes): truncated?",
			       fname, ts[sp[n - 1].idx].name,
			       (unsigned long long)(data_off + expect),
			       (unsigned long long)fsize);
	if (expect < data_len)
		return ds_errf(err, "%s: %llu bytes after the last tensor's data",
			       fname, (unsigned long long)(data_len - expect));
	return 0;
}

/* The JSON object of file f's header in *root; *base is where the data
 * starts. */
static int load_header(const ds_st_file *f, json_t **root, uint64_t *base,
		       ds_err *err)
{
	const uint8_t *d = f->map.data;
	uint64_t size = f->map.size, hlen, i;
	json_error_t jerr;

	if (size < 8)
		return ds_errf(err, "%s: %llu bytes, shorter than the 8-byte "
			       "header length", f->name, (unsigned long long)size);
	memcpy(&hlen, d, 8); /* little-endian host */
	if (hlen == 0)
		return ds_errf(err, "%s: header length is 0", f->name);
	if (hlen > DS_ST_MAX_HEADER)
		return ds_errf(err, "%s: header length %llu exceeds %llu",
			       f->name, (unsigned long long)hlen,
			       DS_ST_MAX_HEADER);
	if (hlen > size - 8)
		return ds_errf(err, "%s: header length %llu past the end of the "
			       "file (%llu bytes)", f->name,
			       (unsigned long long)hlen, (unsigned long long)size);
	if (d[8] != '{')
		return ds_errf(err, "%s: header does not start with '{'", f->name);
	*root = json_loadb((const char *)d + 8, hlen,
			   JSON_REJECT_DUPLICATES | JSON_DISABLE_EOF_CHECK, &jerr);
	if (*root == NULL)
		return ds_errf(err, "%s: header: %s at byte %d", f->name,
			       jerr.text, jerr.position);
	*base = 8 + hlen;
	for (i = (uint64_t)jerr.position; i < hlen; i++)
		if (d[8 + i] != ' ')
			return ds_errf(err, "%s: header: byte %llu after the JSON "
				       "object is not a space", f->name,
				       (unsigned long long)i);
	if (!json_is_object(*root))
		return ds_errf(err, "%s: header is not a JSON object", f->name);
	return 0;
}

/* Append the entries of header root (file fi, data at base) to st's
 * tensors, their spans to sp (room for every key); *n counts them. */
static int add_entries(ds_st *st, uint32_t fi, const json_t *root,
		       uint64_t base, span *sp, size_t *n, ds_err *err)
{
	const ds_st_file *f = &st->files[fi];
	const char *key;
	json_t *v;

	json_object_foreach((json_t *)root, key, v) {
		ds_st_tensor *t = &st->tensors[st->n_tensors];
		uint64_t b = 0, e = 0;

		if (strcmp(key, "__metadata__") == 0) {
			if (check_metadata(v, f->name, err))
				return -1;
			continue;
		}
		memset(t, 0, sizeof *t);
		if (parse_entry(key, v, t, &b, &e, f->name, err))
			return -1;
		t->name = strdup(key);
		if (t->name == NULL)
			return ds_errf(err, "%s: out of memory", f->name);
		t->file = fi;
		t->offset = base + b;
		sp[*n] = (span){ .begin = b, .end = e, .idx = st->n_tensors };
		st->n_tensors++;
		(*n)++;
	}
	return 0;
}

/* Put the n tensors from index `first` in the order of sp (by offset: the
 * conversion streams) and point them into the mapping d. */
static int order_by_offset(ds_st *st, size_t first, const span *sp, size_t n,
			   const uint8_t *d, ds_err *err)
{
	ds_st_tensor *tmp = ds_calloc(n ? n : 1, sizeof *tmp, err);
	size_t i;

	if (tmp == NULL)
		return -1;
	for (i = 0; i < n; i++) {
		tmp[i] = st->tensors[sp[i].idx];
		tmp[i].data = d + tmp[i].offset; /* in bounds: checked */
	}
	memcpy(st->tensors + first, tmp, n * sizeof *tmp);
	free(tmp);
	return 0;
}

/* Parse and validate the header of file `fi`; append its tensors. */
static int parse_header(ds_st *st, uint32_t fi, ds_err *err)
{
	ds_st_file *f = &st->files[fi];
	uint64_t base = 0, size = f->map.size;
	size_t n = 0, cap, first = st->n_tensors;
	ds_st_tensor *nt;
	span *sp = NULL;
	json_t *root = NULL;
	int rc = -1;

	if (load_header(f, &root, &base, err))
		goto out;
	cap = json_object_size(root);
	sp = ds_calloc(cap ? cap : 1, sizeof *sp, err);
	if (sp == NULL)
		goto out;
	nt = realloc(st->tensors, (st->n_tensors + cap + 1) * sizeof *nt);
	if (nt == NULL) {
		ds_errf(err, "%s: out of memory", f->name);
		goto out;
	}
	st->tensors = nt;
	if (add_entries(st, fi, root, base, sp, &n, err) == 0 &&
	    check_spans(sp, n, st->tensors, size - base, base, size, f->name,
			err) == 0 &&
	    order_by_offset(st, first, sp, n, f->map.data, err) == 0)
		rc = 0;
out:
	free(sp);
	json_decref(root);
	return rc;
}

/* ---- opening ----------------------------------------------------------------- */

static int add_file(ds_st *st, const char *path, ds_err *err)
{
	ds_st_file *nf = realloc(st->files, (st->n_files + 1) * sizeof *nf);
	ds_st_file *f;
	const char *slash;

	if (nf == NULL)
		return ds_errf(err, "%s: out of memory", path);
	st->files = nf;
	f = &st->files[st->n_files];
	memset(f, 0, sizeof *f);
	f->map.fd = -1;
	f->path = strdup(path);
	if (f->path == NULL)
		return ds_errf(err, "%s: out of memory", path);
	slash = strrchr(f->path, '/');
	f->name = slash ? slash + 1 : f->path;
	st->n_files++;
	if (ds_map_open(&f->map, path, 0, err))
		return -1;
	return parse_header(st, st->n_files - 1, err);
}

int ds_st_open_file(ds_st *st, const char *path, ds_err *err)
{
	memset(st, 0, sizeof *st);
	if (add_file(st, path, err) || build_hash(st, err)) {
		ds_st_free(st);
		return -1;
	}
	return 0;
}

/* A shard name must name a file in the checkpoint directory itself. */
static int plain_name(const char *s)
{
	return s[0] != '\0' && strchr(s, '/') == NULL && strcmp(s, ".") != 0 &&
	       strcmp(s, "..") != 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every tensor in a shard is in the index under that shard, and every
 * index entry exists in its shard. */
static int check_index(const ds_st *st, const json_t *wm, const char *iname,
		       ds_err *err)
{
	const char *key;
	json_t *v;
	size_t i;

	for (i = 0; i < st->n_tensors; i++) {
		const ds_st_tensor *t = &st->tensors[i];
		const json_t *e = json_object_get(wm, t->name);

		if (e == NULL)
			return ds_errf(err, "%s: tensor %s is not in %s",
				       st->files[t->file].name, t->name, iname);
		if (strcmp(json_string_value(e), st->files[t->file].name))
			return ds_errf(err, "%s: tensor %s: %s places it in %s",
				       st->files[t->file].name, t->name, iname,
				       json_string_value(e));
	}
	json_object_foreach((json_t *)wm, key, v)
		if (ds_st_find(st, key) == NULL)
			return ds_errf(err, "%s: tensor %s: missing from %s", iname,
				       key, json_string_value(v));
	return 0;
}

static int open_index(ds_st *st, const char *dir, const char *ipath,
		      ds_err *err)
{
	const char *iname = "model.safetensors.index.json", *key;
	json_error_t jerr;
	json_t *root, *wm, *v;
	const char **names = NULL;
	size_t n = 0, i;
	char *text = NULL;
	int rc = -1;

	if (ds_read_file(ipath, MAX_INDEX_BYTES, &text, NULL, err))
		return -1;
	root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	free(text);
	if (root == NULL)
		return ds_errf(err, "%s: line %d: %s", iname, jerr.line, jerr.text);
	wm = json_object_get(root, "weight_map");
	if (!json_is_object(root) || !json_is_object(wm)) {
		ds_errf(err, "%s: no \"weight_map\" object", iname);
		goto out;
	}
	if (json_object_size(wm) == 0) {
		ds_errf(err, "%s: \"weight_map\" names no tensor", iname);
		goto out;
	}
	names = calloc(json_object_size(wm) + 1, sizeof *names);
	if (names == NULL) {
		ds_errf(err, "%s: out of memory", iname);
		goto out;
	}
	json_object_foreach(wm, key, v) {
		if (!json_is_string(v) || !plain_name(json_string_value(v))) {
			ds_errf(err, "%s: tensor %s: shard is not a file name in "
				"the checkpoint directory", iname, key);
			goto out;
		}
		names[n++] = json_string_value(v);
	}
	qsort(names, n, sizeof *names, cmp_str);
	for (i = 0; i < n; i++) {
		char *p;
		int r;

		if (i > 0 && strcmp(names[i], names[i - 1]) == 0)
			continue;
		p = ds_path_join(dir, names[i]);
		if (p == NULL) {
			ds_errf(err, "%s: out of memory", iname);
			goto out;
		}
		r = add_file(st, p, err);
		free(p);
		if (r)
			goto out;
	}
	if (build_hash(st, err) || check_index(st, wm, iname, err))
		goto out;
	rc = 0;
out:
	free(names);
	json_decref(root);
	return rc;
}

/* The one *.safetensors in dir (its name malloc'd into *out), or an error. */
static int find_single(const char *dir, char **out, ds_err *err)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	size_t n = 0, len;

	*out = NULL;
	if (d == NULL)
		return ds_errf(err, "%s: %s", dir, strerror(errno));
	while ((de = readdir(d)) != NULL) {
		len = strlen(de->d_name);
		if (len > 12 && strcmp(de->d_name + len - 12, ".safetensors") == 0) {
			n++;
			if (*out == NULL)
				*out = strdup(de->d_name);
		}
	}
	closedir(d);
	if (n == 1 && *out != NULL)
		return 0;
	free(*out);
	*out = NULL;
	if (n == 0)
		return ds_errf(err, "%s: no .safetensors file (PyTorch .bin "
			       "checkpoints are not supported)", dir);
	return ds_errf(err, "%s: %zu .safetensors files but no "
		       "model.safetensors.index.json", dir, n);
}

int ds_st_open(ds_st *st, const char *dir, ds_err *err)
{
	char *ipath = ds_path_join(dir, "model.safetensors.index.json");
	char *one = NULL, *path;
	int rc;

	memset(st, 0, sizeof *st);
	if (ipath == NULL)
		return ds_errf(err, "%s: out of memory", dir);
	if (access(ipath, F_OK) == 0) {
		rc = open_index(st, dir, ipath, err);
		free(ipath);
		if (rc)
			ds_st_free(st);
		return rc;
	}
	free(ipath);
	path = ds_path_join(dir, "model.safetensors");
	if (path != NULL && access(path, F_OK) != 0) {
		free(path);
		path = NULL;
		if (find_single(dir, &one, err))
			return -1;
		path = ds_path_join(dir, one);
		free(one);
	}
	if (path == NULL)
		return ds_errf(err, "%s: out of memory", dir);
	rc = ds_st_open_file(st, path, err);
	free(path);
	return rc;
}

void ds_st_free(ds_st *st)
{
	size_t i;

	for (i = 0; i < st->n_tensors; i++)
		free((char *)st->tensors[i].name);
	for (i = 0; i < st->n_files; i++) {
		ds_map_close(&st->files[i].map);
		free(st->files[i].path);
	}
	free(st->tensors);
	free(st->files);
	free(st->slots);
	memset(st, 0, sizeof *st);
}

/* ---- paging advice -------------------------------------------------------- */

/* Bytes [off, off + len) of tensor t (len clipped to the tensor). */
static int advise(const ds_st *st, const ds_st_tensor *t, uint64_t off,
		  uint64_t len, int advice, int inner)
{
	const ds_map *m = &st->files[t->file].map;
	uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE), a, b, lo, hi;

	if (off >= t->nbytes)
		return 0;
	if (len > t->nbytes - off)
		len = t->nbytes - off;
	if (m->data == NULL || len == 0)
		return 0;
	lo = t->offset + off;
	hi = lo + len;
	/* release only whole pages of this tensor (a neighbour may share the
	 * edge pages); read-ahead may round outward */
	a = inner ? ds_round_up(lo, pg) : lo / pg * pg;
	b = inner ? hi / pg * pg : ds_round_up(hi, pg);
	if (b > ds_round_up(m->size, pg))
		b = ds_round_up(m->size, pg);
	return b > a ? madvise((void *)(m->data + a), b - a, advice) : 0;
}

void ds_st_release(const ds_st *st, const ds_st_tensor *t)
{
	advise(st, t, 0, t->nbytes, MADV_DONTNEED, 1);
}

void ds_st_release_range(const ds_st *st, const ds_st_tensor *t,
			 uint64_t off, uint64_t len)
{
	advise(st, t, off, len, MADV_DONTNEED, 1);
}

void ds_st_prefetch(const ds_st *st, const ds_st_tensor *t)
{
#ifdef MADV_POPULATE_READ
	/* map the pages in one call instead of a fault per page */
	if (advise(st, t, 0, t->nbytes, MADV_POPULATE_READ, 0) == 0)
		return;
#endif
	advise(st, t, 0, t->nbytes, MADV_WILLNEED, 0);
}

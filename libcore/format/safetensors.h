/*
 * safetensors.h - a strict reader of Hugging Face safetensors checkpoints,
 * single-file and sharded (model.safetensors.index.json).
 *
 * Every file is mapped read-only and its header validated completely before
 * any tensor is handed out (docs/formats/safetensors.md §5, plus the stricter
 * checks of its checklist): header length <= 100000000 and inside the file,
 * a JSON object starting with '{' with only spaces after it, no duplicate
 * keys, known dtypes, integer shapes and offsets, tensors contiguous from 0
 * without gaps or overlaps, bytes = product(shape) x dtype size (overflow
 * checked), and the data ending exactly at the end of the file.  A sharded
 * checkpoint must agree with its index in both directions.
 *
 * Tensor data may be unaligned: read it with memcpy (ds_st_ld32 etc.).
 */
#ifndef DS_SAFETENSORS_H
#define DS_SAFETENSORS_H

#include <stdint.h>
#include <string.h>

#include "base/util.h"

#define DS_ST_MAX_DIMS 8
#define DS_ST_MAX_HEADER 100000000ull /* the reference reader's limit */

enum ds_st_dtype {
	DS_ST_BOOL, DS_ST_U8, DS_ST_I8, DS_ST_I16, DS_ST_U16, DS_ST_F16,
	DS_ST_BF16, DS_ST_I32, DS_ST_U32, DS_ST_F32, DS_ST_I64, DS_ST_U64,
	DS_ST_F64, DS_ST_C64, DS_ST_F8_E4M3, DS_ST_F8_E5M2,
	DS_ST_F8_E4M3FNUZ, DS_ST_F8_E5M2FNUZ, DS_ST_F8_E8M0, DS_ST_F6_E2M3,
	DS_ST_F6_E3M2, DS_ST_F4,
	DS_ST_NDTYPES
};

typedef struct ds_st_tensor {
	const char *name;          /* owned by the ds_st */
	enum ds_st_dtype dtype;
	int ndim;                  /* 0 (a scalar) .. DS_ST_MAX_DIMS */
	uint64_t shape[DS_ST_MAX_DIMS];
	uint64_t nelem;            /* product of shape */
	uint64_t nbytes;
	const uint8_t *data;       /* inside the file's mapping; maybe unaligned */
	uint64_t offset;           /* absolute offset of data in its file */
	uint32_t file;             /* index into ds_st.files */
} ds_st_tensor;

typedef struct ds_st_file {
	char *path;
	const char *name;          /* the last component of path */
	ds_map map;
} ds_st_file;

typedef struct ds_st {
	ds_st_file *files;
	uint32_t n_files;
	ds_st_tensor *tensors;     /* file by file, each in offset order */
	size_t n_tensors;
	size_t *slots;             /* hash of names: index + 1, 0 = empty */
	size_t n_slots;            /* a power of two */
} ds_st;

/* Open the checkpoint in directory `dir`: model.safetensors.index.json if
 * present (sharded), else model.safetensors, else the only *.safetensors
 * file there (AutoGPTQ's gptq_model-4bit-128g.safetensors). */
int ds_st_open(ds_st *st, const char *dir, ds_err *err);
/* Open one safetensors file. */
int ds_st_open_file(ds_st *st, const char *path, ds_err *err);
void ds_st_free(ds_st *st);

/* The tensor called `name`, or NULL. */
const ds_st_tensor *ds_st_find(const ds_st *st, const char *name);
/* Tell the kernel we are done with a tensor's pages, so a streaming
 * conversion's resident memory does not grow with the model. */
void ds_st_release(const ds_st *st, const ds_st_tensor *t);
/* The same for bytes [off, off + len) of the tensor (whole pages). */
void ds_st_release_range(const ds_st *st, const ds_st_tensor *t,
			 uint64_t off, uint64_t len);
/* Ask for a tensor's pages to be read ahead. */
void ds_st_prefetch(const ds_st *st, const ds_st_tensor *t);

/* "BF16", "I32", ...; -1 for an unknown string. */
int ds_st_dtype_parse(const char *s, enum ds_st_dtype *dt);
const char *ds_st_dtype_name(enum ds_st_dtype dt);
/* Bits per element (4, 6, 8, 16, 32 or 64). */
unsigned ds_st_dtype_bits(enum ds_st_dtype dt);
/* "[4096, 11008]" into buf (of `len` bytes). */
const char *ds_st_shape_str(int ndim, const uint64_t *shape, char *buf,
			    size_t len);

/* Little-endian loads from possibly unaligned tensor data. */
static inline uint32_t ds_st_ld32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}
static inline uint16_t ds_st_ld16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return v;
}

#endif

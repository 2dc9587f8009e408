/*
 * modelfile.h - the runtime model directory (ds-model(5)): model.meta +
 * model.bin, written by ds-convert and loaded by ds-run, ds-bench and
 * ds-serve.
 *
 * Writing is all-or-nothing: everything goes into DST.tmp-XXXXXX beside
 * DST (locked with flock while in use, so the next run can tell a stale
 * one from a live one and remove it), and is renamed into place only when
 * complete and synced.
 *
 * Loading maps model.bin and validates model.meta completely (format,
 * version, hyper-parameters, every tensor's type, shape, size, alignment
 * and bounds, no overlaps, the architecture's full tensor set), so that
 * no access through a ds_tensor can fault or read another tensor's bytes.
 */
#ifndef DS_MODELFILE_H
#define DS_MODELFILE_H

#include <stdint.h>

#include "hfconfig.h"
#include "kernels/types.h"
#include "base/util.h"

struct json_t;

#define DS_MODEL_FORMAT "ds-model"
#define DS_MODEL_VERSION 2
#define DS_MODEL_ALIGN 4096     /* as written; the loader needs 64 */
#define DS_MODEL_MIN_ALIGN 64
#define DS_MODEL_MAX_META (256u << 20)

/* ---- temporary directories beside a destination ------------------------- */

typedef struct ds_tmpdir {
	char *path;   /* DST.tmp-XXXXXX */
	int fd;       /* the directory, flock'ed while we own it */
} ds_tmpdir;

/* Create and lock a fresh DST.tmp-XXXXXX in dst's parent directory. */
int ds_tmpdir_create(ds_tmpdir *t, const char *dst, ds_err *err);
/* Remove it and everything in it. */
void ds_tmpdir_remove(ds_tmpdir *t);
/* Remove every DST.tmp-XXXXXX nobody holds (left by a killed run);
 * returns how many were removed. */
int ds_tmpdir_clean_stale(const char *dst);

/* ---- writer --------------------------------------------------------------------- */

typedef struct ds_mwriter {
	char *dst;             /* the destination directory */
	int force;             /* replace an existing dst */
	ds_tmpdir tmp;
	char *bin_path;
	int fd;                /* model.bin */
	uint64_t end;          /* end of the data written so far */
	uint8_t *blk;          /* the 2 MiB of the file being filled */
	uint64_t blk_off;      /* its offset (a multiple of 2 MiB) */
	struct json_t *tensors;/* entries written so far */
	/* the tensor being streamed (between begin and end) */
	struct json_t *cur;
	uint64_t cur_off, cur_size, cur_done;
	uint32_t cur_crc;
} ds_mwriter;

/* Refuses an existing dst unless force (and then only one that holds a
 * model.meta, or is empty); removes stale temporaries of dst. */
int ds_mwriter_open(ds_mwriter *w, const char *dst, int force, ds_err *err);
/* One tensor, streamed: begin, then exactly ds_tensor_bytes() bytes in
 * any number of writes, then end. */
int ds_mwriter_begin(ds_mwriter *w, const char *name, ds_ttype t, int ndim,
		     const uint64_t *shape, ds_err *err);
int ds_mwriter_write(ds_mwriter *w, const void *data, size_t len,
		     ds_err *err);
int ds_mwriter_end(ds_mwriter *w, ds_err *err);
/* begin + write + end. */
int ds_mwriter_tensor(ds_mwriter *w, const char *name, ds_ttype t, int ndim,
		      const uint64_t *shape, const void *data, ds_err *err);
/* The temporary directory: other files of the model (tokenizer.bin) are
 * written here before ds_mwriter_commit. */
const char *ds_mwriter_dir(const ds_mwriter *w);
/* Write model.meta from `meta` (an object with the keys other than
 * "tensors", which the writer adds; borrowed), sync everything and move
 * the directory into place. */
int ds_mwriter_commit(ds_mwriter *w, struct json_t *meta, ds_err *err);
/* Remove the temporary (after an error or an interrupt); idempotent, and
 * also what ds_mwriter_commit leaves to clean up. */
void ds_mwriter_abort(ds_mwriter *w);

/* ---- loader --------------------------------------------------------------------- */

/* Load flags; ds-run adds hugepages and NUMA placement beside these. */
enum {
	DS_LOAD_POPULATE = 1u << 0, /* fault every page in at load (MAP_POPULATE) */
	DS_LOAD_MLOCK = 1u << 1,    /* lock the weights in memory */
	/* also hand out the multi-token-prediction layer's tensors (checked
	 * either way; without this flag they are left out of tensors[], so
	 * that nothing binds or walks them) */
	DS_LOAD_MTP = 1u << 2,
};

typedef struct ds_tensor {
	const char *name;
	ds_ttype type;
	int ndim;
	uint64_t shape[4];     /* logical shape, outermost first ([N, K]) */
	const uint8_t *data;   /* in the mapping, DS_MODEL_MIN_ALIGN-aligned */
	uint64_t offset, size; /* within model.bin */
	uint32_t crc32;
} ds_tensor;

typedef struct ds_model {
	char *dir;
	struct json_t *meta;   /* all of model.meta: "tokenizer",
				  "chat_template" ... are read from here */
	ds_hparams hp;         /* hp.arch from "arch" */
	struct {
		char source[8];    /* "awq" "gptq" "fp8" "rtn" "none" */
		uint32_t bits, group_size;
		char type[16];     /* the quantized matrices' type, "q4g64" */
	} quant;
	ds_map bin;            /* model.bin */
	ds_tensor *tensors;    /* in model.meta order; the MTP layer's only
				  with DS_LOAD_MTP, and then last */
	size_t n_tensors;
	size_t n_mtp_tensors;  /* of which the MTP layer's (DS_LOAD_MTP) */
	size_t *by_name;       /* indices sorted by name */
	unsigned flags;
} ds_model;

int ds_model_load(ds_model *m, const char *dir, unsigned flags, ds_err *err);
/* The tensor called name, or NULL. */
const ds_tensor *ds_model_tensor(const ds_model *m, const char *name);
/* Check every tensor's CRC-32; the error names the first that differs. */
int ds_model_verify(const ds_model *m, ds_err *err);
void ds_model_free(ds_model *m);

#endif

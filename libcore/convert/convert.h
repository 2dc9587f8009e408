/*
 * convert.h - Hugging Face checkpoint -> runtime model directory (what
 * ds-convert does), and the --inspect / --verify reports.
 *
 * A conversion validates the whole checkpoint first (config, quantization
 * settings, every safetensors header, every tensor the architecture needs
 * with its shape, nothing left over), then streams tensor by tensor into
 * DST.tmp-XXXXXX, so its memory stays a small multiple of the largest
 * matrix, and renames the result into place only when it is complete.
 */
#ifndef DS_CONVERT_H
#define DS_CONVERT_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "format/modelfile.h"
#include "convert/quant/quant.h"
#include "base/util.h"

/* --quantize: what float (F32/F16/BF16) and FP8 matrices become; KEEP
 * stores FP8 as bf16 (it has no runtime type of its own); AUTO is q8 for
 * an FP8 checkpoint, KEEP otherwise. */
enum ds_requant { DS_RQ_KEEP, DS_RQ_Q8, DS_RQ_Q4, DS_RQ_AUTO };

typedef struct ds_convert_opts {
	const char *src;          /* checkpoint directory or .tar[.gz|.zst]/.zip */
	const char *dst;          /* the model directory to create */
	enum ds_qformat format;   /* --quant-format */
	enum ds_requant quantize; /* --quantize */
	uint32_t group_size;      /* --group-size, for RTN */
	int threads;              /* >= 1 */
	int force;                /* replace an existing model directory */
	FILE *progress;           /* bar or summary line; NULL: silent */
	/* set (by a signal handler) to stop: the temporaries are removed and
	 * ds_convert fails with "interrupted" */
	const volatile sig_atomic_t *cancel;
} ds_convert_opts;

typedef struct ds_convert_stats {
	uint64_t in_bytes;        /* checkpoint tensor bytes read */
	uint64_t out_bytes;       /* model.bin bytes */
	uint32_t tensors;         /* tensors written */
	ds_qstats q;              /* GPTQ 8-bit groups re-quantized */
	uint32_t n_mtp;           /* MTP layers converted */
	int mtp_absent;           /* config.json names MTP layers the
				     checkpoint does not carry */
	double seconds;
} ds_convert_stats;

int ds_convert(const ds_convert_opts *o, ds_convert_stats *stats,
	       ds_err *err);

/* Print what SRC holds: a checkpoint (directory or archive: architecture,
 * quantization, every tensor's name, dtype, shape, bytes) or a model
 * directory (the same from model.meta, with offsets and CRC-32s). */
int ds_inspect(const char *src, FILE *out, ds_err *err);

/* Load DST, check its meta and every CRC-32; print one line. */
int ds_verify(const char *dst, FILE *out, ds_err *err);

/* ---- checkpoint sources ---------------------------------------------------- */

/* A checkpoint directory ready to read: src itself, or the archive src
 * extracted into a temporary beside `near` (removed by ds_source_close). */
typedef struct ds_source {
	char *dir;
	ds_tmpdir tmp;            /* path NULL when src is a directory */
} ds_source;

int ds_source_open(ds_source *s, const char *src, const char *near,
		   const volatile sig_atomic_t *cancel, ds_err *err);
void ds_source_close(ds_source *s);

/* The hook where the rest of a model directory (tokenizer.bin, and the
 * "tokenizer" and "chat_template" keys of meta) is written into the
 * temporary directory `tmp` from the checkpoint in `src` before the
 * directory is moved into place. */
int ds_convert_extras(const char *src, const char *tmp, struct json_t *meta,
		      ds_err *err);

#endif

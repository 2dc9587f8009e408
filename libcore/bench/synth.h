/*
 * synth.h - random-weight runtime models with the exact shapes of
 * published ones (`ds-bench --synthetic`): what speed a model would reach
 * here, before downloading it.
 *
 * A shape is the published config.json's values (vocab, widths, heads,
 * layers, MoE and MLA settings), read through the same parser as a real
 * checkpoint's.  The weights are random with scales chosen so every
 * activation stays about 1 in size (the forward pass stays finite); every
 * layer (and expert) holds the same random matrix of its shape, since the
 * speed of a pass does not depend on the values.  Types as ds-convert
 * --quantize gives them: the embedding bf16, the output projection q8
 * when the matrices are q4, norms and routers f32.
 */
#ifndef DS_SYNTH_H
#define DS_SYNTH_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "format/hfconfig.h"
#include "kernels/types.h"
#include "base/util.h"

typedef struct ds_synth_shape {
	const char *name;      /* "tinyllama-1.1b" */
	const char *model;     /* the published model it copies */
	const char *config;    /* its config.json (the keys that matter) */
	int test_only;         /* a tiny shape for the tests */
} ds_synth_shape;

/* The table, *n entries. */
const ds_synth_shape *ds_synth_shapes(size_t *n);

/* The hyper-parameters of shape `name`, with n_layer = layers (0: the
 * published depth; MoE models keep their first dense layers first). */
int ds_synth_hparams(const char *name, uint32_t layers, ds_hparams *hp,
		     ds_err *err);

/* Bytes model.bin will take for hp with matrices of type t. */
int ds_synth_bytes(const ds_hparams *hp, ds_ttype t, uint64_t *bytes,
		   ds_err *err);

/* Whether `bytes` of model written under dir, then mapped (plus `extra`
 * bytes of memory: the cache, a hugepages copy), fit in the free space of
 * dir's file system and in MemAvailable; an error says which does not. */
int ds_synth_check_fit(const char *dir, uint64_t bytes, uint64_t extra,
		       ds_err *err);

typedef struct ds_synth_opts {
	ds_hparams hp;
	ds_ttype type;         /* the matrices' type: q4gG, q8gG, bf16 */
	const char *dst;       /* the model directory to create */
	uint64_t seed;
	FILE *progress;        /* NULL: silent */
	/* set (by a signal handler) to stop: nothing is left behind and the
	 * call fails with "interrupted" */
	const volatile sig_atomic_t *cancel;
} ds_synth_opts;

/* Write the model directory dst (model.meta + model.bin; no tokenizer). */
int ds_synth_write(const ds_synth_opts *o, uint64_t *bytes, ds_err *err);

#endif

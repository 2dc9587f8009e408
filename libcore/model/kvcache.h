/*
 * kvcache.h - the key/value cache of a forward pass (forward.h), one per
 * sequence slot.
 *
 * Each of n_slot slots holds up to n_ctx positions of every layer.  What a
 * position holds depends on the architecture:
 *
 *   llama, qwen2   K and V rows of every KV head: 2 * n_head_kv * head_dim
 *                  values per layer
 *   deepseek2      MLA's compressed form: the normalized latent c_n
 *                  (kv_lora_rank values) followed by the roped key k_pe
 *                  (qk_rope_head_dim values), one 576-value row per layer
 *                  for V2/V3; V is a view of the row's first kv_lora_rank
 *                  values (docs/deepseek.md section 6)
 *
 * Values are stored as f16 by default, or f32, bf16, q8 (blocks of 32
 * values with one scale: kernels.h ds_kvtype).  The memory is one anonymous
 * mapping: pages are backed only once rows are written in them (with
 * each head's rows together, a layer's pages are all backed early when
 * n_ctx rows of a head span less than a page).
 *
 * A slot's length is the number of positions 0 .. len-1 it holds; the
 * forward pass extends it, ds_kvcache_seq_keep cuts it.  One thread at a
 * time uses a cache (the thread running the forward passes).
 */
#ifndef DS_KVCACHE_H
#define DS_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "format/hfconfig.h"
#include "kernels/kernels.h"
#include "ops/ops.h"
#include "base/util.h"

typedef struct ds_kvcache {
	enum ds_kvtype type;
	uint32_t n_slot, n_ctx, n_layer;
	int mla;                 /* one latent row per position, V a view */
	uint32_t n_kv_head;      /* MLA: 1 */
	uint32_t k_dim, v_dim;   /* values per head row (MLA: r_kv + d_rope,
				    r_kv) */
	size_t k_row, v_row;     /* bytes per head row */
	size_t pos_bytes;        /* bytes per position per layer (K + V) */
	size_t slot_layer_bytes; /* n_ctx * pos_bytes */
	size_t slot_bytes;       /* n_layer * slot_layer_bytes, rounded up to
				    a page */
	uint8_t *data;           /* [n_slot][n_layer] of n_ctx * pos_bytes:
				    K [n_kv_head][n_ctx][k_row], then V
				    [n_kv_head][n_ctx][v_row] (MLA: one
				    [n_ctx][k_row]) */
	size_t bytes;
	uint32_t *len;           /* [n_slot] positions held */
} ds_kvcache;

/* "f32" "f16" "bf16" "q8" -> type; -1 with a message listing them. */
int ds_kvtype_parse(const char *s, enum ds_kvtype *t, ds_err *err);
const char *ds_kvtype_name(enum ds_kvtype t);

/* Bytes the cache of hp with these sizes takes (for --verbose and
 * planning); -1 on overflow or a type the head widths do not allow (q8
 * needs multiples of 32). */
int ds_kvcache_size(const ds_hparams *hp, uint32_t n_slot, uint32_t n_ctx,
		    enum ds_kvtype t, size_t *bytes, ds_err *err);

int ds_kvcache_init(ds_kvcache *kv, const ds_hparams *hp, uint32_t n_slot,
		    uint32_t n_ctx, enum ds_kvtype t, ds_err *err);
void ds_kvcache_free(ds_kvcache *kv);

/* One layer of one slot, as the ops' views (ops.h ds_kv): K rows and V
 * rows of head h at position p are at data + p * ld + h * head_stride.
 * A head's rows are contiguous (ld is one row), so decode's attention
 * reads each head's keys and values as two forward streams. */
void ds_kvcache_layer(const ds_kvcache *kv, uint32_t slot, uint32_t layer,
		      ds_kv *k, ds_kv *v);

/* Keep the first n positions of a slot (n <= its length); 0 empties it.
 * The memory of the dropped positions is given back to the system when
 * a whole slot is emptied. */
void ds_kvcache_seq_keep(ds_kvcache *kv, uint32_t slot, uint32_t n);

/* ---- positions moved whole (the prompt cache, runtime/pcache.h) -------------
 * The serial form of n positions of a slot: for each layer, for each KV
 * head, its n K rows then its n V rows (MLA: the n latent rows), as they
 * lie in the slot: n_layer * n * pos_bytes bytes (ds_kvcache_span). */
size_t ds_kvcache_span(const ds_kvcache *kv, uint32_t n);
/* Positions [pos, pos + n) of slot (pos + n <= its length) into dst. */
void ds_kvcache_read(const ds_kvcache *kv, uint32_t slot, uint32_t pos,
		     uint32_t n, uint8_t *dst);
/* The reverse, at pos <= the slot's length, which becomes pos + n. */
void ds_kvcache_write(ds_kvcache *kv, uint32_t slot, uint32_t pos,
		      uint32_t n, const uint8_t *src);
/* Positions [pos, pos + n) of slot src (held there) into slot dst at
 * the same positions (pos <= dst's length, which becomes pos + n). */
void ds_kvcache_copy(ds_kvcache *kv, uint32_t dst, uint32_t src,
		     uint32_t pos, uint32_t n);

#endif

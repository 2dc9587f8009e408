/*
 * pcache.h - the prompt cache: the KV rows of token prefixes kept after
 * their sequences have moved on, so that a request whose prompt starts the
 * same way starts from them instead of computing them again (sched.h uses
 * it; docs/chat.md describes the whole).
 *
 * Rows are kept in blocks of DS_PCACHE_BLOCK positions.  Block k of a
 * prompt is found by its parent (block k - 1) and its own tokens, so a
 * lookup walks the prompt a block at a time and prompts share the blocks
 * of their common prefix (a tree of prefixes).  Memory is bounded by
 * max_bytes: the least recently used block goes first, and never one
 * that other blocks continue (each use of a block uses its ancestors
 * after it, so they are always more recent).
 *
 * With a directory the blocks are saved there, one file each
 * (ds_pcache_save), and read back (ds_pcache_load).  A file is trusted
 * only when it is exactly what this model, version and cache layout
 * would write: the magic, version, sizes, the model's identity, the KV
 * type and shape, the block size, its prefix's hash (its name), the token
 * ids and the CRC-32s of the header, tokens and rows must all agree;
 * anything else is ignored with a warning naming the file and the reason.
 *
 * One thread at a time (the scheduler's driver); ds_pcache_stats from any.
 */
#ifndef DS_PCACHE_H
#define DS_PCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "model/kvcache.h"
#include "base/util.h"

#define DS_PCACHE_BLOCK 16          /* positions per block */

typedef struct ds_pcache ds_pcache;

typedef struct ds_pcache_opts {
	size_t max_bytes;           /* the blocks' memory (--cache-ram) */
	const char *dir;            /* --cache-dir (made if missing), or NULL */
	uint8_t model_id[16];       /* the weights' identity (session.c) */
	uint32_t n_vocab;           /* token ids read from files are below it */
	/* a file ignored: one line, without newline (NULL: none said) */
	void (*warn)(void *user, const char *line);
	void *user;
} ds_pcache_opts;

/* Blocks of kv's shape (the cache's type and layout). */
int ds_pcache_init(ds_pcache **pc, const ds_kvcache *kv,
		   const ds_pcache_opts *o, ds_err *err);
void ds_pcache_free(ds_pcache *pc);

/* The blocks held of tok[0..n): how many whole blocks of it, from the
 * start, could be restored. */
size_t ds_pcache_match(ds_pcache *pc, const int32_t *tok, size_t n);
/* Blocks [from, to) of tok's prefix (held: to <= ds_pcache_match) into
 * slot, at their positions; the slot holds from * DS_PCACHE_BLOCK
 * positions before and to * DS_PCACHE_BLOCK after. */
void ds_pcache_restore(ds_pcache *pc, ds_kvcache *kv, uint32_t slot,
		       const int32_t *tok, size_t from, size_t to);
/* Keep the whole blocks of tok[0..n), whose rows slot holds at positions
 * 0..n-1, that are not held yet (as far as memory allows); the count
 * added. */
size_t ds_pcache_store(ds_pcache *pc, const ds_kvcache *kv, uint32_t slot,
		       const int32_t *tok, size_t n);

/* With a directory: read it (files in error are ignored, each said
 * through warn); -1 only when the directory cannot be read. */
int ds_pcache_load(ds_pcache *pc, ds_err *err);
/* Write the blocks not in the directory yet (a file that cannot be
 * written is said through warn); the files of evicted blocks are
 * removed as they go. */
int ds_pcache_save(ds_pcache *pc, ds_err *err);
int ds_pcache_persistent(const ds_pcache *pc);

typedef struct ds_pcache_stats {
	size_t blocks, bytes, max_bytes, block_bytes;
	size_t loaded, ignored;     /* files read, files refused */
} ds_pcache_stats;

void ds_pcache_get_stats(ds_pcache *pc, ds_pcache_stats *st);

/* ---- the file of a block: DIR/<key as 16 hex digits>.dskv ------------------
 * All integers little-endian.  The header, then the prefix's token ids
 * (int32, (depth + 1) * block of them: every token from the start), then
 * the block's rows in kvcache.h's serial form (data_bytes = block *
 * n_layer * pos_bytes). */
#define DS_PCACHE_MAGIC "DSKVBLK1"
#define DS_PCACHE_VERSION 1u

typedef struct ds_pcache_fhdr {
	char magic[8];
	uint32_t version;
	uint32_t header_size;       /* 128 */
	uint8_t model[16];          /* ds_pcache_opts.model_id */
	uint32_t kv_type, n_layer, n_kv_head, k_dim;
	uint32_t v_dim, mla, block, depth;  /* depth: the block's index */
	uint64_t pos_bytes;
	uint64_t key;               /* the prefix's hash (ds_pcache_key) */
	uint64_t data_bytes;
	uint32_t tok_crc, data_crc; /* CRC-32 of the tokens, of the rows */
	uint32_t header_crc;        /* of the header with this field 0 */
	uint8_t reserved[28];
} ds_pcache_fhdr;

/* The hash of a prefix of whole blocks (what a block's file is named by). */
uint64_t ds_pcache_key(const int32_t *tok, size_t n_blocks);

#endif

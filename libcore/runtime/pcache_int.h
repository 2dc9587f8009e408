/*
 * pcache_int.h - what pcache.c (blocks in memory) and pcfile.c (their
 * files) share.
 */
#ifndef DS_PCACHE_INT_H
#define DS_PCACHE_INT_H

#include <stdatomic.h>

#include "pcache.h"

/* One block: its rows, where it sits in the tree, the table and the
 * recency list.  Entries are addressed by index (the array grows). */
typedef struct pblock {
	uint64_t key;               /* the prefix's hash through this block */
	int32_t parent;             /* -1: a prompt's first block */
	int32_t hnext;              /* the bucket's next; the free list's */
	int32_t prev, next;         /* recency: prev is more recent */
	uint32_t depth;             /* its index in the prompt */
	uint32_t n_child;           /* blocks that continue it */
	uint8_t pinned;             /* under an insertion: not evicted */
	uint8_t on_disk;            /* its file is written */
	uint8_t *data;              /* its rows; NULL: a free entry */
} pblock;

struct ds_pcache {
	ds_pcache_opts o;
	char *dir;                  /* o.dir's copy */
	/* the KV cache's shape, which files must have */
	enum ds_kvtype type;
	uint32_t n_layer, n_kv_head, k_dim, v_dim, n_ctx;
	int mla;
	size_t pos_bytes, block_bytes, max_blocks;
	pblock *b;
	size_t n_b, cap;
	int32_t *tok;               /* [cap][DS_PCACHE_BLOCK] each block's ids */
	size_t cap_tok;
	int32_t free;               /* free entries, through hnext */
	int32_t *bucket;            /* [n_bucket], a power of two */
	size_t n_bucket;
	int32_t head, tail;
	size_t n_live;
	atomic_size_t a_blocks, a_loaded, a_ignored;
	unsigned warned;            /* files named in warnings so far */
};

uint64_t pc_chain(uint64_t parent, const int32_t *tok);
int32_t pc_find(ds_pcache *pc, int32_t parent, uint64_t pkey, const int32_t *tok);
size_t pc_walk(ds_pcache *pc, const int32_t *tok, size_t n_blocks, int32_t *last);
/* An entry with a rows' buffer (-1: no room), then linked (at the head
 * of the recency list), or dropped. */
int32_t pc_new(ds_pcache *pc);
void pc_link(ds_pcache *pc, int32_t i, int32_t parent, uint64_t pkey,
	     const int32_t *tok, uint32_t depth, int on_disk);
void pc_drop(ds_pcache *pc, int32_t i);
/* Move a linked block to the least recent end. */
void pc_to_tail(ds_pcache *pc, int32_t i);

int pc_dir_open(ds_pcache *pc, const char *dir, ds_err *err);
void pc_file_remove(ds_pcache *pc, uint64_t key);

#endif

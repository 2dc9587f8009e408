/* pcache.c - the prompt cache's blocks in memory (pcache.h); their files
 * are pcfile.c's. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "pcache_int.h"

#define B DS_PCACHE_BLOCK
#define ROOT_KEY 0xcbf29ce484222325ull      /* FNV-1a's offset basis */

uint64_t pc_chain(uint64_t parent, const int32_t *tok)
{
	uint64_t h = parent;
	const uint8_t *p = (const uint8_t *)tok;
	size_t i;

	for (i = 0; i < B * sizeof *tok; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

uint64_t ds_pcache_key(const int32_t *tok, size_t n_blocks)
{
	uint64_t k = ROOT_KEY;
	size_t i;

	for (i = 0; i < n_blocks; i++)
		k = pc_chain(k, tok + i * B);
	return k;
}

/* ---- life -------------------------------------------------------------------------- */

int ds_pcache_init(ds_pcache **out, const ds_kvcache *kv,
		   const ds_pcache_opts *o, ds_err *err)
{
	ds_pcache *pc = ds_calloc(1, sizeof *pc, err);

	*out = NULL;
	if (pc == NULL)
		return -1;
	pc->o = *o;
	pc->type = kv->type;
	pc->n_layer = kv->n_layer;
	pc->n_kv_head = kv->n_kv_head;
	pc->k_dim = kv->k_dim;
	pc->v_dim = kv->v_dim;
	pc->mla = kv->mla;
	pc->pos_bytes = kv->pos_bytes;
	pc->n_ctx = kv->n_ctx;
	pc->block_bytes = ds_kvcache_span(kv, B);
	pc->max_blocks = pc->block_bytes ? o->max_bytes / pc->block_bytes : 0;
	pc->head = pc->tail = pc->free = -1;
	if (o->dir != NULL && pc_dir_open(pc, o->dir, err)) {
		ds_pcache_free(pc);
		return -1;
	}
	pc->o.dir = pc->dir;
	*out = pc;
	return 0;
}

void ds_pcache_free(ds_pcache *pc)
{
	size_t i;

	if (pc == NULL)
		return;
	for (i = 0; i < pc->n_b; i++)
		free(pc->b[i].data);
	free(pc->b);
	free(pc->tok);
	free(pc->bucket);
	free(pc->dir);
	free(pc);
}

int ds_pcache_persistent(const ds_pcache *pc)
{
	return pc->dir != NULL;
}

void ds_pcache_get_stats(ds_pcache *pc, ds_pcache_stats *st)
{
	size_t n = atomic_load(&pc->a_blocks);

	memset(st, 0, sizeof *st);
	st->blocks = n;
	st->block_bytes = pc->block_bytes;
	st->bytes = n * pc->block_bytes;
	st->max_bytes = pc->max_blocks * pc->block_bytes;
	st->loaded = atomic_load(&pc->a_loaded);
	st->ignored = atomic_load(&pc->a_ignored);
}

/* ---- the recency list: head most recent ---------------------------------------------- */

static void unlink_lru(ds_pcache *pc, int32_t i)
{
	pblock *b = &pc->b[i];

	if (b->prev >= 0)
		pc->b[b->prev].next = b->next;
	else
		pc->head = b->next;
	if (b->next >= 0)
		pc->b[b->next].prev = b->prev;
	else
		pc->tail = b->prev;
	b->prev = b->next = -1;
}

static void push_head(ds_pcache *pc, int32_t i)
{
	pblock *b = &pc->b[i];

	b->prev = -1;
	b->next = pc->head;
	if (pc->head >= 0)
		pc->b[pc->head].prev = i;
	pc->head = i;
	if (pc->tail < 0)
		pc->tail = i;
}

void pc_to_tail(ds_pcache *pc, int32_t i)
{
	pblock *b = &pc->b[i];

	unlink_lru(pc, i);
	b->next = -1;
	b->prev = pc->tail;
	if (pc->tail >= 0)
		pc->b[pc->tail].next = i;
	pc->tail = i;
	if (pc->head < 0)
		pc->head = i;
}

/* A block and its ancestors used: the leaf first, so that every ancestor
 * is more recent than what continues it. */
static void touch(ds_pcache *pc, int32_t leaf)
{
	int32_t i;

	for (i = leaf; i >= 0; i = pc->b[i].parent) {
		unlink_lru(pc, i);
		push_head(pc, i);
	}
}

static void pin(ds_pcache *pc, int32_t leaf, int on)
{
	int32_t i;

	for (i = leaf; i >= 0; i = pc->b[i].parent)
		pc->b[i].pinned = (uint8_t)on;
}

/* ---- the table: buckets of key chains ------------------------------------------------ */

static int32_t *bucket_of(ds_pcache *pc, uint64_t key)
{
	return &pc->bucket[key & (pc->n_bucket - 1)];
}

int32_t pc_find(ds_pcache *pc, int32_t parent, uint64_t pkey,
		const int32_t *tok)
{
	uint64_t key;
	int32_t i;

	if (pc->n_bucket == 0)
		return -1;
	key = pc_chain(pkey, tok);
	for (i = *bucket_of(pc, key); i >= 0; i = pc->b[i].hnext)
		if (pc->b[i].key == key && pc->b[i].parent == parent &&
		    memcmp(pc->tok + (size_t)i * B, tok, B * sizeof *tok) == 0)
			return i;
	return -1;
}

/* Twice as many buckets as blocks can be, rehashed. */
static int grow_table(ds_pcache *pc, size_t need)
{
	size_t n = pc->n_bucket ? pc->n_bucket : 64, k;
	int32_t *nb;

	while (n < 2 * need)
		n *= 2;
	if (n == pc->n_bucket)
		return 0;
	if ((nb = malloc(n * sizeof *nb)) == NULL)
		return -1;
	for (k = 0; k < n; k++)
		nb[k] = -1;
	free(pc->bucket);
	pc->bucket = nb;
	pc->n_bucket = n;
	for (k = 0; k < pc->n_b; k++)
		if (pc->b[k].data != NULL) {
			int32_t *h = bucket_of(pc, pc->b[k].key);

			pc->b[k].hnext = *h;
			*h = (int32_t)k;
		}
	return 0;
}

static void unbucket(ds_pcache *pc, int32_t i)
{
	int32_t *p = bucket_of(pc, pc->b[i].key);

	while (*p != i)
		p = &pc->b[*p].hnext;
	*p = pc->b[i].hnext;
}

/* ---- blocks in and out ----------------------------------------------------------------- */

/* The least recent block nothing continues and no insertion is under:
 * out, its rows' buffer returned for the next. */
static uint8_t *evict(ds_pcache *pc)
{
	int32_t i;
	pblock *b;
	uint8_t *data;

	for (i = pc->tail; i >= 0; i = pc->b[i].prev)
		if (pc->b[i].n_child == 0 && !pc->b[i].pinned)
			break;
	if (i < 0)
		return NULL;
	b = &pc->b[i];
	unlink_lru(pc, i);
	unbucket(pc, i);
	if (b->parent >= 0)
		pc->b[b->parent].n_child--;
	if (b->on_disk)
		pc_file_remove(pc, b->key);
	data = b->data;
	b->data = NULL;
	b->hnext = pc->free;
	pc->free = i;
	pc->n_live--;
	atomic_store(&pc->a_blocks, pc->n_live);
	return data;
}

/* A free entry with a rows' buffer: a new one while memory allows, else
 * the least recent block's.  -1 when neither. */
static int32_t take(ds_pcache *pc)
{
	uint8_t *data = NULL;
	int32_t i;

	if (pc->n_live >= pc->max_blocks) {
		if ((data = evict(pc)) == NULL)
			return -1;
	} else if ((data = malloc(pc->block_bytes)) == NULL) {
		return -1;
	}
	if (pc->free < 0) {
		if (pc->n_b == pc->cap &&
		    (ds_grow((void **)&pc->b, &pc->cap, pc->n_b + 1, sizeof *pc->b) ||
		     ds_grow((void **)&pc->tok, &pc->cap_tok, pc->cap * B,
			     sizeof *pc->tok) ||
		     grow_table(pc, pc->cap))) {
			free(data);
			return -1;
		}
		memset(&pc->b[pc->n_b], 0, sizeof *pc->b);
		pc->free = (int32_t)pc->n_b++;
		pc->b[pc->free].hnext = -1;
	}
	i = pc->free;
	pc->free = pc->b[i].hnext;
	pc->b[i].data = data;
	return i;
}

/* Block tok under parent (its rows already in b[i].data): into the
 * table and at the head of the recency list. */
void pc_link(ds_pcache *pc, int32_t i, int32_t parent, uint64_t pkey,
	     const int32_t *tok, uint32_t depth, int on_disk)
{
	pblock *b = &pc->b[i];
	int32_t *h;

	b->key = pc_chain(pkey, tok);
	b->parent = parent;
	b->depth = depth;
	b->n_child = 0;
	b->pinned = 0;
	b->on_disk = (uint8_t)on_disk;
	b->prev = b->next = -1;
	memcpy(pc->tok + (size_t)i * B, tok, B * sizeof *tok);
	h = bucket_of(pc, b->key);
	b->hnext = *h;
	*h = i;
	if (parent >= 0)
		pc->b[parent].n_child++;
	push_head(pc, i);
	pc->n_live++;
	atomic_store(&pc->a_blocks, pc->n_live);
}

int32_t pc_new(ds_pcache *pc)
{
	return pc->max_blocks ? take(pc) : -1;
}

void pc_drop(ds_pcache *pc, int32_t i)
{
	free(pc->b[i].data);
	pc->b[i].data = NULL;
	pc->b[i].hnext = pc->free;
	pc->free = i;
}

/* The blocks held of tok, from the start: their count, the last's index. */
static size_t walk(ds_pcache *pc, const int32_t *tok, size_t n_blocks,
		   int32_t *last)
{
	int32_t parent = -1, i;
	uint64_t key = ROOT_KEY;
	size_t k;

	for (k = 0; k < n_blocks; k++) {
		if ((i = pc_find(pc, parent, key, tok + k * B)) < 0)
			break;
		parent = i;
		key = pc->b[i].key;
	}
	*last = parent;
	return k;
}

size_t pc_walk(ds_pcache *pc, const int32_t *tok, size_t n_blocks, int32_t *last)
{
	return walk(pc, tok, n_blocks, last);
}

size_t ds_pcache_match(ds_pcache *pc, const int32_t *tok, size_t n)
{
	int32_t last;

	return walk(pc, tok, n / B, &last);
}

void ds_pcache_restore(ds_pcache *pc, ds_kvcache *kv, uint32_t slot,
		       const int32_t *tok, size_t from, size_t to)
{
	int32_t last, i;
	size_t k;

	DS_ASSERT(walk(pc, tok, to, &last) == to && kv->len[slot] >= from * B);
	/* from the leaf up, each block to its place (positions written out of
	 * order: the slot's length is set at the end) */
	for (i = last, k = to; k > from; i = pc->b[i].parent) {
		k--;
		kv->len[slot] = (uint32_t)(k * B);
		ds_kvcache_write(kv, slot, (uint32_t)(k * B), B, pc->b[i].data);
	}
	kv->len[slot] = (uint32_t)(to * B);
	if (last >= 0)
		touch(pc, last);
}

size_t ds_pcache_store(ds_pcache *pc, const ds_kvcache *kv, uint32_t slot,
		       const int32_t *tok, size_t n)
{
	int32_t parent = -1, i;
	uint64_t key = ROOT_KEY;
	size_t k, added = 0;

	DS_ASSERT(n <= kv->len[slot]);
	for (k = 0; k < n / B; k++) {
		i = pc_find(pc, parent, key, tok + k * B);
		if (i < 0) {
			if ((i = pc_new(pc)) < 0)
				break;
			ds_kvcache_read(kv, slot, (uint32_t)(k * B), B, pc->b[i].data);
			pc_link(pc, i, parent, key, tok + k * B, (uint32_t)k, 0);
			added++;
		}
		/* under insertion: not to be evicted for the next blocks */
		pc->b[i].pinned = 1;
		parent = i;
		key = pc->b[i].key;
	}
	if (parent >= 0) {
		pin(pc, parent, 0);
		touch(pc, parent);
	}
	return added;
}

/* tok_work.h - per-call scratch of the models (bpe.c, unigram.c). */
#ifndef DS_TOK_WORK_H
#define DS_TOK_WORK_H

#include <stdint.h>
#include <stddef.h>

struct tk_sym {
	int32_t id;          /* token (HF); unused by SP BPE */
	int32_t prev, next;  /* neighbours, -1 at the ends */
	uint32_t off, len;   /* bytes of the word; len 0: merged away */
	uint8_t frozen;      /* SP user-defined symbol: never merged */
};

struct tk_cand {
	uint64_t key;  /* smaller first: HF rank, SP flipped score */
	uint32_t pos;  /* left symbol */
	uint32_t id;   /* HF: merged token; SP: merged length */
};

struct tk_rev { /* SP rev_merge: an UNUSED piece and the two it joined */
	int32_t id;
	uint32_t loff, llen, roff, rlen;
};

struct tk_node { /* Unigram best path ending here */
	int32_t id;
	int32_t starts_at;
	float score;
};

struct tk_work {
	struct tk_sym *sym;
	size_t nsym, sym_cap;
	struct tk_cand *heap;
	size_t nheap, heap_cap;
	struct tk_rev *rev;
	size_t nrev, rev_cap;
	struct tk_node *node;
	size_t node_cap;
};

#endif

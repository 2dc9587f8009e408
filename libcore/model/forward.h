/*
 * forward.h - a model's forward pass over a batch of tokens from several
 * sequences (the shape of llama.cpp's llama_decode), and placing a loaded
 * model's weights in memory (hugepages, NUMA).
 *
 *	ds_model m;     ds_model_load(&m, dir, DS_LOAD_POPULATE, &err);
 *	ds_pool *pool;  ds_pool_init(&pool, &(ds_pool_opts){ .threads = 8 }, &err);
 *	ds_fwd *f;      ds_fwd_init(&f, &m, pool, NULL, &err);
 *	ds_kvcache kv;  ds_kvcache_init(&kv, &m.hp, n_slot, n_ctx, DS_KV_F16, &err);
 *
 *	// slot 0: a prompt of 3 tokens, logits of the last; slot 1: one
 *	// decode step at position 17
 *	int32_t tok[] = { 1, 2, 3, 9 }, pos[] = { 0, 1, 2, 17 }, seq[] = { 0, 0, 0, 1 };
 *	uint8_t want[] = { 0, 0, 1, 1 };
 *	ds_batch b = { 4, tok, pos, seq, want };
 *	ds_fwd_decode(f, &kv, &b, &err);
 *	const float *l0 = ds_fwd_logits(f, 0);   // slot 0, position 2
 *	const float *l1 = ds_fwd_logits(f, 1);   // slot 1, position 17
 *
 * One ds_fwd_decode is one pass through the layers for all the entries:
 * every weight matrix is read once per batch (MoE experts once per batch
 * too: tokens are grouped by expert), whatever the mix of prefill and
 * decode entries.  The architectures (libcore/model/): llama (DeepSeek LLM
 * and Coder, R1-Distill-Llama), qwen2 (R1-Distill-Qwen) and deepseek2
 * (V2, V2-Lite, V2.5, V3, R1: MLA attention, decoded in the absorbed form
 * over the compressed cache, and MoE).
 *
 * Threads: the forward runs its work on the pool given at init; one thread
 * at a time calls ds_fwd_decode (the scheduler's thread).  Nothing is
 * allocated per call.
 */
#ifndef DS_FORWARD_H
#define DS_FORWARD_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache.h"
#include "format/modelfile.h"
#include "pool/threads.h"
#include "base/util.h"

typedef struct ds_fwd ds_fwd;
typedef struct ds_batch ds_batch;

/*
 * Expert parallelism (libcore/dist/, docs/distributed.md).  Processes
 * ("parts") run one model together: each runs the same batches through
 * everything but the routed experts, and the routed experts of its own
 * range only.  In each MoE layer a part computes the unweighted outputs
 * of the (token, slot) assignments to its experts into its rows of a
 * buffer, exchange() brings every part's rows to all, and each part adds
 * them to the shared experts' output in ascending expert order, as
 * ds_moe does in one process: the logits do not depend on the number of
 * parts, bit for bit.
 *
 * Rows of the buffer: part p's are rows off[p] .. off[p] + cnt[p] - 1,
 * its assignments in batch order (token, then slot).
 */
typedef struct ds_fwd_ep {
	uint32_t n_part, part;
	const uint32_t *first;  /* [n_part + 1]: part p holds experts
				   first[p] .. first[p+1]-1; first[n_part]
				   = n_expert */
	/* On return every part's rows (width floats each) are in buf; this
	 * part's were filled before the call.  It does not return on
	 * failure (a part cannot go on without the others). */
	void (*exchange)(void *arg, float *buf, size_t width, const int *cnt,
			 const int *off);
	/* Each batch, once checked, before it runs (the leader sends it to
	 * the other parts); NULL: none. */
	void (*batch)(void *arg, const ds_kvcache *kv, const ds_batch *b);
	void *arg;
} ds_fwd_ep;

/* The experts [*first, *end) of part `part` of n_part: contiguous
 * ranges in part order, sizes differing by at most one (the larger
 * first). */
void ds_ep_range(uint32_t n_expert, uint32_t n_part, uint32_t part,
		 uint32_t *first, uint32_t *end);

/* The form MLA attends in (docs/deepseek.md section 6): prompt entries
 * (ds_batch.prompt) in the MHA form, keys and values decompressed from
 * the cache, generated ones (decode, drafts) absorbed over the latent
 * rows; or every entry in one form.  The forms agree to the weight
 * type's rounding, not bit for bit, so the form is a property of the
 * entry, not of how the entries were batched. */
enum ds_mla_form {
	DS_MLA_PROMPT = 1,    /* DS_MLA_FORM=prompt */
	DS_MLA_ABSORBED,      /* DS_MLA_FORM=absorbed */
	DS_MLA_MHA,           /* DS_MLA_FORM=mha */
};

typedef struct ds_fwd_opts {
	uint32_t max_batch;   /* most entries per ds_fwd_decode; 0: 256 */
	const ds_fwd_ep *ep;  /* NULL: every expert in this process;
				 else kept, it must outlive the forward */
	int mla_form;         /* MLA's form (enum ds_mla_form); 0: from
				 DS_MLA_FORM in the environment, else
				 DS_MLA_PROMPT */
	int mtp;              /* the model's multi-token-prediction module
				 (docs/deepseek.md section 10; the model
				 loaded with DS_LOAD_MTP) instead of its
				 layers: ds_fwd_mtp runs it */
	int draft_head;       /* with mtp: the module only drafts, so a
				 bf16, f16 or f32 head is read through a
				 q8g32 copy (half bf16's bytes; the main
				 model checks every draft) */
} ds_fwd_opts;

/* Bind the model's tensors (which must outlive the forward), derive what
 * MLA's absorbed decode needs (see DS_FWD_DERIVED below) and allocate
 * every buffer for batches of up to max_batch entries. */
int ds_fwd_init(ds_fwd **f, const ds_model *m, ds_pool *pool,
		const ds_fwd_opts *opts, ds_err *err);
void ds_fwd_free(ds_fwd *f);

/* ---- batches ------------------------------------------------------------- */

/* n entries: token[i] at position pos[i] of the sequence in cache slot
 * seq[i]; logits[i] nonzero asks for its logits (NULL: only the last
 * entry's).  Rules, checked (a violation is an error, nothing computed):
 *  - n <= max_batch; tokens < n_vocab (the error names the entry);
 *  - seq[i] < the cache's n_slot, pos[i] < its n_ctx;
 *  - a sequence's entries, in batch order, have consecutive positions; the
 *    first may start anywhere up to the slot's length (starting below it
 *    overwrites: the slot is cut there first), later ones continue.
 * Entries of different sequences may interleave.  After the call each
 * slot's length is the end of its last entry. */
struct ds_batch {
	size_t n;
	const int32_t *token;
	const int32_t *pos;
	const int32_t *seq;
	const uint8_t *logits;
	/* prompt[i] nonzero: entry i is read from a prompt, not generated
	 * (ds_fwd_opts.mla_form); NULL: none is */
	const uint8_t *prompt;
};

int ds_fwd_decode(ds_fwd *f, ds_kvcache *kv, const ds_batch *b,
		  ds_err *err);

/* The last pass's final hidden states of batch rows rows[0..n), through
 * the output norm (what the head reads), into out [n][n_embd]. */
void ds_fwd_hidden(const ds_fwd *f, const uint32_t *rows, size_t n, float *out);

/* A pass of the MTP module (a forward opened with .mtp) over a cache of
 * one layer: entry i is its token's embedding and hidden [i][n_embd]
 * (the main model's hidden state at the position before, through its
 * output norm, or the module's own, chaining), as
 *	x = eh_proj [RMSNorm(embd(token); enorm) ; RMSNorm(hidden; hnorm)]
 * through the module's decoder layer at the entry's position; logits
 * (RMSNorm(x; head_norm) through the head) as ds_fwd_decode's, and
 * ds_fwd_hidden gives the module's normed output rows. */
int ds_fwd_mtp(ds_fwd *f, ds_kvcache *kv, const ds_batch *b, const float *hidden,
	       ds_err *err);

/* The logits [n_vocab] of the i-th entry that asked for them, in batch
 * order, valid until the next ds_fwd_decode. */
const float *ds_fwd_logits(const ds_fwd *f, size_t i);
/* The same, writable (the sampler applies its penalties in place). */
float *ds_fwd_logits_mut(ds_fwd *f, size_t i);

/* ---- what a forward is -------------------------------------------------- */

typedef struct ds_fwd_info {
	const ds_hparams *hp;
	uint32_t n_vocab;
	uint32_t max_batch;
	uint64_t weight_bytes;      /* all tensors of model.bin */
	uint64_t active_bytes;      /* weights one decode token reads:
				       everything but the embedding table and
				       the unused routed experts (with
				       expert parallelism, here: the mean
				       share of the used ones) */
	uint64_t share_bytes;       /* weights this process reads at all:
				       all but other parts' experts */
	uint64_t derived_bytes;     /* memory of DS_FWD_DERIVED tensors */
	uint64_t scratch_bytes;     /* activations, logits, op scratch */
	double softmax_scale;       /* attention's, incl. YaRN's mscale^2 */
} ds_fwd_info;

void ds_fwd_get_info(const ds_fwd *f, ds_fwd_info *info);

/*
 * DS_FWD_DERIVED.  The absorbed MLA query needs W_UK[h]^T, the transpose
 * of head h's k_nope rows of attn_kv_b ([d_nope, r_kv] -> [r_kv, d_nope]),
 * which no row-major kernel reads from attn_kv_b itself.  It is derived
 * once at init: every head's rows dequantized and transposed into a bf16
 * matrix (f16 or f32 when attn_kv_b is one of those), 2 r_kv d_nope n_head
 * bytes per layer: 2 MiB per layer for V2-Lite, 16 MiB for V3 (1 GiB in
 * all, 0.3% of its q4 weights).  bf16 is exact for bf16 checkpoints; for
 * q4/q8 the rounding (at most 2^-8 relative) is below the int8
 * activations' own (1/254 of a block's largest).
 * W_UV is read from attn_kv_b in place (its rows of head h start on a
 * row-set when d_nope and d_v are multiples of 16, as in every released
 * model; otherwise it is derived the same way).
 */

/* ---- placement of the weights ------------------------------------------------ */

enum ds_numa { DS_NUMA_OFF, DS_NUMA_INTERLEAVE, DS_NUMA_NODE };

/* Where the weights live after ds_model_place. */
typedef struct ds_placement {
	void *mem;            /* the copy (hugepages), or NULL */
	size_t bytes;
	int huge;             /* 1: MAP_HUGETLB; 0: madvise(MADV_HUGEPAGE) */
} ds_placement;

/* "interleave" | "node" -> mode (-1 with a message). */
int ds_numa_parse(const char *s, enum ds_numa *mode, ds_err *err);

/* Before the model's first use (load it without DS_LOAD_POPULATE):
 *  - hugepages: copy model.bin into anonymous memory mapped with
 *    MAP_HUGETLB (2 MiB pages, from the pool ds-tune reserves), falling
 *    back to transparent hugepages (madvise MADV_HUGEPAGE) with *warn set
 *    to a message; the model's tensors are pointed at the copy and the
 *    file mapping is closed;
 *  - numa: interleave every page over the nodes, or (node) put each
 *    thread's share of every weight matrix's row-sets on its own node.
 * Free the placement after the model. */
int ds_model_place(ds_model *m, ds_pool *pool, int hugepages,
		   enum ds_numa numa, ds_placement *pl, char *warn,
		   size_t warn_len, ds_err *err);
void ds_placement_free(ds_placement *pl);

/* How ds-run, ds-bench and ds-serve load a model for running. */
typedef struct ds_load_opts {
	int no_populate;      /* leave the pages to fault in on first use */
	int mlock;            /* lock the weights in memory */
	int hugepages;        /* a copy in hugepages (ds_model_place) */
	enum ds_numa numa;
	int verify;           /* check every CRC-32 */
	/* Expert parallelism: this process uses the routed experts of part
	 * ep_part of ep_parts only (ds_ep_range), and no output projection
	 * when no_output; the rest of model.bin is mapped but never read,
	 * populated, locked or copied (--verify still reads all of it).
	 * ep_parts 0: the whole model. */
	uint32_t ep_parts, ep_part;
	int no_output;
	int mtp;              /* the multi-token-prediction module's tensors
				 too (DS_LOAD_MTP) */
} ds_load_opts;

/* ds_model_load with MAP_POPULATE (unless no_populate, hugepages or numa:
 * then the pages are faulted in where they are placed), then
 * ds_model_place, then ds_model_verify.  *warn: the hugepages fallback's
 * message, or "".  On failure free the model and the placement as after
 * success.  A share (ep_parts): verified first, then its ranges alone
 * populated and locked, or copied into transparent hugepages (hugetlb
 * pages are reserved for a whole mapping); numa is refused (bind each
 * process to its node instead). */
int ds_model_open(ds_model *m, ds_pool *pool, const char *dir,
		  const ds_load_opts *o, ds_placement *pl, char *warn,
		  size_t warn_len, ds_err *err);

#endif

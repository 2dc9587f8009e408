/*
 * ops.h - the operations a forward pass is written in: matrix products
 * over the ds-model(5) weight types, the fused gate/up FFN, routed
 * experts, RMSNorm, RoPE, attention over a KV cache, router top-k and
 * embedding gather.  Each op splits its work over a thread pool
 * (threads.h) and runs the kernels of kernels.h.
 *
 * Context.  A ds_ctx holds the pool, the kernel table and every scratch
 * buffer the ops need, sized once at ds_ctx_init from the model's largest
 * shapes; no op allocates.  One thread at a time uses a context (it is the
 * caller of the pool's jobs); use one context per concurrently running
 * forward pass.
 *
 * Shapes and units.  Activations are float32, row-major: T rows (tokens)
 * of width k, row t at x + t * ld.  A leading dimension ld of 0 means
 * dense (ld = width).  A matrix W [n, k] maps a row of k inputs to n
 * outputs: y = x W^T, as in PyTorch's nn.Linear.  Positions are token
 * positions in the sequence, from 0.
 *
 * Aliasing.  An op's outputs must not overlap its inputs, except where a
 * comment says "in place".
 *
 * Errors.  Ops on our own data (shapes from a validated model) check
 * their invariants with DS_ASSERT.  Ops that take outside data (token ids)
 * return -1 with a message.
 *
 * A Llama layer with these ops (q/k/v from one quantization of the
 * normalized input, the FFN gate and up from another):
 *
 *	ds_in in = { x, 0, T, L->attn_norm, eps };
 *	ds_mm_out qkv[3] = { { &L->wq, q, 0 }, { &L->wk, k, 0 }, { &L->wv, v, 0 } };
 *	ds_matmul_many(c, &in, qkv, 3);
 *	ds_rope_apply(c, &rope, q, 0, T, n_head, head_dim, NULL, pos0);
 *	ds_rope_apply(c, &rope, k, 0, T, n_kv, head_dim, NULL, pos0);
 *	ds_kv_write(c, &kc, k, 0, head_dim, n_kv, T, pos0);  (and v)
 *	ds_attention(c, &att, T);                 (att.q = q, att.o = o)
 *	ds_matmul(c, &L->wo, o, T, tmp);  ds_add(c, x, tmp, T * n_embd, x);
 *	(or the add in the product: ds_mm_out { &L->wo, tmp, 0, x, 0 })
 *	ds_in f = { x, 0, T, L->ffn_norm, eps };
 *	ds_ffn(c, &L->w1, &L->w3, &L->w2, &f, tmp, 0, x);   (x += the FFN)
 */
#ifndef DS_OPS_H
#define DS_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "format/hfconfig.h"
#include "kernels/kernels.h"
#include "pool/threads.h"
#include "kernels/types.h"
#include "base/util.h"

/* ---- context ------------------------------------------------------------ */

typedef struct ds_ctx_cfg {
	size_t max_rows;    /* most activation rows (tokens) per call, >= 1;
			       the ops take more in chunks of this */
	size_t max_k;       /* widest matrix input, as ds_mat.kp (the padded
			       width: n_embd, n_ff, kv_lora_rank, ...) */
	size_t max_ff;      /* widest ds_ffn hidden layer (n_ff; the shared
			       experts' n_ff_exp * n_expert_shared) */
	unsigned types;     /* weight types used, bits 1 << enum ds_dtype;
			       0: all (scratch for each form is allocated
			       only for the types that read it) */
	size_t moe_experts; /* routed experts (n_expert), 0 without MoE */
	size_t moe_used;    /* experts per token (n_expert_used) */
	size_t moe_k;       /* an expert's input width, as gate's kp (n_embd) */
	size_t moe_ff;      /* an expert's hidden width, as down's kp (n_ff_exp) */
	size_t max_group;   /* most query heads per KV head in attention
			       (n_head / n_head_kv; MLA decode: n_head) */
	size_t max_head;    /* widest key or value row in attention
			       (head_dim; MLA: 576) */
	size_t max_rope;    /* widest rotated part (head_dim, qk_rope_head_dim) */
	size_t head_rows;   /* ds_matmul_heads: most T * heads per call, 0 if
			       unused (MLA decode: tokens * n_head) */
	size_t head_k;      /* ds_matmul_heads: widest per-head input, as kp
			       (MLA: qk_nope_head_dim and kv_lora_rank) */
	unsigned head_types; /* ds_matmul_heads: the weight types it takes
				(bits as types; 0: types); f32 and f16
				inputs are read where they are */
} ds_ctx_cfg;

/* Prepared activation rows (kernels.h ds_act): row r of q at q + r * ldq,
 * its block scales at qd/qs + r * ldq / 32, of b at b + r * ldq, of f at
 * f + r * ldf.  A form's pointer is NULL when no weight type reads it. */
typedef struct ds_actbuf {
	size_t rows;
	int8_t *q;
	float *qd, *qs;
	float *qt;          /* ds_act.qt of the rows, or NULL */
	size_t ldqt;
	uint16_t *b;
	size_t ldq;
	float *f;
	size_t ldf;
} ds_actbuf;

#define DS_CTX_MAPS 48

typedef struct ds_ctx {
	ds_pool *pool;
	const ds_kernels *kern;
	ds_ctx_cfg cfg;
	ds_actbuf in;       /* [max_rows] rows of max_k: matrix inputs */
	ds_actbuf one;      /* [threads] rows of max_k: each thread's own copy
			       of a single input row (decode: no barrier) */
	float *h;           /* [ops_ffn_rows][max_ff]: ds_ffn's hidden layer */
	float *gu;          /* [2][max_ff rounded up to 16]: one row's gate
			       and up outputs (ds_ffn_gate_up) */
	/* MoE: assignments sorted by expert ([max_rows * moe_used]), their
	 * input rows, hidden rows and prepared hidden rows */
	int32_t *moe_tok, *moe_off;
	float *moe_w, *moe_h;
	ds_actbuf moe_x, moe_hq;
	ds_actbuf heads;    /* [head_rows] rows of head_k: ds_matmul_heads */
	/* per thread: tiles, attention scratch, RoPE tables */
	uint8_t *thr;
	size_t thr_bytes;
	struct ops_steal *steal;  /* per thread: its unclaimed work (ops_int.h) */
	struct { void *p; size_t n; } maps[DS_CTX_MAPS];  /* the buffers */
	int n_maps;
} ds_ctx;

/* Choose the kernels (ds_kernels_init: DS_ISA) and allocate the scratch.
 * The pool stays the caller's and must outlive the context. */
int ds_ctx_init(ds_ctx *c, ds_pool *pool, const ds_ctx_cfg *cfg, ds_err *err);
void ds_ctx_free(ds_ctx *c);

/* ---- weights -------------------------------------------------------------- */

/* The matrix view of a model tensor: ndim 2 ([n, k]) or 3 ([ne, n, k],
 * experts); bytes must be exactly what ds_tensor_bytes gives; perm NULL or
 * an i32 [k] (3-D: [ne, k]) permutation of 0 .. k-1, checked, for the
 * q4, q8 and bf16 types only (GPTQ act-order). */
int ds_mat_init(ds_mat *m, ds_ttype t, const void *data, uint64_t bytes,
		int ndim, const uint64_t *shape, const int32_t *perm,
		ds_err *err);
/* Expert e of a 3-D tensor, as a 2-D matrix. */
ds_mat ds_mat_expert(const ds_mat *m, uint64_t e);
/* Rows r0 .. r0+n-1 of a 2-D matrix, r0 a multiple of 16 (one head's
 * rows of a projection: MLA's W_UV[h] = rows h*(nope+v)+nope .. of
 * attn_kv_b). */
ds_mat ds_mat_rows(const ds_mat *m, uint64_t r0, uint64_t n);

/* ---- matrix products -------------------------------------------------------- */

/* The input of a product: T rows of k = the matrix's k floats at
 * x + t * ld (ld 0: k).  With norm set, each row enters as RMSNorm(row) *
 * norm (k weights) with eps, computed on the way into the quantization,
 * without writing the normalized rows anywhere. */
typedef struct ds_in {
	const float *x;
	size_t ld;
	size_t t;
	const float *norm;
	float eps;
} ds_in;

/* One output of ds_matmul_many: y [T][ldy] (ldy 0: w->n), n columns
 * written; res, where not NULL, [T][ldr] (ldr 0: w->n) gets y added as
 * each part of it is computed (a residual connection, by the thread that
 * computed the part: no separate pass over y). */
typedef struct ds_mm_out {
	const ds_mat *w;
	float *y;
	size_t ldy;
	float *res;
	size_t ldr;
} ds_mm_out;

/* y [T][n] = x [T][k] W^T, dense rows. */
void ds_matmul(ds_ctx *c, const ds_mat *w, const float *x, size_t t, float *y);
/* Several products of one input (q, k and v; a router and a shared
 * expert): the input is normalized, permuted and quantized once per
 * distinct permutation, and all outputs' row-sets are split over the
 * threads in one job.  All matrices have the same k. */
void ds_matmul_many(ds_ctx *c, const ds_in *in, const ds_mm_out *out, int n);

/* Per-head products in one job (MLA: the absorbed query q_c[h] =
 * W_UK[h]^T q_nope[h] and the value projection o[h] = W_UV[h] o_c[h]):
 * y[t][h] = x[t][h] w[h]^T for h < nh and t < T, the w[h] of one type and
 * shape [n, k] (ds_mat_expert or ds_mat_from_rowset views); x[t][h] at
 * x + t * ldx + h * hsx (k floats), y[t][h] at y + t * ldy + h * hsy (n
 * floats).  T * nh <= cfg.head_rows.
 * side, where not NULL, runs on every thread of the same job before the
 * products, as side(side_arg, ith, nth), beside the preparation of the
 * inputs: work the caller needs done by the time the products are, that
 * would otherwise cost a pool round trip of its own.  It must not touch
 * the first n floats of y's heads nor the k inputs of x's. */
typedef struct ds_heads {
	const ds_mat *w;    /* [nh] */
	size_t nh;
	const float *x;
	size_t ldx, hsx;
	float *y;
	size_t ldy, hsy;
	ds_job_fn *side;
	void *side_arg;
} ds_heads;

void ds_matmul_heads(ds_ctx *c, const ds_heads *p, size_t t);

/* h [T][ldh] = silu(x W_gate^T) * (x W_up^T), gate and up [n_ff, k]:
 * both products of a row-set are combined in cache; ldh 0: n_ff.  One row
 * (decode; gate and up of one q4, q8 or bf16 type and permutation, n_ff <=
 * cfg.max_ff, a pool on one NUMA node) claims gate's row-sets and up's as
 * one range, then gates. */
void ds_ffn_gate_up(ds_ctx *c, const ds_mat *gate, const ds_mat *up,
		    const ds_in *in, float *h, size_t ldh);
/* y [T][ldy] = (silu(x W_gate^T) * (x W_up^T)) W_down^T (the hidden layer
 * in the context, n_ff <= cfg.max_ff); ldy 0: n_embd.  res, where not
 * NULL, [T][ldy] += y (as ds_mm_out's res; it may be in's x). */
void ds_ffn(ds_ctx *c, const ds_mat *gate, const ds_mat *up,
	    const ds_mat *down, const ds_in *in, float *y, size_t ldy, float *res);

/* Routed experts: y[t] += sum_j w[t][j] * FFN_e(x[t]), e = ids[t][j], for
 * j < n_used, with FFN_e the SwiGLU FFN of expert e of the 3-D tensors
 * gate, up [ne, n_ff_exp, k] and down [ne, k, n_ff_exp].  x [T][ldx],
 * ids and w [T][n_used], y [T][ldy] (0: dense), added to.  Tokens are
 * grouped by expert, so each expert's weights are read once per call. */
void ds_moe(ds_ctx *c, const ds_mat *gate, const ds_mat *up,
	    const ds_mat *down, const float *x, size_t ldx, size_t t,
	    const int32_t *ids, const float *w, size_t n_used, float *y,
	    size_t ldy);
/* The routed experts e0 .. e1-1 alone (expert parallelism, forward.h
 * ds_fwd_ep): for each assignment i = t * n_used + j with e0 <= ids[i] <
 * e1, the unweighted FFN_e(x[t]) into out + dst[i] * ldo (ldo 0: n_embd),
 * each row computed as ds_moe computes it before weighing; the other rows
 * of out are not touched. */
void ds_moe_part(ds_ctx *c, const ds_mat *gate, const ds_mat *up,
		 const ds_mat *down, const float *x, size_t ldx, size_t t,
		 const int32_t *ids, size_t n_used, uint32_t e0, uint32_t e1,
		 const int32_t *dst, float *out, size_t ldo);

/* ---- element-wise ----------------------------------------------------------- */

/* y [T][ldy] = RMSNorm(x [T][ldx]) * w over n values (in place allowed). */
void ds_rmsnorm(ds_ctx *c, const float *x, size_t ldx, const float *w,
		float eps, size_t t, size_t n, float *y, size_t ldy);
/* y[i] = a[i] + b[i], i < n (in place allowed). */
void ds_add(ds_ctx *c, const float *a, const float *b, size_t n, float *y);
/* y[t][i] += bias[i] for t < T, i < n (Qwen2's q/k/v biases). */
void ds_add_bias(ds_ctx *c, float *y, size_t ldy, size_t t, const float *bias,
		 size_t n);

/* ---- RoPE ---------------------------------------------------------------------- */

#define DS_ROPE_MAXDIM 512

/* The precomputed frequencies of one RoPE: pair i of a head (neox:
 * (x[i], x[i + dim/2]), interleaved: (x[2i], x[2i+1])) is rotated at
 * position p by p * inv_freq[i]; cos and sin are multiplied by attn_factor
 * (YaRN's mscale(factor, mscale) / mscale(factor, mscale_all_dim)). */
typedef struct ds_rope {
	enum ds_rope_style style;
	uint32_t dim;                  /* rotated values per head (even) */
	double inv_freq[DS_ROPE_MAXDIM / 2];
	double attn_factor;
} ds_rope;

/* The RoPE of a model: hp's rope_style, rope_theta and rope_scaling
 * (none, linear, yarn, llama3), over the first dim values of a head
 * (head_dim; DeepSeek: qk_rope_head_dim).  Frequencies in double, as
 * DeepSeek's and transformers' formulas give them. */
int ds_rope_init(ds_rope *r, const ds_hparams *hp, uint32_t dim, ds_err *err);
/* The factor YaRN puts on the softmax scale, mscale(factor,
 * mscale_all_dim)^2 (1 without YaRN): scale = this / sqrt(d_qk). */
double ds_rope_attn_scale(const ds_hparams *hp);
/* Rotate, in place, the first r->dim values of nh heads of T tokens: head
 * h of token t at x + t * ldx + h * hs (ldx 0: nh * hs), at position
 * pos[t], or pos0 + t when pos is NULL.  Angles are formed in double. */
void ds_rope_apply(ds_ctx *c, const ds_rope *r, float *x, size_t ldx,
		   size_t t, size_t nh, size_t hs, const int32_t *pos,
		   size_t pos0);
/* The table the rope kernel reads for position p: cos then sin of the
 * r->dim / 2 angles, times attn_factor, into cs [r->dim]. */
void ds_rope_table(const ds_rope *r, double p, float *cs);

/* ---- KV cache and attention ------------------------------------------------ */

/* One layer's K or V cache: head h's row for position p is at
 * data + p * ld + h * head_stride, dim values of type `type`
 * (kernels.h ds_kvtype; ds_kv_row_bytes gives a row's size). */
typedef struct ds_kv {
	enum ds_kvtype type;
	uint8_t *data;
	size_t ld;
	size_t head_stride;
	size_t dim;
} ds_kv;

/* Store T tokens' rows into the cache at positions pos0 .. pos0+T-1: the
 * row of head h of token t is x + t * ldx + h * hs (ldx 0: nh * hs). */
void ds_kv_write(ds_ctx *c, const ds_kv *kv, const float *x, size_t ldx,
		 size_t hs, size_t nh, size_t t, size_t pos0);

/* Causal scaled dot-product attention of T query tokens at positions
 * pos0 .. pos0+T-1 over the cache rows 0 .. pos0+t (which must already
 * hold those tokens' own keys and values):
 *   o[t][h] = sum_(p <= pos0+t) softmax_p(scale * q[t][h] . K[p][h/g]) V[p][h/g]
 * with g = n_head / n_kv_head query heads per KV head (GQA).
 * MLA absorbed decode is n_kv_head = 1 with one 576-wide key per position
 * (the 512 latent values then the 64 rope values) and V a view of the
 * first 512 values of the same rows: v = k with v.dim = 512. */
typedef struct ds_attn {
	size_t n_head, n_kv_head;
	const float *q;     /* q[t][h] at q + t * q_ld + h * q_hs, k.dim floats */
	size_t q_ld, q_hs;
	ds_kv k, v;
	float *o;           /* o[t][h] at o + t * o_ld + h * o_hs, v.dim floats */
	size_t o_ld, o_hs;
	float scale;
	size_t pos0;
	/* One block of keys (MLA's MHA form, mla.c), or all (nk 0, k0 0):
	 * the positions k0 .. k0+nk-1 only, k.data and v.data then holding
	 * position k0's rows.  Over consecutive blocks (k0 a multiple of
	 * DS_ATTN_CHUNK) every (token, head)'s running maximum and sum carry
	 * in ml + (t * n_head + h) * 2: the block at k0 0 starts them, the
	 * `last` divides the outputs by the sums.  MHA only (n_kv_head ==
	 * n_head). */
	size_t k0, nk;
	float *ml;
	int last;
} ds_attn;

void ds_attention(ds_ctx *c, const ds_attn *a, size_t t);

/* Causal MHA of T query tokens at positions pos0 .. pos0+T-1 over one
 * block of keys k0 .. k0+nk-1 (nk <= DS_ATTN_BLK) packed in bf16 per
 * head (kernels.h ds_attn_blk): MLA's MHA form, its keys expanded from
 * the cache a block at a time.  Every (token, head)'s running maximum and
 * sum carry in ml + (t * n_head + h) * 2 from the block at k0 0 on; the
 * `last` block divides the outputs by the sums.  The tokens before k0
 * are left out. */
typedef struct ds_attn_pk {
	size_t n_head;
	const uint16_t *q;  /* q[t][h] at q + t * q_ld + h * q_hs, bf16, kd
			       values then zero to an even count */
	size_t q_ld, q_hs;
	const uint16_t *k, *v;   /* head h's block at k + h * k_hs, v + h * v_hs */
	size_t k_hs, v_hs;
	size_t kd, vd;
	float *o;           /* o[t][h] at o + t * o_ld + h * o_hs, vd floats */
	size_t o_ld, o_hs;
	float scale;
	size_t pos0, k0, nk;
	float *ml;
	int last;
	/* int8 keys (kernels.h K8, Q8) when k8 is set, k and q unused: head
	 * h's block at k8 + h * k8_hs, q8[t][h] at q8 + t * q8_ld + h * q8_hs
	 * (bytes), kb blocks of 32 values a row */
	const uint8_t *k8;
	const int8_t *q8;
	size_t k8_hs, q8_ld, q8_hs, kb;
} ds_attn_pk;

void ds_attention_blk(ds_ctx *c, const ds_attn_pk *a, size_t t);

/* The keys and values of a block of n keys (n <= DS_ATTN_BLK), nh heads,
 * rounded to bf16 and packed for ds_attention_blk: key j of head h is
 * ka[j][h] (na floats at ka + j * ka_ld + h * ka_hs) then kb[j] (nb
 * floats at kb + j * kb_ld, the same for every head), its value va[j][h]
 * (vd floats); into k + h * k_hs and v + h * v_hs.  na even; 16 keys of
 * every width must fit a thread's scratch (checked).  With k8 set the
 * keys are quantized to int8 instead (each part in blocks of 32,
 * kernels.h K8) into k8 + h * k8_hs, k unused. */
typedef struct ds_attn_src {
	size_t n_head, n;
	const float *ka, *kb, *va;
	size_t ka_ld, ka_hs, na, kb_ld, nb, va_ld, va_hs, vd;
	uint16_t *k, *v;
	size_t k_hs, v_hs;
	uint8_t *k8;
	size_t k8_hs;
} ds_attn_src;

/* Rows of queries [a | b] (na then nb floats, row r at x + r * ld) in
 * int8 as kernels.h's Q8 (each part in blocks of 32), row r at q8 + r *
 * q8_ld. */
void ds_attn_quant_q(const ds_kernels *K, const float *x, size_t ld, size_t na, size_t nb,
		     int8_t *q8, size_t q8_ld, size_t r0, size_t r1);

void ds_attn_pack(ds_ctx *c, const ds_attn_src *s);

/* ds_attention with the last steps of its inputs in the same pool job,
 * before a barrier: the q rows (a->q, n_head heads of a->q_hs) and the
 * new key rows k (n_kv_head heads of hs) rotated in place by r at
 * positions pos0 .., then the key and value rows (v) written into a->k
 * and a->v at those positions, as ds_rope_apply and ds_kv_write would.
 * Row t of k and v at k + t * ld, v + t * ld (ld 0: n_kv_head * hs). */
typedef struct ds_attn_rows {
	const ds_rope *rope;
	float *q;           /* a->q, writable */
	float *k;
	const float *v;
	size_t ld, hs;
	const float *cs;    /* one row (decode): rope's table at its position
			       (ds_rope_table), or NULL to compute it */
} ds_attn_rows;

void ds_attention_rows(ds_ctx *c, const ds_attn *a, const ds_attn_rows *in,
		       size_t t);

/* ---- routing and gather ------------------------------------------------------- */

/* The k largest of x[0 .. n) in descending order, ties to the lower
 * index: idx[k] and (if val) val[k].  k <= n. */
void ds_topk(const float *x, size_t n, size_t k, int32_t *idx, float *val);

/* The DeepSeek MoE router (docs/deepseek.md section 7). */
enum ds_route_score { DS_ROUTE_SOFTMAX, DS_ROUTE_SIGMOID };
enum ds_route_method {
	DS_ROUTE_GREEDY,              /* top-k of the scores */
	DS_ROUTE_GROUP_LIMITED,       /* groups ranked by their best score */
	DS_ROUTE_NOAUX_TC,            /* groups ranked by the sum of their two
					 best biased scores; select by biased
					 score, weigh by the unbiased one */
};

typedef struct ds_router {
	size_t n_expert, n_used;
	enum ds_route_score score;
	enum ds_route_method method;
	size_t n_group, topk_group;
	const float *bias;            /* [n_expert] noaux_tc selection bias */
	int norm_topk_prob;
	float routed_scaling_factor;
} ds_router;

/* logits [T][n_expert] (the router matmul's output, overwritten with the
 * scores) -> ids, w [T][n_used]. */
void ds_route(ds_ctx *c, const ds_router *r, float *logits, size_t t,
	      int32_t *ids, float *w);

/* y [T][ldy] = rows ids[t] of the [n, k] table (any type), dequantized;
 * -1 if an id is outside 0 .. n-1. */
int ds_embed(ds_ctx *c, const ds_mat *table, const int32_t *ids, size_t t,
	     float *y, size_t ldy, ds_err *err);

#endif

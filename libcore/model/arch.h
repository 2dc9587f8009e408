/*
 * arch.h - inside the forward passes (forward.h): the bound weights, the
 * activation buffers, and the blocks the architectures share.
 *
 * Shapes: T = entries of the batch (tokens), H = n_embd, nh = n_head,
 * nkv = n_head_kv, hd = head_dim; MLA: dn = qk_nope_head_dim, dr =
 * qk_rope_head_dim, dv = v_head_dim, rkv = kv_lora_rank, rq = q_lora_rank.
 * Activations are float32 rows, one per token.
 */
#ifndef DS_ARCH_H
#define DS_ARCH_H

#include "forward.h"
#include "ops/ops.h"

#define DS_FWD_MAPS 40

/* One layer's weights ([out, in] as ds_mat; vectors f32). */
typedef struct ds_layer {
	const float *attn_norm;          /* (H) */
	const float *ffn_norm;           /* (H) */
	/* llama / qwen2 */
	ds_mat wq;                       /* (nh*hd, H); MLA lite: (nh*(dn+dr), H) */
	ds_mat wk, wv;                   /* (nkv*hd, H) */
	const float *bq, *bk, *bv;       /* qwen2: (nh*hd), (nkv*hd) x2 */
	ds_mat wo;                       /* (H, nh*hd); MLA: (H, nh*dv) */
	/* MLA */
	ds_mat wq_a;                     /* (rq, H), rq > 0 */
	const float *q_a_norm;           /* (rq) */
	ds_mat wq_b;                     /* (nh*(dn+dr), rq) */
	ds_mat wkv_a;                    /* (rkv+dr, H) */
	const float *kv_a_norm;          /* (rkv) */
	ds_mat wkv_b;                    /* (nh*(dn+dv), rkv) */
	ds_mat wk_b;                     /* derived: nh x (rkv, dn), W_UK[h]^T */
	ds_mat wv_b;                     /* nh x (dv, rkv): W_UV[h]; derived
					    only when not a view of wkv_b */
	int wv_view;                     /* wv_b is unset: rows of wkv_b */
	ds_mat *uk, *uv;                 /* [nh] per-head views: W_UK[h]^T of
					    wk_b, W_UV[h] of wv_b or wkv_b */
	/* FFN */
	int moe;
	ds_mat ffn_gate, ffn_up;         /* (n_ff, H) */
	ds_mat ffn_down;                 /* (H, n_ff) */
	ds_mat gate_inp;                 /* router (E, H), f32 */
	const float *exp_bias;           /* noaux_tc (E) or NULL */
	ds_mat gate_exps, up_exps;       /* E x (n_ff_exp, H) */
	ds_mat down_exps;                /* E x (H, n_ff_exp) */
	int shexp;                       /* shared experts present */
	ds_mat gate_sh, up_sh;           /* (n_ff_exp*n_shared, H) */
	ds_mat down_sh;                  /* (H, n_ff_exp*n_shared) */
} ds_layer;

/* A run of the batch: n entries of one sequence at consecutive
 * positions, rows t0 .. t0+n-1 of the activations, all prompt tokens
 * or none (ds_batch.prompt). */
typedef struct ds_run {
	uint32_t seq;
	uint32_t t0, n;
	uint32_t pos0;
	int prompt;                      /* its entries are prompt tokens */
} ds_run;

struct ds_fwd {
	const ds_model *m;
	const ds_hparams *hp;
	ds_ctx ctx;
	ds_pool *pool;
	const ds_kernels *kern;
	uint32_t max_batch;

	ds_mat tok_embd;                 /* (n_vocab, H) */
	const float *out_norm;           /* (H) */
	ds_mat output;                   /* (n_vocab, H); tied: tok_embd */
	ds_layer *layers;                /* [n_layer] */
	uint32_t n_layer;                /* layers bound: the model's, or 1
					    for the MTP module */
	/* the MTP module (ds_fwd_opts.mtp): the norms of its two inputs and
	 * their projection; layers[0] is its decoder layer, tok_embd,
	 * out_norm and output its embedding, head norm and head */
	int mtp;
	int draft_head;                  /* ds_fwd_opts.draft_head */
	const float *mtp_enorm, *mtp_hnorm;
	ds_mat mtp_eh;                   /* (H, 2H) */
	float *cat;                      /* (T, 2H) the normed inputs */
	ds_rope rope;
	float rope_cs[2 * DS_ROPE_MAXDIM];
	const float *rope1;              /* a step of one token: rope's table
					    at its position (rope_cs), else NULL */
	float attn_scale;                /* softmax scale */
	ds_router router;
	/* expert parallelism (forward.h ds_fwd_ep, ep.c), or ep NULL */
	const ds_fwd_ep *ep;
	uint32_t *ep_part;               /* [n_expert] the part holding each */
	int *ep_cnt, *ep_off, *ep_fill;  /* [n_part] rows per part */
	int32_t *ep_row;                 /* (T, n_used) each assignment's row */
	float *ep_rows;                  /* (T * n_used, H) the parts' outputs */
	void *derived;                   /* the DS_FWD_DERIVED tensors (mapped) */
	ds_mat *head_mats;               /* MLA: [n_layer][2][nh] head views */
	uint64_t derived_bytes;

	/* activations, [max_batch] rows each */
	float *x;                        /* (T, H) residual stream */
	float *h;                        /* (T, H) normalized / block output */
	float *y;                        /* (T, H) MoE output */
	float *q;                        /* (T, nh*qhd) queries */
	float *k, *v;                    /* (T, nkv*hd); MLA: k = (T, rkv+dr) */
	float *qa;                       /* (T, rq) MLA low-rank query */
	float *qc;                       /* (T, nh*(rkv+dr)) absorbed query */
	float *oc;                       /* (T, nh*rkv) latent attention out */
	float *o;                        /* (T, nh*vd) attention out */
	/* MLA's MHA form (mla.c): DS_MLA_KEYS keys at a time decompressed
	 * from the cache */
	int mla_form;                    /* enum ds_mla_form */
	float *mla_lat;                  /* (DS_MLA_KEYS, rkv+dr) cache rows */
	float *mla_kv;                   /* (DS_MLA_KEYS, nh*(dn+dv)) k_nope, v */
	float *mla_kr;                   /* (DS_MLA_KEYS, nh*(dn+dr)) keys (fp32) */
	uint16_t *mla_qb;                /* (T, nh, ds_mla_qb_ld) queries, bf16
					    or int8 (kern->attn_q8) */
	uint16_t *mla_kp, *mla_vp;       /* (nh) packed blocks of keys (bf16 or
					    int8), values (kernels.h ds_attn_blk) */
	float *mla_ml;                   /* (T, nh, 2) softmax max and sum */
	float *rl;                       /* (T, E) router logits */
	int32_t *eids;                   /* (T, n_used) */
	float *ew;                       /* (T, n_used) */
	/* the batch, prepared */
	int32_t *tok, *pos;              /* (T) */
	ds_run *runs;                    /* [max_batch] */
	size_t n_runs;
	uint32_t *out_rows;              /* rows that asked for logits */
	size_t n_out;
	float *xo;                       /* (T, H) those rows */
	float *logits;                   /* (T, n_vocab) */
	struct { void *p; size_t n; } maps[DS_FWD_MAPS];  /* the buffers */
	int n_maps;
	uint32_t *seq_next;              /* scratch [n_slot] for checking */
	uint8_t *seq_seen;
	uint32_t seq_cap;
	uint64_t scratch_bytes;
};

/* The model's RoPE table and softmax scale (forward.c). */
int ds_fwd_rope_init(const ds_hparams *hp, ds_rope *r, double *scale,
		     ds_err *err);

/* ---- shared blocks (common.c) ------------------------------------------- */

/* x += FFN(RMSNorm(x)): dense SwiGLU or, for MoE layers, the routed
 * experts plus the shared ones. */
void ds_blk_ffn(ds_fwd *f, const ds_layer *L, size_t T);
/* RoPE on q and k, each run's K and V rows into the cache, then
 * llama-style grouped-query attention of q (T, nh*hd) into o (T, nh*hd)
 * (q and k rotated in place). */
void ds_blk_gqa(ds_fwd *f, ds_kvcache *kv, uint32_t layer, size_t T);
/* Run r's attention over layer `layer` of its cache: the n_head query
 * rows of q_hs floats per token at q (the whole batch's rows), n_kv_head
 * key heads, outputs of o_hs floats per head at o; f's scale. */
ds_attn ds_run_attn(const ds_fwd *f, ds_kvcache *kv, uint32_t layer, const ds_run *r,
		    size_t n_kv_head, const float *q, size_t q_hs, float *o, size_t o_hs);
/* x += o W_o^T */
void ds_blk_out(ds_fwd *f, const ds_mat *wo, const float *o, size_t T);

/* ---- expert parallelism (ep.c) ------------------------------------------- */

/* Check f->ep against the model and fill f->ep_part. */
int ds_ep_init(ds_fwd *f, ds_err *err);
/* y (T, H) += the routed experts of layer L for the rows of h: this
 * part's computed, all parts' exchanged and added in expert order. */
void ds_ep_moe(ds_fwd *f, const ds_layer *L, size_t T);

/* ---- MLA (mla.c) -------------------------------------------------------- */

/* The type of the derived matrices for an attn_kv_b of type kv_b. */
ds_ttype ds_mla_derived_type(ds_ttype kv_b);
/* The bytes of n_layer layers' derived matrices (DS_FWD_DERIVED). */
int ds_mla_derived_bytes(const ds_hparams *hp, uint32_t n_layer, ds_ttype kv_b,
			 uint64_t *bytes, ds_err *err);
/* Derive W_UK^T (and W_UV when needed) for every layer into f->derived
 * (ds_mla_derived_bytes of it), and the layers' per-head views into
 * f->head_mats (2 n_layer n_head of them). */
int ds_mla_derive(ds_fwd *f, ds_err *err);
/* The q_a and kv_a norms are built with eps 1e-6 by the reference and
 * Hugging Face code, whatever rms_norm_eps says. */
#define DS_LORA_EPS 1e-6f

/* Keys decompressed at a time in MLA's MHA form: one block of the
 * attention kernel (ds_attn_blk). */
#define DS_MLA_KEYS DS_ATTN_BLK
/* Blocks of 32 values of an int8 key or query row in that form (each
 * of the parts k_nope and k_pe padded to 32: kernels.h K8, Q8). */
static inline size_t ds_mla_q8_blocks(const ds_hparams *hp)
{
	return ((size_t)hp->qk_nope_head_dim + 31) / 32 + ((size_t)hp->qk_rope_head_dim + 31) / 32;
}
/* The row of a query in that form, in halfwords: a bf16 row (dn + dr
 * rounded up to 32, as bf16_row writes) or an int8 one (Q8: 40 bytes a
 * block), whichever is longer. */
static inline size_t ds_mla_qb_ld(const ds_hparams *hp)
{
	size_t bf = ((size_t)hp->qk_nope_head_dim + hp->qk_rope_head_dim + 31) / 32 * 32;

	return bf > ds_mla_q8_blocks(hp) * 20 ? bf : ds_mla_q8_blocks(hp) * 20;
}
/* Halfwords of a head's packed block of keys in that form: bf16 or
 * int8 (kernels.h K8), whichever is longer. */
static inline size_t ds_mla_kp_size(const ds_hparams *hp)
{
	size_t bf = ds_attn_pack_k_size(DS_MLA_KEYS, (size_t)hp->qk_nope_head_dim +
					hp->qk_rope_head_dim);
	size_t q8 = (ds_attn_pack_k8_size(DS_MLA_KEYS, ds_mla_q8_blocks(hp)) + 1) / 2;

	return bf > q8 ? bf : q8;
}
/* MLA attention of the projected rows q (T, nh*(dn+dr)) and k (T,
 * rkv+dr): c normalized, q_pe and k_pe rotated, the rows into the cache,
 * then attention, each run absorbed or in the MHA form (ds_run.prompt,
 * f->mla_form); o (T, nh*dv). */
void ds_mla_attend(ds_fwd *f, ds_kvcache *kv, const ds_layer *L,
		   uint32_t layer, size_t T);

/* ---- the architectures ---------------------------------------------------- */

void ds_llama_layers(ds_fwd *f, ds_kvcache *kv, size_t T);
void ds_qwen2_layers(ds_fwd *f, ds_kvcache *kv, size_t T);
void ds_deepseek2_layers(ds_fwd *f, ds_kvcache *kv, size_t T);

#endif

/*
 * hfconfig.h - model hyper-parameters: read from a Hugging Face config.json
 * (model_type llama, qwen2, deepseek_v2, deepseek_v3), written to and read
 * back from model.meta's "hparams" object (ds-model(5) lists the keys), and
 * the table of tensors each architecture has, with their shapes and the
 * Hugging Face names they come from.
 */
#ifndef DS_HFCONFIG_H
#define DS_HFCONFIG_H

#include <stdint.h>

#include "kernels/types.h"   /* enum ds_rope_style */
#include "base/util.h"

struct json_t;

enum ds_arch { DS_ARCH_LLAMA, DS_ARCH_QWEN2, DS_ARCH_DEEPSEEK2 };
enum ds_rope_scaling {
	DS_ROPE_SCALING_NONE, DS_ROPE_SCALING_LINEAR, DS_ROPE_SCALING_YARN,
	DS_ROPE_SCALING_LLAMA3
};
enum ds_scoring { DS_SCORING_NONE, DS_SCORING_SOFTMAX, DS_SCORING_SIGMOID };
enum ds_topk {
	DS_TOPK_NONE, DS_TOPK_GREEDY, DS_TOPK_GROUP_LIMITED, DS_TOPK_NOAUX_TC
};

#define DS_MAX_EOS 8

/* Every field is set for every architecture; unused ones are 0 (enums:
 * the _NONE value).  Token ids are -1 when the config has none. */
typedef struct ds_hparams {
	enum ds_arch arch;
	uint32_t n_vocab, n_embd, n_layer;
	uint32_t n_head, n_head_kv, head_dim;  /* DeepSeek: head_dim = d_qk */
	uint32_t n_ff;                         /* dense FFN width */
	uint32_t n_ctx_train;                  /* max_position_embeddings */
	double norm_eps;
	double rope_theta;
	enum ds_rope_style rope_style;
	struct {
		enum ds_rope_scaling type;
		double factor;
		uint32_t original_ctx;        /* original_max_position_embeddings */
		double beta_fast, beta_slow;  /* yarn */
		double mscale, mscale_all_dim;/* yarn */
		double low_freq_factor, high_freq_factor; /* llama3 */
	} rope_scaling;
	int tie_embeddings;
	int qkv_bias;
	/* MLA (DeepSeek) */
	uint32_t q_lora_rank, kv_lora_rank;    /* q_lora_rank 0: direct q */
	uint32_t qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
	/* MoE (DeepSeek) */
	uint32_t n_expert, n_expert_used, n_expert_shared, n_ff_exp;
	uint32_t first_k_dense, moe_layer_freq;
	enum ds_scoring expert_scoring;
	enum ds_topk topk_method;
	uint32_t n_group, topk_group;
	int norm_topk_prob;
	double routed_scaling_factor;
	int64_t bos_token_id, eos_token_id;    /* eos: the first of eos_ids */
	uint32_t n_eos;
	int64_t eos_ids[DS_MAX_EOS];
	/* Multi-token prediction (DeepSeek-V3's num_nextn_predict_layers):
	 * n_mtp layers after the last, kept in the model but never part of
	 * the forward pass (ds_arch_mtp_tensors).  mtp_shares_embd/head: the
	 * MTP layer uses token_embd / the output projection, its own copies
	 * having been byte-identical to them. */
	uint32_t n_mtp;
	int mtp_shares_embd, mtp_shares_head;
} ds_hparams;

#define DS_MAX_MTP 1   /* MTP layers a model may have */

/* Read config.json at `path`.  Unknown model_type, missing or insane
 * fields and unsupported features are errors naming the file and key. */
int ds_hparams_from_hf(ds_hparams *hp, const char *path, ds_err *err);
/* The same from an already parsed config object (file names messages). */
int ds_hparams_from_hf_json(ds_hparams *hp, const struct json_t *cfg,
			    const char *file, ds_err *err);

/* model.meta "hparams" object (a new reference). */
struct json_t *ds_hparams_to_json(const ds_hparams *hp);
/* Read it back, checking every key; `file` names messages. */
int ds_hparams_from_json(ds_hparams *hp, const struct json_t *obj,
			 const char *file, ds_err *err);
/* The same consistency checks ds_hparams_from_hf applies. */
int ds_hparams_check(const ds_hparams *hp, const char *file, ds_err *err);

/* "llama" "qwen2" "deepseek2"; -1 unknown. */
const char *ds_arch_name(enum ds_arch a);
int ds_arch_parse(const char *s, enum ds_arch *a);

/* Layer L uses the MoE FFN. */
int ds_hparams_is_moe(const ds_hparams *hp, uint32_t layer);

/* ---- the tensors an architecture has ---------------------------------------- */

enum ds_tkind {
	DS_TK_EMBED,   /* token_embd: a matrix used by row lookup */
	DS_TK_MATRIX,  /* a linear layer's weight [N, K] or stacked [E, N, K] */
	DS_TK_OUTPUT,  /* the output projection */
	DS_TK_ROUTER,  /* MoE router [E, n_embd]: always f32 */
	DS_TK_VECTOR,  /* norm weights, biases: always f32 */
};

typedef struct ds_tdesc {
	char name[48];        /* ds name: "blk.3.attn_kv_a" */
	enum ds_tkind kind;
	int ndim;
	uint64_t shape[3];
	/* Hugging Face source: for MATRIX/OUTPUT/EMBED/ROUTER the module
	 * ("model.layers.3.self_attn.kv_a_proj_with_mqa"; its tensors are
	 * MODULE.weight or MODULE.qweight ...); for VECTOR the tensor name.
	 * Stacked experts (ndim 3) come from hf "%u" hf2 for u < shape[0]:
	 * hf = "model.layers.3.mlp.experts.", hf2 = ".gate_proj". */
	char hf[96];
	char hf2[24];
} ds_tdesc;

/* The table for hp (malloc'd *out of *n entries), in file order. */
int ds_arch_tensors(const ds_hparams *hp, ds_tdesc **out, size_t *n,
		    ds_err *err);
/* The multi-token-prediction tensors (none when hp->n_mtp is 0): the
 * decoder layer blk.N.* with N = n_layer, and mtp.enorm, mtp.hnorm,
 * mtp.eh_proj, mtp.head_norm, mtp.embd, mtp.head (the last two unless
 * shared), from model.layers.N.*; malloc'd *out of *n entries. */
int ds_arch_mtp_tensors(const ds_hparams *hp, ds_tdesc **out, size_t *n,
			ds_err *err);
/* The Hugging Face module of expert e of a stacked entry, into buf. */
const char *ds_tdesc_hf_expert(const ds_tdesc *d, uint32_t e, char *buf,
			       size_t len);

#endif

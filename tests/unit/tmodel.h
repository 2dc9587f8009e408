/*
 * tmodel.h - tiny random models written as ds-model(5) directories, for
 * the forward-pass and scheduler tests.  Hyper-parameters come from a
 * Hugging Face config.json text (so hfconfig.c derives them as for a real
 * checkpoint); weights are random, RTN-quantized or rounded to the matrix
 * type asked for.
 */
#ifndef DS_TMODEL_H
#define DS_TMODEL_H

#include <jansson.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "format/modelfile.h"

/* llama: GQA 4 heads / 2 KV heads of 32, llama3 rope scaling */
static const char tm_llama[] =
	"{\"model_type\": \"llama\", \"vocab_size\": 320, \"hidden_size\": 128,"
	" \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
	" \"num_key_value_heads\": 2, \"intermediate_size\": 192,"
	" \"max_position_embeddings\": 512, \"rms_norm_eps\": 1e-5,"
	" \"rope_theta\": 500000.0, \"tie_word_embeddings\": false,"
	" \"bos_token_id\": 1, \"eos_token_id\": 2,"
	" \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0,"
	"   \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
	"   \"original_max_position_embeddings\": 64}}";

/* qwen2: q/k/v biases, tied embeddings */
static const char tm_qwen2[] =
	"{\"model_type\": \"qwen2\", \"vocab_size\": 300, \"hidden_size\": 128,"
	" \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
	" \"num_key_value_heads\": 1, \"intermediate_size\": 160,"
	" \"max_position_embeddings\": 512, \"rms_norm_eps\": 1e-6,"
	" \"rope_theta\": 10000.0, \"tie_word_embeddings\": true,"
	" \"bos_token_id\": 1, \"eos_token_id\": 2}";

/* deepseek_v2 lite-style: no q LoRA, softmax greedy MoE, YaRN */
static const char tm_dsv2[] =
	"{\"model_type\": \"deepseek_v2\", \"vocab_size\": 288, \"hidden_size\": 128,"
	" \"num_hidden_layers\": 3, \"num_attention_heads\": 4,"
	" \"num_key_value_heads\": 4, \"intermediate_size\": 192,"
	" \"max_position_embeddings\": 1024, \"rms_norm_eps\": 1e-6,"
	" \"rope_theta\": 10000.0, \"tie_word_embeddings\": false,"
	" \"bos_token_id\": 1, \"eos_token_id\": 2,"
	" \"q_lora_rank\": null, \"kv_lora_rank\": 64, \"qk_nope_head_dim\": 32,"
	" \"qk_rope_head_dim\": 32, \"v_head_dim\": 32,"
	" \"moe_intermediate_size\": 64, \"n_routed_experts\": 8,"
	" \"num_experts_per_tok\": 2, \"n_shared_experts\": 1,"
	" \"first_k_dense_replace\": 1, \"moe_layer_freq\": 1,"
	" \"topk_method\": \"group_limited_greedy\", \"n_group\": 4, \"topk_group\": 2,"
	" \"scoring_func\": \"softmax\", \"norm_topk_prob\": false,"
	" \"routed_scaling_factor\": 2.0,"
	" \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0,"
	"   \"original_max_position_embeddings\": 64, \"beta_fast\": 32,"
	"   \"beta_slow\": 1, \"mscale\": 0.707, \"mscale_all_dim\": 0.707}}";

/* deepseek_v3-style: q LoRA, sigmoid noaux_tc, dims not multiples of 16
 * (W_UV derived instead of read in place) */
static const char tm_dsv3[] =
	"{\"model_type\": \"deepseek_v3\", \"vocab_size\": 272, \"hidden_size\": 96,"
	" \"num_hidden_layers\": 2, \"num_attention_heads\": 3,"
	" \"num_key_value_heads\": 3, \"intermediate_size\": 128,"
	" \"max_position_embeddings\": 1024, \"rms_norm_eps\": 1e-6,"
	" \"rope_theta\": 10000.0, \"tie_word_embeddings\": false,"
	" \"bos_token_id\": 0, \"eos_token_id\": 1,"
	" \"q_lora_rank\": 48, \"kv_lora_rank\": 40, \"qk_nope_head_dim\": 24,"
	" \"qk_rope_head_dim\": 16, \"v_head_dim\": 20,"
	" \"moe_intermediate_size\": 48, \"n_routed_experts\": 8,"
	" \"num_experts_per_tok\": 3, \"n_shared_experts\": 1,"
	" \"first_k_dense_replace\": 1, \"moe_layer_freq\": 1,"
	" \"topk_method\": \"noaux_tc\", \"n_group\": 4, \"topk_group\": 2,"
	" \"scoring_func\": \"sigmoid\", \"norm_topk_prob\": true,"
	" \"routed_scaling_factor\": 2.5,"
	" \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 40.0,"
	"   \"original_max_position_embeddings\": 64, \"beta_fast\": 32,"
	"   \"beta_slow\": 1, \"mscale\": 1.0, \"mscale_all_dim\": 1.0}}";

/* deepseek_v2 with q LoRA: softmax greedy routing normalized (not
 * scaled), two shared experts, every layer MoE, no rope scaling */
static const char tm_dsv2q[] =
	"{\"model_type\": \"deepseek_v2\", \"vocab_size\": 256, \"hidden_size\": 64,"
	" \"num_hidden_layers\": 2, \"num_attention_heads\": 2,"
	" \"num_key_value_heads\": 2, \"intermediate_size\": 128,"
	" \"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-6,"
	" \"rope_theta\": 10000.0, \"tie_word_embeddings\": false,"
	" \"bos_token_id\": 1, \"eos_token_id\": 2,"
	" \"q_lora_rank\": 48, \"kv_lora_rank\": 32, \"qk_nope_head_dim\": 16,"
	" \"qk_rope_head_dim\": 16, \"v_head_dim\": 16,"
	" \"moe_intermediate_size\": 32, \"n_routed_experts\": 6,"
	" \"num_experts_per_tok\": 2, \"n_shared_experts\": 2,"
	" \"first_k_dense_replace\": 0, \"moe_layer_freq\": 1,"
	" \"topk_method\": \"greedy\", \"scoring_func\": \"softmax\","
	" \"norm_topk_prob\": true, \"routed_scaling_factor\": 1.5}";

/* A random permutation of 0 .. k-1 (Fisher-Yates). */
static void tm_perm(int32_t *p, uint64_t k, uint64_t *seed)
{
	uint64_t i;

	for (i = 0; i < k; i++)
		p[i] = (int32_t)i;
	for (i = k; i > 1; i--) {
		uint64_t j = t_rand(seed) % i;
		int32_t x = p[i - 1];

		p[i - 1] = p[j];
		p[j] = x;
	}
}

/* NAME.perm for matrix e: an act-order input permutation per expert, as
 * ds-convert writes for GPTQ checkpoints quantized with desc_act. */
static int tm_write_perm(ds_mwriter *w, const ds_tdesc *e, uint64_t *seed,
			 ds_err *err)
{
	uint64_t ne = e->ndim == 3 ? e->shape[0] : 1, k = e->shape[e->ndim - 1];
	uint64_t shape[2] = { ne, k }, j;
	int32_t *p = malloc(ne * k * sizeof *p);
	char name[64];
	int rc;

	for (j = 0; j < ne; j++)
		tm_perm(p + j * k, k, seed);
	snprintf(name, sizeof name, "%s.perm", e->name);
	rc = ds_mwriter_tensor(w, name, (ds_ttype){ DS_I32, 0 }, e->ndim - 1,
			       e->ndim == 3 ? shape : shape + 1, p, err);
	free(p);
	return rc;
}

/* The multi-token-prediction tensors after the others (a config with
 * num_nextn_predict_layers): its own embedding and head, written as the
 * rest are. */
static int tm_add_mtp(const ds_hparams *hp, ds_tdesc **d, size_t *n)
{
	ds_tdesc *m = NULL, *all;
	size_t nm = 0;
	ds_err err;

	if (ds_arch_mtp_tensors(hp, &m, &nm, &err) ||
	    (all = realloc(*d, (*n + nm) * sizeof **d)) == NULL) {
		free(m);
		return -1;
	}
	memcpy(all + *n, m, nm * sizeof *m);
	*d = all;
	*n += nm;
	free(m);
	return 0;
}

/* Write a random model of config `cfg` with matrices of type `mt` into
 * dir (replacing it); with perm (q4 and q8 types), every linear layer
 * gets an act-order permutation of its inputs.  0 on success. */
static int tm_write_opt(const char *dir, const char *cfg, const char *mt,
			int perm, uint64_t *seed)
{
	json_error_t je;
	json_t *c = json_loads(cfg, 0, &je), *meta;
	ds_hparams hp;
	ds_tdesc *d = NULL;
	size_t n = 0, i, j;
	ds_mwriter w;
	ds_err err;
	ds_ttype t;
	int rc = -1;

	if (c == NULL || ds_hparams_from_hf_json(&hp, c, "config.json", &err) ||
	    ds_arch_tensors(&hp, &d, &n, &err) || ds_ttype_parse(mt, &t) ||
	    ds_mwriter_open(&w, dir, 1, &err)) {
		printf("# tm_write: %s\n", err.msg);
		json_decref(c);
		free(d);
		return -1;
	}
	json_decref(c);
	if (hp.n_mtp && tm_add_mtp(&hp, &d, &n)) {
		free(d);
		return -1;
	}
	for (i = 0; i < n; i++) {
		const ds_tdesc *e = &d[i];
		int vec = e->kind == DS_TK_VECTOR || e->kind == DS_TK_ROUTER;
		ds_ttype tt = vec ? (ds_ttype){ DS_F32, 0 } : t;
		uint64_t ne = e->ndim == 3 ? e->shape[0] : 1;
		uint64_t rows = e->ndim == 1 ? 1 : e->shape[e->ndim - 2];
		uint64_t k = e->shape[e->ndim - 1], bytes, eb;
		float *f = malloc(rows * k * sizeof *f);
		uint8_t *buf;
		int norm = e->kind == DS_TK_VECTOR && strstr(e->name, "norm");
		int bias = strstr(e->name, "exp_probs_b") != NULL;

		ds_tensor_bytes(tt, e->ndim, e->shape, &bytes);
		buf = calloc(1, bytes);
		eb = bytes / ne;
		for (j = 0; j < ne; j++) {
			uint64_t q;
			uint16_t *h = malloc(rows * k * 2);

			for (q = 0; q < rows * k; q++)
				f[q] = norm ? 1.0f + 0.2f * t_randf(seed) :
				       bias ? 0.1f * t_randf(seed) :
				       e->kind == DS_TK_EMBED ? 0.8f * t_randf(seed) :
				       e->kind == DS_TK_ROUTER ? 0.3f * t_randf(seed) :
				       0.12f * t_randf(seed);
			if (tt.dt == DS_F32) {
				memcpy(buf + j * eb, f, rows * k * 4);
			} else if (tt.dt == DS_F16) {
				for (q = 0; q < rows * k; q++)
					h[q] = ds_f32_to_f16(f[q]);
				memcpy(buf + j * eb, h, rows * k * 2);
			} else if (tt.dt == DS_BF16) {
				for (q = 0; q < rows * k; q++)
					h[q] = ds_f32_to_bf16(f[q]);
				ds_pack_bf16(buf + j * eb, h, rows, k);
			} else if (tt.dt == DS_Q8) {
				ds_quantize_q8(buf + j * eb, f, rows, k, tt.group);
			} else {
				ds_quantize_q4(buf + j * eb, f, rows, k, tt.group);
			}
			free(h);
		}
		if (ds_mwriter_tensor(&w, e->name, tt, e->ndim, e->shape, buf, &err) ||
		    (perm && e->kind == DS_TK_MATRIX && tm_write_perm(&w, e, seed, &err))) {
			printf("# tm_write: %s\n", err.msg);
			free(buf);
			free(f);
			goto out;
		}
		free(buf);
		free(f);
	}
	meta = json_pack("{s:s, s:i, s:s, s:o, s:{s:s, s:i, s:i, s:s}}",
			 "format", DS_MODEL_FORMAT, "version", DS_MODEL_VERSION,
			 "arch", ds_arch_name(hp.arch), "hparams",
			 ds_hparams_to_json(&hp), "quant", "source", "rtn",
			 "bits", t.dt == DS_Q4 ? 4 : t.dt == DS_Q8 ? 8 : 16,
			 "group_size", (int)t.group, "type", mt);
	rc = ds_mwriter_commit(&w, meta, &err);
	if (rc)
		printf("# tm_write: %s\n", err.msg);
	json_decref(meta);
out:
	ds_mwriter_abort(&w);
	free(d);
	return rc;
}

static int tm_write(const char *dir, const char *cfg, const char *mt,
		    uint64_t *seed)
{
	return tm_write_opt(dir, cfg, mt, 0, seed);
}

#endif

/* test_hfconfig.c - config.json -> hparams, the meta round trip, and the
 * architectures' tensor tables. */
#include <jansson.h>
#include <string.h>

#include "harness.h"
#include "format/hfconfig.h"

/* DeepSeek-V2-Lite's published values (docs/deepseek.md §3). */
static const char *v2_lite =
	"{\"model_type\":\"deepseek_v2\",\"vocab_size\":102400,\"hidden_size\":2048,"
	"\"num_hidden_layers\":27,\"num_attention_heads\":16,"
	"\"num_key_value_heads\":16,\"intermediate_size\":10944,"
	"\"moe_intermediate_size\":1408,\"max_position_embeddings\":163840,"
	"\"rms_norm_eps\":1e-06,\"q_lora_rank\":null,\"kv_lora_rank\":512,"
	"\"qk_nope_head_dim\":128,\"qk_rope_head_dim\":64,\"v_head_dim\":128,"
	"\"n_routed_experts\":64,\"num_experts_per_tok\":6,\"n_shared_experts\":2,"
	"\"first_k_dense_replace\":1,\"moe_layer_freq\":1,\"n_group\":1,"
	"\"topk_group\":1,\"topk_method\":\"greedy\",\"scoring_func\":\"softmax\","
	"\"norm_topk_prob\":false,\"routed_scaling_factor\":1.0,"
	"\"rope_theta\":10000,\"hidden_act\":\"silu\",\"attention_bias\":false,"
	"\"tie_word_embeddings\":false,\"bos_token_id\":100000,"
	"\"eos_token_id\":100001,\"rope_scaling\":{\"type\":\"yarn\",\"factor\":40,"
	"\"original_max_position_embeddings\":4096,\"beta_fast\":32,"
	"\"beta_slow\":1,\"mscale\":0.707,\"mscale_all_dim\":0.707}}";

static const char *llama31 =
	"{\"model_type\":\"llama\",\"vocab_size\":128256,\"hidden_size\":4096,"
	"\"num_hidden_layers\":32,\"num_attention_heads\":32,"
	"\"num_key_value_heads\":8,\"intermediate_size\":14336,"
	"\"max_position_embeddings\":131072,\"rms_norm_eps\":1e-05,"
	"\"rope_theta\":500000.0,\"bos_token_id\":128000,"
	"\"eos_token_id\":[128001,128008,128009],\"rope_scaling\":{\"factor\":8.0,"
	"\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
	"\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"}}";

static int parse(const char *text, ds_hparams *hp, ds_err *err)
{
	json_t *cfg = json_loads(text, 0, NULL);
	int rc;

	if (cfg == NULL)
		return -2;
	rc = ds_hparams_from_hf_json(hp, cfg, "config.json", err);
	json_decref(cfg);
	return rc;
}

/* text with `from` replaced by `to` must be refused naming `what` */
static void refuse(const char *base, const char *from, const char *to,
		   const char *what)
{
	char buf[4096], *p;
	ds_hparams hp;
	ds_err err = { "" };
	size_t n;

	p = strstr(base, from);
	T_CHECKF(p != NULL, "no \"%s\" to replace", from);
	if (p == NULL)
		return;
	n = (size_t)(p - base);
	snprintf(buf, sizeof buf, "%.*s%s%s", (int)n, base, to, p + strlen(from));
	T_CHECKF(parse(buf, &hp, &err) == -1, "accepted with %s", to);
	T_CHECKF(strstr(err.msg, what) != NULL, "\"%s\" lacks \"%s\"", err.msg, what);
	T_CHECK(strncmp(err.msg, "config.json: ", 13) == 0);
}

static void test_v2_lite(void)
{
	ds_hparams hp;
	ds_err err;

	T_CHECK(parse(v2_lite, &hp, &err) == 0);
	T_CHECK(hp.arch == DS_ARCH_DEEPSEEK2 && hp.n_layer == 27 && hp.n_embd == 2048);
	T_CHECK(hp.q_lora_rank == 0 && hp.kv_lora_rank == 512 && hp.head_dim == 192);
	T_CHECK(hp.n_expert == 64 && hp.n_expert_used == 6 && hp.n_expert_shared == 2);
	T_CHECK(hp.expert_scoring == DS_SCORING_SOFTMAX &&
		hp.topk_method == DS_TOPK_GREEDY && !hp.norm_topk_prob);
	T_CHECK(hp.rope_style == DS_ROPE_INTERLEAVED &&
		hp.rope_scaling.type == DS_ROPE_SCALING_YARN &&
		hp.rope_scaling.original_ctx == 4096 &&
		hp.rope_scaling.mscale_all_dim == 0.707 && hp.rope_scaling.factor == 40);
	T_CHECK(hp.bos_token_id == 100000 && hp.eos_token_id == 100001 &&
		hp.n_eos == 1);
	T_CHECK(!ds_hparams_is_moe(&hp, 0) && ds_hparams_is_moe(&hp, 1));
}

static void test_v3_defaults(void)
{
	ds_hparams hp;
	ds_err err;
	char buf[4096];

	/* deepseek_v3 without router keys takes transformers' defaults */
	snprintf(buf, sizeof buf, "%s", v2_lite);
	memcpy(strstr(buf, "deepseek_v2"), "deepseek_v3", 11);
	{
		json_t *c = json_loads(buf, 0, NULL);

		json_object_del(c, "topk_method");
		json_object_del(c, "scoring_func");
		json_object_del(c, "norm_topk_prob");
		json_object_del(c, "routed_scaling_factor");
		json_object_del(c, "n_group");
		json_object_del(c, "topk_group");
		json_object_set_new(c, "n_routed_experts", json_integer(256));
		json_object_set_new(c, "num_experts_per_tok", json_integer(8));
		json_object_set_new(c, "q_lora_rank", json_integer(1536));
		T_CHECK(ds_hparams_from_hf_json(&hp, c, "config.json", &err) == 0);
		json_decref(c);
	}
	T_CHECK(hp.expert_scoring == DS_SCORING_SIGMOID &&
		hp.topk_method == DS_TOPK_NOAUX_TC && hp.norm_topk_prob &&
		hp.routed_scaling_factor == 2.5 && hp.n_group == 8 &&
		hp.topk_group == 4 && hp.q_lora_rank == 1536);
}

static void test_llama_qwen(void)
{
	ds_hparams hp;
	ds_err err;

	T_CHECK(parse(llama31, &hp, &err) == 0);
	T_CHECK(hp.arch == DS_ARCH_LLAMA && hp.head_dim == 128 && hp.n_head_kv == 8);
	T_CHECK(hp.rope_scaling.type == DS_ROPE_SCALING_LLAMA3 &&
		hp.rope_scaling.high_freq_factor == 4.0 &&
		hp.rope_style == DS_ROPE_NEOX);
	T_CHECK(hp.n_eos == 3 && hp.eos_token_id == 128001 && hp.eos_ids[2] == 128009);
	T_CHECK(hp.n_expert == 0 && hp.expert_scoring == DS_SCORING_NONE &&
		!hp.qkv_bias && !hp.tie_embeddings);
	T_CHECK(parse("{\"model_type\":\"qwen2\",\"vocab_size\":151936,"
		      "\"hidden_size\":1536,\"num_hidden_layers\":28,"
		      "\"num_attention_heads\":12,\"num_key_value_heads\":2,"
		      "\"intermediate_size\":8960,\"max_position_embeddings\":131072,"
		      "\"rms_norm_eps\":1e-6,\"tie_word_embeddings\":true,"
		      "\"use_sliding_window\":false,\"rope_scaling\":null,"
		      "\"bos_token_id\":151643,\"eos_token_id\":151643}", &hp, &err) == 0);
	T_CHECK(hp.arch == DS_ARCH_QWEN2 && hp.qkv_bias && hp.tie_embeddings &&
		hp.head_dim == 128 && hp.rope_theta == 10000 &&
		hp.rope_scaling.type == DS_ROPE_SCALING_NONE);
}

static void test_refusals(void)
{
	refuse(v2_lite, "\"deepseek_v2\"", "\"mixtral\"",
	       "model_type \"mixtral\" is not supported");
	refuse(v2_lite, "\"model_type\":\"deepseek_v2\",", "", "model_type missing");
	refuse(v2_lite, "\"hidden_size\":2048,", "", "hidden_size missing");
	refuse(v2_lite, "\"hidden_size\":2048", "\"hidden_size\":\"2048\"",
	       "hidden_size is not an integer");
	refuse(v2_lite, "\"hidden_size\":2048", "\"hidden_size\":-4",
	       "hidden_size = -4 is outside");
	refuse(v2_lite, "\"kv_lora_rank\":512,", "", "kv_lora_rank missing");
	refuse(v2_lite, "\"rms_norm_eps\":1e-06", "\"rms_norm_eps\":0",
	       "rms_norm_eps 0");
	refuse(v2_lite, "\"num_experts_per_tok\":6", "\"num_experts_per_tok\":65",
	       "num_experts_per_tok 65");
	refuse(v2_lite, "\"n_group\":1", "\"n_group\":3", "n_group 3 does not divide");
	refuse(v2_lite, "\"topk_method\":\"greedy\"", "\"topk_method\":\"best\"",
	       "topk_method \"best\" is not supported");
	refuse(v2_lite, "\"hidden_act\":\"silu\"", "\"hidden_act\":\"gelu\"",
	       "hidden_act");
	refuse(v2_lite, "\"attention_bias\":false", "\"attention_bias\":true",
	       "attention_bias");
	refuse(v2_lite, "\"type\":\"yarn\"", "\"type\":\"dynamic\"",
	       "rope_scaling.type \"dynamic\" is not supported");
	refuse(v2_lite, "\"mscale\":0.707,", "\"attention_factor\":2,",
	       "rope_scaling.attention_factor is not supported");
	refuse(v2_lite, "\"original_max_position_embeddings\":4096,", "",
	       "rope_scaling.original_max_position_embeddings missing");
	refuse(v2_lite, "\"qk_rope_head_dim\":64", "\"qk_rope_head_dim\":63",
	       "qk_rope_head_dim 63 is not even");
	refuse(v2_lite, "\"eos_token_id\":100001", "\"eos_token_id\":200000",
	       "eos_token_id 200000 is not below vocab_size");
	refuse(llama31, "\"num_key_value_heads\":8", "\"num_key_value_heads\":5",
	       "num_key_value_heads 5");
	refuse(llama31, "\"rope_theta\":500000.0,", "\"mlp_bias\":true,", "mlp_bias");
	refuse(llama31, "\"low_freq_factor\":1.0", "\"low_freq_factor\":5.0",
	       "low_freq_factor < high_freq_factor");
}

static void test_meta_round_trip(void)
{
	const char *cfgs[2] = { v2_lite, llama31 };
	int i;

	for (i = 0; i < 2; i++) {
		ds_hparams a, b;
		ds_err err;
		json_t *j;
		char *t1, *t2;

		T_CHECK(parse(cfgs[i], &a, &err) == 0);
		j = ds_hparams_to_json(&a);
		b.arch = a.arch;
		T_CHECK(ds_hparams_from_json(&b, j, "model.meta", &err) == 0);
		t1 = json_dumps(j, JSON_SORT_KEYS);
		json_decref(j);
		j = ds_hparams_to_json(&b);
		t2 = json_dumps(j, JSON_SORT_KEYS);
		T_CHECK(strcmp(t1, t2) == 0);
		T_CHECK(b.n_ff_exp == a.n_ff_exp && b.rope_scaling.mscale ==
			a.rope_scaling.mscale && b.n_eos == a.n_eos &&
			b.eos_ids[b.n_eos - 1] == a.eos_ids[a.n_eos - 1]);
		json_decref(j);
		free(t1), free(t2);
	}
}

static const ds_tdesc *find(const ds_tdesc *d, size_t n, const char *name)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (strcmp(d[i].name, name) == 0)
			return &d[i];
	return NULL;
}

/* num_nextn_predict_layers: DeepSeek's (V2's architecture as V3's), 0 or
 * 1; the MTP table is layer N = n_layer and the mtp.* tensors, none of it
 * in the main one. */
static void test_mtp(void)
{
	char buf[4096];
	ds_hparams hp, b;
	ds_tdesc *d, *m;
	size_t n, nm, i;
	ds_err err;
	json_t *j;
	int in_main = 0;

	snprintf(buf, sizeof buf, "%s", v2_lite);
	T_CHECK(parse(buf, &hp, &err) == 0 && hp.n_mtp == 0);
	{
		char b2[4096], *p = strstr(buf, "\"hidden_act\"");

		snprintf(b2, sizeof b2, "%.*s\"num_nextn_predict_layers\":1,%s",
			 (int)(p - buf), buf, p);
		T_CHECK(parse(b2, &hp, &err) == 0 && hp.n_mtp == 1);
	}
	memcpy(strstr(buf, "deepseek_v2"), "deepseek_v3", 11);
	T_CHECK(parse(buf, &hp, &err) == 0 && hp.n_mtp == 0);
	refuse(buf, "\"hidden_act\"", "\"num_nextn_predict_layers\":2,\"hidden_act\"",
	       "num_nextn_predict_layers = 2 is outside [0, 1]");
	memcpy(strstr(buf, "\"hidden_act\""), "\"hidden_act\"", 12);
	{
		char b2[4096], *p = strstr(buf, "\"hidden_act\"");

		snprintf(b2, sizeof b2, "%.*s\"num_nextn_predict_layers\":1,%s",
			 (int)(p - buf), buf, p);
		T_CHECK(parse(b2, &hp, &err) == 0 && hp.n_mtp == 1);
	}
	T_CHECK(ds_arch_tensors(&hp, &d, &n, &err) == 0);
	T_CHECK(ds_arch_mtp_tensors(&hp, &m, &nm, &err) == 0);
	for (i = 0; i < n; i++)
		in_main |= strncmp(d[i].name, "blk.27.", 7) == 0 ||
			   strncmp(d[i].name, "mtp.", 4) == 0;
	T_CHECK(!in_main);
	/* a V2-Lite MoE layer's 14 (greedy: no exp_probs_b) and the six mtp.* */
	T_CHECKF(nm == 20 && strcmp(m[0].name, "mtp.embd") == 0 &&
		strcmp(m[0].hf, "model.layers.27.embed_tokens") == 0 &&
		m[0].kind == DS_TK_EMBED, "%zu", nm);
	T_CHECK(find(m, nm, "mtp.eh_proj") != NULL &&
		find(m, nm, "mtp.eh_proj")->shape[0] == 2048 &&
		find(m, nm, "mtp.eh_proj")->shape[1] == 4096 &&
		strcmp(find(m, nm, "mtp.eh_proj")->hf, "model.layers.27.eh_proj") == 0);
	T_CHECK(find(m, nm, "blk.27.ffn_up_exps") != NULL &&
		find(m, nm, "blk.27.ffn_up_exps")->shape[0] == 64);
	T_CHECK(find(m, nm, "mtp.head") != NULL &&
		strcmp(find(m, nm, "mtp.head")->hf, "model.layers.27.shared_head.head") == 0 &&
		find(m, nm, "mtp.head")->kind == DS_TK_OUTPUT);
	T_CHECK(strcmp(find(m, nm, "mtp.head_norm")->hf,
		       "model.layers.27.shared_head.norm.weight") == 0);
	free(m);
	hp.mtp_shares_embd = hp.mtp_shares_head = 1;
	T_CHECK(ds_arch_mtp_tensors(&hp, &m, &nm, &err) == 0 && nm == 18 &&
		find(m, nm, "mtp.embd") == NULL && find(m, nm, "mtp.head") == NULL);
	j = ds_hparams_to_json(&hp);
	b.arch = hp.arch;
	T_CHECK(ds_hparams_from_json(&b, j, "model.meta", &err) == 0 &&
		b.n_mtp == 1 && b.mtp_shares_embd && b.mtp_shares_head);
	json_decref(j);
	free(m);
	free(d);
	/* no MTP layer: an empty table */
	hp.n_mtp = 0;
	hp.mtp_shares_embd = hp.mtp_shares_head = 0;
	T_CHECK(ds_arch_mtp_tensors(&hp, &m, &nm, &err) == 0 && nm == 0);
	free(m);
}

static void test_tables(void)
{
	const ds_tdesc *t;
	ds_hparams hp;
	ds_tdesc *d;
	ds_err err;
	size_t n;
	char buf[96];

	T_CHECK(parse(v2_lite, &hp, &err) == 0);
	T_CHECK(ds_arch_tensors(&hp, &d, &n, &err) == 0);
	/* 1 + 26 MoE layers: embed, norm, output; per layer norms 2,
	 * q kv_a kv_a_norm kv_b o 5; dense 3 / moe router + 3 stacks + 3 shexp */
	T_CHECK(n == 3 + 27 * 7 + 3 + 26 * 7);
	t = find(d, n, "blk.0.attn_q");
	T_CHECK(t && t->shape[0] == 16 * 192 && t->shape[1] == 2048 &&
		strcmp(t->hf, "model.layers.0.self_attn.q_proj") == 0);
	t = find(d, n, "blk.3.attn_kv_a");
	T_CHECK(t && t->shape[0] == 576 &&
		strcmp(t->hf, "model.layers.3.self_attn.kv_a_proj_with_mqa") == 0);
	t = find(d, n, "blk.3.attn_kv_b");
	T_CHECK(t && t->shape[0] == 16 * 256 && t->shape[1] == 512);
	t = find(d, n, "blk.5.ffn_down_exps");
	T_CHECK(t && t->ndim == 3 && t->shape[0] == 64 && t->shape[1] == 2048 &&
		t->shape[2] == 1408 &&
		strcmp(ds_tdesc_hf_expert(t, 63, buf, sizeof buf),
		       "model.layers.5.mlp.experts.63.down_proj") == 0);
	t = find(d, n, "blk.5.ffn_gate_shexp");
	T_CHECK(t && t->shape[0] == 2816 &&
		strcmp(t->hf, "model.layers.5.mlp.shared_experts.gate_proj") == 0);
	t = find(d, n, "blk.5.ffn_gate_inp");
	T_CHECK(t && t->kind == DS_TK_ROUTER && strcmp(t->hf, "model.layers.5.mlp.gate") == 0);
	T_CHECK(find(d, n, "blk.5.exp_probs_b") == NULL);
	T_CHECK(find(d, n, "blk.0.ffn_gate")->shape[0] == 10944);
	T_CHECK(find(d, n, "output") && find(d, n, "token_embd")->kind == DS_TK_EMBED);
	free(d);
}

int main(void)
{
	t_seed();
	T_RUN(test_v2_lite);
	T_RUN(test_v3_defaults);
	T_RUN(test_llama_qwen);
	T_RUN(test_refusals);
	T_RUN(test_meta_round_trip);
	T_RUN(test_tables);
	T_RUN(test_mtp);
	return t_done();
}

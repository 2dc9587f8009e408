/* test_mbench.c - the benchmark's accounting (parameters total and active
 * per token, against arithmetic done by hand from the configs) and the
 * synthetic models (their shapes against the published configs, and that
 * one written model of each type loads and runs to finite logits). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/forward.h"
#include "harness.h"
#include "kernels/kernels.h"
#include "bench/mbench.h"
#include "bench/synth.h"

/* DeepSeek-V2-Lite by hand: V 102400, H 2048, 27 layers (the first
 * dense, I 10944), 16 MLA heads (d_nope 128, d_rope 64, d_v 128, r_kv
 * 512, direct q), 64 routed experts of 1408 (6 used) and 2 shared. */
static void test_v2_lite_params(void)
{
	const double V = 102400, H = 2048, L = 27, I = 10944, F = 1408, E = 64,
		     k = 6, S = 2, nh = 16, rkv = 512, dn = 128, dr = 64, dv = 128;
	double attn = H * nh * (dn + dr) + H * (rkv + dr) + rkv +
		      rkv * nh * (dn + dv) + nh * dv * H;
	double expert = 3 * H * F;
	double moe = E * expert + S * expert + E * H;   /* + the router */
	double total = 2 * V * H + H + L * (attn + 2 * H) + 3 * H * I + (L - 1) * moe;
	double active = total - V * H - (L - 1) * (E - k) * expert;
	uint64_t t, a;
	ds_hparams hp;
	ds_err err;

	T_CHECK(ds_synth_hparams("deepseek-v2-lite", 0, &hp, &err) == 0);
	T_CHECK(ds_model_params(&hp, &t, &a, &err) == 0);
	T_NEAR(t, total, 0);
	T_NEAR(a, active, 0);
	/* the published figures: 15.7B total, 2.4B activated */
	T_NEAR(t * 1e-9, 15.7, 0.05);
	T_NEAR(a * 1e-9, 2.4, 0.06);
}

/* TinyLlama-1.1B by hand: V 32000, H 2048, 22 layers, 32 heads of 64, 4
 * KV heads, I 5632, untied output. */
static void test_tinyllama_params(void)
{
	const double V = 32000, H = 2048, L = 22, kv = 4 * 64, I = 5632;
	double layer = H * H + 2 * H * kv + H * H + 3 * H * I + 2 * H;
	double total = 2 * V * H + L * layer + H;
	uint64_t t, a;
	ds_hparams hp;
	ds_err err;

	T_CHECK(ds_synth_hparams("tinyllama-1.1b", 0, &hp, &err) == 0);
	T_CHECK(ds_model_params(&hp, &t, &a, &err) == 0);
	T_NEAR(t, total, 0);
	T_NEAR(a, total - V * H, 0);
	T_NEAR(t * 1e-9, 1.1, 0.005);
}

/* Each published total (the size in the model's name, in billions). */
static void test_shape_totals(void)
{
	static const struct { const char *name; double b, tol; } want[] = {
		{ "deepseek-v2", 236, 0.5 }, { "deepseek-v3", 671, 0.5 },
		{ "r1-distill-qwen-1.5b", 1.78, 0.01 },
		{ "r1-distill-qwen-7b", 7.62, 0.01 },
		{ "r1-distill-llama-8b", 8.03, 0.01 },
		{ "deepseek-coder-1.3b", 1.35, 0.01 },
	};
	size_t i;

	for (i = 0; i < sizeof want / sizeof want[0]; i++) {
		uint64_t t = 0, a = 0;
		ds_hparams hp;
		ds_err err;

		T_CHECKF(ds_synth_hparams(want[i].name, 0, &hp, &err) == 0, "%s", err.msg);
		T_CHECK(ds_model_params(&hp, &t, &a, &err) == 0);
		T_CHECKF(fabs(t * 1e-9 - want[i].b) <= want[i].tol, "%s: %.3f B",
			 want[i].name, t * 1e-9);
	}
}

static void test_layers_and_refusals(void)
{
	ds_hparams hp;
	ds_err err;

	T_CHECK(ds_synth_hparams("deepseek-v3", 2, &hp, &err) == 0);
	T_CHECK(hp.n_layer == 2 && hp.first_k_dense == 1 && hp.n_embd == 7168);
	T_CHECK(ds_synth_hparams("deepseek-v2-lite", 1, &hp, &err) == 0);
	T_CHECK(hp.n_layer == 1 && ds_hparams_is_moe(&hp, 0));
	T_CHECK(ds_synth_hparams("gpt-5", 0, &hp, &err) == -1);
	T_CHECK(strstr(err.msg, "unknown shape") != NULL);
	T_CHECK(ds_synth_check_fit("/", (uint64_t)1 << 62, 0, &err) == -1);
	T_CHECK(strstr(err.msg, "do not fit") != NULL);
}

/* Write shape/type, load it, one prefill of 8 tokens: finite logits of a
 * sane size, and the file's size as ds_synth_bytes said. */
static void run_synth(const char *shape, ds_ttype t)
{
	char dir[] = "/tmp/test_mbench-XXXXXX", dst[64];
	ds_synth_opts so;
	ds_model m;
	ds_pool *pool = NULL;
	ds_fwd *f = NULL;
	ds_kvcache kv;
	ds_err err;
	uint64_t bytes = 0, want = 0;
	int32_t tok[8] = { 1, 5, 9, 200, 3, 77, 511, 0 }, pos[8], seq[8] = { 0 };
	ds_batch b = { 8, tok, pos, seq, NULL, NULL };
	uint32_t i;

	T_CHECK(mkdtemp(dir) != NULL);
	snprintf(dst, sizeof dst, "%s/m", dir);
	memset(&so, 0, sizeof so);
	T_CHECK(ds_synth_hparams(shape, 0, &so.hp, &err) == 0);
	so.type = t;
	so.dst = dst;
	T_CHECKF(ds_synth_write(&so, &bytes, &err) == 0, "%s", err.msg);
	T_CHECK(ds_synth_bytes(&so.hp, t, &want, &err) == 0 && bytes == want);
	T_CHECKF(ds_model_load(&m, dst, 0, &err) == 0, "%s", err.msg);
	T_CHECK(m.bin.size == want);
	for (i = 0; i < 8; i++)
		pos[i] = (int32_t)i;
	T_CHECK(ds_pool_init(&pool, &(ds_pool_opts){ 1, NULL, 0 }, &err) == 0);
	T_CHECKF(ds_fwd_init(&f, &m, pool, NULL, &err) == 0, "%s", err.msg);
	T_CHECK(ds_kvcache_init(&kv, &m.hp, 1, 16, DS_KV_F16, &err) == 0);
	T_CHECKF(ds_fwd_decode(f, &kv, &b, &err) == 0, "%s", err.msg);
	{
		const float *l = ds_fwd_logits(f, 0);
		double ss = 0;

		for (i = 0; i < m.hp.n_vocab; i++)
			ss += (double)l[i] * l[i];
		ss = sqrt(ss / m.hp.n_vocab);
		T_CHECKF(isfinite(ss) && ss > 0.01 && ss < 100, "%s: logits RMS %g",
			 shape, ss);
	}
	ds_kvcache_free(&kv);
	ds_fwd_free(f);
	ds_pool_free(pool);
	ds_model_free(&m);
	T_CHECK(ds_remove_tree(dir) == 0);
}

static void test_synth_models(void)
{
	ds_err err;

	T_CHECK(ds_kernels_init(&err) == 0);
	run_synth("test-llama", (ds_ttype){ DS_Q4, 32 });
	run_synth("test-llama", (ds_ttype){ DS_Q8, 32 });
	run_synth("test-llama", (ds_ttype){ DS_BF16, 0 });
	run_synth("test-deepseek2", (ds_ttype){ DS_Q4, 128 });
	run_synth("test-deepseek2", (ds_ttype){ DS_Q8, 64 });
}

int main(void)
{
	T_RUN(test_v2_lite_params);
	T_RUN(test_tinyllama_params);
	T_RUN(test_shape_totals);
	T_RUN(test_layers_and_refusals);
	T_RUN(test_synth_models);
	return t_done();
}

/*
 * deepseek2.c - the DeepSeek-V2 / V2-Lite / V2.5 / V3 / R1 forward pass:
 * multi-head latent attention (MLA) and, past the first first_k_dense
 * layers, mixture-of-experts FFNs (docs/deepseek.md 5-7).
 *
 *   h    = RMSNorm(x; attn_norm)
 *   q    = h Wq^T                                   (V2-Lite: rq = 0)
 *        = RMSNorm(h Wq_a^T; q_a_norm) Wq_b^T       (V2, V3)
 *          q[t][h] = [q_nope (dn) | q_pe (dr)]
 *   a    = h Wkv_a^T = [c (rkv) | k_pe (dr)]
 *   c_n  = RMSNorm(c; kv_a_norm);  q_pe, k_pe = RoPE(q_pe), RoPE(k_pe)
 *          (interleaved pairs, YaRN)
 *   cache row of the position: [c_n | k_pe]          (rkv + dr values)
 *   o    = MLA(q, cache)                             (mla.c: absorbed)
 *   x    = x + o Wo^T
 *   x    = x + FFN(RMSNorm(x; ffn_norm))             dense or MoE
 */
#include "arch.h"


/* q (T, nh*(dn+dr)) and the latent rows k (T, rkv+dr), before RoPE. */
static void mla_project(ds_fwd *f, const ds_layer *L, size_t T)
{
	const ds_hparams *hp = f->hp;
	ds_in in = {
		.x = f->x, .t = T, .norm = L->attn_norm,
		.eps = (float)hp->norm_eps
	};

	if (hp->q_lora_rank) {
		ds_mm_out a[2] = {
			{ .w = &L->wq_a, .y = f->qa }, { .w = &L->wkv_a, .y = f->k },
		};
		ds_in qin = {
			.x = f->qa, .t = T, .norm = L->q_a_norm,
			.eps = DS_LORA_EPS
		};
		ds_mm_out b = { .w = &L->wq_b, .y = f->q };

		ds_matmul_many(&f->ctx, &in, a, 2);
		ds_matmul_many(&f->ctx, &qin, &b, 1);
	} else {
		ds_mm_out a[2] = {
			{ .w = &L->wq, .y = f->q }, { .w = &L->wkv_a, .y = f->k },
		};

		ds_matmul_many(&f->ctx, &in, a, 2);
	}
}

void ds_deepseek2_layers(ds_fwd *f, ds_kvcache *kv, size_t T)
{
	uint32_t l;

	for (l = 0; l < f->n_layer; l++) {
		const ds_layer *L = &f->layers[l];

		mla_project(f, L, T);
		ds_mla_attend(f, kv, L, l, T);
		ds_blk_out(f, &L->wo, f->o, T);
		ds_blk_ffn(f, L, T);
	}
}

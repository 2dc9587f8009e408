/*
 * llama.c - the Llama forward pass (DeepSeek LLM and Coder,
 * R1-Distill-Llama): pre-norm blocks of grouped-query attention with
 * half-split ("neox") RoPE, optionally llama3-scaled, and a SwiGLU MLP.
 *
 *   h = RMSNorm(x; attn_norm)
 *   q = h Wq^T, k = h Wk^T, v = h Wv^T          (T, nh*hd), (T, nkv*hd) x2
 *   q, k = RoPE(q, pos), RoPE(k, pos)
 *   o = softmax(q K^T / sqrt(hd)) V             causal, over the cache
 *   x = x + o Wo^T
 *   x = x + down(silu(gate(h')) * up(h')),  h' = RMSNorm(x; ffn_norm)
 */
#include "arch.h"

void ds_llama_layers(ds_fwd *f, ds_kvcache *kv, size_t T)
{
	const ds_hparams *hp = f->hp;
	uint32_t i;

	for (i = 0; i < f->n_layer; i++) {
		const ds_layer *L = &f->layers[i];
		ds_in in = {
			.x = f->x, .t = T, .norm = L->attn_norm,
			.eps = (float)hp->norm_eps
		};
		ds_mm_out qkv[3] = {
			{ .w = &L->wq, .y = f->q }, { .w = &L->wk, .y = f->k },
			{ .w = &L->wv, .y = f->v },
		};

		ds_matmul_many(&f->ctx, &in, qkv, 3);
		ds_blk_gqa(f, kv, i, T);      /* RoPE, cache rows, attention */
		ds_blk_out(f, &L->wo, f->o, T);
		ds_blk_ffn(f, L, T);
	}
}

/*
 * qwen2.c - the Qwen2 forward pass (R1-Distill-Qwen): Llama's block with
 * biases on the q, k and v projections (none on o_proj), and for the
 * small sizes the output projection tied to the embedding table (bound
 * in forward.c).
 *
 *   h = RMSNorm(x; attn_norm)
 *   q = h Wq^T + bq, k = h Wk^T + bk, v = h Wv^T + bv
 *   q, k = RoPE(q, pos), RoPE(k, pos)            half-split pairs
 *   x = x + softmax(q K^T / sqrt(hd)) V Wo^T
 *   x = x + down(silu(gate(h')) * up(h')),  h' = RMSNorm(x; ffn_norm)
 */
#include "arch.h"

void ds_qwen2_layers(ds_fwd *f, ds_kvcache *kv, size_t T)
{
	const ds_hparams *hp = f->hp;
	size_t nh = hp->n_head, nkv = hp->n_head_kv, hd = hp->head_dim;
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
		ds_add_bias(&f->ctx, f->q, 0, T, L->bq, nh * hd);
		ds_add_bias(&f->ctx, f->k, 0, T, L->bk, nkv * hd);
		ds_add_bias(&f->ctx, f->v, 0, T, L->bv, nkv * hd);
		ds_blk_gqa(f, kv, i, T);      /* RoPE, cache rows, attention */
		ds_blk_out(f, &L->wo, f->o, T);
		ds_blk_ffn(f, L, T);
	}
}

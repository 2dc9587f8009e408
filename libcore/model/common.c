/*
 * common.c - the blocks every architecture uses: the feed-forward layer
 * (dense SwiGLU, or DeepSeek's routed + shared experts), grouped-query
 * attention over the cache, and the attention output projection.
 */
#include "arch.h"

#include <string.h>

/* x += down(silu(gate(h)) * up(h)),  h = RMSNorm(x; ffn_norm) */
static void ffn_dense(ds_fwd *f, const ds_layer *L, size_t T)
{
	ds_in in = {
		.x = f->x, .t = T, .norm = L->ffn_norm,
		.eps = (float)f->hp->norm_eps
	};

	ds_ffn(&f->ctx, &L->ffn_gate, &L->ffn_up, &L->ffn_down, &in, f->h, 0, f->x);
}

/* x += sum_(e in topk) w_e FFN_e(h) + FFN_shared(h)
 * (docs/deepseek.md section 7; the router in fp32) */
static void ffn_moe(ds_fwd *f, const ds_layer *L, size_t T)
{
	const ds_hparams *hp = f->hp;
	size_t H = hp->n_embd;
	ds_router r = f->router;
	ds_in in = { .x = f->h, .t = T };

	ds_rmsnorm(&f->ctx, f->x, 0, L->ffn_norm, (float)hp->norm_eps, T, H,
		   f->h, 0);
	ds_matmul(&f->ctx, &L->gate_inp, f->h, T, f->rl);
	r.bias = L->exp_bias;
	ds_route(&f->ctx, &r, f->rl, T, f->eids, f->ew);
	if (L->shexp)
		ds_ffn(&f->ctx, &L->gate_sh, &L->up_sh, &L->down_sh, &in, f->y, 0, NULL);
	else
		memset(f->y, 0, T * H * sizeof(float));
	if (f->ep != NULL)
		ds_ep_moe(f, L, T);
	else
		ds_moe(&f->ctx, &L->gate_exps, &L->up_exps, &L->down_exps, f->h, 0,
		       T, f->eids, f->ew, hp->n_expert_used, f->y, 0);
	ds_add(&f->ctx, f->x, f->y, T * H, f->x);
}

void ds_blk_ffn(ds_fwd *f, const ds_layer *L, size_t T)
{
	if (L->moe)
		ffn_moe(f, L, T);
	else
		ffn_dense(f, L, T);
}

void ds_blk_out(ds_fwd *f, const ds_mat *wo, const float *o, size_t T)
{
	ds_in in = { .x = o, .ld = wo->k, .t = T };
	ds_mm_out out = { .w = wo, .y = f->h, .ldy = wo->n, .res = f->x };

	/* x += o W_o^T, each part added by the thread that computed it */
	ds_matmul_many(&f->ctx, &in, &out, 1);
}

ds_attn ds_run_attn(const ds_fwd *f, ds_kvcache *kv, uint32_t layer, const ds_run *r,
		    size_t n_kv_head, const float *q, size_t q_hs, float *o, size_t o_hs)
{
	size_t nh = f->hp->n_head;
	ds_attn a = { .ml = NULL };

	ds_kvcache_layer(kv, r->seq, layer, &a.k, &a.v);
	a.n_head = nh;
	a.n_kv_head = n_kv_head;
	a.q = q + r->t0 * nh * q_hs;
	a.q_ld = nh * q_hs;
	a.q_hs = q_hs;
	a.o = o + r->t0 * nh * o_hs;
	a.o_ld = nh * o_hs;
	a.o_hs = o_hs;
	a.scale = f->attn_scale;
	a.pos0 = r->pos0;
	return a;
}

/* One run's attention (its sequence's query heads over its cache).
 * in: the run's rows' RoPE and cache writes in the same job. */
static void gqa_run(ds_fwd *f, ds_kvcache *kv, uint32_t layer, const ds_run *r,
		    const ds_attn_rows *in)
{
	size_t hd = f->hp->head_dim;
	ds_attn a = ds_run_attn(f, kv, layer, r, f->hp->n_head_kv, f->q, hd, f->o, hd);

	if (in)
		ds_attention_rows(&f->ctx, &a, in, r->n);
	else
		ds_attention(&f->ctx, &a, r->n);
}

/* RoPE on q and k, then for each run: K and V rows of its tokens into its
 * slot's cache; then, once every run's rows are in, each run's queries
 * attend causally:
 *   o[t][h] = sum_(p <= pos_t) softmax_p(q[t][h] . K[p][h/g] / sqrt(hd)) V[p][h/g]
 * One run (decode of one sequence, a prompt): all of it one pool job. */
void ds_blk_gqa(ds_fwd *f, ds_kvcache *kv, uint32_t layer, size_t T)
{
	const ds_hparams *hp = f->hp;
	size_t hd = hp->head_dim, nh = hp->n_head, nkv = hp->n_head_kv, i;
	ds_kv kc, vc;

	if (f->n_runs == 1) {
		ds_attn_rows in = {
			.rope = &f->rope, .q = f->q, .k = f->k, .v = f->v,
			.ld = nkv * hd, .hs = hd, .cs = f->rope1
		};

		gqa_run(f, kv, layer, &f->runs[0], &in);
		return;
	}
	ds_rope_apply(&f->ctx, &f->rope, f->q, 0, T, nh, hd, f->pos, 0);
	ds_rope_apply(&f->ctx, &f->rope, f->k, 0, T, nkv, hd, f->pos, 0);
	for (i = 0; i < f->n_runs; i++) {
		const ds_run *r = &f->runs[i];

		ds_kvcache_layer(kv, r->seq, layer, &kc, &vc);
		ds_kv_write(&f->ctx, &kc, f->k + r->t0 * nkv * hd, 0, hd, nkv,
			    r->n, r->pos0);
		ds_kv_write(&f->ctx, &vc, f->v + r->t0 * nkv * hd, 0, hd, nkv,
			    r->n, r->pos0);
	}
	for (i = 0; i < f->n_runs; i++)
		gqa_run(f, kv, layer, &f->runs[i], NULL);
}

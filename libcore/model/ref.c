/*
 * ref.c - the reference forward pass (ref.h), llama2.c-style: llama, qwen2
 * and DeepSeek-V2/V3 as the equations read, over the whole sequence, one
 * layer after another.  Clarity over speed: one thread, f32 activations
 * (sums in double), no cache, each weight row dequantized when a product
 * needs it by the scalar kernels' dequant_row (the definition of every
 * stored type).  The math is scripts/ref/forward.py's, the PyTorch
 * reference of the golden logits.  The fast passes (forward.h) differ on
 * purpose: they round each product's input to int8 blocks or bf16
 * (kernels.h), keep K and V (MLA: the latent) in a cache, attend MLA in
 * the absorbed form and group MoE tokens by expert.
 *
 * Shapes: T tokens, H = n_embd, V = n_vocab, nh = n_head, nkv = n_head_kv,
 * hd = head_dim; MLA: dn, dr, dv = qk_nope_head_dim, qk_rope_head_dim,
 * v_head_dim, rkv = kv_lora_rank, rq = q_lora_rank; MoE: E experts, k per
 * token, F = n_ff_exp.  W (n, k) maps k inputs to n: y = x W^T (nn.Linear).
 */
#include "ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "ops/ops.h"          /* ds_mat_init, ds_mat_expert */

/* The q_a and kv_a norms: eps 1e-6 whatever rms_norm_eps says, as the
 * checkpoints' own modeling code builds them. */
#define LORA_EPS 1e-6

/* ---- the weights ------------------------------------------------------------ */

typedef struct ref_layer {
	const float *attn_norm;       /* (H) */
	ds_mat wq, wk, wv;            /* (nh*hd, H), (nkv*hd, H), (nkv*hd, H);
					 MLA without q LoRA: wq (nh*(dn+dr), H) */
	const float *bq, *bk, *bv;    /* qwen2: (nh*hd), (nkv*hd), (nkv*hd) */
	ds_mat wq_a;                  /* (rq, H) */
	const float *q_a_norm;        /* (rq) */
	ds_mat wq_b;                  /* (nh*(dn+dr), rq) */
	ds_mat wkv_a;                 /* (rkv+dr, H) */
	const float *kv_a_norm;       /* (rkv) */
	ds_mat wkv_b;                 /* (nh*(dn+dv), rkv): per head dn k rows, dv v rows */
	ds_mat wo;                    /* (H, nh*hd); MLA: (H, nh*dv) */
	const float *ffn_norm;        /* (H) */
	ds_mat gate, up, down;        /* (n_ff, H), (n_ff, H), (H, n_ff) */
	int moe;
	ds_mat router;                /* (E, H), f32 */
	const float *router_bias;     /* noaux_tc: (E) e_score_correction_bias */
	ds_mat gate_exps, up_exps;    /* (E, F, H) */
	ds_mat down_exps;             /* (E, H, F) */
	int shared;
	ds_mat gate_sh, up_sh;        /* (F*n_shared, H) */
	ds_mat down_sh;               /* (H, F*n_shared) */
} ref_layer;

typedef struct ref_model {
	const ds_hparams *hp;
	const ds_kernels *scalar;     /* its dequant_row only */
	ds_mat tok_embd;              /* (V, H) */
	const float *out_norm;        /* (H) */
	ds_mat output;                /* (V, H); tied (qwen2): tok_embd */
	ref_layer *layers;            /* [n_layer] */
	uint32_t rope_dim;            /* rotated values of a head: hd; MLA: dr */
	double inv_freq[DS_ROPE_MAXDIM / 2];
	double rope_factor;           /* YaRN's factor on cos and sin */
	double attn_scale;            /* the softmax scale */
	float *row;                   /* (widest k) one dequantized weight row */
} ref_model;

/* The activations, T rows each. */
typedef struct ref_state {
	size_t T;
	float *x, *xb, *xb2;          /* (T, H) residual, normalized, block output */
	float *q, *k, *v;             /* (T, nh*hd), (T, nkv*hd) x2;
					 MLA: (T, nh*(dn+dr)) x2, (T, nh*dv) */
	float *o;                     /* (T, nh*hd); MLA: (T, nh*dv) */
	float *att;                   /* (T) one query's scores */
	float *qa, *kva, *c, *kvb;    /* MLA: (T, rq), (T, rkv+dr), (T, rkv), (T, nh*(dn+dv)) */
	float *hb, *hb2;              /* (T, widest FFN) */
	float *ey;                    /* (H) one expert's output */
	float *rs;                    /* (3E) router scratch */
	float *w;                     /* (k) the chosen experts' weights */
	int32_t *ids;                 /* (k) and their ids */
	float *mem;                   /* all the floats */
} ref_state;

/* ---- binding the model's tensors ---------------------------------------------- */

/* A tensor's name: "blk.l.what", or "what" for l < 0. */
static char *tname(char *n, int l, const char *what)
{
	if (l < 0)
		snprintf(n, 64, "%s", what);
	else
		snprintf(n, 64, "blk.%d.%s", l, what);
	return n;
}

/* The matrix and its act-order input permutation NAME.perm, if any. */
static int mat(const ds_model *m, int l, const char *what, ds_mat *w, ds_err *err)
{
	const ds_tensor *t, *p;
	char n[96];

	if ((t = ds_model_tensor(m, tname(n, l, what))) == NULL)
		return ds_errf(err, "%s: tensor %s missing", m->dir, n);
	p = ds_model_tensor(m, strcat(n, ".perm"));
	return ds_mat_init(w, t->type, t->data, t->size, t->ndim, t->shape,
			   p ? (const int32_t *)p->data : NULL, err);
}

/* The f32 vector, or NULL when the model has none of that name. */
static const float *vec(const ds_model *m, int l, const char *what)
{
	char n[64];
	const ds_tensor *t = ds_model_tensor(m, tname(n, l, what));

	return t != NULL && t->type.dt == DS_F32 ? (const float *)t->data : NULL;
}

/* The loader has checked that the model has every tensor its hparams
 * imply, shapes included; these are a layer's. */
static int bind_layer(const ds_model *m, ref_layer *L, int l, ds_err *err)
{
	const ds_hparams *hp = &m->hp;
	int mla = hp->arch == DS_ARCH_DEEPSEEK2, bad;

	L->attn_norm = vec(m, l, "attn_norm"), L->ffn_norm = vec(m, l, "ffn_norm");
	L->bq = vec(m, l, "attn_q.bias"), L->bk = vec(m, l, "attn_k.bias");
	L->bv = vec(m, l, "attn_v.bias");
	L->q_a_norm = vec(m, l, "attn_q_a_norm"), L->kv_a_norm = vec(m, l, "attn_kv_a_norm");
	L->router_bias = vec(m, l, "exp_probs_b");
	L->moe = ds_hparams_is_moe(hp, (uint32_t)l);
	L->shared = L->moe && hp->n_expert_shared > 0;
	if (mla && hp->q_lora_rank)
		bad = mat(m, l, "attn_q_a", &L->wq_a, err) || mat(m, l, "attn_q_b", &L->wq_b, err);
	else
		bad = mat(m, l, "attn_q", &L->wq, err);
	if (mla)
		bad = bad || mat(m, l, "attn_kv_a", &L->wkv_a, err) ||
		      mat(m, l, "attn_kv_b", &L->wkv_b, err);
	else
		bad = bad || mat(m, l, "attn_k", &L->wk, err) || mat(m, l, "attn_v", &L->wv, err);
	bad = bad || mat(m, l, "attn_output", &L->wo, err);
	if (!L->moe)
		return bad || mat(m, l, "ffn_gate", &L->gate, err) ||
		       mat(m, l, "ffn_up", &L->up, err) || mat(m, l, "ffn_down", &L->down, err) ? -1 : 0;
	bad = bad || mat(m, l, "ffn_gate_inp", &L->router, err) ||
	      mat(m, l, "ffn_gate_exps", &L->gate_exps, err) ||
	      mat(m, l, "ffn_up_exps", &L->up_exps, err) ||
	      mat(m, l, "ffn_down_exps", &L->down_exps, err);
	return bad || (L->shared && (mat(m, l, "ffn_gate_shexp", &L->gate_sh, err) ||
				     mat(m, l, "ffn_up_shexp", &L->up_sh, err) ||
				     mat(m, l, "ffn_down_shexp", &L->down_sh, err))) ? -1 : 0;
}

/* ---- RoPE frequencies and the softmax scale ------------------------------------ */

/* YaRN's magnitude correction for a context stretched s times. */
static double yarn_mscale(double s, double m)
{
	return s <= 1 ? 1 : 0.1 * m * log(s) + 1;
}

/* YaRN's blend of pair i: 0 keeps its frequency, 1 divides it by the
 * factor.  The pairs that turn beta_fast times or more over the original
 * context L0 keep theirs, those that turn beta_slow times or fewer are
 * slowed, a linear ramp over the pair index between. */
static double yarn_ramp(const ds_hparams *hp, double d, uint32_t i)
{
	double L0 = hp->rope_scaling.original_ctx, b = log(hp->rope_theta);
	double lo = floor(d * log(L0 / (hp->rope_scaling.beta_fast * 2 * M_PI)) / (2 * b));
	double hi = ceil(d * log(L0 / (hp->rope_scaling.beta_slow * 2 * M_PI)) / (2 * b));

	lo = fmax(lo, 0);
	hi = fmin(hi, d - 1);
	if (lo == hi)
		hi += 0.001;
	return fmin(fmax((i - lo) / (hi - lo), 0), 1);
}

/* Pair i of a head turns by pos * theta^(-2i/dim), scaled:
 *   linear  every frequency / factor;
 *   llama3  wavelengths above L0/low_freq_factor / factor, below
 *           L0/high_freq_factor kept, smoothly blended between;
 *   yarn    blended by yarn_ramp, and cos and sin multiplied by
 *           mscale(factor, mscale) / mscale(factor, mscale_all_dim).
 * The softmax scale is 1/sqrt(d_qk); DeepSeek's YaRN multiplies it by
 * mscale(factor, mscale_all_dim)^2 as well (the GQA models' YaRN touches
 * only cos and sin). */
static int rope_init(ref_model *r, ds_err *err)
{
	const ds_hparams *hp = r->hp;
	double s = hp->rope_scaling.factor, L0 = hp->rope_scaling.original_ctx;
	double lf = hp->rope_scaling.low_freq_factor, hf = hp->rope_scaling.high_freq_factor;
	int is_mla = hp->arch == DS_ARCH_DEEPSEEK2, yarn = hp->rope_scaling.type == DS_ROPE_SCALING_YARN;
	double d, m;
	uint32_t i;

	r->rope_dim = is_mla ? hp->qk_rope_head_dim : hp->head_dim;
	if (r->rope_dim == 0 || r->rope_dim % 2 || r->rope_dim > DS_ROPE_MAXDIM)
		return ds_errf(err, "reference: rotated dimension %u (even, at most %d)",
			       r->rope_dim, DS_ROPE_MAXDIM);
	d = r->rope_dim;
	for (i = 0; i < r->rope_dim / 2; i++) {
		double f = pow(hp->rope_theta, -2.0 * i / d), wl = 2 * M_PI / f, sm, ramp;

		switch (hp->rope_scaling.type) {
		case DS_ROPE_SCALING_NONE:
			break;
		case DS_ROPE_SCALING_LINEAR:
			f /= s;
			break;
		case DS_ROPE_SCALING_LLAMA3:
			sm = (L0 / wl - lf) / (hf - lf);
			f = wl > L0 / lf ? f / s : wl < L0 / hf ? f : (1 - sm) * f / s + sm * f;
			break;
		case DS_ROPE_SCALING_YARN:
			ramp = yarn_ramp(hp, d, i);
			f = f / s * ramp + f * (1 - ramp);
			break;
		}
		r->inv_freq[i] = f;
	}
	m = yarn ? yarn_mscale(s, hp->rope_scaling.mscale_all_dim) : 1;
	r->rope_factor = yarn ? yarn_mscale(s, hp->rope_scaling.mscale) / m : 1;
	r->attn_scale = is_mla ? m * m / sqrt(hp->qk_nope_head_dim + hp->qk_rope_head_dim)
			    : 1 / sqrt(hp->head_dim);
	return 0;
}

/* Rotate the rope_dim values at x (one head of one token) to position p:
 * pair i, (x[i], x[i + dim/2]) (neox: llama, qwen2) or (x[2i], x[2i+1])
 * (interleaved: DeepSeek), by the angle p inv_freq[i]. */
static void rope(const ref_model *r, float *x, size_t p)
{
	size_t i, half = r->rope_dim / 2;
	int neox = r->hp->rope_style == DS_ROPE_NEOX;

	for (i = 0; i < half; i++) {
		size_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
		double a = (double)p * r->inv_freq[i];
		float c = (float)(cos(a) * r->rope_factor), s = (float)(sin(a) * r->rope_factor);
		float x0 = x[i0], x1 = x[i1];

		x[i0] = x0 * c - x1 * s;
		x[i1] = x0 * s + x1 * c;
	}
}

/* ---- building blocks ------------------------------------------------------------ */

/* y (n) = x / sqrt(mean(x^2) + eps) * w   (y may be x) */
static void rmsnorm(float *y, const float *x, const float *w, size_t n, double eps)
{
	double ss = 0;
	size_t i;

	for (i = 0; i < n; i++)
		ss += (double)x[i] * x[i];
	ss = 1 / sqrt(ss / n + eps);
	for (i = 0; i < n; i++)
		y[i] = (float)(x[i] * ss * w[i]);
}

/* y (T, n) = x (T, k) W^T, W (n, k) of any stored type.  Each row of W is
 * dequantized once, in its stored column order: with an act-order
 * permutation (GPTQ), stored column c multiplies input perm[c]. */
static void matmul(const ref_model *r, float *y, const float *x, const ds_mat *w, size_t T)
{
	size_t i, t, c, k = w->k;

	for (i = 0; i < w->n; i++) {
		r->scalar->dequant_row(w, i, r->row);
		for (t = 0; t < T; t++) {
			double acc = 0;

			for (c = 0; c < k; c++)
				acc += (double)r->row[c] * x[t * k + (w->perm ? (size_t)w->perm[c] : c)];
			y[t * w->n + i] = (float)acc;
		}
	}
}

/* x (n), in place: e^(x_i - max) / sum_j e^(x_j - max) */
static void softmax(float *x, size_t n)
{
	double max = x[0], sum = 0;
	size_t i;

	for (i = 1; i < n; i++)
		max = fmax(max, x[i]);
	for (i = 0; i < n; i++)
		sum += x[i] = (float)exp(x[i] - max);
	for (i = 0; i < n; i++)
		x[i] = (float)(x[i] / sum);
}

static float silu(float x)
{
	return x / (1 + expf(-x));
}

/* ---- attention ------------------------------------------------------------------- */

/* Causal attention, nh query heads over nkv key/value heads (query heads
 * g h .. g h + g - 1 share KV head h, g = nh / nkv):
 *   o[t][h] = sum_(u <= t) softmax_u(scale q[t][h] . k[u][h/g]) v[u][h/g]
 * q (T, nh*dk), k (T, nkv*dk), v (T, nkv*dv) -> o (T, nh*dv). */
static void attention(const ref_model *r, ref_state *s, size_t nh, size_t nkv,
		      size_t dk, size_t dv)
{
	size_t t, u, h, i, g = nh / nkv;

	for (t = 0; t < s->T; t++)
		for (h = 0; h < nh; h++) {
			const float *q = s->q + (t * nh + h) * dk;
			size_t kh = h / g;

			for (u = 0; u <= t; u++) {
				double dot = 0;

				for (i = 0; i < dk; i++)
					dot += (double)q[i] * s->k[(u * nkv + kh) * dk + i];
				s->att[u] = (float)(dot * r->attn_scale);
			}
			softmax(s->att, t + 1);
			for (i = 0; i < dv; i++) {
				double acc = 0;

				for (u = 0; u <= t; u++)
					acc += (double)s->att[u] * s->v[(u * nkv + kh) * dv + i];
				s->o[(t * nh + h) * dv + i] = (float)acc;
			}
		}
}

/* Llama / Qwen2 grouped-query attention of xb into o:
 *   q = xb Wq^T (+ bq), k = xb Wk^T (+ bk), v = xb Wv^T (+ bv)   biases: qwen2
 *   q, k = RoPE(q), RoPE(k) at each token's position (its row)
 *   o = attention(q, k, v) at 1/sqrt(hd) */
static void gqa(const ref_model *r, const ref_layer *L, ref_state *s)
{
	size_t nh = r->hp->n_head, nkv = r->hp->n_head_kv, hd = r->hp->head_dim, t, h, i;

	matmul(r, s->q, s->xb, &L->wq, s->T);
	matmul(r, s->k, s->xb, &L->wk, s->T);
	matmul(r, s->v, s->xb, &L->wv, s->T);
	for (t = 0; t < s->T; t++) {
		for (i = 0; L->bq && i < nh * hd; i++)
			s->q[t * nh * hd + i] += L->bq[i];
		for (i = 0; L->bk && i < nkv * hd; i++) {
			s->k[t * nkv * hd + i] += L->bk[i];
			s->v[t * nkv * hd + i] += L->bv[i];
		}
		for (h = 0; h < nh; h++)
			rope(r, s->q + (t * nh + h) * hd, t);
		for (h = 0; h < nkv; h++)
			rope(r, s->k + (t * nkv + h) * hd, t);
	}
	attention(r, s, nh, nkv, hd, hd);
}

/* DeepSeek's multi-head latent attention of xb into o, in the plain form
 * (the latent expanded into every head's key and value):
 *   q          = xb Wq^T, or RMSNorm(xb Wq_a^T; q_a_norm) Wq_b^T
 *                head h: [q_nope (dn) | q_pe (dr)]
 *   [c | k_pe] = xb Wkv_a^T                  c: the latent (rkv)
 *   c          = RMSNorm(c; kv_a_norm)
 *   head h:      [k_nope (dn) | v (dv)] = c Wkv_b^T
 *   q_pe, k_pe = RoPE(q_pe), RoPE(k_pe)      k_pe: one head, shared by all
 *   k[t][h]    = [k_nope[t][h] | k_pe[t]],   q[t][h] = [q_nope | q_pe]
 *   o          = attention(q, k, v) at mscale^2 / sqrt(dn + dr) */
static void mla(const ref_model *r, const ref_layer *L, ref_state *s)
{
	const ds_hparams *hp = r->hp;
	size_t nh = hp->n_head, dn = hp->qk_nope_head_dim, dr = hp->qk_rope_head_dim;
	size_t dv = hp->v_head_dim, rkv = hp->kv_lora_rank, rq = hp->q_lora_rank;
	size_t dk = dn + dr, t, h;

	if (rq) {
		matmul(r, s->qa, s->xb, &L->wq_a, s->T);
		for (t = 0; t < s->T; t++)
			rmsnorm(s->qa + t * rq, s->qa + t * rq, L->q_a_norm, rq, LORA_EPS);
		matmul(r, s->q, s->qa, &L->wq_b, s->T);
	} else {
		matmul(r, s->q, s->xb, &L->wq, s->T);
	}
	matmul(r, s->kva, s->xb, &L->wkv_a, s->T);
	for (t = 0; t < s->T; t++) {
		rmsnorm(s->c + t * rkv, s->kva + t * (rkv + dr), L->kv_a_norm, rkv, LORA_EPS);
		rope(r, s->kva + t * (rkv + dr) + rkv, t);
	}
	matmul(r, s->kvb, s->c, &L->wkv_b, s->T);
	for (t = 0; t < s->T; t++)
		for (h = 0; h < nh; h++) {
			const float *kv = s->kvb + (t * nh + h) * (dn + dv);
			float *k = s->k + (t * nh + h) * dk;

			rope(r, s->q + (t * nh + h) * dk + dn, t);
			memcpy(k, kv, dn * sizeof *k);
			memcpy(k + dn, s->kva + t * (rkv + dr) + rkv, dr * sizeof *k);
			memcpy(s->v + (t * nh + h) * dv, kv + dn, dv * sizeof *k);
		}
	attention(r, s, nh, nh, dk, dv);
}

/* ---- feed-forward ------------------------------------------------------------------ */

/* SwiGLU: y (T, H) = (silu(x Wgate^T) * (x Wup^T)) Wdown^T */
static void ffn(const ref_model *r, ref_state *s, float *y, const float *x,
		const ds_mat *gate, const ds_mat *up, const ds_mat *down, size_t T)
{
	size_t i;

	matmul(r, s->hb, x, gate, T);
	matmul(r, s->hb2, x, up, T);
	for (i = 0; i < T * gate->n; i++)
		s->hb[i] = silu(s->hb[i]) * s->hb2[i];
	matmul(r, y, s->hb, down, T);
}

/* The first largest of x (n), ties to the lower index. */
static size_t argmax(const float *x, size_t n)
{
	size_t i, best = 0;

	for (i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return best;
}

/* The DeepSeek router of one token x (H) -> s->ids[k], s->w[k]:
 *   p = softmax(x Wr^T) (V2) or sigmoid(x Wr^T) (V3)             (E)
 *   b = p, + e_score_correction_bias for noaux_tc (choice only)
 *   groups (group_limited_greedy, noaux_tc): n_group groups of consecutive
 *     experts, ranked by their best b (V2) or the sum of their two best
 *     (V3); experts outside the topk_group best groups are not chosen
 *   ids = the k largest b (ties to the lower id);  w = p[ids]
 *   norm_topk_prob (and k > 1, as the reference code): w / sum(w); then
 *   times routed_scaling_factor: V2 only when not normalized, V3 always */
static void route(const ref_model *r, const ref_layer *L, ref_state *s, const float *x)
{
	const ds_hparams *hp = r->hp;
	size_t E = hp->n_expert, ng = hp->n_group, per = E / ng, e, g, j;
	float *p = s->rs, *b = p + E, *gs = b + E, *w = s->w, sum = 0;
	int32_t *ids = s->ids;
	int v3 = hp->expert_scoring == DS_SCORING_SIGMOID;
	int norm = hp->norm_topk_prob && hp->n_expert_used > 1;

	matmul(r, p, x, &L->router, 1);
	if (v3)
		for (e = 0; e < E; e++)
			p[e] = 1 / (1 + expf(-p[e]));
	else
		softmax(p, E);
	for (e = 0; e < E; e++)
		b[e] = p[e] + (hp->topk_method == DS_TOPK_NOAUX_TC ? L->router_bias[e] : 0);
	if (hp->topk_method != DS_TOPK_GREEDY && ng > 1) {
		for (g = 0; g < ng; g++) {
			float m1 = -INFINITY, m2 = -INFINITY;   /* best, second */

			for (e = g * per; e < (g + 1) * per; e++) {
				if (b[e] > m1) {
					m2 = m1;
					m1 = b[e];
				} else if (b[e] > m2) {
					m2 = b[e];
				}
			}
			gs[g] = hp->topk_method == DS_TOPK_NOAUX_TC ? m1 + m2 : m1;
		}
		for (e = 0; e < E; e++) {      /* out unless topk_group groups beat its own */
			size_t beat = 0;

			for (g = 0; g < ng; g++)
				beat += gs[g] > gs[e / per] || (gs[g] == gs[e / per] && g < e / per);
			if (beat >= hp->topk_group)
				b[e] = -INFINITY;
		}
	}
	for (j = 0; j < hp->n_expert_used; j++) {
		ids[j] = (int32_t)argmax(b, E);
		b[ids[j]] = -INFINITY;
		sum += w[j] = p[ids[j]];
	}
	for (j = 0; j < hp->n_expert_used; j++) {
		if (norm)
			w[j] /= sum + 1e-20f;
		if (v3 || !norm)
			w[j] *= (float)hp->routed_scaling_factor;
	}
}

/* y (T, H) = the shared experts' FFN(x), unweighted, + for each token the
 * weighted FFNs of the experts its router chose: one token and one expert
 * at a time. */
static void moe(const ref_model *r, const ref_layer *L, ref_state *s, float *y, const float *x)
{
	size_t H = r->hp->n_embd, t, j, i;

	if (L->shared)
		ffn(r, s, y, x, &L->gate_sh, &L->up_sh, &L->down_sh, s->T);
	else
		memset(y, 0, s->T * H * sizeof *y);
	for (t = 0; t < s->T; t++) {
		route(r, L, s, x + t * H);
		for (j = 0; j < r->hp->n_expert_used; j++) {
			ds_mat g = ds_mat_expert(&L->gate_exps, (uint64_t)s->ids[j]);
			ds_mat u = ds_mat_expert(&L->up_exps, (uint64_t)s->ids[j]);
			ds_mat d = ds_mat_expert(&L->down_exps, (uint64_t)s->ids[j]);

			ffn(r, s, s->ey, x + t * H, &g, &u, &d, 1);
			for (i = 0; i < H; i++)
				y[t * H + i] += s->w[j] * s->ey[i];
		}
	}
}

/* ---- the forward pass -------------------------------------------------------------- */

/* One pre-norm block:
 *   x = x + Attention(RMSNorm(x; attn_norm)) Wo^T
 *   x = x + FFN(RMSNorm(x; ffn_norm))              dense SwiGLU or MoE */
static void layer(const ref_model *r, const ref_layer *L, ref_state *s)
{
	size_t H = r->hp->n_embd, t, i;

	for (t = 0; t < s->T; t++)
		rmsnorm(s->xb + t * H, s->x + t * H, L->attn_norm, H, r->hp->norm_eps);
	if (r->hp->arch == DS_ARCH_DEEPSEEK2)
		mla(r, L, s);
	else
		gqa(r, L, s);
	matmul(r, s->xb2, s->o, &L->wo, s->T);
	for (i = 0; i < s->T * H; i++)
		s->x[i] += s->xb2[i];
	for (t = 0; t < s->T; t++)
		rmsnorm(s->xb + t * H, s->x + t * H, L->ffn_norm, H, r->hp->norm_eps);
	if (L->moe)
		moe(r, L, s, s->xb2, s->xb);
	else
		ffn(r, s, s->xb2, s->xb, &L->gate, &L->up, &L->down, s->T);
	for (i = 0; i < s->T * H; i++)
		s->x[i] += s->xb2[i];
}

/* Every activation buffer in one allocation, sizes checked. */
static int state_init(ref_state *s, const ds_hparams *hp, size_t T)
{
	int is_mla = hp->arch == DS_ARCH_DEEPSEEK2;
	size_t nh = hp->n_head, H = hp->n_embd, E = hp->n_expert, i, n = 0;
	size_t dk = is_mla ? hp->qk_nope_head_dim + hp->qk_rope_head_dim : hp->head_dim;
	size_t dv = is_mla ? hp->v_head_dim : hp->head_dim, nkv = is_mla ? nh : hp->n_head_kv;
	size_t ff = (size_t)hp->n_ff_exp * (hp->n_expert_shared > 1 ? hp->n_expert_shared : 1);
	struct { float **p; size_t rows, width; } b[] = {
		{ &s->x, T, H }, { &s->xb, T, H }, { &s->xb2, T, H }, { &s->q, T, nh * dk },
		{ &s->k, T, nkv * dk }, { &s->v, T, nkv * dv }, { &s->o, T, nh * dv },
		{ &s->att, T, 1 }, { &s->qa, T, hp->q_lora_rank },
		{ &s->kva, T, (size_t)hp->kv_lora_rank + hp->qk_rope_head_dim },
		{ &s->c, T, hp->kv_lora_rank }, { &s->kvb, T, nh * (hp->qk_nope_head_dim + dv) },
		{ &s->hb, T, ff > hp->n_ff ? ff : hp->n_ff }, { &s->hb2, T, ff > hp->n_ff ? ff : hp->n_ff },
		{ &s->ey, 1, H }, { &s->rs, 3, E }, { &s->w, 1, hp->n_expert_used },
	};
	size_t off[sizeof b / sizeof b[0]];

	s->T = T;
	for (i = 0; i < sizeof b / sizeof b[0]; i++) {
		off[i] = n;
		if (ds_mul_sz(b[i].rows, b[i].width, &b[i].width) ||
		    ds_add_sz(n, b[i].width, &n) || n > SIZE_MAX / sizeof(float))
			return -1;
	}
	s->ids = calloc(hp->n_expert_used + 1, sizeof *s->ids);
	if ((s->mem = calloc(n, sizeof(float))) == NULL || s->ids == NULL)
		return -1;
	for (i = 0; i < sizeof b / sizeof b[0]; i++)
		*b[i].p = s->mem + off[i];
	return 0;
}

/* The widest input of any matrix: the row buffer's size. */
static size_t widest(const ds_model *m)
{
	size_t i, k = 1;

	for (i = 0; i < m->n_tensors; i++)
		if (m->tensors[i].ndim >= 2 && m->tensors[i].shape[m->tensors[i].ndim - 1] > k)
			k = m->tensors[i].shape[m->tensors[i].ndim - 1];
	return k;
}

static int bind(ref_model *r, const ds_model *m, ds_err *err)
{
	uint32_t l;

	r->layers = ds_calloc(m->hp.n_layer, sizeof *r->layers, err);
	if (r->layers == NULL || mat(m, -1, "token_embd", &r->tok_embd, err))
		return -1;
	r->out_norm = vec(m, -1, "output_norm");
	if (m->hp.tie_embeddings)
		r->output = r->tok_embd;
	else if (mat(m, -1, "output", &r->output, err))
		return -1;
	for (l = 0; l < m->hp.n_layer; l++)
		if (bind_layer(m, &r->layers[l], (int)l, err))
			return -1;
	return 0;
}

/* The main model over tok[0..n) into s (x: the last layer's output). */
static int ref_main(ref_model *r, ref_state *s, const ds_model *m,
		    const int32_t *tok, size_t n, ds_err *err)
{
	size_t H = m->hp.n_embd, t;
	uint32_t l;

	if (n == 0)
		return ds_errf(err, "reference: no tokens");
	for (t = 0; t < n; t++)
		if (tok[t] < 0 || (uint32_t)tok[t] >= m->hp.n_vocab)
			return ds_errf(err, "reference: token %zu: id %d is not below "
				       "the vocabulary size %u", t, tok[t], m->hp.n_vocab);
	if (bind(r, m, err) || rope_init(r, err) ||
	    (r->row = ds_calloc(widest(m), sizeof *r->row, err)) == NULL)
		return -1;
	if (state_init(s, &m->hp, n))
		return ds_errf(err, "reference: out of memory for %zu tokens", n);
	for (t = 0; t < n; t++)                     /* x = embedding rows */
		r->scalar->dequant_row(&r->tok_embd, (uint64_t)tok[t], s->x + t * H);
	for (l = 0; l < m->hp.n_layer; l++)
		layer(r, &r->layers[l], s);
	return 0;
}

/* The module's tensors: its layer (blk.N), norms, projection, and its
 * own embedding and head or the main model's. */
static int bind_mtp(const ds_model *m, ref_layer *L, ds_mat *eh, ds_mat *embd,
		    ds_mat *head, const float **nrm, ds_err *err)
{
	const ds_hparams *hp = &m->hp;

	nrm[0] = vec(m, -1, "mtp.enorm");
	nrm[1] = vec(m, -1, "mtp.hnorm");
	nrm[2] = vec(m, -1, "mtp.head_norm");
	if (hp->n_mtp == 0 || !nrm[0] || !nrm[1] || !nrm[2])
		return ds_errf(err, "%s: no multi-token-prediction module loaded", m->dir);
	return bind_layer(m, L, (int)hp->n_layer, err) ||
	       mat(m, -1, "mtp.eh_proj", eh, err) ||
	       mat(m, -1, hp->mtp_shares_embd ? "token_embd" : "mtp.embd", embd, err) ||
	       mat(m, -1, !hp->mtp_shares_head ? "mtp.head" :
		       hp->tie_embeddings ? "token_embd" : "output", head, err) ? -1 : 0;
}

int ds_ref_mtp(const ds_model *m, const int32_t *tok, size_t n, float *logits,
	       ds_err *err)
{
	ref_model r = { .hp = &m->hp, .scalar = ds_kernels_isa(DS_ISA_SCALAR) };
	ref_state s = { 0 }, u = { 0 };
	ref_layer L;
	ds_mat eh, embd, head;
	const float *nrm[3];
	size_t H = m->hp.n_embd, t, T = n - 1;
	float *cat = NULL, *e = NULL;
	int rc = -1;

	if (n < 2)
		return ds_errf(err, "reference: the MTP module needs 2 tokens or more");
	if (ref_main(&r, &s, m, tok, n, err) ||
	    bind_mtp(m, &L, &eh, &embd, &head, nrm, err))
		goto out;
	cat = ds_calloc(T, 2 * H * sizeof *cat, err);
	e = ds_calloc(H, sizeof *e, err);
	if (cat == NULL || e == NULL || state_init(&u, &m->hp, T))
		goto out;
	for (t = 0; t < T; t++) {
		/* h_t through the main model's output norm, then hnorm */
		rmsnorm(s.xb + t * H, s.x + t * H, r.out_norm, H, m->hp.norm_eps);
		r.scalar->dequant_row(&embd, (uint64_t)tok[t + 1], e);
		rmsnorm(cat + t * 2 * H, e, nrm[0], H, m->hp.norm_eps);
		rmsnorm(cat + t * 2 * H + H, s.xb + t * H, nrm[1], H, m->hp.norm_eps);
	}
	matmul(&r, u.x, cat, &eh, T);
	layer(&r, &L, &u);
	for (t = 0; t < T; t++)
		rmsnorm(u.xb + t * H, u.x + t * H, nrm[2], H, m->hp.norm_eps);
	matmul(&r, logits, u.xb, &head, T);
	rc = 0;
out:
	free(cat);
	free(e);
	free(u.mem);
	free(u.ids);
	free(s.mem);
	free(s.ids);
	free(r.row);
	free(r.layers);
	return rc;
}

int ds_ref_forward(const ds_model *m, const int32_t *tok, size_t n, float *logits,
		   ds_err *err)
{
	ref_model r = { .hp = &m->hp, .scalar = ds_kernels_isa(DS_ISA_SCALAR) };
	ref_state s = { 0 };
	size_t H = m->hp.n_embd, t;
	int rc = -1;

	if (ref_main(&r, &s, m, tok, n, err))
		goto out;
	for (t = 0; t < n; t++)                     /* logits = RMSNorm(x) W_out^T */
		rmsnorm(s.xb + t * H, s.x + t * H, r.out_norm, H, m->hp.norm_eps);
	matmul(&r, logits, s.xb, &r.output, n);
	rc = 0;
out:
	free(s.mem);
	free(s.ids);
	free(r.row);
	free(r.layers);
	return rc;
}

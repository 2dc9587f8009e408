/*
 * forward.c - binding a model to its forward pass, the batch checks, the
 * embedding and the output head (forward.h).  The layers are in
 * libcore/model/.
 */
#include "arch.h"

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define DEFAULT_BATCH 256

/* ---- binding tensors -------------------------------------------------------- */

static int bind_mat(const ds_model *m, ds_mat *w, ds_err *err,
		    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* The matrix NAME (and its input permutation NAME.perm, if any). */
static int bind_mat(const ds_model *m, ds_mat *w, ds_err *err,
		    const char *fmt, ...)
{
	char name[64], pn[72];
	const ds_tensor *t, *p;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(name, sizeof name, fmt, ap);
	va_end(ap);
	t = ds_model_tensor(m, name);
	if (t == NULL)
		return ds_errf(err, "%s: model.meta: tensor %s missing", m->dir,
			       name);
	snprintf(pn, sizeof pn, "%s.perm", name);
	p = ds_model_tensor(m, pn);
	if (ds_mat_init(w, t->type, t->data, t->size, t->ndim, t->shape,
			p ? (const int32_t *)p->data : NULL, err))
		return ds_err_prefix(err, "%s: tensor %s", m->dir, name);
	return 0;
}

/* An f32 vector, or NULL when the model has none of that name. */
static const float *bind_vec(const ds_model *m, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static const float *bind_vec(const ds_model *m, const char *fmt, ...)
{
	char name[64];
	const ds_tensor *t;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(name, sizeof name, fmt, ap);
	va_end(ap);
	t = ds_model_tensor(m, name);
	return t != NULL && t->type.dt == DS_F32 ? (const float *)t->data : NULL;
}

static int bind_ffn(const ds_model *m, ds_layer *L, uint32_t i, ds_err *err)
{
	L->moe = ds_hparams_is_moe(&m->hp, i);
	if (!L->moe)
		return bind_mat(m, &L->ffn_gate, err, "blk.%u.ffn_gate", i) ||
		       bind_mat(m, &L->ffn_up, err, "blk.%u.ffn_up", i) ||
		       bind_mat(m, &L->ffn_down, err, "blk.%u.ffn_down", i) ? -1 : 0;
	L->exp_bias = bind_vec(m, "blk.%u.exp_probs_b", i);
	if (bind_mat(m, &L->gate_inp, err, "blk.%u.ffn_gate_inp", i) ||
	    bind_mat(m, &L->gate_exps, err, "blk.%u.ffn_gate_exps", i) ||
	    bind_mat(m, &L->up_exps, err, "blk.%u.ffn_up_exps", i) ||
	    bind_mat(m, &L->down_exps, err, "blk.%u.ffn_down_exps", i))
		return -1;
	L->shexp = m->hp.n_expert_shared > 0;
	if (L->shexp &&
	    (bind_mat(m, &L->gate_sh, err, "blk.%u.ffn_gate_shexp", i) ||
	     bind_mat(m, &L->up_sh, err, "blk.%u.ffn_up_shexp", i) ||
	     bind_mat(m, &L->down_sh, err, "blk.%u.ffn_down_shexp", i)))
		return -1;
	return 0;
}

static int bind_attn(const ds_model *m, ds_layer *L, uint32_t i, ds_err *err)
{
	if (m->hp.arch != DS_ARCH_DEEPSEEK2) {
		L->bq = bind_vec(m, "blk.%u.attn_q.bias", i);
		L->bk = bind_vec(m, "blk.%u.attn_k.bias", i);
		L->bv = bind_vec(m, "blk.%u.attn_v.bias", i);
		if (m->hp.qkv_bias && (!L->bq || !L->bk || !L->bv))
			return ds_errf(err, "%s: layer %u: q/k/v biases missing",
				       m->dir, i);
		return bind_mat(m, &L->wq, err, "blk.%u.attn_q", i) ||
		       bind_mat(m, &L->wk, err, "blk.%u.attn_k", i) ||
		       bind_mat(m, &L->wv, err, "blk.%u.attn_v", i) ||
		       bind_mat(m, &L->wo, err, "blk.%u.attn_output", i) ? -1 : 0;
	}
	if (m->hp.q_lora_rank) {
		L->q_a_norm = bind_vec(m, "blk.%u.attn_q_a_norm", i);
		if (bind_mat(m, &L->wq_a, err, "blk.%u.attn_q_a", i) ||
		    bind_mat(m, &L->wq_b, err, "blk.%u.attn_q_b", i))
			return -1;
	} else if (bind_mat(m, &L->wq, err, "blk.%u.attn_q", i)) {
		return -1;
	}
	L->kv_a_norm = bind_vec(m, "blk.%u.attn_kv_a_norm", i);
	return bind_mat(m, &L->wkv_a, err, "blk.%u.attn_kv_a", i) ||
	       bind_mat(m, &L->wkv_b, err, "blk.%u.attn_kv_b", i) ||
	       bind_mat(m, &L->wo, err, "blk.%u.attn_output", i) ? -1 : 0;
}

/* The MTP module: its decoder layer blk.N (N = n_layer) as the one
 * layer, its input norms and projection, and its own embedding and head
 * or, where the converter found them identical, the main model's. */
static int bind_mtp(ds_fwd *f, ds_err *err)
{
	const ds_model *m = f->m;
	const ds_hparams *hp = &m->hp;
	ds_layer *L;

	if (hp->n_mtp == 0 || m->n_mtp_tensors == 0)
		return ds_errf(err, "%s: the model has no multi-token-prediction "
			       "module%s", m->dir, hp->n_mtp ? " loaded" : "");
	f->n_layer = 1;
	f->layers = ds_calloc(1, sizeof *f->layers, err);
	if (f->layers == NULL)
		return -1;
	L = &f->layers[0];
	L->attn_norm = bind_vec(m, "blk.%u.attn_norm", hp->n_layer);
	L->ffn_norm = bind_vec(m, "blk.%u.ffn_norm", hp->n_layer);
	f->mtp_enorm = bind_vec(m, "mtp.enorm");
	f->mtp_hnorm = bind_vec(m, "mtp.hnorm");
	f->out_norm = bind_vec(m, "mtp.head_norm");
	if (!f->mtp_enorm || !f->mtp_hnorm || !f->out_norm)
		return ds_errf(err, "%s: model.meta: the MTP norms are missing", m->dir);
	if (bind_attn(m, L, hp->n_layer, err) || bind_ffn(m, L, hp->n_layer, err) ||
	    bind_mat(m, &f->mtp_eh, err, "mtp.eh_proj") ||
	    bind_mat(m, &f->tok_embd, err, hp->mtp_shares_embd ? "token_embd" : "mtp.embd"))
		return -1;
	if (!hp->mtp_shares_head)
		return bind_mat(m, &f->output, err, "mtp.head");
	return bind_mat(m, &f->output, err, hp->tie_embeddings ? "token_embd" : "output");
}

static int bind_all(ds_fwd *f, ds_err *err)
{
	const ds_model *m = f->m;
	uint32_t i;

	if (f->mtp)
		return bind_mtp(f, err);
	f->n_layer = m->hp.n_layer;
	f->layers = ds_calloc(m->hp.n_layer, sizeof *f->layers, err);
	if (f->layers == NULL || bind_mat(m, &f->tok_embd, err, "token_embd"))
		return -1;
	f->out_norm = bind_vec(m, "output_norm");
	if (m->hp.tie_embeddings)
		f->output = f->tok_embd;
	else if (bind_mat(m, &f->output, err, "output"))
		return -1;
	for (i = 0; i < m->hp.n_layer; i++) {
		ds_layer *L = &f->layers[i];

		L->attn_norm = bind_vec(m, "blk.%u.attn_norm", i);
		L->ffn_norm = bind_vec(m, "blk.%u.ffn_norm", i);
		if (bind_attn(m, L, i, err) || bind_ffn(m, L, i, err))
			return -1;
	}
	return 0;
}

/* ---- rope, attention scale, router ------------------------------------------------ */

/* The RoPE of the model: the whole head (llama, qwen2) or the rope part
 * of it (deepseek2), with the scaling of model.meta; and the softmax
 * scale: 1/sqrt(d_qk), times YaRN's mscale(factor, mscale_all_dim)^2 for
 * DeepSeek (docs/deepseek.md 4.3; the GQA models' YaRN, as
 * Hugging Face applies it, scales only cos and sin). */
int ds_fwd_rope_init(const ds_hparams *hp, ds_rope *r, double *scale,
		     ds_err *err)
{
	uint32_t dim = hp->arch == DS_ARCH_DEEPSEEK2 ? hp->qk_rope_head_dim
						      : hp->head_dim;

	if (ds_rope_init(r, hp, dim, err))
		return -1;
	if (hp->arch == DS_ARCH_DEEPSEEK2)
		*scale = ds_rope_attn_scale(hp) /
			 sqrt((double)(hp->qk_nope_head_dim + hp->qk_rope_head_dim));
	else
		*scale = 1 / sqrt((double)hp->head_dim);
	return 0;
}

static void router_init(ds_fwd *f)
{
	const ds_hparams *hp = f->hp;
	ds_router *r = &f->router;

	r->n_expert = hp->n_expert;
	r->n_used = hp->n_expert_used;
	r->score = hp->expert_scoring == DS_SCORING_SIGMOID ? DS_ROUTE_SIGMOID
							    : DS_ROUTE_SOFTMAX;
	r->method = hp->topk_method == DS_TOPK_NOAUX_TC ? DS_ROUTE_NOAUX_TC :
		    hp->topk_method == DS_TOPK_GROUP_LIMITED ? DS_ROUTE_GROUP_LIMITED
							     : DS_ROUTE_GREEDY;
	r->n_group = hp->n_group;
	r->topk_group = hp->topk_group;
	/* the reference normalizes only when more than one expert is used
	 * (with one, the weight stays the score, then scaled) */
	r->norm_topk_prob = hp->norm_topk_prob && hp->n_expert_used > 1;
	r->routed_scaling_factor = (float)hp->routed_scaling_factor;
}

/* ---- buffers ------------------------------------------------------------------------- */

/* The widest padded input of any matrix, and the weight types used. */
static void scan_mats(const ds_model *m, size_t *max_k, unsigned *types)
{
	size_t i;

	*max_k = 0;
	*types = 0;
	for (i = 0; i < m->n_tensors; i++) {
		const ds_tensor *t = &m->tensors[i];
		uint64_t k;

		if (t->ndim < 2 || t->type.dt == DS_I32)
			continue;
		k = t->shape[t->ndim - 1];
		if (ds_ttype_interleaved(t->type))
			k = ds_kpad(t->type, k);
		if (k > *max_k)
			*max_k = k;
		*types |= 1u << t->type.dt;
	}
	/* the derived MLA matrices (bf16 unless kv_b is f16/f32) */
	if (m->hp.arch == DS_ARCH_DEEPSEEK2)
		*types |= 1u << DS_BF16;
}

/* ds_matmul_heads' inputs: every head's rows of a batch, for W_UK^T (the
 * derived type, k = dn) and W_UV (attn_kv_b's type or the derived one,
 * k = rkv). */
static void mla_heads_cfg(const ds_fwd *f, ds_ctx_cfg *cfg)
{
	const ds_hparams *hp = f->hp;
	ds_ttype kvb = f->layers[0].wkv_b.type, dt = ds_mla_derived_type(kvb);
	size_t k[3] = { hp->qk_nope_head_dim, hp->kv_lora_rank, hp->kv_lora_rank };
	ds_ttype t[3] = { dt, dt, kvb };
	int i;

	cfg->head_rows = (size_t)f->max_batch * hp->n_head;
	cfg->head_types = 1u << dt.dt | 1u << kvb.dt;
	for (i = 0; i < 3; i++) {
		size_t kp = ds_ttype_interleaved(t[i]) ? ds_kpad(t[i], k[i]) : k[i];

		if (kp > cfg->head_k)
			cfg->head_k = kp;
	}
}

/* Whether the MTP module drafts through a q8 copy of its head (see
 * draft_head): a bf16, f16 or f32 head of its own rows. */
static int draft_head_q8(const ds_fwd *f)
{
	enum ds_dtype dt = f->output.type.dt;

	return f->mtp && f->draft_head && (dt == DS_BF16 || dt == DS_F16 || dt == DS_F32) &&
	       f->output.perm == NULL && f->output.ne == 1;
}

static int ctx_init(ds_fwd *f, ds_err *err)
{
	const ds_hparams *hp = f->hp;
	ds_ctx_cfg cfg;
	size_t shared = (size_t)hp->n_ff_exp * hp->n_expert_shared;

	memset(&cfg, 0, sizeof cfg);
	cfg.max_rows = f->max_batch;
	scan_mats(f->m, &cfg.max_k, &cfg.types);
	if (draft_head_q8(f))
		cfg.types |= 1u << DS_Q8;
	cfg.max_ff = hp->n_ff > shared ? hp->n_ff : shared;
	if (hp->n_expert) {
		const ds_layer *L = NULL;
		uint32_t i;

		for (i = 0; i < f->n_layer && L == NULL; i++)
			if (f->layers[i].moe)
				L = &f->layers[i];
		if (L != NULL) {
			cfg.moe_experts = hp->n_expert;
			cfg.moe_used = hp->n_expert_used;
			cfg.moe_k = L->gate_exps.kp;
			cfg.moe_ff = L->down_exps.kp;
		}
	}
	if (hp->arch == DS_ARCH_DEEPSEEK2) {
		cfg.max_group = hp->n_head;
		cfg.max_head = hp->kv_lora_rank + hp->qk_rope_head_dim;
		mla_heads_cfg(f, &cfg);
	} else {
		cfg.max_group = hp->n_head / hp->n_head_kv;
		cfg.max_head = hp->head_dim;
	}
	/* MHA attends blocks of tokens together (ops.h ds_attn) */
	if (cfg.max_group < DS_ATTN_TOKENS)
		cfg.max_group = DS_ATTN_TOKENS;
	cfg.max_rope = f->rope.dim;
	return ds_ctx_init(&f->ctx, f->pool, &cfg, err);
}

/* An anonymous mapping of `bytes` (zero, resident only where written),
 * freed with the forward. */
static void *fwd_map(ds_fwd *f, size_t bytes, ds_err *err)
{
	void *p;

	if (f->n_maps == DS_FWD_MAPS)
		return ds_errf(err, "forward: too many buffers"), NULL;
	bytes = ds_round_up(bytes ? bytes : 1, 4096);
	/* anonymous: zero, and resident only where written */
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	if (p == MAP_FAILED)
		return ds_errf(err, "forward: cannot map %zu bytes", bytes), NULL;
	f->maps[f->n_maps].p = p;
	f->maps[f->n_maps++].n = bytes;
	f->scratch_bytes += bytes;
	return p;
}

/* A buffer of rows x width elements of `elem` bytes (NULL for width 0). */
static void *fbuf(ds_fwd *f, size_t rows, size_t width, size_t elem, int *oom)
{
	size_t n;
	void *p;

	if (width == 0 || *oom)
		return NULL;
	if (ds_mul_sz(rows, width, &n) || ds_mul_sz(n, elem, &n) ||
	    (p = fwd_map(f, n, NULL)) == NULL) {
		*oom = 1;
		return NULL;
	}
	return p;
}

/* MLA's derived matrices and the layers' per-head views of them (filled
 * by ds_mla_derive). */
static int mla_bufs(ds_fwd *f, ds_err *err)
{
	const ds_hparams *hp = f->hp;
	uint64_t bytes;

	if (ds_mla_derived_bytes(hp, f->n_layer, f->layers[0].wkv_b.type, &bytes, err))
		return -1;
	f->head_mats = ds_calloc((size_t)f->n_layer * 2, hp->n_head * sizeof(ds_mat), err);
	f->derived = fwd_map(f, (size_t)bytes, err);
	if (f->head_mats == NULL || f->derived == NULL)
		return ds_err_prefix(err, "MLA: derived matrices");
	/* weights, not scratch */
	f->scratch_bytes -= ds_round_up(bytes, 4096);
	f->derived_bytes = bytes;
	return 0;
}

static int bufs_init(ds_fwd *f, ds_err *err)
{
	const ds_hparams *hp = f->hp;
	size_t T = f->max_batch, H = hp->n_embd, nh = hp->n_head;
	int oom = 0, mla = hp->arch == DS_ARCH_DEEPSEEK2;
	size_t qhd = mla ? hp->qk_nope_head_dim + hp->qk_rope_head_dim : hp->head_dim;
	size_t vd = mla ? hp->v_head_dim : hp->head_dim;
	size_t lat = hp->kv_lora_rank + hp->qk_rope_head_dim;

	f->x = fbuf(f, T, H, sizeof(float), &oom);
	f->h = fbuf(f, T, H, sizeof(float), &oom);
	f->y = fbuf(f, T, H, sizeof(float), &oom);
	f->xo = fbuf(f, T, H, sizeof(float), &oom);
	f->q = fbuf(f, T, nh * qhd, sizeof(float), &oom);
	f->o = fbuf(f, T, nh * vd, sizeof(float), &oom);
	if (mla) {
		f->k = fbuf(f, T, lat, sizeof(float), &oom);
		f->qa = fbuf(f, T, hp->q_lora_rank, sizeof(float), &oom);
		f->qc = fbuf(f, T, nh * lat, sizeof(float), &oom);
		f->oc = fbuf(f, T, nh * hp->kv_lora_rank, sizeof(float), &oom);
		f->mla_lat = fbuf(f, DS_MLA_KEYS, lat, sizeof(float), &oom);
		f->mla_kv = fbuf(f, DS_MLA_KEYS, nh * (hp->qk_nope_head_dim + vd),
				 sizeof(float), &oom);
		f->mla_kr = fbuf(f, DS_MLA_KEYS, nh * qhd, sizeof(float), &oom);
		f->mla_qb = fbuf(f, T * nh, ds_mla_qb_ld(hp), sizeof(uint16_t), &oom);
		f->mla_kp = fbuf(f, nh, ds_mla_kp_size(hp), sizeof(uint16_t), &oom);
		f->mla_vp = fbuf(f, nh, ds_attn_pack_v_size(DS_MLA_KEYS, vd), sizeof(uint16_t), &oom);
		f->mla_ml = fbuf(f, T, nh * 2, sizeof(float), &oom);
	} else {
		f->k = fbuf(f, T, (size_t)hp->n_head_kv * hp->head_dim, 4, &oom);
		f->v = fbuf(f, T, (size_t)hp->n_head_kv * hp->head_dim, 4, &oom);
	}
	if (hp->n_expert) {
		f->rl = fbuf(f, T, hp->n_expert, sizeof(float), &oom);
		f->ew = fbuf(f, T, hp->n_expert_used, sizeof(float), &oom);
		f->eids = fbuf(f, T, hp->n_expert_used, sizeof *f->eids, &oom);
	}
	if (f->ep != NULL && hp->n_expert) {
		size_t au = (size_t)T * hp->n_expert_used;

		f->ep_part = fbuf(f, hp->n_expert, 1, sizeof *f->ep_part, &oom);
		f->ep_cnt = fbuf(f, 3, f->ep->n_part, sizeof *f->ep_cnt, &oom);
		f->ep_row = fbuf(f, au, 1, sizeof *f->ep_row, &oom);
		f->ep_rows = fbuf(f, au, H, sizeof(float), &oom);
		if (!oom) {
			f->ep_off = f->ep_cnt + f->ep->n_part;
			f->ep_fill = f->ep_off + f->ep->n_part;
		}
	}
	f->logits = fbuf(f, T, hp->n_vocab, sizeof(float), &oom);
	if (f->mtp)
		f->cat = fbuf(f, T, 2 * H, sizeof(float), &oom);
	f->tok = fbuf(f, T, 1, sizeof *f->tok, &oom);
	f->pos = fbuf(f, T, 1, sizeof *f->pos, &oom);
	f->out_rows = fbuf(f, T, 1, sizeof *f->out_rows, &oom);
	f->runs = fbuf(f, T, 1, sizeof *f->runs, &oom);
	if (oom)
		return ds_errf(err, "%s: out of memory for the activations of "
			       "batches of %zu", f->m->dir, T);
	return mla ? mla_bufs(f, err) : 0;
}

/* The MTP module only drafts, and the main model checks every draft, so
 * its head may be coarser than the main model's.  A bf16, f16 or f32
 * head (AWQ and GPTQ checkpoints keep lm_head unquantized) gets a q8g32
 * copy: the head is most of what a draft reads (the demo's: 2 of 2.6
 * MiB), and q8 halves bf16's bytes at about 0.5% relative error.  Built
 * by the pool's threads, each a slab of row-sets at a time, so it needs
 * no float copy of the head (V3's is 129280 x 7168): a slab of 2 row-sets
 * is 0.9 MiB of floats a thread for V3, however many threads there are. */
#define HEAD_SLAB (2 * DS_ROWSET)

typedef struct head_job {
	const ds_mat *w;
	ds_ttype q8;
	uint8_t *dst;
	float *rows;              /* [nth][HEAD_SLAB][k] */
	_Atomic int failed;
} head_job;

static void head_fn(void *arg, int ith, int nth)
{
	head_job *j = arg;
	const ds_mat *w = j->w;
	float *rows = j->rows + (size_t)ith * HEAD_SLAB * w->k;
	size_t slabs = (w->n + HEAD_SLAB - 1) / HEAD_SLAB, b, e, s;

	ds_split(slabs, ith, nth, &b, &e);
	for (s = b; s < e; s++) {
		uint64_t r0 = s * HEAD_SLAB, n = w->n - r0 < HEAD_SLAB ? w->n - r0 : HEAD_SLAB, i;

		for (i = 0; i < n; i++)
			ds_dequant_row(w->type, w->data, w->k, r0 + i, rows + i * w->k);
		if (ds_quantize_q8(j->dst + r0 / DS_ROWSET * ds_rowset_bytes(j->q8, w->k),
				   rows, n, w->k, j->q8.group))
			atomic_store(&j->failed, 1);
	}
}

static int draft_head(ds_fwd *f, ds_err *err)
{
	head_job j = { .w = &f->output, .q8 = { .dt = DS_Q8, .group = 32 } };
	uint64_t shape[2] = { f->output.n, f->output.k }, bytes;
	size_t nth = (size_t)ds_pool_threads(f->pool), per;

	if (!draft_head_q8(f) || ds_tensor_bytes(j.q8, 2, shape, &bytes) || bytes > SIZE_MAX)
		return 0;
	if (ds_mul_sz(nth * HEAD_SLAB, (size_t)shape[1], &per))
		return ds_errf(err, "MTP module: the draft head: too large");
	j.rows = ds_calloc(per, sizeof *j.rows, err);
	j.dst = fwd_map(f, (size_t)bytes, err);
	if (j.rows == NULL || j.dst == NULL) {
		free(j.rows);
		return ds_err_prefix(err, "MTP module: the draft head");
	}
	f->scratch_bytes -= ds_round_up(bytes, 4096);   /* weights, not scratch */
	ds_pool_run(f->pool, head_fn, &j);
	free(j.rows);
	if (atomic_load(&j.failed))
		return ds_errf(err, "MTP module: the draft head: out of memory");
	return ds_mat_init(&f->output, j.q8, j.dst, bytes, 2, shape, NULL, err);
}

/* ---- init / free ------------------------------------------------------------------ */

/* MLA's form: the options', else DS_MLA_FORM from the environment,
 * else prompt entries in the MHA form. */
static int mla_form(ds_fwd *f, const ds_fwd_opts *opts, ds_err *err)
{
	static const char *const names[] = { "prompt", "absorbed", "mha" };
	const char *env = getenv("DS_MLA_FORM");
	int i;

	f->mla_form = opts && opts->mla_form ? opts->mla_form : DS_MLA_PROMPT;
	if ((opts && opts->mla_form) || env == NULL || *env == 0)
		return 0;
	for (i = 0; i < 3; i++)
		if (strcmp(env, names[i]) == 0) {
			f->mla_form = DS_MLA_PROMPT + i;
			return 0;
		}
	return ds_errf(err, "DS_MLA_FORM=%s: prompt, absorbed or mha", env);
}

int ds_fwd_init(ds_fwd **out, const ds_model *m, ds_pool *pool,
		const ds_fwd_opts *opts, ds_err *err)
{
	ds_fwd *f = ds_calloc(1, sizeof *f, err);
	double scale;

	*out = NULL;
	if (f == NULL)
		return -1;
	f->m = m;
	f->hp = &m->hp;
	f->pool = pool;
	f->max_batch = opts && opts->max_batch ? opts->max_batch : DEFAULT_BATCH;
	f->ep = opts ? opts->ep : NULL;
	if (f->ep != NULL && f->hp->n_expert == 0) {
		ds_errf(err, "%s: expert parallelism needs a model with routed "
			"experts (%s has none)", m->dir, ds_arch_name(m->hp.arch));
		goto fail;
	}
	f->mtp = opts && opts->mtp;
	f->draft_head = opts && opts->draft_head;
	if (mla_form(f, opts, err))
		goto fail;
	if (bind_all(f, err) || ds_fwd_rope_init(f->hp, &f->rope, &scale, err))
		goto fail;
	f->attn_scale = (float)scale;
	router_init(f);
	if (ctx_init(f, err))
		goto fail;
	f->kern = f->ctx.kern;
	if (bufs_init(f, err) || (f->ep != NULL && ds_ep_init(f, err)) ||
	    (f->hp->arch == DS_ARCH_DEEPSEEK2 && ds_mla_derive(f, err)) ||
	    draft_head(f, err))
		goto fail;
	*out = f;
	return 0;
fail:
	ds_fwd_free(f);
	return -1;
}

void ds_fwd_free(ds_fwd *f)
{
	int i;

	if (f == NULL)
		return;
	if (f->ctx.pool != NULL)
		ds_ctx_free(&f->ctx);
	free(f->layers);
	free(f->head_mats);
	for (i = 0; i < f->n_maps; i++)
		munmap(f->maps[i].p, f->maps[i].n);
	free(f->seq_next);
	free(f->seq_seen);
	free(f);
}

/* ---- the batch -------------------------------------------------------------------- */

/* Slot bookkeeping sized to the cache (grown once, not per call). */
static int seq_scratch(ds_fwd *f, const ds_kvcache *kv, ds_err *err)
{
	if (kv->n_slot <= f->seq_cap)
		return 0;
	free(f->seq_next);
	free(f->seq_seen);
	f->seq_next = ds_calloc(kv->n_slot, sizeof *f->seq_next, err);
	f->seq_seen = ds_calloc(kv->n_slot, 1, err);
	if (f->seq_next == NULL || f->seq_seen == NULL) {
		f->seq_cap = 0;
		return -1;
	}
	f->seq_cap = kv->n_slot;
	return 0;
}

/* Check the entries against the rules of forward.h and cut them into
 * runs; nothing is changed in the cache until all are known good. */
static int batch_prepare(ds_fwd *f, ds_kvcache *kv, const ds_batch *b,
			 ds_err *err)
{
	size_t i;

	if (b->n > f->max_batch)
		return ds_errf(err, "batch of %zu entries; at most %u", b->n,
			       f->max_batch);
	if (seq_scratch(f, kv, err))
		return -1;
	memset(f->seq_seen, 0, kv->n_slot);
	f->n_runs = f->n_out = 0;
	for (i = 0; i < b->n; i++) {
		int32_t s = b->seq[i], p = b->pos[i], t = b->token[i];
		ds_run *r = f->n_runs ? &f->runs[f->n_runs - 1] : NULL;

		if (t < 0 || (uint32_t)t >= f->hp->n_vocab)
			return ds_errf(err, "batch entry %zu: token id %d is not "
				       "below the vocabulary size %u", i, t,
				       f->hp->n_vocab);
		if (s < 0 || (uint32_t)s >= kv->n_slot)
			return ds_errf(err, "batch entry %zu: sequence slot %d "
				       "(the cache has %u)", i, s, kv->n_slot);
		if (p < 0 || (uint32_t)p >= kv->n_ctx)
			return ds_errf(err, "batch entry %zu: position %d outside "
				       "the context of %u", i, p, kv->n_ctx);
		if (!f->seq_seen[s]) {
			if ((uint32_t)p > kv->len[s])
				return ds_errf(err, "batch entry %zu: position %d "
					       "leaves a gap (slot %d holds %u)",
					       i, p, s, kv->len[s]);
			f->seq_seen[s] = 1;
		} else if ((uint32_t)p != f->seq_next[s]) {
			return ds_errf(err, "batch entry %zu: position %d does "
				       "not follow the slot's previous entry (%u)",
				       i, p, f->seq_next[s] - 1);
		}
		f->seq_next[s] = (uint32_t)p + 1;
		if (r != NULL && r->seq == (uint32_t)s && r->pos0 + r->n == (uint32_t)p &&
		    r->prompt == (b->prompt && b->prompt[i])) {
			r->n++;
		} else {
			r = &f->runs[f->n_runs++];
			r->seq = (uint32_t)s;
			r->t0 = (uint32_t)i;
			r->n = 1;
			r->pos0 = (uint32_t)p;
			r->prompt = b->prompt && b->prompt[i];
		}
		f->tok[i] = t;
		f->pos[i] = p;
		if (b->logits ? b->logits[i] != 0 : i + 1 == b->n)
			f->out_rows[f->n_out++] = (uint32_t)i;
	}
	/* a slot's first run may start inside what it holds: cut it there */
	for (i = 0; i < f->n_runs; i++) {
		const ds_run *r = &f->runs[i];

		if (f->seq_seen[r->seq] == 1) {
			if (kv->len[r->seq] > r->pos0)
				ds_kvcache_seq_keep(kv, r->seq, r->pos0);
			f->seq_seen[r->seq] = 2;
		}
	}
	return 0;
}

/* logits of the rows that asked: RMSNorm and the output projection */
static void head(ds_fwd *f)
{
	size_t i, H = f->hp->n_embd;
	ds_in in = {
		.x = f->xo, .t = f->n_out, .norm = f->out_norm,
		.eps = (float)f->hp->norm_eps
	};
	ds_mm_out o = { .w = &f->output, .y = f->logits };

	if (f->n_out == 0)
		return;
	for (i = 0; i < f->n_out; i++)
		memcpy(f->xo + i * H, f->x + (size_t)f->out_rows[i] * H,
		       H * sizeof(float));
	ds_matmul_many(&f->ctx, &in, &o, 1);
}

/* The MTP module's input: x = eh_proj [RMSNorm(e; enorm) ; RMSNorm(h;
 * hnorm)], the embedding first (as vLLM and SGLang read the weight). */
static int mtp_input(ds_fwd *f, const float *hidden, size_t T, ds_err *err)
{
	size_t H = f->hp->n_embd;
	float eps = (float)f->hp->norm_eps;

	if (ds_embed(&f->ctx, &f->tok_embd, f->tok, T, f->h, 0, err))
		return -1;
	ds_rmsnorm(&f->ctx, f->h, 0, f->mtp_enorm, eps, T, H, f->cat, 2 * H);
	ds_rmsnorm(&f->ctx, hidden, 0, f->mtp_hnorm, eps, T, H, f->cat + H, 2 * H);
	ds_matmul(&f->ctx, &f->mtp_eh, f->cat, T, f->x);
	return 0;
}

/* The pass over a prepared batch whose x holds the inputs. */
static void layers_and_head(ds_fwd *f, ds_kvcache *kv, size_t n)
{
	size_t i;

	/* decode: rope's table once for all layers */
	f->rope1 = NULL;
	if (n == 1) {
		ds_rope_table(&f->rope, (double)f->runs[0].pos0, f->rope_cs);
		f->rope1 = f->rope_cs;
	}
	switch (f->hp->arch) {
	case DS_ARCH_LLAMA: ds_llama_layers(f, kv, n); break;
	case DS_ARCH_QWEN2: ds_qwen2_layers(f, kv, n); break;
	case DS_ARCH_DEEPSEEK2: ds_deepseek2_layers(f, kv, n); break;
	}
	for (i = 0; i < f->n_runs; i++) {
		const ds_run *r = &f->runs[i];

		if (kv->len[r->seq] < r->pos0 + r->n)
			kv->len[r->seq] = r->pos0 + r->n;
	}
	head(f);
}

static int kv_check(const ds_fwd *f, const ds_kvcache *kv, ds_err *err)
{
	if (kv->n_layer != f->n_layer || kv->mla != (f->hp->arch == DS_ARCH_DEEPSEEK2))
		return ds_errf(err, "KV cache made for another model");
	return 0;
}

int ds_fwd_decode(ds_fwd *f, ds_kvcache *kv, const ds_batch *b, ds_err *err)
{
	if (f->mtp)
		return ds_errf(err, "the MTP module's forward runs by ds_fwd_mtp");
	if (kv_check(f, kv, err))
		return -1;
	if (b->n == 0) {
		f->n_out = 0;
		return 0;
	}
	if (batch_prepare(f, kv, b, err))
		return -1;
	/* checked: the other parts run it too */
	if (f->ep != NULL && f->ep->batch != NULL)
		f->ep->batch(f->ep->arg, kv, b);
	if (ds_embed(&f->ctx, &f->tok_embd, f->tok, b->n, f->x, 0, err))
		return -1;
	layers_and_head(f, kv, b->n);
	return 0;
}

int ds_fwd_mtp(ds_fwd *f, ds_kvcache *kv, const ds_batch *b, const float *hidden,
	       ds_err *err)
{
	if (!f->mtp)
		return ds_errf(err, "ds_fwd_mtp: the forward is not the MTP module's");
	if (kv_check(f, kv, err))
		return -1;
	if (b->n == 0) {
		f->n_out = 0;
		return 0;
	}
	if (batch_prepare(f, kv, b, err) || mtp_input(f, hidden, b->n, err))
		return -1;
	layers_and_head(f, kv, b->n);
	return 0;
}

void ds_fwd_hidden(const ds_fwd *f, const uint32_t *rows, size_t n, float *out)
{
	size_t H = f->hp->n_embd, i;

	for (i = 0; i < n; i++)
		f->kern->rmsnorm(f->x + (size_t)rows[i] * H, f->out_norm, H,
				 (float)f->hp->norm_eps, out + i * H);
}

const float *ds_fwd_logits(const ds_fwd *f, size_t i)
{
	DS_ASSERT(i < f->n_out);
	return f->logits + i * f->hp->n_vocab;
}

float *ds_fwd_logits_mut(ds_fwd *f, size_t i)
{
	DS_ASSERT(i < f->n_out);
	return f->logits + i * f->hp->n_vocab;
}

/* ---- info ---------------------------------------------------------------------------- */

void ds_fwd_get_info(const ds_fwd *f, ds_fwd_info *info)
{
	const ds_model *m = f->m;
	const ds_hparams *hp = f->hp;
	size_t i;

	memset(info, 0, sizeof *info);
	info->hp = hp;
	info->n_vocab = hp->n_vocab;
	info->max_batch = f->max_batch;
	info->derived_bytes = f->derived_bytes;
	info->scratch_bytes = f->scratch_bytes;
	info->softmax_scale = f->attn_scale;
	for (i = 0; i < m->n_tensors; i++) {
		const ds_tensor *t = &m->tensors[i];
		size_t n = strlen(t->name);
		uint64_t b = t->size;

		/* the MTP module's tensors come last (modelfile.h): the
		 * main model's forward reads none of them, the module's
		 * only them (and the head it may share, counted below) */
		if ((i >= m->n_tensors - m->n_mtp_tensors) != (f->mtp != 0))
			continue;
		info->weight_bytes += b;
		if (n > 5 && strcmp(t->name + n - 5, "_exps") == 0 && hp->n_expert) {
			uint64_t one = b / hp->n_expert, here = hp->n_expert;

			if (f->ep != NULL)
				here = f->ep->first[f->ep->part + 1] - f->ep->first[f->ep->part];
			info->share_bytes += one * here;
			/* a token's n_used experts, here * n_used / n_expert of
			 * them on average in this part */
			info->active_bytes += one * here * hp->n_expert_used / hp->n_expert;
			continue;
		}
		info->share_bytes += b;
		if (strcmp(t->name, "token_embd") == 0 && !hp->tie_embeddings)
			continue;       /* one row per token */
		info->active_bytes += b;
	}
	if (f->mtp && f->hp->mtp_shares_head)
		info->active_bytes += f->output.e_bytes;
	info->active_bytes += f->derived_bytes;
}

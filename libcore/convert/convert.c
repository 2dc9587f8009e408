/* convert.c - plan a conversion (every tensor found, checked and typed
 * before anything is written), then stream it into the model writer. */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "convert.h"
#include "format/hfconfig.h"
#include "tokenizer/tokenizer.h"

#define MAX_CONFIG_BYTES (16u << 20)
#define PARALLEL_MIN (1u << 20) /* weights */

/* ---- the plan ------------------------------------------------------------------ */

/* Where one matrix (or one expert of a stack) comes from. */
typedef struct src {
	const ds_st_tensor *w;   /* float or FP8 weight, or NULL */
	const ds_st_tensor *scale; /* an FP8 weight's weight_scale_inv */
	ds_qlinear q;            /* quantized: q.qweight != NULL */
	char module[128];
} src;

typedef struct item {
	const ds_tdesc *d;
	ds_ttype type;           /* runtime type */
	uint32_t nsrc;           /* 1, or the experts of a stack */
	src *srcs;
	int perm;                /* write NAME.perm */
	uint64_t in_bytes;
} item;

typedef struct ctx {
	const ds_convert_opts *o;
	ds_source source;
	ds_hparams hp;
	ds_qconfig qc;
	json_t *config;
	ds_st st;
	ds_tdesc *descs;         /* the main model's, then the MTP layer's */
	size_t n_descs;
	enum ds_requant rq;      /* --quantize, AUTO resolved */
	item *items;
	char *used;              /* per checkpoint tensor */
	ds_mwriter w;
	ds_progress prog;
	ds_convert_stats *stats;
	uint8_t *buf;            /* one matrix of output */
	uint64_t buf_size;
	int32_t *perm;
	int rtn_used;            /* some float matrix was quantized */
	ds_ttype qtype;          /* the first quantized matrix's type */
	int have_qtype;
} ctx;

static const char *file_of(const ctx *c, const ds_st_tensor *t)
{
	return c->st.files[t->file].name;
}

/* The checkpoint tensor `name`, marked used; NULL if absent. */
static const ds_st_tensor *take(ctx *c, const char *name)
{
	const ds_st_tensor *t = ds_st_find(&c->st, name);

	if (t != NULL)
		c->used[t - c->st.tensors] = 1;
	return t;
}

static const ds_st_tensor *take2(ctx *c, const char *module, const char *what)
{
	char name[160];

	snprintf(name, sizeof name, "%s.%s", module, what);
	return take(c, name);
}

static int check_float(const ctx *c, const ds_st_tensor *t, int ndim,
		       const uint64_t *shape, ds_err *err)
{
	char have[96], want[96];
	int i;

	if (!ds_st_is_float(t->dtype))
		return ds_errf(err, "%s: tensor %s: dtype %s is not F32, F16 or BF16%s",
			       file_of(c, t), t->name, ds_st_dtype_name(t->dtype),
			       t->dtype == DS_ST_F8_E4M3 ? " (an FP8 tensor where none "
			       "is expected: only the linear weights of the decoder "
			       "layers may be FP8)" : "");
	for (i = 0; i < ndim && t->ndim == ndim; i++)
		if (t->shape[i] != shape[i])
			break;
	if (t->ndim != ndim || i < ndim)
		return ds_errf(err, "%s: tensor %s: shape %s, the %s architecture "
			       "needs %s", file_of(c, t), t->name,
			       ds_st_shape_str(t->ndim, t->shape, have, sizeof have),
			       ds_arch_name(c->hp.arch),
			       ds_st_shape_str(ndim, shape, want, sizeof want));
	return 0;
}

/* The runtime type of a float matrix of dtype dt. */
static ds_ttype float_type(const ctx *c, const item *it, enum ds_st_dtype dt)
{
	enum ds_requant rq = c->rq;
	ds_ttype t = { DS_F32, 0 };

	if (it->d->kind == DS_TK_VECTOR || it->d->kind == DS_TK_ROUTER)
		return t;
	if (it->d->kind == DS_TK_EMBED || rq == DS_RQ_KEEP) {
		/* FP8 has no runtime type: bf16 holds it in the fewest bytes */
		t.dt = dt == DS_ST_BF16 || dt == DS_ST_F8_E4M3 ? DS_BF16
		       : dt == DS_ST_F16 ? DS_F16 : DS_F32;
		return t;
	}
	/* the output projection is kept at 8 bits when q4 is asked for */
	t.dt = rq == DS_RQ_Q4 && it->d->kind != DS_TK_OUTPUT ? DS_Q4 : DS_Q8;
	t.group = c->o->group_size;
	return t;
}

/* An FP8 module: in an FP8 checkpoint, where FP8 belongs, with its scale
 * of the configured block; s->scale is set. */
static int plan_fp8_weight(ctx *c, src *s, const ds_st_tensor *w,
			   const ds_st_tensor *sc, const uint64_t *shape,
			   ds_err *err)
{
	uint64_t bo = c->qc.block[0], bi = c->qc.block[1], want[2];
	char have[96], need[96], blocks[96];

	if (c->qc.method != DS_QM_FP8)
		return ds_errf(err, "%s: tensor %s: F8_E4M3, but the checkpoint has "
			       "no FP8 quantization settings (config.json "
			       "quantization_config with quant_method \"fp8\")",
			       file_of(c, w), w->name);
	DS_ASSERT(bo > 0 && bi > 0); /* read_fp8 requires them */
	want[0] = (shape[0] + bo - 1) / bo;
	want[1] = (shape[1] + bi - 1) / bi;
	if (w->ndim != 2 || w->shape[0] != shape[0] || w->shape[1] != shape[1])
		return ds_errf(err, "%s: tensor %s: shape %s, the %s architecture "
			       "needs %s", file_of(c, w), w->name,
			       ds_st_shape_str(w->ndim, w->shape, have, sizeof have),
			       ds_arch_name(c->hp.arch),
			       ds_st_shape_str(2, shape, need, sizeof need));
	if (sc == NULL)
		return ds_errf(err, "%s: tensor %s: F8_E4M3 without its "
			       "%s_scale_inv", file_of(c, w), w->name, w->name);
	if (sc->dtype != DS_ST_F32)
		return ds_errf(err, "%s: tensor %s: dtype %s, FP8 block scales "
			       "must be F32", file_of(c, sc), sc->name,
			       ds_st_dtype_name(sc->dtype));
	if (sc->ndim != 2 || sc->shape[0] != want[0] || sc->shape[1] != want[1])
		return ds_errf(err, "%s: tensor %s: shape %s, but blocks of "
			       "[%llu, %llu] (weight_block_size in %s) over %s "
			       "%s need %s", file_of(c, sc), sc->name,
			       ds_st_shape_str(sc->ndim, sc->shape, have, sizeof have),
			       (unsigned long long)bo, (unsigned long long)bi,
			       c->qc.file, w->name,
			       ds_st_shape_str(2, shape, need, sizeof need),
			       ds_st_shape_str(2, want, blocks, sizeof blocks));
	s->scale = sc;
	return 0;
}

/* Whether FP8 is where it must be: an FP8 weight needs its scale, the
 * FP8 settings and a decoder layer's linear; in an FP8 checkpoint every
 * decoder layer's linear is FP8 (a float one means shards of two kinds,
 * as a partial BF16 cast leaves); a scale needs an FP8 weight. */
static int plan_fp8(ctx *c, item *it, src *s, const ds_st_tensor *w,
		    const ds_st_tensor *sc, const uint64_t *shape, ds_err *err)
{
	int decoder_linear = it->d->kind == DS_TK_MATRIX &&
			     strcmp(it->d->name, "mtp.eh_proj") != 0;

	if (w->dtype == DS_ST_F8_E4M3) {
		if (it->d->kind != DS_TK_MATRIX)
			return ds_errf(err, "%s: tensor %s: F8_E4M3: an FP8 tensor "
				       "where none is expected (embeddings, "
				       "lm_head, norms and routers are not FP8)",
				       file_of(c, w), w->name);
		if (sc != NULL)
			it->in_bytes += sc->nbytes;
		return plan_fp8_weight(c, s, w, sc, shape, err);
	}
	if (sc != NULL)
		return ds_errf(err, "%s: tensor %s: a block scale, but %s is %s, "
			       "not F8_E4M3", file_of(c, sc), sc->name, w->name,
			       ds_st_dtype_name(w->dtype));
	if (c->qc.method == DS_QM_FP8 && decoder_linear)
		return ds_errf(err, "%s: tensor %s: %s in an FP8 checkpoint, whose "
			       "decoder layers' linear weights are all F8_E4M3 "
			       "(shards of FP8 and of converted weights mixed?)",
			       file_of(c, w), w->name, ds_st_dtype_name(w->dtype));
	return 0;
}

/* One module (weight [n, k]): float, FP8 or quantized. */
static int plan_module(ctx *c, item *it, src *s, const char *module,
		       uint64_t n, uint64_t k, ds_ttype *t, int *needs_perm,
		       ds_err *err)
{
	uint64_t shape[2] = { n, k };
	const ds_st_tensor *w = take2(c, module, "weight");
	const ds_st_tensor *qw = take2(c, module, "qweight");

	snprintf(s->module, sizeof s->module, "%s", module);
	*needs_perm = 0;
	if (w != NULL && qw != NULL)
		return ds_errf(err, "%s: tensor %s: also quantized as %s",
			       file_of(c, w), w->name, qw->name);
	if (w != NULL) {
		if (plan_fp8(c, it, s, w, take2(c, module, "weight_scale_inv"),
			     shape, err) ||
		    (w->dtype != DS_ST_F8_E4M3 && check_float(c, w, 2, shape, err)))
			return -1;
		s->w = w;
		it->in_bytes += w->nbytes;
		*t = float_type(c, it, w->dtype);
		return 0;
	}
	if (qw == NULL)
		return ds_errf(err, "%s.weight: missing from the checkpoint", module);
	if (it->d->kind == DS_TK_EMBED || it->d->kind == DS_TK_ROUTER)
		return ds_errf(err, "%s: tensor %s: a quantized %s is not supported",
			       file_of(c, qw), qw->name,
			       it->d->kind == DS_TK_EMBED ? "embedding" : "router");
	s->q.st = &c->st;
	s->q.module = s->module;
	s->q.qweight = qw;
	s->q.qzeros = take2(c, module, "qzeros");
	s->q.scales = take2(c, module, "scales");
	s->q.g_idx = take2(c, module, "g_idx");
	s->q.n = n;
	s->q.k = k;
	if (ds_quant_check(&c->qc, &s->q, t, needs_perm, err))
		return -1;
	it->in_bytes += qw->nbytes + (s->q.qzeros ? s->q.qzeros->nbytes : 0) +
			(s->q.scales ? s->q.scales->nbytes : 0) +
			(s->q.g_idx ? s->q.g_idx->nbytes : 0);
	return 0;
}

static int same_type(ds_ttype a, ds_ttype b)
{
	return a.dt == b.dt && a.group == b.group;
}

static int plan_matrix(ctx *c, item *it, ds_err *err)
{
	const ds_tdesc *d = it->d;
	uint64_t n = d->shape[d->ndim - 2], k = d->shape[d->ndim - 1];
	uint32_t e;
	char mod[128];

	it->nsrc = d->ndim == 3 ? (uint32_t)d->shape[0] : 1;
	it->srcs = ds_calloc(it->nsrc, sizeof *it->srcs, err);
	if (it->srcs == NULL)
		return -1;
	for (e = 0; e < it->nsrc; e++) {
		ds_ttype t;
		int np;

		if (d->ndim == 3)
			ds_tdesc_hf_expert(d, e, mod, sizeof mod);
		else
			snprintf(mod, sizeof mod, "%s", d->hf);
		if (plan_module(c, it, &it->srcs[e], mod, n, k, &t, &np, err))
			return -1;
		if (e > 0 && !same_type(t, it->type))
			return ds_errf(err, "%s: stored differently from %s (experts "
				       "of one layer must share a format)", mod,
				       it->srcs[0].module);
		it->type = t;
		it->perm |= np;
	}
	if (it->srcs[0].w != NULL && (it->type.dt == DS_Q8 ||
				      it->type.dt == DS_Q4 ||
				      it->srcs[0].scale != NULL))
		c->rtn_used = 1;
	if (it->srcs[0].q.qweight != NULL && !c->have_qtype) {
		c->qtype = it->type;
		c->have_qtype = 1;
	}
	return 0;
}

static int plan_vector(ctx *c, item *it, ds_err *err)
{
	const ds_st_tensor *t = take(c, it->d->hf);

	it->type = (ds_ttype){ DS_F32, 0 };
	it->nsrc = 1;
	it->srcs = ds_calloc(1, sizeof *it->srcs, err);
	if (it->srcs == NULL)
		return -1;
	if (t == NULL)
		return ds_errf(err, "%s: missing from the checkpoint", it->d->hf);
	if (check_float(c, t, 1, it->d->shape, err))
		return -1;
	it->srcs[0].w = t;
	it->in_bytes = t->nbytes;
	return 0;
}

/* Tensors the conversion knowingly leaves out. */
static int skippable(const char *name)
{
	size_t n = strlen(name);

	/* a buffer older exports saved; derived from rope_theta */
	return n > 21 && strcmp(name + n - 21, ".rotary_emb.inv_freq") == 0;
}

static int check_leftovers(ctx *c, ds_err *err)
{
	size_t i;

	if (c->hp.tie_embeddings && ds_st_find(&c->st, "lm_head.weight") != NULL)
		return ds_errf(err, "%s: tensor lm_head.weight present but "
			       "tie_word_embeddings is true in config.json",
			       file_of(c, ds_st_find(&c->st, "lm_head.weight")));
	for (i = 0; i < c->st.n_tensors; i++) {
		const ds_st_tensor *t = &c->st.tensors[i];

		if (!c->used[i] && !skippable(t->name))
			return ds_errf(err, "%s: tensor %s: not part of the %s "
				       "architecture as config.json describes it",
				       file_of(c, t), t->name,
				       ds_arch_name(c->hp.arch));
	}
	return 0;
}

/* ---- the multi-token-prediction layer -------------------------------------- */

/* Whether the checkpoint has any tensor of model.layers.L. */
static int has_layer(const ctx *c, uint32_t L)
{
	char pre[48];
	size_t i, n = (size_t)snprintf(pre, sizeof pre, "model.layers.%u.", L);

	for (i = 0; i < c->st.n_tensors; i++)
		if (strncmp(c->st.tensors[i].name, pre, n) == 0)
			return 1;
	return 0;
}

#define CMP_CHUNK (64u << 20)

/* a and b hold the same dtype, shape and bytes; compared a chunk at a
 * time, each chunk's pages released after, so memory stays small. */
static int same_tensor(const ctx *c, const ds_st_tensor *a,
		       const ds_st_tensor *b)
{
	uint64_t off;
	int i, same;

	if (a->dtype != b->dtype || a->ndim != b->ndim || a->nbytes != b->nbytes)
		return 0;
	for (i = 0; i < a->ndim; i++)
		if (a->shape[i] != b->shape[i])
			return 0;
	for (off = 0, same = 1; same && off < a->nbytes; off += CMP_CHUNK) {
		uint64_t n = a->nbytes - off < CMP_CHUNK ? a->nbytes - off : CMP_CHUNK;

		same = memcmp(a->data + off, b->data + off, n) == 0;
		ds_st_release_range(&c->st, a, off, n);
		ds_st_release_range(&c->st, b, off, n);
	}
	return same;
}

/* The MTP layer's own embedding or head `name` is left out when absent
 * (DeepSeek documents both as shared with the main model) or a
 * byte-identical copy of the main model's `main`. */
static int shared_copy(ctx *c, const char *name, const char *main)
{
	const ds_st_tensor *t = ds_st_find(&c->st, name);
	const ds_st_tensor *m = ds_st_find(&c->st, main);

	if (t == NULL)
		return 1;
	if (m == NULL || !same_tensor(c, t, m))
		return 0;
	c->used[t - c->st.tensors] = 1;
	return 1;
}

/* Converted when the checkpoint carries it; config.json may name a layer
 * the checkpoint left out (converted without it, as stats say). */
static void plan_mtp(ctx *c)
{
	char name[96];
	uint32_t L = c->hp.n_layer;

	if (c->hp.n_mtp == 0)
		return;
	if (!has_layer(c, L)) {
		c->hp.n_mtp = 0;
		c->stats->mtp_absent = 1;
		return;
	}
	snprintf(name, sizeof name, "model.layers.%u.embed_tokens.weight", L);
	c->hp.mtp_shares_embd = shared_copy(c, name, "model.embed_tokens.weight");
	snprintf(name, sizeof name, "model.layers.%u.shared_head.head.weight", L);
	c->hp.mtp_shares_head = shared_copy(c, name, c->hp.tie_embeddings ?
					   "model.embed_tokens.weight" :
					   "lm_head.weight");
	c->stats->n_mtp = c->hp.n_mtp;
}

/* The main model's table, then the MTP layer's. */
static int tables(ctx *c, ds_err *err)
{
	ds_tdesc *m = NULL;
	size_t nm = 0;
	void *p;

	if (ds_arch_tensors(&c->hp, &c->descs, &c->n_descs, err) ||
	    ds_arch_mtp_tensors(&c->hp, &m, &nm, err))
		return -1;
	p = nm ? realloc(c->descs, (c->n_descs + nm) * sizeof *m) : c->descs;
	if (p == NULL) {
		free(m);
		return ds_errf(err, "out of memory");
	}
	c->descs = p;
	if (nm)
		memcpy(c->descs + c->n_descs, m, nm * sizeof *m);
	c->n_descs += nm;
	free(m);
	return 0;
}

static int plan(ctx *c, ds_err *err)
{
	size_t i;

	c->used = ds_calloc(c->st.n_tensors ? c->st.n_tensors : 1, 1, err);
	if (c->used == NULL)
		return -1;
	plan_mtp(c);
	if (tables(c, err))
		return -1;
	c->items = ds_calloc(c->n_descs, sizeof *c->items, err);
	if (c->items == NULL)
		return -1;
	for (i = 0; i < c->n_descs; i++) {
		item *it = &c->items[i];

		it->d = &c->descs[i];
		if (it->d->kind == DS_TK_VECTOR ? plan_vector(c, it, err)
						: plan_matrix(c, it, err))
			return -1;
	}
	return check_leftovers(c, err);
}

/* ---- running it ---------------------------------------------------------------- */

static int cancelled(const ctx *c, ds_err *err)
{
	if (c->o->cancel != NULL && *c->o->cancel)
		return ds_errf(err, "interrupted");
	return 0;
}

/* The output buffer: every byte is written for each matrix, so it is not
 * cleared; huge pages spare a fault per 4 KiB on the first pass. */
static int grow(ctx *c, uint64_t bytes, ds_err *err)
{
	void *p;

	if (bytes <= c->buf_size)
		return 0;
	free(c->buf);
	c->buf = NULL;
	c->buf_size = 0;
	if (posix_memalign(&p, DS_HUGE_2M, bytes) != 0)
		return ds_errf(err, "out of memory for a %llu-byte tensor",
			       (unsigned long long)bytes);
	madvise(p, bytes, MADV_HUGEPAGE);
	c->buf = p;
	c->buf_size = bytes;
	return 0;
}

/* Map a source's pages before use and drop them after, so resident
 * memory stays about one matrix whatever the model's size. */
static void release(const ctx *c, const src *s)
{
	const ds_st_tensor *ts[5] = { s->w, s->q.qweight, s->q.qzeros, s->q.scales,
				      s->scale };
	int i;

	for (i = 0; i < 5; i++)
		if (ts[i] != NULL)
			ds_st_release(&c->st, ts[i]);
}

static void prefetch(const ctx *c, const src *s)
{
	const ds_st_tensor *ts[5] = { s->w, s->q.qweight, s->q.qzeros, s->q.scales,
				      s->scale };
	int i;

	for (i = 0; i < 5; i++)
		if (ts[i] != NULL)
			ds_st_prefetch(&c->st, ts[i]);
}

/* One matrix (one expert) into c->buf; prow (the identity on entry)
 * receives the module's act-order permutation when it has one. */
static int run_source(ctx *c, const item *it, const src *s, int32_t *prow,
		      ds_err *err)
{
	const ds_tdesc *d = it->d;
	uint64_t n = d->ndim == 1 ? 1 : d->shape[d->ndim - 2];
	uint64_t k = d->shape[d->ndim - 1];
	/* threads only pay for themselves on matrices of some size */
	int th = n * k >= PARALLEL_MIN ? c->o->threads : 1;

	prefetch(c, s);
	if (s->scale != NULL) {
		ds_fp8_src f = { .w = s->w->data, .scale = s->scale->data, .n = n,
				 .k = k, .bo = c->qc.block[0], .bi = c->qc.block[1] };

		if (ds_fp8_matrix(c->buf, it->type, &f, th, err))
			return ds_err_prefix(err, "%s: tensor %s", file_of(c, s->w),
					     s->w->name);
		return 0;
	}
	if (s->w != NULL) {
		if (ds_rtn_matrix(c->buf, it->type, s->w->data, s->w->dtype, n, k,
				  th, err))
			return ds_err_prefix(err, "%s", s->w->name);
		return 0;
	}
	return ds_quant_repack(&c->qc, &s->q, it->type, c->buf, prow,
			       &c->stats->q, th, err);
}

static void ident(int32_t *p, uint64_t k)
{
	uint64_t i;

	for (i = 0; i < k; i++)
		p[i] = (int32_t)i;
}

static int write_perm(ctx *c, const item *it, ds_err *err)
{
	const ds_tdesc *d = it->d;
	uint64_t shape[2] = { d->shape[0], d->shape[d->ndim - 1] };
	char name[64];

	snprintf(name, sizeof name, "%s.perm", d->name);
	if (d->ndim == 2)
		shape[0] = d->shape[1];
	return ds_mwriter_tensor(&c->w, name, (ds_ttype){ DS_I32, 0 },
				 d->ndim - 1, shape, c->perm, err);
}

static int run_item(ctx *c, const item *it, ds_err *err)
{
	const ds_tdesc *d = it->d;
	/* one matrix (one expert of a stack), or the vector */
	const uint64_t *one = d->ndim == 3 ? d->shape + 1 : d->shape;
	uint64_t k = d->shape[d->ndim - 1], bytes;
	uint32_t e;

	if (ds_tensor_bytes(it->type, d->ndim == 1 ? 1 : 2, one, &bytes) ||
	    grow(c, bytes, err))
		return ds_errf(err, "%s: too large", d->name);
	if (it->perm) {
		free(c->perm);
		c->perm = ds_calloc((size_t)it->nsrc * k, 4, err);
		if (c->perm == NULL)
			return -1;
	}
	if (ds_mwriter_begin(&c->w, d->name, it->type, d->ndim, d->shape, err))
		return -1;
	for (e = 0; e < it->nsrc; e++) {
		int32_t *prow = it->perm ? c->perm + (size_t)e * k : NULL;

		if (cancelled(c, err))
			return -1;
		if (prow != NULL)
			ident(prow, k);
		if (run_source(c, it, &it->srcs[e], prow, err) ||
		    ds_mwriter_write(&c->w, c->buf, bytes, err))
			return -1;
		release(c, &it->srcs[e]);
		/* the bar moves per expert: a stack of 256 is gigabytes */
		ds_progress_add(&c->prog, 0, it->in_bytes / it->nsrc);
	}
	if (ds_mwriter_end(&c->w, err))
		return -1;
	c->stats->out_bytes += bytes * it->nsrc;
	c->stats->tensors++;
	if (it->perm) {
		if (write_perm(c, it, err))
			return -1;
		c->stats->tensors++;
	}
	ds_progress_add(&c->prog, 1, it->in_bytes % it->nsrc);
	c->stats->in_bytes += it->in_bytes;
	return 0;
}

/* ---- the model meta --------------------------------------------------------------- */

static json_t *quant_meta(const ctx *c)
{
	static const char *const src[] = { "none", "awq", "gptq", "fp8" };
	const char *source = src[c->qc.method];
	ds_ttype t = c->qtype;
	uint32_t bits = c->qc.bits, gs = c->qc.group_size > 0 ?
						 (uint32_t)c->qc.group_size : 0;
	char tn[16];

	if (c->qc.method == DS_QM_FP8 && c->rq == DS_RQ_KEEP) {
		t = (ds_ttype){ DS_BF16, 0 };
		bits = gs = 0;
	} else if ((c->qc.method == DS_QM_NONE && c->rtn_used) ||
		   c->qc.method == DS_QM_FP8) {
		if (c->qc.method == DS_QM_NONE)
			source = "rtn";
		t.dt = c->rq == DS_RQ_Q4 ? DS_Q4 : DS_Q8;
		t.group = c->o->group_size;
		bits = c->rq == DS_RQ_Q4 ? 4 : 8;
		gs = c->o->group_size;
	} else if (c->qc.method == DS_QM_NONE) {
		size_t i;

		/* the type of the first layer's first matrix */
		for (i = 0; i < c->n_descs; i++)
			if (c->items[i].d->kind == DS_TK_MATRIX) {
				t = c->items[i].type;
				break;
			}
		bits = 0;
		gs = 0;
	}
	if ((c->qc.method == DS_QM_AWQ || c->qc.method == DS_QM_GPTQ) &&
	    c->qc.group_size < 0)
		gs = t.group;
	return json_pack("{s:s, s:i, s:i, s:s}", "source", source, "bits",
			 (json_int_t)bits, "group_size", (json_int_t)gs, "type",
			 ds_ttype_name(t, tn));
}

static json_t *model_meta(const ctx *c)
{
	return json_pack("{s:s, s:i, s:s, s:o, s:o}", "format", DS_MODEL_FORMAT,
			 "version", DS_MODEL_VERSION, "arch",
			 ds_arch_name(c->hp.arch), "hparams",
			 ds_hparams_to_json(&c->hp), "quant", quant_meta(c));
}

int ds_convert_extras(const char *src, const char *tmp, json_t *meta,
		      ds_err *err)
{
	/* tokenizer.bin and the meta's "tokenizer" and "chat_template" */
	return ds_tok_convert(src, tmp, meta, err);
}

/* ---- the whole conversion -------------------------------------------------------- */

static int load_config(ctx *c, ds_err *err)
{
	char *p = ds_path_join(c->source.dir, "config.json"), *text = NULL;
	json_error_t jerr;

	if (p == NULL)
		return ds_errf(err, "out of memory");
	if (ds_read_file(p, MAX_CONFIG_BYTES, &text, NULL, err)) {
		free(p);
		return -1;
	}
	free(p);
	c->config = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	free(text);
	if (c->config == NULL)
		return ds_errf(err, "config.json: line %d: %s", jerr.line, jerr.text);
	return ds_hparams_from_hf_json(&c->hp, c->config, "config.json", err);
}

static int run(ctx *c, ds_err *err)
{
	const ds_convert_opts *o = c->o;
	uint64_t total = 0;
	json_t *meta;
	size_t i;
	int rc;

	if (ds_mwriter_open(&c->w, o->dst, o->force, err) ||
	    ds_source_open(&c->source, o->src, o->dst, o->cancel, err) ||
	    load_config(c, err) ||
	    ds_qconfig_detect(&c->qc, c->source.dir, c->config, o->format, err) ||
	    ds_st_open(&c->st, c->source.dir, err))
		return -1;
	c->rq = o->quantize != DS_RQ_AUTO ? o->quantize
		: c->qc.method == DS_QM_FP8 ? DS_RQ_Q8 : DS_RQ_KEEP;
	if (plan(c, err))
		return -1;
	for (i = 0; i < c->n_descs; i++)
		total += c->items[i].in_bytes;
	ds_progress_init(&c->prog, o->progress, "ds-convert",
			 (uint32_t)c->n_descs, total);
	for (i = 0; i < c->n_descs; i++)
		if (run_item(c, &c->items[i], err))
			return -1;
	meta = model_meta(c);
	if (meta == NULL)
		return ds_errf(err, "out of memory");
	rc = ds_convert_extras(c->source.dir, ds_mwriter_dir(&c->w), meta, err);
	if (rc == 0 && cancelled(c, err) == 0)
		rc = ds_mwriter_commit(&c->w, meta, err);
	else
		rc = -1;
	json_decref(meta);
	if (rc == 0)
		ds_progress_done(&c->prog);
	return rc;
}

int ds_convert(const ds_convert_opts *o, ds_convert_stats *stats,
	       ds_err *err)
{
	ctx c;
	double t0 = ds_now_s();
	size_t i;
	int rc;

	memset(&c, 0, sizeof c);
	memset(stats, 0, sizeof *stats);
	c.o = o;
	c.stats = stats;
	c.w.fd = -1;
	c.w.tmp.fd = -1;
	c.source.tmp.fd = -1;
	rc = run(&c, err);
	ds_mwriter_abort(&c.w);
	ds_source_close(&c.source);
	ds_st_free(&c.st);
	json_decref(c.config);
	for (i = 0; c.items != NULL && i < c.n_descs; i++)
		free(c.items[i].srcs);
	free(c.items);
	free(c.descs);
	free(c.used);
	free(c.buf);
	free(c.perm);
	stats->seconds = ds_now_s() - t0;
	return rc;
}

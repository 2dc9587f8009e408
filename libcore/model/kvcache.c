/*
 * kvcache.c - per-slot key/value caches (kvcache.h).
 */
#include "kvcache.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static const char *const kv_names[] = { "f32", "f16", "bf16", "q8" };

int ds_kvtype_parse(const char *s, enum ds_kvtype *t, ds_err *err)
{
	int i;

	for (i = 0; i < 4; i++)
		if (strcmp(s, kv_names[i]) == 0) {
			*t = (enum ds_kvtype)i;
			return 0;
		}
	return ds_errf(err, "cache type \"%.32s\" unknown (f32, f16, bf16, q8)",
		       s);
}

const char *ds_kvtype_name(enum ds_kvtype t)
{
	return (unsigned)t < 4 ? kv_names[t] : "?";
}

/* The per-head widths of hp's cache rows. */
static void kv_shape(const ds_hparams *hp, int *mla, uint32_t *nkv,
		     uint32_t *kd, uint32_t *vd)
{
	*mla = hp->arch == DS_ARCH_DEEPSEEK2;
	if (*mla) {
		*nkv = 1;
		*kd = hp->kv_lora_rank + hp->qk_rope_head_dim;
		*vd = hp->kv_lora_rank;
	} else {
		*nkv = hp->n_head_kv;
		*kd = *vd = hp->head_dim;
	}
}

/* Bytes per position per layer and in all, checked. */
static int kv_bytes(const ds_hparams *hp, uint32_t n_slot, uint32_t n_ctx,
		    enum ds_kvtype t, size_t *pos, size_t *total, ds_err *err)
{
	uint32_t nkv, kd, vd;
	size_t b;
	int mla;

	kv_shape(hp, &mla, &nkv, &kd, &vd);
	if ((unsigned)t > DS_KV_Q8)
		return ds_errf(err, "cache type %d unknown", (int)t);
	if (t == DS_KV_Q8 && (kd % DS_QBLOCK || vd % DS_QBLOCK))
		return ds_errf(err, "cache type q8 needs head widths that are "
			       "multiples of %d (this model: %u, %u)", DS_QBLOCK,
			       kd, vd);
	if (n_slot == 0 || n_ctx == 0)
		return ds_errf(err, "KV cache of %u slots of %u positions",
			       n_slot, n_ctx);
	*pos = nkv * ds_kv_row_bytes(t, kd);
	if (!mla)
		*pos += nkv * ds_kv_row_bytes(t, vd);
	/* slots start on pages, so an emptied one can be given back */
	if (ds_mul_sz(*pos, n_ctx, &b) || ds_mul_sz(b, hp->n_layer, &b) ||
	    b > SIZE_MAX / 2 || ds_mul_sz(ds_round_up(b, 4096), n_slot, &b))
		return ds_errf(err, "KV cache of %u slots of %u positions: size "
			       "overflows", n_slot, n_ctx);
	*total = b;
	return 0;
}

int ds_kvcache_size(const ds_hparams *hp, uint32_t n_slot, uint32_t n_ctx,
		    enum ds_kvtype t, size_t *bytes, ds_err *err)
{
	size_t pos;

	return kv_bytes(hp, n_slot, n_ctx, t, &pos, bytes, err);
}

int ds_kvcache_init(ds_kvcache *kv, const ds_hparams *hp, uint32_t n_slot,
		    uint32_t n_ctx, enum ds_kvtype t, ds_err *err)
{
	void *p;

	memset(kv, 0, sizeof *kv);
	if (kv_bytes(hp, n_slot, n_ctx, t, &kv->pos_bytes, &kv->bytes, err))
		return -1;
	kv_shape(hp, &kv->mla, &kv->n_kv_head, &kv->k_dim, &kv->v_dim);
	kv->type = t;
	kv->n_slot = n_slot;
	kv->n_ctx = n_ctx;
	kv->n_layer = hp->n_layer;
	kv->k_row = ds_kv_row_bytes(t, kv->k_dim);
	kv->v_row = ds_kv_row_bytes(t, kv->v_dim);
	kv->slot_layer_bytes = kv->pos_bytes * n_ctx;
	kv->slot_bytes = ds_round_up(kv->slot_layer_bytes * kv->n_layer, 4096);
	/* anonymous and untouched: a slot costs memory only as its rows are
	 * written, in 2 MiB pages where the kernel has them (a new row is
	 * then seldom a page fault) */
	p = ds_map_anon_huge(kv->bytes);
	if (p == NULL)
		return ds_errf(err, "KV cache: cannot map %zu bytes", kv->bytes);
	kv->data = p;
	kv->len = ds_calloc(n_slot, sizeof *kv->len, err);
	if (kv->len == NULL) {
		ds_kvcache_free(kv);
		return -1;
	}
	return 0;
}

void ds_kvcache_free(ds_kvcache *kv)
{
	if (kv->data != NULL)
		munmap(kv->data, kv->bytes);
	free(kv->len);
	memset(kv, 0, sizeof *kv);
}

void ds_kvcache_layer(const ds_kvcache *kv, uint32_t slot, uint32_t layer,
		      ds_kv *k, ds_kv *v)
{
	uint8_t *base;

	DS_ASSERT(slot < kv->n_slot && layer < kv->n_layer);
	base = kv->data + slot * kv->slot_bytes + layer * kv->slot_layer_bytes;
	k->type = v->type = kv->type;
	k->data = base;
	k->ld = kv->k_row;
	k->head_stride = kv->n_ctx * kv->k_row;
	k->dim = kv->k_dim;
	/* MLA: V is the latent, the first v_dim values of the K row */
	v->data = kv->mla ? base : base + kv->n_kv_head * k->head_stride;
	v->ld = kv->mla ? kv->k_row : kv->v_row;
	v->head_stride = kv->mla ? k->head_stride : kv->n_ctx * kv->v_row;
	v->dim = kv->v_dim;
}

void ds_kvcache_seq_keep(ds_kvcache *kv, uint32_t slot, uint32_t n)
{
	DS_ASSERT(slot < kv->n_slot && n <= kv->len[slot]);
	kv->len[slot] = n;
	if (n == 0)
		madvise(kv->data + slot * kv->slot_bytes, kv->slot_bytes,
			MADV_DONTNEED);
}

/* ---- positions moved whole ------------------------------------------------------ */

size_t ds_kvcache_span(const ds_kvcache *kv, uint32_t n)
{
	return (size_t)kv->n_layer * n * kv->pos_bytes;
}

/* The rows of positions [pos, pos + n) of one slot and layer: for each
 * head its K run, then its V run; fn(run, bytes, arg) for each in the
 * serial order. */
typedef void (*run_fn)(uint8_t *run, size_t bytes, void *arg);

static void layer_runs(const ds_kvcache *kv, uint32_t slot, uint32_t layer,
		       uint32_t pos, uint32_t n, run_fn fn, void *arg)
{
	uint8_t *base = kv->data + slot * kv->slot_bytes + layer * kv->slot_layer_bytes;
	size_t kh = (size_t)kv->n_ctx * kv->k_row, vh = (size_t)kv->n_ctx * kv->v_row;
	uint8_t *v = base + kv->n_kv_head * kh;
	uint32_t h;

	for (h = 0; h < kv->n_kv_head; h++) {
		fn(base + h * kh + (size_t)pos * kv->k_row, (size_t)n * kv->k_row, arg);
		if (!kv->mla)
			fn(v + h * vh + (size_t)pos * kv->v_row, (size_t)n * kv->v_row, arg);
	}
}

static void run_out(uint8_t *run, size_t bytes, void *arg)
{
	uint8_t **p = arg;

	memcpy(*p, run, bytes);
	*p += bytes;
}

static void run_in(uint8_t *run, size_t bytes, void *arg)
{
	const uint8_t **p = arg;

	memcpy(run, *p, bytes);
	*p += bytes;
}

void ds_kvcache_read(const ds_kvcache *kv, uint32_t slot, uint32_t pos,
		     uint32_t n, uint8_t *dst)
{
	uint32_t l;

	DS_ASSERT(slot < kv->n_slot && pos + n <= kv->len[slot]);
	for (l = 0; l < kv->n_layer; l++)
		layer_runs(kv, slot, l, pos, n, run_out, &dst);
}

void ds_kvcache_write(ds_kvcache *kv, uint32_t slot, uint32_t pos,
		      uint32_t n, const uint8_t *src)
{
	uint32_t l;

	DS_ASSERT(slot < kv->n_slot && pos <= kv->len[slot] && pos + n <= kv->n_ctx);
	for (l = 0; l < kv->n_layer; l++)
		layer_runs(kv, slot, l, pos, n, run_in, &src);
	kv->len[slot] = pos + n;
}

void ds_kvcache_copy(ds_kvcache *kv, uint32_t dst, uint32_t src,
		     uint32_t pos, uint32_t n)
{
	size_t kh = (size_t)kv->n_ctx * kv->k_row, vh = (size_t)kv->n_ctx * kv->v_row;
	uint32_t l, h;

	DS_ASSERT(dst < kv->n_slot && src < kv->n_slot && dst != src);
	DS_ASSERT(pos + n <= kv->len[src] && pos <= kv->len[dst]);
	for (l = 0; l < kv->n_layer; l++) {
		size_t lo = l * kv->slot_layer_bytes;
		const uint8_t *from = kv->data + src * kv->slot_bytes + lo;
		uint8_t *to = kv->data + dst * kv->slot_bytes + lo;

		for (h = 0; h < kv->n_kv_head; h++) {
			size_t k = h * kh + (size_t)pos * kv->k_row,
			       v = kv->n_kv_head * kh + h * vh + (size_t)pos * kv->v_row;

			memcpy(to + k, from + k, (size_t)n * kv->k_row);
			if (!kv->mla)
				memcpy(to + v, from + v, (size_t)n * kv->v_row);
		}
	}
	kv->len[dst] = pos + n;
}

/*
 * mat.c - the helpers every ISA's kernels share: views of a weight matrix
 * (ds_mat) and of a batch of activations (ds_act), the transposed scale
 * layout of quantized activations, and the sizes of KV-cache rows.
 *
 * Compiled without target flags, like kernels.c; it calls nothing above
 * it, so the ISA files and the dispatch in kernels.c both stand on it.
 */
#include <stdint.h>
#include <string.h>

#include "kernels.h"

ds_mat ds_mat_make(ds_ttype t, const void *data, uint64_t n, uint64_t k,
		   const int32_t *perm)
{
	ds_mat m;

	m.type = t;
	m.data = data;
	m.n = n;
	m.k = k;
	m.kp = ds_ttype_interleaved(t) ? ds_kpad(t, k) : k;
	m.rs_bytes = ds_ttype_interleaved(t) ? ds_rowset_bytes(t, k) : 0;
	m.perm = perm;
	m.ne = 1;
	m.e_bytes = ds_ttype_interleaved(t) ? m.rs_bytes * ((n + DS_ROWSET - 1) / DS_ROWSET)
					     : n * k * (t.dt == DS_F16 ? 2 : 4);
	return m;
}

ds_mat ds_mat_from_rowset(const ds_mat *w, uint64_t rs0)
{
	ds_mat m = *w;
	uint64_t r0 = rs0 * DS_ROWSET;

	if (ds_ttype_interleaved(w->type))
		m.data += rs0 * w->rs_bytes;
	else
		m.data += r0 * w->k * (w->type.dt == DS_F16 ? 2 : 4);
	m.n = w->n > r0 ? w->n - r0 : 0;
	return m;
}

ds_act ds_act_rows(const ds_act *x, size_t t0, size_t nt)
{
	ds_act r = *x;
	size_t nb = x->ldq / DS_QBLOCK;

	r.t = nt;
	if (x->f)
		r.f = x->f + t0 * x->ldf;
	if (x->b)
		r.b = x->b + t0 * x->ldq;
	if (x->q) {
		r.q = x->q + t0 * x->ldq;
		r.qd = x->qd + t0 * nb;
		r.qs = x->qs + t0 * nb;
	}
	if (x->qt)
		r.qt = x->qt + t0;
	return r;
}

size_t ds_act_qt_ld(size_t rows)
{
	return rows > SIZE_MAX - 31 ? 0 : (rows + 15) / 16 * 16 | 16;
}

size_t ds_act_qt_floats(size_t ldqt, size_t ldq)
{
	const size_t nb = ldq / DS_QBLOCK;

	/* the bytes too must fit a size_t */
	if (nb == 0 || ldqt == 0 || nb > SIZE_MAX / sizeof(float) / 2 ||
	    ldqt > SIZE_MAX / sizeof(float) / (2 * nb))
		return 0;
	return 2 * nb * ldqt;
}

void ds_act_qt_row(float *qt, size_t ldqt, size_t ldq, size_t r, const float *d,
		   const float *s)
{
	const size_t nb = ldq / DS_QBLOCK;
	float *p = qt + r;
	size_t b;

	for (b = 0; b < nb; b++) {
		p[b * ldqt] = d[b];
		p[(nb + b) * ldqt] = DS_Q8_ADDEND(s[b]);
	}
}

size_t ds_kv_row_bytes(enum ds_kvtype t, size_t dim)
{
	switch (t) {
	case DS_KV_F32: return 4 * dim;
	case DS_KV_F16:
	case DS_KV_BF16: return 2 * dim;
	case DS_KV_Q8: return 36 * (dim / DS_QBLOCK);
	}
	return 0;
}

size_t ds_kv_col_offset(enum ds_kvtype t, size_t col)
{
	return ds_kv_row_bytes(t, col);
}

/* ---- packed blocks of keys (ds_attn_blk) ---------------------------------------- */

size_t ds_attn_pack_k_size(size_t nk, size_t kd)
{
	size_t kp2 = kd / 2 + kd % 2;

	if (nk > DS_ATTN_BLK || kp2 > SIZE_MAX / 2 / DS_ATTN_BLK / 2)
		return 0;
	return (nk + 15) / 16 * 16 * kp2 * 2;
}

size_t ds_attn_pack_v_size(size_t nk, size_t vd)
{
	size_t vdp = vd / 16 * 16 + (vd % 16 ? 16 : 0);

	if (nk > DS_ATTN_BLK || vd > SIZE_MAX / 2 / DS_ATTN_BLK / 2 - 16)
		return 0;
	return (nk + 1) / 2 * 2 * vdp;
}

/* Word i (values 2i, 2i+1) of bf16 row r of nc values, the partner
 * past nc zero. */
static uint32_t pack_word(const uint16_t *r, size_t i, size_t nc)
{
	uint32_t lo = r[2 * i], hi = 2 * i + 1 < nc ? r[2 * i + 1] : 0;

	return lo | hi << 16;
}

/* One key's np words into its lane of a group (32 halfwords apart):
 * the row's whole pairs as they are, an odd last value with a zero. */
static void pack_key(uint16_t *g, const uint16_t *r, size_t nc)
{
	size_t i;

	for (i = 0; i < nc / 2; i++)
		memcpy(g + i * 32, r + 2 * i, 4);
	if (nc % 2) {
		uint32_t w = pack_word(r, i, nc);

		memcpy(g + i * 32, &w, 4);
	}
}

void ds_attn_pack_k(uint16_t *k, size_t kd, size_t nk, size_t j0, size_t nj,
		    size_t c0, size_t nc, const uint16_t *src, size_t ld)
{
	size_t kp2 = kd / 2 + kd % 2, end = j0 + nj == nk ? (nk + 15) / 16 * 16 : j0 + nj;
	size_t j, i, np = nc / 2 + nc % 2;

	for (j = j0; j < end; j++) {
		uint16_t *g = k + (j / 16 * kp2 * 16 + c0 / 2 * 16 + j % 16) * 2;

		if (j < j0 + nj) {
			pack_key(g, src + (j - j0) * ld, nc);
			continue;
		}
		for (i = 0; i < np; i++)
			memset(g + i * 32, 0, 4);
	}
}

void ds_attn_pack_v(uint16_t *v, size_t vd, size_t j0, size_t nj, const uint16_t *src,
		    size_t ld)
{
	size_t vdp = vd / 16 * 16 + (vd % 16 ? 16 : 0), j, d;

	for (j = j0; j < j0 + nj; j += 2) {
		const uint16_t *r0 = src + (j - j0) * ld, *r1 = r0 + ld;
		uint16_t *o = v + j / 2 * vdp * 2;

		if (j + 1 < j0 + nj) {
			for (d = 0; d < vd; d++) {
				o[2 * d] = r0[d];
				o[2 * d + 1] = r1[d];
			}
		} else {
			for (d = 0; d < vd; d++) {
				o[2 * d] = r0[d];
				o[2 * d + 1] = 0;
			}
		}
		memset(o + 2 * vd, 0, (vdp - vd) * 4);
	}
}

size_t ds_attn_pack_k8_size(size_t nk, size_t kb)
{
	if (nk > DS_ATTN_BLK || kb > SIZE_MAX / DS_ATTN_BLK / DS_ATTN_Q8_BYTES)
		return 0;
	return (nk + 15) / 16 * kb * DS_ATTN_Q8_BYTES;
}

/* Blocks b0 .. b0+nb-1 of lane l of group g: key values q (NULL: zero)
 * as q + 128, scales d (NULL: 0). */
static void pack_k8_lane(uint8_t *g, size_t l, size_t b0, size_t nb, const int8_t *q,
			 const float *d)
{
	size_t b, i;

	for (b = 0; b < nb; b++) {
		uint8_t *blk = g + (b0 + b) * DS_ATTN_Q8_BYTES;
		float s = d ? d[b] : 0.0f;

		for (i = 0; i < 8; i++) {
			uint32_t w = 0;

			if (q)
				memcpy(&w, q + b * 32 + i * 4, 4);
			w ^= 0x80808080u;       /* + 128 in each byte */
			memcpy(blk + i * 64 + l * 4, &w, 4);
		}
		memcpy(blk + 512 + l * 4, &s, 4);
	}
}

void ds_attn_pack_k8(uint8_t *k, size_t kb, size_t nk, size_t j0, size_t nj, size_t b0,
		     size_t nb, const int8_t *src, size_t ld, const float *d, size_t dld)
{
	size_t end = j0 + nj == nk ? (nk + 15) / 16 * 16 : j0 + nj, j;

	for (j = j0; j < end; j++) {
		uint8_t *g = k + j / 16 * kb * DS_ATTN_Q8_BYTES;

		if (j < j0 + nj)
			pack_k8_lane(g, j % 16, b0, nb, src + (j - j0) * ld, d + (j - j0) * dld);
		else
			pack_k8_lane(g, j % 16, b0, nb, NULL, NULL);
	}
}

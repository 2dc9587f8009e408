/*
 * types.h - the runtime tensor types and their byte layouts (ds-model(5)).
 *
 * Scalar types are stored row-major:      f32, f16, i32.
 * Weight-matrix types are row-set interleaved, so that one 64-byte vector
 * holds data of 16 output rows (one 32-bit lane per row) and a matvec or
 * matmul accumulates 16 rows at once without horizontal sums:
 *
 *   bf16        w = bf16 value
 *   q8gG        w = s * (u - 128),    u in [1, 255], s fp16 per (row, group)
 *   q4gG        w = s * (q - z),      q, z in [0, 15], s fp16, z u8 per (row, group)
 *
 * A [N, K] matrix is ceil(N/16) row-sets; rows past N are zero padding.
 * K is padded to Kp (a multiple of G for q4/q8, of 32 for bf16) with
 * weights that are zero.
 *
 * A q4/q8 row-set is Kp/G groups of G inputs, in segments of DS_QSEG
 * groups (fewer in the last segment).  A segment of n groups is a header
 * and then the n groups' weights, so that a matvec reads one row-set as a
 * single forward stream (a separate stream of scales would start cold in
 * every row-set):
 *
 *   header: scales fp16 [n][16] (group, lane), then for q4 the zero
 *           points u8 [n][16], zero-padded to a multiple of 64 bytes
 *   q4gG:   per group G/8 chunks of 64 bytes; in chunk c (from the
 *           group's first input i0), bytes 4r..4r+3 of lane r are
 *           q[r][i0+8c+j] | q[r][i0+8c+4+j] << 4  (j = 0..3)
 *   q8gG:   per group G/4 chunks of 64 bytes; lane r = u[r][i0+4c..+3]
 *
 * (ds_qgrp_w/_s/_z give the offsets).  A bf16 row-set is Kp/2 chunks of
 * 64 bytes; lane r of chunk c = w[r][2c], w[r][2c+1].  Every row-set's
 * size is a multiple of 64.  A 3-D tensor [E, N, K] (MoE experts) is E
 * such matrices back to back.
 */
#ifndef DS_TYPES_H
#define DS_TYPES_H

#include <stddef.h>
#include <stdint.h>

#define DS_ROWSET 16      /* rows interleaved per row-set */
#define DS_CHUNK 64       /* bytes per interleaved chunk */

enum ds_dtype {
	DS_F32,
	DS_F16,
	DS_BF16,
	DS_Q8,
	DS_Q4,
	DS_I32,
};

/* How RoPE pairs the values of a head (model.meta "rope_style"). */
enum ds_rope_style {
	DS_ROPE_NEOX,          /* pairs (x[i], x[i + dim/2]): Llama, Qwen2 */
	DS_ROPE_INTERLEAVED,   /* pairs (x[2i], x[2i+1]): DeepSeek */
};

typedef struct ds_ttype {
	enum ds_dtype dt;
	uint32_t group; /* q4/q8: group size G (multiple of 32); else 0 */
} ds_ttype;

/* ---- the q4/q8 row-set layout (offsets from the row-set's start) ---------- */

#define DS_QSEG 4         /* groups per segment */

/* Bytes of a segment header of n groups. */
static inline uint64_t ds_qseg_hdr(int is4, uint64_t n)
{
	return (n * (is4 ? 48u : 32u) + 63) & ~(uint64_t)63;
}

/* Bytes of one group's weights. */
static inline uint64_t ds_qgrp_bytes(int is4, uint64_t G)
{
	return G * (is4 ? 8u : 16u);
}

/* Start of the segment that holds group g. */
static inline uint64_t ds_qseg_off(int is4, uint64_t G, uint64_t g)
{
	return g / DS_QSEG * (ds_qseg_hdr(is4, DS_QSEG) + DS_QSEG * ds_qgrp_bytes(is4, G));
}

/* Groups in the segment that holds group g, of ng. */
static inline uint64_t ds_qseg_n(uint64_t ng, uint64_t g)
{
	uint64_t f = g - g % DS_QSEG;

	return ng - f < DS_QSEG ? ng - f : DS_QSEG;
}

/* Group g's weights (its first chunk), scales (16 fp16) and q4 zeros. */
static inline uint64_t ds_qgrp_w(int is4, uint64_t G, uint64_t ng, uint64_t g)
{
	return ds_qseg_off(is4, G, g) + ds_qseg_hdr(is4, ds_qseg_n(ng, g)) +
	       g % DS_QSEG * ds_qgrp_bytes(is4, G);
}

static inline uint64_t ds_qgrp_s(int is4, uint64_t G, uint64_t g)
{
	return ds_qseg_off(is4, G, g) + 32 * (g % DS_QSEG);
}

static inline uint64_t ds_qgrp_z(uint64_t G, uint64_t ng, uint64_t g)
{
	return ds_qseg_off(1, G, g) + 32 * ds_qseg_n(ng, g) + 16 * (g % DS_QSEG);
}

/* Request the first `bytes` of n streams `stride` bytes apart from p, a
 * line of each in turn.  A decode kernel that prefetches the weights a
 * distance ahead block by block leaves out each claim's first distance of
 * every stream and the segment headers between groups; it requests them
 * with this (ds_qseg_fetch): otherwise the header lines (3 of every 19
 * lines of q4g32, 2 of 34 of q8g32) and every claim's first lines reach
 * the core as demand misses.  Unrolled: as a loop in the kernels' group
 * loop it slows decode (docs/perf.md, 2026-12-04 21:15). */
static inline __attribute__((always_inline)) void
ds_fetch_streams(const uint8_t *p, size_t stride, int n, uint64_t bytes)
{
	uint64_t o;
	int i;

#pragma GCC unroll 4
	for (o = 0; o < bytes; o += 64)
#pragma GCC unroll 4
		for (i = 0; i < n; i++)
			__builtin_prefetch(p + (size_t)i * stride + o, 0, 3);
}

/* The segment header of group g in n row-sets rsb bytes apart, as if it
 * lay dist bytes ahead: called at each segment's first group. */
static inline __attribute__((always_inline)) void
ds_qseg_fetch(const uint8_t *rs, size_t rsb, uint64_t G, uint64_t g, int is4,
	      int n, size_t dist)
{
	ds_fetch_streams(rs + ds_qseg_off(is4, G, g) + dist, rsb, n,
			 ds_qseg_hdr(is4, DS_QSEG));
}

/* The 64-byte chunk c of the weights (the inputs 8c.. for q4, 4c.. for q8). */
static inline uint64_t ds_qchunk(int is4, uint64_t G, uint64_t ng, uint64_t c)
{
	uint64_t per = G / (is4 ? 8 : 4);

	return ds_qgrp_w(is4, G, ng, c / per) + 64 * (c % per);
}

/* "f32" "f16" "bf16" "i32" "q8g32" "q4g128" ...; 0 ok, -1 unknown. */
int ds_ttype_parse(const char *s, ds_ttype *t);
/* The name as ds_ttype_parse reads it; buf of at least 16 bytes. */
const char *ds_ttype_name(ds_ttype t, char *buf);
/* 1 for bf16/q8/q4 (row-set interleaved, 2-D or 3-D only). */
int ds_ttype_interleaved(ds_ttype t);

/* Padded input width Kp of an interleaved matrix. */
uint64_t ds_kpad(ds_ttype t, uint64_t k);
/* Bytes of one row-set of an interleaved [*, k] matrix. */
uint64_t ds_rowset_bytes(ds_ttype t, uint64_t k);
/* Bytes of a tensor of this type and shape (ndim 1..4); -1 on overflow or
 * a shape the type cannot hold (interleaved types need ndim 2 or 3). */
int ds_tensor_bytes(ds_ttype t, int ndim, const uint64_t *shape,
		    uint64_t *bytes);

/* ---- packing (ds-convert) --------------------------------------------------
 * Sources are row-major [n][k] by output row; dst must hold
 * ds_tensor_bytes() bytes and is fully written (padding zeroed). */

/* q: values 0..15; scale (fp16 bits) and zero (0..15) per [n][ceil(k/G)];
 * columns past k in the last group are padded with q = z. */
void ds_pack_q4(uint8_t *dst, const uint8_t *q, const uint16_t *scale,
		const uint8_t *zero, uint64_t n, uint64_t k, uint32_t group);
/* q: values -127..127 (stored biased by 128); scale per [n][ceil(k/G)]. */
void ds_pack_q8(uint8_t *dst, const int8_t *q, const uint16_t *scale,
		uint64_t n, uint64_t k, uint32_t group);
void ds_pack_bf16(uint8_t *dst, const uint16_t *w, uint64_t n, uint64_t k);

/* Round-to-nearest quantization of float weights, then packing.
 * q4: asymmetric over [lo, hi] = [min(min, 0), max(max, 0)] (GPTQ's range,
 *     so z never clamps): s = max(hi - lo, 1e-5) / 15, z = round(-lo/s),
 *     q = clamp(round(w/s) + z)  (s rounded to fp16 first so q and z are
 *     chosen for the stored scale); error within half a step.
 * q8: symmetric, s = max|w| / 127, q = round(w/s).
 * Temporary memory is taken per row; returns -1 only on allocation failure. */
int ds_quantize_q4(uint8_t *dst, const float *w, uint64_t n, uint64_t k,
		   uint32_t group);
int ds_quantize_q8(uint8_t *dst, const float *w, uint64_t n, uint64_t k,
		   uint32_t group);

/* ---- reference dequantization (the definition of every layout) ----------
 * Row `row` of the [n, k] matrix at `m` (already offset to the expert for
 * 3-D tensors) as k floats. */
void ds_dequant_row(ds_ttype t, const uint8_t *m, uint64_t k, uint64_t row,
		    float *out);

#endif

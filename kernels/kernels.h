/*
 * kernels.h - the compute kernels, behind one dispatch table.
 *
 * kernels/scalar.c is the definition of every kernel; avx2.c (AVX2 + FMA),
 * avxvnni.c (the same with AVX-VNNI int8 dot products) and avx512.c
 * (F/BW/VL/VNNI/BF16) are optimisations of it, amx.c those of avx512.c's
 * q4 and q8 products that AMX does better, each compiled with its own
 * -m flags and tested against it.  On AArch64 neon.c (Advanced SIMD),
 * dotprod.c (sdot) and i8mm.c (smmla, bfdot) are the same for ARM.  The
 * table is filled once, from CPUID and XGETBV (x86: kernels/cpu_x86.c) or
 * Linux's HWCAP words (AArch64: cpu_arm.c), with the best ISA the CPU and
 * the OS support; DS_ISA=scalar|avx2|avx512|amx (x86) or
 * scalar|neon|dotprod|i8mm (AArch64) in the environment forces one.
 * Where an ISA has no version of a kernel the entry is the next one down
 * (amx -> avx512 -> avx2 -> scalar; i8mm -> dotprod -> neon -> scalar).
 *
 * Kernels are single-threaded and allocate nothing but amx.c's per-call
 * buffers (q4's split weights, a q8g32 scale table the caller did not
 * give); libcore/ops/ops.h splits the work across threads and owns the
 * scratch memory.  Everything here operates on caller memory, with the
 * shapes given in each comment.
 *
 * Matrix products.  y = x . W^T for a weight W [n, k] (ds-model(5) layouts)
 * and T activation rows x [T, k].  The activations are first prepared
 * once per call in the form the weight type consumes (ds_act):
 *
 *   q4gG, q8gG  x rounded to int8 blocks of 32: x[k] ~ d[b] * q[k], with
 *               d = max|x| / 127 over the block and q = round(x / d)
 *               (ties to even).  Error |x - d q| <= d/2 per element.  The
 *               dot products are exact integers (vpdpbusd with the weights
 *               as the unsigned operand); the zero points enter through the
 *               block sums s[b] = d[b] * sum(q over the block):
 *                 y = sum_g S_g * (sum_(b in g) d_b dot_b  -  Z_g sum_(b in g) s_b)
 *               with S_g, Z_g the weight scale and zero (Z = 128 for q8).
 *   bf16        x rounded to bf16 (to nearest even, 8 significant bits): relative
 *               error <= 2^-8 per element; the products are exact in fp32
 *               (vdpbf16ps).
 *   f16, f32    x used as it is, fp32 fused multiply-adds.
 *
 * Batch invariance: a row's result does not depend on the other rows
 * computed with it, on the tiling or on the row-set split (the float
 * operations per output are the same in every code path; tested).
 *
 * Row-sets: the unit of work of a matrix kernel is a row-set of 16 output
 * rows (DS_ROWSET); for the row-major f32/f16 types it is simply rows
 * 16 rs .. 16 rs + 15.  A matrix has ceil(n / 16) row-sets.
 */
#ifndef DS_KERNELS_H
#define DS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "types.h"
#include "base/util.h"

#define DS_QBLOCK 32          /* activation quantization block */
#define DS_NDTYPE (DS_I32 + 1)

enum ds_isa {
	DS_ISA_SCALAR,
	DS_ISA_AVX2,          /* AVX2 + FMA + F16C */
	DS_ISA_AVX2VNNI,      /* the same with AVX-VNNI */
	DS_ISA_AVX512,        /* F, BW, VL, DQ, VNNI, BF16 */
	DS_ISA_AMX,           /* the same with AMX-TILE and AMX-INT8 */
	DS_ISA_NEON,          /* AArch64 Advanced SIMD */
	DS_ISA_DOTPROD,       /* the same with FEAT_DotProd (sdot) */
	DS_ISA_I8MM,          /* ... and FEAT_I8MM (smmla), FEAT_BF16 */
	DS_ISA_COUNT
};

/* One weight matrix [n, k] of a ds-model(5) type (one expert of a 3-D
 * tensor: see ds_mat_expert in ops.h). */
typedef struct ds_mat {
	ds_ttype type;
	const uint8_t *data;   /* the matrix's bytes */
	uint64_t n, k;         /* output rows, input width */
	uint64_t kp;           /* padded width: ds_kpad (== k for f32/f16) */
	uint64_t rs_bytes;     /* bytes per row-set (interleaved types) */
	const int32_t *perm;   /* [k] act-order input permutation or NULL
				  (applied when the activations are prepared) */
	uint64_t ne;           /* experts of a 3-D [ne, n, k] tensor, else 1 */
	uint64_t e_bytes;      /* bytes of one expert's matrix */
} ds_mat;

/* The view of a [n, k] matrix of type t at data (no checks: ds_mat_init in
 * ops.h validates a tensor from a model file). */
ds_mat ds_mat_make(ds_ttype t, const void *data, uint64_t n, uint64_t k,
		   const int32_t *perm);
/* The rows from row-set rs0 on, as a matrix of its own (n - 16 rs0 rows). */
ds_mat ds_mat_from_rowset(const ds_mat *w, uint64_t rs0);

/* T rows of activations prepared for a matrix kernel.  Only the form the
 * weight type reads must be set (see the top of this file). */
typedef struct ds_act {
	size_t t;              /* rows */
	/* f32, f16 weights: x itself */
	const float *f;        /* [t][ldf], k valid */
	size_t ldf;
	/* bf16 weights: x rounded to bf16, zero past k up to the matrix's kp */
	const uint16_t *b;     /* [t][ldq] */
	/* q4, q8 weights: int8 blocks, zero past k up to the matrix's kp */
	const int8_t *q;       /* [t][ldq] */
	const float *qd;       /* [t][ldq / 32] block scale d */
	const float *qs;       /* [t][ldq / 32] d * (sum of the block's q),
				  never -0 (d >= 0) */
	size_t ldq;            /* multiple of 64 */
	/* optional (NULL: none), for q8g32 on tables with act_qt: qd and
	 * -128 qs again, block by block: [2][ldq / 32][ldqt], rows t < ldqt */
	const float *qt;
	size_t ldqt;
} ds_act;

/* The ldqt of a ds_act.qt for rows rows: whole tiles of 16 and an odd
 * number of cache lines from block to block, so that a row's blocks do
 * not all fall in one set of the cache (0 if it overflows; the size of
 * a qt of 0 rows is 0). */
size_t ds_act_qt_ld(size_t rows);
/* Floats of a ds_act.qt of ldqt rows of ldq (0 if they or their bytes
 * overflow a size_t). */
size_t ds_act_qt_floats(size_t ldqt, size_t ldq);
/* Row r's d and s (ldq / 32 of each) into qt (as d and -128 s). */
void ds_act_qt_row(float *qt, size_t ldqt, size_t ldq, size_t r, const float *d,
		   const float *s);

/* The SIMD q4/q8 products' float steps, per group of G inputs (w = S (u -
 * Z), x = d q per 32-block, I a block's exact integer sum of u q):
 *   A = sum over blocks of d I (one FMA each),  acc += S (A - Z sum(d q))
 * except q8 with G = 32, whose zero folds into the block's FMA:
 *   acc += S (d I + (-128 s))  (one FMA; -128 s is exact)
 * Every path of an ISA takes the same steps, so a row's result does not
 * depend on the path (decode, tiles, AMX). */
#define DS_Q8_FOLD(is4, G) (!(is4) && (G) == DS_QBLOCK)
/* that FMA's addend from the block's s */
#define DS_Q8_ADDEND(s) (-128.0f * (s))

/* Rows t0 .. t0+nt-1 of x, as an ds_act of nt rows. */
ds_act ds_act_rows(const ds_act *x, size_t t0, size_t nt);

/* y[t][16 rs + r] = sum_k W[16 rs + r][k] * x[t][k] for t < x->t, the
 * row-sets rs0 <= rs < rs1 and the rows < w->n (rows past n of the last
 * row-set are not written).  y has row stride ldy floats. */
typedef void ds_mm_fn(const ds_mat *w, const ds_act *x, float *y, size_t ldy,
		      size_t rs0, size_t rs1);

/* KV-cache row types.  q8: blocks of 32 values {float d; int8 q[32]}
 * (36 bytes), value = d * q, d = max|x| / 127 as for the activations. */
enum ds_kvtype { DS_KV_F32, DS_KV_F16, DS_KV_BF16, DS_KV_Q8 };

/* Bytes of one cache row of `dim` values (dim a multiple of 32 for q8). */
size_t ds_kv_row_bytes(enum ds_kvtype t, size_t dim);
/* Byte offset of value `col` in a row (col a multiple of 32 for q8). */
size_t ds_kv_col_offset(enum ds_kvtype t, size_t col);

/* Key or value rows of one KV head, as a strided view: value j of the
 * key at position p is element j of the row at data + p * ld.  Views let
 * K and V share rows (MLA: V is the first 512 values of the 576-wide K). */
typedef struct ds_kview {
	enum ds_kvtype type;
	const uint8_t *data;   /* row of position 0 */
	size_t ld;             /* bytes from one position to the next */
	size_t dim;            /* values used per row */
} ds_kview;

/* Scaled dot-product attention of g query heads against one KV head:
 *   o_h = sum_(j<n) softmax_j(scale * q_h . k_j) v_j      h < g
 * in fp32 (scores, softmax and the weighted sum). */
typedef struct ds_attn_job {
	const float *q;        /* g rows of k.dim floats, q + h * q_ld */
	size_t q_ld;
	size_t g;              /* query heads */
	ds_kview k, v;
	size_t n;              /* keys 0 .. n-1, n >= 1 */
	float scale;
	float *o;              /* g rows of v.dim floats, o + h * o_ld */
	size_t o_ld;
	/* Causal rows: 0, every row sees keys 0 .. n-1; else the rows are
	 * consecutive positions of one head and row h sees the keys
	 * j < min(n, diag + h) (diag >= 1).  A masked key's weight is exactly
	 * 0, so a row's result is the one it has alone with its own n. */
	size_t diag;
	/* NULL: the softmax begins and ends in the call.  Else the keys are
	 * one of several consecutive blocks (each but the last a multiple of
	 * DS_ATTN_CHUNK long) over which every row's running maximum and sum
	 * carry, ml[h * ml_ld] and ml[h * ml_ld + 1]: `first` starts them
	 * (and zeroes the outputs, so row h must see a key of it), and no
	 * call divides the outputs by the sum; the caller multiplies them by
	 * 1 / sum after the last block, as the whole call would. */
	float *ml;
	size_t ml_ld;
	int first;
} ds_attn_job;

/* Query rows the ops give the kernel together where each KV head has
 * one query head (MHA): consecutive tokens of one head, as causal rows,
 * so each key row read from the cache serves them all. */
#define DS_ATTN_TOKENS 16

/* Floats of scratch an attention kernel needs for g heads. */
#define DS_ATTN_CHUNK 32
#define DS_ATTN_SCRATCH(g, kdim, vdim) \
	((size_t)(g) * (DS_ATTN_CHUNK + 4) + (size_t)(kdim) + (size_t)(vdim) + 64)

/* MHA over one block of keys packed in bf16 (MLA's MHA form for prompt
 * tokens, whose keys and values are expanded from the latent cache per
 * block anyway): both products as bf16 pairs into fp32 (vdpbf16ps), the
 * layout making every key group and value row a vector load.  The block's
 * up to DS_ATTN_BLK keys, packed by ds_attn_pack_k and ds_attn_pack_v:
 *   K  groups of 16 keys; in group gi, for each pair of values (2i, 2i+1)
 *      the 16 keys' pairs: halfword ((gi * kp2 + i) * 16 + key) * 2 + e,
 *      kp2 = ceil(kd / 2);
 *   V  pairs of keys; in pair jp, value d of the two keys side by side:
 *      halfword (jp * vdp + d) * 2 + (j & 1), vdp = vd rounded up to 16;
 * zero past the nk keys (to a whole group, a whole pair) and past kd, vd.
 *
 * Row t (t < nt, consecutive positions) sees the keys j < n_t = nk, or
 * min(nk, diag + t) for causal rows (diag >= 1), at least one.  With q,
 * k, v the bf16 values and the sums in fp32:
 *   s_j = scale * sum_i q[t][i] k[j][i]
 *   m' = max(m, max_j s_j),  p_j = bf16(e^(s_j - m')),  c = e^(m - m')
 *   l  = c l + sum_j p_j,    o[t] = c o[t] + sum_j p_j v_j
 * the running maximum m and sum l carried in ml[t * ml_ld] and
 * ml[t * ml_ld + 1] (`first`: m = -inf, l = 0, o = 0); the caller divides
 * o by l after the last block, as ds_attn_job's blocks.  The weights p
 * are rounded to bf16 for the second product and summed as rounded, so
 * the division normalizes exactly the weights that were used.
 *
 * Keys in int8 (k8 set; only on kernels whose attn_q8 is set): the first
 * product as vpdpbusd's 4-value sums, twice vdpbf16ps's multiply-adds an
 * instruction.  Each key and query row is cut into kb blocks of 32 values
 * (each of its two parts, the dot product's halves that come from
 * different sources, padded to 32 on its own), every block quantized
 * as quant_row does it (q = round(x / d), d = max|x| / 127):
 *   K8 groups of 16 keys, each of kb blocks of 576 bytes: for quad i
 *      (values 4i .. 4i+3 of the block) 64 bytes, key j's at 4 (j % 16),
 *      each value q + 128 (unsigned); then the 16 keys' d as floats.  Keys
 *      past nk: bytes 128, d 0;
 *   Q8 row t at q8 + t * q8_ld: the kb * 32 values q (signed), then kb
 *      floats d, then kb floats sd = d * sum(q) (quant_row's d and s);
 * and
 *   s_j = scale * sum_b dk[j][b] (dq[t][b] sum_i (k_i + 128) q_i - 128 sd[t][b])
 * with the 4-value sums exact in int32.  The rest is as above. */
#define DS_ATTN_BLK 256
#define DS_ATTN_Q8_BYTES 576    /* a K8 block of 16 keys: 16 * 32 + 16 * 4 */
typedef struct ds_attn_blk {
	const uint16_t *q;     /* nt rows of bf16, q + t * q_ld: kd values,
				  zero to an even count; q_ld even */
	size_t q_ld;
	size_t nt;             /* rows, 1 .. DS_ATTN_TOKENS */
	const uint16_t *k, *v; /* the block, packed */
	size_t kd, vd;         /* key and value widths */
	size_t nk;             /* keys, 1 .. DS_ATTN_BLK */
	size_t diag;
	float scale;
	float *o;              /* nt rows of vd floats, o + t * o_ld */
	size_t o_ld;
	float *ml;             /* [nt] running maximum and sum, ml_ld apart */
	size_t ml_ld;
	int first;
	const uint8_t *k8;     /* or NULL: the block's keys in int8 (K8), k unused */
	const int8_t *q8;      /* with k8: nt rows (Q8), q unused */
	size_t q8_ld;          /* bytes, a multiple of 4 */
	size_t kb;             /* blocks of 32 values a key row */
} ds_attn_blk;

/* Floats of scratch of an attn_blk call (64-byte aligned). */
#define DS_ATTN_BLK_SCRATCH ((size_t)DS_ATTN_TOKENS * DS_ATTN_BLK * 3 / 2 + 64)

/* Halfwords of a packed block of nk keys of kd values (K), of vd (V);
 * 0 if nk > DS_ATTN_BLK or the widths overflow. */
size_t ds_attn_pack_k_size(size_t nk, size_t kd);
size_t ds_attn_pack_v_size(size_t nk, size_t vd);
/* Columns c0 .. c0+nc-1 of the keys j0 .. j0+nj-1, bf16 (key j's at src
 * + (j - j0) * ld), into the packed K of width kd; c0 even, j0 a
 * multiple of 16, j0 + nj a multiple of 16 or nk; the keys past nk (to
 * the group) zero, and past an odd nc the pair's partner.  Packing a
 * block's columns in parts gives the same as at once. */
void ds_attn_pack_k(uint16_t *k, size_t kd, size_t nk, size_t j0, size_t nj,
		    size_t c0, size_t nc, const uint16_t *src, size_t ld);
/* The values of keys j0 .. j0+nj-1, bf16 (src + (j - j0) * ld, vd of
 * them), into the packed V; j0 even, j0 + nj even or the block's end
 * (then the partner of an odd last key zero); the values past vd zero. */
void ds_attn_pack_v(uint16_t *v, size_t vd, size_t j0, size_t nj, const uint16_t *src,
		    size_t ld);

/* Bytes of a K8 block of nk keys of kb blocks; 0 if nk > DS_ATTN_BLK or
 * kb is too large. */
size_t ds_attn_pack_k8_size(size_t nk, size_t kb);
/* Blocks b0 .. b0+nb-1 of the keys j0 .. j0+nj-1 into the K8 block k:
 * key j's nb * 32 quantized values at src + (j - j0) * ld, its nb scales
 * at d + (j - j0) * dld; j0 a multiple of 16, j0 + nj a multiple of 16 or
 * nk (then the keys past nk to the group are packed as zero). */
void ds_attn_pack_k8(uint8_t *k, size_t kb, size_t nk, size_t j0, size_t nj, size_t b0,
		     size_t nb, const int8_t *src, size_t ld, const float *d, size_t dld);

/* enum ds_rope_style is in types.h (shared with the hyper-parameters). */

typedef struct ds_kernels {
	const char *name;      /* ds_isa_name(isa) */
	enum ds_isa isa;

	/* matrix products, indexed by enum ds_dtype (NULL for DS_I32) */
	ds_mm_fn *mm[DS_NDTYPE];
	/* activation rows a product call takes whole: the callers' blocks of
	 * rows are multiples of it (the tiles: 4 and 6 rows, AMX's 16) */
	unsigned mm_rows;
	/* the q8g32 products of act_qt rows or more read ds_act.qt (made for
	 * the call where it is not given); 0: none do */
	unsigned act_qt;

	/* ---- activation preparation, one row ----
	 * The input value i is x[p(i)] * nw[p(i)] * nscale for i < k with
	 * p(i) = perm ? perm[i] : i (nw NULL: no weight, nscale still
	 * applies); zero for k <= i < kp.  kp is a multiple of 32. */
	void (*quant_row)(const float *x, size_t k, size_t kp,
			  const int32_t *perm, const float *nw, float nscale,
			  int8_t *q, float *d, float *s);
	void (*bf16_row)(const float *x, size_t k, size_t kp,
			 const int32_t *perm, const float *nw, float nscale,
			 uint16_t *out);
	/* sum of x[i]^2 (for the fused RMSNorm) */
	float (*sumsq)(const float *x, size_t n);

	/* ---- element-wise and row kernels (any aliasing of y with an input
	 * of the same shape is allowed) ---- */
	/* y = x / sqrt(mean(x^2) + eps) * w */
	void (*rmsnorm)(const float *x, const float *w, size_t n, float eps,
			float *y);
	/* in place, max-subtracted, fp32 */
	void (*softmax)(float *x, size_t n);
	/* h = silu(g) * u, silu(z) = z / (1 + e^-z) */
	void (*silu_mul)(const float *g, const float *u, size_t n, float *h);
	void (*add)(const float *a, const float *b, size_t n, float *y);
	/* y += a * x */
	void (*axpy)(float a, const float *x, size_t n, float *y);
	/* Rotate nh heads of one token in place: head h is the dim values at
	 * x + h * hs; cs holds cos[dim/2] then sin[dim/2] (already multiplied
	 * by the attention factor).  Pair i is rotated by angle i. */
	void (*rope)(float *x, size_t nh, size_t hs, size_t dim,
		     const float *cs, enum ds_rope_style style);

	/* ---- gather, KV cache, attention ---- */
	/* Row `row` of the [n, k] matrix w (any type) as k floats. */
	void (*dequant_row)(const ds_mat *w, uint64_t row, float *out);
	/* x[n] -> one cache row of type t (n a multiple of 32 for q8). */
	void (*kv_store)(enum ds_kvtype t, const float *x, size_t n, void *dst);
	/* One cache row of type t back as n floats (out[0 .. n-1] only). */
	void (*kv_load)(enum ds_kvtype t, const void *src, size_t n, float *out);
	/* scratch: DS_ATTN_SCRATCH(j->g, j->k.dim, j->v.dim) floats, 64-byte
	 * aligned */
	void (*attn)(const ds_attn_job *j, float *scratch);
	/* scratch: DS_ATTN_BLK_SCRATCH floats, 64-byte aligned */
	void (*attn_blk)(const ds_attn_blk *j, float *scratch);
	/* 1: attn_blk takes int8 keys (k8), at a higher rate than bf16 ones;
	 * 0: the forward pass gives it bf16 keys only (scalar's takes int8
	 * ones too, as the reference) */
	int attn_q8;

	/* ---- measurement probes (ds-bench) ---- */
	/* Read n bytes (a multiple of 256) with the widest loads; the result
	 * only keeps the loads from being optimized away. */
	uint64_t (*read_probe)(const uint8_t *p, size_t n);
	/* `iters` rounds of independent dot-product instructions of one
	 * kind (DS_PEAK_*); returns the multiply-adds done. */
	uint64_t (*peak_probe)(int kind, uint64_t iters);
} ds_kernels;

enum {
	DS_PEAK_INT8,   /* u8 x s8 (vpdpbusd; vpmaddubsw + vpmaddwd on AVX2;
			   tdpbsud on AMX) */
	DS_PEAK_BF16,   /* bf16 pairs (vdpbf16ps; FMA on bf16 widened to fp32) */
	DS_PEAK_FP32,   /* fp32 FMA */
};

/* Choose the table (once; later calls return the first outcome): DS_ISA
 * if set, else the best the CPU has.  -1 if DS_ISA names an unknown ISA
 * or one this CPU lacks. */
int ds_kernels_init(ds_err *err);
/* The chosen table; ds_kernels_init must have succeeded. */
const ds_kernels *ds_kernels_get(void);
/* The chosen ISA's name, as `ds-run --verbose` and ds-bench print it. */
const char *ds_kernels_name(void);
/* The table of one ISA, or NULL if this CPU (or OS) lacks it.  For tests
 * and benchmarks. */
const ds_kernels *ds_kernels_isa(enum ds_isa isa);
/* 1 if the CPU and OS support the ISA. */
int ds_isa_supported(enum ds_isa isa);
/* "scalar", "avx2", "avx2+avxvnni", "avx512", "avx512+amx", "neon",
 * "dotprod", "dotprod+i8mm" */
const char *ds_isa_name(enum ds_isa isa);

/* Per-ISA table constructors (kernels/<isa>.c): each fills the entries it
 * has and leaves the others as they were (the next ISA down's). */
void ds_kernels_fill_scalar(ds_kernels *k);
void ds_kernels_fill_avx2(ds_kernels *k);
void ds_kernels_fill_avxvnni(ds_kernels *k);
void ds_kernels_fill_avx512(ds_kernels *k);
void ds_kernels_fill_amx(ds_kernels *k);
void ds_kernels_fill_neon(ds_kernels *k);
void ds_kernels_fill_dotprod(ds_kernels *k);
void ds_kernels_fill_i8mm(ds_kernels *k);
/* avx512.c's products with the AMX Xeons' decode streams, which amx.c
 * calls for what it leaves (and for bf16), and its peaks. */
ds_mm_fn ds_avx512x_mm_q4, ds_avx512x_mm_q8, ds_avx512x_mm_bf16;
uint64_t ds_avx512_peak_probe(int kind, uint64_t iters);
/* dotprod.c's q4 and q8 products (sdot), which i8mm.c decodes with, and
 * its peaks. */
ds_mm_fn ds_dotprod_mm_q4, ds_dotprod_mm_q8;
uint64_t ds_dotprod_peak_probe(int kind, uint64_t iters);

#endif

/*
 * quant.h - reading quantized checkpoints (AutoAWQ GEMM, AutoGPTQ /
 * GPTQModel) and re-packing weights into the runtime types of
 * kernels/types.h; round-to-nearest quantization of float weights.
 *
 * Source layouts (docs/formats/awq.md, gptq.md), for a linear layer y = x W^T
 * with K inputs, N outputs, group size g, G groups:
 *   AWQ GEMM  qweight I32 [K, N/8] (nibble i of word c = column 8c +
 *             {0,2,4,6,1,3,5,7}[i]), qzeros I32 [G, N/8] (same order),
 *             scales F16 [G, N];  w = s (q - z).
 *   GPTQ      qweight I32 [K b/32, N] (field i of word r = input
 *             r 32/b + i), qzeros I32 [G, N b/32] (field i = column),
 *             scales F16 [G, N], g_idx I32 [K];  w = s (q - z) with
 *             z = stored + 1 (checkpoint_format "gptq") or stored
 *             ("gptq_v2").
 * Runtime: q4gG keeps q, z, s unchanged (exact); GPTQ 8-bit goes to q8gG:
 * a symmetric group (z = 128) is exact except that q = 0 (-128 s, outside
 * q8's [1, 255]) becomes -127 s; an asymmetric group is re-quantized
 * (symmetric, round to nearest).  Both are counted in ds_qstats.
 * GPTQ act-order whose groups are not contiguous: the input channels are
 * sorted by group (stable) and perm[k] gives the original channel of
 * position k (the NAME.perm tensor of ds-model(5)).
 */
#ifndef DS_QUANT_H
#define DS_QUANT_H

#include <stdint.h>

#include "format/safetensors.h"
#include "kernels/types.h"
#include "base/util.h"

struct json_t;

enum ds_qmethod { DS_QM_NONE, DS_QM_AWQ, DS_QM_GPTQ, DS_QM_FP8 };
/* --quant-format */
enum ds_qformat { DS_QF_AUTO, DS_QF_AWQ, DS_QF_GPTQ, DS_QF_NONE, DS_QF_FP8 };

typedef struct ds_qconfig {
	enum ds_qmethod method;
	uint32_t bits;          /* 4 (AWQ, GPTQ) or 8 (GPTQ) */
	int32_t group_size;     /* -1: one group over all inputs */
	int zero_point;         /* AWQ: asymmetric (true is the only packing) */
	int sym;                /* GPTQ: symmetric */
	int desc_act;           /* GPTQ: act-order */
	int v2;                 /* GPTQ: zeros stored as is (gptq_v2) */
	char file[40];          /* where the settings were found */
	char variant[24];       /* "gemm", "gptq", "gptq_v2", "e4m3" */
	uint32_t block[2];      /* FP8: weight_block_size [out, in] */
} ds_qconfig;

/* Find the quantization settings: config.json's quantization_config
 * (cfg, may be NULL), else quantize_config.json, else quant_config.json
 * in dir.  Unsupported methods and variants (AWQ GEMV / GEMV-fast /
 * Marlin, GPTQ 2/3-bit, Marlin, EXL2, FP8, "dynamic" overrides ...) are
 * errors naming them.  `want` other than AUTO must agree. */
int ds_qconfig_detect(ds_qconfig *q, const char *dir,
		      const struct json_t *cfg, enum ds_qformat want,
		      ds_err *err);

/* One quantized linear layer of a checkpoint. */
typedef struct ds_qlinear {
	const ds_st *st;                 /* for file names in messages */
	const char *module;              /* "model.layers.0.self_attn.q_proj" */
	const ds_st_tensor *qweight, *qzeros, *scales, *g_idx; /* g_idx: opt. */
	uint64_t n, k;                   /* out_features, in_features */
} ds_qlinear;

typedef struct ds_qstats {
	uint64_t groups;        /* (row, group) pairs converted */
	uint64_t requantized;   /* of which re-quantized (GPTQ 8-bit asym) */
	uint64_t clamped;       /* GPTQ 8-bit weights -128 s made -127 s */
} ds_qstats;

/* Check the module's tensors against n, k and the settings; give the
 * runtime type and whether a perm companion is needed. */
int ds_quant_check(const ds_qconfig *q, const ds_qlinear *l, ds_ttype *rt,
		   int *needs_perm, ds_err *err);
/* Re-pack into dst (ds_tensor_bytes of rt [n, k]) and, when needed,
 * perm[k]; adds to *stats.  Call ds_quant_check first. */
int ds_quant_repack(const ds_qconfig *q, const ds_qlinear *l, ds_ttype rt,
		    uint8_t *dst, int32_t *perm, ds_qstats *stats, int threads,
		    ds_err *err);

/* ---- the raw re-packers (also used by the tests) --------------------------
 * Pointers are the tensors' little-endian bytes, possibly unaligned.
 * gsrc: the source group size (k for one group).  gr: the runtime group. */

/* AWQ GEMM -> q4g<gr>; -1 on allocation failure. */
int ds_awq_repack(uint8_t *dst, const uint8_t *qweight,
		  const uint8_t *qzeros, const uint8_t *scales, uint64_t n,
		  uint64_t k, uint64_t gsrc, uint32_t gr, int threads);
/* GPTQ (bits 4 or 8) -> q4g<gr> / q8g<gr>; perm: the act-order order of
 * the inputs (NULL: in order).  stats must not be NULL.  Returns -1 on
 * allocation failure. */
int ds_gptq_repack(uint8_t *dst, const uint8_t *qweight,
		   const uint8_t *qzeros, const uint8_t *scales,
		   const int32_t *perm, uint64_t n, uint64_t k, uint64_t gsrc,
		   uint32_t gr, uint32_t bits, int v2, int threads,
		   ds_qstats *stats);
/* The permutation act-order needs: stable sort of 0..k-1 by g_idx, each
 * group then holding exactly gsrc channels (the last may be short).
 * Returns 1 if it is the identity (no perm needed), 0 if not, -1 if the
 * groups are not of that form. */
int ds_gptq_perm(const int32_t *g_idx, uint64_t k, uint64_t gsrc,
		 uint64_t ngroups, int32_t *perm);

/* ---- float sources (rtn.c) --------------------------------------------------- */

/* Convert a float [n, k] matrix (F32, F16 or BF16 bytes) to type t:
 * f32, f16 (from F16/F32), bf16 (from BF16/F32), or q8/q4 by
 * round-to-nearest (ds_quantize_q8/q4). */
int ds_rtn_matrix(uint8_t *dst, ds_ttype t, const uint8_t *src,
		  enum ds_st_dtype dt, uint64_t n, uint64_t k, int threads,
		  ds_err *err);
/* Any float tensor of `count` elements to f32. */
void ds_to_f32(float *dst, const uint8_t *src, enum ds_st_dtype dt,
	       uint64_t count);
/* 1 for F32, F16, BF16. */
int ds_st_is_float(enum ds_st_dtype dt);

/* ---- FP8 sources (fp8.c; docs/formats/fp8.md) ---------------------------------
 * DeepSeek-V3's block-scaled FP8: a weight [n, k] of F8_E4M3 (e4m3fn) codes
 * and its weight_scale_inv, F32 [ceil(n/bo), ceil(k/bi)]; weight (r, c) is
 * the code's value times the scale of block (r/bo, c/bi), computed in f32
 * (exact up to that one product's rounding). */

/* The value of an e4m3fn code: 0x7f and 0xff are NaN, the rest finite
 * (largest 448), subnormals below 2^-6. */
float ds_fp8_e4m3_value(uint8_t code);

typedef struct ds_fp8_src {
	const uint8_t *w;        /* [n][k] codes */
	const uint8_t *scale;    /* [ceil(n/bo)][ceil(k/bi)] F32, unaligned */
	uint64_t n, k;
	uint32_t bo, bi;         /* block rows (outputs) and columns (inputs) */
} ds_fp8_src;

/* Dequantize into t: bf16 (round to nearest even), q8 or q4 by
 * round-to-nearest (ds_quantize_q8/q4).  A NaN code or a scale that is
 * not finite is an error naming its position ("NaN code 0x7f at [r, c]"). */
int ds_fp8_matrix(uint8_t *dst, ds_ttype t, const ds_fp8_src *s, int threads,
		  ds_err *err);
/* Rows [r0, r0 + rows) as f32 into out[rows][k]; -1 and bad_r, bad_c at
 * the first NaN code, -2 at the first scale that is not finite (bad_r,
 * bad_c: its block). */
int ds_fp8_rows(float *out, const ds_fp8_src *s, uint64_t r0, uint64_t rows,
		uint64_t *bad_r, uint64_t *bad_c);

#endif

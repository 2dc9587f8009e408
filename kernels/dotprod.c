/*
 * dotprod.c - the q4 and q8 matrix products with FEAT_DotProd (sdot by
 * element: 16 int8 products a vector, summed into the four rows' 32-bit
 * lanes), for the AArch64 CPUs that have it (Neoverse N1 and later,
 * Cortex-A55/A76 and later, Apple's); the rest of the table is neon.c's.
 * Compiled with KFLAGS_dotprod: the only file with sdot besides i8mm.c.
 */
#include <arm_neon.h>
#include <string.h>

#include "kernels.h"
#include "arm.h"

#define Q_SDOT 1
#define Q_BF16 0      /* no bf16 products here: neon.c's */
#include "neon_q.h"

/* (exported: i8mm.c decodes with them) */
void ds_dotprod_mm_q4(const ds_mat *w, const ds_act *x, float *y, size_t ldy, size_t rs0,
		      size_t rs1)
{
	if (x->t == 1)
		q_vecs(w, x, y, rs0, rs1, 1);
	else
		q_mm_tiles(w, x, y, ldy, rs0, rs1, 1);
}

void ds_dotprod_mm_q8(const ds_mat *w, const ds_act *x, float *y, size_t ldy, size_t rs0,
		      size_t rs1)
{
	if (x->t == 1)
		q_vecs(w, x, y, rs0, rs1, 0);
	else
		q_mm_tiles(w, x, y, ldy, rs0, rs1, 0);
}


AI int32x4_t sdot_step(int32x4_t acc, int8x16_t w, int8x16_t x)
{
	return vdotq_s32(acc, w, x);
}

/* The peaks (arm.h): int8 by sdot, 16 products an instruction. */
uint64_t ds_dotprod_peak_probe(int kind, uint64_t iters)
{
	if (kind == DS_PEAK_INT8) {
		peak_s32(iters, sdot_step, vdupq_n_s8(3), vdupq_n_s8(5), 0);
		return iters * PEAK_ACC * 16;
	}
	peak_f32(iters, fma_f32, vdupq_n_f32(1.0f), vdupq_n_f32(1e-9f));
	return iters * PEAK_ACC * 4;
}

void ds_kernels_fill_dotprod(ds_kernels *k)
{
	k->name = "dotprod";
	k->isa = DS_ISA_DOTPROD;
	k->mm[DS_Q8] = ds_dotprod_mm_q8;
	k->mm[DS_Q4] = ds_dotprod_mm_q4;
	k->peak_probe = ds_dotprod_peak_probe;
}

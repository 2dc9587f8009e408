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

/* PEAK_ACC independent accumulators in named registers hide each sdot's
 * latency (neon.c's loop). */
#define PEAK_ACC 10
#define KEEP(v) __asm__ volatile("" : "+w"(v))
#define STEP(A) A = OP(A); KEEP(A)
#define PEAK_LOOP(T, init)                                                  \
	do {                                                                \
		T a0 = init, a1 = init, a2 = init, a3 = init, a4 = init;     \
		T a5 = init, a6 = init, a7 = init, a8 = init, a9 = init;     \
		for (i = 0; i < iters; i++) {                               \
			STEP(a0); STEP(a1); STEP(a2); STEP(a3); STEP(a4);    \
			STEP(a5); STEP(a6); STEP(a7); STEP(a8); STEP(a9);    \
		}                                                           \
	} while (0)

uint64_t ds_dotprod_peak_probe(int kind, uint64_t iters)
{
	int8x16_t w = vdupq_n_s8(3), x = vdupq_n_s8(5);
	float32x4_t fw = vdupq_n_f32(1.0f), fx = vdupq_n_f32(1e-9f);
	uint64_t i;

	if (kind == DS_PEAK_INT8) {
#define OP(A) vdotq_s32(A, w, x)
		PEAK_LOOP(int32x4_t, vdupq_n_s32(1));
#undef OP
		return iters * PEAK_ACC * 16;
	}
#define OP(A) vfmaq_f32(fx, A, fw)
	PEAK_LOOP(float32x4_t, vdupq_n_f32(1.0f));
#undef OP
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

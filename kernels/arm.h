/*
 * arm.h - the loop behind each AArch64 kernel file's peak_probe, as
 * x86.h's for x86.
 *
 * A peak loop keeps PEAK_ACC independent accumulators, enough to hide an
 * instruction's latency, in named variables (an array of them is kept in
 * memory), each passed through an empty asm after its step so the steps
 * cannot be merged or dropped.  The step is an always-inline function
 * given by its address: the loop is inlined where that address is a
 * constant, so the step is inlined too.
 */
#ifndef DS_ARM_H
#define DS_ARM_H

#include <arm_neon.h>
#include <stdint.h>

#define AI static inline __attribute__((always_inline))
#define PEAK_ACC 10

typedef int32x4_t peak_s32_fn(int32x4_t acc, int8x16_t w, int8x16_t x);
typedef float32x4_t peak_f32_fn(float32x4_t acc, float32x4_t w, float32x4_t x);

AI void keep_s32(int32x4_t *v)
{
	__asm__ volatile("" : "+w"(*v));
}

AI void keep_s8(int8x16_t *v)
{
	__asm__ volatile("" : "+w"(*v));
}

AI void keep_f32(float32x4_t *v)
{
	__asm__ volatile("" : "+w"(*v));
}

/* keep_w: touch w every round, for a step whose first instructions do
 * not depend on the accumulator (neon's smull), which the compiler would
 * otherwise hoist out of the loop. */
AI void peak_s32(uint64_t iters, peak_s32_fn *op, int8x16_t w, int8x16_t x,
		 const int keep_w)
{
	int32x4_t a0 = vdupq_n_s32(1), a1 = a0, a2 = a0, a3 = a0, a4 = a0;
	int32x4_t a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0;
	int32x4_t *acc[PEAK_ACC] = { &a0, &a1, &a2, &a3, &a4, &a5, &a6, &a7, &a8, &a9 };
	uint64_t i;
	int j;

	for (i = 0; i < iters; i++)
		#pragma GCC unroll 10
		for (j = 0; j < PEAK_ACC; j++) {
			if (keep_w)
				keep_s8(&w);
			*acc[j] = op(*acc[j], w, x);
			keep_s32(acc[j]);
		}
}

AI void peak_f32(uint64_t iters, peak_f32_fn *op, float32x4_t w, float32x4_t x)
{
	float32x4_t a0 = vdupq_n_f32(1.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0;
	float32x4_t a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0;
	float32x4_t *acc[PEAK_ACC] = { &a0, &a1, &a2, &a3, &a4, &a5, &a6, &a7, &a8, &a9 };
	uint64_t i;
	int j;

	for (i = 0; i < iters; i++)
		#pragma GCC unroll 10
		for (j = 0; j < PEAK_ACC; j++) {
			*acc[j] = op(*acc[j], w, x);
			keep_f32(acc[j]);
		}
}

/* acc * w + x: the fp32 peak's step (x small, so acc stays finite). */
AI float32x4_t fma_f32(float32x4_t acc, float32x4_t w, float32x4_t x)
{
	return vfmaq_f32(x, acc, w);
}

#endif

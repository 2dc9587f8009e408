/*
 * x86.h - what the x86 kernel files share: the always-inline marker, and
 * the loop behind each file's peak_probe.
 *
 * A peak loop keeps PEAK_ACC independent accumulators, enough to hide an
 * instruction's latency, in named variables (an array of them is kept in
 * memory), each passed through an empty asm after its step so the steps
 * cannot be merged or dropped.  The step is an always-inline function
 * given by its address: the loop is inlined where that address is a
 * constant, so the step is inlined too.
 */
#ifndef DS_X86_H
#define DS_X86_H

#include <immintrin.h>
#include <stdint.h>

#define AI static inline __attribute__((always_inline))
#define PEAK_ACC 10

typedef __m256i peak_i256_fn(__m256i acc, __m256i w, __m256i x);
typedef __m256 peak_f256_fn(__m256 acc, __m256 w, __m256 x);

AI void keep_i256(__m256i *v)
{
	__asm__ volatile("" : "+x"(*v));
}

AI void keep_f256(__m256 *v)
{
	__asm__ volatile("" : "+x"(*v));
}

/* keep_w: touch w every round, for a step whose first instructions do
 * not depend on the accumulator (vpmaddubsw), which the compiler would
 * otherwise hoist out of the loop. */
AI void peak_i256(uint64_t iters, peak_i256_fn *op, __m256i w, __m256i x,
		  const int keep_w)
{
	__m256i a0 = _mm256_set1_epi32(1), a1 = a0, a2 = a0, a3 = a0, a4 = a0;
	__m256i a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0;
	__m256i *acc[PEAK_ACC] = { &a0, &a1, &a2, &a3, &a4, &a5, &a6, &a7, &a8, &a9 };
	uint64_t i;
	int j;

	for (i = 0; i < iters; i++)
		#pragma GCC unroll 10
		for (j = 0; j < PEAK_ACC; j++) {
			if (keep_w)
				keep_i256(&w);
			*acc[j] = op(*acc[j], w, x);
			keep_i256(acc[j]);
		}
}

AI void peak_f256(uint64_t iters, peak_f256_fn *op, __m256 w, __m256 x)
{
	__m256 a0 = _mm256_set1_ps(1.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0;
	__m256 a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0;
	__m256 *acc[PEAK_ACC] = { &a0, &a1, &a2, &a3, &a4, &a5, &a6, &a7, &a8, &a9 };
	uint64_t i;
	int j;

	for (i = 0; i < iters; i++)
		#pragma GCC unroll 10
		for (j = 0; j < PEAK_ACC; j++) {
			*acc[j] = op(*acc[j], w, x);
			keep_f256(acc[j]);
		}
}

AI __m256 fma256(__m256 acc, __m256 w, __m256 x)
{
	return _mm256_fmadd_ps(acc, w, x);
}

#endif

/*
 * avxvnni.c - the q4 and q8 matrix kernels with AVX-VNNI (256-bit
 * vpdpbusd, VEX encoded), for CPUs with AVX2 and AVX-VNNI; the rest of the
 * avx2 table is avx2.c's.  Compiled with KFLAGS_avxvnni: the only file
 * that may contain AVX-VNNI instructions besides avx512.c.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels.h"

#define QDOT(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#define Q8DOT(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#define Q8_BIAS 128.0f
#define QDOT_ANY_U8   /* vpdpbusd: no 16-bit intermediate to saturate */
#include "x86_q256.h"

/* PEAK_ACC independent accumulators in named registers (an array would
 * be kept in memory) hide each instruction's latency. */
#define PEAK_ACC 10
#define KEEP(v) __asm__ volatile("" : "+x"(v))
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

static uint64_t peak_probe(int kind, uint64_t iters)
{
	__m256i w = _mm256_set1_epi8(3), x = _mm256_set1_epi8(5);
	__m256 fw = _mm256_set1_ps(1.0f), fx = _mm256_set1_ps(1e-9f);
	uint64_t i;

	if (kind == DS_PEAK_INT8) {
#define OP(A) _mm256_dpbusd_avx_epi32(A, w, x)
		PEAK_LOOP(__m256i, _mm256_set1_epi32(1));
#undef OP
		return iters * PEAK_ACC * 32;
	}
#define OP(A) _mm256_fmadd_ps(A, fw, fx)
	PEAK_LOOP(__m256, _mm256_set1_ps(1.0f));
#undef OP
	return iters * PEAK_ACC * 8;
}

void ds_kernels_fill_avxvnni(ds_kernels *k)
{
	k->name = "avx2+avxvnni";
	k->isa = DS_ISA_AVX2VNNI;
	k->mm[DS_Q8] = mm_q8;
	k->mm[DS_Q4] = mm_q4;
	k->peak_probe = peak_probe;
}

/*
 * avxvnni.c - the q4 and q8 matrix kernels with AVX-VNNI (256-bit
 * vpdpbusd, VEX encoded), for CPUs with AVX2 and AVX-VNNI; the rest of the
 * avx2 table is avx2.c's.  Compiled with KFLAGS_avxvnni: the only file
 * that may contain AVX-VNNI instructions besides avx512.c.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels.h"

#include "x86.h"

/* The int8 steps of x86_q256.h's products: vpdpbusd takes any u8, so q8
 * keeps its bias (removed through the block sums). */
enum { Q_ANY_U8 = 1, Q_DOT16 = 0 };
static const float q8_bias = 128.0f;

AI __m256i q_dot(__m256i acc, __m256i u, __m256i s)
{
	return _mm256_dpbusd_avx_epi32(acc, u, s);
}

AI __m256i q8_dot(__m256i acc, __m256i u, __m256i s)
{
	return _mm256_dpbusd_avx_epi32(acc, u, s);
}

#include "x86_q256.h"

/* The peaks (x86.h). */
static uint64_t peak_probe(int kind, uint64_t iters)
{
	if (kind == DS_PEAK_INT8) {
		peak_i256(iters, q_dot, _mm256_set1_epi8(3), _mm256_set1_epi8(5), 0);
		return iters * PEAK_ACC * 32;
	}
	peak_f256(iters, fma256, _mm256_set1_ps(1.0f), _mm256_set1_ps(1e-9f));
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

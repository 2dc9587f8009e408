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
#include "x86_q256.h"

void ds_kernels_fill_avxvnni(ds_kernels *k)
{
	k->name = "avx2+avxvnni";
	k->isa = DS_ISA_AVX2VNNI;
	k->mm[DS_Q8] = mm_q8;
	k->mm[DS_Q4] = mm_q4;
}

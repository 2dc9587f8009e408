/*
 * cpu_x86.c - the x86-64 ISAs: CPUID and XGETBV, AMX's permission, the
 * tables of avx2.c, avxvnni.c, avx512.c and amx.c (kernels/cpu.h).
 * Compiled without target flags: nothing here may run an instruction the
 * CPU might lack.
 */
#include <cpuid.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cpu.h"

const char ds_cpu_isa_list[] = "scalar, avx2, avx512 or amx";

static uint64_t xgetbv0(void)
{
	uint32_t lo, hi;

	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return (uint64_t)hi << 32 | lo;
}

/* AMX's tile data is state the process must ask Linux for before its
 * first tile instruction (arch_prctl ARCH_REQ_XCOMP_PERM, feature 18,
 * XTILEDATA); granted once for all its threads. */
static int amx_permitted(void)
{
#ifdef SYS_arch_prctl
	return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
	return 0;
#endif
}

void ds_cpu_detect(int *supported)
{
	unsigned a, b, c, d, b7 = 0, c7 = 0, d7 = 0, a71 = 0;
	uint64_t xcr0 = 0;
	int avx, avx2, vnni256, avx512;

	if (!__get_cpuid(1, &a, &b, &c, &d))
		return;
	/* OSXSAVE before XGETBV; AVX, FMA, F16C */
	avx = (c & (1u << 27)) && (c & (1u << 28)) && (c & (1u << 12)) &&
	      (c & (1u << 29));
	if (avx)
		xcr0 = xgetbv0();
	if (__get_cpuid_count(7, 0, &a, &b7, &c7, &d7))
		__get_cpuid_count(7, 1, &a71, &b, &c, &d);
	/* the OS saves XMM and YMM state */
	avx2 = avx && (xcr0 & 0x6) == 0x6 && (b7 & (1u << 5));
	vnni256 = avx2 && (a71 & (1u << 4));
	/* ... and opmask, ZMM0-15 upper halves, ZMM16-31 */
	avx512 = avx2 && (xcr0 & 0xe6) == 0xe6 &&
		 (b7 & (1u << 16)) &&      /* F */
		 (b7 & (1u << 17)) &&      /* DQ */
		 (b7 & (1u << 30)) &&      /* BW */
		 (b7 & (1u << 31)) &&      /* VL */
		 (c7 & (1u << 11)) &&      /* VNNI */
		 (a71 & (1u << 5));        /* BF16 */
	supported[DS_ISA_AVX2] = avx2;
	supported[DS_ISA_AVX2VNNI] = vnni256;
	supported[DS_ISA_AVX512] = avx512;
	/* AMX-TILE and AMX-INT8; the OS enables XTILECFG and XTILEDATA */
	supported[DS_ISA_AMX] = avx512 && (d7 & (1u << 24)) && (d7 & (1u << 25)) &&
				(xcr0 & 0x60000) == 0x60000 && amx_permitted();
}

void ds_cpu_fill(ds_kernels *tables, const int *supported)
{
	if (supported[DS_ISA_AVX2]) {
		tables[DS_ISA_AVX2] = tables[DS_ISA_SCALAR];
		ds_kernels_fill_avx2(&tables[DS_ISA_AVX2]);
	}
	if (supported[DS_ISA_AVX2VNNI]) {
		tables[DS_ISA_AVX2VNNI] = tables[DS_ISA_AVX2];
		ds_kernels_fill_avxvnni(&tables[DS_ISA_AVX2VNNI]);
	}
	if (supported[DS_ISA_AVX512]) {
		tables[DS_ISA_AVX512] = tables[supported[DS_ISA_AVX2VNNI]
						       ? DS_ISA_AVX2VNNI
						       : DS_ISA_AVX2];
		ds_kernels_fill_avx512(&tables[DS_ISA_AVX512]);
	}
	if (supported[DS_ISA_AMX]) {
		tables[DS_ISA_AMX] = tables[DS_ISA_AVX512];
		ds_kernels_fill_amx(&tables[DS_ISA_AMX]);
	}
}

int ds_cpu_isa_named(const char *name, const int *supported)
{
	/* "avx2" means the best 256-bit level: with AVX-VNNI when present */
	if (strcmp(name, "avx2") == 0)
		return supported[DS_ISA_AVX2VNNI] ? DS_ISA_AVX2VNNI : DS_ISA_AVX2;
	if (strcmp(name, "avx512") == 0)
		return DS_ISA_AVX512;
	if (strcmp(name, "amx") == 0)
		return DS_ISA_AMX;
	return -1;
}

const char *ds_cpu_isa_needs(enum ds_isa isa)
{
	return isa == DS_ISA_AMX ? "AVX-512 with AMX-TILE and AMX-INT8"
	       : isa == DS_ISA_AVX512 ? "AVX-512 F/BW/VL/DQ/VNNI/BF16"
				      : "AVX2 with FMA and F16C";
}

/*
 * cpu_arm.c - the AArch64 ISAs: Linux's HWCAP words, the tables of
 * neon.c, dotprod.c and i8mm.c (kernels/cpu.h).  Compiled without target
 * flags (plain ARMv8-A, whose Advanced SIMD every AArch64 Linux CPU has).
 *   neon     Advanced SIMD (FP and ASIMD)
 *   dotprod  + FEAT_DotProd (sdot/udot): the q4/q8 products
 *   i8mm     + FEAT_I8MM (smmla) and FEAT_BF16 (bfdot, bfmmla), both part
 *            of ARMv8.6-A: prefill's q4/q8 products and the bf16 ones
 */
#include <string.h>
#include <sys/auxv.h>

#include "cpu.h"

/* <asm/hwcap.h>'s bits, which a libc's headers may lack */
#define HW_FP (1ul << 0)
#define HW_ASIMD (1ul << 1)
#define HW_ASIMDDP (1ul << 20)
#define HW2_I8MM (1ul << 13)
#define HW2_BF16 (1ul << 14)

const char ds_cpu_isa_list[] = "scalar, neon, dotprod or i8mm";

void ds_cpu_detect(int *supported)
{
	unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
	int neon = (hw & HW_FP) && (hw & HW_ASIMD);
	int dotprod = neon && (hw & HW_ASIMDDP);

	supported[DS_ISA_NEON] = neon;
	supported[DS_ISA_DOTPROD] = dotprod;
	supported[DS_ISA_I8MM] = dotprod && (hw2 & HW2_I8MM) && (hw2 & HW2_BF16);
}

void ds_cpu_fill(ds_kernels *tables, const int *supported)
{
	if (supported[DS_ISA_NEON]) {
		tables[DS_ISA_NEON] = tables[DS_ISA_SCALAR];
		ds_kernels_fill_neon(&tables[DS_ISA_NEON]);
	}
	if (supported[DS_ISA_DOTPROD]) {
		tables[DS_ISA_DOTPROD] = tables[DS_ISA_NEON];
		ds_kernels_fill_dotprod(&tables[DS_ISA_DOTPROD]);
	}
	if (supported[DS_ISA_I8MM]) {
		tables[DS_ISA_I8MM] = tables[DS_ISA_DOTPROD];
		ds_kernels_fill_i8mm(&tables[DS_ISA_I8MM]);
	}
}

int ds_cpu_isa_named(const char *name, const int *supported)
{
	(void)supported;
	if (strcmp(name, "neon") == 0)
		return DS_ISA_NEON;
	if (strcmp(name, "dotprod") == 0)
		return DS_ISA_DOTPROD;
	if (strcmp(name, "i8mm") == 0)
		return DS_ISA_I8MM;
	return -1;
}

const char *ds_cpu_isa_needs(enum ds_isa isa)
{
	return isa == DS_ISA_I8MM ? "Advanced SIMD with DotProd, I8MM and BF16"
	       : isa == DS_ISA_DOTPROD ? "Advanced SIMD with DotProd (sdot)"
				       : "Advanced SIMD";
}

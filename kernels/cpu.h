/*
 * cpu.h - what kernels.c asks of the architecture it was built for: one
 * file per architecture (cpu_x86.c, cpu_arm.c; the Makefile picks it by
 * the compiler's target) detects the CPU's ISAs, fills their tables and
 * names them for DS_ISA.  Internal to kernels/.
 */
#ifndef DS_KERNELS_CPU_H
#define DS_KERNELS_CPU_H

#include "kernels.h"

/* supported[i] = 1 for each ISA this CPU and OS run (scalar is set by the
 * caller). */
void ds_cpu_detect(int *supported);
/* Each supported ISA's table, from a copy of the next one down (tables[
 * DS_ISA_SCALAR] is filled already). */
void ds_cpu_fill(ds_kernels *tables, const int *supported);
/* The ISA a DS_ISA value names (a family name such as "avx2" means its
 * best level here), or -1 if this architecture has none of that name. */
int ds_cpu_isa_named(const char *name, const int *supported);
/* The DS_ISA values this architecture takes, for the error message. */
extern const char ds_cpu_isa_list[];
/* What the CPU lacks when isa is not supported, for the error message. */
const char *ds_cpu_isa_needs(enum ds_isa isa);

#endif

/* clock_arm.c - the clock's dependent-add chain on AArch64 (kbench.h). */
#include "kbench.h"

/* Eight dependent register adds a step: one cycle each on the Cortex-A
 * and Neoverse cores (a register operand, not an immediate, so that no
 * core can fold the chain at rename, as recent x86 cores do). */
uint64_t ds_kbench_add_chain(uint64_t n)
{
	uint64_t x = 0, one = 1, i;

	for (i = 0; i < n; i++)
		__asm__ volatile("add %0, %0, %1\n\tadd %0, %0, %1\n\tadd %0, %0, %1\n\t"
				 "add %0, %0, %1\n\tadd %0, %0, %1\n\tadd %0, %0, %1\n\t"
				 "add %0, %0, %1\n\tadd %0, %0, %1"
				 : "+r"(x) : "r"(one));
	return x;
}

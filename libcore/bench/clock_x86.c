/* clock_x86.c - the clock's dependent-add chain on x86-64 (kbench.h). */
#include "kbench.h"

/* Eight dependent adds of a register a step: one cycle each on every x86
 * core.  (Adds of an immediate are not: recent Intel cores fold chains of
 * them at rename, several a cycle, and the clock reads several times too
 * high: docs/perf.md, 2026-12-06 03:06.) */
uint64_t ds_kbench_add_chain(uint64_t n)
{
	uint64_t x = 0, one = 1, i;

	for (i = 0; i < n; i++)
		__asm__ volatile("add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
				 "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0"
				 : "+r"(x) : "r"(one));
	return x;
}

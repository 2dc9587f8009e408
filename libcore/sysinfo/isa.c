/* isa.c - which kernel ISA ds-run will choose on this CPU.
 *
 * Until the kernel dispatch (kernels/kernels.h) is on main this reads
 * CPUID itself, with the same rule the kernels issue sets: avx512 needs
 * AVX-512 F, BW, VL, VNNI and BF16 with the ZMM state enabled by the OS
 * (XCR0 bits 1-2 and 5-7); avx2 needs AVX2 and FMA with the YMM state
 * enabled (XCR0 bits 1-2). */
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "sysinfo/sysinfo.h"

#if defined(__x86_64__) || defined(__i386__)
static uint64_t xgetbv0(void)
{
	uint32_t lo, hi;

	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return (uint64_t)hi << 32 | lo;
}

const char *ds_isa_cpuid(void)
{
	unsigned a, b, c, d, b7, c7, a71 = 0;
	uint64_t xcr0;

	if (!__get_cpuid(1, &a, &b, &c, &d))
		return "scalar";
	/* leaf 1 ECX: FMA bit 12, OSXSAVE bit 27, AVX bit 28 */
	if (!(c >> 27 & 1) || !(c >> 28 & 1))
		return "scalar";
	xcr0 = xgetbv0();
	if ((xcr0 & 0x6) != 0x6)
		return "scalar";
	if (!(c >> 12 & 1) || !__get_cpuid_count(7, 0, &a, &b7, &c7, &d))
		return "scalar";
	if (a >= 1)
		__get_cpuid_count(7, 1, &a71, &b, &c, &d);
	/* leaf 7.0 EBX: AVX2 5, AVX512F 16, BW 30, VL 31; ECX: VNNI 11;
	 * leaf 7.1 EAX: AVX512_BF16 5 */
	if ((xcr0 & 0xe0) == 0xe0 && (b7 >> 16 & 1) && (b7 >> 30 & 1) &&
	    (b7 >> 31 & 1) && (c7 >> 11 & 1) && (a71 >> 5 & 1))
		return "avx512";
	if (b7 >> 5 & 1)
		return "avx2";
	return "scalar";
}
#else
const char *ds_isa_cpuid(void)
{
	return "scalar";
}
#endif

const char *ds_isa_from_flags(const char *flags)
{
	static const char *const avx512[] = {
		"avx512f", "avx512bw", "avx512vl", "avx512_vnni",
		"avx512_bf16", NULL,
	};
	int all = 1;

	for (int i = 0; avx512[i] != NULL; i++)
		all &= ds_word_in(flags, avx512[i]);
	if (all)
		return "avx512";
	if (ds_word_in(flags, "avx2") && ds_word_in(flags, "fma"))
		return "avx2";
	return "scalar";
}

/* isa_x86.c - the kernel ISA of an x86-64 CPU described by its
 * /proc/cpuinfo flags, by the rule kernels/cpu_x86.c applies to CPUID
 * (the kernel hides the flags the OS does not enable, as XGETBV tells the
 * kernels). */
#include "kernels/kernels.h"
#include "sysinfo.h"

const ds_isa_source ds_isa_src = {
	.key = "flags",
	.detect = "cpuid",
	.from_flags = "/proc/cpuinfo flags",
};

static int all(const char *flags, const char *const *need)
{
	for (; *need != NULL; need++)
		if (!ds_word_in(flags, *need))
			return 0;
	return 1;
}

const char *ds_isa_from_flags(const char *flags)
{
	static const char *const avx2[] = { "avx", "fma", "f16c", "avx2", NULL };
	static const char *const avx512[] = {
		"avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_vnni",
		"avx512_bf16", NULL,
	};
	static const char *const amx[] = { "amx_tile", "amx_int8", NULL };

	if (!all(flags, avx2))
		return ds_isa_name(DS_ISA_SCALAR);
	if (all(flags, avx512))
		return ds_isa_name(all(flags, amx) ? DS_ISA_AMX : DS_ISA_AVX512);
	if (ds_word_in(flags, "avx_vnni"))
		return ds_isa_name(DS_ISA_AVX2VNNI);
	return ds_isa_name(DS_ISA_AVX2);
}

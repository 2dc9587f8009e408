/* isa_arm.c - the kernel ISA of an AArch64 CPU described by the
 * Features line of its /proc/cpuinfo (Linux's names of its HWCAP bits),
 * by the rule kernels/cpu_arm.c applies to those bits. */
#include "kernels/kernels.h"
#include "sysinfo.h"

const ds_isa_source ds_isa_src = {
	.key = "Features",
	.detect = "hwcap",
	.from_flags = "/proc/cpuinfo Features",
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
	static const char *const neon[] = { "fp", "asimd", NULL };
	static const char *const i8mm[] = { "i8mm", "bf16", NULL };

	if (!all(flags, neon))
		return ds_isa_name(DS_ISA_SCALAR);
	if (!ds_word_in(flags, "asimddp"))
		return ds_isa_name(DS_ISA_NEON);
	return ds_isa_name(all(flags, i8mm) ? DS_ISA_I8MM : DS_ISA_DOTPROD);
}

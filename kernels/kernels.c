/*
 * kernels.c - the dispatch table: the choice among the ISAs that
 * cpu_<arch>.c detects and fills (kernels/cpu.h).  The value helpers
 * every ISA shares are in mat.c, so that the ISA files call down into it
 * and never back into the file that calls them.
 *
 * Compiled without target flags: nothing here may run an instruction the
 * CPU might lack.  Each ISA's table starts as a copy of the one below it
 * and is overwritten with what that ISA's file implements.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

static ds_kernels tables[DS_ISA_COUNT];
static int supported[DS_ISA_COUNT];
static const ds_kernels *chosen;
static char choose_err[200];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static const char *const isa_names[DS_ISA_COUNT] = {
	[DS_ISA_SCALAR] = "scalar",
	[DS_ISA_AVX2] = "avx2",
	[DS_ISA_AVX2VNNI] = "avx2+avxvnni",
	[DS_ISA_AVX512] = "avx512",
	[DS_ISA_AMX] = "avx512+amx",
	[DS_ISA_NEON] = "neon",
	[DS_ISA_DOTPROD] = "dotprod",
	[DS_ISA_I8MM] = "dotprod+i8mm",
};

static void build(void)
{
	const char *env = getenv("DS_ISA");
	int i, best = DS_ISA_SCALAR, want = -1;

	supported[DS_ISA_SCALAR] = 1;
	ds_cpu_detect(supported);
	ds_kernels_fill_scalar(&tables[DS_ISA_SCALAR]);
	ds_cpu_fill(tables, supported);
	/* each architecture's ISAs are in ascending order in enum ds_isa */
	for (i = 0; i < DS_ISA_COUNT; i++)
		if (supported[i])
			best = i;
	if (env == NULL || *env == '\0') {
		chosen = &tables[best];
		return;
	}
	want = strcmp(env, "scalar") == 0 ? DS_ISA_SCALAR : ds_cpu_isa_named(env, supported);
	if (want < 0)
		snprintf(choose_err, sizeof choose_err,
			 "DS_ISA=%.40s: unknown ISA (%s)", env, ds_cpu_isa_list);
	else if (!supported[want])
		snprintf(choose_err, sizeof choose_err,
			 "DS_ISA=%s: this CPU (or OS) does not support %s", env,
			 ds_cpu_isa_needs((enum ds_isa)want));
	else
		chosen = &tables[want];
}

int ds_kernels_init(ds_err *err)
{
	pthread_once(&once, build);
	if (chosen == NULL)
		return ds_errf(err, "%s", choose_err);
	return 0;
}

const ds_kernels *ds_kernels_get(void)
{
	pthread_once(&once, build);
	DS_ASSERT(chosen != NULL);
	return chosen;
}

const char *ds_kernels_name(void)
{
	return ds_kernels_get()->name;
}

int ds_isa_supported(enum ds_isa isa)
{
	pthread_once(&once, build);
	return (unsigned)isa < DS_ISA_COUNT && supported[isa];
}

const ds_kernels *ds_kernels_isa(enum ds_isa isa)
{
	return ds_isa_supported(isa) ? &tables[isa] : NULL;
}

const char *ds_isa_name(enum ds_isa isa)
{
	return (unsigned)isa < DS_ISA_COUNT ? isa_names[isa] : "?";
}

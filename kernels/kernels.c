/*
 * kernels.c - CPU feature detection and the dispatch table.
 *
 * Compiled without target flags: nothing here may run an instruction the
 * CPU might lack.  Each ISA's table starts as a copy of the one below it
 * and is overwritten with what that ISA's file implements.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define DS_X86 1
#endif

static ds_kernels tables[DS_ISA_COUNT];
static int supported[DS_ISA_COUNT];
static const ds_kernels *chosen;
static char choose_err[200];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static const char *const isa_names[DS_ISA_COUNT] = {
	"scalar", "avx2", "avx2+avxvnni", "avx512", "avx512+amx",
};

#ifdef DS_X86
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

static void detect(void)
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
#else
static void detect(void)
{
}
#endif

static void build(void)
{
	const char *env = getenv("DS_ISA");
	int i, best = DS_ISA_SCALAR, want = -1;

	supported[DS_ISA_SCALAR] = 1;
	detect();
	ds_kernels_fill_scalar(&tables[DS_ISA_SCALAR]);
#ifdef DS_X86
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
#endif
	for (i = 0; i < DS_ISA_COUNT; i++)
		if (supported[i])
			best = i;
	if (env == NULL || *env == '\0') {
		chosen = &tables[best];
		return;
	}
	/* "avx2" means the best 256-bit level: with AVX-VNNI when present */
	if (strcmp(env, "scalar") == 0)
		want = DS_ISA_SCALAR;
	else if (strcmp(env, "avx2") == 0)
		want = supported[DS_ISA_AVX2VNNI] ? DS_ISA_AVX2VNNI : DS_ISA_AVX2;
	else if (strcmp(env, "avx512") == 0)
		want = DS_ISA_AVX512;
	else if (strcmp(env, "amx") == 0)
		want = DS_ISA_AMX;
	if (want < 0)
		snprintf(choose_err, sizeof choose_err,
			 "DS_ISA=%.40s: unknown ISA (scalar, avx2, avx512 or amx)", env);
	else if (!supported[want])
		snprintf(choose_err, sizeof choose_err,
			 "DS_ISA=%s: this CPU (or OS) does not support %s", env,
			 want == DS_ISA_AMX ? "AVX-512 with AMX-TILE and AMX-INT8"
			 : want == DS_ISA_AVX512 ? "AVX-512 F/BW/VL/DQ/VNNI/BF16"
						 : "AVX2 with FMA and F16C");
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

ds_mat ds_mat_make(ds_ttype t, const void *data, uint64_t n, uint64_t k,
		   const int32_t *perm)
{
	ds_mat m;

	m.type = t;
	m.data = data;
	m.n = n;
	m.k = k;
	m.kp = ds_ttype_interleaved(t) ? ds_kpad(t, k) : k;
	m.rs_bytes = ds_ttype_interleaved(t) ? ds_rowset_bytes(t, k) : 0;
	m.perm = perm;
	m.ne = 1;
	m.e_bytes = ds_ttype_interleaved(t) ? m.rs_bytes * ((n + DS_ROWSET - 1) / DS_ROWSET)
					     : n * k * (t.dt == DS_F16 ? 2 : 4);
	return m;
}

ds_mat ds_mat_from_rowset(const ds_mat *w, uint64_t rs0)
{
	ds_mat m = *w;
	uint64_t r0 = rs0 * DS_ROWSET;

	if (ds_ttype_interleaved(w->type))
		m.data += rs0 * w->rs_bytes;
	else
		m.data += r0 * w->k * (w->type.dt == DS_F16 ? 2 : 4);
	m.n = w->n > r0 ? w->n - r0 : 0;
	return m;
}

ds_act ds_act_rows(const ds_act *x, size_t t0, size_t nt)
{
	ds_act r = *x;
	size_t nb = x->ldq / DS_QBLOCK;

	r.t = nt;
	if (x->f)
		r.f = x->f + t0 * x->ldf;
	if (x->b)
		r.b = x->b + t0 * x->ldq;
	if (x->q) {
		r.q = x->q + t0 * x->ldq;
		r.qd = x->qd + t0 * nb;
		r.qs = x->qs + t0 * nb;
	}
	if (x->qt)
		r.qt = x->qt + t0;
	return r;
}

size_t ds_act_qt_ld(size_t rows)
{
	return rows > SIZE_MAX - 31 ? 0 : (rows + 15) / 16 * 16 | 16;
}

size_t ds_act_qt_floats(size_t ldqt, size_t ldq)
{
	const size_t nb = ldq / DS_QBLOCK;

	/* the bytes too must fit a size_t */
	if (nb == 0 || ldqt == 0 || nb > SIZE_MAX / sizeof(float) / 2 ||
	    ldqt > SIZE_MAX / sizeof(float) / (2 * nb))
		return 0;
	return 2 * nb * ldqt;
}

void ds_act_qt_row(float *qt, size_t ldqt, size_t ldq, size_t r, const float *d,
		   const float *s)
{
	const size_t nb = ldq / DS_QBLOCK;
	float *p = qt + r;
	size_t b;

	for (b = 0; b < nb; b++) {
		p[b * ldqt] = d[b];
		p[(nb + b) * ldqt] = DS_Q8_ADDEND(s[b]);
	}
}

size_t ds_kv_row_bytes(enum ds_kvtype t, size_t dim)
{
	switch (t) {
	case DS_KV_F32: return 4 * dim;
	case DS_KV_F16:
	case DS_KV_BF16: return 2 * dim;
	case DS_KV_Q8: return 36 * (dim / DS_QBLOCK);
	}
	return 0;
}

size_t ds_kv_col_offset(enum ds_kvtype t, size_t col)
{
	return ds_kv_row_bytes(t, col);
}

/*
 * kernels.c - the dispatch table: the choice among the ISAs that
 * cpu_<arch>.c detects and fills (kernels/cpu.h), and the helpers every
 * ISA shares.
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

/* err.c - one-line error messages and the internal assertion. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

int ds_errf(ds_err *err, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL)
		return -1;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof err->msg, fmt, ap);
	va_end(ap);
	return -1;
}

int ds_err_prefix(ds_err *err, const char *fmt, ...)
{
	char pre[256], old[sizeof err->msg];
	va_list ap;

	if (err == NULL)
		return -1;
	va_start(ap, fmt);
	vsnprintf(pre, sizeof pre, fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof old);
	/* pre + ": " + old, truncated to fit */
	{
		size_t n = strlen(pre), cap = sizeof err->msg - 1, m;

		n = n > cap ? cap : n;
		memcpy(err->msg, pre, n);
		m = cap - n >= 2 ? 2 : cap - n;
		memcpy(err->msg + n, ": ", m);
		n += m;
		m = strlen(old);
		m = m > cap - n ? cap - n : m;
		memcpy(err->msg + n, old, m);
		err->msg[n + m] = '\0';
	}
	return -1;
}

void ds_assert_fail(const char *expr, const char *file, int line)
{
	fprintf(stderr, "ds: internal error: %s:%d: assertion '%s' failed\n",
		file, line, expr);
	abort();
}

void *ds_calloc(size_t n, size_t size, ds_err *err)
{
	size_t total;
	void *p;

	if (ds_mul_sz(n, size, &total) != 0) {
		ds_errf(err, "allocation of %zu x %zu bytes overflows", n, size);
		return NULL;
	}
	p = calloc(total ? total : 1, 1);
	if (p == NULL)
		ds_errf(err, "out of memory allocating %zu bytes", total);
	return p;
}

void *ds_aligned_alloc(size_t align, size_t size, ds_err *err)
{
	void *p = NULL;

	if (posix_memalign(&p, align, size ? size : align) != 0) {
		ds_errf(err, "out of memory allocating %zu bytes", size);
		return NULL;
	}
	memset(p, 0, size);
	return p;
}

/* cli.c - option parsing shared by the programs (cli.h). */
#include <err.h>
#include <stdarg.h>
#include <stdio.h>

#include "cli.h"
#include "util.h"

void ds_warnx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vwarnx(fmt, ap);
	va_end(ap);
}

int ds_opt_bad(const char *opt, const char *v, const char *what)
{
	warnx("%s %s: %s", opt, v, what);
	return 2;
}

int ds_opt_long(const char *opt, const char *v, long lo, long hi, long *out)
{
	char what[96];

	if (ds_parse_long(v, lo, hi, out) == 0)
		return 0;
	snprintf(what, sizeof what, "not an integer in [%ld, %ld]", lo, hi);
	return ds_opt_bad(opt, v, what);
}

int ds_opt_int(const char *opt, const char *v, int lo, int hi, int *out)
{
	long l;

	if (ds_opt_long(opt, v, lo, hi, &l))
		return 2;
	*out = (int)l;
	return 0;
}

int ds_opt_u32(const char *opt, const char *v, uint32_t lo, uint32_t hi,
	       uint32_t *out)
{
	long l;

	if (ds_opt_long(opt, v, (long)lo, (long)hi, &l))
		return 2;
	*out = (uint32_t)l;
	return 0;
}

int ds_opt_u64(const char *opt, const char *v, uint64_t *out)
{
	long l;

	if (ds_parse_long(v, 0, 0x7fffffffffffffffL, &l))
		return ds_opt_bad(opt, v, "not a non-negative integer");
	*out = (uint64_t)l;
	return 0;
}

int ds_opt_double(const char *opt, const char *v, double lo, double hi,
		  double *out)
{
	char what[96];

	if (ds_parse_double(v, lo, hi, out) == 0)
		return 0;
	snprintf(what, sizeof what, "not a number in [%g, %g]", lo, hi);
	return ds_opt_bad(opt, v, what);
}

int ds_opt_float(const char *opt, const char *v, double lo, double hi,
		 float *out)
{
	double d;

	if (ds_opt_double(opt, v, lo, hi, &d))
		return 2;
	*out = (float)d;
	return 0;
}

int ds_opt_getopt_error(int c, const char *arg)
{
	warnx("%s: %s", arg, c == ':' ? "needs a value" : "unknown option");
	return 2;
}

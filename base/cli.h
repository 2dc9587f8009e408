/*
 * cli.h - what the programs' option parsing shares: messages in the
 * style of warnx(3), prefixed by the program's name, and numeric
 * arguments checked against their ranges.
 *
 * The ds_opt_* functions return 0 with the value stored, or 2 (the usage
 * exit status of every ds program) after one line on stderr that names
 * the option and the value: "ds-run: --threads 0: not an integer in
 * [1, 256]".
 */
#ifndef DS_CLI_H
#define DS_CLI_H

#include <stdint.h>

/* "PROG: " and the message on stderr (err.h's warnx, which takes the
 * name from the command line; declared here for the format check). */
void ds_warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

int ds_opt_long(const char *opt, const char *v, long lo, long hi, long *out);
int ds_opt_int(const char *opt, const char *v, int lo, int hi, int *out);
int ds_opt_u32(const char *opt, const char *v, uint32_t lo, uint32_t hi,
	       uint32_t *out);
int ds_opt_u64(const char *opt, const char *v, uint64_t *out);
int ds_opt_float(const char *opt, const char *v, double lo, double hi,
		 float *out);
int ds_opt_double(const char *opt, const char *v, double lo, double hi,
		  double *out);
/* "PROG: OPT V: WHAT", returning 2. */
int ds_opt_bad(const char *opt, const char *v, const char *what);

/* getopt_long's '?' and ':' answers: "PROG: -x: unknown option" or
 * "... needs a value", returning 2.  arg is argv[optind - 1]. */
int ds_opt_getopt_error(int c, const char *arg);

#endif

/* ds-convert - convert a Hugging Face checkpoint to a ds model directory. */
#define _GNU_SOURCE
#include <err.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/afile.h"
#include "base/cli.h"
#include "convert/convert.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ds-convert --model-path SRC --output-dir DST "
		"[--quant-format auto|awq|gptq|fp8|none]\n"
		"                  [--quantize keep|q8|q4] [--group-size 32|64|128] "
		"[--threads N] [--force] [--quiet]\n"
		"       ds-convert --inspect SRC\n"
		"       ds-convert --verify DST\n"
		"       ds-convert -h | --version\n");
}

static int bad_usage(const char *msg, const char *arg)
{
	warnx("%s%s%s", msg, arg ? ": " : "", arg ? arg : "");
	usage(stderr);
	return 2;
}

static int pick(const char *s, const char *const *names, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	return -1;
}

static int default_threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1 : n > 16 ? 16 : (int)n;
}

/* A signal stops the conversion, which removes its temporaries, then
 * ends the program as the signal would have. */
static int convert(ds_convert_opts *o, int quiet)
{
	volatile sig_atomic_t stop = 0;
	ds_convert_stats st;
	ds_err err;
	int rc;

	ds_cleanup_flag(&stop);
	o->cancel = &stop;
	o->progress = quiet ? NULL : stderr;
	rc = ds_convert(o, &st, &err);
	if (rc != 0 && stop)
		ds_cleanup_raise(stop);
	ds_cleanup_flag(NULL);
	if (rc != 0) {
		warnx("%s", err.msg);
		return 1;
	}
	if (!quiet && st.q.requantized)
		warnx("warning: %llu of %llu GPTQ 8-bit groups were asymmetric and "
		      "were re-quantized to q8 (symmetric)",
		      (unsigned long long)st.q.requantized, (unsigned long long)st.q.groups);
	if (!quiet && st.mtp_absent)
		warnx("note: config.json names a multi-token-prediction layer that the "
		      "checkpoint does not carry; converted without it");
	if (!quiet && st.q.clamped)
		warnx("note: %llu GPTQ 8-bit weights of -128 steps were stored as -127 "
		      "(q8 holds -127 to 127)", (unsigned long long)st.q.clamped);
	return 0;
}

int main(int argc, char **argv)
{
	static const char *const formats[] = { "auto", "awq", "gptq", "none",
						"fp8" };
	static const char *const quants[] = { "keep", "q8", "q4" };
	static const struct option opts[] = {
		{ "force", no_argument, NULL, 'f' },
		{ "group-size", required_argument, NULL, 'g' },
		{ "help", no_argument, NULL, 'h' },
		{ "inspect", required_argument, NULL, 'I' },
		{ "model-path", required_argument, NULL, 'm' },
		{ "output-dir", required_argument, NULL, 'o' },
		{ "quant-format", required_argument, NULL, 'F' },
		{ "quantize", required_argument, NULL, 'Q' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "threads", required_argument, NULL, 't' },
		{ "verify", required_argument, NULL, 'V' },
		{ "version", no_argument, NULL, 'v' },
		{ NULL, 0, NULL, 0 },
	};
	ds_convert_opts o;
	const char *inspect = NULL, *verify = NULL;
	int c, quiet = 0, i;
	long v;
	ds_err err;

	memset(&o, 0, sizeof o);
	o.quantize = DS_RQ_AUTO;
	o.group_size = 32;
	o.threads = default_threads();
	opterr = 0; /* our own messages, named ds-convert */
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (c) {
		case 'f': o.force = 1; break;
		case 'F':
			if ((i = pick(optarg, formats, 5)) < 0)
				return bad_usage("bad --quant-format", optarg);
			o.format = (enum ds_qformat)i;
			break;
		case 'g':
			if (ds_parse_long(optarg, 32, 128, &v) || (v != 32 && v != 64 &&
								    v != 128))
				return bad_usage("bad --group-size (32, 64 or 128)",
						 optarg);
			o.group_size = (uint32_t)v;
			break;
		case 'h': usage(stdout); return 0;
		case 'I': inspect = optarg; break;
		case 'm': o.src = optarg; break;
		case 'o': o.dst = optarg; break;
		case 'Q':
			if ((i = pick(optarg, quants, 3)) < 0)
				return bad_usage("bad --quantize", optarg);
			o.quantize = (enum ds_requant)i;
			break;
		case 'q': quiet = 1; break;
		case 't':
			if (ds_parse_long(optarg, 1, 256, &v))
				return bad_usage("bad --threads (1 to 256)", optarg);
			o.threads = (int)v;
			break;
		case 'V': verify = optarg; break;
		case 'v': printf("ds-convert %s\n", DS_VERSION); return 0;
		case ':': return bad_usage("option needs a value", argv[optind - 1]);
		default: return bad_usage("unknown option", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return bad_usage("unexpected argument", argv[optind]);
	if ((inspect != NULL) + (verify != NULL) + (o.src || o.dst) > 1)
		return bad_usage("--inspect, --verify and a conversion exclude "
				 "each other", NULL);
	ds_map_guard(); /* the checkpoint is read through mappings */
	if (inspect != NULL || verify != NULL) {
		if ((inspect ? ds_inspect(inspect, stdout, &err)
			     : ds_verify(verify, stdout, &err)) == 0)
			return fflush(stdout) == 0 ? 0 : 1;
		warnx("%s", err.msg);
		return 1;
	}
	if (o.src == NULL || o.dst == NULL)
		return bad_usage("--model-path and --output-dir are required", NULL);
	return convert(&o, quiet);
}

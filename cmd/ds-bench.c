/*
 * ds-bench - benchmarks: the kernels against the memory-bandwidth limit
 * and the ISA's peak (--kernels), and the read bandwidth alone (--membw).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kbench.h"
#include "kernels.h"
#include "types.h"
#include "util.h"

enum { FMT_MD, FMT_CSV, FMT_JSON };

struct out {
	int fmt, n;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ds-bench --kernels [--cpu-time] [--cpus LIST] [-o md|csv|json] [-q]\n"
		"                [-s NxK] [-t N,...] [-w TYPE,...]\n"
		"       ds-bench --membw [--cpu-time] [--cpus LIST] [-o md|csv|json] [-q]\n"
		"                [-t N,...]\n");
}

static void emit(void *arg, const ds_kbench_row *r)
{
	struct out *o = arg;
	char shape[48] = "";

	if (r->n && r->k)
		snprintf(shape, sizeof shape, "%llux%llu", (unsigned long long)r->n,
			 (unsigned long long)r->k);
	else if (r->n)
		snprintf(shape, sizeof shape, "%llu MiB", (unsigned long long)r->n >> 20);
	if (o->fmt == FMT_CSV) {
		printf("%s,%s,%llu,%llu,%llu,%d,%.9g,%.4g,%.4g,%.4g,%.4g,%.4g\n", r->op, r->type,
		       (unsigned long long)r->n, (unsigned long long)r->k,
		       (unsigned long long)r->t, r->threads, r->sec, r->gbs, r->gops, r->ratio,
		       r->us, r->ghz);
	} else if (o->fmt == FMT_JSON) {
		printf("%s\n    {\"op\": \"%s\", \"type\": \"%s\", \"n\": %llu, \"k\": %llu, "
		       "\"t\": %llu, \"threads\": %d, \"sec\": %.9g, \"gbs\": %.4g, "
		       "\"gops\": %.4g, \"ratio\": %.4g, \"us\": %.4g, \"ghz\": %.4g}",
		       o->n ? "," : "", r->op, r->type, (unsigned long long)r->n,
		       (unsigned long long)r->k, (unsigned long long)r->t, r->threads, r->sec,
		       r->gbs, r->gops, r->ratio, r->us, r->ghz);
	} else {
		char gbs[16] = "", gops[16] = "", ratio[16] = "", note[48] = "";

		if (r->gbs > 0)
			snprintf(gbs, sizeof gbs, "%.1f", r->gbs);
		if (r->gops > 0)
			snprintf(gops, sizeof gops, "%.1f", r->gops);
		if (r->ratio > 0)
			snprintf(ratio, sizeof ratio, "%.2f", r->ratio);
		if (strcmp(r->op, "barrier") == 0)
			snprintf(note, sizeof note, "%.2f us round trip", r->us);
		else if (strcmp(r->op, "peak") == 0)
			snprintf(note, sizeof note, "ops/cycle/thread at %.2f GHz", r->ghz);
		else if (strcmp(r->op, "matvec") == 0)
			snprintf(note, sizeof note, "of read probe");
		else if (strcmp(r->op, "matmul") == 0)
			snprintf(note, sizeof note, "of %s peak",
				 r->type[0] == 'q' ? "int8" : strcmp(r->type, "bf16") == 0 ? "bf16" : "fp32");
		printf("| %s | %s | %s | %llu | %d | %.3f | %s | %s | %s %s |\n", r->op, r->type,
		       shape, (unsigned long long)r->t, r->threads, r->sec * 1e3, gbs, gops,
		       ratio, note);
	}
	o->n++;
	fflush(stdout);
}

static int parse_threads(const char *s, int *t, int max)
{
	int n = 0;

	while (*s && n < max) {
		char *end;
		long v = strtol(s, &end, 10);

		if (end == s || v < 1 || v > 1024 || (*end != ',' && *end != '\0'))
			return -1;
		t[n++] = (int)v;
		s = *end == ',' ? end + 1 : end;
	}
	return *s ? -1 : n;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "cpu-time", no_argument, NULL, 'C' },
		{ "cpus", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ "kernels", no_argument, NULL, 'K' },
		{ "membw", no_argument, NULL, 'M' },
		{ "output", required_argument, NULL, 'o' },
		{ "quick", no_argument, NULL, 'q' },
		{ "shape", required_argument, NULL, 's' },
		{ "threads", required_argument, NULL, 't' },
		{ "version", no_argument, NULL, 'V' },
		{ "weights", required_argument, NULL, 'w' },
		{ NULL, 0, NULL, 0 },
	};
	int threads[16] = { 1, 2 }, nthreads = 2, mode = 0, c, rc;
	struct out out = { FMT_MD, 0 };
	ds_kbench_opts o;
	ds_err err;

	memset(&o, 0, sizeof o);
	while ((c = getopt_long(argc, argv, "ho:qs:t:w:", lo, NULL)) != -1) {
		switch (c) {
		case 'C': o.cpu_time = 1; break;
		case 'c': o.cpus = optarg; break;
		case 'h': usage(stdout); return 0;
		case 'K': mode = 'K'; break;
		case 'M': mode = 'M'; break;
		case 'o':
			if (strcmp(optarg, "md") == 0) out.fmt = FMT_MD;
			else if (strcmp(optarg, "csv") == 0) out.fmt = FMT_CSV;
			else if (strcmp(optarg, "json") == 0) out.fmt = FMT_JSON;
			else {
				fprintf(stderr, "ds-bench: -o %s: expected md, csv or json\n", optarg);
				return 2;
			}
			break;
		case 'q': o.quick = 1; break;
		case 's': {
			unsigned long long n, k;
			char tail;

			if (sscanf(optarg, "%llux%llu%c", &n, &k, &tail) != 2 || n < 1 || k < 1 ||
			    n > 65536 || k > 65536) {
				fprintf(stderr, "ds-bench: -s %s: expected NxK, each 1 to 65536\n", optarg);
				return 2;
			}
			o.mm_n = n;
			o.mm_k = k;
			break;
		}
		case 't':
			nthreads = parse_threads(optarg, threads, 16);
			if (nthreads < 1) {
				fprintf(stderr, "ds-bench: -t %s: expected thread counts like 1,2\n", optarg);
				return 2;
			}
			break;
		case 'V': printf("ds-bench %s\n", DS_VERSION); return 0;
		case 'w': o.types = optarg; break;
		default: usage(stderr); return 2;
		}
	}
	if (mode == 0 || optind != argc) {
		usage(stderr);
		return 2;
	}
	if (ds_kernels_init(&err) != 0) {
		fprintf(stderr, "ds-bench: %s\n", err.msg);
		return 1;
	}
	if (o.types) {
		const char *p = o.types;

		/* a bad type is a usage error: check before anything runs */
		while (*p) {
			char name[16];
			size_t len = strcspn(p, ",");
			ds_ttype t;

			if (len == 0 || len >= sizeof name) {
				fprintf(stderr, "ds-bench: -w %s: empty or overlong type\n", o.types);
				return 2;
			}
			memcpy(name, p, len);
			name[len] = '\0';
			if (ds_ttype_parse(name, &t) != 0 || t.dt == DS_I32) {
				fprintf(stderr, "ds-bench: -w %s: not a weight type\n", name);
				return 2;
			}
			p += len + (p[len] == ',');
		}
	}
	o.threads = threads;
	o.nthreads = nthreads;
	if (out.fmt == FMT_CSV)
		printf("op,type,n,k,t,threads,sec,gbs,gops,ratio,us,ghz\n");
	else if (out.fmt == FMT_JSON)
		printf("{\"isa\": \"%s\", \"clock\": \"%s\", \"rows\": [", ds_kernels_name(),
		       o.cpu_time ? "cpu" : "wall");
	else
		printf("kernels: %s, times by %s\n\n| op | type | shape | T | threads | ms | GB/s | GOP/s | ratio |\n"
		       "|---|---|---|---|---|---|---|---|---|\n", ds_kernels_name(),
		       o.cpu_time ? "CPU time per thread" : "the wall clock");
	rc = mode == 'K' ? ds_kbench_kernels(&o, emit, &out, &err)
			 : ds_kbench_membw(&o, emit, &out, &err);
	if (out.fmt == FMT_JSON)
		printf("\n]}\n");
	if (rc != 0) {
		fprintf(stderr, "ds-bench: %s\n", err.msg);
		return 1;
	}
	return 0;
}

/* tokbench.c - helper of the tokenizer benchmark (scripts/bench-tok.sh
 * builds it against build/libdscore.a).
 *   tokbench compile SRC DST      tokenizer.json / .model -> tokenizer.bin
 *   tokbench load BIN N           mean time of N loads (+ frees) of BIN, us
 *   tokbench lines BIN TEXT       encode each line of TEXT: "tokens seconds"
 *                                 of the encode calls alone
 *   tokbench TOKENIZER TEXT [N]   load time, then single-threaded encode
 *                                 speed of the whole file as one text
 * Prints "key value" lines. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tokenizer/tokenizer.h"
#include "base/util.h"

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	ds_tok *tok;
	ds_tok_ids ids = { 0 };
	ds_err err;
	char *text;
	size_t len;
	long loads = argc > 3 ? atol(argv[3]) : 200;
	double t0, best = 1e9;

	if (argc < 3) {
		fprintf(stderr, "usage: tokbench TOKENIZER TEXT [LOADS]\n");
		return 2;
	}
	if (strcmp(argv[1], "compile") == 0 && argc == 4) {
		if (ds_tok_compile_file(argv[2], NULL, argv[3], &err) != 0) {
			fprintf(stderr, "tokbench: %s\n", err.msg);
			return 1;
		}
		return 0;
	}
	if (strcmp(argv[1], "lines") == 0 && argc == 4) {
		size_t total = 0;
		double spent = 0;

		if (ds_tok_load(&tok, argv[2], &err) != 0 ||
		    ds_read_file(argv[3], (size_t)1 << 30, &text, &len, &err) != 0) {
			fprintf(stderr, "tokbench: %s\n", err.msg);
			return 1;
		}
		for (char *p = text, *end = text + len; p < end;) {
			char *nl = memchr(p, '\n', (size_t)(end - p));
			size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);

			ids.n = 0;
			t0 = ds_now_s();
			if (n > 0 && ds_tok_encode(tok, p, n, DS_TOK_NO_BOS, &ids, &err) != 0) {
				fprintf(stderr, "tokbench: %s\n", err.msg);
				return 1;
			}
			spent += ds_now_s() - t0;
			total += ids.n;
			p += n + 1;
		}
		printf("%zu %.6f\n", total, spent);
		ds_tok_ids_free(&ids);
		ds_tok_free(tok);
		free(text);
		return 0;
	}
	if (strcmp(argv[1], "load") == 0 && argc == 4) {
		loads = atol(argv[3]);
		if (ds_tok_load(&tok, argv[2], &err) != 0) {
			fprintf(stderr, "tokbench: %s\n", err.msg);
			return 1;
		}
		ds_tok_free(tok); /* now in the page cache */
		{
			double in_load = 0, in_free = 0, cpu = 0, t1, c0;

			for (long i = 0; i < loads; i++) {
				c0 = cpu_s();
				t0 = ds_now_s();
				if (ds_tok_load(&tok, argv[2], &err) != 0)
					return 1;
				t1 = ds_now_s();
				cpu += cpu_s() - c0;
				ds_tok_free(tok);
				in_load += t1 - t0;
				in_free += ds_now_s() - t1;
			}
			/* the load alone (wall and this thread's CPU time: the
			 * machine may be shared), and the free after it */
			loads = loads > 0 ? loads : 1;
			printf("load_us %.1f\nload_cpu_us %.1f\nfree_us %.1f\n",
			       in_load / (double)loads * 1e6, cpu / (double)loads * 1e6,
			       in_free / (double)loads * 1e6);
		}
		return 0;
	}
	if (ds_read_file(argv[2], (size_t)1 << 30, &text, &len, &err) != 0) {
		fprintf(stderr, "tokbench: %s\n", err.msg);
		return 1;
	}
	if (!strstr(argv[1], ".bin")) {
		static char bin[] = "/tmp/tokbench-XXXXXX";
		int fd = mkstemp(bin);

		if (fd < 0 || ds_tok_compile_file(argv[1], NULL, bin, &err) != 0) {
			fprintf(stderr, "tokbench: %s\n", fd < 0 ? "mkstemp" : err.msg);
			return 1;
		}
		close(fd);
		argv[1] = bin;
	}
	if (ds_tok_load(&tok, argv[1], &err) != 0) { /* warm the page cache */
		fprintf(stderr, "tokbench: %s\n", err.msg);
		return 1;
	}
	ds_tok_free(tok);
	t0 = ds_now_s();
	for (long i = 0; i < loads; i++) {
		if (ds_tok_load(&tok, argv[1], &err) != 0) {
			fprintf(stderr, "tokbench: %s\n", err.msg);
			return 1;
		}
		ds_tok_free(tok);
	}
	printf("load_us %.1f\n", (ds_now_s() - t0) / (double)loads * 1e6);
	if (ds_tok_load(&tok, argv[1], &err) != 0)
		return 1;
	for (int rep = 0; rep < 3; rep++) {
		ids.n = 0;
		t0 = ds_now_s();
		if (ds_tok_encode(tok, text, len, DS_TOK_NO_BOS, &ids, &err) != 0) {
			fprintf(stderr, "tokbench: %s\n", err.msg);
			return 1;
		}
		t0 = ds_now_s() - t0;
		best = t0 < best ? t0 : best;
	}
	printf("tokens %zu\nencode_s %.4f\ntokens_per_s %.0f\n", ids.n, best,
	       (double)ids.n / best);
	ds_tok_ids_free(&ids);
	ds_tok_free(tok);
	free(text);
	if (strstr(argv[1], "/tmp/tokbench-"))
		unlink(argv[1]);
	return 0;
}

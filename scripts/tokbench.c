/* tokbench.c - the tokenizer part of `make bench` (scripts/bench.sh builds
 * it against build/libdscore.a): load time of a tokenizer.bin, and
 * single-threaded encode speed on a text file.
 * Usage: tokbench TOKENIZER TEXT [LOADS]  (a tokenizer.json or .model is
 * compiled to a temporary tokenizer.bin first: the load timed is the bin's)
 * Prints: "load_us MEAN", "tokens N", "encode_s S", "tokens_per_s R". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenizer/tokenizer.h"
#include "util.h"

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

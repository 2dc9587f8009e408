/* ds-tok - text to token ids and back, exactly as the model's tokenizer.
 * Options, I/O and exit codes; the work is in libcore/tokenizer. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "base/util.h"

static const char *prog = "ds-tok";

static void usage(FILE *f)
{
	fprintf(f, "usage: %s (-m DIR | -t FILE) [-l] [--bos|--no-bos] "
		"[--no-special] [--pieces] [--count] [-d]\n", prog);
}

struct opts {
	const char *dir, *file;
	int lines, pieces, count, decode;
	unsigned flags;
};

static int die(const char *msg)
{
	fprintf(stderr, "%s: %s\n", prog, msg);
	return 1;
}

/* All of stdin, NUL-terminated. */
static int read_all(char **out, size_t *len)
{
	size_t cap = 1 << 16, n = 0, r;
	char *b = malloc(cap);

	if (b == NULL)
		return -1;
	while ((r = fread(b + n, 1, cap - n - 1, stdin)) > 0) {
		n += r;
		if (cap - n - 1 == 0) {
			char *q = realloc(b, cap * 2);

			if (q == NULL) {
				free(b);
				return -1;
			}
			b = q;
			cap *= 2;
		}
	}
	if (ferror(stdin)) {
		free(b);
		return -1;
	}
	b[n] = '\0';
	*out = b;
	*len = n;
	return 0;
}

/* A piece for humans: C escapes for control bytes and backslash. */
static void print_piece(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '\\')
			fputs("\\\\", stdout);
		else if (c == '\n')
			fputs("\\n", stdout);
		else if (c == '\t')
			fputs("\\t", stdout);
		else if (c == '\r')
			fputs("\\r", stdout);
		else if (c < 0x20 || c == 0x7f)
			printf("\\x%02x", c);
		else
			putchar(c);
	}
}

static void print_ids(const ds_tok *tok, const struct opts *o,
		      const ds_tok_ids *ids)
{
	if (o->count) {
		printf("%zu\n", ids->n);
		return;
	}
	if (o->pieces) {
		for (size_t i = 0; i < ids->n; i++) {
			size_t n = 0;
			const char *p = ds_tok_piece(tok, ids->v[i], &n);

			printf("%d\t", ids->v[i]);
			print_piece(p ? p : "", p ? n : 0);
			putchar('\n');
		}
		if (o->lines)
			putchar('\n');
		return;
	}
	for (size_t i = 0; i < ids->n; i++) {
		char b[16];
		int k = 0;
		uint32_t v = (uint32_t)ids->v[i];

		do
			b[k++] = (char)('0' + v % 10);
		while ((v /= 10) > 0);
		if (i > 0)
			putchar(' ');
		while (k > 0)
			putchar(b[--k]);
	}
	putchar('\n');
}

/* One text: an empty one is an empty sequence, with no BOS. */
static int encode_one(const ds_tok *tok, const struct opts *o, const char *s,
		      size_t n, ds_tok_ids *ids)
{
	ds_err err;

	ids->n = 0;
	if (n > 0 && ds_tok_encode(tok, s, n, o->flags, ids, &err) != 0)
		return die(err.msg);
	print_ids(tok, o, ids);
	return 0;
}

static int encode(const ds_tok *tok, const struct opts *o)
{
	ds_tok_ids ids = { 0 };
	char *text;
	size_t len, start = 0;
	int rc = 0;

	if (read_all(&text, &len) != 0)
		return die("standard input: read error");
	if (!o->lines)
		rc = encode_one(tok, o, text, len, &ids);
	while (o->lines && rc == 0 && start < len) {
		char *nl = memchr(text + start, '\n', len - start);
		size_t end = nl ? (size_t)(nl - text) : len;

		rc = encode_one(tok, o, text + start, end - start, &ids);
		start = end + 1;
	}
	free(text);
	ds_tok_ids_free(&ids);
	return rc;
}

static int decode(const ds_tok *tok, const struct opts *o)
{
	ds_tok_ids ids = { 0 };
	ds_tok_text out = { 0 };
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	long lineno = 0;
	int rc = 0;
	ds_err err;

	while (rc == 0 && (n = getline(&line, &cap, stdin)) >= 0) {
		lineno++;
		if (n > 0 && line[n - 1] == '\n')
			line[--n] = '\0';
		/* ids past the vocabulary are the decoder's to name */
		if (ds_tok_ids_parse(line, (size_t)n, UINT32_MAX, &ids,
				     &err) != 0) {
			fprintf(stderr, "%s: line %ld: %s\n", prog, lineno,
				err.msg);
			rc = 1;
			break;
		}
		out.n = 0;
		if (ds_tok_decode(tok, ids.v, ids.n, o->flags & DS_TOK_NO_SPECIAL,
				  &out, &err) != 0) {
			fprintf(stderr, "%s: line %ld: %s\n", prog, lineno, err.msg);
			rc = 1;
			break;
		}
		fwrite(out.s, 1, out.n, stdout);
		putchar('\n');
	}
	free(line);
	ds_tok_ids_free(&ids);
	ds_tok_text_free(&out);
	return rc;
}

int main(int argc, char **argv)
{
	enum { O_BOS = 256, O_NOBOS, O_NOSPECIAL, O_PIECES, O_COUNT, O_VERSION };
	static const struct option lo[] = {
		{ "bos", no_argument, NULL, O_BOS },
		{ "count", no_argument, NULL, O_COUNT },
		{ "decode", no_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ "lines", no_argument, NULL, 'l' },
		{ "model", required_argument, NULL, 'm' },
		{ "no-bos", no_argument, NULL, O_NOBOS },
		{ "no-special", no_argument, NULL, O_NOSPECIAL },
		{ "pieces", no_argument, NULL, O_PIECES },
		{ "tokenizer", required_argument, NULL, 't' },
		{ "version", no_argument, NULL, O_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { 0 };
	ds_tok *tok;
	ds_err err;
	char *path;
	int c, rc;

	while ((c = getopt_long(argc, argv, "dhlm:t:", lo, NULL)) != -1) {
		switch (c) {
		case 'd': o.decode = 1; break;
		case 'h': usage(stdout); return 0;
		case 'l': o.lines = 1; break;
		case 'm': o.dir = optarg; break;
		case 't': o.file = optarg; break;
		case O_BOS: o.flags = (o.flags & ~(unsigned)DS_TOK_NO_BOS) | DS_TOK_BOS; break;
		case O_COUNT: o.count = 1; break;
		case O_NOBOS: o.flags = (o.flags & ~(unsigned)DS_TOK_BOS) | DS_TOK_NO_BOS; break;
		case O_NOSPECIAL: o.flags |= DS_TOK_NO_SPECIAL; break;
		case O_PIECES: o.pieces = 1; break;
		case O_VERSION: printf("%s %s\n", prog, DS_VERSION); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc || (o.dir == NULL) == (o.file == NULL) ||
	    (o.pieces && o.count) || (o.decode && (o.pieces || o.count))) {
		usage(stderr);
		return 2;
	}
	path = o.dir ? ds_path_join(o.dir, "tokenizer.bin") : strdup(o.file);
	if (path == NULL)
		return die("out of memory");
	ds_map_guard(); /* tokenizer.bin is used in place */
	if (ds_tok_load(&tok, path, &err) != 0) {
		free(path);
		return die(err.msg);
	}
	free(path);
	rc = o.decode ? decode(tok, &o) : encode(tok, &o);
	if (fflush(stdout) != 0 && rc == 0)
		rc = die("standard output: write error");
	ds_tok_free(tok);
	return rc;
}

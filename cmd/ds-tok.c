/* ds-tok - text to token ids and back, exactly as the model's tokenizer;
 * a chat request rendered with the model's template and encoded.
 * Options, I/O and exit codes; the work is in libcore/tokenizer and
 * libcore/chat. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/cli.h"
#include "base/util.h"
#include "chat/template.h"
#include "format/modelfile.h"
#include "tokenizer/tokenizer.h"


static void usage(FILE *f)
{
	fputs("usage: ds-tok (-m DIR | -t FILE) [-l] [--bos|--no-bos] "
	      "[--no-special] [--pieces] [--count] [-d]\n"
	      "       ds-tok (-m DIR | -t FILE) --chat [--render] [-l] [--pieces] "
	      "[--count]\n"
	      "              [--chat-template NAME | --chat-template-file FILE] "
	      "[--now SECONDS]\n", f);
}

struct opts {
	const char *dir, *file, *chat_tmpl, *chat_file;
	int lines, pieces, count, decode, chat, render;
	int pin;                   /* --now given */
	time_t now;
	unsigned flags;
};

/* One line on stderr, then exit status 1. */
static int die(const char *msg)
{
	ds_warnx("%s", msg);
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
static void print_piece(FILE *f, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '\\')
			fputs("\\\\", f);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c == '\t')
			fputs("\\t", f);
		else if (c == '\r')
			fputs("\\r", f);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\x%02x", c);
		else
			putc(c, f);
	}
}

static void print_ids_to(FILE *f, const ds_tok *tok, const struct opts *o,
			 const ds_tok_ids *ids)
{
	if (o->count) {
		fprintf(f, "%zu\n", ids->n);
		return;
	}
	if (o->pieces) {
		for (size_t i = 0; i < ids->n; i++) {
			size_t n = 0;
			const char *p = ds_tok_piece(tok, ids->v[i], &n);

			fprintf(f, "%d\t", ids->v[i]);
			print_piece(f, p ? p : "", p ? n : 0);
			putc('\n', f);
		}
		if (o->lines)
			putc('\n', f);
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
			putc(' ', f);
		while (k > 0)
			putc(b[--k], f);
	}
	putc('\n', f);
}

static void print_ids(const ds_tok *tok, const struct opts *o,
		      const ds_tok_ids *ids)
{
	print_ids_to(stdout, tok, o, ids);
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
			ds_warnx("line %ld: %s", lineno, err.msg);
			rc = 1;
			break;
		}
		out.n = 0;
		if (ds_tok_decode(tok, ids.v, ids.n, o->flags & DS_TOK_NO_SPECIAL,
				  &out, &err) != 0) {
			ds_warnx("line %ld: %s", lineno, err.msg);
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

/* ---- chat: a request body rendered and encoded -------------------------------- */

/* Where the tokenizer and the template are: -m DIR (DIR/tokenizer.bin,
 * DIR/model.meta); -t a model directory the same; -t a checkpoint
 * directory (its tokenizer.json or tokenizer.model, its
 * tokenizer_config.json); -t a file, the template beside it. */
typedef struct where {
	char *tok;                 /* the tokenizer's path */
	char *dir;                 /* the directory of the template */
	int model;                 /* dir holds model.meta */
} where;

static int exists_in(const char *dir, const char *name)
{
	char *p = ds_path_join(dir, name);
	int ok = p != NULL && access(p, F_OK) == 0;

	free(p);
	return ok;
}

static int locate_dir(const char *d, where *w, ds_err *err)
{
	static const char *const names[] = { "tokenizer.bin", "tokenizer.json",
					     "tokenizer.model" };
	int k;

	w->model = exists_in(d, "model.meta");
	for (k = w->model ? 0 : 1; k < 3; k++)
		if (w->model || exists_in(d, names[k])) {
			w->tok = ds_path_join(d, names[k]);
			break;
		}
	if (k == 3)
		return ds_errf(err, "%s: no model.meta, tokenizer.json or "
			       "tokenizer.model", d);
	w->dir = strdup(d);
	return w->tok && w->dir ? 0 : ds_errf(err, "out of memory");
}

static int locate(const struct opts *o, where *w, ds_err *err)
{
	char *slash;

	memset(w, 0, sizeof *w);
	if (o->dir != NULL) {
		w->tok = ds_path_join(o->dir, "tokenizer.bin");
		w->dir = strdup(o->dir);
		w->model = 1;
		return w->tok && w->dir ? 0 : ds_errf(err, "out of memory");
	}
	if (ds_is_dir(o->file))
		return locate_dir(o->file, w, err);
	w->tok = strdup(o->file);
	w->dir = strdup(o->file);
	if (w->tok == NULL || w->dir == NULL)
		return ds_errf(err, "out of memory");
	slash = strrchr(w->dir, '/');
	if (slash == NULL)
		strcpy(w->dir, ".");
	else
		slash[slash == w->dir] = '\0';
	w->model = exists_in(w->dir, "model.meta");
	return 0;
}

static void where_free(where *w)
{
	free(w->tok);
	free(w->dir);
}

static json_t *read_meta(const char *dir, ds_err *err)
{
	char *p = ds_path_join(dir, "model.meta"), *text = NULL;
	json_error_t je;
	json_t *m = NULL;
	size_t len;

	if (p == NULL)
		return ds_errf(err, "out of memory"), NULL;
	if (ds_read_file(p, DS_MODEL_MAX_META, &text, &len, err) == 0 &&
	    (m = json_loadb(text, len, 0, &je)) == NULL)
		ds_errf(err, "%s: line %d: %s", p, je.line, je.text);
	free(text);
	free(p);
	return m;
}

/* The special tokens for a template given on the command line: those the
 * model or checkpoint keeps with its own, else the tokenizer's BOS, EOS. */
static json_t *cli_special(const ds_tok *tok, const where *w)
{
	json_t *src = NULL, *sp = NULL, *o;
	ds_tok_info ti;
	size_t n;
	const char *p;

	if (w->model)
		src = read_meta(w->dir, NULL);
	else
		ds_chat_tpl_extract(w->dir, &src, NULL);
	if (w->model)
		sp = json_object_get(json_object_get(src, "chat_template_jinja"), "special");
	else
		sp = json_object_get(src, "special");
	o = json_is_object(sp) ? json_deep_copy(sp) : json_object();
	json_decref(src);
	if (o == NULL || json_object_size(o) > 0)
		return o;
	ds_tok_get_info(tok, &ti);
	if ((p = ds_tok_piece(tok, ti.bos, &n)) != NULL)
		json_object_set_new(o, "bos_token", json_stringn(p, n));
	if ((p = ds_tok_piece(tok, ti.eos, &n)) != NULL)
		json_object_set_new(o, "eos_token", json_stringn(p, n));
	return o;
}

/* The model's or checkpoint's own template: 1, 0 none, -1 error. */
static int own_template(const where *w, ds_chat_tpl *t, ds_err *err)
{
	char warn[640];
	json_t *m;
	int rc;

	if (!w->model)
		return ds_chat_tpl_dir(t, w->dir, err);
	if ((m = read_meta(w->dir, err)) == NULL)
		return -1;
	rc = ds_chat_tpl_meta(t, m, warn, sizeof warn, err);
	json_decref(m);
	if (warn[0])
		ds_warnx("warning: %s", warn);
	return rc;
}

static int load_template(const struct opts *o, const ds_tok *tok,
			 const where *w, ds_chat_tpl *t, ds_err *err)
{
	json_t *sp;
	int rc;

	if (o->chat_tmpl == NULL && o->chat_file == NULL) {
		rc = own_template(w, t, err);
		if (rc == 0)
			ds_errf(err, "%s: no chat template (%s): give --chat-template "
				"NAME or --chat-template-file FILE", w->dir,
				w->model ? "model.meta names none" :
				"neither chat_template.jinja nor a chat_template in "
				"tokenizer_config.json");
	} else {
		if ((sp = cli_special(tok, w)) == NULL)
			return ds_errf(err, "out of memory");
		rc = o->chat_file ? ds_chat_tpl_file(t, o->chat_file, sp, err)
				  : ds_chat_tpl_named(t, o->chat_tmpl, sp, err);
		json_decref(sp);
		rc = rc ? -1 : 1;
	}
	if (rc > 0 && o->pin) {
		t->jo.pin_time = 1;
		t->jo.now = o->now;
	}
	return rc > 0 ? 0 : -1;
}

/* One body: the rendering (--render), else its ids, onto out. */
static int chat_one(const ds_tok *tok, const ds_chat_tpl *t, const struct opts *o,
		    const char *body, size_t n, FILE *out, ds_err *err)
{
	json_t *msgs, *vars, *js;
	ds_tok_ids ids = { 0 };
	char *text = NULL;
	size_t len;
	int add_gen, rc;

	if (ds_chat_body(body, n, DS_CHAT_TOOLS, &msgs, &vars, &add_gen, err))
		return -1;
	rc = ds_chat_tpl_render(t, msgs, vars, add_gen, &text, &len, err);
	json_decref(msgs);
	json_decref(vars);
	if (rc == 0 && o->render && o->lines) {
		/* one line each: the text as a JSON string */
		js = json_stringn(text, len);
		rc = js == NULL || json_dumpf(js, out, JSON_ENCODE_ANY) ||
		     putc('\n', out) == EOF ? ds_errf(err, "out of memory") : 0;
		json_decref(js);
	} else if (rc == 0 && o->render) {
		fwrite(text, 1, len, out);
	} else if (rc == 0) {
		/* as apply_chat_template(tokenize=True): nothing added */
		rc = ds_tok_encode(tok, text, len, DS_TOK_NO_BOS | DS_TOK_NO_EOS,
				   &ids, err);
		if (rc == 0)
			print_ids_to(out, tok, o, &ids);
	}
	ds_tok_ids_free(&ids);
	free(text);
	return rc;
}

/* Every body (stdin whole, or each line) into a buffer; written only when
 * all went well. */
static int chat_all(const ds_tok *tok, const ds_chat_tpl *t, const struct opts *o,
		    const char *in, size_t len, FILE *out, ds_err *err)
{
	size_t start = 0, line = 0;

	if (!o->lines)
		return chat_one(tok, t, o, in, len, out, err) ?
		       ds_err_prefix(err, "standard input") : 0;
	while (start < len) {
		const char *nl = memchr(in + start, '\n', len - start);
		size_t end = nl ? (size_t)(nl - in) : len;

		line++;
		if (chat_one(tok, t, o, in + start, end - start, out, err))
			return ds_err_prefix(err, "line %zu", line);
		start = end + 1;
	}
	return 0;
}

static int chat(const ds_tok *tok, const struct opts *o, const where *w)
{
	ds_chat_tpl t;
	char *in = NULL, *buf = NULL;
	size_t len, n = 0;
	FILE *out;
	ds_err err;
	int rc;

	if (load_template(o, tok, w, &t, &err))
		return die(err.msg);
	if (read_all(&in, &len) != 0) {
		ds_chat_tpl_free(&t);
		return die("standard input: read error");
	}
	out = open_memstream(&buf, &n);
	rc = out == NULL ? ds_errf(&err, "out of memory")
			 : chat_all(tok, &t, o, in, len, out, &err);
	if (out != NULL && fclose(out) != 0 && rc == 0)
		rc = ds_errf(&err, "out of memory");
	if (rc == 0)
		fwrite(buf, 1, n, stdout);
	free(buf);
	free(in);
	ds_chat_tpl_free(&t);
	return rc ? die(err.msg) : 0;
}

/* 0 go on, 2 usage error, -1 exit 0 (help, version) */
static int parse_args(struct opts *o, int argc, char **argv)
{
	enum { O_BOS = 256, O_NOBOS, O_NOSPECIAL, O_PIECES, O_COUNT, O_VERSION,
	       O_CHAT, O_RENDER, O_TMPL, O_TMPL_FILE, O_NOW };
	static const struct option lo[] = {
		{ "bos", no_argument, NULL, O_BOS },
		{ "chat", no_argument, NULL, O_CHAT },
		{ "chat-template", required_argument, NULL, O_TMPL },
		{ "chat-template-file", required_argument, NULL, O_TMPL_FILE },
		{ "count", no_argument, NULL, O_COUNT },
		{ "decode", no_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ "lines", no_argument, NULL, 'l' },
		{ "model", required_argument, NULL, 'm' },
		{ "no-bos", no_argument, NULL, O_NOBOS },
		{ "no-special", no_argument, NULL, O_NOSPECIAL },
		{ "now", required_argument, NULL, O_NOW },
		{ "pieces", no_argument, NULL, O_PIECES },
		{ "render", no_argument, NULL, O_RENDER },
		{ "tokenizer", required_argument, NULL, 't' },
		{ "version", no_argument, NULL, O_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	int c, tweak = 0;
	long v;

	while ((c = getopt_long(argc, argv, "dhlm:t:", lo, NULL)) != -1) {
		switch (c) {
		case 'd': o->decode = 1; break;
		case 'h': usage(stdout); return -1;
		case 'l': o->lines = 1; break;
		case 'm': o->dir = optarg; break;
		case 't': o->file = optarg; break;
		case O_BOS: o->flags = (o->flags & ~(unsigned)DS_TOK_NO_BOS) | DS_TOK_BOS; tweak = 1; break;
		case O_CHAT: o->chat = 1; break;
		case O_COUNT: o->count = 1; break;
		case O_NOBOS: o->flags = (o->flags & ~(unsigned)DS_TOK_BOS) | DS_TOK_NO_BOS; tweak = 1; break;
		case O_NOSPECIAL: o->flags |= DS_TOK_NO_SPECIAL; tweak = 1; break;
		case O_NOW:
			if (ds_opt_long("--now", optarg, 0, 253402300799L, &v))
				return 2;
			o->pin = 1;
			o->now = (time_t)v;
			break;
		case O_PIECES: o->pieces = 1; break;
		case O_RENDER: o->render = o->chat = 1; break;
		case O_TMPL: o->chat_tmpl = optarg; break;
		case O_TMPL_FILE: o->chat_file = optarg; break;
		case O_VERSION: printf("ds-tok %s\n", DS_VERSION); return -1;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc || (o->dir == NULL) == (o->file == NULL) ||
	    (o->pieces && o->count) || (o->decode && (o->pieces || o->count)) ||
	    (o->chat && (o->decode || tweak)) || (o->render && (o->pieces || o->count)) ||
	    (!o->chat && (o->chat_tmpl || o->chat_file || o->pin)) ||
	    (o->chat_tmpl && o->chat_file)) {
		usage(stderr);
		return 2;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o = { 0 };
	ds_tok *tok;
	ds_err err;
	where w;
	int rc;

	rc = parse_args(&o, argc, argv);
	if (rc)
		return rc < 0 ? 0 : rc;
	if (locate(&o, &w, &err)) {
		where_free(&w);
		return die(err.msg);
	}
	ds_map_guard(); /* tokenizer.bin is used in place */
	if (ds_tok_load(&tok, w.tok, &err) != 0) {
		where_free(&w);
		return die(err.msg);
	}
	rc = o.chat ? chat(tok, &o, &w) : o.decode ? decode(tok, &o) : encode(tok, &o);
	if (fflush(stdout) != 0 && rc == 0)
		rc = die("standard output: write error");
	ds_tok_free(tok);
	where_free(&w);
	return rc;
}

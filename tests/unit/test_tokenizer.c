/* test_tokenizer.c - the tokenizer library's contract beyond conformance
 * (which test_tokgolden.c checks against the real tokenizers): loading
 * refuses what it does not implement and corrupt tokenizer.bin files,
 * never crashes on damaged ones, BOS/EOS and special-token settings, id
 * lookups, invalid UTF-8, the streaming decoder and concurrent encodes.
 * Small tokenizers are written here, so none of this needs the npm cache. */
#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tok_int.h"

static char dir[] = "/tmp/ds-tok-test-XXXXXX";
static uint64_t seed;

static char *path_in(const char *name)
{
	static char p[4][256];
	static int k;

	k = (k + 1) % 4;
	snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
	return p[k];
}

static void write_text(const char *path, const char *s)
{
	FILE *f = fopen(path, "w");

	fputs(s, f);
	fclose(f);
}

/* GPT-2's byte -> char map, as the tokenizer.json files use it. */
static void byte_char(int b, char out[4])
{
	uint32_t cp;
	int keep = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;

	if (keep) {
		cp = (uint32_t)b;
	} else {
		uint32_t n = 0;

		for (int c = 0; c < b; c++)
			n += !((c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || c >= 0xae);
		cp = 0x100 + n;
	}
	if (cp < 0x80) {
		out[0] = (char)cp;
		out[1] = 0;
	} else {
		out[0] = (char)(0xc0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3f));
		out[2] = 0;
	}
}

/* A byte-level BPE tokenizer.json: the 256 byte tokens (ids 0-255), merges
 * "h e" -> 256 "he", "he l" -> 257, "l o" -> 258, "hel lo" -> 259 ("hello"),
 * added tokens <bos> (260, special), <|user|> (261, special) and
 * "ZZ" (262, not special, single_word), pre-tokenizer GPT-2 split. */
static json_t *tiny_json(const char *model_type)
{
	json_t *vocab = json_object(), *merges = json_array(), *added = json_array();
	json_t *root;
	char c[4];
	static const char *const extra[] = { "he", "hel", "lo", "hello" };

	for (int b = 0; b < 256; b++) {
		byte_char(b, c);
		json_object_set_new(vocab, c, json_integer(b));
	}
	for (int i = 0; i < 4; i++)
		json_object_set_new(vocab, extra[i], json_integer(256 + i));
	json_array_append_new(merges, json_string("h e"));
	json_array_append_new(merges, json_string("he l"));
	json_array_append_new(merges, json_string("l o"));
	json_array_append_new(merges, json_string("hel lo"));
	json_array_append_new(added, json_pack("{s:i,s:s,s:b,s:b,s:b,s:b,s:b}", "id", 260,
		"content", "<bos>", "single_word", 0, "lstrip", 0, "rstrip", 0,
		"normalized", 0, "special", 1));
	json_array_append_new(added, json_pack("{s:i,s:s,s:b,s:b,s:b,s:b,s:b}", "id", 261,
		"content", "<|user|>", "single_word", 0, "lstrip", 0, "rstrip", 0,
		"normalized", 0, "special", 1));
	json_array_append_new(added, json_pack("{s:i,s:s,s:b,s:b,s:b,s:b,s:b}", "id", 262,
		"content", "ZZ", "single_word", 1, "lstrip", 0, "rstrip", 0,
		"normalized", 0, "special", 0));
	root = json_pack("{s:s,s:n,s:n,s:o,s:n,s:{s:s,s:b,s:b,s:b},s:n,"
			 "s:{s:s,s:b,s:b,s:b},s:{s:s,s:n,s:n,s:n,s:n,s:b,s:b,s:o,s:o}}",
		"version", "1.0", "truncation", "padding", "added_tokens", added,
		"normalizer",
		"pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0,
		"trim_offsets", 1, "use_regex", 1,
		"post_processor",
		"decoder", "type", "ByteLevel", "add_prefix_space", 0,
		"trim_offsets", 1, "use_regex", 1,
		"model", "type", model_type, "dropout", "unk_token",
		"continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 0,
		"byte_fallback", 0, "vocab", vocab, "merges", merges);
	return root;
}

static ds_tok *tiny(const char *config)
{
	json_t *j = tiny_json("BPE");
	ds_tok *t = NULL;
	ds_err err;
	char *p = path_in("tokenizer.json");

	json_dump_file(j, p, 0);
	json_decref(j);
	if (config != NULL)
		write_text(path_in("tokenizer_config.json"), config);
	else
		unlink(path_in("tokenizer_config.json"));
	T_CHECKF(ds_tok_load(&t, p, &err) == 0, "%s", err.msg);
	return t;
}

static void encode_str(const ds_tok *t, const char *s, unsigned flags,
		       ds_tok_ids *ids)
{
	ds_err err;

	ids->n = 0;
	T_CHECKF(ds_tok_encode(t, s, strlen(s), flags, ids, &err) == 0, "%s", err.msg);
}

static int ids_are(const ds_tok_ids *ids, const int32_t *want, size_t n)
{
	return ids->n == n && memcmp(ids->v, want, n * sizeof *want) == 0;
}

/* ---- encoding ------------------------------------------------------------------ */

static void test_merges_and_pretokens(void)
{
	ds_tok *t = tiny(NULL);
	ds_tok_ids ids = { 0 };
	/* "hello" -> he, l -> hel; l, o -> lo; hel lo -> hello.  " hello" is
	 * its own GPT-2 piece " hello": space byte then the same merges. */
	static const int32_t a[] = { 259 }, b[] = { 259, ' ', 259, '!' };

	if (t == NULL)
		return;
	encode_str(t, "hello", 0, &ids);
	T_CHECK(ids_are(&ids, a, 1));
	encode_str(t, "hello hello!", 0, &ids);
	T_CHECK(ids_are(&ids, b, 4));
	ds_tok_ids_free(&ids);
	ds_tok_free(t);
}

static void test_bos_from_config(void)
{
	ds_tok *t = tiny("{\"add_bos_token\": true, \"bos_token\": \"<bos>\", "
			 "\"eos_token\": {\"content\": \"<|user|>\"}, "
			 "\"model_max_length\": 1000000000000000019884624838656}");
	ds_tok_ids ids = { 0 };
	ds_tok_info info;
	static const int32_t with[] = { 260, 259 }, without[] = { 259 };

	if (t == NULL)
		return;
	ds_tok_get_info(t, &info);
	T_CHECK(info.bos == 260 && info.eos == 261 && info.add_bos == 1);
	encode_str(t, "hello", 0, &ids);
	T_CHECK(ids_are(&ids, with, 2));
	encode_str(t, "hello", DS_TOK_NO_BOS, &ids);
	T_CHECK(ids_are(&ids, without, 1));
	ds_tok_free(t);
	t = tiny("{\"add_bos_token\": false, \"bos_token\": \"<bos>\"}");
	encode_str(t, "hello", 0, &ids);
	T_CHECK(ids_are(&ids, without, 1));
	encode_str(t, "hello", DS_TOK_BOS, &ids);
	T_CHECK(ids_are(&ids, with, 2));
	ds_tok_ids_free(&ids);
	ds_tok_free(t);
}

static void test_special_tokens(void)
{
	ds_tok *t = tiny(NULL);
	ds_tok_ids ids = { 0 };
	static const int32_t sp[] = { 261, 259, 261 };
	/* not matched: "<|user|>" as bytes through the GPT-2 split:
	 * "<|", "user", "|>" */
	static const int32_t plain[] = { '<', '|', 'u', 's', 'e', 'r', '|', '>' };
	/* single_word: ZZ alone matches, inside a word it does not */
	static const int32_t word[] = { 262, ' ', 'a', 'Z', 'Z', 'b' };

	if (t == NULL)
		return;
	encode_str(t, "<|user|>hello<|user|>", 0, &ids);
	T_CHECK(ids_are(&ids, sp, 3));
	encode_str(t, "<|user|>", DS_TOK_NO_SPECIAL, &ids);
	T_CHECK(ids_are(&ids, plain, 8));
	encode_str(t, "ZZ aZZb", 0, &ids);
	T_CHECK(ids_are(&ids, word, 6));
	T_CHECK(ds_tok_piece_id(t, "<|user|>", 8) == 261);
	T_CHECK(ds_tok_piece_id(t, "hello", 5) == 259);
	T_CHECK(ds_tok_piece_id(t, "\xc4\xa0", 2) == ' '); /* "Ġ" */
	T_CHECK(ds_tok_piece_id(t, "nope", 4) == -1);
	T_CHECK(ds_tok_is_special(t, 261) && !ds_tok_is_special(t, 262));
	{
		size_t n = 0;
		const char *p = ds_tok_piece(t, 262, &n);

		T_CHECK(p != NULL && n == 2 && memcmp(p, "ZZ", 2) == 0);
		T_CHECK(ds_tok_piece(t, 263, &n) == NULL && ds_tok_piece(t, -1, &n) == NULL);
	}
	ds_tok_ids_free(&ids);
	ds_tok_free(t);
}

/* Invalid UTF-8 goes through as byte tokens, kept apart from the text
 * around it; valid text around it encodes as it would alone. */
static void test_invalid_utf8_bytes_through(void)
{
	ds_tok *t = tiny(NULL);
	ds_tok_ids ids = { 0 }, a = { 0 }, b = { 0 };
	ds_tok_text txt = { 0 };
	ds_err err;
	const char s[] = "hello\xe9\xff hello\xe4\xb8";

	if (t == NULL)
		return;
	T_CHECK(ds_tok_encode(t, s, sizeof s - 1, 0, &ids, &err) == 0);
	encode_str(t, "hello", 0, &a);
	encode_str(t, " hello", 0, &b);
	T_CHECK(ids.n == a.n + 2 + b.n + 2);
	if (ids.n == a.n + 2 + b.n + 2) {
		T_CHECK(memcmp(ids.v, a.v, a.n * 4) == 0);
		T_CHECK(ids.v[a.n] == 0xe9 && ids.v[a.n + 1] == 0xff);
		T_CHECK(memcmp(ids.v + a.n + 2, b.v, b.n * 4) == 0);
		T_CHECK(ids.v[ids.n - 2] == 0xe4 && ids.v[ids.n - 1] == 0xb8);
	}
	/* decoding gives the bytes back as U+FFFD, as the reference's lossy
	 * UTF-8 does: one per maximal invalid subpart */
	T_CHECK(ds_tok_decode(t, ids.v, ids.n, 0, &txt, &err) == 0);
	T_CHECK(strcmp(txt.s, "hello\xef\xbf\xbd\xef\xbf\xbd hello\xef\xbf\xbd") == 0);
	ds_tok_ids_free(&ids);
	ds_tok_ids_free(&a);
	ds_tok_ids_free(&b);
	ds_tok_text_free(&txt);
	ds_tok_free(t);
}

/* ---- decoding ---------------------------------------------------------------------- */

static void test_decode_errors_and_skip(void)
{
	ds_tok *t = tiny(NULL);
	ds_tok_text txt = { 0 };
	ds_err err;
	static const int32_t bad[] = { 259, 99999 }, neg[] = { -3 };
	static const int32_t sp[] = { 261, 259, 261 };

	if (t == NULL)
		return;
	T_CHECK(ds_tok_decode(t, bad, 2, 0, &txt, &err) == -1);
	T_CHECKF(strstr(err.msg, "99999") && strstr(err.msg, "position 2"), "%s", err.msg);
	T_CHECK(txt.n == 0);
	T_CHECK(ds_tok_decode(t, neg, 1, 0, &txt, &err) == -1);
	T_CHECK(ds_tok_decode(t, sp, 3, 0, &txt, &err) == 0 &&
		strcmp(txt.s, "<|user|>hello<|user|>") == 0);
	txt.n = 0;
	T_CHECK(ds_tok_decode(t, sp, 3, DS_TOK_NO_SPECIAL, &txt, &err) == 0 &&
		strcmp(txt.s, "hello") == 0);
	ds_tok_text_free(&txt);
	ds_tok_free(t);
}

/* Random byte tokens, pushed one at a time: no push ever ends inside a
 * UTF-8 sequence, and the whole equals the one-shot decode. */
static void test_stream_never_splits_utf8(void)
{
	ds_tok *t = tiny(NULL);
	ds_tok_text whole = { 0 }, st = { 0 };
	ds_err err;
	int32_t ids[64];
	int ok = 1;

	if (t == NULL)
		return;
	for (int round = 0; round < 300 && ok; round++) {
		size_t n = 1 + t_rand(&seed) % 64;
		ds_tok_stream s;

		for (size_t i = 0; i < n; i++) {
			/* mostly the bytes of valid multi-byte chars */
			uint64_t r = t_rand(&seed);

			ids[i] = (r & 3) ? (int32_t)(0x80 + (r >> 8) % 0x75) : (int32_t)((r >> 8) % 263);
		}
		whole.n = 0;
		ok &= ds_tok_decode(t, ids, n, 0, &whole, &err) == 0;
		st.n = 0;
		ds_tok_stream_init(&s, t, 0);
		for (size_t i = 0; i < n && ok; i++) {
			ok &= ds_tok_stream_push(&s, ids[i], &st, &err) == 0;
			/* the output so far is valid UTF-8 to its end */
			for (size_t k = 0; k < st.n && ok;) {
				uint8_t c = (uint8_t)st.s[k];
				size_t l = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;

				ok &= k + l <= st.n;
				k += l;
			}
		}
		ok &= ds_tok_stream_finish(&s, &st, &err) == 0;
		ok &= st.n == whole.n && memcmp(st.s, whole.s, st.n) == 0;
	}
	T_CHECK(ok);
	ds_tok_text_free(&whole);
	ds_tok_text_free(&st);
	ds_tok_free(t);
}

/* ---- loading --------------------------------------------------------------------------- */

static void test_refuses_other_models(void)
{
	const char *types[] = { "WordPiece", "Unigram", "WordLevel" };
	ds_tok *t;
	ds_err err;

	for (int i = 0; i < 3; i++) {
		json_t *j = tiny_json(types[i]);

		json_dump_file(j, path_in("other.json"), 0);
		json_decref(j);
		T_CHECK(ds_tok_load(&t, path_in("other.json"), &err) == -1);
		T_CHECKF(strstr(err.msg, types[i]) != NULL, "%s", err.msg);
	}
	write_text(path_in("tokenizer.model"), "IQ== 0\nIg== 1\nIw== 2\n");
	T_CHECK(ds_tok_load(&t, path_in("tokenizer.model"), &err) == -1);
	T_CHECKF(strstr(err.msg, "tiktoken") != NULL, "%s", err.msg);
	write_text(path_in("junk"), "\x01\x02junk");
	T_CHECK(ds_tok_load(&t, path_in("junk"), &err) == -1);
	T_CHECK(ds_tok_load(&t, path_in("missing"), &err) == -1);
}

static uint8_t *compile_tiny(size_t *len)
{
	json_t *j = tiny_json("BPE");
	uint8_t *img = NULL;
	ds_err err;

	json_dump_file(j, path_in("tokenizer.json"), 0);
	json_decref(j);
	unlink(path_in("tokenizer_config.json"));
	T_CHECKF(ds_tok_compile(path_in("tokenizer.json"), NULL, &img, len, &err) == 0,
		 "%s", err.msg);
	return img;
}

static int load_image(const uint8_t *img, size_t len, ds_tok **t, ds_err *err)
{
	FILE *f = fopen(path_in("x.bin"), "wb");

	fwrite(img, 1, len, f);
	fclose(f);
	return ds_tok_load(t, path_in("x.bin"), err);
}

static int memchr_i32(const int32_t *v, size_t n, int32_t x)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == x)
			return 1;
	return 0;
}

/* A SentencePiece Unigram image whose header names no unknown token (as
 * only a made file can): text outside the vocabulary is an error naming
 * the bytes, never id -1 (found by fuzz_tokbin); inside it, encodes. */
static void test_bin_no_unk(void)
{
	const size_t unk_at = offsetof(struct tb_header, unk);
	const char *text = "a \xe2\x98\x83 b"; /* U+2603 is not a piece */
	uint8_t *img = NULL;
	size_t len = 0;
	ds_tok_ids ids = { 0 };
	ds_tok *t = NULL;
	ds_err err;
	int32_t none = -1;

	T_CHECKF(ds_tok_compile("testdata/tok/sp/uni.model", NULL, &img, &len,
				&err) == 0, "%s", err.msg);
	if (img == NULL)
		return;
	/* with its unknown token the snowman is that token */
	T_CHECKF(load_image(img, len, &t, &err) == 0, "%s", err.msg);
	T_CHECK(t != NULL && ds_tok_encode(t, text, strlen(text), 0, &ids,
					   &err) == 0);
	T_CHECK(t != NULL && memchr_i32(ids.v, ids.n, t->h->unk));
	ds_tok_ids_free(&ids);
	ds_tok_free(t);
	t = NULL;
	memcpy(img + unk_at, &none, sizeof none);
	T_CHECKF(load_image(img, len, &t, &err) == 0, "%s", err.msg);
	if (t != NULL) {
		T_CHECK(ds_tok_encode(t, text, strlen(text), 0, &ids, &err) == -1);
		T_CHECKF(strstr(err.msg, "x.bin: no token for the text e2 98 83 "
				"and no unknown token") != NULL, "%s", err.msg);
		ds_tok_ids_free(&ids);
		T_CHECK(ds_tok_encode(t, "a b", 3, 0, &ids, &err) == 0 && ids.n > 0);
		for (size_t i = 0; i < ids.n; i++)
			T_CHECK(ids.v[i] >= 0);
		ds_tok_ids_free(&ids);
	}
	ds_tok_free(t);
	free(img);
}

static void test_bin_validation(void)
{
	size_t len = 0;
	uint8_t *img = compile_tiny(&len), *bad;
	ds_tok *t;
	ds_err err;
	uint32_t v;

	if (img == NULL)
		return;
	bad = malloc(len);
	T_CHECK(load_image(img, len, &t, &err) == 0);
	ds_tok_free(t);
	/* truncated */
	T_CHECK(load_image(img, len - 1, &t, &err) == -1);
	T_CHECK(load_image(img, 100, &t, &err) == -1);
	/* bad magic */
	memcpy(bad, img, len);
	bad[0] ^= 1;
	T_CHECK(load_image(bad, len, &t, &err) == -1);
	/* another version: named in the message */
	memcpy(bad, img, len);
	v = 2;
	memcpy(bad + 8, &v, 4);
	T_CHECK(load_image(bad, len, &t, &err) == -1);
	T_CHECKF(strstr(err.msg, "version 2") != NULL, "%s", err.msg);
	/* a section past the end: section table entry 0's offset (at 128+8) */
	memcpy(bad, img, len);
	{
		uint64_t off = len;

		memcpy(bad + 128 + 8, &off, 8);
	}
	T_CHECK(load_image(bad, len, &t, &err) == -1);
	free(bad);
	free(img);
}

/* Damage anywhere: loading may fail, but encoding and decoding whatever
 * loads must not crash or read out of bounds (ASan watches). */
static void test_bin_fuzz(void)
{
	size_t len = 0;
	uint8_t *img = compile_tiny(&len), *bad;
	int loaded = 0;

	if (img == NULL)
		return;
	bad = malloc(len);
	for (int round = 0; round < 200; round++) {
		ds_tok *t;
		ds_tok_ids ids = { 0 };
		ds_tok_text txt = { 0 };
		ds_err err;
		int flips = 1 + (int)(t_rand(&seed) % 8);

		memcpy(bad, img, len);
		for (int k = 0; k < flips; k++) {
			/* half the flips in the first KB, where the tables are */
			size_t at = (t_rand(&seed) & 1) ? t_rand(&seed) % (len < 1024 ? len : 1024)
							 : t_rand(&seed) % len;

			bad[at] ^= (uint8_t)(1u << (t_rand(&seed) % 8));
		}
		if (load_image(bad, len, &t, &err) != 0)
			continue;
		loaded++;
		(void)ds_tok_encode(t, "hello <|user|> ZZ w\xc3\xb6rld 123", 25, 0, &ids, &err);
		{
			int32_t some[8];

			for (int i = 0; i < 8; i++)
				some[i] = (int32_t)(t_rand(&seed) % 270);
			(void)ds_tok_decode(t, some, 8, 0, &txt, &err);
		}
		ds_tok_ids_free(&ids);
		ds_tok_text_free(&txt);
		ds_tok_free(t);
	}
	printf("# %d of 200 damaged images loaded\n", loaded);
	free(bad);
	free(img);
}

/* ---- threads ------------------------------------------------------------------------------ */

struct job {
	const ds_tok *t;
	const char *text;
	ds_tok_ids want;
	int ok;
};

static void *worker(void *p)
{
	struct job *j = p;
	ds_tok_ids ids = { 0 };
	ds_err err;

	j->ok = 1;
	for (int i = 0; i < 50; i++) {
		ids.n = 0;
		j->ok &= ds_tok_encode(j->t, j->text, strlen(j->text), 0, &ids, &err) == 0 &&
			 ids.n == j->want.n &&
			 memcmp(ids.v, j->want.v, ids.n * sizeof *ids.v) == 0;
	}
	ds_tok_ids_free(&ids);
	return NULL;
}

static void test_concurrent_encodes(void)
{
	ds_tok *t = tiny(NULL);
	static const char *texts[4] = { "hello hello world <|user|>",
		"ZZ zz hello\n\n  tabs\t\there", "12345 67 8 9 hello!!",
		"\xe4\xb8\xad\xe6\x96\x87 hello \xf0\x9f\x98\x80" };
	struct job jobs[4];
	pthread_t th[4];

	if (t == NULL)
		return;
	for (int i = 0; i < 4; i++) {
		jobs[i] = (struct job){ t, texts[i], { 0 }, 0 };
		encode_str(t, texts[i], 0, &jobs[i].want);
	}
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, worker, &jobs[i]);
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		T_CHECK(jobs[i].ok);
		ds_tok_ids_free(&jobs[i].want);
	}
	ds_tok_free(t);
}

static void test_chat_template_names(void)
{
	static const struct { const char *tmpl, *name; } cases[] = {
		{ "{{'<\xef\xbd\x9cUser\xef\xbd\x9c>' + m}}{{'<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>'}}", "deepseek3" },
		{ "{{'<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>'}}{% set c = c.split('</think>')[-1] %}", "deepseek-r1" },
		{ "{{ 'User: ' + m['content'] + '\\n\\n' }}{{ 'Assistant: ' }}", "deepseek2" },
		{ "<|start_header_id|>{{ role }}<|end_header_id|>", "llama3" },
		{ "{{'<|im_start|>' + role + '\\n'}}", "chatml" },
		{ "{{ messages }}", "" },
	};

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		json_t *cfg = json_pack("{s:s}", "chat_template", cases[i].tmpl);
		char *s = json_dumps(cfg, 0);
		ds_tok *t = tiny(s);
		ds_tok_info info;

		if (t != NULL) {
			ds_tok_get_info(t, &info);
			T_CHECKF(strcmp(info.chat_template, cases[i].name) == 0,
				 "%s: got \"%s\"", cases[i].name, info.chat_template);
		}
		ds_tok_free(t);
		free(s);
		json_decref(cfg);
	}
}

/* What ds-convert gets: DST/tokenizer.bin and the meta keys. */
static void test_convert_meta(void)
{
	json_t *meta = json_object(), *tk;
	ds_tok *t = tiny("{\"add_bos_token\": true, \"bos_token\": \"<bos>\", "
			 "\"chat_template\": \"<|im_start|>{{ m }}\"}");
	ds_tok *back = NULL;
	ds_err err;
	char *out = path_in("dst");

	ds_tok_free(t);
	mkdir(out, 0755);
	T_CHECKF(ds_tok_convert(dir, out, meta, &err) == 0, "%s", err.msg);
	tk = json_object_get(meta, "tokenizer");
	T_CHECK(json_is_object(tk));
	T_CHECK(strcmp(json_string_value(json_object_get(tk, "file")), "tokenizer.bin") == 0);
	T_CHECK(strcmp(json_string_value(json_object_get(tk, "source")), "tokenizer.json") == 0);
	T_CHECK(strcmp(json_string_value(json_object_get(tk, "type")), "bpe-bytelevel") == 0);
	T_CHECK(json_integer_value(json_object_get(tk, "n_vocab")) == 263);
	T_CHECK(json_integer_value(json_object_get(tk, "bos")) == 260);
	T_CHECK(json_is_null(json_object_get(tk, "eos")));
	T_CHECK(json_is_true(json_object_get(tk, "add_bos")));
	T_CHECK(strcmp(json_string_value(json_object_get(tk, "bos_token")), "<bos>") == 0);
	T_CHECK(strlen(json_string_value(json_object_get(tk, "crc32"))) == 8);
	T_CHECK(strcmp(json_string_value(json_object_get(meta, "chat_template")), "chatml") == 0);
	T_CHECKF(ds_tok_load(&back, path_in("dst/tokenizer.bin"), &err) == 0, "%s", err.msg);
	T_CHECK(back != NULL && ds_tok_bos(back) == 260);
	ds_tok_free(back);
	T_CHECK(ds_tok_convert(out, out, meta, &err) == -1); /* no tokenizer there */
	json_decref(meta);
}

/* The Oniguruma-to-PCRE2 translation, by its rules: classes and their
 * literal first "]", POSIX names copied, \uHHHH, other escapes kept;
 * nested classes, && and an unterminated [: refused. */
static void test_onig_translation(void)
{
	static const char *const same[] = {
		"a[]b]c", "[^]a]", "[[:alpha:]x]", "\\.\\(", "(?i:'s|'t)",
		"x\\]", "[\\]]",
	};
	static const char *const bad[] = { "[a[b]]", "[a&&b]", "[[:alpha" };
	ds_err err = { { 0 } };
	char *p;

	for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
		p = tk_onig_to_pcre2(same[i], strlen(same[i]), &err);
		T_CHECKF(p && strcmp(p, same[i]) == 0, "%s -> %s", same[i],
			 p ? p : err.msg);
		free(p);
	}
	p = tk_onig_to_pcre2("\\u00e9+", 7, &err);
	T_CHECKF(p && strcmp(p, "\\x{00e9}+") == 0, "\\u: %s", p ? p : err.msg);
	free(p);
	p = tk_onig_to_pcre2("\\s", 2, &err);
	T_CHECKF(p && p[0] == '[' && p[strlen(p) - 1] == ']', "\\s: %s", p ? p : "");
	free(p);
	/* a pattern that is not NUL-terminated ends where n says */
	p = tk_onig_to_pcre2("[[:alpha:]]", 6, &err);
	T_CHECK(p == NULL);
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		p = tk_onig_to_pcre2(bad[i], strlen(bad[i]), &err);
		T_CHECKF(p == NULL && strncmp(err.msg, "regex: ", 7) == 0, "%s: %s",
			 bad[i], err.msg);
		free(p);
	}
}

int main(void)
{
	seed = t_seed();
	if (mkdtemp(dir) == NULL) {
		printf("not ok 1 - mkdtemp\n1..1\n");
		return 1;
	}
	T_RUN(test_merges_and_pretokens);
	T_RUN(test_bos_from_config);
	T_RUN(test_special_tokens);
	T_RUN(test_invalid_utf8_bytes_through);
	T_RUN(test_decode_errors_and_skip);
	T_RUN(test_stream_never_splits_utf8);
	T_RUN(test_refuses_other_models);
	T_RUN(test_bin_validation);
	T_RUN(test_bin_fuzz);
	T_RUN(test_concurrent_encodes);
	T_RUN(test_chat_template_names);
	T_RUN(test_convert_meta);
	T_RUN(test_onig_translation);
	T_RUN(test_bin_no_unk);
	{
		char cmd[300];

		snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			printf("# could not remove %s\n", dir);
	}
	return t_done();
}

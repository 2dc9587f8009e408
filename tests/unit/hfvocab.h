/*
 * hfvocab.h - the bytes of every token of a Hugging Face tokenizer.json,
 * for the grammar tests and scripts/gbench.c.  Byte-level BPE files
 * (decoder ByteLevel: DeepSeek-V3, Llama 3, Qwen) spell bytes as GPT-2's
 * printable stand-ins; SentencePiece-style files write a space as U+2581
 * and raw bytes as <0xNN>.  Added tokens are control tokens here: they
 * never match.
 */
#ifndef DS_HFVOCAB_H
#define DS_HFVOCAB_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct hfvocab {
	size_t n;
	uint8_t **bytes;
	uint32_t *lens;
	uint8_t *special;
	int32_t eos;
} hfvocab;

/* GPT-2's map from a stand-in code point back to its byte (-1: none). */
static inline void hfv_bytelevel_map(int16_t *back)
{
	int b, k = 0;

	for (b = 0; b < 512; b++)
		back[b] = -1;
	for (b = 0; b < 256; b++) {
		int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) ||
			   (b >= 174 && b <= 255);

		back[keep ? b : 256 + k++] = (int16_t)b;
	}
}

static inline uint32_t hfv_utf8(const uint8_t *s, size_t n, size_t *len)
{
	uint32_t c = s[0];
	size_t k = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4, i;

	if (k > n)
		k = n;
	if (k > 1)
		c &= 0xff >> (k + 1);
	for (i = 1; i < k; i++)
		c = c << 6 | (s[i] & 0x3f);
	*len = k;
	return c;
}

/* The bytes a vocabulary entry stands for; 0, -1 unreadable. */
static inline int hfv_decode(const char *piece, int bytelevel,
			     const int16_t *back, uint8_t *out, uint32_t *n)
{
	const uint8_t *s = (const uint8_t *)piece;
	size_t len = strlen(piece), i = 0, k;
	unsigned v;

	*n = 0;
	if (!bytelevel && len == 6 && sscanf(piece, "<0x%2X>", &v) == 1) {
		out[(*n)++] = (uint8_t)v;
		return 0;
	}
	while (i < len) {
		uint32_t c = hfv_utf8(s + i, len - i, &k);

		if (bytelevel) {
			if (c >= 512 || back[c] < 0)
				return -1;
			out[(*n)++] = (uint8_t)back[c];
		} else if (c == 0x2581) {
			out[(*n)++] = ' ';
		} else {
			memcpy(out + *n, s + i, k);
			*n += (uint32_t)k;
		}
		i += k;
	}
	return 0;
}

static inline void hfvocab_free(hfvocab *hv)
{
	size_t i;

	for (i = 0; i < hv->n; i++)
		free(hv->bytes[i]);
	free(hv->bytes);
	free(hv->lens);
	free(hv->special);
	memset(hv, 0, sizeof *hv);
}

/* Load path; keep ids below limit (0: all); eos is the added token named
 * eos_name.  0, or -1 with a line on stderr. */
static inline int hfvocab_load(const char *path, const char *eos_name,
			       size_t limit, hfvocab *hv)
{
	json_t *root = json_load_file(path, 0, NULL), *vocab, *added, *x;
	const char *dec, *key;
	int16_t back[512];
	int bytelevel;
	size_t i, n = 0;

	memset(hv, 0, sizeof *hv);
	hv->eos = -1;
	if (root == NULL) {
		fprintf(stderr, "%s: cannot read\n", path);
		return -1;
	}
	vocab = json_object_get(json_object_get(root, "model"), "vocab");
	added = json_object_get(root, "added_tokens");
	dec = json_string_value(json_object_get(json_object_get(root, "decoder"), "type"));
	bytelevel = dec && strcmp(dec, "ByteLevel") == 0;
	hfv_bytelevel_map(back);
	json_object_foreach(vocab, key, x)
		if ((size_t)json_integer_value(x) + 1 > n)
			n = (size_t)json_integer_value(x) + 1;
	json_array_foreach(added, i, x)
		if ((size_t)json_integer_value(json_object_get(x, "id")) + 1 > n)
			n = (size_t)json_integer_value(json_object_get(x, "id")) + 1;
	if (limit && n > limit)
		n = limit;
	hv->n = n;
	hv->bytes = calloc(n, sizeof *hv->bytes);
	hv->lens = calloc(n, sizeof *hv->lens);
	hv->special = calloc(n, 1);
	json_object_foreach(vocab, key, x) {
		size_t id = (size_t)json_integer_value(x);
		uint8_t buf[1024];
		uint32_t len;

		if (id >= n || strlen(key) > 250 ||
		    hfv_decode(key, bytelevel, back, buf, &len) != 0)
			continue;
		hv->bytes[id] = malloc(len + 1);
		memcpy(hv->bytes[id], buf, len);
		hv->lens[id] = len;
	}
	json_array_foreach(added, i, x) {
		size_t id = (size_t)json_integer_value(json_object_get(x, "id"));
		const char *c = json_string_value(json_object_get(x, "content"));

		if (id >= n)
			continue;
		hv->special[id] = 1;
		if (c && eos_name && strcmp(c, eos_name) == 0)
			hv->eos = (int32_t)id;
	}
	json_decref(root);
	return 0;
}

#endif

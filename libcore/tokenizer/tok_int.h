/*
 * tok_int.h - internals of the tokenizer library: the tokenizer.bin layout
 * (which is also the in-memory form), the builder the .json and .model
 * readers fill, and the stages of the encoder.  Not a public header.
 *
 * tokenizer.bin, version 1 (all integers little-endian):
 *   header (struct tb_header, 128 bytes)
 *   section table: n_sect x struct tb_sect
 *   sections, each at an 8-byte aligned offset: first the small ones that
 *   opening reads (byte ids, added-token info, the two programs), then the
 *   pool (whose start holds the programs' strings), then the big tables,
 *   so that opening a file touches only its first page
 * Strings live in the POOL section and are referred to by (offset, length).
 * Lookup tables are open-addressing hash tables with a power-of-two number
 * of u32 slots (0 empty, else index + 1), probed linearly from
 * hash & (n - 1); the keys are the strings the entries point to.
 */
#ifndef DS_TOK_INT_H
#define DS_TOK_INT_H

#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer.h"

#define TB_MAGIC "DSTOKBIN"
#define TB_VERSION 1u
#define TB_MAX_VOCAB (1u << 24)
#define TB_MAX_OPS 64u
/* The biggest tokenizer.json published is ~30 MB; configs are a few kB
 * (a chat template included).  jansson takes about 10x the text. */
#define TB_MAX_JSON (256u << 20)
#define TB_MAX_CONFIG (16u << 20)

enum tb_model {
	TB_HF_BPE = 1,     /* Hugging Face BPE: merges by rank */
	TB_SP_BPE = 2,     /* SentencePiece BPE: merges by piece score */
	TB_SP_UNIGRAM = 3, /* SentencePiece Unigram: Viterbi over scores */
};

enum tb_flags {
	TBF_BYTE_LEVEL = 1u << 0,   /* pieces are GPT-2 byte-mapped; encode
				       keys (token text) are raw bytes */
	TBF_BYTE_FALLBACK = 1u << 1, /* unknown chars -> <0xHH> tokens */
	TBF_IGNORE_MERGES = 1u << 2, /* a pre-token in the vocab is one token */
	TBF_FUSE_UNK = 1u << 3,
	TBF_ADD_BOS = 1u << 4,
	TBF_ADD_EOS = 1u << 5,
	TBF_SP_DUMMY_PREFIX = 1u << 6,
	TBF_SP_REMOVE_WS = 1u << 7,
	TBF_SP_ESCAPE_WS = 1u << 8,
	TBF_SP_WS_SUFFIX = 1u << 9,
	TBF_DEC_STRIP1 = 1u << 10,   /* HF decoder drops one leading space */
	TBF_DEC_BYTES_ALL = 1u << 11, /* HF ByteFallback: an invalid byte run
					 becomes U+FFFD per byte, all of it */
	TBF_DEC_SP = 1u << 12,       /* SentencePiece's decoder rules */
	TBF_DEC_META = 1u << 13,     /* decoding turns U+2581 into a space */
	TBF_SP_WORDS = 1u << 14,     /* SP BPE: no piece has U+2581 but at its
					start, so no merge crosses one: the
					text is merged word by word */
};

/* Token attributes (tb_token.attr); a byte token's value is in bits 24-31. */
enum tb_attr {
	TA_SPECIAL = 1u << 0,
	TA_ADDED = 1u << 1,      /* an added token (HF) / user-defined (SP) */
	TA_CONTROL = 1u << 2,    /* SP CONTROL: decodes to nothing */
	TA_UNKNOWN = 1u << 3,
	TA_BYTE = 1u << 4,       /* <0xHH> */
	TA_UNUSED = 1u << 5,     /* SP UNUSED */
	TA_NORMALIZED = 1u << 6, /* HF added token matched after normalizing */
	TA_LSTRIP = 1u << 7,
	TA_RSTRIP = 1u << 8,
	TA_SINGLE_WORD = 1u << 9,
	TA_ENC = 1u << 10,       /* reachable by the model (in the ENC table) */
	TA_NORMAL = 1u << 11,    /* SP NORMAL */
};

struct tb_header {
	char magic[8];
	uint32_t version, header_size;
	uint64_t file_size;
	uint32_t model, flags, n_vocab, n_sect;
	int32_t bos, eos, eot, unk, pad;
	float min_score, max_score; /* SP Unigram: over NORMAL pieces */
	char chat[32];              /* chat template name, NUL-terminated */
	char pcre_unicode[16];      /* PCRE2's Unicode version when the
				       translated Split patterns were made */
	uint32_t reserved[2];
};

enum tb_sect_kind {
	TS_POOL = 1,        /* bytes */
	TS_TOKENS,          /* struct tb_token [n_vocab] */
	TS_PIECE_HASH,      /* u32 slots: key = piece */
	TS_ENC_HASH,        /* u32 slots: key = text, TA_ENC tokens only */
	TS_MERGES,          /* struct tb_merge slots (HF BPE) */
	TS_BYTE_IDS,        /* i32 [256]: byte-level or <0xHH> token per byte */
	TS_ADDED_DA,        /* struct tb_da: trie of the added tokens */
	TS_UNI_DA,          /* struct tb_da: trie of the SP pieces (Unigram) */
	TS_CHARSMAP,        /* SP precompiled_charsmap blob */
	TS_NORM,            /* struct tb_op [] normalizer program */
	TS_PRETOK,          /* struct tb_op [] pre-tokenizer program */
	TS_ADDED_INFO,      /* struct tb_added_info [1] */
	TS_NKIND
};

struct tb_sect {
	uint32_t kind, count; /* count: elements */
	uint64_t off, size;   /* bytes */
};

struct tb_token {
	uint32_t piece_off, piece_len; /* as written in the source file */
	uint32_t text_off, text_len;   /* what the model matches: raw bytes
					  (byte-level), else the piece;
					  added: the (normalized) content */
	float score;                   /* SP score (0 for HF) */
	uint32_t attr;                 /* enum tb_attr */
};

struct tb_merge {
	uint32_t a, b;     /* left, right ids; a == UINT32_MAX: empty slot */
	uint32_t rank, id; /* priority (0 first) and the merged token */
};

/* A trie as a double array: node s's child by byte c is slot
 * base[s] + c, if that slot's check is s + 1 (base 0: no children).
 * Slot 0 is the root (the empty prefix); id is the token whose key the
 * node's prefix is, -1 if none. */
struct tb_da {
	uint32_t base, check;
	int32_t id;
};

/* What the added-token matcher needs to know up front (so that opening a
 * file never walks its tables). */
struct tb_added_info {
	uint32_t max_len;      /* longest added token key, bytes */
	uint32_t has_norm;     /* some added token is matched after normalizing */
	uint8_t first_raw[32]; /* bitmap of first bytes, not normalized ones */
	uint8_t first_norm[32]; /* ... normalized ones */
};

/* Program steps: op, small integer arguments, two strings. */
enum tb_opcode {
	/* normalizers */
	OP_NFC = 1, OP_NFD, OP_NFKC, OP_NFKD, OP_LOWER,
	OP_PREPEND,        /* s1 */
	OP_REPLACE,        /* literal s1 -> s2 */
	OP_REPLACE_RE,     /* regex s1 -> s2 */
	OP_STRIP,          /* a: left, b: right */
	/* pre-tokenizers */
	OP_SPLIT = 32,     /* regex s1 (a: behavior, b: invert, c: literal);
			      s2: s1 translated for PCRE2 (tk_onig_to_pcre2) */
	OP_BYTELEVEL,      /* a: add_prefix_space, b: use_regex */
	OP_DIGITS,         /* a: individual_digits */
	OP_METASPACE,      /* s1: replacement, a: prepend scheme, b: split */
	OP_WSSPLIT,        /* WhitespaceSplit */
};

enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT,
       SPLIT_CONTIGUOUS };
enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };

struct tb_op {
	uint32_t op, a, b, c;
	uint32_t s1_off, s1_len, s2_off, s2_len;
};

/* ---- the loaded tokenizer ------------------------------------------------- */

struct ds_tok {
	ds_map map;            /* when mapped from a file */
	uint8_t *owned;        /* when compiled in memory */
	const uint8_t *base;
	size_t size;
	const struct tb_header *h;
	const uint8_t *pool;
	uint32_t pool_len;
	const struct tb_token *tok;
	const uint32_t *piece_hash, *enc_hash;
	uint32_t piece_mask, enc_mask;
	const struct tb_merge *merges;
	uint32_t merge_mask;
	const int32_t *byte_ids;
	const struct tb_da *added, *uni;
	uint32_t n_added, n_uni;          /* slots */
	const uint8_t *charsmap;
	uint32_t charsmap_len;
	const struct tb_op *norm, *pretok;
	uint32_t n_norm, n_pretok;
	uint32_t max_added_len;     /* from struct tb_added_info */
	const uint8_t *first_raw, *first_norm;
	int has_norm_added;
	/* compiled regexes, one per program step (NULL where none);
	 * immutable after load and shared by all threads */
	pcre2_code *norm_re[TB_MAX_OPS], *pretok_re[TB_MAX_OPS];
	pcre2_code *gpt2_re;
	char chat[32];
	char name[256];             /* file name, for messages */
};

/* ---- builder (tokbin.c) ----------------------------------------------------- */

typedef struct tb_buf {
	uint8_t *p;
	size_t n, cap;
} tb_buf;

int tb_buf_reserve(tb_buf *b, size_t n); /* room for n more bytes */
int tb_buf_put(tb_buf *b, const void *p, size_t n);
void tb_buf_free(tb_buf *b);

struct tb_builder {
	tb_buf pool;
	struct tb_token *tok;
	uint32_t n_tok;           /* n_vocab */
	uint32_t *merge_a, *merge_b, *merge_id, n_merge, cap_merge;
	struct tb_op norm[TB_MAX_OPS], pretok[TB_MAX_OPS];
	uint32_t n_norm, n_pretok;
	uint32_t model, flags;
	int32_t bos, eos, eot, unk, pad;
	float min_score, max_score;
	int32_t byte_ids[256];
	const uint8_t *charsmap;  /* while reading only */
	uint32_t charsmap_off, charsmap_len; /* the blob, in the pool */
	char chat[32];
	char pcre_unicode[16];
};

void tb_init(struct tb_builder *b);
void tb_free(struct tb_builder *b);
/* Add a string to the pool; returns its offset or -1. */
int64_t tb_str(struct tb_builder *b, const void *s, size_t n, ds_err *err);
int tb_set_vocab_size(struct tb_builder *b, uint32_t n, ds_err *err);
int tb_add_merge(struct tb_builder *b, uint32_t a, uint32_t bb, uint32_t id,
		 ds_err *err);
/* Build the hash tables and tries and lay out the image. */
int tb_finish(struct tb_builder *b, uint8_t **out, size_t *len, ds_err *err);
/* Look a string up among the builder's pieces (slow; for building). */

/* Open an image (mapped or owned by tok); validates it. */
int tb_open(ds_tok *tok, ds_err *err);

/* Source readers: fill the builder. */
int ds_tok_read_hfjson(struct tb_builder *b, const char *path,
		       const char *config, ds_err *err);
int ds_tok_read_spmodel(struct tb_builder *b, const char *path,
			const char *config, ds_err *err);
/* tokenizer_config.json settings over what the tokenizer file said. */
int ds_tok_read_config(struct tb_builder *b, const char *config, ds_err *err);

/* ---- lookups (tokbin.c) ------------------------------------------------------ */

uint32_t tb_hash(const void *p, size_t n);
/* One step down the trie (uni: the Unigram pieces, else the added
 * tokens) from slot cur (0 at the start) by byte c: the child's slot, 0 if
 * no key goes on so; *id its token or -1. */
static inline uint32_t tb_trie_step(const ds_tok *t, int uni, uint32_t cur,
				    uint8_t c, int32_t *id)
{
	const struct tb_da *da = uni ? t->uni : t->added;
	uint32_t n = uni ? t->n_uni : t->n_added, nxt;

	if (cur >= n || da[cur].base == 0)
		return 0;
	nxt = da[cur].base + c;
	if (nxt >= n || da[nxt].check != cur + 1)
		return 0;
	*id = (uint32_t)da[nxt].id < t->h->n_vocab ? da[nxt].id : -1;
	return nxt;
}

static inline const uint8_t *tb_piece(const ds_tok *t, int32_t id, size_t *n)
{
	*n = t->tok[id].piece_len;
	return t->pool + t->tok[id].piece_off;
}
static inline const uint8_t *tb_text(const ds_tok *t, int32_t id, size_t *n)
{
	*n = t->tok[id].text_len;
	return t->pool + t->tok[id].text_off;
}
int32_t tb_enc_lookup(const ds_tok *t, const void *s, size_t n);
/* The merge of (a, b): its entry, or NULL. */
const struct tb_merge *tb_merge_find(const ds_tok *t, uint32_t a, uint32_t b);


/* ---- encoder stages ------------------------------------------------------------ */

/* A span of text under work: [off, off+len) of a buffer; id >= 0 when the
 * span is already a token (an added token). */
struct tk_span {
	size_t off, len;
	int32_t id;
	uint32_t first; /* starts at the start of the original text */
};

struct tk_spans {
	struct tk_span *v;
	size_t n, cap;
};

int tk_spans_push(struct tk_spans *s, size_t off, size_t len, int32_t id,
		  uint32_t first);

/* normalize.c: HF normalizer program over src, appended to dst. */
int tk_normalize_hf(const ds_tok *t, const uint8_t *src, size_t n, tb_buf *dst,
		    pcre2_match_data *md, ds_err *err);
/* normalize.c: SentencePiece normalization of the whole text. */
int tk_normalize_sp(const ds_tok *t, const uint8_t *src, size_t n, tb_buf *dst,
		    ds_err *err);
/* normalize.c: the longest added token at s whose attributes have a bit
 * of MASK (ANY 1) or none (ANY 0); its id in *id (when not NULL); 0 if
 * none. */
size_t tk_added_match(const ds_tok *t, const uint8_t *s, size_t n,
		      uint32_t mask, int any, int32_t *id);
/* normalize.c: the longest SentencePiece user-defined piece at s
 * (its PrefixMatcher), 0 if none. */
size_t tk_user_match(const ds_tok *t, const uint8_t *s, size_t n);
/* bpe.c: SentencePiece's output rules for one (piece, id). */
int tk_sp_emit(const ds_tok *t, const uint8_t *s, size_t n, int32_t id,
	       int *prev_unk, ds_tok_ids *out, ds_err *err);
/* pretok.c: run the pre-tokenizer program over the spans of buf. */
int tk_pretokenize(const ds_tok *t, tb_buf *buf, struct tk_spans *in,
		   struct tk_spans *out, pcre2_match_data *md, ds_err *err);
/* pretok.c: compile the program's regexes (at load). */
int tk_compile_regexes(ds_tok *t, ds_err *err);
void tk_free_regexes(ds_tok *t);
/* Translate an Oniguruma pattern into PCRE2 syntax with explicit Unicode
 * 16 classes; malloc'd result. */
char *tk_onig_to_pcre2(const char *pat, size_t n, ds_err *err);

/* bpe.c / unigram.c: the models, appending ids. */
struct tk_work; /* scratch */
int tk_bpe_hf(const ds_tok *t, const uint8_t *s, size_t n, ds_tok_ids *out,
	      struct tk_work *w, ds_err *err);
int tk_bpe_sp(const ds_tok *t, const uint8_t *s, size_t n, ds_tok_ids *out,
	      struct tk_work *w, ds_err *err);
int tk_unigram(const ds_tok *t, const uint8_t *s, size_t n, ds_tok_ids *out,
	       struct tk_work *w, ds_err *err);
void tk_work_free(struct tk_work *w);
struct tk_work *tk_work_new(ds_err *err);

int tk_ids_push(ds_tok_ids *ids, int32_t id, ds_err *err);

int tk_is_space(uint32_t cp); /* White_Space */

/* UTF-8: length of the valid sequence at s (1..4), or 0 if invalid. */
size_t tk_utf8_len(const uint8_t *s, size_t n, uint32_t *cp);
size_t tk_utf8_put(uint32_t cp, uint8_t *out);

#endif

/* unigram.c - SentencePiece's Unigram model: the Viterbi best path over
 * the pieces that prefix each position (unigram_model.cc EncodeOptimized),
 * with its exact score arithmetic: candidates summed and compared in
 * double, stored as float; a user-defined piece scores length * max_score
 * - 0.1; a char no piece covers gets unk_score = min_score - 10 (float). */
#include <stdlib.h>
#include <string.h>

#include "tok_int.h"
#include "tok_work.h"

#define UNK_PENALTY 10.0f /* kUnkPenalty */

/* The lattice: best[i] is the best path over the first i bytes. */
static int lattice(struct tk_work *w, size_t n, ds_err *err)
{
	if (n > INT32_MAX - 1)
		return ds_errf(err, "unigram: text of %zu bytes too long", n);
	if (n + 1 > w->node_cap) {
		struct tk_node *v = realloc(w->node, (n + 1) * sizeof *v);

		if (v == NULL)
			return ds_errf(err, "out of memory");
		w->node = v;
		w->node_cap = n + 1;
	}
	for (size_t i = 0; i <= n; i++)
		w->node[i] = (struct tk_node){ -1, -1, 0.0f };
	return 0;
}

/* Keep the path through piece ID over [start, end) if it is better. */
static void relax(struct tk_node *best, size_t start, size_t end, int32_t id,
		  double sc)
{
	struct tk_node *tn = &best[end];
	double cand = sc + (double)best[start].score;

	if (tn->starts_at == -1 || cand > (double)tn->score) {
		tn->score = (float)cand;
		tn->starts_at = (int32_t)start;
		tn->id = id;
	}
}

/* Every piece that starts at START; 1 if one covers exactly its first
 * character (MBLEN bytes), else the caller adds an unknown. */
static int pieces_from(const ds_tok *t, const uint8_t *s, size_t n,
		       size_t start, size_t mblen, struct tk_node *best)
{
	uint32_t cur = 0;
	int single = 0;

	for (size_t end = start; end < n; end++) {
		int32_t id;
		uint32_t attr;

		if ((cur = tb_trie_step(t, 1, cur, s[end], &id)) == 0)
			break;
		if (id < 0 || ((attr = t->tok[id].attr) & TA_UNUSED))
			continue;
		/* SentencePiece's ?: makes every score a double: length *
		 * max_score - 0.1 (user-defined) or the piece's float score */
		relax(best, start, end + 1, id, (attr & TA_ADDED) ?
		      (double)((float)(end + 1 - start) * t->h->max_score) - 0.1 :
		      (double)t->tok[id].score);
		single |= end + 1 - start == mblen;
	}
	return single;
}

/* Backtrack from the end, turning the starts_at links around (each node
 * on the path then holds where the next token ends), then emit in text
 * order. */
static int emit_path(const ds_tok *t, const uint8_t *s, size_t n,
		     struct tk_node *best, ds_tok_ids *out, ds_err *err)
{
	int32_t next = -1;
	int prev_unk = 0;

	for (int32_t end = (int32_t)n; end > 0;) {
		int32_t st = best[end].starts_at;

		if (st < 0 || st >= end)
			return ds_errf(err, "unigram: no path (internal)");
		best[end].starts_at = next;
		next = end;
		end = st;
	}
	for (int32_t st = 0, end = next; end > 0;) {
		int32_t after = best[end].starts_at;

		if (tk_sp_emit(t, s + st, (size_t)(end - st), best[end].id,
			       &prev_unk, out, err))
			return -1;
		st = end;
		end = after;
	}
	return 0;
}

int tk_unigram(const ds_tok *t, const uint8_t *s, size_t n, ds_tok_ids *out,
	       struct tk_work *w, ds_err *err)
{
	const float unk_score = t->h->min_score - UNK_PENALTY;

	if (n == 0)
		return 0;
	if (lattice(w, n, err) != 0)
		return -1;
	for (size_t start = 0; start < n;) {
		size_t mblen = "\1\1\1\1\1\1\1\1\1\1\1\1\2\2\3\4"[s[start] >> 4];

		mblen = mblen > n - start ? n - start : mblen;
		if (!pieces_from(t, s, n, start, mblen, w->node)) {
			struct tk_node *tn = &w->node[start + mblen];
			float cand = unk_score + w->node[start].score;

			if (tn->starts_at == -1 || cand > tn->score) {
				tn->score = cand;
				tn->starts_at = (int32_t)start;
				tn->id = t->h->unk;
			}
		}
		start += mblen;
	}
	return emit_path(t, s, n, w->node, out, err);
}

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

int tk_unigram(const ds_tok *t, const uint8_t *s, size_t n, ds_tok_ids *out,
	       struct tk_work *w, ds_err *err)
{
	const float unk_score = t->h->min_score - UNK_PENALTY;
	const float max_score = t->h->max_score;
	struct tk_node *best;
	int prev_unk = 0;

	if (n == 0)
		return 0;
	if (n > INT32_MAX - 1)
		return ds_errf(err, "unigram: text of %zu bytes too long", n);
	if (n + 1 > w->node_cap) {
		struct tk_node *v = realloc(w->node, (n + 1) * sizeof *v);

		if (v == NULL)
			return ds_errf(err, "out of memory");
		w->node = v;
		w->node_cap = n + 1;
	}
	best = w->node;
	for (size_t i = 0; i <= n; i++)
		best[i] = (struct tk_node){ -1, -1, 0.0f };
	for (size_t start = 0; start < n;) {
		const float till_here = best[start].score;
		size_t mblen = "\1\1\1\1\1\1\1\1\1\1\1\1\2\2\3\4"[s[start] >> 4];
		uint32_t cur = 0;
		int single = 0;

		mblen = mblen > n - start ? n - start : mblen;
		for (size_t end = start; end < n; end++) {
			struct tk_node *tn;
			uint32_t attr;
			int32_t id;

			if ((cur = tb_trie_step(t, 1, cur, s[end], &id)) == 0)
				break;
			if (id < 0)
				continue;
			attr = t->tok[id].attr;
			if (attr & TA_UNUSED)
				continue;
			tn = &best[end + 1];
			{
				/* SentencePiece's ?: makes every score a double:
				 * length * max_score - 0.1 (user-defined) or the
				 * piece's float score */
				double sc = (attr & TA_ADDED) ?
					(double)((float)(end + 1 - start) * max_score) - 0.1 :
					(double)t->tok[id].score;
				double cand = sc + (double)till_here;

				if (tn->starts_at == -1 || cand > (double)tn->score) {
					tn->score = (float)cand;
					tn->starts_at = (int32_t)start;
					tn->id = id;
				}
			}
			if (end + 1 - start == mblen)
				single = 1;
		}
		if (!single) {
			struct tk_node *tn = &best[start + mblen];
			float cand = unk_score + till_here;

			if (tn->starts_at == -1 || cand > tn->score) {
				tn->score = cand;
				tn->starts_at = (int32_t)start;
				tn->id = t->h->unk;
			}
		}
		start += mblen;
	}
	/* backtrack from the end, turning the starts_at links around (each
	 * node on the path then holds where the next token ends), then emit
	 * in text order */
	{
		int32_t next = -1;

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
	}
	return 0;
}

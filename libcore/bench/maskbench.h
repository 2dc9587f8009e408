/*
 * maskbench.h - ds-bench --grammar: what constrained decoding's token
 * mask costs on a model's own vocabulary (grammar.h ds_grammar_bench),
 * as a markdown table on stdout.
 */
#ifndef DS_MASKBENCH_H
#define DS_MASKBENCH_H

#include "base/util.h"

/* The vocabulary of dir/tokenizer.bin as a trie, then one row per
 * document file docs[i]: {"schema": S, "doc": D}, D written out indented
 * by two spaces and cut into the vocabulary's longest tokens, a mask at
 * each step under the grammar of S. */
int ds_maskbench(const char *dir, const char *const *docs, int n_docs, ds_err *err);

#endif

/* fuzz_spmodel.c - a SentencePiece .model (libcore/tokenizer/spmodel.c:
 * the ModelProto wire format, pieces, scores, types, trainer and
 * normalizer specs, the precompiled charsmap), compiled and used. */
#include "tokfz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	ds_tok *tok;
	ds_err err;

	fz_write("tokenizer.model", data, size);
	if (ds_tok_load(&tok, fz_path("tokenizer.model"), &err) != 0)
		return 0;
	tokfz_exercise(tok, 1);
	ds_tok_free(tok);
	return 0;
}

/* fuzz_tokjson.c - a Hugging Face tokenizer.json (libcore/tokenizer/
 * hfjson.c: model, vocab, merges, added tokens, normalizer and
 * pre-tokenizer programs with their regexes), compiled in memory to a
 * tokenizer.bin image and used. */
#include "tokfz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	ds_tok *tok;
	ds_err err;

	/* ds_tok_load sniffs: only what starts like JSON is read as JSON */
	fz_write("tokenizer.json", data, size);
	if (ds_tok_load(&tok, fz_path("tokenizer.json"), &err) != 0)
		return 0;
	tokfz_exercise(tok, 1);
	ds_tok_free(tok);
	return 0;
}

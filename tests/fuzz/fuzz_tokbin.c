/* fuzz_tokbin.c - a tokenizer.bin image, mapped and used in place
 * (libcore/tokenizer/tokbin.c validates the header and sections at load;
 * entries are checked where encode and decode use them). */
#include "tokfz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	ds_tok *tok;
	ds_err err;

	fz_write("tokenizer.bin", data, size);
	if (ds_tok_load(&tok, fz_path("tokenizer.bin"), &err) != 0)
		return 0;
	tokfz_exercise(tok, 0);
	ds_tok_free(tok);
	return 0;
}

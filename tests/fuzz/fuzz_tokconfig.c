/* fuzz_tokconfig.c - tokenizer_config.json (add_bos_token, bos/eos/pad
 * tokens as strings or AddedToken objects, the chat template) beside a
 * fixed small tokenizer.json (libcore/tokenizer/config.c). */
#include "tokfz.h"

static const char tok_json[] =
	"{\"version\":\"1.0\",\"added_tokens\":["
	"{\"id\":8,\"content\":\"<s>\",\"single_word\":false,\"lstrip\":false,"
	"\"rstrip\":false,\"normalized\":false,\"special\":true},"
	"{\"id\":9,\"content\":\"</s>\",\"single_word\":false,\"lstrip\":false,"
	"\"rstrip\":false,\"normalized\":false,\"special\":true}],"
	"\"normalizer\":null,"
	"\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
	"\"trim_offsets\":true,\"use_regex\":true},"
	"\"post_processor\":null,"
	"\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,"
	"\"trim_offsets\":true,\"use_regex\":true},"
	"\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,"
	"\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,"
	"\"fuse_unk\":false,\"byte_fallback\":false,\"ignore_merges\":false,"
	"\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"\xc4\xa0\":3,\"ab\":4,\"abc\":5,"
	"\"\xc4\xa0" "a\":6,\"x\":7},"
	"\"merges\":[\"a b\",\"ab c\",\"\xc4\xa0 a\"]}}";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fz_mkdir("tok");
	fz_write("tok/tokenizer.json", tok_json, sizeof tok_json - 1);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	ds_tok *tok;
	ds_err err;

	fz_write("tok/tokenizer_config.json", data, size);
	if (ds_tok_load(&tok, fz_path("tok/tokenizer.json"), &err) != 0)
		return 0;
	tokfz_exercise(tok, 1);
	ds_tok_free(tok);
	return 0;
}

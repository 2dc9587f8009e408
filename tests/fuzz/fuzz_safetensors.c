/* fuzz_safetensors.c - one safetensors file: the 8-byte header length,
 * the JSON header, every tensor's dtype, shape and data_offsets
 * (libcore/format/safetensors.c). */
#include "fuzz.h"
#include "format/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = fz_write("model.safetensors", data, size);
	ds_st st;
	ds_err err;
	size_t i;
	unsigned sum = 0;

	if (ds_st_open_file(&st, p, &err) != 0)
		return 0;
	for (i = 0; i < st.n_tensors; i++) {
		const ds_st_tensor *t = &st.tensors[i];
		char sh[200];

		/* every tensor lies inside the mapping, and is found by name */
		FZ_CHECK(t->offset <= size && t->nbytes <= size - t->offset);
		FZ_CHECK(t->data == st.files[0].map.data + t->offset);
		FZ_CHECK(ds_st_find(&st, t->name) == t);
		sum += fz_touch(t->data, t->nbytes);
		ds_st_shape_str(t->ndim, t->shape, sh, sizeof sh);
		ds_st_prefetch(&st, t);
		ds_st_release(&st, t);
	}
	(void)sum;
	ds_st_free(&st);
	return 0;
}

/* fuzz_modelmeta.c - model.meta (libcore/format/modelfile.c's loader: format,
 * hparams, quant, the tensor table against the architecture) beside a
 * model.bin of BIN_SIZE bytes.  Every tensor handed out must lie inside
 * the mapping and be found by its name. */
#include "fuzz.h"
#include "format/modelfile.h"

#define BIN_SIZE (4u << 20)

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *p;
	int fd;

	(void)argc;
	(void)argv;
	fz_mkdir("model");
	p = fz_path("model/model.bin");
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || ftruncate(fd, BIN_SIZE) != 0) {
		perror(p);
		abort();
	}
	/* something other than zeros in the first page */
	if (write(fd, "DSDSDSDS", 8) != 8)
		abort();
	close(fd);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	ds_model m;
	ds_err err;
	size_t i;
	unsigned sum = 0;

	fz_write("model/model.meta", data, size);
	if (ds_model_load(&m, fz_path("model"), 0, &err) != 0)
		return 0;
	FZ_CHECK(m.bin.size == BIN_SIZE);
	for (i = 0; i < m.n_tensors; i++) {
		const ds_tensor *t = &m.tensors[i];

		FZ_CHECK(t->offset <= BIN_SIZE && t->size <= BIN_SIZE - t->offset);
		FZ_CHECK(t->size == 0 || t->data == m.bin.data + t->offset);
		FZ_CHECK((uintptr_t)t->data % DS_MODEL_MIN_ALIGN == 0);
		FZ_CHECK(ds_model_tensor(&m, t->name) == t);
		sum += fz_touch(t->data, t->size);
	}
	(void)sum;
	ds_model_free(&m);
	return 0;
}

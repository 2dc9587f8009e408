/* fuzz_sysinfo.c - ds-tune show and plan on a hostile /sys and /proc
 * (libcore/host/sysinfo/sysinfo.c, libcore/host/tune/): the files of a fake root
 * (tests/cli/mkfakeroot.sh intel) are replaced by the input's sections,
 *	==> /proc/interrupts <==
 *	...content...
 * then the machine is read, advised on and planned for.  Every plan made
 * must format and parse back, and its dry run must read. */
#include "tunefz.h"

#define MAX_FILES 16

struct saved {
	char path[512];
	char *old;     /* NULL: it did not exist */
	size_t len;
};

static const char *root;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char cmd[1024];

	(void)argc;
	(void)argv;
	root = fz_path("root");
	snprintf(cmd, sizeof cmd, "tests/cli/mkfakeroot.sh intel %s", root);
	if (system(cmd) != 0) {
		fprintf(stderr, "fuzz_sysinfo: %s failed (run from the "
			"repository root)\n", cmd);
		abort();
	}
	return 0;
}

/* A path of the fake root: absolute, no "..", its directory existing. */
static int plain(const char *p, size_t n)
{
	char dir[512];
	const char *slash;

	if (n == 0 || n > 200 || p[0] != '/' || memmem(p, n, "..", 2) ||
	    memchr(p, '\0', n))
		return 0;
	slash = memrchr(p, '/', n);
	snprintf(dir, sizeof dir, "%s%.*s", root, (int)(slash - p), p);
	return ds_is_dir(dir);
}

static int put(struct saved *s, const char *p, size_t n, const char *text,
	       size_t len)
{
	char *old = NULL;
	size_t ol = 0;
	ds_err err;

	snprintf(s->path, sizeof s->path, "%s%.*s", root, (int)n, p);
	if (ds_is_dir(s->path))
		return -1;
	if (access(s->path, F_OK) == 0 &&
	    ds_read_file(s->path, 64u << 20, &old, &ol, &err) != 0)
		return -1;
	s->old = old;
	s->len = ol;
	if (old == NULL)
		s->old = NULL;
	{
		int fd = open(s->path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (fd < 0 || ds_write_all(fd, text, len, s->path, &err) != 0)
			abort();
		close(fd);
	}
	return 0;
}

static void restore(struct saved *s)
{
	ds_err err;

	if (s->old == NULL) {
		unlink(s->path);
		return;
	}
	{
		int fd = open(s->path, O_WRONLY | O_TRUNC);

		if (fd < 0 || ds_write_all(fd, s->old, s->len, s->path, &err))
			abort();
		close(fd);
	}
	free(s->old);
}

/* ranks 0: inst instances of a dense model; else an MPI job of a MoE
 * model over two hosts */
static void plan(const ds_sysinfo *si, int inst, int threads, int ranks)
{
	ds_tune_model m = { .arch = "llama", .bytes = 8ull << 30,
			    .kv_token_bytes = 131072, .n_ctx_train = 4096 };
	ds_tune_opts o = { .model_dir = "/models/m", .instances = inst,
			   .threads = threads, .ranks = ranks,
			   .hosts = ranks ? "a,b" : NULL };
	ds_tune_plan p;
	ds_tune_change *c = NULL;
	ds_err err;

	if (ranks) {
		snprintf(m.arch, sizeof m.arch, "deepseek2");
		m.n_expert = 256;
		m.exp_bytes = 7ull << 30;
		m.out_bytes = 1ull << 28;
	}
	memset(&p, 0, sizeof p);
	if (ds_tune_plan_make(&p, si, &m, &o, &err) != 0)
		return;
	tunefz_roundtrip(&p);
	if (ds_tune_preview(&p, root, &c, &err) == 0)
		free(c);
	ds_tune_plan_free(&p);
}

static void machine(void)
{
	ds_sysinfo si;
	ds_tune_advice *adv = NULL;
	ds_err err;
	int n = 0;

	if (ds_sysinfo_read(&si, root, &err) != 0)
		return;
	FZ_CHECK(si.n_cpu >= 1);
	if (ds_tune_advise(&si, &adv, &n, &err) == 0)
		free(adv);
	plan(&si, 1, 0, 0);
	plan(&si, 2, 0, 0);
	plan(&si, 3, 2, 0);
	plan(&si, 1, 0, DS_TUNE_RANKS_NUMA);
	plan(&si, 1, 1, 4);
	ds_sysinfo_free(&si);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char mark[] = "==> ";
	struct saved sv[MAX_FILES];
	const char *s = (const char *)data, *end = s + size;
	int n = 0;

	/* sections: "==> PATH <==\n" then the content up to the next one */
	while (s < end && n < MAX_FILES) {
		const char *nl, *close, *body, *next;

		if ((size_t)(end - s) < 4 || memcmp(s, mark, 4) != 0)
			break;
		nl = memchr(s, '\n', (size_t)(end - s));
		if (nl == NULL)
			break;
		close = nl - 4 >= s + 4 && memcmp(nl - 4, " <==", 4) == 0 ? nl - 4
									: NULL;
		body = nl + 1;
		next = memmem(body, (size_t)(end - body), "\n==> ", 5);
		next = next ? next + 1 : end;
		if (close != NULL && plain(s + 4, (size_t)(close - s - 4)) &&
		    put(&sv[n], s + 4, (size_t)(close - s - 4), body,
			(size_t)(next - body)) == 0)
			n++;
		s = next;
	}
	machine();
	while (n > 0)
		restore(&sv[--n]);
	return 0;
}

/*
 * replay.c - run a fuzz target over saved inputs, without libFuzzer.
 *
 *	build/tests/test_fuzz_NAME [FILE|DIR ...]
 *
 * With no arguments it replays tests/fuzz/regress/NAME/ and
 * tests/fuzz/corpus/NAME/ (from the repository root) and prints TAP, one
 * test per directory, so `make test` (and `make sanitize`) keep every
 * input that once crashed a parser, and every seed, passing.  The input
 * being run is named on stderr if it crashes, aborts or runs past 60 s.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));
void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));

#define TIMEOUT_S 60

static char current[4096];

static void say_current(void)
{
	static const char pre[] = "replay: failed on input ";
	size_t n = strlen(current);

	/* async-signal-safe: write(2) only */
	if (write(2, pre, sizeof pre - 1) < 0 || write(2, current, n) < 0 ||
	    write(2, "\n", 1) < 0)
		return;
}

static void on_signal(int sig)
{
	say_current();
	if (sig == SIGALRM) {
		static const char m[] = "replay: timed out\n";

		if (write(2, m, sizeof m - 1) < 0)
			_exit(1);
		_exit(1);
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long n;

	if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0) {
		perror(path);
		if (f != NULL)
			fclose(f);
		return -1;
	}
	/* an exact-size heap copy, as libFuzzer hands it over: ASan sees
	 * a read one past the end */
	buf = malloc(n > 0 ? (size_t)n : 1);
	if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		perror(path);
		fclose(f);
		free(buf);
		return -1;
	}
	fclose(f);
	snprintf(current, sizeof current, "%s", path);
	alarm(TIMEOUT_S);
	LLVMFuzzerTestOneInput(buf, (size_t)n);
	alarm(0);
	free(buf);
	return 0;
}

static int cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file of dir, in name order; *n of them.  -1: no dir. */
static int run_dir(const char *dir, int *n)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	char **names = NULL;
	size_t cnt = 0, cap = 0, i;
	int rc = 0;

	*n = 0;
	if (d == NULL)
		return -1;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		if (cnt == cap) {
			cap = cap ? 2 * cap : 64;
			names = realloc(names, cap * sizeof *names);
			if (names == NULL)
				abort();
		}
		if (asprintf(&names[cnt], "%s/%s", dir, de->d_name) < 0)
			abort();
		cnt++;
	}
	closedir(d);
	qsort(names, cnt, sizeof *names, cmp);
	for (i = 0; i < cnt; i++) {
		struct stat st;

		if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
			rc |= run_file(names[i]);
			++*n;
		}
		free(names[i]);
	}
	free(names);
	return rc;
}

static void setup(int *argc, char ***argv)
{
	if (__sanitizer_set_death_callback != NULL) {
		__sanitizer_set_death_callback(say_current);
	} else {
		signal(SIGSEGV, on_signal);
		signal(SIGBUS, on_signal);
		signal(SIGABRT, on_signal);
		signal(SIGFPE, on_signal);
		signal(SIGILL, on_signal);
	}
	signal(SIGALRM, on_signal);
	if (LLVMFuzzerInitialize != NULL)
		LLVMFuzzerInitialize(argc, argv);
}

int main(int argc, char **argv)
{
	const char *base = strrchr(argv[0], '/');
	const char *name = base ? base + 1 : argv[0];
	const char *kinds[2] = { "regress", "corpus" };
	int i, t = 0, bad = 0;

	setup(&argc, &argv);
	if (strncmp(name, "test_fuzz_", 10) == 0)
		name += 10;
	if (argc > 1) {
		for (i = 1; i < argc; i++) {
			struct stat st;
			int n;

			if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode))
				bad |= run_dir(argv[i], &n) != 0;
			else
				bad |= run_file(argv[i]) != 0;
		}
		return bad;
	}
	for (i = 0; i < 2; i++) {
		char dir[512];
		int n, r;

		snprintf(dir, sizeof dir, "tests/fuzz/%s/%s", kinds[i], name);
		r = run_dir(dir, &n);
		if (r < 0 && n == 0)
			continue; /* no such directory */
		/* a crash never gets here: the run-tests.sh counts the exit */
		printf("%sok %d - %s: %s: %d inputs\n", r ? "not " : "", ++t,
		       name, kinds[i], n);
		bad |= r != 0;
	}
	if (t == 0)
		printf("ok %d - %s: no saved inputs # SKIP\n", ++t, name);
	printf("1..%d\n", t);
	return bad;
}

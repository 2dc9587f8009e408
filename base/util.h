/*
 * util.h - errors, checked arithmetic, files, CRC-32, time, progress.
 *
 * Every libcore function that can fail takes a `ds_err *` and returns 0 on
 * success, -1 on failure with a one-line message in err->msg that names the
 * file and the thing ("model.bin: tensor blk.0.attn_q: size 12 past EOF").
 * libcore never prints, aborts or exits because of outside data; the program
 * in cmd/ decides what to say.  DS_ASSERT is for our own invariants only.
 */
#ifndef DS_UTIL_H
#define DS_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define DS_VERSION "0.1.0"

/* ---- errors ------------------------------------------------------------ */

typedef struct ds_err {
	char msg[512];
} ds_err;

/* Set err->msg (printf-style) and return -1.  err may be NULL. */
int ds_errf(ds_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Prefix the existing message with "PREFIX: " and return -1. */
int ds_err_prefix(ds_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

void ds_assert_fail(const char *expr, const char *file, int line);
#define DS_ASSERT(e) ((e) ? (void)0 : ds_assert_fail(#e, __FILE__, __LINE__))

/* ---- checked arithmetic (return 0 on success, -1 on overflow) ---------- */

static inline int ds_mul_sz(size_t a, size_t b, size_t *r)
{
	return __builtin_mul_overflow(a, b, r) ? -1 : 0;
}
static inline int ds_add_sz(size_t a, size_t b, size_t *r)
{
	return __builtin_add_overflow(a, b, r) ? -1 : 0;
}
static inline int ds_mul_u64(uint64_t a, uint64_t b, uint64_t *r)
{
	return __builtin_mul_overflow(a, b, r) ? -1 : 0;
}
static inline int ds_add_u64(uint64_t a, uint64_t b, uint64_t *r)
{
	return __builtin_add_overflow(a, b, r) ? -1 : 0;
}
static inline uint64_t ds_round_up(uint64_t x, uint64_t m)
{
	return (x + m - 1) / m * m;
}

/* xorshift64*: a small reproducible generator (the state never 0). */
static inline uint64_t ds_xorshift64s(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545F4914F6CDD1DULL;
}

/* Allocation that fails cleanly: returns NULL and sets err on failure or
 * on n*size overflow.  Memory is zeroed. */
void *ds_calloc(size_t n, size_t size, ds_err *err);
/* Grow *p (an array of *cap elements of elem bytes) to hold at least
 * need, doubling; -1 (nothing changed) when out of memory or overflow. */
int ds_grow(void **p, size_t *cap, size_t need, size_t elem);
/* Aligned (to `align`, a power of two >= sizeof(void*)), zeroed; free(). */
void *ds_aligned_alloc(size_t align, size_t size, ds_err *err);

/* ---- files --------------------------------------------------------------- */

/* A read-only mapping of a whole file. */
typedef struct ds_map {
	const uint8_t *data; /* NULL for an empty file */
	size_t size;
	int fd;
	long long pmd;       /* bytes in 2 MiB pages after the open's check
				(DS_MAP_HUGE | DS_MAP_POPULATE, 16 MiB or
				more), else -1 */
} ds_map;

/* A huge page (x86-64 PMD): weights are mapped, written and placed in these. */
#define DS_HUGE_2M ((size_t)2 << 20)

enum {
	DS_MAP_POPULATE = 1 << 0, /* fault everything in now */
	DS_MAP_HUGE = 1 << 1,     /* 2 MiB-aligned, MADV_HUGEPAGE (weights);
				     with DS_MAP_POPULATE a file cached in
				     4 KiB folios is read again into 2 MiB
				     ones where the file system can */
};

int ds_map_open(ds_map *m, const char *path, int flags, ds_err *err);
/* Fault bytes [off, off + len) of m in (widened to whole 2 MiB pages
 * inside the file), as DS_MAP_POPULATE does for all of it. */
void ds_map_populate(const ds_map *m, size_t off, size_t len);
/* Bytes of this process's mapping that starts at p mapped in 2 MiB pages
 * of the page cache (smaps' FilePmdMapped); -1 when the kernel does not
 * say. */
long long ds_map_pmd_bytes(const void *p);
/* 1 if m's open checked it and less than 9/10 of it maps in 2 MiB pages
 * (its page cache in 4 KiB folios that could not be read again), *share
 * the part that does; 0 otherwise. */
int ds_map_small_pages(const ds_map *m, double *share);
/* Zeroed read-write anonymous memory, 2 MiB-aligned and advised
 * MADV_HUGEPAGE: a first touch faults in a 2 MiB page where the kernel
 * has one (one fault, not 512; a fault costs microseconds on some virtual
 * machines).  Memory is taken as it is touched; munmap(p, size) frees
 * it.  NULL if it cannot be mapped. */
void *ds_map_anon_huge(size_t size);
void ds_map_close(ds_map *m);
/* For programs (cmd/): a file truncated while mapped faults with SIGBUS
 * on the next read of a page past its new end.  After this call that is
 * one line on stderr, "PROG: a mapped file ... was truncated while in
 * use (bus error at 0x...)", and exit status 1 instead of a crash.
 * Other SIGBUS causes keep the default action. */
void ds_map_guard(void);

/* Read a whole (small) file into a NUL-terminated malloc'd buffer;
 * refuses files over `max` bytes. */
int ds_read_file(const char *path, size_t max, char **out, size_t *len,
		 ds_err *err);

/* Write all of buf to fd, retrying short writes and EINTR. */
int ds_write_all(int fd, const void *buf, size_t len, const char *path,
		 ds_err *err);

/* Join dir and name into a malloc'd path. */
char *ds_path_join(const char *dir, const char *name);
int ds_is_dir(const char *path);
/* rm -rf of a directory we created ourselves (no symlink following). */
int ds_remove_tree(const char *path);

/* ---- CRC-32 (zlib's polynomial) ---------------------------------------- */

uint32_t ds_crc32(uint32_t crc, const void *buf, size_t len);

/* ---- time ------------------------------------------------------------------ */

uint64_t ds_now_ns(void);   /* CLOCK_MONOTONIC */
double ds_now_s(void);

/* This process's resident set, MiB: now, and its peak (VmHWM). */
double ds_rss_mib(void);
double ds_rss_peak_mib(void);

/* ---- progress (stderr bar when a tty, one summary line otherwise) ------- */

typedef struct ds_progress {
	FILE *out;          /* NULL: silent */
	int tty;            /* draw a bar */
	const char *what;   /* "converting" */
	uint64_t total_bytes, done_bytes;
	uint32_t total_items, done_items;
	double t0, last_draw;
} ds_progress;

void ds_progress_init(ds_progress *p, FILE *out, const char *what,
		      uint32_t total_items, uint64_t total_bytes);
void ds_progress_add(ds_progress *p, uint32_t items, uint64_t bytes);
void ds_progress_done(ds_progress *p);

/* ---- numbers --------------------------------------------------------------- */

/* Parse a decimal integer/float with range check; 0 ok, -1 bad. */
int ds_parse_long(const char *s, long lo, long hi, long *out);
int ds_parse_double(const char *s, double lo, double hi, double *out);

/* fp16 / bf16 <-> fp32 conversion (scalar, exact IEEE semantics;
 * bf16 rounding is round-to-nearest-even, NaN stays NaN). */
float ds_f16_to_f32(uint16_t h);
uint16_t ds_f32_to_f16(float f);
static inline float ds_bf16_to_f32(uint16_t b)
{
	union { uint32_t u; float f; } v = { (uint32_t)b << 16 };
	return v.f;
}
uint16_t ds_f32_to_bf16(float f);

#endif

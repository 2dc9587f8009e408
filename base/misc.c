/* misc.c - CRC-32, clocks, number parsing, half-precision conversion. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "util.h"

uint32_t ds_crc32(uint32_t crc, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	/* zlib takes uInt lengths; feed large buffers in slices. */
	while (len > 0) {
		uInt n = len > (1u << 30) ? (1u << 30) : (uInt)len;

		crc = (uint32_t)crc32(crc, p, n);
		p += n;
		len -= n;
	}
	return crc;
}

uint64_t ds_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double ds_now_s(void)
{
	return (double)ds_now_ns() * 1e-9;
}

int ds_parse_long(const char *s, long lo, long hi, long *out)
{
	char *end;
	long v;

	if (s == NULL || *s == '\0')
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

int ds_parse_double(const char *s, double lo, double hi, double *out)
{
	char *end;
	double v;

	if (s == NULL || *s == '\0')
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || *end != '\0' || !isfinite(v) || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

float ds_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
	union { uint32_t u; float f; } v;

	if (exp == 0) {
		/* zero or subnormal: man * 2^-24 */
		float f = (float)man * 0x1p-24f;
		return sign ? -f : f;
	}
	if (exp == 31)
		v.u = sign | 0x7f800000u | (man << 13);
	else
		v.u = sign | ((exp + 112) << 23) | (man << 13);
	return v.f;
}

uint16_t ds_f32_to_f16(float f)
{
	union { float f; uint32_t u; } v = { f };
	uint32_t sign = (v.u >> 16) & 0x8000;
	uint32_t a = v.u & 0x7fffffffu;
	uint32_t exp, man, r;

	if (a >= 0x7f800000u) /* Inf or NaN */
		return (uint16_t)(sign | 0x7c00 | (a > 0x7f800000u ? 0x200 : 0));
	if (a >= 0x477ff000u) /* rounds to >= 65520: overflow to Inf */
		return (uint16_t)(sign | 0x7c00);
	if (a < 0x38800000u) {
		/* result is subnormal (or zero): round a*2^24 to an integer */
		float s = (float)(v.f < 0 ? -v.f : v.f) * 0x1p24f;
		return (uint16_t)(sign | (uint32_t)nearbyintf(s));
	}
	exp = (a >> 23) - 112;
	man = a & 0x7fffff;
	r = (exp << 10) | (man >> 13);
	/* round to nearest even on the 13 dropped bits */
	if ((man & 0x1fff) > 0x1000 || ((man & 0x1fff) == 0x1000 && (r & 1)))
		r++;
	return (uint16_t)(sign | r);
}

uint16_t ds_f32_to_bf16(float f)
{
	union { float f; uint32_t u; } v = { f };

	if ((v.u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((v.u >> 16) | 0x40); /* quiet NaN */
	v.u += 0x7fff + ((v.u >> 16) & 1);
	return (uint16_t)(v.u >> 16);
}

int ds_grow(void **p, size_t *cap, size_t need, size_t elem)
{
	size_t c = *cap ? *cap : 16;
	void *n;

	if (need <= *cap)
		return 0;
	while (c < need && c <= SIZE_MAX / 2)
		c *= 2;
	if (c < need || c > SIZE_MAX / elem || (n = realloc(*p, c * elem)) == NULL)
		return -1;
	*p = n;
	*cap = c;
	return 0;
}

double ds_rss_mib(void)
{
	long pages = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f == NULL)
		return 0;
	if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
		resident = 0;
	fclose(f);
	return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1 << 20);
}

double ds_rss_peak_mib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	double kib = 0;

	while (f != NULL && fgets(line, sizeof line, f) != NULL)
		if (strncmp(line, "VmHWM:", 6) == 0) {
			kib = strtod(line + 6, NULL);
			break;
		}
	if (f != NULL)
		fclose(f);
	if (kib <= 0) {
		struct rusage ru;

		if (getrusage(RUSAGE_SELF, &ru) == 0)
			kib = (double)ru.ru_maxrss;
	}
	return kib / 1024;
}

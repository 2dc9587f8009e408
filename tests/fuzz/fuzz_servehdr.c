/* fuzz_servehdr.c - the request headers and paths ds-serve reads itself
 * (libmicrohttpd does the HTTP framing): the first byte picks one.
 *   0  Authorization against an API key: KEY "\n" HEADER-VALUE
 *   1  Content-Length against the body limit: 8 bytes of limit, the value
 *   2  the endpoint of a path (metrics labels, routing)
 * Each is compared with a plain reference written here. */
#include <strings.h>

#include "fuzz.h"
#include "serve/serve.h"

static void auth(const char *s)
{
	const char *nl = strchr(s, '\n');
	char key[256];
	const char *hdr;
	int want;

	if (nl == NULL || (size_t)(nl - s) >= sizeof key)
		return;
	memcpy(key, s, (size_t)(nl - s));
	key[nl - s] = '\0';
	hdr = nl + 1;
	want = strncasecmp(hdr, "Bearer ", 7) == 0 && strcmp(hdr + 7, key) == 0;
	FZ_CHECK(ds_api_key_ok(hdr, key) == want);
	FZ_CHECK(ds_api_key_ok(NULL, key) == 0);
}

/* The reference: digits only, the value in 128 bits (saturated). */
static int length_ref(const char *v, size_t max)
{
	unsigned __int128 x = 0;
	size_t i;

	if (*v == '\0')
		return -1;
	for (i = 0; v[i]; i++) {
		if (v[i] < '0' || v[i] > '9')
			return -1;
		if (x < ((unsigned __int128)1 << 100))
			x = x * 10 + (unsigned)(v[i] - '0');
	}
	return x > max;
}

static void length(const char *s, size_t n)
{
	uint64_t max = 0;

	if (n < 8)
		return;
	memcpy(&max, s, 8);
	if (max > SIZE_MAX)
		max = SIZE_MAX;
	FZ_CHECK(ds_api_length_check(s + 8, (size_t)max) ==
		 length_ref(s + 8, (size_t)max));
}

static void path(const char *s)
{
	enum ds_ep ep = ds_ep_of(s);
	const char *name = ds_ep_name(ep);

	FZ_CHECK(ep >= 0 && ep < DS_EP_N && name != NULL);
	if (ep != DS_EP_OTHER)
		FZ_CHECK(strcmp(s, name) == 0);
	FZ_CHECK(ds_ep_of(name) == ep || ep == DS_EP_OTHER);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s;

	if (size < 1)
		return 0;
	s = fz_strdup(data + 1, size - 1);  /* headers stop at a NUL */
	switch (data[0] % 3) {
	case 0: auth(s); break;
	case 1: length(s, size - 1); break;
	default: path(s); break;
	}
	free(s);
	return 0;
}

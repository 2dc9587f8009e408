/* parse.c - reading sysfs and procfs files, and the formats in them. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sysinfo.h"

int ds_sys_path(const char *root, const char *path, char *buf, size_t n)
{
	int r = snprintf(buf, n, "%s%s", root != NULL ? root : "", path);

	return r < 0 || (size_t)r >= n ? -1 : 0;
}

int ds_sys_read(const char *path, size_t max, char **out, int *missing,
		ds_err *err)
{
	size_t cap = 4096, len = 0;
	char *buf, *nb;
	ssize_t r;
	int fd;

	*out = NULL;
	if (missing != NULL)
		*missing = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (missing != NULL)
			*missing = errno == ENOENT || errno == ENOTDIR;
		return ds_errf(err, "%s: %s", path, strerror(errno));
	}
	buf = malloc(cap);
	if (buf == NULL) {
		close(fd);
		return ds_errf(err, "%s: out of memory", path);
	}
	for (;;) {
		if (len + 1 == cap) {
			if (cap > max) {
				free(buf);
				close(fd);
				return ds_errf(err, "%s: more than %zu bytes",
					       path, max);
			}
			nb = realloc(buf, cap * 2);
			if (nb == NULL) {
				free(buf);
				close(fd);
				return ds_errf(err, "%s: out of memory", path);
			}
			buf = nb;
			cap *= 2;
		}
		r = read(fd, buf + len, cap - 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;

			free(buf);
			close(fd);
			return ds_errf(err, "%s: read: %s", path, strerror(e));
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	if (len > max) {
		free(buf);
		return ds_errf(err, "%s: more than %zu bytes", path, max);
	}
	if (memchr(buf, '\0', len) != NULL) {
		free(buf);
		return ds_errf(err, "%s: contains a NUL byte", path);
	}
	buf[len] = '\0';
	*out = buf;
	return 0;
}

int ds_sys_line(const char *root, const char *path, char *buf, size_t n)
{
	char full[512], *text, *nl;
	size_t len;

	buf[0] = '\0';
	if (ds_sys_path(root, path, full, sizeof full) != 0 ||
	    ds_sys_read(full, 64 * 1024, &text, NULL, NULL) != 0)
		return -1;
	nl = strchr(text, '\n');
	if (nl != NULL)
		*nl = '\0';
	len = strlen(text);
	while (len > 0 && isspace((unsigned char)text[len - 1]))
		text[--len] = '\0';
	snprintf(buf, n, "%s", text);
	free(text);
	return 0;
}

void ds_sys_selected(const char *value, char *buf, size_t n)
{
	const char *a = strchr(value, '['), *b;
	const char *s = value, *e;

	if (a != NULL && (b = strchr(a, ']')) != NULL) {
		s = a + 1;
		e = b;
	} else {
		while (isspace((unsigned char)*s))
			s++;
		e = s + strlen(s);
		while (e > s && isspace((unsigned char)e[-1]))
			e--;
	}
	snprintf(buf, n, "%.*s", (int)(e - s), s);
}

int ds_word_in(const char *list, const char *word)
{
	size_t wl = strlen(word);
	const char *p = list;

	while (*p != '\0') {
		const char *s;

		while (isspace((unsigned char)*p))
			p++;
		if (*p == '+')
			p++;
		s = p;
		while (*p != '\0' && !isspace((unsigned char)*p))
			p++;
		if ((size_t)(p - s) == wl && wl > 0 && memcmp(s, word, wl) == 0)
			return 1;
	}
	return 0;
}

int ds_meminfo_get(const char *text, const char *key, uint64_t *out)
{
	size_t kl = strlen(key);
	const char *line = text;

	/* "MemTotal:  5465848 kB" or, per node, "Node 0 MemTotal:  ..." */
	while (line != NULL && *line != '\0') {
		const char *colon = strchr(line, ':');
		const char *nl = strchr(line, '\n');
		const char *k;

		if (colon != NULL && (nl == NULL || colon < nl)) {
			k = colon;
			while (k > line && !isspace((unsigned char)k[-1]))
				k--;
			if ((size_t)(colon - k) == kl &&
			    memcmp(k, key, kl) == 0) {
				char *end;
				unsigned long long v;

				errno = 0;
				v = strtoull(colon + 1, &end, 10);
				if (errno != 0 || end == colon + 1)
					return -1;
				*out = v;
				return 0;
			}
		}
		line = nl != NULL ? nl + 1 : NULL;
	}
	return -1;
}

/* ---- /proc/interrupts ------------------------------------------------------ */

/* The header names the CPU columns ("CPU0 CPU1 ..."): their number. */
static int count_columns(const char *line, const char *nl)
{
	int n = 0;

	for (const char *p = line; p + 3 <= nl; p++)
		if (memcmp(p, "CPU", 3) == 0 && (p == line || isspace((unsigned char)p[-1])))
			n++;
	return n;
}

/* Fill irq from one line "  36:  0  86086  PCI-MSIX-0000:00:02.0  1-edge  virtio1-req.0";
 * 1 when it is a numeric IRQ, 0 for the named rows (NMI, LOC, ...). */
static int parse_irq_line(const char *line, const char *nl, int ncol,
			  ds_irq *irq)
{
	const char *p = line;
	char *end;
	long v;
	size_t n = 0;

	while (p < nl && isspace((unsigned char)*p))
		p++;
	if (p == nl || !isdigit((unsigned char)*p))
		return 0;
	errno = 0;
	v = strtol(p, &end, 10);
	if (errno != 0 || *end != ':' || v < 0 || v > 1 << 24 || end > nl)
		return 0;
	memset(irq, 0, sizeof *irq);
	irq->irq = (int)v;
	p = end + 1;
	for (int c = 0; c < ncol; c++) {
		unsigned long long cnt;

		while (p < nl && (*p == ' ' || *p == '\t'))
			p++;
		if (p == nl || !isdigit((unsigned char)*p))
			break; /* fewer columns than CPUs: the rest is the name */
		cnt = strtoull(p, &end, 10);
		if (end > nl)
			break;
		irq->count += cnt;
		p = end;
	}
	/* the name: chip, hwirq, device; runs of blanks squeezed to one */
	while (p < nl && n + 1 < sizeof irq->name) {
		if (isspace((unsigned char)*p)) {
			while (p < nl && isspace((unsigned char)*p))
				p++;
			if (p < nl && n > 0)
				irq->name[n++] = ' ';
			continue;
		}
		irq->name[n++] = *p++;
	}
	irq->name[n] = '\0';
	return 1;
}

int ds_interrupts_parse(const char *text, ds_irq **out, int *n, ds_err *err)
{
	const char *line = text, *nl;
	ds_irq *v = NULL, *nv;
	int cap = 0, cnt = 0, ncol;

	*out = NULL;
	*n = 0;
	nl = strchr(line, '\n');
	if (nl == NULL)
		nl = line + strlen(line);
	ncol = count_columns(line, nl);
	if (ncol == 0)
		return ds_errf(err, "/proc/interrupts: no CPU columns in the "
			       "first line");
	while (*nl != '\0') {
		ds_irq irq;

		line = nl + 1;
		nl = strchr(line, '\n');
		if (nl == NULL)
			nl = line + strlen(line);
		if (!parse_irq_line(line, nl, ncol, &irq))
			continue;
		if (cnt == cap) {
			cap = cap ? cap * 2 : 64;
			nv = realloc(v, (size_t)cap * sizeof *v);
			if (nv == NULL) {
				free(v);
				return ds_errf(err, "/proc/interrupts: out of "
					       "memory");
			}
			v = nv;
		}
		v[cnt++] = irq;
	}
	*out = v;
	*n = cnt;
	return 0;
}

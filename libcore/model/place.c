/*
 * place.c - where a loaded model's weights live (forward.h
 * ds_model_place): a copy in hugepages, NUMA placement.
 */
#include "arch.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>


int ds_numa_parse(const char *s, enum ds_numa *mode, ds_err *err)
{
	if (strcmp(s, "interleave") == 0)
		*mode = DS_NUMA_INTERLEAVE;
	else if (strcmp(s, "node") == 0)
		*mode = DS_NUMA_NODE;
	else
		return ds_errf(err, "NUMA mode \"%.32s\" unknown (interleave, node)",
			       s);
	return 0;
}

typedef struct copy_job {
	uint8_t *dst;
	const uint8_t *src;
	size_t bytes;
} copy_job;

/* Each thread copies its share (and so faults in its pages first). */
static void copy_fn(void *arg, int ith, int nth)
{
	const copy_job *j = arg;
	size_t pages = (j->bytes + DS_HUGE_2M - 1) / DS_HUGE_2M, b, e;

	ds_split(pages, ith, nth, &b, &e);
	b *= DS_HUGE_2M;
	e = e * DS_HUGE_2M < j->bytes ? e * DS_HUGE_2M : j->bytes;
	if (b < e)
		memcpy(j->dst + b, j->src + b, e - b);
}

/* Anonymous memory for the copy: hugetlb pages, else THP. */
static int huge_map(ds_placement *pl, size_t bytes, char *warn,
		    size_t warn_len, ds_err *err)
{
	void *p;

	pl->bytes = ds_round_up(bytes, DS_HUGE_2M);
	p = mmap(NULL, pl->bytes, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	if (p != MAP_FAILED) {
		pl->mem = p;
		pl->huge = 1;
		return 0;
	}
	p = mmap(NULL, pl->bytes, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return ds_errf(err, "--hugepages: cannot map %zu bytes", pl->bytes);
	pl->mem = p;
	if (madvise(p, pl->bytes, MADV_HUGEPAGE) != 0)
		snprintf(warn, warn_len, "no hugetlb pages for %zu MiB, and "
			 "transparent hugepages are unavailable: using normal "
			 "pages", pl->bytes >> 20);
	else
		snprintf(warn, warn_len, "no hugetlb pages for %zu MiB "
			 "(reserve them with ds-tune): using transparent "
			 "hugepages", pl->bytes >> 20);
	return 0;
}

/* Each matrix's row-sets spread over the threads' nodes. */
static int place_split(ds_model *m, ds_pool *pool, ds_err *err)
{
	size_t i;

	for (i = 0; i < m->n_tensors; i++) {
		const ds_tensor *t = &m->tensors[i];
		uintptr_t b = (uintptr_t)t->data & ~(uintptr_t)4095;
		size_t len = ds_round_up((uintptr_t)t->data + t->size - b, 4096);
		size_t units = t->ndim >= 2 ? (t->shape[t->ndim - 2] + 15) / 16 : 1;

		if (t->ndim == 3)
			units *= t->shape[0];
		if (ds_pool_place(pool, (const void *)b, len, units,
				  DS_PLACE_SPLIT, err))
			return ds_err_prefix(err, "tensor %s", t->name);
	}
	return 0;
}

int ds_model_place(ds_model *m, ds_pool *pool, int hugepages,
		   enum ds_numa numa, ds_placement *pl, char *warn,
		   size_t warn_len, ds_err *err)
{
	const uint8_t *base = m->bin.data;
	size_t bytes = m->bin.size, i;

	memset(pl, 0, sizeof *pl);
	if (warn_len)
		warn[0] = '\0';
	if (base == NULL)
		return 0;
	if (hugepages) {
		copy_job j = { .src = base, .bytes = bytes };

		if (huge_map(pl, bytes, warn, warn_len, err))
			return -1;
		j.dst = pl->mem;
		for (i = 0; i < m->n_tensors; i++)
			m->tensors[i].data = j.dst + (m->tensors[i].data - base);
		/* the policy first: it acts when the copy faults the pages in */
		if ((numa == DS_NUMA_INTERLEAVE &&
		     ds_pool_place(pool, pl->mem, pl->bytes, 1, DS_PLACE_INTERLEAVE,
				   err)) ||
		    (numa == DS_NUMA_NODE && place_split(m, pool, err)))
			goto fail;
		ds_pool_run(pool, copy_fn, &j);
		if ((m->flags & DS_LOAD_MLOCK) && mlock(pl->mem, pl->bytes) != 0) {
			ds_errf(err, "--mlock: cannot lock %zu bytes", pl->bytes);
			goto fail;
		}
		if (m->flags & DS_LOAD_MLOCK)
			munlock(m->bin.data, m->bin.size);
		munmap((void *)m->bin.data, m->bin.size);
		m->bin.data = NULL;
		m->bin.size = 0;
		return 0;
	}
	if (numa == DS_NUMA_INTERLEAVE)
		return ds_pool_place(pool, base, ds_round_up(bytes, 4096), 1,
				     DS_PLACE_INTERLEAVE, err);
	if (numa == DS_NUMA_NODE)
		return place_split(m, pool, err);
	return 0;
fail:
	for (i = 0; i < m->n_tensors; i++)        /* back to the file */
		m->tensors[i].data = base + (m->tensors[i].data - (uint8_t *)pl->mem);
	ds_placement_free(pl);
	return -1;
}

void ds_placement_free(ds_placement *pl)
{
	if (pl->mem != NULL)
		munmap(pl->mem, pl->bytes);
	memset(pl, 0, sizeof *pl);
}

/* ---- a share of the model (expert parallelism) ------------------------------- */

typedef int range_fn(void *arg, const uint8_t *p, size_t n);

static int is_exps(const ds_tensor *t)
{
	size_t n = strlen(t->name);

	return t->ndim == 3 && n > 5 && strcmp(t->name + n - 5, "_exps") == 0;
}

/* fn on each byte range of m the share uses: every tensor but the other
 * parts' experts (and the output projection with no_output); stops at
 * the first nonzero return. */
static int share_ranges(const ds_model *m, const ds_load_opts *o,
			range_fn *fn, void *arg)
{
	uint32_t first, end;
	size_t i;
	int rc = 0;

	ds_ep_range(m->hp.n_expert, o->ep_parts, o->ep_part, &first, &end);
	for (i = 0; i < m->n_tensors && rc == 0; i++) {
		const ds_tensor *t = &m->tensors[i];

		if (is_exps(t)) {
			uint64_t one = t->size / t->shape[0];

			rc = fn(arg, t->data + first * one, (end - first) * one);
		} else if (!(o->no_output && !m->hp.tie_embeddings &&
			     strcmp(t->name, "output") == 0)) {
			rc = fn(arg, t->data, t->size);
		}
	}
	return rc;
}

static int populate_fn(void *arg, const uint8_t *p, size_t n)
{
	const ds_model *m = arg;

	ds_map_populate(&m->bin, (size_t)(p - m->bin.data), n);
	return 0;
}

static int lock_fn(void *arg, const uint8_t *p, size_t n)
{
	(void)arg;
	return n && mlock(p, n) != 0 ? -1 : 0;
}

typedef struct share_copy {
	ds_pool *pool;
	const uint8_t *from;
	uint8_t *to;
} share_copy;

static int copy_range_fn(void *arg, const uint8_t *p, size_t n)
{
	share_copy *c = arg;
	copy_job j = { .dst = c->to + (p - c->from), .src = p, .bytes = n };

	if (n)
		ds_pool_run(c->pool, copy_fn, &j);
	return 0;
}

/* The share copied into transparent hugepages of a mapping as large as
 * model.bin (the rest never touched, so never backed): hugetlb pages
 * would be reserved for all of it. */
static int share_place(ds_model *m, ds_pool *pool, const ds_load_opts *o,
		       ds_placement *pl, char *warn, size_t warn_len, ds_err *err)
{
	share_copy c = { .pool = pool, .from = m->bin.data };
	size_t i;

	pl->bytes = ds_round_up(m->bin.size, DS_HUGE_2M);
	c.to = ds_map_anon_huge(pl->bytes);
	if (c.to == NULL)
		return ds_errf(err, "--hugepages: cannot map %zu bytes", pl->bytes);
	pl->mem = c.to;
	(void)share_ranges(m, o, copy_range_fn, &c);
	if ((m->flags & DS_LOAD_MLOCK) && share_ranges(m, o, lock_fn, NULL) != 0) {
		ds_placement_free(pl);
		return ds_errf(err, "--mlock: cannot lock this rank's share");
	}
	for (i = 0; i < m->n_tensors; i++)
		m->tensors[i].data = c.to + (m->tensors[i].data - c.from);
	munmap((void *)m->bin.data, m->bin.size);
	m->bin.data = NULL;
	m->bin.size = 0;
	snprintf(warn, warn_len, "the share of the experts is copied into "
		 "transparent hugepages (hugetlb pages are not used with "
		 "expert parallelism)");
	return 0;
}

/* ds_model_open for a share: verified whole (then unmapped from this
 * process), then its ranges populated and locked, or copied. */
static int open_share(ds_model *m, ds_pool *pool, const char *dir,
		      const ds_load_opts *o, ds_placement *pl, char *warn,
		      size_t warn_len, ds_err *err)
{
	if (o->numa != DS_NUMA_OFF)
		return ds_errf(err, "--numa with expert parallelism: bind each "
			       "rank to its node instead (ds-tune plan --ranks)");
	if (o->ep_part >= o->ep_parts)
		return ds_errf(err, "part %u of %u", o->ep_part, o->ep_parts);
	if (ds_model_load(m, dir, 0, err))
		return -1;
	if (o->verify) {
		if (ds_model_verify(m, err))
			return -1;
		if (m->bin.data != NULL)
			(void)madvise((void *)m->bin.data, m->bin.size, MADV_DONTNEED);
	}
	if (o->mlock)
		m->flags |= DS_LOAD_MLOCK;
	if (o->hugepages)
		return share_place(m, pool, o, pl, warn, warn_len, err);
	if (!o->no_populate)
		(void)share_ranges(m, o, populate_fn, m);
	if (o->mlock && share_ranges(m, o, lock_fn, NULL) != 0)
		return ds_errf(err, "%s: --mlock: cannot lock this rank's share of "
			       "model.bin", dir);
	return 0;
}

int ds_model_open(ds_model *m, ds_pool *pool, const char *dir,
		  const ds_load_opts *o, ds_placement *pl, char *warn,
		  size_t warn_len, ds_err *err)
{
	unsigned flags = 0;
	int placed = o->hugepages || o->numa != DS_NUMA_OFF;

	memset(pl, 0, sizeof *pl);
	if (warn_len)
		warn[0] = '\0';
	if (o->ep_parts > 0)
		return open_share(m, pool, dir, o, pl, warn, warn_len, err);
	if (!o->no_populate && !placed)
		flags |= DS_LOAD_POPULATE;
	if (o->mlock && !o->hugepages)
		flags |= DS_LOAD_MLOCK;
	if (o->mtp)
		flags |= DS_LOAD_MTP;
	if (ds_model_load(m, dir, flags, err))
		return -1;
	if (o->mlock)
		m->flags |= DS_LOAD_MLOCK;
	if (placed && ds_model_place(m, pool, o->hugepages, o->numa, pl, warn,
				     warn_len, err))
		return -1;
	return o->verify ? ds_model_verify(m, err) : 0;
}

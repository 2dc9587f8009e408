/*
 * tune.h - what ds-tune does: advise on the host's settings, plan the
 * settings for running a model, apply a plan safely and revert it.
 *
 * A plan is a list of actions, each "write VALUE to PATH" or "create the
 * directory PATH", with PATH as the running system names it (/sys/...,
 * /proc/sys/..., /proc/irq/...).  Applying it under a root prefix writes
 * ROOT/PATH.  Every previous value is recorded in a state file before the
 * first write (see ds_tune_apply), so that revert can restore them all.
 */
#ifndef DS_TUNE_H
#define DS_TUNE_H

#include <stdint.h>

#include "host/sysinfo/sysinfo.h"
#include "base/util.h"

/* ---- the model ------------------------------------------------------------- */

typedef struct ds_tune_model {
	char arch[16];            /* "llama", "qwen2", "deepseek2" */
	uint64_t bytes;           /* model.bin: what --hugepages copies */
	uint64_t kv_token_bytes;  /* KV cache per token, f16, all layers */
	uint32_t n_ctx_train;
	uint32_t n_expert;        /* routed experts (0: a dense model) */
	uint64_t exp_bytes;       /* the routed experts' tensors (*_exps) */
	uint64_t mtp_bytes;       /* the MTP layer's (loaded only to draft) */
	uint64_t out_bytes;       /* the output projection (rank 0's alone) */
} ds_tune_model;

/* Read DIR/model.meta (ds-model(5)) and the size of DIR/model.bin.
 * KV per token: deepseek2 caches kv_lora_rank + qk_rope_head_dim values
 * per layer (MLA's latent and rope key); llama and qwen2 cache
 * 2 x n_head_kv x head_dim.  2 bytes each. */
int ds_tune_model_read(const char *dir, ds_tune_model *m, ds_err *err);

/* ---- advice: what hurts inference on this host ------------------------------ */

typedef struct ds_tune_advice {
	char setting[32];   /* "governor", "thp.enabled", ... */
	char value[160];    /* what it is */
	char should[64];    /* what it should be */
	const char *why;    /* one sentence */
} ds_tune_advice;

/* The settings of `si` that hurt inference, in the order show prints
 * them.  *out is malloc'd (NULL when none). */
int ds_tune_advise(const ds_sysinfo *si, ds_tune_advice **out, int *n,
		   ds_err *err);

/* ---- plans -------------------------------------------------------------------- */

enum { DS_TUNE_WRITE, DS_TUNE_MKDIR };

typedef struct ds_tune_action {
	int op;             /* DS_TUNE_WRITE or DS_TUNE_MKDIR */
	char *path;         /* "/sys/kernel/mm/transparent_hugepage/enabled" */
	char *value;        /* WRITE: one line, no newline; MKDIR: NULL */
	const char *why;    /* static text, NULL for a parsed plan */
} ds_tune_action;

typedef struct ds_tune_instance {
	ds_cpuset cpus;     /* one physical core each, no SMT siblings */
	ds_cpuset nodes;    /* the NUMA nodes of those cores */
	uint64_t pages;     /* 2 MiB pages for its model copy + KV cache */
	char cgroup[192];   /* its cgroup v2 directory, "" when none */
	char *run, *serve;  /* the ds-run and ds-serve command lines */
} ds_tune_instance;

typedef struct ds_tune_opts {
	const char *model_dir; /* as it goes into the command lines */
	int instances;      /* >= 1 */
	int threads;        /* per instance; 0: all the cores it gets */
	int ctx_size;       /* 0: min(n_ctx_train, 4096), as ds-run */
	/* An MPI job (ds-run --mpi) instead of instances: ranks in all
	 * (DS_TUNE_RANKS_NUMA: one per NUMA node of each host), over the
	 * hosts of a comma-separated list (NULL: this one, "localhost"),
	 * each taken to be like this one; 0: no job. */
	int ranks;
	const char *hosts;
} ds_tune_opts;

#define DS_TUNE_RANKS_NUMA (-1)

/* The MPI job of a plan with ranks: the ranks of each host are the
 * plan's instances, on every host alike. */
typedef struct ds_tune_mpi {
	int ranks, per_host, n_hosts;
	char **hosts;
	uint64_t shared_bytes;    /* weights every rank holds */
	uint64_t rank_exp_bytes;  /* the most experts' bytes a rank holds */
	char *run, *serve;        /* the mpirun command lines */
} ds_tune_mpi;

typedef struct ds_tune_plan {
	ds_tune_model model;
	char model_dir[512];
	int ctx_size;
	uint64_t kv_bytes;        /* per instance */
	uint64_t pages;           /* per instance, 2 MiB each; 0: none */
	int n_act;
	ds_tune_action *act;
	int n_inst;
	ds_tune_instance *inst;
	int n_notes;
	char **notes;             /* what could not be planned, and why */
	ds_tune_mpi mpi;          /* ranks 0: no job */
} ds_tune_plan;

/* The settings to run the model of `m` on `si`, as opts ask.  Only
 * actions that change something are listed. */
int ds_tune_plan_make(ds_tune_plan *p, const ds_sysinfo *si,
		      const ds_tune_model *m, const ds_tune_opts *opts,
		      ds_err *err);
void ds_tune_plan_free(ds_tune_plan *p);

/* The plan as text ("PATH = VALUE", "mkdir PATH", "run.N = ...", '#'
 * comments) or JSON, malloc'd.  Both parse back with ds_tune_plan_parse. */
char *ds_tune_plan_format(const ds_tune_plan *p, int json, ds_err *err);
/* Parse a plan file (text or JSON, told apart by a leading '{').  `name`
 * is for messages.  Paths must be absolute, without "." or ".."
 * components, and under /sys/, /proc/sys/ or /proc/irq/. */
int ds_tune_plan_parse(ds_tune_plan *p, const char *text, const char *name,
		       ds_err *err);

/* ---- apply and revert ----------------------------------------------------------- */

/* What one action does or would do. */
typedef struct ds_tune_change {
	const ds_tune_action *act;
	char before[128];   /* its value now (selected word), "(none)" */
	int same;           /* already as planned: nothing to write */
} ds_tune_change;

typedef struct ds_tune_report {
	int changed;        /* paths written or directories made */
	int same;           /* actions already in effect */
	int n_warn;
	char **warn;        /* best-effort writes that failed (IRQs) */
} ds_tune_report;

void ds_tune_report_free(ds_tune_report *r);

/* The default state file: ROOT/var/lib/ds-tune/state.json (malloc'd). */
char *ds_tune_state_default(const char *root);

/* May this process change ROOT?  The effective uid must be 0; with a
 * root prefix, the owner of the prefix directory may too (a fake tree
 * belongs to whoever made it; ds-tune is no privilege boundary, the
 * check only stops a mistaken run). */
int ds_tune_may_write(const char *root, ds_err *err);

/* --dry-run: read what every action would change; writes nothing.
 * *out has p->n_act entries (malloc'd). */
int ds_tune_preview(const ds_tune_plan *p, const char *root,
		    ds_tune_change **out, ds_err *err);

/* Apply p under root.  Before the first write, every value about to
 * change is recorded in `state` (written atomically: a temporary file,
 * fsync, rename); an existing state keeps its older records, so applying
 * twice and reverting once restores the original.  If a write fails,
 * what this call changed is restored, and err names the failing path.
 * Writes to /proc/irq/ are best effort (the kernel refuses to move
 * managed and per-CPU interrupts): a failure there is a warning. */
int ds_tune_apply(const ds_tune_plan *p, const char *root,
		  const char *state, ds_tune_report *r, ds_err *err);

/* Restore every recorded value, newest first, and remove the state.  On
 * failure the entries that could not be restored stay in the state. */
int ds_tune_revert(const char *root, const char *state, ds_tune_report *r,
		   ds_err *err);

#endif

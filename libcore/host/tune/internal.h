/* internal.h - shared inside libcore/host/tune: the reasons behind each
 * setting (the advice of show and the plan's comments; ds-tune(8) has
 * the long form of each, with how it was measured) and the action list. */
#ifndef DS_TUNE_INTERNAL_H
#define DS_TUNE_INTERNAL_H

#include "tune.h"

#define WHY_GOVERNOR \
	"other governors lower the clock while threads wait at barriers and " \
	"on memory, so every token starts slow"
#define WHY_BOOST \
	"prefill is bound by arithmetic; without boost it runs at the base clock"
#define WHY_THP_ALWAYS \
	"always makes page faults and khugepaged compact memory for every " \
	"process, stalling at random; ds-run asks for huge pages itself"
#define WHY_THP_NEVER \
	"never also refuses ds-run's madvise(MADV_HUGEPAGE), its fallback " \
	"when no huge pages are reserved"
#define WHY_DEFRAG \
	"always makes every huge page fault of every process wait for " \
	"compaction"
#define WHY_HUGEPAGES \
	"decode streams every weight once per token; 4 KiB pages make that " \
	"a TLB miss every 4 KiB (ds-run --hugepages)"
#define WHY_NUMA_BALANCING \
	"it unmaps pages to sample who uses them; pinned node-local " \
	"instances only pay the faults and migrations"
#define WHY_IRQBALANCE \
	"it moves interrupts back onto the cores kept for inference"
#define WHY_CGROUP \
	"without cgroup v2 cpu and cpuset, instances cannot be confined to " \
	"their cores and memory nodes"
#define WHY_IRQ \
	"an interrupt on an inference core delays one thread, and every " \
	"other thread waits for it at the next barrier"
#define WHY_CG_SUBTREE "enables the cpu and cpuset controllers below"
#define WHY_CG_GROUP \
	"one group per instance: its cores, its memory node, no CPU quota " \
	"(a throttled thread stalls the whole pool)"
#define WHY_CG_WEIGHT "inference wins the CPU over other work on its cores"

/* Append an action (path and value copied) to p->act. */
int ds_tune_act_add(ds_tune_plan *p, int op, const char *path,
		    const char *value, const char *why, ds_err *err);

/* Is `path` a plan path: absolute, plain, under /sys/, /proc/sys/ or
 * /proc/irq/?  `where` starts the message. */
int ds_tune_check_path(const char *path, const char *where, ds_err *err);

/* ---- the state file (state.c) ---- */

typedef struct ds_tentry {
	int op;          /* DS_TUNE_WRITE or DS_TUNE_MKDIR */
	char *path;      /* as in the plan, without the root */
	char *old;       /* WRITE: exact content before; NULL: no such file */
} ds_tentry;

typedef struct ds_tstate {
	char *file, *dir;
	char root[256];  /* "/" for the running system */
	int dir_created; /* apply made dir: revert removes it */
	int lock_fd;     /* dir, flock'd */
	int n, cap;
	ds_tentry *e;
} ds_tstate;

/* Lock the state's directory (making it when `create`). */
int ds_tstate_open(ds_tstate *st, const char *file, const char *root,
		   int create, ds_err *err);
void ds_tstate_close(ds_tstate *st);
/* Read the entries; *exists 0 when there is no state file yet. */
int ds_tstate_load(ds_tstate *st, int *exists, ds_err *err);
int ds_tstate_find(const ds_tstate *st, int op, const char *path);
int ds_tstate_add(ds_tstate *st, int op, const char *path, const char *old,
		  size_t old_len, ds_err *err);
void ds_tstate_truncate(ds_tstate *st, int from);
/* Replace the file atomically. */
int ds_tstate_save(const ds_tstate *st, ds_err *err);
/* Remove the file (and the directory when apply made it). */
int ds_tstate_remove(ds_tstate *st, ds_err *err);

#endif

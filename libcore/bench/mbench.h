/*
 * mbench.h - the model benchmark behind `ds-bench -m DIR` and
 * `ds-bench --synthetic SHAPE`: prefill and decode speed of a model
 * through the forward API, beside the read-bandwidth probe and the ISA's
 * peaks measured in the same process (ds-bench(1) defines every field).
 *
 *   pp   one batch of p random tokens at positions 0..p-1 of an empty
 *        cache (chunks of the batch option's size), logits of the last;
 *        pp_ts = p / time; ttft = the same time plus choosing the first
 *        token (argmax of those logits)
 *   tg   n decode steps of one random token each, from an empty cache
 *        (llama-bench's tg); tg_ts = n / time, ms_per_tok = 1000 / tg_ts
 *   both mean and standard deviation over reps repetitions after one
 *        warm-up of each
 *   bw   active_bytes * tg_ts: the weight bytes one decoded token reads
 *        (ds_fwd_info: all but the embedding table and the routed experts
 *        a token does not use) per second, and bw_ratio = bw / the read
 *        probe, the mean of its runs over the model's weights just
 *        before each rep, at the same threads (each run the rate
 *        sustained over 0.1 s of passes, ds_kbench_read)
 *   gops 2 * active_params * pp_ts / 1e9 (a multiply-add per weight per
 *        token; attention's own products are left out), and
 *        pp_ratio = gops / the int8 peak (q4, q8 models) or bf16 peak
 *   comm with --mpi (dist.h), over the timed repetitions, per token:
 *        bytes = what all ranks sent each other (expert rows, batches),
 *        ms = rank 0's time waiting in exchanges and sending batches
 *        (its time is the step's), share = ms / ms per token; wait_max
 *        = the most any rank waited in exchanges
 */
#ifndef DS_MBENCH_H
#define DS_MBENCH_H

#include <stdint.h>
#include <stdio.h>

#include "dist/dist.h"
#include "model/forward.h"
#include "format/hfconfig.h"
#include "base/util.h"

/* Parameters of hp's architecture, from its tensor table (ds_arch_tensors):
 * total: every weight; active: what one token uses, i.e. all but the
 * embedding table (a row lookup; counted when tied to the output) and the
 * n_expert - n_expert_used routed experts of each MoE layer it does not
 * use (DeepSeek's "activated parameters": V2-Lite 15.7B total, 2.4B
 * active). */
int ds_model_params(const ds_hparams *hp, uint64_t *total, uint64_t *active,
		    ds_err *err);

/* What is reported once per model. */
typedef struct ds_mbench_model {
	const char *name;         /* the directory or the synthetic shape */
	char arch[16];            /* "llama" "qwen2" "deepseek2" */
	char type[16];            /* quantized matrices' type, "q4g32" */
	uint32_t n_layer;
	uint64_t model_bytes;     /* model.bin's tensors */
	uint64_t active_bytes;    /* read per decoded token (ds_fwd_info) */
	uint64_t params, active_params;
	uint64_t head_params;     /* the output projection's (in
				     active_params; a prefill runs it for
				     the last token only) */
	uint64_t attn_width;      /* attention's multiply-adds per (query,
				     key) pair over all layers: layers x
				     heads x (q.k width + v width) */
	double load_s;            /* ds_model_open, incl. the hugepages copy */
	uint64_t synth_bytes;     /* --synthetic: bytes written; else 0 */
	double synth_s;           /* --synthetic: time to write them */
	int hugepages;            /* 1: weights in MAP_HUGETLB pages */
	const char *isa;          /* ds_kernels_name() */
	const char *kv_type;      /* ds_kvtype_name() of the cache */
} ds_mbench_model;

/* One (p, n, threads) combination. */
typedef struct ds_mbench_row {
	const ds_mbench_model *m;
	uint32_t pp, tg;          /* -p and -n values (0: that test skipped) */
	int threads, reps;
	uint32_t n_ctx;
	double pp_ts, pp_sd;      /* prefill tokens/s, mean and stddev */
	double tg_ts, tg_sd;      /* decode tokens/s */
	double ms_per_tok, ms_sd; /* decode ms per token */
	double ttft_ms, ttft_sd;  /* time to first token */
	double probe_gbs;         /* read probe, sustained, same threads */
	double probe_best_gbs;    /* its fastest single read (0: no decode) */
	double decode_gbs, bw_ratio;
	double peak_gops;         /* int8 or bf16 peak, same threads */
	const char *peak_kind;    /* "int8" "bf16" */
	double pp_gops, pp_ratio;
	double rss_peak_mib;      /* VmHWM so far */
	double kv_mib;            /* the cache this row used */
	int ranks;                /* 1 without --mpi */
	struct ds_mbench_comm {
		double bytes, ms, share, wait_max_ms;
	} pp_comm, tg_comm;       /* per token (above); 0 without --mpi */
} ds_mbench_row;

typedef void ds_mbench_emit(void *arg, const ds_mbench_row *r);

typedef struct ds_mbench_opts {
	const char *dir;          /* the model directory */
	const char *name;         /* reported name (NULL: dir) */
	const uint32_t *pp;       /* prompt lengths (0 skips pp) */
	int n_pp;
	const uint32_t *tg;       /* decode lengths (0 skips tg) */
	int n_tg;
	const int *threads;
	int n_threads;
	int reps;                 /* >= 1 */
	uint32_t ctx_size;        /* 0: max p + max n */
	uint32_t batch;           /* a prompt's chunk (0: DS_SESSION_BATCH,
				     as ds-run's) */
	enum ds_kvtype kv_type;   /* the cache's (ds-run --cache-type) */
	const char *cpus;         /* pin the pool (ds_pool_opts.cpus) */
	ds_load_opts load;
	uint64_t seed;            /* the random tokens */
	FILE *progress;           /* stderr lines, or NULL */
	/* filled for the caller before the first row (and used in every
	 * row's m) */
	ds_mbench_model *model;
	/* called once the model is loaded (ds-bench removes a synthetic
	 * model's files there: the mapping keeps them) */
	void (*loaded)(void *arg);
	void *loaded_arg;
	/* --mpi: this process's rank of the job (its share loaded, its
	 * forward passes one part of the job's), or NULL */
	ds_dist *dist;
} ds_mbench_opts;

/* Rank 0 (or the only process): the benchmark. */
int ds_mbench_run(const ds_mbench_opts *o, ds_mbench_emit *emit, void *arg,
		  ds_err *err);
/* --mpi, ranks > 0, with the same options: the model and a forward for
 * each thread count as rank 0 makes them, following its passes.  Rank 0
 * reports the failures; 1 when it failed. */
int ds_mbench_follow(const ds_mbench_opts *o, ds_err *err);


#endif

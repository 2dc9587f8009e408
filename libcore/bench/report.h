/*
 * report.h - ds-bench's rows as a person reads them (md) and as scripts
 * read them (csv, json, jsonl: stable interfaces, their fields named in
 * ds-bench(1)).  Rows stream: each is written and flushed as it is
 * measured.
 */
#ifndef DS_REPORT_H
#define DS_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "kbench.h"
#include "mbench.h"
#include "specbench.h"

enum ds_report_fmt { DS_REPORT_MD, DS_REPORT_CSV, DS_REPORT_JSON, DS_REPORT_JSONL };

typedef struct ds_report {
	FILE *f;
	enum ds_report_fmt fmt;
	int n;                     /* rows written */
	int failed;                /* a row could not be written */
} ds_report;

/* "md", "csv", "json", "jsonl" -> fmt; -1 for anything else. */
int ds_report_parse(const char *s, enum ds_report_fmt *fmt);

/* --kernels and --membw: a heading, the rows (ds_kbench_emit), the end. */
void ds_report_kernels_begin(ds_report *r, const char *isa, int cpu_time);
void ds_report_kernel_row(void *report, const ds_kbench_row *row);
void ds_report_kernels_end(ds_report *r);

/* Models: the rows (ds_mbench_emit), then the end (md: the peak RSS). */
void ds_report_model_row(void *report, const ds_mbench_row *row);
void ds_report_models_end(ds_report *r);

/* --spec: plain against speculative decoding (md or csv). */
void ds_report_spec(ds_report *r, const char *model, int threads,
		    const ds_specbench_row *row);
/* --verify: a pass of E entries against one, and the speedup bound at
 * each acceptance rate (md or csv). */
void ds_report_verify(ds_report *r, const char *name, const ds_verify_row *row);

/* "636.18 MiB", "9.06 GiB"; "1.10 B", "35.2 M" */
const char *ds_report_bytes(uint64_t b, char *buf, size_t len);
const char *ds_report_count(uint64_t n, char *buf, size_t len);

#endif

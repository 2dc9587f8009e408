/* report.c - ds-bench's rows in md, csv, json and jsonl (report.h). */
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "report.h"

int ds_report_parse(const char *s, enum ds_report_fmt *fmt)
{
	static const char *const names[] = {
		[DS_REPORT_MD] = "md", [DS_REPORT_CSV] = "csv",
		[DS_REPORT_JSON] = "json", [DS_REPORT_JSONL] = "jsonl",
	};
	size_t i;

	for (i = 0; i < sizeof names / sizeof names[0]; i++)
		if (strcmp(s, names[i]) == 0) {
			*fmt = (enum ds_report_fmt)i;
			return 0;
		}
	return -1;
}

const char *ds_report_bytes(uint64_t b, char *buf, size_t len)
{
	if (b >= (1ull << 30))
		snprintf(buf, len, "%.2f GiB", b / 1073741824.0);
	else
		snprintf(buf, len, "%.2f MiB", b / 1048576.0);
	return buf;
}

const char *ds_report_count(uint64_t n, char *buf, size_t len)
{
	if (n >= 100000000ull)
		snprintf(buf, len, "%.2f B", n * 1e-9);
	else
		snprintf(buf, len, "%.2f M", n * 1e-6);
	return buf;
}

/* A JSON value of an array or a line; the array's commas are ours. */
static void put_json(ds_report *r, json_t *j, const char *before)
{
	if (j == NULL || fputs(before, r->f) == EOF || ds_json_put(r->f, j))
		r->failed = 1;
	json_decref(j);
}

/* ---- kernels ------------------------------------------------------------------ */

void ds_report_kernels_begin(ds_report *r, const char *isa, int cpu_time)
{
	if (r->fmt == DS_REPORT_CSV) {
		fprintf(r->f, "op,type,n,k,t,threads,sec,gbs,gops,ratio,us,ghz\n");
	} else if (r->fmt == DS_REPORT_JSON) {
		json_t *j = json_pack("{s:s, s:s}", "isa", isa, "clock",
				      cpu_time ? "cpu" : "wall");
		char *s = j ? json_dumps(j, DS_JSON_FLAGS) : NULL;

		/* the object's last brace opens to the rows */
		if (s == NULL)
			r->failed = 1;
		else
			fprintf(r->f, "%.*s, \"rows\": [", (int)strlen(s) - 1, s);
		free(s);
		json_decref(j);
	} else {
		fprintf(r->f, "kernels: %s, times by %s\n\n| op | type | shape | T | "
			"threads | ms | GB/s | GOP/s | ratio |\n"
			"|---|---|---|---|---|---|---|---|---|\n", isa,
			cpu_time ? "CPU time per thread" : "the wall clock");
	}
}

static void kernel_md(FILE *f, const ds_kbench_row *r)
{
	char shape[48] = "", gbs[16] = "", gops[16] = "", ratio[16] = "", note[48] = "";

	if (r->n && r->k)
		snprintf(shape, sizeof shape, "%llux%llu", (unsigned long long)r->n,
			 (unsigned long long)r->k);
	else if (r->n)
		snprintf(shape, sizeof shape, "%llu MiB", (unsigned long long)r->n >> 20);
	if (r->gbs > 0)
		snprintf(gbs, sizeof gbs, "%.1f", r->gbs);
	if (r->gops > 0)
		snprintf(gops, sizeof gops, "%.1f", r->gops);
	if (r->ratio > 0)
		snprintf(ratio, sizeof ratio, "%.2f", r->ratio);
	if (strcmp(r->op, "barrier") == 0)
		snprintf(note, sizeof note, "%.2f us round trip", r->us);
	else if (strcmp(r->op, "peak") == 0)
		snprintf(note, sizeof note, "ops/cycle/thread at %.2f GHz", r->ghz);
	else if (strcmp(r->op, "matvec") == 0)
		snprintf(note, sizeof note, "of read probe");
	else if (strcmp(r->op, "matmul") == 0)
		snprintf(note, sizeof note, "of %s peak", r->type[0] == 'q' ? "int8" :
			 strcmp(r->type, "bf16") == 0 ? "bf16" : "fp32");
	fprintf(f, "| %s | %s | %s | %llu | %d | %.3f | %s | %s | %s %s |\n", r->op,
		r->type, shape, (unsigned long long)r->t, r->threads, r->sec * 1e3, gbs,
		gops, ratio, note);
}

void ds_report_kernel_row(void *report, const ds_kbench_row *r)
{
	ds_report *o = report;

	if (o->fmt == DS_REPORT_CSV)
		fprintf(o->f, "%s,%s,%llu,%llu,%llu,%d,%.9g,%.4g,%.4g,%.4g,%.4g,%.4g\n",
			r->op, r->type, (unsigned long long)r->n, (unsigned long long)r->k,
			(unsigned long long)r->t, r->threads, r->sec, r->gbs, r->gops,
			r->ratio, r->us, r->ghz);
	else if (o->fmt == DS_REPORT_JSON)
		put_json(o, json_pack("{s:s, s:s, s:I, s:I, s:I, s:i, s:f, s:f, s:f, "
				      "s:f, s:f, s:f}", "op", r->op, "type", r->type,
				      "n", (json_int_t)r->n, "k", (json_int_t)r->k,
				      "t", (json_int_t)r->t, "threads", r->threads,
				      "sec", r->sec, "gbs", r->gbs, "gops", r->gops,
				      "ratio", r->ratio, "us", r->us, "ghz", r->ghz),
			 o->n ? ",\n    " : "\n    ");
	else
		kernel_md(o->f, r);
	o->n++;
	fflush(o->f);
}

void ds_report_kernels_end(ds_report *r)
{
	if (r->fmt == DS_REPORT_JSON)
		fprintf(r->f, "\n]}\n");
}

/* ---- models -------------------------------------------------------------------------- */

/* The fields of a model row, in the order of every plumbing format; the
 * names are the stable interface (ds-bench(1)). */
enum { F_STR, F_INT, F_NUM, F_BOOL };

typedef struct field {
	const char *name;
	int kind;
	const char *s;
	double v;
} field;

#define NFIELDS 47

static field fs(const char *name, const char *s)
{
	return (field){ .name = name, .kind = F_STR, .s = s };
}

static field fv(const char *name, int kind, double v)
{
	return (field){ .name = name, .kind = kind, .v = v };
}

static void row_fields(const ds_mbench_row *r, field *f)
{
	const ds_mbench_model *m = r->m;
	field all[NFIELDS] = {
		fs("model", m->name), fv("synthetic", F_BOOL, m->synth_bytes > 0),
		fs("arch", m->arch), fs("type", m->type),
		fv("n_layer", F_INT, m->n_layer), fv("model_bytes", F_INT, m->model_bytes),
		fv("active_bytes", F_INT, m->active_bytes), fv("params", F_INT, m->params),
		fv("active_params", F_INT, m->active_params),
		fv("head_params", F_INT, m->head_params),
		fv("attn_width", F_INT, m->attn_width), fs("isa", m->isa),
		fv("hugepages", F_BOOL, m->hugepages), fv("load_s", F_NUM, m->load_s),
		fv("threads", F_INT, r->threads), fv("n_prompt", F_INT, r->pp),
		fv("n_gen", F_INT, r->tg), fv("n_ctx", F_INT, r->n_ctx),
		fv("reps", F_INT, r->reps), fv("pp_ts", F_NUM, r->pp_ts),
		fv("pp_sd", F_NUM, r->pp_sd), fv("tg_ts", F_NUM, r->tg_ts),
		fv("tg_sd", F_NUM, r->tg_sd), fv("ms_per_tok", F_NUM, r->ms_per_tok),
		fv("ms_per_tok_sd", F_NUM, r->ms_sd), fv("ttft_ms", F_NUM, r->ttft_ms),
		fv("ttft_sd", F_NUM, r->ttft_sd), fv("probe_gbs", F_NUM, r->probe_gbs),
		fv("probe_best_gbs", F_NUM, r->probe_best_gbs),
		fv("decode_gbs", F_NUM, r->decode_gbs), fv("bw_ratio", F_NUM, r->bw_ratio),
		fs("peak_kind", r->peak_kind), fv("peak_gops", F_NUM, r->peak_gops),
		fv("pp_gops", F_NUM, r->pp_gops), fv("pp_ratio", F_NUM, r->pp_ratio),
		fv("rss_peak_mib", F_NUM, r->rss_peak_mib), fv("kv_mib", F_NUM, r->kv_mib),
		fv("ranks", F_INT, r->ranks),
		fv("pp_comm_bytes", F_NUM, r->pp_comm.bytes),
		fv("pp_comm_ms", F_NUM, r->pp_comm.ms),
		fv("pp_comm_share", F_NUM, r->pp_comm.share),
		fv("pp_wait_max_ms", F_NUM, r->pp_comm.wait_max_ms),
		fv("tg_comm_bytes", F_NUM, r->tg_comm.bytes),
		fv("tg_comm_ms", F_NUM, r->tg_comm.ms),
		fv("tg_comm_share", F_NUM, r->tg_comm.share),
		fv("tg_wait_max_ms", F_NUM, r->tg_comm.wait_max_ms),
		fs("cache_type", m->kv_type),
	};

	memcpy(f, all, sizeof all);
}

static void csv_str(FILE *f, const char *s)
{
	if (strpbrk(s, ",\"\n") == NULL) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

static void csv_row(ds_report *o, const field *f)
{
	int i;

	for (i = 0; o->n == 0 && i < NFIELDS; i++)
		fprintf(o->f, "%s%s", f[i].name, i + 1 < NFIELDS ? "," : "\n");
	for (i = 0; i < NFIELDS; i++) {
		if (f[i].kind == F_STR)
			csv_str(o->f, f[i].s);
		else if (f[i].kind == F_BOOL)
			fputs(f[i].v != 0 ? "true" : "false", o->f);
		else if (f[i].kind == F_INT)
			fprintf(o->f, "%.0f", f[i].v);
		else
			fprintf(o->f, "%.6g", f[i].v);
		fputc(i + 1 < NFIELDS ? ',' : '\n', o->f);
	}
}

static json_t *json_row(const field *f)
{
	json_t *o = json_object();
	int i;

	for (i = 0; o != NULL && i < NFIELDS; i++)
		json_object_set_new(o, f[i].name,
				    f[i].kind == F_STR ? json_string(f[i].s)
				    : f[i].kind == F_BOOL ? json_boolean(f[i].v != 0)
				    : f[i].kind == F_INT ? json_integer((json_int_t)f[i].v)
				    : json_real(f[i].v));
	return o;
}

static void md_header(FILE *f, const ds_mbench_row *r)
{
	const ds_mbench_model *m = r->m;
	char a[32], b[32], c[32], d[32];

	fprintf(f, "model %s: %s, %s, %u layers, %s, %s params (%s active, %s read "
		"per token%s), kernels %s, KV cache %s, loaded in %.2f s%s\n\n", m->name, m->arch,
		m->type, m->n_layer, ds_report_bytes(m->model_bytes, a, sizeof a),
		ds_report_count(m->params, b, sizeof b),
		ds_report_count(m->active_params, c, sizeof c),
		ds_report_bytes(m->active_bytes, d, sizeof d),
		r->ranks > 1 ? " by rank 0" : "", m->isa, m->kv_type, m->load_s,
		m->hugepages ? ", in hugepages" : "");
	if (r->ranks > 1)
		fprintf(f, "%d ranks; comm: what the ranks sent each other per token, "
			"rank 0's wait per token and its share of the time\n\n",
			r->ranks);
	fprintf(f, "| model | size | params | type | threads | test | t/s | ms/tok "
		"| TTFT ms | GB/s | of probe | GOP/s | of peak |%s\n"
		"|---|---|---|---|---|---|---|---|---|---|---|---|---|%s\n",
		r->ranks > 1 ? " comm |" : "", r->ranks > 1 ? "---|" : "");
}

/* " KiB/tok, ms/tok (share) |" of --mpi rows, "" otherwise. */
static const char *md_comm(const ds_mbench_row *r, const struct ds_mbench_comm *c,
			   char *buf, size_t len)
{
	buf[0] = '\0';
	if (r->ranks > 1)
		snprintf(buf, len, " %.1f KiB, %.3f ms (%.1f%%) |", c->bytes / 1024,
			 c->ms, 100 * c->share);
	return buf;
}

static void md_row(FILE *f, const ds_mbench_row *r)
{
	const ds_mbench_model *m = r->m;
	char pre[256], a[32], b[32], c[80];

	snprintf(pre, sizeof pre, "| %s | %s | %s | %s | %d |", m->name,
		 ds_report_bytes(m->model_bytes, a, sizeof a),
		 ds_report_count(m->params, b, sizeof b), m->type, r->threads);
	if (r->pp)
		fprintf(f, "%s pp%u | %.2f ± %.2f | | %.1f ± %.1f | | | %.1f | %.3f %s |%s\n",
			pre, r->pp, r->pp_ts, r->pp_sd, r->ttft_ms, r->ttft_sd,
			r->pp_gops, r->pp_ratio, r->peak_kind,
			md_comm(r, &r->pp_comm, c, sizeof c));
	if (r->tg)
		fprintf(f, "%s tg%u | %.2f ± %.2f | %.2f | | %.2f | %.3f | | |%s\n", pre,
			r->tg, r->tg_ts, r->tg_sd, r->ms_per_tok, r->decode_gbs,
			r->bw_ratio, md_comm(r, &r->tg_comm, c, sizeof c));
}

void ds_report_model_row(void *report, const ds_mbench_row *r)
{
	ds_report *o = report;
	field f[NFIELDS];

	row_fields(r, f);
	if (o->fmt == DS_REPORT_MD) {
		if (o->n == 0)
			md_header(o->f, r);
		md_row(o->f, r);
	} else if (o->fmt == DS_REPORT_CSV) {
		csv_row(o, f);
	} else if (o->fmt == DS_REPORT_JSON) {
		put_json(o, json_row(f), o->n ? ",\n  " : "[\n  ");
	} else {
		put_json(o, json_row(f), "");
		fputc('\n', o->f);
	}
	o->n++;
	fflush(o->f);
}

void ds_report_models_end(ds_report *r)
{
	if (r->fmt == DS_REPORT_JSON)
		fprintf(r->f, r->n ? "\n]\n" : "[]\n");
	else if (r->fmt == DS_REPORT_MD && r->n)
		fprintf(r->f, "\npeak RSS %.1f MiB\n", ds_rss_peak_mib());
}

/* ---- speculative decoding --------------------------------------------------------- */

void ds_report_spec(ds_report *o, const char *model, int threads,
		    const ds_specbench_row *r)
{
	if (o->fmt == DS_REPORT_CSV) {
		fprintf(o->f, "model,drafter,k,n,reps,threads,plain_ts,spec_ts,speedup,"
			"speedup_lo,speedup_hi,drafted,accepted,acceptance,mean_len,same\n"
			"%s,%s,%u,%u,%d,%d,%.2f,%.2f,%.3f,%.3f,%.3f,%zu,%zu,%.3f,%.2f,%d\n",
			model, r->drafter, r->k, r->n, r->reps, threads, r->plain_ts,
			r->spec_ts, r->speedup, r->speedup_lo, r->speedup_hi, r->drafted,
			r->accepted, r->acceptance, r->mean_len, r->same);
		return;
	}
	fprintf(o->f, "| model | drafter | K | tokens | plain t/s | spec t/s | speedup "
		"(range) | drafted | accepted | acceptance | mean accepted length |\n"
		"| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n"
		"| %s | %s | %s | %u x %d | %.1f | %.1f | %.2fx (%.2f-%.2f) | %zu | %zu "
		"| %.3f | %.2f |\n", model, r->drafter, r->k ? "" : "auto", r->n, r->reps,
		r->plain_ts, r->spec_ts, r->speedup, r->speedup_lo, r->speedup_hi,
		r->drafted, r->accepted, r->acceptance, r->mean_len);
	if (r->k)
		fprintf(o->f, "\n(K %u)\n", r->k);
}

void ds_report_verify(ds_report *o, const char *name, const ds_verify_row *r)
{
	static const double rates[] = { 0.5, 0.6, 0.7, 0.8, 0.9 };
	uint32_t e, k;
	size_t i;

	if (o->fmt == DS_REPORT_CSV) {
		fprintf(o->f, "model,threads,ctx,entries,ms,cost\n");
		for (e = 1; e <= r->max_e; e++)
			fprintf(o->f, "%s,%d,%u,%u,%.4f,%.4f\n", name, r->threads, r->ctx, e,
				r->ms[e], r->cost[e]);
		return;
	}
	fprintf(o->f, "%s, %d threads, %u positions cached, %d rounds\n\n"
		"| entries (1 + drafts) | ms per pass | cost vs 1 |\n| ---: | ---: | ---: |\n",
		name, r->threads, r->ctx, r->reps);
	for (e = 1; e <= r->max_e; e++)
		fprintf(o->f, "| %u | %.3f | %.2f |\n", e, r->ms[e], r->cost[e]);
	fprintf(o->f, "\n| acceptance | best speedup (free drafts) | at K |\n"
		"| ---: | ---: | ---: |\n");
	for (i = 0; i < sizeof rates / sizeof rates[0]; i++) {
		double b = ds_verify_bound(r, rates[i], &k);

		fprintf(o->f, "| %.1f | %.2fx | %u |\n", rates[i], b, k);
	}
}

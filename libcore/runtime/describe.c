/*
 * describe.c - the --verbose lines of a run (describe.h).
 */
#include <unistd.h>

#include "describe.h"
#include "base/cli.h"
#include "kernels/kernels.h"
#include "runtime/pcache.h"
#include "spec/drafter.h"

static double mib(double bytes)
{
	return bytes / 1048576.0;
}

void ds_describe_session(const ds_session *s, const char *dir, uint64_t seed,
			 uint32_t spec_k)
{
	ds_fwd_info fi;

	ds_fwd_get_info(s->fwd, &fi);
	ds_warnx("model %s: %s, %u layers, %.1f MiB of weights, %.1f MiB read "
		 "per decoded token, %.1f MiB derived (MLA)", dir,
		 ds_arch_name(s->m.hp.arch), s->m.hp.n_layer, mib(fi.weight_bytes),
		 mib(fi.active_bytes), mib(fi.derived_bytes));
	ds_warnx("kernels %s, %d threads, forward passes of up to %u tokens, "
		 "seed %llu", ds_kernels_name(), ds_pool_threads(s->pool),
		 fi.max_batch, (unsigned long long)seed);
	ds_warnx("loaded in %.3f s", s->t_load);
	ds_warnx("KV cache %s: %u slots x %u positions = %.1f MiB (%zu bytes a "
		 "position)", ds_kvtype_name(s->kv.type), s->kv.n_slot,
		 s->kv.n_ctx, mib(s->kv.bytes), ds_kvcache_span(&s->kv, 1));
	if (s->drafter)
		ds_warnx("spec: %s drafts, K %s, %.1f MiB read per draft",
			 s->drafter->name, spec_k ? "fixed" : "adaptive",
			 mib(s->drafter->active_bytes));
	if (s->pc) {
		ds_pcache_stats ps;

		ds_pcache_get_stats(s->pc, &ps);
		ds_warnx("prompt cache: %.1f MiB in blocks of %d positions; %zu "
			 "blocks (%.1f MiB) read from --cache-dir, %zu files "
			 "ignored", mib(ps.max_bytes), DS_PCACHE_BLOCK, ps.blocks,
			 mib(ps.bytes), ps.ignored);
	}
	ds_warnx("RSS %.1f MiB", ds_rss_mib());
}

void ds_describe_request(size_t index, enum ds_finish why,
			 const ds_req_stats *st)
{
	ds_warnx("request %zu: %zu prompt tokens (%zu cached), %zu generated, %s",
		 index + 1, st->prompt_tokens, st->cached_tokens,
		 st->completion_tokens, ds_finish_name(why));
	if (st->mask_steps)
		ds_warnx("request %zu: grammar masks: %zu steps, %.3f ms (%.1f us "
			 "a step)", index + 1, st->mask_steps, st->mask_s * 1e3,
			 st->mask_s * 1e6 / (double)st->mask_steps);
}

void ds_describe_runner(const ds_runner *n, enum ds_spec_kind spec)
{
	/* prompt: tokens / time to the first sampled token; decode: the
	 * tokens sampled after the first / the time after it (summed over
	 * the requests, so with --parallel each is its own request's rate) */
	ds_warnx("%zu prompt tokens in %.3f s (%.1f tokens/s), %zu generated in "
		 "%.3f s (%.2f tokens/s decoding), %.3f s in all", n->tot_prompt,
		 n->t_pre, n->t_pre > 0 ? n->tot_prompt / n->t_pre : 0,
		 n->tot_gen, n->t_dec, n->t_dec > 0 ? n->n_dec / n->t_dec : 0,
		 n->t_last - n->t_first);
	/* the mean accepted length: tokens a verification step gave, its
	 * kept drafts and the target's own token */
	if (spec != DS_SPEC_NONE)
		ds_warnx("spec: drafted %zu accepted %zu (%.3f) in %zu steps, "
			 "mean accepted length %.2f (%s)", n->spec_drafted,
			 n->spec_accepted, n->spec_drafted ?
			 (double)n->spec_accepted / n->spec_drafted : 0,
			 n->spec_steps, n->spec_steps ? 1 +
			 (double)n->spec_accepted / n->spec_steps : 0,
			 ds_spec_name(spec));
	if (n->mask_steps)
		ds_warnx("grammar: %zu masks in %.3f s (%.1f us a step, %.2f%% of "
			 "the run)", n->mask_steps, n->mask_s,
			 n->mask_s * 1e6 / (double)n->mask_steps,
			 n->t_last > n->t_first ? 100 * n->mask_s /
			 (n->t_last - n->t_first) : 0);
	ds_warnx("RSS %.1f MiB", ds_rss_mib());
}

void ds_describe_rank(const ds_dist *d, const ds_session *s, int end)
{
	ds_fwd_info fi;
	ds_dist_stats st;
	uint32_t e0, e1;

	ds_fwd_get_info(s->fwd, &fi);
	ds_dist_experts(d, &e0, &e1);
	ds_dist_local(d, &st);
	if (!end)
		ds_warnx("rank %d of %d (pid %d): experts %u-%u of %u, %.1f MiB "
			 "of the weights, RSS %.1f MiB", ds_dist_rank(d),
			 ds_dist_size(d), (int)getpid(), e0, e1 - 1,
			 s->m.hp.n_expert, mib(fi.share_bytes), ds_rss_mib());
	else
		ds_warnx("rank %d: %llu exchanges, %.2f MiB sent, %.2f MiB "
			 "received, %.3f s waiting in them; %llu batches; RSS "
			 "%.1f MiB (peak %.1f)", ds_dist_rank(d),
			 (unsigned long long)st.exchanges, mib(st.sent),
			 mib(st.recv), st.wait_s, (unsigned long long)st.batches,
			 ds_rss_mib(), ds_rss_peak_mib());
}

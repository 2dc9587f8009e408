/*
 * budget.h - how far a fast forward pass may land from the reference
 * (model/ref.h), per weight type: the error budgets of test_ref.c (every
 * fast path against the reference) and test_forward.c (the fastest
 * kernels against the scalar ones, which round the same way).
 *
 * Units: the reference logits' root mean square (about 1 in the test
 * models, their largest about 4).  `max` bounds the largest |fast -
 * reference| of each row (a position's logits), `mean` the mean |fast -
 * reference| over the rows within max.
 *
 * Where the numbers come from.  The reference keeps every activation in
 * f32; a fast path rounds each product's input as its weight type's
 * kernels need (kernels.h), and that rounding is all that separates them:
 *   f32, f16  nothing: the same products, summed in another order (the
 *             reference sums in double, the kernels in f32)
 *   bf16      rounded to bf16: at most 2^-8 relative per value
 *   q8, q4    rounded to int8 blocks of 32: at most 1/254 of the block's
 *             largest per value, about 3.5 times bf16's on average.  The
 *             weights are no error (the reference dequantizes exactly
 *             what is stored), so q4 and q8 measure alike.
 * Measured with test_ref (DS_TEST_VERBOSE=1 prints every path) over 30
 * seeds on the 4 ISAs: f32 and f16 in every model, the others in the
 * dense ones (no routing to flip):
 *             largest row max   largest mean of a sequence
 *   f32, f16  2.2e-6            below 4.7e-7
 *   bf16      0.022             0.0029
 *   q8, q4    0.068             0.011
 * The budgets are those with a margin of about 2 (1.8 for q8/q4's max).
 * A bug lands far outside: a dropped YaRN mscale, a skipped shared expert
 * or the V3 router bias left out moves the golden cases' rows by 1.6 to
 * 4.5 times the logits' rms (docs/reference.md lists what was tried).
 *
 * MoE routing.  A token whose router scores nearly tie may pick another
 * expert under the rounding, which moves its row by O(1), and the rows
 * after it a little (they attend to it).  So with bf16, q8 or q4 (flips
 * set) a MoE model may have BUDGET_FLIP_SHARE of a sequence's rows past
 * max, and a draw of tokens where even that fails (0.6% of the cases
 * measured) is replaced by another, up to BUDGET_DRAWS: a bug fails every
 * draw, a near tie is a property of the draw.
 */
#ifndef DS_BUDGET_H
#define DS_BUDGET_H

#include <string.h>

typedef struct ds_budget {
	const char *name;
	double max;        /* a row's largest deviation, / the logits' rms */
	double mean;       /* mean deviation of the rows within max, / rms */
	int flips;         /* activations rounded: a router's near tie may flip */
} ds_budget;

static const ds_budget BUDGET_F32 = { "f32", 1e-5, 2e-6, 0 };
static const ds_budget BUDGET_F16 = { "f16", 1e-5, 2e-6, 0 };
static const ds_budget BUDGET_BF16 = { "bf16", 0.04, 0.006, 1 };
static const ds_budget BUDGET_Q8 = { "q8", 0.12, 0.02, 1 };
static const ds_budget BUDGET_Q4 = { "q4", 0.12, 0.02, 1 };

#define BUDGET_FLIP_SHARE 0.1   /* of a sequence's rows */
#define BUDGET_DRAWS 3          /* draws of tokens before a MoE case fails */

/* The reference against PyTorch's float64 logits (testdata/golden): both
 * carry f32 values, ours summed in double; a float32 run of the PyTorch
 * reference lands within 1e-5 of its float64 (the cases' stats.json),
 * ours within 2.4e-6 (measured, every case). */
static const ds_budget BUDGET_TORCH = { "torch", 1e-5, 1e-6, 0 };

/* The budget of a weight type named as ds_ttype_parse reads it, or NULL. */
static inline const ds_budget *ds_budget_of(const char *type)
{
	return strcmp(type, "f32") == 0 ? &BUDGET_F32 :
	       strcmp(type, "f16") == 0 ? &BUDGET_F16 :
	       strcmp(type, "bf16") == 0 ? &BUDGET_BF16 :
	       strncmp(type, "q8", 2) == 0 ? &BUDGET_Q8 :
	       strncmp(type, "q4", 2) == 0 ? &BUDGET_Q4 : NULL;
}

#endif

/* ps_metrics_eval: exact evaluation of a click model: ROC AUC, logloss, accuracy.
 *
 * The accumulator keeps every (score, label) pair, so AUC is exact (no histogram): sort by
 * score, tied scores get their average rank (Mann-Whitney U), which equals the trapezoidal
 * ROC area scikit-learn's roc_auc_score computes. Sums are in double. Logloss clips p to
 * [eps, 1 - eps] (default eps 1e-7, about float's epsilon, since scores are floats);
 * accuracy thresholds at p >= 0.5 -> 1.
 *
 * Across ranks: ps_eval_merge appends another accumulator; ps_eval_allgather gathers every
 * rank's pairs to every rank through any allreduce-sum of floats (e.g. ps_coll_allreduce_sum):
 * each rank writes its pairs at its own offset of a zero buffer, so the sum is an exact
 * concatenation (x + 0 == x), in rank order, identical on every rank. */
#ifndef PS_METRICS_EVAL_H
#define PS_METRICS_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "ps_status.h"

typedef struct ps_eval ps_eval;

typedef struct ps_eval_result {
  uint64_t n, positives;
  double auc;      /* NaN when only one class is present */
  double logloss;  /* mean, natural log */
  double accuracy; /* at threshold 0.5 */
  double mean_score, ctr;
} ps_eval_result;

ps_status ps_eval_create(ps_eval **out);
void ps_eval_destroy(ps_eval **e);
/* Adds n predictions: probabilities p[i] in [0, 1] and labels y[i] (0 or 1, as float). */
ps_status ps_eval_add(ps_eval *e, const float *p, const float *y, size_t n);
ps_status ps_eval_merge(ps_eval *dst, const ps_eval *src);
uint64_t ps_eval_count(const ps_eval *e);
/* Computes the metrics (sorts a copy; the accumulator is unchanged). */
ps_status ps_eval_compute(const ps_eval *e, ps_eval_result *out);

/* Any in-place float allreduce-sum across the ranks. */
typedef ps_status (*ps_eval_allreduce_fn)(void *ctx, float *buf, size_t n);
/* Replaces e's pairs by all ranks' pairs (rank order). Collective: every rank calls it. */
ps_status ps_eval_allgather(ps_eval *e, ps_eval_allreduce_fn allreduce, void *ctx, int rank,
                            int world);

/* Stand-alone helpers on arrays (the same definitions). */
double ps_eval_auc(const float *p, const float *y, size_t n);
double ps_eval_logloss(const float *p, const float *y, size_t n, double eps);

#endif

/* ps_bench_present_int.h: how ps-bench presents a sweep — the knee rule and the plot — over
 * plain per-point figures (numbers only: no histograms, no client, no JSON), so that both can
 * be checked on made-up points whose knee and fold-back are known (tests/pslat/test_present.c).
 *
 * The plot's x axis is the OFFERED rate (the open loop's schedule), never the achieved one: an
 * overloaded point achieves less than it was offered, so on an achieved-rate axis it folds back
 * on top of the lighter points and the curve turns into a loop. The achieved rate is drawn on
 * a second axis instead, where the fold shows as the curve leaving the diagonal. Latencies are
 * drawn in milliseconds (log scale). */
#ifndef PS_BENCH_PRESENT_INT_H
#define PS_BENCH_PRESENT_INT_H

#include <stdbool.h>
#include <stdio.h>

/* The latency figures of a point, in this order (PS_BENCH_FIG_NAMES spells them). */
enum {
  PS_BENCH_FIG_P50,
  PS_BENCH_FIG_P90,
  PS_BENCH_FIG_P99,
  PS_BENCH_FIG_P999,
  PS_BENCH_FIG_P9999,
  PS_BENCH_FIG_MAX,
  PS_BENCH_FIG_N
};
enum { PS_BENCH_FIG_PULL, PS_BENCH_FIG_PUSH, PS_BENCH_FIG_OPS };

/* One point, as the knee and the plot see it. Latencies in microseconds; < 0: none. */
typedef struct ps_bench_fig {
  double offered;  /* requests/s the schedule asked for */
  double achieved; /* requests/s measured (replies over the measured window) */
  bool failed;     /* any error or timeout */
  double lat_us[PS_BENCH_FIG_N];
  double op_p50_us[PS_BENCH_FIG_OPS], op_p99_us[PS_BENCH_FIG_OPS]; /* per op; < 0: not run */
} ps_bench_fig;

/* The knee rule: a point is sustained when it achieved at least this fraction of its offered
 * rate with no error or timeout; its tail is acceptable when its p99 is at most the bound (by
 * default this factor times the p99 of the lightest offered point). */
#define PS_BENCH_KNEE_MIN_ACHIEVED 0.95
#define PS_BENCH_KNEE_P99_FACTOR 5.0

typedef struct ps_bench_knee {
  int index;           /* the knee's point in the caller's array; -1: no rate passed */
  int half;            /* the point whose offered rate is nearest half the knee's; -1 */
  double p99_bound_us; /* the bound applied */
} ps_bench_knee;

/* The knee of n points (any order): going up in offered rate, the last point before the first
 * one that is not sustained or whose p99 exceeds the bound. Stopping at the first failure
 * keeps a lucky point above a failed one from counting. p99_bound_us > 0 is an absolute bound
 * (--knee-p99-ms); <= 0 means PS_BENCH_KNEE_P99_FACTOR x the lightest point's p99. */
void ps_bench_knee_find(const ps_bench_fig *f, int n, double p99_bound_us, ps_bench_knee *k);

/* Writes a complete gnuplot script to g: terminal (SVG when out ends in .svg, else PNG),
 * title, the data inline (one row per point in offered-rate order; a '#' header line names the
 * columns: offered_rate achieved_rate p50_ms p90_ms p99_ms p999_ms p9999_ms max_ms pull_p50_ms
 * pull_p99_ms push_p50_ms push_p99_ms; NaN for a figure that does not exist), latency (ms, log)
 * against the offered rate, the achieved rate on the second axis, the knee marked by a
 * vertical line and its p99 bound by a horizontal one, and per-op p50/p99 when `mixed`. */
void ps_bench_plot_script(FILE *g, const char *out, const char *title, const ps_bench_fig *f,
                          int n, const ps_bench_knee *k, bool mixed);

#endif

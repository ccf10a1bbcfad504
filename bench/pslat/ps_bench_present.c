/* ps_bench_present: the knee of a sweep and the gnuplot script of its plot, over plain
 * per-point figures (see ps_bench_present_int.h for why the x axis is the offered rate).
 *
 * The plot is a self-contained gnuplot script with its data inline (a datablock): ps-bench
 * keeps it beside the image (PLOT.gp), so the figure can be re-rendered or restyled without
 * rerunning the load, and a test can read exactly the numbers the plot was drawn from. */

#include <math.h>
#include <string.h>
#include <strings.h>

#include "ps_bench_present_int.h"

/* Indices of f sorted by offered rate (insertion sort: a sweep has at most a few dozen). */
static void by_offered(const ps_bench_fig *f, int n, int *ord) {
  for (int i = 0; i < n; i++) ord[i] = i;
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && f[ord[j]].offered < f[ord[j - 1]].offered; j--) {
      int t = ord[j];
      ord[j] = ord[j - 1];
      ord[j - 1] = t;
    }
}

void ps_bench_knee_find(const ps_bench_fig *f, int n, double p99_bound_us, ps_bench_knee *k) {
  k->index = k->half = -1;
  k->p99_bound_us = p99_bound_us;
  if (n <= 0) return;
  int ord[n];
  by_offered(f, n, ord);
  if (!(p99_bound_us > 0))
    k->p99_bound_us = PS_BENCH_KNEE_P99_FACTOR * f[ord[0]].lat_us[PS_BENCH_FIG_P99];
  for (int i = 0; i < n; i++) {
    const ps_bench_fig *p = &f[ord[i]];
    bool sustained = !p->failed && p->achieved >= PS_BENCH_KNEE_MIN_ACHIEVED * p->offered;
    if (!sustained || p->lat_us[PS_BENCH_FIG_P99] > k->p99_bound_us) break;
    k->index = ord[i];
  }
  if (k->index < 0) return;
  double want = f[k->index].offered / 2;
  for (int i = 0; i < n; i++) /* in offered order, so a tie goes to the lighter point */
    if (k->half < 0 || fabs(f[ord[i]].offered - want) < fabs(f[k->half].offered - want))
      k->half = ord[i];
}

/* A gnuplot single-quoted string: a quote inside is doubled. */
static void quoted(FILE *g, const char *s) {
  fputc('\'', g);
  for (; *s; s++) {
    if (*s == '\'') fputc('\'', g);
    fputc(*s, g);
  }
  fputc('\'', g);
}

/* A latency in ms for a log axis: NaN (gnuplot: missing) when there is none. */
static void ms(FILE *g, double us) {
  if (us > 0) fprintf(g, " %.4f", us / 1e3);
  else fprintf(g, " NaN");
}

void ps_bench_plot_script(FILE *g, const char *out, const char *title, const ps_bench_fig *f,
                          int n, const ps_bench_knee *k, bool mixed) {
  size_t L = strlen(out);
  bool svg = L >= 4 && strcasecmp(out + L - 4, ".svg") == 0;
  fprintf(g, "# ps-bench plot: latency (ms) against the OFFERED rate; rerun with gnuplot.\n");
  fprintf(g, "set terminal %s size 1000,650\nset output ", svg ? "svg" : "png");
  quoted(g, out);
  fprintf(g, "\nset title ");
  quoted(g, title);
  fprintf(g, " noenhanced\nset datafile missing 'NaN'\n$d << EOD\n");
  fprintf(g, "# offered_rate achieved_rate p50_ms p90_ms p99_ms p999_ms p9999_ms max_ms "
             "pull_p50_ms pull_p99_ms push_p50_ms push_p99_ms\n");
  int ord[n > 0 ? n : 1];
  by_offered(f, n, ord);
  for (int i = 0; i < n; i++) {
    const ps_bench_fig *p = &f[ord[i]];
    fprintf(g, "%.3f %.3f", p->offered, p->achieved);
    for (int q = 0; q < PS_BENCH_FIG_N; q++) ms(g, p->lat_us[q]);
    for (int o = 0; o < PS_BENCH_FIG_OPS; o++) {
      ms(g, p->op_p50_us[o]);
      ms(g, p->op_p99_us[o]);
    }
    fprintf(g, "\n");
  }
  fprintf(g, "EOD\n");
  fprintf(g, "set xlabel 'offered rate (requests/s)'\nset ylabel 'latency (ms, log scale)'\n"
             "set y2label 'achieved rate (requests/s)'\nset logscale y\nset ytics nomirror\n"
             "set y2tics\nset xrange [0:*]\nset y2range [0:*]\nset grid\nset key below horizontal\n");
  if (k && k->index >= 0) {
    double x = f[k->index].offered;
    fprintf(g, "set arrow from %.3f, graph 0 to %.3f, graph 1 nohead dt 2 lw 2 lc rgb 'red'\n",
            x, x);
    fprintf(g, "set label 'knee %.0f/s' at %.3f, graph 0.97 offset 0.5,0 tc rgb 'red'\n", x, x);
  }
  static const char *const name[PS_BENCH_FIG_N] = {"p50", "p90", "p99", "p99.9", "p99.99",
                                                   "max"};
  fprintf(g, "plot");
  for (int q = 0; q < PS_BENCH_FIG_N; q++)
    fprintf(g, "%s $d u 1:%d w lp t '%s'", q ? "," : "", 3 + q, name[q]);
  if (mixed)
    fprintf(g, ", $d u 1:9 w lp dt 3 t 'pull p50', $d u 1:10 w lp dt 3 t 'pull p99'"
               ", $d u 1:11 w lp dt 4 t 'push p50', $d u 1:12 w lp dt 4 t 'push p99'");
  if (k && k->p99_bound_us > 0)
    fprintf(g, ", %.4f w l dt 2 lc rgb 'red' t 'knee rule: p99 bound'", k->p99_bound_us / 1e3);
  fprintf(g, ", $d u 1:2 axes x1y2 w lp lc rgb 'black' t 'achieved rate (right axis)'"
             ", x axes x1y2 w l dt 3 lc rgb 'gray' t 'achieved = offered'\n");
}

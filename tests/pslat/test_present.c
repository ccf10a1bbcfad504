/* ps-bench's presentation (bench/pslat/ps_bench_present.c) on made-up sweeps whose answers are
 * worked out by hand: the knee rule (>= 95% of the offered rate achieved, no error, p99 within
 * 5x the lightest point's or an absolute bound; stop at the first failure), the point nearest
 * half the knee, and the plot script's data block: x is the OFFERED rate even where the
 * achieved rate folds back, latencies in ms, per-op columns only for --op mixed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_bench_present_int.h"
#include "ps_test_main.h"

/* A point with p50 = p99 / 2 and the other figures between; no per-op figures. */
static ps_bench_fig pt(double offered, double achieved, double p99_ms, bool failed) {
  ps_bench_fig f = {.offered = offered, .achieved = achieved, .failed = failed};
  double p99 = p99_ms * 1e3;
  double v[PS_BENCH_FIG_N] = {p99 / 2, p99 * 0.8, p99, p99 * 1.2, p99 * 1.3, p99 * 1.5};
  memcpy(f.lat_us, v, sizeof v);
  for (int o = 0; o < PS_BENCH_FIG_OPS; o++) f.op_p50_us[o] = f.op_p99_us[o] = -1;
  return f;
}

/* A sweep given out of order: 800 is the knee (its p99 9.9 ms is within 5 x 2 ms); 1600 and
 * 3200 are overloaded (achieved folds back to 900 and 850). Returns its knee by the default
 * bound. */
static ps_bench_knee sweep(ps_bench_fig *f) {
  f[0] = pt(1600, 900, 480, false);
  f[1] = pt(200, 200, 2.5, false);
  f[2] = pt(800, 790, 9.9, false);
  f[3] = pt(100, 100, 2.0, false);
  f[4] = pt(3200, 850, 2600, false);
  f[5] = pt(400, 399, 3.0, false);
  ps_bench_knee k;
  ps_bench_knee_find(f, 6, 0, &k);
  return k;
}

static void test_knee_by_hand(void **st) {
  (void)st;
  ps_bench_fig f[6];
  ps_bench_knee k = sweep(f);
  assert_int_equal(k.index, 2); /* offered 800 */
  assert_int_equal(k.half, 5);  /* offered 400 = 800 / 2 */
  assert_true(fabs(k.p99_bound_us - 10000.0) < 1e-9);
}

static void test_knee_achieved_fraction(void **st) {
  (void)st;
  ps_bench_fig f[6];
  sweep(f);
  f[2].achieved = 760; /* exactly 95% of 800: still sustained */
  ps_bench_knee k;
  ps_bench_knee_find(f, 6, 0, &k);
  assert_int_equal(k.index, 2);
  f[2].achieved = 759.9; /* just under: the knee drops to 400, whose half is 200 */
  ps_bench_knee_find(f, 6, 0, &k);
  assert_int_equal(k.index, 5);
  assert_int_equal(k.half, 1);
}

static void test_knee_stops_at_first_failure(void **st) {
  (void)st;
  ps_bench_fig f[6];
  sweep(f);
  f[1].lat_us[PS_BENCH_FIG_P99] = 10001; /* 200/s: p99 over 5 x 2 ms */
  ps_bench_knee k;
  ps_bench_knee_find(f, 6, 0, &k);
  assert_int_equal(k.index, 3); /* 100/s: the lucky 400 and 800 above do not count */
  assert_int_equal(k.half, 3);  /* nearest 50/s is 100/s itself */
  sweep(f);
  f[5].failed = true; /* an error at 400/s */
  ps_bench_knee_find(f, 6, 0, &k);
  assert_int_equal(k.index, 1);
}

static void test_knee_absolute_bound(void **st) {
  (void)st;
  ps_bench_fig f[6];
  sweep(f);
  ps_bench_knee k;
  ps_bench_knee_find(f, 6, 2600, &k); /* --knee-p99-ms 2.6: 200/s (2.5 ms) passes, 400 not */
  assert_int_equal(k.index, 1);
  assert_true(k.p99_bound_us == 2600);
  ps_bench_knee_find(f, 6, 1.0, &k); /* below every p99: no knee */
  assert_int_equal(k.index, -1);
  assert_int_equal(k.half, -1);
}

static void test_knee_half_tie_goes_lighter(void **st) {
  (void)st;
  ps_bench_fig f[3] = {pt(300, 300, 1, false), pt(200, 200, 1, false), pt(100, 100, 1, false)};
  ps_bench_knee k;
  ps_bench_knee_find(f, 3, 0, &k);
  assert_int_equal(k.index, 0); /* 300 */
  assert_int_equal(k.half, 2);  /* 150 is as near 100 as 200: the lighter, 100 */
}

/* The rows of the script's data block, and its x label. */
static int data_rows(const char *script, double rows[][12], int max, char *xlabel, size_t cap) {
  int n = 0;
  bool in = false;
  xlabel[0] = '\0';
  for (const char *l = script; *l;) {
    const char *e = strchr(l, '\n');
    size_t len = e ? (size_t)(e - l) : strlen(l);
    if (!strncmp(l, "$d << EOD", 9)) in = true;
    else if (!strncmp(l, "EOD", 3)) in = false;
    else if (in && l[0] != '#' && n < max) {
      char *p = (char *)l;
      for (int c = 0; c < 12; c++) rows[n][c] = strtod(p, &p); /* "NaN" reads as NaN */
      n++;
    } else if (!strncmp(l, "set xlabel", 10))
      snprintf(xlabel, cap, "%.*s", (int)len, l);
    l = e ? e + 1 : l + len;
  }
  return n;
}

static char *script_of(const ps_bench_fig *f, int n, const ps_bench_knee *k, bool mixed) {
  char *buf = NULL;
  size_t len = 0;
  FILE *g = open_memstream(&buf, &len);
  assert_non_null(g);
  ps_bench_plot_script(g, "out.svg", "it's a test", f, n, k, mixed);
  fclose(g);
  return buf;
}

static void test_plot_x_is_offered(void **st) {
  (void)st;
  ps_bench_fig f[6];
  ps_bench_knee k = sweep(f);
  char *s = script_of(f, 6, &k, false);
  double rows[8][12];
  char xl[128];
  int n = data_rows(s, rows, 8, xl, sizeof xl);
  assert_int_equal(n, 6);
  /* x: the offered rates, ascending; the achieved ones (folding back to 900, 850) in column 2. */
  const double offered[6] = {100, 200, 400, 800, 1600, 3200};
  const double achieved[6] = {100, 200, 399, 790, 900, 850};
  const double p99_ms[6] = {2.0, 2.5, 3.0, 9.9, 480, 2600};
  for (int i = 0; i < 6; i++) {
    assert_true(rows[i][0] == offered[i]);
    assert_true(rows[i][1] == achieved[i]);
    assert_true(fabs(rows[i][2] - p99_ms[i] / 2) < 1e-4); /* p50, ms */
    assert_true(fabs(rows[i][4] - p99_ms[i]) < 1e-4);     /* p99, ms */
    for (int c = 8; c < 12; c++) assert_true(isnan(rows[i][c])); /* not mixed */
  }
  assert_non_null(strstr(xl, "offered rate"));
  assert_non_null(strstr(s, "set ylabel 'latency (ms"));
  assert_non_null(strstr(s, "set arrow from 800.000, graph 0 to 800.000, graph 1")); /* the knee */
  assert_non_null(strstr(s, "set title 'it''s a test'"));                          /* quoted */
  assert_null(strstr(s, "pull p99"));
  free(s);
}

static void test_plot_mixed_columns(void **st) {
  (void)st;
  ps_bench_fig f[2] = {pt(100, 100, 2, false), pt(50, 50, 1, false)};
  f[0].op_p50_us[0] = 900, f[0].op_p99_us[0] = 1900, f[0].op_p50_us[1] = 1100, f[0].op_p99_us[1] = 2100;
  f[1].op_p50_us[0] = 400, f[1].op_p99_us[0] = 950, f[1].op_p50_us[1] = 600, f[1].op_p99_us[1] = 1050;
  char *s = script_of(f, 2, NULL, true);
  double rows[4][12];
  char xl[128];
  assert_int_equal(data_rows(s, rows, 4, xl, sizeof xl), 2);
  const double want[2][4] = {{0.4, 0.95, 0.6, 1.05}, {0.9, 1.9, 1.1, 2.1}};
  for (int i = 0; i < 2; i++)
    for (int c = 0; c < 4; c++) assert_true(fabs(rows[i][8 + c] - want[i][c]) < 1e-4);
  assert_non_null(strstr(s, "'pull p99'"));
  assert_non_null(strstr(s, "'push p99'"));
  assert_null(strstr(s, "set arrow")); /* no knee given */
  free(s);
}

PS_TEST_MAIN("pslat_present", NULL, NULL, cmocka_unit_test(test_knee_by_hand),
             cmocka_unit_test(test_knee_achieved_fraction),
             cmocka_unit_test(test_knee_stops_at_first_failure),
             cmocka_unit_test(test_knee_absolute_bound),
             cmocka_unit_test(test_knee_half_tie_goes_lighter),
             cmocka_unit_test(test_plot_x_is_offered), cmocka_unit_test(test_plot_mixed_columns))

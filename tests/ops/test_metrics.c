/* ps_metrics: exact rendering of counters, gauges and escapes against a golden text,
 * histogram buckets against exact counts of the raw values, name rules, callbacks, process
 * metrics, concurrency (exact totals after racing updates and scrapes), and the rendered text
 * through the strict checker and, where installed, Prometheus's own `promtool check metrics`. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "prom_check.h"
#include "ps_hist.h"
#include "ps_metrics.h"

static char *render(ps_metrics *m) {
  char *text = NULL;
  size_t len = 0;
  assert_int_equal(ps_metrics_render(m, &text, &len), PS_OK);
  assert_non_null(text);
  assert_int_equal(strlen(text), len);
  char err[400];
  if (!prom_check(text, err, sizeof err)) fail_msg("checker: %s\n---\n%s", err, text);
  return text;
}

static void test_golden_counters_gauges(void **st) {
  (void)st;
  ps_metrics *m = NULL;
  assert_int_equal(ps_metrics_create(&m), PS_OK);
  ps_metric *req = NULL, *g = NULL;
  const char *labels[] = {"op", "code"};
  assert_int_equal(ps_metrics_counter(m, "ember_requests_total", "Requests.\nBy op \\ code.",
                                      labels, 2, &req), PS_OK);
  ps_series *a = NULL, *b = NULL, *c = NULL;
  assert_int_equal(ps_metric_series(req, (const char *[]){"pull", "ok"}, &a), PS_OK);
  assert_int_equal(ps_metric_series(req, (const char *[]){"we\"ird\\op\nx", "ok"}, &b), PS_OK);
  assert_int_equal(ps_metric_series(req, (const char *[]){"pull", "ok"}, &c), PS_OK);
  assert_ptr_equal(a, c); /* same labels, same series */
  ps_counter_inc(a);
  ps_counter_add(a, 41);
  ps_counter_add_f(b, 0.5);
  ps_counter_add_f(b, -3);      /* ignored: counters never decrease */
  ps_counter_add_f(b, NAN);     /* ignored */
  assert_int_equal(ps_metrics_gauge(m, "ember_queue_depth", "Queued requests.", NULL, 0, &g), PS_OK);
  ps_series *gs = ps_metric_single(g);
  assert_non_null(gs);
  ps_gauge_set(gs, 10);
  ps_gauge_add(gs, -12.25);
  assert_true(ps_series_value(a) == 42);
  assert_true(ps_series_value(gs) == -2.25);
  ps_gauge_set(gs, -2.25);
  char *text = render(m);
  const char *want =
      "# HELP ember_requests_total Requests.\\nBy op \\\\ code.\n"
      "# TYPE ember_requests_total counter\n"
      "ember_requests_total{op=\"pull\",code=\"ok\"} 42\n"
      "ember_requests_total{op=\"we\\\"ird\\\\op\\nx\",code=\"ok\"} 0.5\n"
      "# HELP ember_queue_depth Queued requests.\n"
      "# TYPE ember_queue_depth gauge\n"
      "ember_queue_depth -2.25\n";
  assert_string_equal(text, want);
  free(text);
  ps_gauge_set(gs, INFINITY);
  text = render(m);
  assert_non_null(strstr(text, "ember_queue_depth +Inf\n"));
  free(text);
  ps_metrics_destroy(&m);
  assert_null(m);
}

static void test_names_and_conflicts(void **st) {
  (void)st;
  ps_metrics *m = NULL;
  assert_int_equal(ps_metrics_create(&m), PS_OK);
  ps_metric *f = NULL, *f2 = NULL;
  const char *one[] = {"op"};
  assert_int_equal(ps_metrics_counter(m, "9bad_total", "", NULL, 0, &f), PS_ERR_INVALID);
  assert_null(f);
  assert_int_equal(ps_metrics_counter(m, "bad-name_total", "", NULL, 0, &f), PS_ERR_INVALID);
  assert_int_equal(ps_metrics_counter(m, "ember_requests", "", NULL, 0, &f), PS_ERR_INVALID);
  assert_int_equal(ps_metrics_gauge(m, "ember_rows_total", "", NULL, 0, &f), PS_ERR_INVALID);
  assert_int_equal(ps_metrics_gauge(m, "ember_x", "", (const char *[]){"__x"}, 1, &f), PS_ERR_INVALID);
  assert_int_equal(ps_metrics_gauge(m, "ember_x", "", (const char *[]){"a-b"}, 1, &f), PS_ERR_INVALID);
  assert_int_equal(ps_metrics_gauge(m, "ember_x", "", (const char *[]){"a", "a"}, 2, &f), PS_ERR_INVALID);
  assert_int_equal(ps_metrics_histogram(m, "ember_h_seconds", "", (const char *[]){"le"}, 1, NULL, 0, &f),
                   PS_ERR_INVALID);
  uint64_t bad_edges[] = {10, 10};
  assert_int_equal(ps_metrics_histogram(m, "ember_h_seconds", "", NULL, 0, bad_edges, 2, &f), PS_ERR_INVALID);
  assert_int_equal(ps_metrics_counter(m, "ember_ok_total", "x", one, 1, &f), PS_OK);
  assert_int_equal(ps_metrics_counter(m, "ember_ok_total", "x", one, 1, &f2), PS_OK);
  assert_ptr_equal(f, f2); /* idempotent */
  assert_int_equal(ps_metrics_counter(m, "ember_ok_total", "x", NULL, 0, &f2), PS_ERR_CONFLICT);
  assert_int_equal(ps_metrics_gauge(m, "ember_ok_total", "x", one, 1, &f2), PS_ERR_INVALID);
  assert_int_equal(ps_metrics_counter(m, "ember_ok_total", "x", (const char *[]){"code"}, 1, &f2),
                   PS_ERR_CONFLICT);
  ps_series *s = NULL;
  assert_int_equal(ps_metric_series(f, NULL, &s), PS_ERR_INVALID);
  assert_int_equal(ps_metric_series(f, (const char *[]){NULL}, &s), PS_ERR_INVALID);
  assert_null(ps_metric_single(f)); /* has labels */
  /* the cardinality guard */
  char v[16];
  for (int i = 0; i < PS_METRICS_MAX_SERIES; i++) {
    snprintf(v, sizeof v, "%d", i);
    assert_int_equal(ps_metric_series(f, (const char *[]){v}, &s), PS_OK);
  }
  assert_int_equal(ps_metric_series(f, (const char *[]){"one-more"}, &s), PS_ERR_NOMEM);
  assert_int_equal(ps_metric_series(f, (const char *[]){"7"}, &s), PS_OK); /* existing: fine */
  /* updates of the wrong kind are ignored, not crashes */
  ps_gauge_set(s, 5);
  ps_hist_series_observe_ns(s, 5);
  ps_counter_inc(NULL);
  assert_true(ps_series_value(s) == 0);
  ps_metrics_destroy(&m);
}

static void test_format_seconds(void **st) {
  (void)st;
  char b[32];
  assert_string_equal(ps_metrics_format_seconds(0, b, sizeof b), "0");
  assert_string_equal(ps_metrics_format_seconds(1000, b, sizeof b), "0.000001");
  assert_string_equal(ps_metrics_format_seconds(2500000, b, sizeof b), "0.0025");
  assert_string_equal(ps_metrics_format_seconds(1000000000, b, sizeof b), "1");
  assert_string_equal(ps_metrics_format_seconds(12345678901ull, b, sizeof b), "12.345678901");
  /* edges are strictly increasing and in range */
  for (size_t i = 1; i < ps_metrics_default_nedges; i++)
    assert_true(ps_metrics_default_edges_ns[i] > ps_metrics_default_edges_ns[i - 1]);
  for (size_t i = 1; i < ps_metrics_fine_nedges; i++)
    assert_true(ps_metrics_fine_edges_ns[i] > ps_metrics_fine_edges_ns[i - 1]);
  assert_int_equal(ps_metrics_default_nedges, 22);
  assert_int_equal(ps_metrics_fine_nedges, 71);
  assert_true(ps_metrics_fine_edges_ns[0] == 1000 && ps_metrics_fine_edges_ns[70] == 10000000000ull);
}

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 11;
}

/* The rendered buckets against exact counts of the raw values: exact <= rendered <= exact
 * count up to the edge widened by ps_hist's bucket width (1/64), and _count/_sum. */
static void test_histogram_vs_exact(void **st) {
  (void)st;
  ps_metrics *m = NULL;
  assert_int_equal(ps_metrics_create(&m), PS_OK);
  ps_metric *f = NULL;
  assert_int_equal(ps_metrics_histogram(m, "ember_request_duration_seconds", "Latency.",
                                        (const char *[]){"op"}, 1, ps_metrics_fine_edges_ns,
                                        ps_metrics_fine_nedges, &f), PS_OK);
  ps_series *s = NULL;
  assert_int_equal(ps_metric_series(f, (const char *[]){"pull"}, &s), PS_OK);
  enum { N = 20000 };
  static uint64_t vals[N];
  uint64_t seed = 42;
  long double sum = 0;
  ps_hist *local = ps_hist_create();
  for (int i = 0; i < N; i++) {
    /* log-uniform from 100 ns to ~20 s, so every edge (and both tails) is exercised */
    double e = 2.0 + 8.3 * (double)(lcg(&seed) % 1000000) / 1e6;
    vals[i] = (uint64_t)pow(10.0, e);
    sum += vals[i];
    if (i % 2) ps_hist_series_observe_ns(s, vals[i]);
    else ps_hist_record(local, vals[i]);
  }
  ps_hist_series_merge(s, local); /* a per-thread histogram flushed in */
  ps_hist_destroy(&local);
  char *text = render(m);
  ps_hist *ref = ps_hist_create();
  for (int i = 0; i < N; i++) ps_hist_record(ref, vals[i]);
  for (size_t k = 0; k < ps_metrics_fine_nedges; k++) {
    uint64_t e = ps_metrics_fine_edges_ns[k];
    uint64_t lo = 0, hi = 0;
    for (int i = 0; i < N; i++) {
      if (vals[i] <= e) lo++;
      if (vals[i] <= e + e / 64 + 1) hi++;
    }
    char le[32], labels[64];
    snprintf(labels, sizeof labels, "op=\"pull\",le=\"%s\"", ps_metrics_format_seconds(e, le, sizeof le));
    double got = -1;
    assert_true(prom_value(text, "ember_request_duration_seconds_bucket", labels, &got));
    /* the renderer's merge pass must agree with ps_hist_count_le exactly */
    assert_true(got == (double)ps_hist_count_le(ref, e));
    if (!(got >= (double)lo && got <= (double)hi))
      fail_msg("edge %s: rendered %.0f, exact %llu..%llu", le, got, (unsigned long long)lo,
               (unsigned long long)hi);
  }
  ps_hist_destroy(&ref);
  double cnt = 0, inf = 0, rsum = 0;
  assert_true(prom_value(text, "ember_request_duration_seconds_count", "op=\"pull\"", &cnt));
  assert_true(prom_value(text, "ember_request_duration_seconds_bucket", "op=\"pull\",le=\"+Inf\"", &inf));
  assert_true(prom_value(text, "ember_request_duration_seconds_sum", "op=\"pull\"", &rsum));
  assert_true(cnt == N && inf == N);
  double exact_s = (double)sum * 1e-9;
  assert_true(fabs(rsum - exact_s) <= 0.01 * exact_s);
  free(text);
  /* an empty series renders zeros, still valid */
  ps_series *e = NULL;
  assert_int_equal(ps_metric_series(f, (const char *[]){"push"}, &e), PS_OK);
  text = render(m);
  double z = -1;
  assert_true(prom_value(text, "ember_request_duration_seconds_count", "op=\"push\"", &z) && z == 0);
  assert_true(prom_value(text, "ember_request_duration_seconds_sum", "op=\"push\"", &z) && z == 0);
  free(text);
  ps_metrics_destroy(&m);
}

typedef struct cb_state {
  int calls;
  ps_hist *h;
} cb_state;

static void collect(ps_metrics_sink *sink, void *ud) {
  cb_state *c = ud;
  c->calls++;
  ps_metrics_emit(sink, (const char *[]){"0"}, 3);
  ps_metrics_emit(sink, (const char *[]){"1"}, 4);
  ps_metrics_emit_hist(sink, (const char *[]){"x"}, c->h); /* wrong family type: ignored */
}

static void collect_hist(ps_metrics_sink *sink, void *ud) {
  cb_state *c = ud;
  ps_metrics_emit_hist(sink, (const char *[]){"0"}, c->h);
  ps_metrics_emit(sink, (const char *[]){"0"}, 1); /* wrong type: ignored */
}

static double seven(void *ud) { return *(double *)ud; }

static void test_callbacks_and_process(void **st) {
  (void)st;
  ps_metrics *m = NULL;
  assert_int_equal(ps_metrics_create(&m), PS_OK);
  cb_state cs = {0, ps_hist_create()};
  ps_hist_record(cs.h, 1500);     /* 1.5 us */
  ps_hist_record(cs.h, 3000000);  /* 3 ms */
  ps_metric *q = NULL, *h = NULL;
  assert_int_equal(ps_metrics_gauge(m, "ember_server_queue_depth", "Depth.", (const char *[]){"partition"}, 1, &q), PS_OK);
  assert_int_equal(ps_metric_set_collect(q, collect, &cs), PS_OK);
  assert_int_equal(ps_metrics_histogram(m, "ember_op_seconds", "Op.", (const char *[]){"partition"}, 1, NULL, 0, &h), PS_OK);
  assert_int_equal(ps_metric_set_collect(h, collect_hist, &cs), PS_OK);
  double v = 7;
  assert_int_equal(ps_metrics_gauge_fn(m, "ember_rows", "Rows.", seven, &v), PS_OK);
  assert_int_equal(ps_metrics_counter_fn(m, "ember_evictions_total", "Evictions.", seven, &v), PS_OK);
  assert_int_equal(ps_metrics_gauge_fn(m, "ember_rows2", "Rows.", NULL, NULL), PS_ERR_INVALID);
  assert_int_equal(ps_metrics_add_process(m), PS_OK);
  assert_int_equal(ps_metrics_add_process(m), PS_OK); /* idempotent */
  char *text = render(m);
  assert_int_equal(cs.calls, 1);
  double x = 0;
  assert_true(prom_value(text, "ember_server_queue_depth", "partition=\"1\"", &x) && x == 4);
  assert_true(prom_value(text, "ember_rows", "", &x) && x == 7);
  assert_true(prom_value(text, "ember_evictions_total", "", &x) && x == 7);
  assert_true(prom_value(text, "ember_op_seconds_bucket", "partition=\"0\",le=\"0.000001\"", &x) && x == 0);
  assert_true(prom_value(text, "ember_op_seconds_bucket", "partition=\"0\",le=\"0.0000025\"", &x) && x == 1);
  assert_true(prom_value(text, "ember_op_seconds_bucket", "partition=\"0\",le=\"0.0025\"", &x) && x == 1);
  assert_true(prom_value(text, "ember_op_seconds_bucket", "partition=\"0\",le=\"0.005\"", &x) && x == 2);
  assert_null(strstr(text, "partition=\"x\""));
  /* process metrics: RSS (pages from /proc/self/statm times the page size) agrees with the
   * kernel's VmRSS in kB from /proc/self/status, read independently (within a factor, as the
   * two reads are moments apart; getrusage's peak is not a bound: the kernel syncs per-thread
   * RSS counters lazily) */
  double rss = 0, cpu = -1, thr = 0, fds = 0, start = 0;
  assert_true(prom_value(text, "process_resident_memory_bytes", "", &rss));
  FILE *st_f = fopen("/proc/self/status", "r");
  assert_non_null(st_f);
  char line[256];
  double vmrss_kb = 0;
  while (fgets(line, sizeof line, st_f))
    if (sscanf(line, "VmRSS: %lf kB", &vmrss_kb) == 1) break;
  fclose(st_f);
  assert_true(vmrss_kb > 0);
  assert_true(rss > 100000 && rss >= vmrss_kb * 1024 * 0.5 && rss <= vmrss_kb * 1024 * 2);
  assert_true(prom_value(text, "process_cpu_seconds_total", "", &cpu) && cpu >= 0);
  assert_true(prom_value(text, "process_threads", "", &thr) && thr >= 1);
  assert_true(prom_value(text, "process_open_fds", "", &fds) && fds >= 3);
  assert_true(prom_value(text, "process_start_time_seconds", "", &start));
  assert_true(start > 1.5e9 && start <= (double)time(NULL) + 1);
  free(text);
  ps_hist_destroy(&cs.h);
  ps_metrics_destroy(&m);
}

typedef struct race {
  ps_series *c, *g, *h;
  int n;
} race;

static void *updater(void *arg) {
  race *r = arg;
  for (int i = 0; i < r->n; i++) {
    ps_counter_inc(r->c);
    ps_gauge_add(r->g, 0.5);
    ps_hist_series_observe_ns(r->h, (uint64_t)(i % 1000) * 1000);
  }
  return NULL;
}

static void *scraper(void *arg) {
  ps_metrics *m = arg;
  for (int i = 0; i < 50; i++) {
    char *t = NULL;
    size_t n;
    if (ps_metrics_render(m, &t, &n) != PS_OK) return (void *)1;
    bool ok = prom_check(t, NULL, 0);
    free(t);
    if (!ok) return (void *)1;
  }
  return NULL;
}

static void test_concurrent_exact(void **st) {
  (void)st;
  ps_metrics *m = NULL;
  assert_int_equal(ps_metrics_create(&m), PS_OK);
  ps_metric *c, *g, *h;
  assert_int_equal(ps_metrics_counter(m, "ember_ops_total", "Ops.", NULL, 0, &c), PS_OK);
  assert_int_equal(ps_metrics_gauge(m, "ember_level", "Level.", NULL, 0, &g), PS_OK);
  assert_int_equal(ps_metrics_histogram(m, "ember_lat_seconds", "Lat.", NULL, 0, NULL, 0, &h), PS_OK);
  race r = {ps_metric_single(c), ps_metric_single(g), ps_metric_single(h), 50000};
  enum { T = 4 };
  pthread_t th[T], sc;
  for (int i = 0; i < T; i++) pthread_create(&th[i], NULL, updater, &r);
  pthread_create(&sc, NULL, scraper, m);
  for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
  void *bad = NULL;
  pthread_join(sc, &bad);
  assert_null(bad);
  char *text = render(m);
  double x = 0;
  assert_true(prom_value(text, "ember_ops_total", "", &x) && x == T * 50000.0);
  assert_true(prom_value(text, "ember_level", "", &x) && x == T * 50000.0 * 0.5);
  assert_true(prom_value(text, "ember_lat_seconds_count", "", &x) && x == T * 50000.0);
  /* values are 0..999 us in steps of 1 us, 50 of each per thread: exactly 4*50*101 are
   * <= 100 us. The ps_hist bucket holding 100000 ns is [99328, 100351] and no recorded value
   * lies in (100000, 100351], so the rendered bucket is exact. */
  assert_true(prom_value(text, "ember_lat_seconds_bucket", "le=\"0.0001\"", &x) && x == T * 50.0 * 101);
  free(text);
  ps_metrics_destroy(&m);
}

/* Prometheus's own parser and linter, where Debian's prometheus package is installed. */
static void test_promtool(void **st) {
  (void)st;
  const char *promtool = "/usr/bin/promtool";
  if (access(promtool, X_OK) != 0) {
    print_message("promtool not installed: checked by prom_check only\n");
    return;
  }
  ps_metrics *m = NULL;
  assert_int_equal(ps_metrics_create(&m), PS_OK);
  ps_metric *c, *g, *h;
  assert_int_equal(ps_metrics_counter(m, "ember_server_requests_total", "Requests by op.",
                                      (const char *[]){"op"}, 1, &c), PS_OK);
  ps_series *s;
  assert_int_equal(ps_metric_series(c, (const char *[]){"pull \"quoted\"\n\\"}, &s), PS_OK);
  ps_counter_add(s, 5);
  assert_int_equal(ps_metrics_gauge(m, "ember_server_hot_rows", "Rows in the hot tier.", NULL, 0, &g), PS_OK);
  ps_gauge_set(ps_metric_single(g), 12);
  assert_int_equal(ps_metrics_histogram(m, "ember_server_request_duration_seconds", "Latency.",
                                        (const char *[]){"op"}, 1, ps_metrics_fine_edges_ns,
                                        ps_metrics_fine_nedges, &h), PS_OK);
  assert_int_equal(ps_metric_series(h, (const char *[]){"pull"}, &s), PS_OK);
  for (uint64_t v = 1; v < 100000000; v = v * 3 + 1) ps_hist_series_observe_ns(s, v);
  assert_int_equal(ps_metrics_add_process(m), PS_OK);
  char *text = render(m);
  char path[] = "/tmp/ember-metrics-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "%s check metrics < %s 2>&1", promtool, path);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char out[2048] = "";
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = '\0';
  int status = pclose(p);
  unlink(path);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail_msg("promtool: %s\n---\n%s", out, text);
  free(text);
  ps_metrics_destroy(&m);
}

/* The checker itself must reject what it exists to catch. */
static void test_checker_rejects(void **st) {
  (void)st;
  static const char *const bad[] = {
      "x 1\n",                                                      /* no TYPE */
      "# TYPE x gauge\nx{a=\"1\",} 1\n",                             /* trailing comma */
      "# TYPE x gauge\nx{a=\"\\q\"} 1\n",                            /* bad escape */
      "# TYPE x gauge\nx 1\nx 2\n",                                  /* duplicate */
      "# TYPE x gauge\nx one\n",                                     /* bad value */
      "# TYPE x_total counter\nx_total -1\n",                        /* negative counter */
      "# TYPE x counter\nx 1\n",                                     /* counter without _total */
      "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
      "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",   /* no +Inf */
      "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n", /* count mismatch */
      "# TYPE a gauge\n# TYPE b gauge\na 1\nb 1\na{x=\"1\"} 2\n",     /* not contiguous */
      "# TYPE x gauge\nx 1",                                         /* no final newline */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char err[300];
    if (prom_check(bad[i], err, sizeof err)) fail_msg("accepted bad input %zu: %s", i, bad[i]);
  }
  assert_true(prom_check("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\n"
                         "h_sum 0.5\nh_count 1\n", NULL, 0));
}

PS_TEST_MAIN("metrics", NULL, NULL,
    cmocka_unit_test(test_checker_rejects),
    cmocka_unit_test(test_golden_counters_gauges),
    cmocka_unit_test(test_names_and_conflicts),
    cmocka_unit_test(test_format_seconds),
    cmocka_unit_test(test_histogram_vs_exact),
    cmocka_unit_test(test_callbacks_and_process),
    cmocka_unit_test(test_concurrent_exact),
    cmocka_unit_test(test_promtool))

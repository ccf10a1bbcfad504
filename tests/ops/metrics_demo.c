/* metrics_demo: a tiny process that serves ps_metrics over ps_http with a known workload, so
 * that tests can check what a real Prometheus server makes of our endpoint.
 *
 * It "serves" --rate requests per second on a paced loop (op="pull"), recording for each a
 * latency taken in turn from a fixed cycle of 100 log-spaced values (50 us * 1.05^k), and one
 * push in ten (op="push"). So the expected rate and the exact p50/p99 of what was recorded
 * are known in advance; --print-expected prints them as JSON. SIGTERM/SIGINT stop it. */
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ps_cli.h"
#include "ps_hist.h"
#include "ps_http.h"
#include "ps_log.h"
#include "ps_metrics.h"
#include "ps_time.h"

static atomic_int g_stop;
static void on_signal(int sig) {
  (void)sig;
  atomic_store(&g_stop, 1);
}

static uint64_t cycle_ns(int k) { return (uint64_t)(50000.0 * pow(1.05, k)); }

/* The exact quantile q of the latency cycle (each value equally often). */
static double cycle_quantile_s(double q) {
  uint64_t v[100];
  for (int k = 0; k < 100; k++) v[k] = cycle_ns(k); /* already increasing */
  int idx = (int)ceil(q * 100) - 1;
  if (idx < 0) idx = 0;
  return (double)v[idx] * 1e-9;
}

static bool healthy(void *ud, char *reason, size_t n) {
  (void)ud;
  (void)reason;
  (void)n;
  return true;
}

int main(int argc, char **argv) {
  const char *bind = "127.0.0.1", *port_file = NULL;
  int port = 0;
  double rate = 1000;
  bool print_expected = false;
  int extra_ops = 0, bench_render = 0;
  const ps_cli_opt opts[] = {
      {"bind", 0, PS_CLI_STRING, &bind, "ADDR", "address to serve /metrics on", false, 0, 0},
      {"port", 0, PS_CLI_INT, &port, "P", "port (0 = ephemeral)", false, 0, 65535},
      {"port-file", 0, PS_CLI_STRING, &port_file, "FILE", "write the bound port here", false, 0, 0},
      {"rate", 0, PS_CLI_DOUBLE, &rate, "R", "synthetic pull requests per second", false, 1, 1e6},
      {"extra-ops", 0, PS_CLI_INT, &extra_ops, "N",
       "N more op label values with populated histograms (a server-sized scrape, for measuring its cost)",
       false, 0, 1000},
      {"bench-render", 0, PS_CLI_INT, &bench_render, "N",
       "render /metrics N times in-process, print the CPU time per render as JSON, and exit", false, 0, 1000000},
      {"print-expected", 0, PS_CLI_FLAG, &print_expected, NULL, "print expected figures as JSON and exit", false, 0, 0},
  };
  const ps_cli cli = {"metrics_demo", "Serves synthetic Ember metrics with a known workload.", NULL,
                      opts, sizeof opts / sizeof opts[0]};
  int r = ps_cli_run(&cli, argc, argv, NULL);
  if (r >= 0) return r;
  if (print_expected) {
    printf("{\"rate\": %.17g, \"p50_s\": %.17g, \"p99_s\": %.17g}\n", rate, cycle_quantile_s(0.5),
           cycle_quantile_s(0.99));
    return 0;
  }
  ps_log_set_tag("metrics_demo");

  ps_metrics *m = NULL;
  ps_metric *req = NULL, *lat = NULL, *inflight = NULL;
  const char *op[] = {"op"};
  if (ps_metrics_create(&m) != PS_OK ||
      ps_metrics_counter(m, "ember_server_requests_total", "Requests received, by op.", op, 1, &req) != PS_OK ||
      ps_metrics_histogram(m, "ember_server_request_duration_seconds", "Time from receipt to reply, by op.",
                           op, 1, ps_metrics_fine_edges_ns, ps_metrics_fine_nedges, &lat) != PS_OK ||
      ps_metrics_gauge(m, "ember_server_queue_depth", "Requests waiting.", NULL, 0, &inflight) != PS_OK ||
      ps_metrics_add_process(m) != PS_OK) {
    fprintf(stderr, "metrics_demo: cannot build the registry\n");
    return 1;
  }
  ps_series *pull = NULL, *push = NULL, *pull_lat = NULL, *push_lat = NULL;
  ps_metric_series(req, (const char *[]){"pull"}, &pull);
  ps_metric_series(req, (const char *[]){"push"}, &push);
  ps_metric_series(lat, (const char *[]){"pull"}, &pull_lat);
  ps_metric_series(lat, (const char *[]){"push"}, &push_lat);
  ps_series *depth = ps_metric_single(inflight);
  for (int k = 0; k < extra_ops; k++) {
    char name[32];
    snprintf(name, sizeof name, "op%d", k);
    ps_series *c = NULL, *h = NULL;
    ps_metric_series(req, (const char *[]){name}, &c);
    ps_metric_series(lat, (const char *[]){name}, &h);
    ps_counter_add(c, 1000);
    for (uint64_t v = 1000; v < 20000000000ull; v += v / 8) ps_hist_series_observe_ns(h, v);
  }

  if (bench_render) {
    /* Thread CPU time, so that other load on the machine does not count. */
    struct timespec a, b;
    size_t bytes = 0, lines = 0;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    for (int k = 0; k < bench_render; k++) {
      char *text = NULL;
      if (ps_metrics_render(m, &text, &bytes) != PS_OK) return 1;
      if (k == 0)
        for (const char *p = text; *p; p++) lines += *p == '\n';
      free(text);
    }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    double us = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / 1e3 / bench_render;
    printf("{\"extra_ops\": %d, \"lines\": %zu, \"bytes\": %zu, \"renders\": %d, \"cpu_us_per_render\": %.1f}\n",
           extra_ops, lines, bytes, bench_render, us);
    ps_metrics_destroy(&m);
    return 0;
  }

  ps_http *http = NULL;
  ps_error err;
  ps_status st = ps_http_create(bind, port, m, healthy, NULL, &http, &err);
  if (st != PS_OK) {
    fprintf(stderr, "metrics_demo: %s\n", err.msg);
    return 1;
  }
  if (port_file) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", ps_http_port(http)) < 0 || fclose(f) != 0 || rename(tmp, port_file) != 0) {
      fprintf(stderr, "metrics_demo: cannot write %s\n", port_file);
      return 1;
    }
  }
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);

  /* Paced loop: the i-th request is due at t0 + i/rate; a late loop catches up (open loop). */
  uint64_t t0 = ps_now_ns(), i = 0;
  double period_ns = 1e9 / rate;
  while (!atomic_load(&g_stop)) {
    uint64_t due = t0 + (uint64_t)((double)i * period_ns);
    uint64_t now = ps_now_ns();
    if (due > now) {
      ps_sleep_ns(due - now < 2000000 ? due - now : 2000000);
      continue;
    }
    ps_counter_inc(pull);
    ps_hist_series_observe_ns(pull_lat, cycle_ns((int)(i % 100)));
    if (i % 10 == 0) {
      ps_counter_inc(push);
      ps_hist_series_observe_ns(push_lat, 2 * cycle_ns((int)(i % 100)));
    }
    ps_gauge_set(depth, (double)(i % 7));
    i++;
  }
  ps_http_destroy(&http);
  ps_metrics_destroy(&m);
  fprintf(stderr, "metrics_demo: %llu requests in %.2f s\n", (unsigned long long)i,
          (double)(ps_now_ns() - t0) * 1e-9);
  return 0;
}

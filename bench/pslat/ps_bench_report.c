/* ps_bench_report: what ps-bench prints and writes — the per-point table row and the "where
 * time went" breakdown (client queue, network, server queue, service), a sweep's
 * latency-throughput table and its knee, the --json document and the --plot (gnuplot, PNG or
 * SVG).
 *
 * The breakdown's network part is a difference of means (the mean round trip less the
 * server's mean time): a difference of percentiles is no percentile. */

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "ps_bench_int.h"

static double us(uint64_t ns) { return (double)ns / 1e3; }

static json_t *lat_json(const ps_hist *h) {
  return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "p50", us(ps_hist_percentile(h, 50)),
                   "p90", us(ps_hist_percentile(h, 90)), "p99", us(ps_hist_percentile(h, 99)),
                   "p999", us(ps_hist_percentile(h, 99.9)), "p9999",
                   us(ps_hist_percentile(h, 99.99)), "max", us(ps_hist_max(h)), "mean",
                   ps_hist_mean(h) / 1e3);
}

json_t *ps_bench_win_json(const ps_hist *h, double mean_us) {
  return json_pack("{s:f, s:f, s:f, s:f, s:f, s:I}", "p50", us(ps_hist_percentile(h, 50)), "p90",
                   us(ps_hist_percentile(h, 90)), "p99", us(ps_hist_percentile(h, 99)), "p999",
                   us(ps_hist_percentile(h, 99.9)), "mean", mean_us, "count",
                   (json_int_t)ps_hist_count(h));
}

json_t *ps_bench_result_json(const ps_bench_cfg *c, const ps_bench_result *r) {
  json_t *j = json_pack("{s:f, s:I, s:I, s:I, s:f, s:o}", "achieved_rate", r->achieved_rate,
                        "requests", (json_int_t)r->requests, "errors", (json_int_t)r->errors,
                        "timeouts", (json_int_t)r->timeouts, "keys_per_s", r->keys_per_s,
                        "latency_us", lat_json(r->lat));
  if (r->target_rate >= 0) json_object_set_new(j, "target_rate", json_real(r->target_rate));
  else json_object_set_new(j, "inflight", json_integer(c->inflight));
  json_object_set_new(j, "mode", json_string(c->closed ? "closed-loop" : "open-loop"));
  json_object_set_new(j, "elapsed_s", json_real(r->elapsed_s));
  json_object_set_new(j, "late_sends", json_integer((json_int_t)r->late));
  json_t *bd = json_object();
  json_object_set_new(bd, "client_queue", lat_json(r->cq));
  json_object_set_new(bd, "round_trip", lat_json(r->rtt));
  json_object_set_new(bd, "round_trip_mean", json_real(us((uint64_t)ps_hist_mean(r->rtt))));
  json_object_set_new(bd, "server_mean", json_real(r->srv_mean_us));
  /* Client queue + network + server queue + service: the network part is the mean round trip
   * less the server's mean time (a difference of percentiles is no percentile, so only a
   * mean); the server parts are the slowest shard's, over this point. */
  static const char *const bd_name[PS_BENCH_SP_N] = {"server_total", "server_queue",
                                                     "server_service"};
  for (int p = 0; p < PS_BENCH_SP_N; p++)
    if (r->win[p])
      json_object_set_new(bd, bd_name[p], ps_bench_win_json(r->win[p], r->win_mean_us[p]));
  if (r->win[PS_BENCH_SP_TOTAL]) {
    json_object_set_new(bd, "server_shard", json_integer(r->win_shard));
    json_object_set_new(bd, "network", json_pack("{s:f}", "mean", ps_bench_network_mean_us(r)));
  }
  if (r->srv) json_object_set(bd, "servers", r->srv);
  json_object_set_new(j, "breakdown_us", bd);
  return j;
}

void ps_bench_print_header(FILE *f) {
  fprintf(f, "%10s %11s %9s %6s %8s %12s %9s %9s %9s %9s %9s %9s\n", "target/s", "achieved/s",
          "requests", "errors", "timeouts", "keys/s", "p50 us", "p90 us", "p99 us", "p99.9 us",
          "p99.99 us", "max us");
}

void ps_bench_print_row(FILE *f, const ps_bench_result *r) {
  char tgt[32];
  if (r->target_rate >= 0) snprintf(tgt, sizeof tgt, "%.0f", r->target_rate);
  else snprintf(tgt, sizeof tgt, "closed");
  const ps_hist *h = r->lat;
  fprintf(f, "%10s %11.1f %9" PRIu64 " %6" PRIu64 " %8" PRIu64 " %12.0f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f\n",
          tgt, r->achieved_rate, r->requests, r->errors, r->timeouts, r->keys_per_s,
          us(ps_hist_percentile(h, 50)), us(ps_hist_percentile(h, 90)),
          us(ps_hist_percentile(h, 99)), us(ps_hist_percentile(h, 99.9)),
          us(ps_hist_percentile(h, 99.99)), us(ps_hist_max(h)));
}

static void print_part(const char *name, const ps_hist *h, double mean_us) {
  printf("%s p50 %.1f p99 %.1f mean %.1f us", name, us(ps_hist_percentile(h, 50)),
         us(ps_hist_percentile(h, 99)), mean_us);
}

void ps_bench_print_breakdown(const ps_bench_result *r, size_t nsrv) {
  printf("  where time went: ");
  print_part("client queue (intended -> sent)", r->cq, ps_hist_mean(r->cq) / 1e3);
  printf("; ");
  print_part("round trip (sent -> reply)", r->rtt, ps_hist_mean(r->rtt) / 1e3);
  printf("\n");
  if (r->srv_mean_us >= 0) {
    int64_t qi = 0, qd = 0;
    for (size_t i = 0; i < nsrv; i++) {
      if (r->q_inflight_max[i] > qi) qi = r->q_inflight_max[i];
      if (r->q_deferred_max[i] > qd) qd = r->q_deferred_max[i];
    }
    printf("    network, socket queues and client handling ~%.1f us of the mean round trip "
           "(round trip - server receipt -> reply mean %.1f us, shard %d, this point)\n",
           ps_bench_network_mean_us(r), r->srv_mean_us, r->win_shard);
    if (r->win[PS_BENCH_SP_QUEUE] && r->win[PS_BENCH_SP_SERVICE]) {
      printf("    ");
      print_part("server queue (receipt -> store work)", r->win[PS_BENCH_SP_QUEUE],
                 r->win_mean_us[PS_BENCH_SP_QUEUE]);
      printf("; ");
      print_part("service (store work -> reply)", r->win[PS_BENCH_SP_SERVICE],
                 r->win_mean_us[PS_BENCH_SP_SERVICE]);
      printf("\n");
    }
    printf("    server queue depth (sampled every 100 ms): max inflight %" PRId64
           ", deferred %" PRId64 "\n",
           qi, qd);
  }
  if (r->late)
    printf("  %" PRIu64 " requests left more than 1 ms after their intended time (charged)\n",
           r->late);
  if (r->first_error[0]) printf("  first error: %s\n", r->first_error);
}

/* The knee: going up in rate, the last point before the first one that is not sustained
 * (achieved < 95% of target, errors or timeouts) or whose p99 exceeds 5x the lightest point's
 * p99. Stopping at the first failure keeps a lucky point above a failed one from counting. */
static int find_knee(ps_bench_result *rs, int n) {
  int ord[PS_BENCH_MAX_SWEEP];
  for (int i = 0; i < n; i++) ord[i] = i;
  for (int i = 1; i < n; i++) /* insertion sort by target rate */
    for (int j = i; j > 0 && rs[ord[j]].target_rate < rs[ord[j - 1]].target_rate; j--) {
      int t = ord[j];
      ord[j] = ord[j - 1];
      ord[j - 1] = t;
    }
  double base = -1;
  int knee = -1;
  for (int k = 0; k < n; k++) {
    ps_bench_result *r = &rs[ord[k]];
    bool ok = r->achieved_rate >= 0.95 * r->target_rate && r->errors == 0 && r->timeouts == 0;
    double p99 = (double)ps_hist_percentile(r->lat, 99);
    if (base < 0) base = p99;
    if (!ok || p99 > 5.0 * base) break;
    knee = ord[k];
  }
  return knee;
}

static int write_plot(const ps_bench_cfg *c, ps_bench_result *rs, int n) {
  char dat[] = "/tmp/ps-bench-plot-XXXXXX";
  int fd = mkstemp(dat);
  if (fd < 0) return -1;
  FILE *f = fdopen(fd, "w");
  if (!f) {
    close(fd);
    unlink(dat);
    return -1;
  }
  for (int i = 0; i < n; i++) {
    const ps_hist *h = rs[i].lat;
    fprintf(f, "%.3f %.3f %.3f %.3f %.3f %.3f %.3f\n", rs[i].achieved_rate,
            us(ps_hist_percentile(h, 50)), us(ps_hist_percentile(h, 90)),
            us(ps_hist_percentile(h, 99)), us(ps_hist_percentile(h, 99.9)),
            us(ps_hist_percentile(h, 99.99)), us(ps_hist_max(h)) > 0 ? us(ps_hist_max(h)) : 1.0);
  }
  fclose(f);
  size_t L = strlen(c->plot);
  bool svg = L >= 4 && strcasecmp(c->plot + L - 4, ".svg") == 0;
  char title[256];
  snprintf(title, sizeof title, "ps-bench %s, %" PRId64 " keys x dim %" PRId64 ", %s, %s",
           c->op_s, c->keys, c->dim, c->dist_s, c->servers);
  FILE *g = popen("gnuplot", "w");
  if (!g) {
    unlink(dat);
    return -1;
  }
  fprintf(g, "set terminal %s size 1000,650\n", svg ? "svg" : "png");
  fprintf(g, "set output '%s'\n", c->plot);
  fprintf(g, "set title \"%s\" noenhanced\n", title);
  fprintf(g, "set xlabel 'achieved rate (requests/s)'\nset ylabel 'latency (us, log)'\n");
  fprintf(g, "set logscale y\nset grid\nset key top left\n");
  fprintf(g, "plot '%s' u 1:2 w lp t 'p50', '' u 1:3 w lp t 'p90', '' u 1:4 w lp t 'p99', "
             "'' u 1:5 w lp t 'p99.9', '' u 1:6 w lp t 'p99.99', '' u 1:7 w lp t 'max'\n",
          dat);
  int rc = pclose(g);
  unlink(dat);
  return rc == 0 ? 0 : -1;
}

/* A sweep's summary: the latency-throughput table, the knee and the tail near half of it. */
void ps_bench_print_sweep(ps_bench_result *rs, int n) {
  printf("\nlatency vs throughput:\n");
  ps_bench_print_header(stdout);
  for (int i = 0; i < n; i++) ps_bench_print_row(stdout, &rs[i]);
  int k = find_knee(rs, n);
  if (k >= 0) {
    printf("knee: %.0f requests/s (%.0f keys/s): the last rate, going up, sustained (>= 95%% "
           "achieved, no errors) with p99 <= 5x the lightest point's p99\n",
           rs[k].target_rate, rs[k].keys_per_s);
    /* The point closest to half the knee: is the tail tight there? */
    int h = -1;
    for (int i = 0; i < n; i++)
      if (h < 0 || fabs(rs[i].target_rate - rs[k].target_rate / 2) <
                       fabs(rs[h].target_rate - rs[k].target_rate / 2))
        h = i;
    double p50 = (double)ps_hist_percentile(rs[h].lat, 50);
    double p99 = (double)ps_hist_percentile(rs[h].lat, 99);
    printf("at %.0f requests/s (nearest half the knee): p99/p50 = %.2f (%s)\n",
           rs[h].target_rate, p50 > 0 ? p99 / p50 : 0.0,
           p50 > 0 && p99 <= 2 * p50 ? "within 2x" : "over 2x");
  } else {
    printf("knee: none of the rates was sustained\n");
  }
}

int ps_bench_write_outputs(const ps_bench_cfg *c, ps_bench_result *rs, int n, int rc) {
  if (c->json && n) {
    json_t *doc;
    if (c->sweep_s) {
      doc = json_array();
      for (int i = 0; i < n; i++) json_array_append_new(doc, ps_bench_result_json(c, &rs[i]));
    } else {
      doc = ps_bench_result_json(c, &rs[0]);
    }
    if (json_dump_file(doc, c->json, JSON_INDENT(2) | JSON_SORT_KEYS) != 0) {
      fprintf(stderr, "ps-bench: --json: cannot write '%s': %s\n", c->json, strerror(errno));
      rc = 1;
    }
    json_decref(doc);
  }
  if (c->plot && n) {
    if (write_plot(c, rs, n) != 0) {
      fprintf(stderr, "ps-bench: --plot: gnuplot failed to write '%s'\n", c->plot);
      rc = rc ? rc : 1;
    }
  }
  return rc;
}

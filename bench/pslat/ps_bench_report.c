/* ps_bench_report: what ps-bench prints and writes — the per-point table row (latencies in ms)
 * and the "where time went" breakdown (client queue, network, server queue, service), pulls
 * and pushes apart under --op mixed, a sweep's latency-vs-offered-rate table and its knee, the
 * --json document and the --plot (gnuplot, PNG or SVG; the script in ps_bench_present.c).
 *
 * One --json shape for a single run and a sweep — {format, workload, points[], knee,
 * half_knee} — so a consumer reads points[0] of either and never has to guess what was run:
 * the workload is in the document, not in the file name.
 *
 * The breakdown's network part is a difference of means (the mean round trip less the
 * server's mean time): a difference of percentiles is no percentile. */

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ps_bench_int.h"
#include "ps_bench_present_int.h"
#include "ps_cli.h"

static double us(uint64_t ns) { return (double)ns / 1e3; }
static double ms(uint64_t ns) { return (double)ns / 1e6; }

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

const char *const ps_bench_op_name[PS_BENCH_OPS] = {"pull", "push"};

/* The ops a workload sends: pull, push, or both for --op mixed (--op score's requests are
 * counted as op 0, named "score"). */
static bool op_runs(const ps_bench_cfg *c, int o) {
  return c->op == PS_BENCH_OP_MIXED || (c->op == PS_BENCH_OP_PUSH) == (o == 1);
}

json_t *ps_bench_result_json(const ps_bench_cfg *c, const ps_bench_result *r) {
  json_t *j = json_pack("{s:f, s:I, s:I, s:I, s:f, s:o}", "achieved_rate", r->achieved_rate,
                        "requests", (json_int_t)r->requests, "errors", (json_int_t)r->errors,
                        "timeouts", (json_int_t)r->timeouts, "keys_per_s", r->keys_per_s,
                        "latency_us", lat_json(r->lat));
  json_object_set_new(j, "offered_rate",
                      r->target_rate >= 0 ? json_real(r->target_rate) : json_null());
  json_object_set_new(j, "elapsed_s", json_real(r->elapsed_s));
  json_object_set_new(j, "late_sends", json_integer((json_int_t)r->late));
  json_object_set_new(j, "rows_per_s", json_real(r->rows_per_s));
  /* Pulls and pushes apart (--op mixed has both; the figures above are both together). */
  json_t *by = json_object();
  for (int o = 0; o < PS_BENCH_OPS; o++) {
    if (!op_runs(c, o)) continue;
    const ps_bench_op_figs *f = &r->op[o];
    double kps = r->elapsed_s > 0 ? (double)f->keys / r->elapsed_s : 0.0;
    double rps = r->elapsed_s > 0 ? (double)f->rows / r->elapsed_s : 0.0;
    json_object_set_new(by, c->op == PS_BENCH_OP_SCORE ? "score" : ps_bench_op_name[o],
                        json_pack("{s:I, s:I, s:I, s:f, s:f, s:o}", "requests",
                                  (json_int_t)f->requests, "errors", (json_int_t)f->errors,
                                  "timeouts", (json_int_t)f->timeouts, "keys_per_s", kps,
                                  "rows_per_s", rps, "latency_us", lat_json(f->lat)));
  }
  json_object_set_new(j, "by_op", by);
  json_t *bd = json_object();
  json_object_set_new(bd, "client_queue", lat_json(r->cq));
  json_object_set_new(bd, "round_trip", lat_json(r->rtt));
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
  fprintf(f, "%10s %11s %9s %6s %8s %12s %9s %9s %9s %9s %9s %9s\n", "offered/s", "achieved/s",
          "requests", "errors", "timeouts", "keys/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms",
          "p99.99 ms", "max ms");
}

void ps_bench_print_row(FILE *f, const ps_bench_result *r) {
  char tgt[32];
  if (r->target_rate >= 0) snprintf(tgt, sizeof tgt, "%.0f", r->target_rate);
  else snprintf(tgt, sizeof tgt, "closed");
  const ps_hist *h = r->lat;
  fprintf(f, "%10s %11.1f %9" PRIu64 " %6" PRIu64 " %8" PRIu64 " %12.0f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f\n",
          tgt, r->achieved_rate, r->requests, r->errors, r->timeouts, r->keys_per_s,
          ms(ps_hist_percentile(h, 50)), ms(ps_hist_percentile(h, 90)),
          ms(ps_hist_percentile(h, 99)), ms(ps_hist_percentile(h, 99.9)),
          ms(ps_hist_percentile(h, 99.99)), ms(ps_hist_max(h)));
}

/* --op mixed: pulls and pushes apart, one line. */
static void print_ops(FILE *f, const ps_bench_cfg *c, const ps_bench_result *r) {
  if (c->op != PS_BENCH_OP_MIXED) return;
  fprintf(f, "  by op:");
  for (int o = 0; o < PS_BENCH_OPS; o++) {
    const ps_bench_op_figs *p = &r->op[o];
    fprintf(f, "%s %s %" PRIu64 " requests p50 %.3f p99 %.3f max %.3f ms", o ? ";" : "",
            ps_bench_op_name[o], p->requests, ms(ps_hist_percentile(p->lat, 50)),
            ms(ps_hist_percentile(p->lat, 99)), ms(ps_hist_max(p->lat)));
  }
  fprintf(f, "\n");
}

static void print_part(const char *name, const ps_hist *h, double mean_us) {
  printf("%s p50 %.1f p99 %.1f mean %.1f us", name, us(ps_hist_percentile(h, 50)),
         us(ps_hist_percentile(h, 99)), mean_us);
}

void ps_bench_print_breakdown(const ps_bench_cfg *c, const ps_bench_result *r, size_t nsrv) {
  print_ops(stdout, c, r);
  if (c->bag_hi && r->requests)
    printf("  bags: %" PRId64 " of %s ids a request, %.0f ids -> %.0f unique rows (%.1f%%) on "
           "average; %.0f rows/s\n",
           c->keys, c->bag_s, (double)r->keys / (double)r->requests,
           (double)r->rows / (double)r->requests,
           r->keys ? 100.0 * (double)r->rows / (double)r->keys : 0.0, r->rows_per_s);
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
    if (c->queue_sample_ms > 0)
      printf("    server queue depth (sampled every %d ms): max inflight %" PRId64
             ", deferred %" PRId64 "\n",
             c->queue_sample_ms, qi, qd);
  }
  if (r->late)
    printf("  %" PRIu64 " requests left more than 1 ms after their intended time (charged)\n",
           r->late);
  if (r->first_error[0]) printf("  first error: %s\n", r->first_error);
}

/* A point's figures as the knee and the plot see them (ps_bench_present_int.h). */
static ps_bench_fig fig_of(const ps_bench_cfg *c, const ps_bench_result *r) {
  static const double pct[PS_BENCH_FIG_N - 1] = {50, 90, 99, 99.9, 99.99};
  ps_bench_fig f = {.offered = r->target_rate, .achieved = r->achieved_rate,
                    .failed = r->errors || r->timeouts};
  for (int q = 0; q < PS_BENCH_FIG_N - 1; q++) f.lat_us[q] = us(ps_hist_percentile(r->lat, pct[q]));
  f.lat_us[PS_BENCH_FIG_MAX] = us(ps_hist_max(r->lat));
  for (int o = 0; o < PS_BENCH_OPS; o++) {
    bool has = op_runs(c, o) && ps_hist_count(r->op[o].lat) > 0;
    f.op_p50_us[o] = has ? us(ps_hist_percentile(r->op[o].lat, 50)) : -1;
    f.op_p99_us[o] = has ? us(ps_hist_percentile(r->op[o].lat, 99)) : -1;
  }
  return f;
}

/* The figures of n points and their knee (a sweep's; none for a single run). */
static void knee_of(const ps_bench_cfg *c, const ps_bench_result *rs, int n, ps_bench_fig *f,
                    ps_bench_knee *k) {
  for (int i = 0; i < n; i++) f[i] = fig_of(c, &rs[i]);
  k->index = k->half = -1;
  k->p99_bound_us = 0;
  if (c->sweep_s) ps_bench_knee_find(f, n, c->knee_p99_ms * 1e3, k);
}

static void plot_title(const ps_bench_cfg *c, char *t, size_t cap) {
  snprintf(t, cap, "ps-bench %s, %" PRId64 " keys x dim %" PRId64 ", %s, %s", c->op_s, c->keys,
           c->dim, c->dist_s, c->servers);
}

/* --plot: the script goes to PLOT.gp (kept, with its data) and through gnuplot. */
static int write_plot(const ps_bench_cfg *c, const ps_bench_fig *f, int n,
                      const ps_bench_knee *k) {
  char title[512], gp[4096];
  plot_title(c, title, sizeof title);
  if ((size_t)snprintf(gp, sizeof gp, "%s.gp", c->plot) >= sizeof gp) return -1;
  bool mixed = c->op == PS_BENCH_OP_MIXED;
  FILE *s = fopen(gp, "w");
  if (!s) return -1;
  ps_bench_plot_script(s, c->plot, title, f, n, k, mixed);
  if (fclose(s) != 0) return -1;
  FILE *g = popen("gnuplot", "w");
  if (!g) return -1;
  ps_bench_plot_script(g, c->plot, title, f, n, k, mixed);
  return pclose(g) == 0 ? 0 : -1;
}

/* A sweep's summary: the latency-throughput table, the knee and the tail near half of it. */
void ps_bench_print_sweep(const ps_bench_cfg *c, ps_bench_result *rs, int n) {
  printf("\nlatency vs offered rate:\n");
  ps_bench_print_header(stdout);
  for (int i = 0; i < n; i++) ps_bench_print_row(stdout, &rs[i]);
  if (c->op == PS_BENCH_OP_MIXED) {
    printf("%10s %11s %11s %11s %11s\n", "offered/s", "pull p50 ms", "pull p99 ms",
           "push p50 ms", "push p99 ms");
    for (int i = 0; i < n; i++)
      printf("%10.0f %11.3f %11.3f %11.3f %11.3f\n", rs[i].target_rate,
             ms(ps_hist_percentile(rs[i].op[0].lat, 50)), ms(ps_hist_percentile(rs[i].op[0].lat, 99)),
             ms(ps_hist_percentile(rs[i].op[1].lat, 50)), ms(ps_hist_percentile(rs[i].op[1].lat, 99)));
  }
  ps_bench_fig f[PS_BENCH_MAX_SWEEP];
  ps_bench_knee k;
  knee_of(c, rs, n, f, &k);
  if (k.index < 0) {
    printf("knee: none of the offered rates was sustained (>= %.0f%% achieved, no errors) with "
           "p99 <= %.3f ms\n",
           100 * PS_BENCH_KNEE_MIN_ACHIEVED, k.p99_bound_us / 1e3);
    return;
  }
  printf("knee: %.0f requests/s offered (%.0f keys/s): the highest offered rate, going up, "
         "before the first not sustained (>= %.0f%% achieved, no errors) or with p99 > %.3f ms "
         "(%s)\n",
         rs[k.index].target_rate, rs[k.index].keys_per_s, 100 * PS_BENCH_KNEE_MIN_ACHIEVED,
         k.p99_bound_us / 1e3,
         c->knee_p99_ms > 0 ? "--knee-p99-ms" : "5x the lightest point's p99");
  const ps_bench_fig *h = &f[k.half];
  double p50 = h->lat_us[PS_BENCH_FIG_P50], p99 = h->lat_us[PS_BENCH_FIG_P99];
  printf("at %.0f requests/s (nearest half the knee): p50 %.3f ms, p99 %.3f ms, p99/p50 = %.2f "
         "(%s)\n",
         h->offered, p50 / 1e3, p99 / 1e3, p50 > 0 ? p99 / p50 : 0.0,
         p50 > 0 && p99 <= 2 * p50 ? "within 2x" : "over 2x");
}

/* The run's workload, as the JSON document names it. */
static json_t *workload_json(const ps_bench_cfg *c, const ps_bench_result *rs, int n) {
  json_t *w = json_pack("{s:s, s:f, s:I, s:I, s:I, s:s, s:f, s:i, s:i}", "op", c->op_s, "mix",
                        c->mix, "keys", (json_int_t)c->keys, "dim", (json_int_t)c->dim,
                        "key_space", (json_int_t)c->key_space, "distribution", c->dist_s,
                        "zipf_exponent", c->zipf_a, "tables", c->tables, "table_id", c->table_id);
  json_t *srv = json_array();
  char *items[1024];
  int ns = ps_split_list(c->servers ? c->servers : c->url, ',', items, 1024);
  for (int i = 0; i < ns; i++) json_array_append_new(srv, json_string(items[i]));
  if (ns > 0) free(items[0]);
  json_object_set_new(w, "servers", srv);
  json_object_set_new(w, "mode", json_string(c->closed ? "closed-loop" : "open-loop"));
  json_object_set_new(w, "arrivals", c->closed ? json_null() : json_string(c->arrivals_s));
  json_t *rates = json_array();
  for (int i = 0; i < n && !c->closed; i++) json_array_append_new(rates, json_real(rs[i].target_rate));
  json_object_set_new(w, "offered_rates", rates);
  json_object_set_new(w, "inflight", json_integer(c->inflight));
  json_object_set_new(w, "threads", json_integer(c->threads));
  json_object_set_new(w, "duration_s", c->requests > 0 ? json_null() : json_real(c->duration));
  json_object_set_new(w, "requests_per_point",
                      c->requests > 0 ? json_integer((json_int_t)c->requests) : json_null());
  json_object_set_new(w, "warmup_s", json_real(c->warmup));
  json_object_set_new(w, "prepopulate", json_boolean(c->prepopulate));
  json_object_set_new(w, "unique", json_boolean(c->unique));
  json_object_set_new(w, "key_pool", json_integer((json_int_t)c->pool_n));
  json_object_set_new(w, "timeout_ms", json_integer(c->timeout_ms));
  json_object_set_new(w, "curve", json_boolean(c->curve_secret[0] != '\0'));
  json_object_set_new(w, "seed", json_integer((json_int_t)c->seed));
  json_object_set_new(w, "queue_sample_ms", json_integer(c->queue_sample_ms));
  json_object_set_new(w, "bag_size", c->bag_hi ? json_string(c->bag_s) : json_null());
  if (c->op == PS_BENCH_OP_SCORE) { /* keys = candidates: keys_per_s is candidate rows/s */
    json_object_set_new(w, "url", json_string(c->url));
    json_object_set_new(w, "candidates", json_integer((json_int_t)c->candidates));
    json_object_set_new(w, "score_lines", json_string(c->score_lines));
  }
  return w;
}

/* The knee and the half-knee point (null when there is none: a single run, or no rate
 * passed). */
static void knee_json(json_t *doc, const ps_bench_cfg *c, const ps_bench_result *rs,
                      const ps_bench_fig *f, const ps_bench_knee *k) {
  if (k->index < 0) {
    json_object_set_new(doc, "knee", json_null());
    json_object_set_new(doc, "half_knee", json_null());
    return;
  }
  const ps_bench_result *r = &rs[k->index];
  json_object_set_new(
      doc, "knee",
      json_pack("{s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:s}", "point", k->index, "offered_rate",
                r->target_rate, "achieved_rate", r->achieved_rate, "keys_per_s", r->keys_per_s,
                "p99_us", f[k->index].lat_us[PS_BENCH_FIG_P99], "min_achieved_fraction",
                PS_BENCH_KNEE_MIN_ACHIEVED, "p99_bound_us", k->p99_bound_us, "p99_bound_from",
                c->knee_p99_ms > 0 ? "--knee-p99-ms" : "5x the lightest point's p99"));
  const ps_bench_fig *h = &f[k->half];
  double p50 = h->lat_us[PS_BENCH_FIG_P50], p99 = h->lat_us[PS_BENCH_FIG_P99];
  json_object_set_new(doc, "half_knee",
                      json_pack("{s:i, s:f, s:f, s:f, s:f}", "point", k->half, "offered_rate",
                                h->offered, "p50_us", p50, "p99_us", p99, "p99_over_p50",
                                p50 > 0 ? p99 / p50 : 0.0));
}

int ps_bench_write_outputs(const ps_bench_cfg *c, ps_bench_result *rs, int n, int rc) {
  ps_bench_fig f[PS_BENCH_MAX_SWEEP];
  ps_bench_knee k;
  knee_of(c, rs, n, f, &k);
  if (c->json && n) {
    json_t *doc = json_pack("{s:s, s:o}", "format", PS_BENCH_JSON_FORMAT, "workload",
                            workload_json(c, rs, n));
    json_t *pts = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(pts, ps_bench_result_json(c, &rs[i]));
    json_object_set_new(doc, "points", pts);
    knee_json(doc, c, rs, f, &k);
    if (json_dump_file(doc, c->json, JSON_INDENT(2) | JSON_SORT_KEYS) != 0) {
      fprintf(stderr, "ps-bench: --json: cannot write '%s': %s\n", c->json, strerror(errno));
      rc = 1;
    }
    json_decref(doc);
  }
  if (c->plot && n) {
    if (write_plot(c, f, n, &k) != 0) {
      fprintf(stderr, "ps-bench: --plot: gnuplot failed to write '%s'\n", c->plot);
      rc = rc ? rc : 1;
    }
  }
  return rc;
}

/* ps_bench_stats: the servers' own view of a point, from STATS — per-op histograms of
 * receipt-to-reply time and of its queue and service parts, cumulative since each server
 * started, and (--queue-sample-ms) the queue depths sampled while the load runs.
 *
 * A point's share is the difference of two snapshots (before and after it): bucket counts only
 * grow, so subtracting them gives exactly the histogram of the requests in between
 * (percentiles within ps_hist's 1%), and count x mean gives their exact mean. The window holds
 * every pull and push the server answered meanwhile, the warm-up's included. A sharded request
 * waits for every shard, so the slowest shard's window is the breakdown's. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_bench_int.h"

const char *const ps_bench_sp_field[PS_BENCH_SP_N] = {"latency", "queue", "service"};

/* Adds ops.<op>.<part>_buckets ([index, count] pairs) into dense counts; returns their sum. */
static double add_buckets(json_t *pairs, uint64_t *dense) {
  size_t nb = ps_hist_nbuckets(), i;
  double total = 0;
  json_t *pair;
  json_array_foreach(pairs, i, pair) {
    json_int_t idx = json_integer_value(json_array_get(pair, 0));
    json_int_t cnt = json_integer_value(json_array_get(pair, 1));
    if (idx < 0 || (size_t)idx >= nb || cnt <= 0) continue;
    dense[idx] += (uint64_t)cnt;
    total += (double)cnt;
  }
  return total;
}

void ps_bench_stats_snap(const ps_bench_cfg *c, ps_client *cl, ps_bench_snap *v, size_t n,
                         bool buckets) {
  for (size_t i = 0; i < n; i++) {
    memset(&v[i], 0, sizeof v[i]);
    char *js = NULL;
    if (ps_client_stats(cl, i, &js, NULL) != PS_OK) continue;
    json_error_t jerr;
    json_t *doc = json_loads(js, 0, &jerr);
    free(js);
    if (!doc) continue;
    v[i].ok = true; /* an op absent from STATS has not been seen yet: zero counts */
    for (int p = 0; buckets && p < PS_BENCH_SP_N; p++)
      v[i].b[p] = calloc(ps_hist_nbuckets(), sizeof(uint64_t));
    json_t *ops = json_object_get(doc, "ops");
    v[i].stats_count =
        (double)json_integer_value(json_object_get(json_object_get(ops, "stats"), "count"));
    const char *names[] = {"pull", "push"};
    for (int k = 0; k < 2; k++) {
      json_t *o = json_object_get(ops, names[k]);
      if (!o) continue;
      for (int p = 0; p < PS_BENCH_SP_N; p++) {
        char f[32];
        snprintf(f, sizeof f, "%s_buckets", ps_bench_sp_field[p]);
        json_t *pairs = json_object_get(o, f);
        snprintf(f, sizeof f, "%s_us", ps_bench_sp_field[p]);
        double mean = json_number_value(json_object_get(json_object_get(o, f), "mean"));
        double cnt =
            p == PS_BENCH_SP_TOTAL ? (double)json_integer_value(json_object_get(o, "count")) : 0;
        if (v[i].b[p]) cnt = add_buckets(pairs, v[i].b[p]);
        v[i].n[p] += cnt;
        v[i].sum_us[p] += cnt * mean;
      }
      if ((c->op == PS_BENCH_OP_PUSH) == (k == 1))
        v[i].lat = json_incref(json_object_get(o, "latency_us"));
    }
    json_t *q = json_object_get(doc, "queue");
    v[i].inflight = json_integer_value(json_object_get(q, "inflight"));
    v[i].deferred = json_integer_value(json_object_get(q, "deferred"));
    json_decref(doc);
  }
}

void ps_bench_snaps_free(ps_bench_snap *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    json_decref(v[i].lat);
    for (int p = 0; p < PS_BENCH_SP_N; p++) free(v[i].b[p]);
  }
}

/* Raises res's per-shard maxima of the queue depths to a sample taken now (STATS is answered
 * by the server's socket thread, so a backlog there delays the sample too; it is a coarse
 * view). */
void ps_bench_sample_queues(const ps_bench_cfg *c, ps_client *cl, ps_bench_result *res,
                            size_t nsrv) {
  ps_bench_snap *sn = calloc(nsrv ? nsrv : 1, sizeof *sn);
  if (!sn) return;
  ps_bench_stats_snap(c, cl, sn, nsrv, false);
  for (size_t i = 0; i < nsrv; i++) {
    if (sn[i].inflight > res->q_inflight_max[i]) res->q_inflight_max[i] = sn[i].inflight;
    if (sn[i].deferred > res->q_deferred_max[i]) res->q_deferred_max[i] = sn[i].deferred;
  }
  ps_bench_snaps_free(sn, nsrv);
  free(sn);
}

/* The histogram of the requests between two snapshots' bucket counts (NULL if none or no
 * memory). A server that restarted in between has fewer counts after: those clamp to 0. */
static ps_hist *hist_between(const uint64_t *b, const uint64_t *a, uint64_t *diff) {
  size_t nb = ps_hist_nbuckets(), first = nb, last = 0;
  for (size_t i = 0; i < nb; i++) {
    diff[i] = a[i] > b[i] ? a[i] - b[i] : 0;
    if (!diff[i]) continue;
    if (first == nb) first = i;
    last = i;
  }
  if (first == nb) return NULL;
  ps_hist *h = ps_hist_create();
  if (!h) return NULL;
  /* The true min and max are lost; the edge buckets bound them, and percentiles clamp there. */
  uint64_t lo, hi, unused;
  ps_hist_bucket_range(first, &lo, &unused);
  ps_hist_bucket_range(last, &unused, &hi);
  ps_hist_add_buckets(h, diff, nb, lo, hi);
  return h;
}

/* Fills r's server fields from snapshots before and after the point. */
void ps_bench_server_window(const ps_bench_cfg *c, ps_bench_result *r, const ps_bench_snap *b,
                            const ps_bench_snap *a, size_t n) {
  r->srv_mean_us = -1;
  r->srv = json_array();
  uint64_t *diff = calloc(ps_hist_nbuckets(), sizeof *diff);
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_pack("{s:I}", "shard", (json_int_t)i);
    if (a[i].ok && b[i].ok) {
      double cnt = a[i].n[PS_BENCH_SP_TOTAL] - b[i].n[PS_BENCH_SP_TOTAL];
      double sum = a[i].sum_us[PS_BENCH_SP_TOTAL] - b[i].sum_us[PS_BENCH_SP_TOTAL];
      double mean = cnt > 0 ? sum / cnt : 0.0;
      json_object_set_new(e, "requests", json_integer((json_int_t)cnt));
      json_object_set_new(e, "mean_us", json_real(mean));
      if (a[i].lat) json_object_set(e, "latency_us_since_start", a[i].lat);
      ps_hist *h[PS_BENCH_SP_N] = {0};
      double m[PS_BENCH_SP_N] = {0};
      for (int p = 0; p < PS_BENCH_SP_N && diff; p++) {
        if (!a[i].b[p] || !b[i].b[p] || !(h[p] = hist_between(b[i].b[p], a[i].b[p], diff)))
          continue;
        double k = a[i].n[p] - b[i].n[p];
        m[p] = k > 0 ? (a[i].sum_us[p] - b[i].sum_us[p]) / k : 0.0;
        char f[32];
        snprintf(f, sizeof f, "%s_us", ps_bench_sp_field[p]);
        json_object_set_new(e, f, ps_bench_win_json(h[p], m[p]));
      }
      /* A sharded request waits for every shard: the slowest one is the breakdown's. */
      bool slowest = cnt > 0 && mean > r->srv_mean_us;
      if (slowest) {
        r->srv_mean_us = mean;
        r->win_shard = (int)i;
      }
      for (int p = 0; p < PS_BENCH_SP_N; p++) {
        if (slowest) {
          ps_hist_destroy(&r->win[p]);
          r->win[p] = h[p];
          r->win_mean_us[p] = m[p];
        } else {
          ps_hist_destroy(&h[p]);
        }
      }
    }
    /* The STATS requests this point sent the shard between the snapshots (the first snapshot
     * and --queue-sample-ms's), so a reader sees what the bench itself put on the server. */
    if (a[i].ok && b[i].ok)
      json_object_set_new(e, "stats_requests",
                          json_integer((json_int_t)(a[i].stats_count - b[i].stats_count)));
    bool sampled = c->queue_sample_ms > 0;
    json_object_set_new(e, "max_inflight_sampled",
                        sampled ? json_integer(r->q_inflight_max[i]) : json_null());
    json_object_set_new(e, "max_deferred_sampled",
                        sampled ? json_integer(r->q_deferred_max[i]) : json_null());
    json_array_append_new(r->srv, e);
  }
  free(diff);
}

/* The mean round trip less the server's mean receipt-to-reply time: network, socket queues on
 * both sides and the client's handling. The two means are over slightly different requests
 * (the server's window includes the warm-up), so a tiny or negative value means "nothing". */
double ps_bench_network_mean_us(const ps_bench_result *r) {
  return ps_hist_mean(r->rtt) / 1e3 - r->srv_mean_us;
}

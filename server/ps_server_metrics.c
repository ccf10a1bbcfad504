/* ps_server_metrics: ps-server's Prometheus metrics, read at scrape time from the server's
 * published STATS snapshot (ps_server_stats_json, refreshed every 200 ms by the main thread),
 * so the serving threads never see the scraper. One parse per scrape: the first family's
 * callback (ember_server_up) parses and caches the document, the others read the cache. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_server_metrics.h"

typedef struct srv_metrics {
  ps_server *s;
  json_t *doc; /* this scrape's STATS document; only touched from the HTTP thread */
} srv_metrics;

static srv_metrics g_sm;

static double num(json_t *o, const char *k) {
  json_t *v = o ? json_object_get(o, k) : NULL;
  return v ? json_number_value(v) : 0;
}

static void collect_up(ps_metrics_sink *sink, void *ud) {
  srv_metrics *sm = ud;
  json_decref(sm->doc);
  sm->doc = NULL;
  char *text = ps_server_stats_json(sm->s);
  if (text) sm->doc = json_loads(text, 0, NULL);
  free(text);
  ps_metrics_emit(sink, NULL, sm->doc ? 1 : 0);
}

/* ops.<op>.<field> for every op, as {op="..."} */
static void emit_ops(ps_metrics_sink *sink, srv_metrics *sm, const char *field) {
  json_t *ops = sm->doc ? json_object_get(sm->doc, "ops") : NULL;
  const char *op;
  json_t *e;
  json_object_foreach(ops, op, e) {
    const char *labels[] = {op};
    ps_metrics_emit(sink, labels, num(e, field));
  }
}
static void c_requests(ps_metrics_sink *k, void *ud) { emit_ops(k, ud, "count"); }
static void c_errors(ps_metrics_sink *k, void *ud) { emit_ops(k, ud, "errors"); }
static void c_keys(ps_metrics_sink *k, void *ud) { emit_ops(k, ud, "keys"); }

typedef struct scalar_def {
  ps_metric_type type;
  const char *name, *help, *obj, *field;
} scalar_def;

static const scalar_def scalars[] = {
    {PS_METRIC_COUNTER, "ember_server_malformed_total", "Messages dropped as malformed.", NULL, "malformed"},
    {PS_METRIC_COUNTER, "ember_server_replies_dropped_total", "Replies that could not be sent.", NULL, "replies_dropped"},
    {PS_METRIC_COUNTER, "ember_server_received_bytes_total", "Bytes received.", NULL, "bytes_in"},
    {PS_METRIC_COUNTER, "ember_server_sent_bytes_total", "Bytes sent.", NULL, "bytes_out"},
    {PS_METRIC_GAUGE, "ember_server_uptime_seconds", "Seconds since the shard started.", NULL, "uptime_s"},
    {PS_METRIC_COUNTER, "ember_store_cache_hits_total", "Row lookups served by the hot tier.", "store", "hits"},
    {PS_METRIC_COUNTER, "ember_store_cache_misses_total", "Row lookups that went to RocksDB.", "store", "misses"},
    {PS_METRIC_COUNTER, "ember_store_evictions_total", "Rows evicted from the hot tier.", "store", "evictions"},
    {PS_METRIC_COUNTER, "ember_store_writebacks_total", "Dirty rows written back to RocksDB.", "store", "writebacks"},
    {PS_METRIC_COUNTER, "ember_store_expired_total", "Rows expired by TTL.", "store", "expired"},
    {PS_METRIC_GAUGE, "ember_store_rocksdb_bytes", "Bytes in the RocksDB cold tier.", "store", "cold_bytes"},
};

static void c_scalar(ps_metrics_sink *k, void *ud) {
  const scalar_def *d = ud;
  json_t *o = g_sm.doc && d->obj ? json_object_get(g_sm.doc, d->obj) : g_sm.doc;
  if (o) ps_metrics_emit(k, NULL, num(o, d->field));
}

static void c_queue(ps_metrics_sink *k, void *ud) {
  srv_metrics *sm = ud;
  json_t *q = sm->doc ? json_object_get(sm->doc, "queue") : NULL;
  static const char *qs[] = {"inflight", "deferred", "held"};
  for (int i = 0; q && i < 3; i++) ps_metrics_emit(k, (const char *[]){qs[i]}, num(q, qs[i]));
}

/* One store stat split into hot and cold tiers, from the store's "<hot>" and "<cold>" fields. */
static void hot_cold(ps_metrics_sink *k, void *ud, const char *hot, const char *cold) {
  srv_metrics *sm = ud;
  json_t *st = sm->doc ? json_object_get(sm->doc, "store") : NULL;
  if (!st) return;
  ps_metrics_emit(k, (const char *[]){"hot"}, num(st, hot));
  ps_metrics_emit(k, (const char *[]){"cold"}, num(st, cold));
}

static void c_rows(ps_metrics_sink *k, void *ud) { hot_cold(k, ud, "rows_hot", "rows_cold"); }
static void c_bytes(ps_metrics_sink *k, void *ud) { hot_cold(k, ud, "hot_bytes", "cold_bytes"); }

ps_status ps_server_metrics_register(ps_metrics *m, ps_server *s) {
  g_sm.s = s;
  ps_metric *f;
  ps_status st;
#define REG(call, fn, ud) \
  if ((st = (call)) != PS_OK) return st; \
  ps_metric_set_collect(f, fn, ud)
  REG(ps_metrics_gauge(m, "ember_server_up", "1 when the shard's stats snapshot could be read.", NULL, 0, &f), collect_up, &g_sm);
  const char *op[] = {"op"};
  REG(ps_metrics_counter(m, "ember_server_requests_total", "Requests received, by op.", op, 1, &f), c_requests, &g_sm);
  REG(ps_metrics_counter(m, "ember_server_request_errors_total", "Requests answered with an error, by op.", op, 1, &f), c_errors, &g_sm);
  REG(ps_metrics_counter(m, "ember_server_keys_total", "Keys in requests, by op.", op, 1, &f), c_keys, &g_sm);
  REG(ps_metrics_gauge(m, "ember_server_queue_depth", "Requests in the server's queues.", (const char *[]){"queue"}, 1, &f), c_queue, &g_sm);
  REG(ps_metrics_gauge(m, "ember_store_rows", "Rows by storage tier.", (const char *[]){"tier"}, 1, &f), c_rows, &g_sm);
  REG(ps_metrics_gauge(m, "ember_store_bytes", "Bytes by storage tier.", (const char *[]){"tier"}, 1, &f), c_bytes, &g_sm);
  for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++) {
    const scalar_def *d = &scalars[i];
    if (d->type == PS_METRIC_COUNTER) {
      REG(ps_metrics_counter(m, d->name, d->help, NULL, 0, &f), c_scalar, (void *)d);
    } else {
      REG(ps_metrics_gauge(m, d->name, d->help, NULL, 0, &f), c_scalar, (void *)d);
    }
  }
  return PS_OK;
}

/* A per-op histogram family from ops.<op>.<field>_buckets ([index, count] pairs of ps_hist
 * buckets, with <field>_us for the exact maximum); an op without those fields has no series. */
typedef struct hist_def {
  const char *name, *help, *field;
} hist_def;

static const hist_def hists[] = {
    {"ember_server_request_duration_seconds", "Time from a request's receipt to its reply, by op.", "latency"},
    {"ember_server_request_queue_seconds", "Time from a request's receipt to the start of its store work (deferral, holds, busy partition threads), by op.", "queue"},
    {"ember_server_request_service_seconds", "Time from the start of a request's store work to its reply, by op.", "service"},
};

static void c_hist(ps_metrics_sink *k, void *ud) {
  const hist_def *d = ud;
  json_t *ops = g_sm.doc ? json_object_get(g_sm.doc, "ops") : NULL;
  /* Scratch shared by the families: collect callbacks run one at a time, under the registry
   * lock. */
  static uint64_t *dense;
  static ps_hist *h;
  size_t nb = ps_hist_nbuckets();
  if (!dense) dense = calloc(nb, sizeof *dense);
  if (!h) h = ps_hist_create();
  if (!dense || !h) return;
  char bk[32], uk[32];
  snprintf(bk, sizeof bk, "%s_buckets", d->field);
  snprintf(uk, sizeof uk, "%s_us", d->field);
  const char *op;
  json_t *e;
  json_object_foreach(ops, op, e) {
    json_t *b = json_object_get(e, bk);
    if (!json_is_array(b)) continue;
    memset(dense, 0, nb * sizeof *dense);
    size_t i;
    json_t *pair;
    json_array_foreach(b, i, pair) {
      json_int_t idx = json_integer_value(json_array_get(pair, 0));
      json_int_t cnt = json_integer_value(json_array_get(pair, 1));
      if (idx >= 0 && (size_t)idx < nb && cnt > 0) dense[idx] = (uint64_t)cnt;
    }
    ps_hist_reset(h);
    double max_us = num(json_object_get(e, uk), "max");
    ps_hist_add_buckets(h, dense, nb, 0, (uint64_t)(max_us * 1e3));
    ps_metrics_emit_hist(k, (const char *[]){op}, h);
  }
}

ps_status ps_server_metrics_register_latency(ps_metrics *m) {
  for (size_t i = 0; i < sizeof hists / sizeof hists[0]; i++) {
    ps_metric *f;
    ps_status st = ps_metrics_histogram(m, hists[i].name, hists[i].help, (const char *[]){"op"},
                                        1, ps_metrics_fine_edges_ns, ps_metrics_fine_nedges, &f);
    if (st != PS_OK) return st;
    ps_metric_set_collect(f, c_hist, (void *)&hists[i]);
  }
  return PS_OK;
}

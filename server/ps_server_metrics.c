/* ps_server_metrics: ps-server's Prometheus metrics, rendered at scrape time from a copy of the
 * server's published statistics snapshot (ps_server_stats_read, refreshed every 200 ms by the
 * main thread), so the serving threads never see the scraper. One copy per scrape: the first
 * family's callback (ember_server_up) takes it, the others read it. Series of per-op families
 * come in the order of the op names, as they always have. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_server_metrics.h"

typedef struct srv_metrics {
  ps_server *s;
  bool ok;              /* snap holds this scrape's snapshot */
  ps_server_stats snap; /* only touched from the HTTP thread (collect callbacks run one at a
                         * time, under the registry lock) */
  ps_hist *scratch;     /* a histogram rebuilt from a snapshot's buckets */
  int order[PS_SERVER_NOPS]; /* op numbers sorted by name */
  int nops;
} srv_metrics;

static srv_metrics g_sm;

static int by_name(const void *a, const void *b) {
  return strcmp(ps_server_op_name(*(const int *)a), ps_server_op_name(*(const int *)b));
}

static void collect_up(ps_metrics_sink *sink, void *ud) {
  srv_metrics *sm = ud;
  sm->ok = ps_server_stats_read(sm->s, &sm->snap) == PS_OK;
  ps_metrics_emit(sink, NULL, sm->ok ? 1 : 0);
}

/* The k-th op in name order, when STATS lists it (requests seen; "error" is not a request). */
static const ps_server_op_stats *listed_op(const srv_metrics *sm, int k, const char **name) {
  int op = sm->order[k];
  const ps_server_op_stats *o = &sm->snap.ops[op];
  *name = ps_server_op_name(op);
  return sm->ok && ps_server_stats_op_listed(&sm->snap, op) ? o : NULL;
}

/* A per-op counter field, as {op="..."} */
static void emit_ops(ps_metrics_sink *sink, srv_metrics *sm, size_t field) {
  for (int k = 0; k < sm->nops; k++) {
    const char *name;
    const ps_server_op_stats *o = listed_op(sm, k, &name);
    if (o) ps_metrics_emit(sink, &name, (double)*(const uint64_t *)((const char *)o + field));
  }
}
static void c_requests(ps_metrics_sink *k, void *ud) {
  emit_ops(k, ud, offsetof(ps_server_op_stats, count));
}
static void c_errors(ps_metrics_sink *k, void *ud) {
  emit_ops(k, ud, offsetof(ps_server_op_stats, errors));
}
static void c_keys(ps_metrics_sink *k, void *ud) {
  emit_ops(k, ud, offsetof(ps_server_op_stats, keys));
}

/* Where a scalar is: a uint64_t of the server's stats or of the store's (absent without a
 * store), or the uptime. */
enum { SRC_SRV, SRC_STORE, SRC_UPTIME };

typedef struct scalar_def {
  ps_metric_type type;
  const char *name, *help;
  int src;
  size_t off;
} scalar_def;

#define SRV(f) SRC_SRV, offsetof(ps_server_stats, traffic.f)
#define STORE(f) SRC_STORE, offsetof(ps_store_stats, f)
static const scalar_def scalars[] = {
    {PS_METRIC_COUNTER, "ember_server_malformed_total", "Messages dropped as malformed.", SRV(malformed)},
    {PS_METRIC_COUNTER, "ember_server_replies_dropped_total", "Replies that could not be sent.", SRV(replies_dropped)},
    {PS_METRIC_COUNTER, "ember_server_received_bytes_total", "Bytes received.", SRV(bytes_in)},
    {PS_METRIC_COUNTER, "ember_server_sent_bytes_total", "Bytes sent.", SRV(bytes_out)},
    {PS_METRIC_COUNTER, "ember_server_refused_memory_total", "Requests refused by the memory bounds (too large, busy).", SRV(refused_memory)},
    {PS_METRIC_GAUGE, "ember_server_bytes_in_flight", "Bytes charged by the memory bounds: request frames and replies not yet sent.", SRC_SRV, offsetof(ps_server_stats, bytes_in_flight)},
    {PS_METRIC_GAUGE, "ember_server_uptime_seconds", "Seconds since the shard started.", SRC_UPTIME, 0},
    {PS_METRIC_GAUGE, "ember_server_checkpoint_step", "Step of the shard's last checkpoint (0: none); a serving shard (--serve): the step it serves, which --follow moves.", SRC_SRV, offsetof(ps_server_stats, last_ckpt.step)},
    {PS_METRIC_COUNTER, "ember_store_cache_hits_total", "Row lookups served by the hot tier.", STORE(hits)},
    {PS_METRIC_COUNTER, "ember_store_cache_misses_total", "Row lookups that went to RocksDB.", STORE(misses)},
    {PS_METRIC_COUNTER, "ember_store_evictions_total", "Rows evicted from the hot tier.", STORE(evictions)},
    {PS_METRIC_COUNTER, "ember_store_writebacks_total", "Dirty rows written back to RocksDB.", STORE(writebacks)},
    {PS_METRIC_COUNTER, "ember_store_expired_total", "Rows expired by TTL.", STORE(expired)},
    {PS_METRIC_GAUGE, "ember_store_rocksdb_bytes", "Bytes in the RocksDB cold tier.", STORE(cold_bytes)},
    {PS_METRIC_GAUGE, "ember_store_unwritten_bytes", "Memory of hot rows not yet written to RocksDB.", STORE(unwritten_bytes)},
    {PS_METRIC_GAUGE, "ember_store_writes_failing", "1 while RocksDB refuses writes (a full disk).", STORE(writes_failing)},
    {PS_METRIC_COUNTER, "ember_store_prefetched_total", "Rows loaded from RocksDB into the hot tier by prefetches (pulls with warm set), ahead of their pulls.", STORE(prefetched)},
    {PS_METRIC_COUNTER, "ember_store_write_failures_total", "Writes to RocksDB that failed.", STORE(write_failures)},
    {PS_METRIC_COUNTER, "ember_server_push_duplicates_total", "Copies of pushes answered without being applied again (exactly-once).", SRC_SRV, offsetof(ps_server_stats, exo_duplicates)},
    {PS_METRIC_COUNTER, "ember_server_push_resends_unknown_total", "Re-sent pushes refused: the shard had no record of them (it restarted, or forgot the client).", SRC_SRV, offsetof(ps_server_stats, exo_unknown)},
    {PS_METRIC_COUNTER, "ember_server_repl_forwarded_total", "Replicated shards: requests this primary forwarded to its backups.", SRC_SRV, offsetof(ps_server_stats, repl_forwarded)},
    {PS_METRIC_COUNTER, "ember_server_repl_dropped_total", "Replicated shards: backups dropped from the live set (silent or refusing).", SRC_SRV, offsetof(ps_server_stats, repl_dropped)},
    {PS_METRIC_COUNTER, "ember_server_repl_promotions_total", "Replicated shards: times this replica promoted itself to primary.", SRC_SRV, offsetof(ps_server_stats, repl_promotions)},
    {PS_METRIC_COUNTER, "ember_server_repl_catchups_total", "Replicated shards: stale replicas this primary caught up.", SRC_SRV, offsetof(ps_server_stats, repl_catchups)},
};
#undef SRV
#undef STORE

static void c_scalar(ps_metrics_sink *k, void *ud) {
  const scalar_def *d = ud;
  const ps_server_stats *st = &g_sm.snap;
  if (!g_sm.ok || (d->src == SRC_STORE && !st->has_store)) return;
  const char *base = d->src == SRC_STORE ? (const char *)&st->store : (const char *)st;
  ps_metrics_emit(k, NULL, d->src == SRC_UPTIME ? st->uptime_s
                                                : (double)*(const uint64_t *)(base + d->off));
}

static void c_queue(ps_metrics_sink *k, void *ud) {
  srv_metrics *sm = ud;
  if (!sm->ok) return;
  ps_metrics_emit(k, (const char *[]){"inflight"}, (double)sm->snap.inflight);
  ps_metrics_emit(k, (const char *[]){"deferred"}, (double)sm->snap.deferred);
  ps_metrics_emit(k, (const char *[]){"held"}, (double)sm->snap.held);
  ps_metrics_emit(k, (const char *[]){"parked"}, (double)sm->snap.parked);
}

/* One store stat split into hot and cold tiers. */
static void hot_cold(ps_metrics_sink *k, srv_metrics *sm, uint64_t hot, uint64_t cold) {
  if (!sm->ok || !sm->snap.has_store) return;
  ps_metrics_emit(k, (const char *[]){"hot"}, (double)hot);
  ps_metrics_emit(k, (const char *[]){"cold"}, (double)cold);
}

static void c_rows(ps_metrics_sink *k, void *ud) {
  srv_metrics *sm = ud;
  hot_cold(k, sm, sm->snap.store.rows_hot, sm->snap.store.rows_cold);
}
static void c_bytes(ps_metrics_sink *k, void *ud) {
  srv_metrics *sm = ud;
  hot_cold(k, sm, sm->snap.store.hot_bytes, sm->snap.store.cold_bytes);
}

ps_status ps_server_metrics_register(ps_metrics *m, ps_server *s) {
  g_sm.s = s;
  if (!g_sm.scratch) {
    if (ps_server_stats_init(&g_sm.snap) != PS_OK || !(g_sm.scratch = ps_hist_create()))
      return PS_ERR_NOMEM;
    for (int i = 1; i < PS_SERVER_NOPS; i++) g_sm.order[g_sm.nops++] = i;
    qsort(g_sm.order, (size_t)g_sm.nops, sizeof *g_sm.order, by_name);
  }
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

/* A per-op histogram family; an op whose requests never reached the store has no queue or
 * service series (as in STATS). The histogram is rebuilt from the snapshot's buckets, so its
 * _sum is the sum of the buckets' midpoints, as it has always been. */
typedef struct hist_def {
  const char *name, *help;
  size_t off; /* of the ps_hist * in ps_server_op_stats */
} hist_def;

static const hist_def hists[] = {
    {"ember_server_request_duration_seconds", "Time from a request's receipt to its reply, by op.", offsetof(ps_server_op_stats, latency)},
    {"ember_server_request_queue_seconds", "Time from a request's receipt to the start of its store work (deferral, holds, busy partition threads), by op.", offsetof(ps_server_op_stats, queue)},
    {"ember_server_request_service_seconds", "Time from the start of a request's store work to its reply, by op.", offsetof(ps_server_op_stats, service)},
};

static void c_hist(ps_metrics_sink *k, void *ud) {
  const hist_def *d = ud;
  srv_metrics *sm = &g_sm;
  for (int i = 0; i < sm->nops; i++) {
    const char *name;
    const ps_server_op_stats *o = listed_op(sm, i, &name);
    if (!o || (d->off != offsetof(ps_server_op_stats, latency) && !ps_hist_count(o->queue)))
      continue;
    const ps_hist *src = *(ps_hist *const *)((const char *)o + d->off);
    ps_hist_reset(sm->scratch);
    ps_hist_add_buckets(sm->scratch, ps_hist_buckets(src), ps_hist_nbuckets(), 0,
                        ps_hist_max(src));
    ps_metrics_emit_hist(k, &name, sm->scratch);
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

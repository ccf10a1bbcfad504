/* ps_server_stats: the STATS document (JSON through jansson), also published every 200 ms as
 * a snapshot that other threads read through ps_server_stats_json (the metrics endpoint's
 * hook), so the main thread's counters never need locks. Latencies are measured from the
 * arrival of a request to the send of its reply, deferral included, and split at the start of
 * its store work into queue (deferral, held, waiting for a partition thread) and service. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ps_server_int.h"
#include "ps_time.h"

const char *srv_op_name(int op) {
  static const char *names[] = {"none",    "declare", "pull",    "push",   "step",
                                "checkpoint", "stats", "error",  "join",   "kv_set",
                                "kv_get",  "barrier", "restore", "ping"};
  return op >= 0 && op < (int)(sizeof names / sizeof *names) ? names[op] : "unknown";
}

static json_t *lat_buckets(const ps_hist *h) {
  /* Non-empty ps_hist buckets as [index, count] pairs: what the metrics endpoint turns back
   * into a histogram (ps_hist_add_buckets) for Prometheus's cumulative buckets. */
  json_t *a = json_array();
  const uint64_t *c = ps_hist_buckets(h);
  for (size_t i = 0; a && i < ps_hist_nbuckets(); i++)
    if (c[i]) json_array_append_new(a, json_pack("[I,I]", (json_int_t)i, (json_int_t)c[i]));
  return a;
}

static json_t *lat_json(const ps_hist *h) {
  /* Microseconds with ns resolution: the histogram records nanoseconds. */
  return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f}", "p50",
                   ps_hist_percentile(h, 50) / 1e3, "p90", ps_hist_percentile(h, 90) / 1e3,
                   "p99", ps_hist_percentile(h, 99) / 1e3, "p999",
                   ps_hist_percentile(h, 99.9) / 1e3, "max", ps_hist_max(h) / 1e3, "mean",
                   ps_hist_mean(h) / 1e3);
}

char *srv_stats_build(ps_server *s) {
  json_t *j = json_object();
  if (!j) return NULL;
  json_object_set_new(j, "shard", json_integer(s->opt.shard));
  json_object_set_new(j, "shards", json_integer(s->opt.shards));
  json_object_set_new(j, "threads", json_integer(s->nthreads));
  json_object_set_new(j, "uptime_s", json_real(ps_ns_to_s(ps_now_ns() - s->started_ns)));
  json_t *ops = json_object();
  for (int i = 1; i < SRV_NOPS; i++) {
    const srv_opstat *o = &s->ops[i];
    if (!o->count || i == EMBER__OP__OP_ERROR) continue;
    json_t *e = json_pack("{s:I, s:I, s:I, s:o}", "count", (json_int_t)o->count, "errors",
                          (json_int_t)o->errors, "keys", (json_int_t)o->keys, "latency_us",
                          lat_json(o->lat));
    json_object_set_new(e, "latency_buckets", lat_buckets(o->lat));
    /* The split of latency_us for the requests that reached the store (pull, push): a
     * client differences the buckets of two snapshots for a window's percentiles. */
    if (ps_hist_count(o->queue)) {
      json_object_set_new(e, "queue_us", lat_json(o->queue));
      json_object_set_new(e, "queue_buckets", lat_buckets(o->queue));
      json_object_set_new(e, "service_us", lat_json(o->svc));
      json_object_set_new(e, "service_buckets", lat_buckets(o->svc));
    }
    json_object_set_new(ops, srv_op_name(i), e);
  }
  json_object_set_new(j, "ops", ops);
  json_object_set_new(j, "malformed", json_integer((json_int_t)s->malformed));
  json_object_set_new(j, "replies_dropped", json_integer((json_int_t)s->dropped));
  json_object_set_new(j, "bytes_in", json_integer((json_int_t)s->bytes_in));
  json_object_set_new(j, "bytes_out", json_integer((json_int_t)s->bytes_out));
  json_t *q = json_pack("{s:I, s:I, s:I, s:I}", "inflight", (json_int_t)s->inflight, "deferred",
                        (json_int_t)s->deferred_now, "held", (json_int_t)s->held, "requests_live",
                        (json_int_t)s->reqs_live);
  json_object_set_new(j, "queue", q);
  json_t *tabs = json_array();
  for (uint32_t id = 1; id <= s->max_table; id++) {
    srv_table *t = s->tables[id];
    if (!t) continue;
    json_array_append_new(
        tabs, json_pack("{s:I, s:s, s:I, s:s, s:I, s:I, s:I, s:I, s:I}", "id", (json_int_t)id,
                        "name", t->spec.name, "dim", (json_int_t)t->spec.dim, "consistency",
                        ps_consistency_name(t->spec.consistency), "staleness", (json_int_t)t->spec.staleness,
                        "num_workers", (json_int_t)t->spec.num_workers, "applied_step",
                        (json_int_t)t->applied, "pulls_deferred", (json_int_t)t->deferred,
                        "step_known", (json_int_t)t->step_init));
  }
  json_object_set_new(j, "tables", tabs);
  if (s->store) {
    ps_store_stats st;
    ps_store_get_stats(s->store, &st);
    json_object_set_new(
        j, "store",
        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "rows_hot",
                  (json_int_t)st.rows_hot, "rows_cold", (json_int_t)st.rows_cold, "hits",
                  (json_int_t)st.hits, "misses", (json_int_t)st.misses, "evictions",
                  (json_int_t)st.evictions, "writebacks", (json_int_t)st.writebacks, "admitted",
                  (json_int_t)st.admitted, "pending_admission_pushes",
                  (json_int_t)st.pending_admission_pushes, "expired", (json_int_t)st.expired,
                  "hot_bytes", (json_int_t)st.hot_bytes, "cold_bytes", (json_int_t)st.cold_bytes));
  }
  if (s->have_ckpt)
    json_object_set_new(j, "last_checkpoint", srv_ckpt_json(s->ckpt_step, s->ckpt_path));
  if (s->have_staged)
    json_object_set_new(j, "prepared_checkpoint", srv_ckpt_json(s->staged_step, s->staged_path));
  if (s->coord) srv_coord_stats(s, j);
  char *out = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(j);
  return out;
}

void srv_stats_publish(ps_server *s) {
  char *js = srv_stats_build(s);
  s->snap_ns = ps_now_ns();
  if (!js) return;
  pthread_mutex_lock(&s->snap_mu);
  char *old = s->snap_json;
  s->snap_json = js;
  pthread_mutex_unlock(&s->snap_mu);
  free(old);
}

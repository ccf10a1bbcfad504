/* ps_server_stats: the shard's statistics as a typed snapshot (ps_server_stats), and the STATS
 * document rendered from it.
 *
 * The main thread fills a snapshot from its own counters (they need no locks: only it writes
 * them) and publishes it every 200 ms under snap_mu; other threads (the metrics endpoint) copy
 * the published one with ps_server_stats_read and render from the copy, so neither side ever
 * parses text back.
 *
 * What runs where, and why: the publish runs on the socket thread (the one that receives
 * pulls), so whatever it costs, a pull arriving meanwhile waits for it. It used to copy all 42
 * histograms (30 KB each) every 200 ms, ~1.3M instructions a call; it now syncs them
 * (ps_hist_sync): only the chunks of 64 buckets written since the last publish are copied,
 * none for an op not seen, so at light load it costs a few octaves of the pull's latency,
 * queue and service histograms (bench/RESULTS-pslat.md). The snapshot's histograms
 * are written by nothing else (ps_hist_sync's invariant). The rest (counters, tables, the
 * store's partition counters and RocksDB properties, the coordinator's members) stays on
 * the socket thread: it is small, and the store and coordinator may be swapped or changed
 * by that thread (a followed checkpoint, a join), which another thread could not see
 * safely. The STATS reply still copies whole histograms into its own scratch: it is a
 * request a client chose to send, and must not disturb the snapshot's sync.
 *
 * Latencies are measured from the arrival of a request to the send of its reply, deferral
 * included, and split at the start of its store work into queue (deferral, held, waiting for
 * a partition thread) and service. The JSON keys and number formats are what
 * clients parse (bench/pslat, tests): change them only with those. */
#include <jemalloc/jemalloc.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ps_op.h"
#include "ps_server_checkpoint_int.h"
#include "ps_server_exactly_once_int.h"
#include "ps_server_int.h"
#include "ps_server_mem_int.h"
#include "ps_server_request_schedule_int.h"
#include "ps_server_replication_int.h"
#include "ps_server_stats_int.h"
#include "ps_time.h"

/* ---------------------------------------------------------------- the snapshot struct */

ps_status ps_server_stats_init(ps_server_stats *st) {
  memset(st, 0, sizeof *st);
  for (int i = 0; i < PS_SERVER_NOPS; i++) {
    ps_server_op_stats *o = &st->ops[i];
    if (!(o->latency = ps_hist_create()) || !(o->queue = ps_hist_create()) ||
        !(o->service = ps_hist_create())) {
      ps_server_stats_free(st);
      return PS_ERR_NOMEM;
    }
  }
  return PS_OK;
}

static void ranks_clear(ps_server_coord_stats *c) {
  for (size_t i = 0; i < c->nranks; i++) free(c->ranks[i].name);
  c->nranks = 0;
}

void ps_server_stats_free(ps_server_stats *st) {
  if (!st) return;
  for (int i = 0; i < PS_SERVER_NOPS; i++) {
    ps_hist_destroy(&st->ops[i].latency);
    ps_hist_destroy(&st->ops[i].queue);
    ps_hist_destroy(&st->ops[i].service);
  }
  free(st->tables);
  ranks_clear(&st->coord);
  free(st->coord.ranks);
  memset(st, 0, sizeof *st);
}

static bool reserve(void **p, size_t *cap, size_t n, size_t elem) {
  return srv_grow(p, cap, n, elem, 16);
}

static void hist_copy(ps_hist *dst, const ps_hist *src) {
  ps_hist_reset(dst);
  ps_hist_merge(dst, src);
}

/* dst = src, reusing dst's allocations (both initialised). On NOMEM the lists are cut short. */
static void stats_copy(ps_server_stats *dst, const ps_server_stats *src) {
  ps_server_stats keep = *dst; /* dst's own allocations */
  ranks_clear(&dst->coord);
  *dst = *src;
  dst->tables = keep.tables;
  dst->tables_cap = keep.tables_cap;
  dst->coord.ranks = keep.coord.ranks;
  dst->coord.ranks_cap = keep.coord.ranks_cap;
  dst->coord.nranks = 0;
  for (int i = 0; i < PS_SERVER_NOPS; i++) {
    dst->ops[i] = keep.ops[i];
    dst->ops[i].count = src->ops[i].count;
    dst->ops[i].errors = src->ops[i].errors;
    dst->ops[i].keys = src->ops[i].keys;
    hist_copy(dst->ops[i].latency, src->ops[i].latency);
    hist_copy(dst->ops[i].queue, src->ops[i].queue);
    hist_copy(dst->ops[i].service, src->ops[i].service);
  }
  if (!reserve((void **)&dst->tables, &dst->tables_cap, src->ntables, sizeof *dst->tables))
    dst->ntables = 0;
  else if (src->ntables)
    memcpy(dst->tables, src->tables, src->ntables * sizeof *dst->tables);
  if (reserve((void **)&dst->coord.ranks, &dst->coord.ranks_cap, src->coord.nranks,
              sizeof *dst->coord.ranks)) {
    for (size_t i = 0; i < src->coord.nranks; i++) {
      char *name = strdup(src->coord.ranks[i].name);
      if (!name) break;
      dst->coord.ranks[dst->coord.nranks++] = (ps_server_rank){src->coord.ranks[i].rank, name};
    }
  }
}

/* ---------------------------------------------------------------- filling and publishing */

/* Everything but the histograms. */
static void fill_counters(ps_server *s, ps_server_stats *out) {
  out->shard = s->opt.shard;
  out->shards = s->opt.shards;
  out->threads = s->nthreads;
  out->uptime_s = ps_ns_to_s(ps_now_ns() - s->started_ns);
  for (int i = 0; i < SRV_NOPS; i++) {
    const srv_opstat *o = &s->ops[i];
    ps_server_op_stats *d = &out->ops[i];
    d->count = o->count;
    d->errors = o->errors;
    d->keys = o->keys;
  }
  out->traffic = s->traffic;
  out->inflight = s->inflight;
  out->deferred = s->deferred_now;
  out->held = s->held;
  out->requests_live = s->reqs_live;
  srv_mem_stats(s, out);
  srv_once_stats(s, &out->exo_clients, &out->exo_duplicates, &out->exo_unknown);
  srv_repl_stats(s, out);
  out->ntables = 0;
  for (uint32_t id = 1; id <= s->max_table; id++) {
    const srv_table *t = s->tables[id];
    if (!t) continue;
    if (!reserve((void **)&out->tables, &out->tables_cap, out->ntables + 1, sizeof *out->tables))
      break;
    out->tables[out->ntables++] = (ps_server_table_stats){
        .id = id, .spec = t->spec, .applied_step = t->applied, .pulls_deferred = t->deferred,
        .rows_refreshed = t->refreshed, .refreshes_full = t->refresh_full,
        .step_known = t->step_init};
  }
  out->has_store = s->store != NULL;
  if (s->store) ps_store_get_stats(s->store, &out->store);
  out->last_ckpt = s->last;
  out->prepared_ckpt = s->staged;
  out->has_coord = s->coord != NULL;
  if (s->coord) srv_coord_get_stats(s->coord, &out->coord);
}

/* Fills out (initialised) from the server's state. */
static void stats_fill(ps_server *s, ps_server_stats *out) {
  fill_counters(s, out);
  for (int i = 0; i < SRV_NOPS; i++) {
    const srv_opstat *o = &s->ops[i];
    ps_server_op_stats *d = &out->ops[i];
    hist_copy(d->latency, o->lat);
    hist_copy(d->queue, o->queue);
    hist_copy(d->service, o->svc);
  }
}

/* The published snapshot and the STATS reply's scratch copy. */
struct srv_snapshot {
  pthread_mutex_t mu;
  ps_server_stats snap;    /* the published snapshot, under mu */
  ps_server_stats scratch; /* the STATS reply's, main thread only */
  uint64_t ns;             /* when it was published */
  size_t buckets;          /* histogram buckets the last publish copied (tests, bench) */
};

ps_status srv_stats_init(ps_server *s) {
  srv_snapshot *p = calloc(1, sizeof *p);
  if (!p) return PS_ERR_NOMEM;
  pthread_mutex_init(&p->mu, NULL);
  s->snapshot = p;
  if (ps_server_stats_init(&p->snap) != PS_OK || ps_server_stats_init(&p->scratch) != PS_OK)
    return PS_ERR_NOMEM;
  return PS_OK;
}

void srv_stats_free(ps_server *s) {
  srv_snapshot *p = s->snapshot;
  if (!p) return;
  ps_server_stats_free(&p->snap);
  ps_server_stats_free(&p->scratch);
  pthread_mutex_destroy(&p->mu);
  free(p);
  s->snapshot = NULL;
}

bool srv_stats_due(const ps_server *s, uint64_t now) {
  return now - s->snapshot->ns > 200000000ull;
}

size_t srv_stats_buckets(const ps_server *s) { return s->snapshot->buckets; }

char *srv_stats_json(ps_server *s) {
  stats_fill(s, &s->snapshot->scratch);
  return ps_server_stats_to_json(&s->snapshot->scratch);
}

void srv_stats_publish(ps_server *s) {
  srv_snapshot *p = s->snapshot;
  p->ns = ps_now_ns();
  size_t buckets = 0;
  pthread_mutex_lock(&p->mu);
  fill_counters(s, &p->snap);
  /* Only the snapshot is ever synced from these histograms (the invariant ps_hist_sync
   * needs): the buckets written since the last publish, none for an op not seen. */
  for (int i = 0; i < SRV_NOPS; i++) {
    srv_opstat *o = &s->ops[i];
    ps_server_op_stats *d = &p->snap.ops[i];
    buckets += ps_hist_sync(d->latency, o->lat);
    buckets += ps_hist_sync(d->queue, o->queue);
    buckets += ps_hist_sync(d->service, o->svc);
  }
  pthread_mutex_unlock(&p->mu);
  p->buckets = buckets;
}

ps_status ps_server_stats_read(ps_server *s, ps_server_stats *out) {
  if (!s || !out || !out->ops[0].latency) return PS_ERR_INVALID;
  pthread_mutex_lock(&s->snapshot->mu);
  stats_copy(out, &s->snapshot->snap);
  pthread_mutex_unlock(&s->snapshot->mu);
  return PS_OK;
}

/* ---------------------------------------------------------------- the STATS document */

static json_t *lat_buckets(const ps_hist *h) {
  /* Non-empty ps_hist buckets as [index, count] pairs: what a client (ps_bench) differences
   * between two snapshots for a window's percentiles. */
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

bool ps_server_stats_op_listed(const ps_server_stats *st, int op) {
  return op > 0 && op < PS_SERVER_NOPS && op != EMBER__OP__OP_ERROR && st->ops[op].count;
}

static json_t *ops_json(const ps_server_stats *st) {
  json_t *ops = json_object();
  for (int i = 1; i < PS_SERVER_NOPS; i++) {
    const ps_server_op_stats *o = &st->ops[i];
    if (!ps_server_stats_op_listed(st, i)) continue;
    json_t *e = json_pack("{s:I, s:I, s:I, s:o}", "count", (json_int_t)o->count, "errors",
                          (json_int_t)o->errors, "keys", (json_int_t)o->keys, "latency_us",
                          lat_json(o->latency));
    json_object_set_new(e, "latency_buckets", lat_buckets(o->latency));
    /* The split of latency_us for the requests that reached the store (pull, push). */
    if (ps_hist_count(o->queue)) {
      json_object_set_new(e, "queue_us", lat_json(o->queue));
      json_object_set_new(e, "queue_buckets", lat_buckets(o->queue));
      json_object_set_new(e, "service_us", lat_json(o->service));
      json_object_set_new(e, "service_buckets", lat_buckets(o->service));
    }
    json_object_set_new(ops, ps_server_op_name(i), e);
  }
  return ops;
}

static json_t *tables_json(const ps_server_stats *st) {
  json_t *tabs = json_array();
  for (size_t i = 0; i < st->ntables; i++) {
    const ps_server_table_stats *t = &st->tables[i];
    json_array_append_new(
        tabs, json_pack("{s:I, s:s, s:I, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "id",
                        (json_int_t)t->id,
                        "name", t->spec.name, "dim", (json_int_t)t->spec.dim, "consistency",
                        ps_consistency_name(t->spec.consistency), "staleness",
                        (json_int_t)t->spec.staleness, "num_workers",
                        (json_int_t)t->spec.num_workers, "applied_step",
                        (json_int_t)t->applied_step, "pulls_deferred",
                        (json_int_t)t->pulls_deferred, "rows_refreshed",
                        (json_int_t)t->rows_refreshed, "refreshes_full",
                        (json_int_t)t->refreshes_full, "step_known", (json_int_t)t->step_known));
  }
  return tabs;
}

/* The allocator's huge-page mode as jemalloc applies it (opt.thp: "always" from ps-server's
 * malloc_conf unless MALLOC_CONF says otherwise; "default", "never" or "disabled" where the
 * build or the environment has no THP), so an operator sees what the process runs with. */
static json_t *allocator_json(void) {
  const char *thp = NULL;
  size_t sz = sizeof thp;
  if (mallctl("opt.thp", &thp, &sz, NULL, 0) != 0 || !thp) thp = "unknown";
  return json_pack("{s:s, s:s}", "name", "jemalloc", "thp", thp);
}

static json_t *store_json(const ps_store_stats *st) {
  json_t *j = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "rows_hot",
                   (json_int_t)st->rows_hot, "rows_cold", (json_int_t)st->rows_cold, "hits",
                   (json_int_t)st->hits, "misses", (json_int_t)st->misses, "evictions",
                   (json_int_t)st->evictions, "writebacks", (json_int_t)st->writebacks,
                   "admitted", (json_int_t)st->admitted, "pending_admission_pushes",
                   (json_int_t)st->pending_admission_pushes, "expired", (json_int_t)st->expired,
                   "hot_bytes", (json_int_t)st->hot_bytes, "cold_bytes",
                   (json_int_t)st->cold_bytes);
  if (j) { /* the write-back state (a full disk: ps_store.h) */
    json_object_set_new(j, "unwritten_bytes", json_integer((json_int_t)st->unwritten_bytes));
    json_object_set_new(j, "write_failures", json_integer((json_int_t)st->write_failures));
    json_object_set_new(j, "writes_failing", json_boolean(st->writes_failing != 0));
    json_object_set_new(j, "prefetched", json_integer((json_int_t)st->prefetched));
  }
  return j;
}

static json_t *coord_json(const ps_server_coord_stats *c) {
  json_t *m = json_array();
  for (size_t i = 0; i < c->nranks; i++)
    json_array_append_new(m, json_pack("{s:i, s:s}", "rank", (int)c->ranks[i].rank, "name",
                                       c->ranks[i].name));
  return json_pack("{s:I, s:I, s:I, s:o, s:I, s:I, s:I, s:I}", "world", (json_int_t)c->world,
                   "members", (json_int_t)c->members, "joins", (json_int_t)c->joins, "ranks", m,
                   "kv_keys", (json_int_t)c->kv_keys, "kv_bytes", (json_int_t)c->kv_bytes,
                   "kv_waiting", (json_int_t)c->kv_waiting, "barriers_open",
                   (json_int_t)c->barriers_open);
}

char *ps_server_stats_to_json(const ps_server_stats *st) {
  json_t *j = json_object();
  if (!j) return NULL;
  json_object_set_new(j, "shard", json_integer(st->shard));
  json_object_set_new(j, "shards", json_integer(st->shards));
  json_object_set_new(j, "threads", json_integer(st->threads));
  json_object_set_new(j, "uptime_s", json_real(st->uptime_s));
  json_object_set_new(j, "ops", ops_json(st));
  const ps_server_traffic *tr = &st->traffic;
  json_object_set_new(j, "malformed", json_integer((json_int_t)tr->malformed));
  json_object_set_new(j, "replies_dropped", json_integer((json_int_t)tr->replies_dropped));
  json_object_set_new(j, "bytes_in", json_integer((json_int_t)tr->bytes_in));
  json_object_set_new(j, "bytes_out", json_integer((json_int_t)tr->bytes_out));
  json_object_set_new(j, "refused_memory", json_integer((json_int_t)tr->refused_memory));
  json_t *q = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "inflight", (json_int_t)st->inflight,
                        "deferred", (json_int_t)st->deferred, "held", (json_int_t)st->held,
                        "requests_live", (json_int_t)st->requests_live, "parked",
                        (json_int_t)st->parked, "bytes_in_flight",
                        (json_int_t)st->bytes_in_flight);
  json_object_set_new(j, "queue", q);
  json_object_set_new(j, "tables", tables_json(st));
  if (st->has_store) { /* the allocator beside the rows it holds */
    json_object_set_new(j, "store", store_json(&st->store));
    json_object_set_new(j, "allocator", allocator_json());
  }
  if (st->last_ckpt.have)
    json_object_set_new(j, "last_checkpoint", srv_ckpt_json(&st->last_ckpt));
  if (st->prepared_ckpt.have)
    json_object_set_new(j, "prepared_checkpoint", srv_ckpt_json(&st->prepared_ckpt));
  if (st->has_coord) json_object_set_new(j, "coordinator", coord_json(&st->coord));
  if (st->exo_clients || st->exo_duplicates || st->exo_unknown) /* only once a client used it */
    json_object_set_new(j, "exactly_once",
                        json_pack("{s:I, s:I, s:I}", "clients", (json_int_t)st->exo_clients,
                                  "duplicates", (json_int_t)st->exo_duplicates, "unknown",
                                  (json_int_t)st->exo_unknown));
  if (st->replicas > 1)
    json_object_set_new(
        j, "replication",
        json_pack("{s:i, s:i, s:s, s:i, s:I, s:i, s:I, s:I, s:I, s:I, s:I}", "replica",
                  (int)st->replica, "replicas", (int)st->replicas, "role",
                  st->repl_role ? st->repl_role : "?", "primary", (int)st->repl_primary,
                  "epoch", (json_int_t)st->repl_epoch, "live", (int)st->repl_live,
                  "forwarded", (json_int_t)st->repl_forwarded, "dropped",
                  (json_int_t)st->repl_dropped, "promotions", (json_int_t)st->repl_promotions,
                  "refused", (json_int_t)st->repl_refused, "catchups",
                  (json_int_t)st->repl_catchups));
  char *out = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(j);
  return out;
}

/* Unit: the server's typed statistics (ps_server_stats). The STATS document rendered from a
 * hand-filled snapshot is compared byte for byte with the format clients parse (keys, order,
 * number formats); an in-process server (no socket) publishes a snapshot at once that
 * ps_server_stats_read copies, and its STATS reply counts the requests fed to it. The
 * periodic publish (on the socket thread) copies only the histogram buckets written since the
 * last one (ps_hist_sync), and its snapshot still equals a full copy of the live histograms. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ps_hist.h"
#include "ps_log.h"
#include "ps_server.h"
#include "ps_server_int.h"
#include "ps_server_stats_int.h"
#include "ps_wire.h"
#include "pt_cluster.h"

static void test_json_format(void **state) {
  (void)state;
  ps_server_stats st;
  assert_int_equal(ps_server_stats_init(&st), PS_OK);
  st.shard = 1;
  st.shards = 2;
  st.threads = 4;
  st.uptime_s = 1.5;
  ps_server_op_stats *pull = &st.ops[EMBER__OP__OP_PULL];
  pull->count = 2;
  pull->keys = 10;
  ps_hist_record_n(pull->latency, 100, 2); /* 100 ns has a bucket of its own */
  st.ops[EMBER__OP__OP_ERROR].count = 5;   /* never listed */
  st.traffic.malformed = 1;
  st.held = 3;
  st.last_ckpt = (ps_server_ckpt){.have = true, .step = 7, .path = "/ck"};
  char *js = ps_server_stats_to_json(&st);
  assert_non_null(js);
  assert_string_equal(
      js,
      "{\"bytes_in\":0,\"bytes_out\":0,\"last_checkpoint\":{\"path\":\"/ck\",\"step\":7},"
      "\"malformed\":1,\"ops\":{\"pull\":{\"count\":2,\"errors\":0,\"keys\":10,"
      "\"latency_buckets\":[[100,2]],\"latency_us\":{\"max\":0.10000000000000001,"
      "\"mean\":0.10000000000000001,\"p50\":0.10000000000000001,\"p90\":0.10000000000000001,"
      "\"p99\":0.10000000000000001,\"p999\":0.10000000000000001}}},"
      "\"queue\":{\"bytes_in_flight\":0,\"deferred\":0,\"held\":3,\"inflight\":0,"
      "\"parked\":0,\"requests_live\":0},\"refused_memory\":0,\"replies_dropped\":0,\"shard\":1,\"shards\":2,\"tables\":[],\"threads\":4,"
      "\"uptime_s\":1.5}");
  free(js);
  assert_true(ps_server_stats_op_listed(&st, EMBER__OP__OP_PULL));
  assert_false(ps_server_stats_op_listed(&st, EMBER__OP__OP_ERROR));
  assert_false(ps_server_stats_op_listed(&st, EMBER__OP__OP_PUSH));
  ps_server_stats_free(&st);
  ps_server_stats_free(&st); /* twice is harmless */
}

typedef struct sink_buf {
  char stats[1 << 16];
  int replies;
} sink_buf;

static void sink(void *ctx, const void *const *frames, const size_t *sizes, size_t n) {
  sink_buf *b = ctx;
  assert_true(n >= 1);
  b->replies++;
  Ember__Header *h = ember__header__unpack(NULL, sizes[0], frames[0]);
  assert_non_null(h);
  if (h->op == EMBER__OP__OP_STATS && h->blob.len < sizeof b->stats) {
    memcpy(b->stats, h->blob.data, h->blob.len);
    b->stats[h->blob.len] = 0;
  }
  ember__header__free_unpacked(h, NULL);
}

static void feed(ps_server *s, Ember__Op op, sink_buf *b) {
  Ember__Header h;
  ps_wire_header_init(&h, op);
  size_t n = 0;
  uint8_t *buf = ps_wire_header_pack(&h, &n);
  assert_non_null(buf);
  const void *f[1] = {buf};
  size_t z[1] = {n};
  assert_int_equal(ps_server_feed(s, f, z, 1, sink, b), PS_OK);
  free(buf);
}

/* A one-shard in-process server (no socket) over a fresh data dir (dir: 512 bytes). */
static ps_server *server_new(const char *name, char *dir) {
  pt_tmpdir(name, dir);
  ps_server_options o = {.shard = 0, .shards = 1, .data_dir = dir, .cache_bytes = 8 << 20};
  ps_server *s = NULL;
  assert_int_equal(ps_server_create(&o, &s, NULL), PS_OK);
  return s;
}

static void test_in_process(void **state) {
  (void)state;
  char dir[512];
  ps_server *s = server_new("stats-unit", dir);
  ps_server_stats st;
  assert_int_equal(ps_server_stats_init(&st), PS_OK);
  assert_int_equal(ps_server_stats_read(s, &st), PS_OK); /* published by create */
  assert_int_equal(st.shards, 1);
  assert_true(st.has_store);
  assert_true(st.has_coord); /* shard 0 hosts the coordinator */
  assert_int_equal(st.ntables, 0);
  static sink_buf b;
  feed(s, EMBER__OP__OP_PING, &b);
  feed(s, EMBER__OP__OP_PING, &b);
  feed(s, EMBER__OP__OP_STATS, &b);
  assert_int_equal(b.replies, 3);
  json_t *doc = json_loads(b.stats, 0, NULL);
  assert_non_null(doc);
  json_t *ping = json_object_get(json_object_get(doc, "ops"), "ping");
  assert_int_equal(json_integer_value(json_object_get(ping, "count")), 2);
  assert_non_null(json_object_get(doc, "coordinator"));
  assert_non_null(json_object_get(doc, "store"));
  json_decref(doc);
  ps_server_stats_free(&st);
  ps_server_destroy(&s);
  pt_rmrf(dir);
}

/* a == b, every bucket and summary (b: the reference, a full copy). */
static void hist_equal(const ps_hist *a, const ps_hist *b) {
  assert_int_equal(ps_hist_count(a), ps_hist_count(b));
  assert_int_equal(ps_hist_min(a), ps_hist_min(b));
  assert_int_equal(ps_hist_max(a), ps_hist_max(b));
  assert_true(ps_hist_mean(a) == ps_hist_mean(b));
  assert_memory_equal(ps_hist_buckets(a), ps_hist_buckets(b),
                      ps_hist_nbuckets() * sizeof(uint64_t));
}

static void test_hist_sync(void **state) {
  (void)state;
  ps_hist *src = ps_hist_create(), *dst = ps_hist_create(), *ref = ps_hist_create();
  assert_true(src && dst && ref);
  ps_hist_record(dst, 5); /* a stale copy: the first sync overwrites all of it */
  assert_int_equal(ps_hist_sync(dst, src), ps_hist_nbuckets());
  hist_equal(dst, src);
  assert_int_equal(ps_hist_sync(dst, src), 0); /* nothing new */
  ps_hist_record(src, 100);                    /* buckets 64..127: one chunk */
  ps_hist_record(src, 103);
  assert_int_equal(ps_hist_sync(dst, src), 64);
  hist_equal(dst, src);
  ps_hist_record_n(src, 1000000, 3); /* [2^19, 2^20): another chunk, and a far one: */
  ps_hist_record(src, 1ull << 40);   /* the chunks between are not copied */
  assert_int_equal(ps_hist_sync(dst, src), 128);
  hist_equal(dst, src);
  srand(7);
  for (int round = 0; round < 50; round++) {
    int n = rand() % 20;
    for (int i = 0; i < n; i++) ps_hist_record(src, (uint64_t)rand() * (uint64_t)(rand() % 4096));
    if (round == 20) ps_hist_reset(src); /* a reset must reach the copy */
    if (round == 30) ps_hist_merge(src, ref);
    size_t copied = ps_hist_sync(dst, src);
    if (!n && round != 20 && round != 30) assert_int_equal(copied, 0);
    ps_hist_reset(ref);
    ps_hist_merge(ref, src); /* the full copy */
    hist_equal(dst, ref);
  }
  ps_hist_destroy(&src);
  ps_hist_destroy(&dst);
  ps_hist_destroy(&ref);
}

static void test_publish_cost(void **state) {
  (void)state;
  char dir[512];
  ps_server *s = server_new("stats-publish", dir);
  srv_stats_publish(s); /* nothing happened since create's: no histogram is copied */
  assert_int_equal(srv_stats_buckets(s), 0);
  static sink_buf b;
  feed(s, EMBER__OP__OP_PING, &b); /* one latency: one chunk of 64 buckets */
  srv_stats_publish(s);
  assert_int_equal(srv_stats_buckets(s), 64);
  for (int i = 0; i < 20; i++) feed(s, i % 2 ? EMBER__OP__OP_PING : EMBER__OP__OP_STATS, &b);
  srv_stats_publish(s);
  assert_true(srv_stats_buckets(s) > 0);
  assert_true(srv_stats_buckets(s) < 2 * ps_hist_nbuckets()); /* 42 histograms before */
  ps_server_stats st;
  assert_int_equal(ps_server_stats_init(&st), PS_OK);
  assert_int_equal(ps_server_stats_read(s, &st), PS_OK);
  assert_int_equal(st.ops[EMBER__OP__OP_PING].count, 11);
  assert_int_equal(ps_hist_count(st.ops[EMBER__OP__OP_PING].latency), 11);
  for (int i = 0; i < SRV_NOPS; i++) {
    hist_equal(st.ops[i].latency, s->ops[i].lat);
    hist_equal(st.ops[i].queue, s->ops[i].queue);
    hist_equal(st.ops[i].service, s->ops[i].svc);
  }
  ps_server_stats_free(&st);
  ps_server_destroy(&s);
  pt_rmrf(dir);
}

int main(void) {
  ps_log_set_level(PS_LOG_WARN);
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_json_format),
                                     cmocka_unit_test(test_in_process),
                                     cmocka_unit_test(test_hist_sync),
                                     cmocka_unit_test(test_publish_cost)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}

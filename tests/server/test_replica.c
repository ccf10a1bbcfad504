/* Integration: replicated shards (issue 23). One shard as 2 replicas (ps-server --replica R
 * --replicas 2 --peers 'U0|U1'), clients given the shard as 'U0|U1'.
 *   - forwarding: three clients push to a sync Adagrad table (3 workers, so the sync buffer's
 *     sum depends on the order the pushes arrive in) and one to an async one; afterwards both
 *     replicas are stopped and each is started alone on its own data dir: every row (and, through
 *     one more push of g = 1, every accumulator) pulled from replica 0 equals replica 1's bit for
 *     bit, and the async rows equal Adagrad by hand (each push applied once on each replica);
 *   - a client that talks to the backup alone is refused, naming the primary;
 *   - failover: a client pushes to an async Adagrad table, replica 0 (the primary) is killed
 *     with SIGKILL half-way; every push succeeds, the client moved to replica 1 once, replica 1
 *     promoted itself, and the rows equal Adagrad by hand (no push lost or applied twice);
 *   - the coordinator replicated: two ranks JOIN and a key is set through the primary, which
 *     is killed (SIGKILL); through the client's failover the promoted replica returns the key,
 *     a 2-member BARRIER completes (one rank arrived before the kill), and a JOIN of an existing
 *     rank gets the answer it got before;
 *   - catch-up: replica 0 restarted on its data dir catches up while pushes go on, is a backup
 *     again (replica 1 counts the catch-up, both live), and after more pushes both replicas'
 *     rows and accumulators are identical;
 *   - the backup killed: the primary drops it and goes on (no push fails, the client stays),
 *     and the backup restarted catches up from the primary the same way.
 * With EMBER_TEST_ROW_TYPE=f16 (test_server_replica_f16, issue 33) the tables store f16 rows:
 * forwarding and catch-up run again, the replicas' rows still equal bit for bit, every value
 * is an f16 (stored as one, not widened), and the async rows equal an f32 Adagrad rounded
 * once to f16 per push, exactly. */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "ps_client.h"
#include "ps_curve.h"
#include "ps_wire_half.h"
#include "pt_cluster.h"

#define DIM 8
#define NKEYS 64
#define LR 0.1
#define A0 0.1
#define EPS 1e-8
#define NW 3 /* workers of the sync table */

static uint64_t key(int k) { return 1000003ull * (uint64_t)k + 17; }
/* The gradient of worker w's push t for key k, element j: +-0.1 .. +-1.7 in odd steps, so
 * that sums in another order round differently. */
static double gval(int w, int k, int t, int j) {
  return (((k * 7 + t * 3 + j * 5 + w * 11) % 17) - 8.3) * 0.1 + 0.0123 * w;
}

typedef struct pair {
  pt_server s[2];
  char dir[2][512], peers[160];
} pair;

/* --curve-secret and --curve-clients of every replica started here (NULL: no CURVE). */
static const char *g_curve_args[5];

static void start_pair(pair *p, const char *tag) {
  int port[2] = {pt_free_port(), pt_free_port()};
  while (port[1] == port[0]) port[1] = pt_free_port();
  snprintf(p->peers, sizeof p->peers, "tcp://127.0.0.1:%d|tcp://127.0.0.1:%d", port[0],
           port[1]);
  for (int r = 0; r < 2; r++) {
    pt_tmpdir(tag, p->dir[r]);
    char rs[8];
    snprintf(rs, sizeof rs, "%d", r);
    const char *extra[] = {"--replica", rs, "--replicas", "2", "--peers", p->peers,
                           "--failover-ms", "1000", g_curve_args[0], g_curve_args[1],
                           g_curve_args[2], g_curve_args[3], NULL};
    assert_true(pt_start_args(&p->s[r], 0, 1, p->dir[r], port[r], 2, extra));
  }
}

static void finish_pair(pair *p) {
  for (int r = 0; r < 2; r++) {
    if (p->s[r].pid) pt_stop(&p->s[r], SIGKILL, 5000);
    pt_rmrf(p->dir[r]);
    char log[600];
    snprintf(log, sizeof log, "%s.log", p->dir[r]);
    if (!getenv("KEEP_LOGS")) unlink(log);
  }
}

static ps_client *client_of(const char *urls, uint32_t rank) {
  ps_client_options o;
  pt_client_options(&o, 20000);
  o.rank = rank;
  ps_client *c = NULL;
  ps_error e;
  if (ps_client_create_list(urls, &o, &c, &e) != PS_OK) fail_msg("client: %s", e.msg);
  return c;
}

static ps_row_type g_row_type = PS_ROW_F32; /* EMBER_TEST_ROW_TYPE */

static ps_table_spec spec_of(uint32_t id, ps_consistency cons, uint32_t workers) {
  ps_table_spec t = pt_adagrad_spec(id, id == 1 ? "sync" : "async", DIM, LR, EPS, A0, cons,
                                    workers);
  t.row_type = g_row_type;
  return t;
}

static void declare(ps_client *c, uint32_t id, ps_consistency cons, uint32_t workers) {
  ps_table_spec t = spec_of(id, cons, workers);
  ps_error e;
  if (ps_client_declare(c, &t, &e) != PS_OK) fail_msg("declare %u: %s", id, e.msg);
}

static ps_status push(ps_client *c, uint32_t table, int w, int t, double g1, ps_error *e) {
  uint64_t k[NKEYS];
  float g[NKEYS * DIM];
  for (int i = 0; i < NKEYS; i++) {
    k[i] = key(i);
    for (int j = 0; j < DIM; j++) g[i * DIM + j] = (float)(g1 ? g1 : gval(w, i, t, j));
  }
  return ps_client_push(c, table, (uint64_t)t, k, NKEYS, g, e);
}

static void pull(ps_client *c, uint32_t table, uint64_t step, float *out) {
  uint64_t k[NKEYS];
  for (int i = 0; i < NKEYS; i++) k[i] = key(i);
  ps_error e;
  if (ps_client_pull(c, table, step, k, NKEYS, out, &e) != PS_OK) fail_msg("pull: %s", e.msg);
}

static json_t *stats(ps_client *c) {
  char *js = NULL;
  ps_error e;
  if (ps_client_stats(c, 0, &js, &e) != PS_OK) fail_msg("stats: %s", e.msg);
  json_t *doc = json_loads(js, 0, NULL);
  free(js);
  assert_non_null(doc);
  return doc;
}

static json_int_t repl_int(json_t *doc, const char *field) {
  return json_integer_value(json_object_get(json_object_get(doc, "replication"), field));
}

static const char *repl_str(json_t *doc, const char *field) {
  return json_string_value(json_object_get(json_object_get(doc, "replication"), field));
}

/* Adagrad by hand (double) of worker 0's pushes 0 <= t < T, from zero rows. */
static void reference(double w[NKEYS][DIM], double a[NKEYS][DIM], int T) {
  for (int i = 0; i < NKEYS; i++)
    for (int j = 0; j < DIM; j++) {
      w[i][j] = 0;
      a[i][j] = A0;
      for (int t = 0; t < T; t++) {
        double g = (float)gval(0, i, t, j);
        a[i][j] += g * g;
        w[i][j] -= LR * g / (sqrt(a[i][j]) + EPS);
      }
    }
}

/* The same in the store's f32 operations with an f16 row: widened, updated, rounded once (with
 * ps_wire_f32_to_f16, which tests/proto/test_half.c holds to numpy's float16). Exact. */
static void check_reference_f16(const float *got, int T) {
  for (int i = 0; i < NKEYS; i++)
    for (int j = 0; j < DIM; j++) {
      float w = 0, a = (float)A0;
      for (int t = 0; t < T; t++) {
        float g = (float)gval(0, i, t, j);
        uint16_t h;
        a = a + g * g;
        float den = sqrtf(a) + (float)EPS;
        w = w + -(float)LR * (g / den);
        ps_wire_f32_to_f16(&w, &h, 1);
        ps_wire_f16_to_f32(&h, &w, 1);
      }
      if (memcmp(&got[i * DIM + j], &w, sizeof w) != 0)
        fail_msg("key %d [%d]: f16 row %.7f, reference %.7f", i, j, got[i * DIM + j], w);
    }
}

static void check_reference(const float *got, int T) {
  if (g_row_type == PS_ROW_F16) {
    check_reference_f16(got, T);
    return;
  }
  static double w[NKEYS][DIM], a[NKEYS][DIM];
  reference(w, a, T);
  for (int i = 0; i < NKEYS; i++)
    for (int j = 0; j < DIM; j++)
      if (fabs(got[i * DIM + j] - w[i][j]) > 1e-5 + 1e-4 * fabs(w[i][j]))
        fail_msg("key %d [%d]: weight %.7f, reference %.7f", i, j, got[i * DIM + j], w[i][j]);
}

/* Replica r's data dir served alone (no replication): its rows of both tables, then again
 * after one push of g = 1 (which moves each weight by -lr / (sqrt(a + 1) + eps): the
 * accumulators compared through the rows). */
static void rows_alone(pair *p, int r, int T, float *out, bool with_sync) {
  pt_server s;
  assert_true(pt_start_args(&s, 0, 1, p->dir[r], 0, 2, g_curve_args));
  ps_client *c = client_of(s.url, 0);
  if (with_sync) declare(c, 1, PS_CONS_SYNC, NW);
  declare(c, 2, PS_CONS_ASYNC, 1);
  const size_t n = NKEYS * DIM;
  memset(out, 0, 4 * n * sizeof *out);
  if (with_sync) pull(c, 1, (uint64_t)T, out);
  pull(c, 2, 0, out + n);
  ps_error e;
  if ((with_sync && push(c, 1, 0, T, 1.0, &e) != PS_OK) || push(c, 2, 0, 0, 1.0, &e) != PS_OK)
    fail_msg("probe push: %s", e.msg);
  for (uint32_t w = 0; with_sync && w < NW; w++) {
    ps_client_set_rank(c, w);
    if (ps_client_step(c, 1, (uint64_t)T, &e) != PS_OK) fail_msg("probe step: %s", e.msg);
  }
  if (with_sync) pull(c, 1, (uint64_t)T + 1, out + 2 * n);
  pull(c, 2, 0, out + 3 * n);
  ps_client_destroy(&c);
  assert_int_equal(pt_stop(&s, SIGTERM, 10000), 0);
}

/* Every value of both replicas' rows_alone equal, bit for bit (and, for f16 rows, an f16). */
static void same_rows(const float *x, const float *y, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint16_t h;
    float back;
    ps_wire_f32_to_f16(&x[i], &h, 1);
    ps_wire_f16_to_f32(&h, &back, 1);
    if (g_row_type == PS_ROW_F16 && memcmp(&back, &x[i], sizeof back) != 0)
      fail_msg("row value %zu: %.9g is not an f16", i, x[i]);
    if (memcmp(&x[i], &y[i], sizeof *x) != 0)
      fail_msg("row value %zu (table %zu, key %zu): replica 0 %.9g, replica 1 %.9g", i,
               i / (NKEYS * DIM) % 2 + 1, i % (NKEYS * DIM) / DIM, x[i], y[i]);
  }
}

static void test_forward(void **st) {
  (void)st;
  pair p;
  start_pair(&p, "repl-fwd");
  enum { T = 12 };
  ps_client *c[NW];
  for (int w = 0; w < NW; w++) {
    c[w] = client_of(p.peers, (uint32_t)w);
    declare(c[w], 1, PS_CONS_SYNC, NW);
  }
  declare(c[0], 2, PS_CONS_ASYNC, 1);
  ps_error e;
  for (int t = 0; t < T; t++) {
    /* The workers' pushes of step t in an order that changes with t. */
    ps_client_req *rq[NW];
    for (int k = 0; k < NW; k++) {
      int w = (k + t) % NW;
      uint64_t keys[NKEYS];
      static float g[NW][NKEYS * DIM];
      for (int i = 0; i < NKEYS; i++) {
        keys[i] = key(i);
        for (int j = 0; j < DIM; j++) g[w][i * DIM + j] = (float)gval(w, i, t, j);
      }
      if (ps_client_push_start(c[w], 1, (uint64_t)t, keys, NKEYS, true, g[w], &rq[w], &e) != PS_OK)
        fail_msg("push start: %s", e.msg);
    }
    for (int w = 0; w < NW; w++)
      if (ps_client_wait(c[w], &rq[w], &e) != PS_OK) fail_msg("push %d: %s", t, e.msg);
    for (int w = 0; w < NW; w++)
      if (ps_client_step(c[w], 1, (uint64_t)t, &e) != PS_OK) fail_msg("step: %s", e.msg);
    if (push(c[0], 2, 0, t, 0, &e) != PS_OK) fail_msg("async push %d: %s", t, e.msg);
  }
  float rows[NKEYS * DIM];
  pull(c[0], 1, T, rows); /* waits for step T - 1's apply */
  json_t *d0 = stats(c[0]);
  assert_string_equal(repl_str(d0, "role"), "primary");
  assert_true(repl_int(d0, "forwarded") >= (json_int_t)(T * (2 * NW + 1)));
  assert_int_equal(repl_int(d0, "live"), 3);
  json_decref(d0);
  for (int w = 0; w < NW; w++) ps_client_destroy(&c[w]);
  ps_client *b = client_of(p.s[1].url, 0);
  json_t *d1 = stats(b);
  assert_string_equal(repl_str(d1, "role"), "backup");
  json_decref(d1);
  ps_client_destroy(&b);
  for (int r = 0; r < 2; r++) assert_int_equal(pt_stop(&p.s[r], SIGTERM, 10000), 0);

  const size_t n = 4 * NKEYS * DIM;
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  rows_alone(&p, 0, T, x, true);
  rows_alone(&p, 1, T, y, true);
  assert_memory_equal(x, rows, sizeof rows); /* what the primary served is what it kept */
  same_rows(x, y, n);
  check_reference(x + NKEYS * DIM, T);
  free(x);
  free(y);
  finish_pair(&p);
}

static void test_backup_refuses(void **st) {
  (void)st;
  pair p;
  start_pair(&p, "repl-ref");
  ps_client *c = client_of(p.peers, 0);
  declare(c, 2, PS_CONS_ASYNC, 1); /* the shard is up, replica 0 primary */
  ps_client_destroy(&c);
  ps_client *b = client_of(p.s[1].url, 0);
  ps_table_spec t = spec_of(2, PS_CONS_ASYNC, 1);
  ps_error e;
  assert_int_equal(ps_client_declare(b, &t, &e), PS_ERR_UNAVAILABLE);
  if (!strstr(e.msg, "not the primary") || !strstr(e.msg, p.s[0].url))
    fail_msg("refusal: %s", e.msg);
  ps_client_destroy(&b);
  finish_pair(&p);
}

static void rejoin(pair *p, int r, ps_client *c);

/* A pair started, T pushes to an async Adagrad table with replica `victim` killed (SIGKILL)
 * half-way: every push succeeds and the rows are Adagrad by hand. The client, for more. */
static ps_client *push_killing(pair *p, const char *tag, int T, int victim) {
  start_pair(p, tag);
  ps_client *c = client_of(p->peers, 0);
  declare(c, 2, PS_CONS_ASYNC, 1);
  ps_error e;
  for (int t = 0; t < T; t++) {
    if (t == T / 2) pt_stop(&p->s[victim], SIGKILL, 5000);
    if (push(c, 2, 0, t, 0, &e) != PS_OK) fail_msg("push %d: %s", t, e.msg);
  }
  p->s[victim].pid = 0;
  float rows[NKEYS * DIM];
  pull(c, 2, 0, rows);
  check_reference(rows, T);
  return c;
}

static void test_failover(void **st) {
  (void)st;
  pair p;
  ps_client *c = push_killing(&p, "repl-fo", 40, 0); /* the primary */
  ps_error e;
  uint64_t fo = 0, ms = 0;
  ps_client_failovers(c, &fo, &ms);
  assert_int_equal(fo, 1);
  print_message("failover took %llu ms (--failover-ms 1000)\n", (unsigned long long)ms);
  json_t *d = stats(c);
  assert_string_equal(repl_str(d, "role"), "primary");
  assert_int_equal(repl_int(d, "promotions"), 1);
  assert_int_equal(repl_int(d, "primary"), 1);
  json_decref(d);
  if (ps_client_kv_set(c, "k", "v", 1, &e) != PS_OK) fail_msg("kv_set: %s", e.msg);

  /* Replica 0 restarted on its data dir: stale, it catches up from replica 1 (base and
   * history) and is a backup again; then both hold the same rows. */
  rejoin(&p, 0, c);
  ps_client_destroy(&c);
  finish_pair(&p);
}

/* The failover with CURVE on: the replicas reach each other with the shard's server key (they
 * had no keys, each refused the other, the primary ran unreplicated, and its kill -9 ended the
 * job: the backup knew no primary); the killed one restarted catches up. One server key pair,
 * one client pair listed. */
static char g_kdir[512]; /* test_failover_curve's keys */

static void test_failover_curve(void **st) {
  (void)st;
  char *kdir = g_kdir, prefix[700], clients[600], secret[800], pub[PS_CURVE_Z85_SIZE];
  char srv_pub[PS_CURVE_Z85_SIZE], cli_sec[PS_CURVE_Z85_SIZE];
  pt_tmpdir("repl-keys", g_kdir);
  snprintf(clients, sizeof clients, "%s/clients", kdir);
  assert_int_equal(mkdir(clients, 0755), 0);
  snprintf(prefix, sizeof prefix, "%s/server", kdir);
  assert_int_equal(ps_curve_write_pair(prefix, false, srv_pub, NULL), PS_OK);
  snprintf(secret, sizeof secret, "%s.secret", prefix);
  snprintf(prefix, sizeof prefix, "%s/worker", clients);
  assert_int_equal(ps_curve_write_pair(prefix, false, pub, NULL), PS_OK);
  snprintf(prefix, sizeof prefix, "%s/worker.secret", clients);
  assert_int_equal(ps_curve_read_key(prefix, true, cli_sec, NULL), PS_OK);
  assert_int_equal(unlink(prefix), 0); /* the clients directory holds public keys */
  const char *args[] = {"--curve-secret", secret, "--curve-clients", clients};
  memcpy(g_curve_args, args, sizeof args);
  pt_set_curve(cli_sec, srv_pub);
  pair p;
  ps_client *c = push_killing(&p, "repl-curve", 40, 0); /* the primary */
  uint64_t fo = 0, ms = 0;
  ps_client_failovers(c, &fo, &ms);
  assert_int_equal(fo, 1);
  print_message("failover with CURVE took %llu ms (--failover-ms 1000)\n",
                (unsigned long long)ms);
  json_t *d = stats(c);
  assert_string_equal(repl_str(d, "role"), "primary");
  assert_int_equal(repl_int(d, "promotions"), 1);
  json_decref(d);
  rejoin(&p, 0, c); /* the catch-up goes over CURVE too */
  ps_client_destroy(&c);
  finish_pair(&p);
}

/* After test_failover_curve, passed or not: the later tests run without CURVE. */
static int curve_off(void **st) {
  (void)st;
  memset(g_curve_args, 0, sizeof g_curve_args);
  pt_set_curve(NULL, NULL);
  if (g_kdir[0]) pt_rmrf(g_kdir);
  return 0;
}

typedef struct barrier_arg {
  ps_client *c;
  ps_status st;
  ps_error e;
} barrier_arg;

static void *barrier_thread(void *a) {
  barrier_arg *b = a;
  b->st = ps_client_barrier(b->c, "after-kill", 2, 20000, &b->e);
  return NULL;
}

/* The coordinator's state (ranks, keys, a barrier arrival) survives the primary's death. */
static void test_coord_failover(void **st) {
  (void)st;
  pair p;
  start_pair(&p, "repl-coord");
  ps_client *c[2] = {client_of(p.peers, 0), client_of(p.peers, 1)};
  ps_error e;
  int rank[2] = {-1, -1};
  for (int r = 0; r < 2; r++)
    if (ps_client_join(c[r], 2, r, r ? "w1" : "w0", &rank[r], &e) != PS_OK)
      fail_msg("join %d: %s", r, e.msg);
  assert_int_equal(rank[0], 0);
  assert_int_equal(rank[1], 1);
  if (ps_client_kv_set(c[0], "addr", "v17", 3, &e) != PS_OK) fail_msg("kv_set: %s", e.msg);
  /* Rank 1 waits at the barrier while the primary dies: its arrival is on the backup (and
   * its client re-sends it there once it fails over). */
  ps_client *bk = client_of(p.s[1].url, 0); /* the backup has heard its primary (bounded) */
  bool heard = false;
  for (int i = 0; i < 100 && !heard; i++) {
    json_t *d = stats(bk);
    heard = repl_int(d, "primary") == 0 && strcmp(repl_str(d, "role"), "backup") == 0;
    json_decref(d);
    if (!heard) usleep(50000);
  }
  ps_client_destroy(&bk);
  assert_true(heard);
  barrier_arg b = {.c = c[1], .st = PS_ERR_INTERNAL};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, barrier_thread, &b), 0);
  usleep(200000);
  pt_stop(&p.s[0], SIGKILL, 5000);
  p.s[0].pid = 0;
  void *val = NULL;
  size_t len = 0;
  if (ps_client_kv_get(c[0], "addr", &val, &len, 10000, &e) != PS_OK)
    fail_msg("kv_get after the failover: %s", e.msg);
  assert_int_equal(len, 3);
  assert_memory_equal(val, "v17", 3);
  free(val);
  if (ps_client_barrier(c[0], "after-kill", 2, 20000, &e) != PS_OK)
    fail_msg("barrier after the failover: %s", e.msg);
  assert_int_equal(pthread_join(th, NULL), 0);
  if (b.st != PS_OK) fail_msg("rank 1's barrier: %s", b.e.msg);
  int again = -1;
  if (ps_client_join(c[1], 2, 1, "w1", &again, &e) != PS_OK)
    fail_msg("join again after the failover: %s", e.msg);
  assert_int_equal(again, 1);
  json_t *d = stats(c[0]);
  assert_int_equal(repl_int(d, "promotions"), 1);
  json_t *co = json_object_get(d, "coordinator");
  assert_int_equal(json_integer_value(json_object_get(co, "members")), 2);
  json_decref(d);
  for (int r = 0; r < 2; r++) ps_client_destroy(&c[r]);
  finish_pair(&p);
}

/* Replica r restarted on its data dir while client c pushes: it must be a backup again within a
 * bounded wait (the primary counting one catch-up, both live); after more pushes both replicas
 * are stopped and their rows and accumulators compared (rows_alone). */
static void rejoin(pair *p, int r, ps_client *c) {
  char rs[8];
  snprintf(rs, sizeof rs, "%d", r);
  const char *extra[] = {"--replica", rs, "--replicas", "2", "--peers", p->peers,
                         "--failover-ms", "1000", g_curve_args[0], g_curve_args[1],
                         g_curve_args[2], g_curve_args[3], NULL};
  assert_true(pt_start_args(&p->s[r], 0, 1, p->dir[r], p->s[r].port, 2, extra));
  ps_client *a = client_of(p->s[r].url, 0);
  ps_error e;
  bool backup = false;
  for (int i = 0; i < 300 && !backup; i++) {
    if (push(c, 2, 0, 100 + i, 0, &e) != PS_OK) fail_msg("push during the catch-up: %s", e.msg);
    json_t *da = stats(a);
    backup = strcmp(repl_str(da, "role"), "backup") == 0;
    json_decref(da);
    if (!backup) usleep(50000);
  }
  assert_true(backup);
  for (int t = 0; t < 5; t++)
    if (push(c, 2, 0, t, 0, &e) != PS_OK) fail_msg("push after the catch-up: %s", e.msg);
  json_t *d = stats(c);
  assert_int_equal(repl_int(d, "catchups"), 1);
  assert_int_equal(repl_int(d, "live"), 3);
  json_decref(d);
  ps_client_destroy(&a);
  for (int k = 0; k < 2; k++) assert_int_equal(pt_stop(&p->s[k], SIGTERM, 10000), 0);
  const size_t n = 4 * NKEYS * DIM;
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  rows_alone(p, 0, 0, x, false);
  rows_alone(p, 1, 0, y, false);
  same_rows(x, y, n);
  free(x);
  free(y);
}

/* The backup killed mid-way: the primary drops it after --failover-ms (pushes wait that long,
 * then go on without it: nothing fails); restarted, it catches up from the primary. */
static void test_backup_lost(void **st) {
  (void)st;
  pair p;
  ps_client *c = push_killing(&p, "repl-bk", 30, 1); /* the backup */
  uint64_t fo = 0;
  ps_client_failovers(c, &fo, NULL);
  assert_int_equal(fo, 0); /* the client never left the primary */
  json_t *d = stats(c);
  assert_string_equal(repl_str(d, "role"), "primary");
  assert_int_equal(repl_int(d, "dropped"), 1);
  assert_int_equal(repl_int(d, "live"), 1);
  json_decref(d);
  rejoin(&p, 1, c);
  ps_client_destroy(&c);
  finish_pair(&p);
}

int main(void) {
  const char *rt = getenv("EMBER_TEST_ROW_TYPE");
  if (rt && ps_row_type_parse(rt, &g_row_type, NULL) != PS_OK) return 2;
  const struct CMUnitTest rows16[] = {
      cmocka_unit_test(test_forward),
      cmocka_unit_test(test_backup_lost),
  };
  if (g_row_type != PS_ROW_F32) return cmocka_run_group_tests(rows16, NULL, NULL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_forward),
      cmocka_unit_test(test_backup_refuses),
      cmocka_unit_test(test_failover),
      cmocka_unit_test_teardown(test_failover_curve, curve_off),
      cmocka_unit_test(test_backup_lost),
      cmocka_unit_test(test_coord_failover),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

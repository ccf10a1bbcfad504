/* Integration: exactly-once pushes (issue 23). A ps-server with EMBER_TEST_DROP_REPLY=N cuts the
 * connection of every N-th push it takes, so that push's reply is lost; the client re-sends it
 * over the new connection and the shard must answer the copy without applying it again.
 *
 * An Adagrad table (dim 8, zero rows, accumulator 0.1) gets T pushes of known gradients on 64
 * keys; the reference is Adagrad by hand in double (a += g^2; w -= lr g / (sqrt(a) + eps)). A
 * push applied twice moves a weight by another lr g / sqrt(a) (>= 4e-3 here) and adds g^2 to the
 * accumulator, so both are compared: the weights directly, the accumulator through one more
 * push of g = 1, whose step dw = -lr / (sqrt(a + 1) + eps) gives a back.
 *   - async table, every 3rd push cut: all T pushes succeed, rows and accumulators equal the
 *     reference, the client re-sent T/3 pushes and the shard answered T/3 copies (STATS and
 *     /metrics say so);
 *   - sync table (push, STEP per step), the same;
 *   - copies that arrive while the original is still being applied (--inject-delay-us 300 ms
 *     holds every reply; the re-send comes ~100 ms after the cut): each waits for and gets the
 *     original's reply, nothing applied twice;
 *   - a re-send to a shard that restarted meanwhile (kill -9 while the push's reply is held) is
 *     refused as "no record ... may or may not have been applied", and the client goes on;
 *   - the client's bound on unsettled pushes per shard (4095). */
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_client.h"
#include "pt_cluster.h"

#define DIM 8
#define NKEYS 64
#define LR 0.1
#define A0 0.1
#define EPS 1e-8

static uint64_t key(int k) { return 1000003ull * (uint64_t)k + 17; }
/* The gradient of push t for key k, element j: +-0.125 .. +-0.875. */
static double gval(int k, int t, int j) { return (((k * 7 + t * 3 + j * 5) % 8) - 3.5) * 0.25; }

/* Starts a shard with EMBER_TEST_DROP_REPLY=every (0: none) and extra flags. */
static void start(pt_server *s, char *dir, int every, const char *const *extra) {
  assert_true(pt_start_dropping(s, "exo", dir, every, extra));
}

static ps_client *client(const pt_server *s, ps_consistency cons) {
  ps_client_options o;
  ps_client_options_default(&o);
  o.timeout_ms = 20000;
  const char *url = s->url;
  ps_client *c = NULL;
  assert_int_equal(ps_client_create(&url, 1, &o, &c, NULL), PS_OK);
  ps_table_spec t = pt_adagrad_spec(1, "ada", DIM, LR, EPS, A0, cons, 1);
  ps_error e;
  if (ps_client_declare(c, &t, &e) != PS_OK) fail_msg("declare: %s", e.msg);
  return c;
}

/* Push t (step t; a sync table then steps). */
static ps_status push(ps_client *c, ps_consistency cons, int t, double g1, ps_error *e) {
  uint64_t k[NKEYS];
  float g[NKEYS * DIM];
  for (int i = 0; i < NKEYS; i++) {
    k[i] = key(i);
    for (int j = 0; j < DIM; j++) g[i * DIM + j] = (float)(g1 ? g1 : gval(i, t, j));
  }
  ps_status st = ps_client_push(c, 1, (uint64_t)t, k, NKEYS, g, e);
  if (st == PS_OK && cons == PS_CONS_SYNC) st = ps_client_step(c, 1, (uint64_t)t, e);
  return st;
}

static void pull(ps_client *c, uint64_t step, float *out) {
  uint64_t k[NKEYS];
  for (int i = 0; i < NKEYS; i++) k[i] = key(i);
  ps_error e;
  if (ps_client_pull(c, 1, step, k, NKEYS, out, &e) != PS_OK) fail_msg("pull: %s", e.msg);
}

static json_int_t stat(ps_client *c, const char *obj, const char *field) {
  char *js = NULL;
  assert_int_equal(ps_client_stats(c, 0, &js, NULL), PS_OK);
  json_t *doc = json_loads(js, 0, NULL);
  assert_non_null(doc);
  json_int_t v = json_integer_value(json_object_get(json_object_get(doc, obj), field));
  json_decref(doc);
  free(js);
  return v;
}

/* T pushes through a shard that cuts every `every`-th, then rows and accumulators against the
 * hand-computed Adagrad. */
static void run(ps_consistency cons, int T, int every, const char *const *extra, int mport) {
  pt_server s;
  char dir[512];
  start(&s, dir, every, extra);
  ps_client *c = client(&s, cons);
  for (int t = 0; t < T; t++) {
    ps_error e;
    if (push(c, cons, t, 0, &e) != PS_OK) fail_msg("push %d: %s", t, e.msg);
  }

  /* The reference, by hand. */
  static double w[NKEYS][DIM], a[NKEYS][DIM];
  for (int i = 0; i < NKEYS; i++)
    for (int j = 0; j < DIM; j++) {
      w[i][j] = 0;
      a[i][j] = A0;
      for (int t = 0; t < T; t++) {
        double g = gval(i, t, j);
        a[i][j] += g * g;
        w[i][j] -= LR * g / (sqrt(a[i][j]) + EPS);
      }
    }
  float *w0 = malloc(NKEYS * DIM * sizeof *w0), *w1 = malloc(NKEYS * DIM * sizeof *w1);
  pull(c, (uint64_t)T, w0);
  ps_error e;
  if (push(c, cons, T, 1.0, &e) != PS_OK) fail_msg("probe push: %s", e.msg);
  pull(c, (uint64_t)T + 1, w1);
  for (int i = 0; i < NKEYS; i++)
    for (int j = 0; j < DIM; j++) {
      double got = w0[i * DIM + j];
      if (fabs(got - w[i][j]) > 1e-5 + 1e-4 * fabs(w[i][j]))
        fail_msg("key %d [%d]: weight %.7f, reference %.7f", i, j, got, w[i][j]);
      double dw = (double)w1[i * DIM + j] - got; /* = -lr / (sqrt(a + 1) + eps) */
      double acc = pow(LR / -dw - EPS, 2) - 1.0;
      if (fabs(acc - a[i][j]) > 1e-4 * a[i][j])
        fail_msg("key %d [%d]: accumulator %.6f, reference %.6f", i, j, acc, a[i][j]);
    }
  free(w0);
  free(w1);
  /* The cuts happened: each push cut was re-sent once and answered as a copy. */
  uint64_t disc = 0, resent = 0;
  ps_client_counters(c, &disc, &resent);
  assert_int_equal(resent, T / every);
  assert_true(disc >= (uint64_t)(T / every));
  assert_int_equal(stat(c, "exactly_once", "duplicates"), T / every);
  if (mport) { /* the same count on the metrics endpoint (published every 200 ms) */
    char want[96];
    snprintf(want, sizeof want, "\nember_server_push_duplicates_total %d\n", T / every);
    bool seen = false;
    for (int i = 0; i < 50 && !seen; i++) {
      char *text = pt_http_get(mport, "/metrics");
      seen = text && strstr(text, want);
      free(text);
      if (!seen) usleep(100000);
    }
    assert_true(seen);
  }
  ps_client_destroy(&c);
  pt_stop_clean(&s, dir);
}

static void test_async(void **st) {
  (void)st;
  int mport = pt_free_port();
  char mp[16];
  snprintf(mp, sizeof mp, "%d", mport);
  const char *metrics[] = {"--metrics-port", mp, NULL};
  run(PS_CONS_ASYNC, 30, 3, metrics, mport);
}

static void test_sync(void **st) {
  (void)st;
  run(PS_CONS_SYNC, 30, 3, NULL, 0);
}

static void test_copy_in_flight(void **st) {
  (void)st;
  const char *delay[] = {"--inject-delay-us", "300000", NULL};
  run(PS_CONS_ASYNC, 6, 2, delay, 0);
}

static void test_restarted_shard(void **st) {
  (void)st;
  pt_server s;
  char dir[512];
  const char *delay[] = {"--inject-delay-us", "3000000", NULL};
  start(&s, dir, 0, delay);
  ps_client *c = client(&s, PS_CONS_ASYNC), *obs = client(&s, PS_CONS_ASYNC);
  uint64_t k[NKEYS];
  float g[NKEYS * DIM];
  for (int i = 0; i < NKEYS; i++) k[i] = key(i);
  for (int i = 0; i < NKEYS * DIM; i++) g[i] = 0.5f;
  ps_client_req *r = NULL;
  assert_int_equal(ps_client_push_start(c, 1, 0, k, NKEYS, true, g, &r, NULL), PS_OK);
  /* The push is in: its reply is held for 3 s (bounded wait: 2 s). */
  bool in = false;
  for (int i = 0; i < 200 && !in; i++) {
    bool done = false;
    ps_client_ready(c, r, 10, &done, NULL);
    in = stat(obs, "queue", "inflight") >= 1;
  }
  assert_true(in);
  ps_client_destroy(&obs);
  assert_int_equal(pt_stop(&s, SIGKILL, 5000), 128 + SIGKILL);
  pt_server s2;
  assert_true(pt_start_args(&s2, 0, 1, dir, s.port, 2, NULL));
  ps_error e;
  assert_int_equal(ps_client_wait(c, &r, &e), PS_ERR_UNAVAILABLE);
  if (!strstr(e.msg, "no record") || !strstr(e.msg, "may or may not have been applied"))
    fail_msg("unexpected refusal: %s", e.msg);
  uint64_t resent = 0;
  ps_client_counters(c, NULL, &resent);
  assert_int_equal(resent, 1);
  /* The client goes on: its next push is new to the restarted shard. */
  if (ps_client_push(c, 1, 0, k, NKEYS, g, &e) != PS_OK) fail_msg("push after: %s", e.msg);
  assert_int_equal(stat(c, "exactly_once", "unknown"), 1);
  ps_client_destroy(&c);
  pt_stop_clean(&s2, dir);
}

/* The client keeps fewer than PS_WIRE_SEQ_WINDOW pushes unsettled per shard: the 4096th push
 * started without waiting fails with one clear line, and once the others are waited for the
 * next one goes through. */
static void test_window(void **st) {
  (void)st;
  pt_server s;
  char dir[512];
  start(&s, dir, 0, NULL);
  ps_client *c = client(&s, PS_CONS_ASYNC);
  enum { W = 4095 };
  ps_client_req **r = calloc(W + 1, sizeof *r);
  uint64_t k = key(1);
  float g[DIM] = {0};
  for (int i = 0; i <= W; i++)
    assert_int_equal(ps_client_push_start(c, 1, 0, &k, 1, true, g, &r[i], NULL), PS_OK);
  ps_error e;
  assert_int_equal(ps_client_wait(c, &r[W], &e), PS_ERR_INVALID);
  if (!strstr(e.msg, "4095 pushes to this shard are unsettled")) fail_msg("%s", e.msg);
  for (int i = 0; i < W; i++)
    if (ps_client_wait(c, &r[i], &e) != PS_OK) fail_msg("push %d: %s", i, e.msg);
  if (ps_client_push(c, 1, 0, &k, 1, g, &e) != PS_OK) fail_msg("push after: %s", e.msg);
  free(r);
  ps_client_destroy(&c);
  pt_stop_clean(&s, dir);
}

PS_TEST_MAIN("exactonce", NULL, NULL,
  cmocka_unit_test(test_async),
  cmocka_unit_test(test_sync),
  cmocka_unit_test(test_copy_in_flight),
  cmocka_unit_test(test_restarted_shard),
  cmocka_unit_test(test_window))

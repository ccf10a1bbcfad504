/* Integration: consistency modes with 2 real servers and 2 clients (ranks 0 and 1).
 * sync: both clients' gradients of a step are summed and applied once (checked with Adagrad,
 * where one application of the sum differs from two applications), and a pull of step t+1
 * is answered only after the slower worker finished step t. ssp:K: a worker K+1 steps ahead
 * of the slowest is held until the slowest catches up; K steps ahead is not. */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ps_client.h"
#include "ps_hash.h"
#include "ps_store.h"
#include "pt_cluster.h"

#define DIM 4

static pt_group g_cl = {.n = 2, .tag = "cons", .threads = {2, 2}, .timeout_ms = 15000};

static ps_client *client(uint32_t rank) { return pt_group_client(&g_cl, rank); }

static void test_sync(void **state) {
  (void)state;
  ps_client *a = client(0), *b = client(1);
  ps_table_spec t;
  ps_table_spec_default(&t, 10, "sync", DIM);
  t.optimizer = 1; /* Adagrad */
  t.lr = 0.5f;
  t.eps = 1e-6f;
  t.initial_accumulator = 0.01f;
  t.consistency = PS_CONS_SYNC;
  t.num_workers = 2;
  assert_int_equal(ps_client_declare(a, &t, NULL), PS_OK);
  assert_int_equal(ps_client_declare(b, &t, NULL), PS_OK);
  /* Keys on both shards; 3 shared between the workers. */
  enum { N = 8 };
  uint64_t ka[N], kb[N];
  for (int i = 0; i < N; i++) {
    ka[i] = 100 + (uint64_t)i;
    kb[i] = 105 + (uint64_t)i;
  }
  float ga[N * DIM], gb[N * DIM];
  for (int i = 0; i < N * DIM; i++) {
    ga[i] = 0.1f * (float)(i % 7) - 0.3f;
    gb[i] = 0.2f * (float)(i % 5) - 0.4f;
  }
  float ra[N * DIM], rb[N * DIM];
  assert_int_equal(ps_client_pull(a, 10, 0, ka, N, ra, NULL), PS_OK);
  assert_int_equal(ps_client_pull(b, 10, 0, kb, N, rb, NULL), PS_OK);
  assert_int_equal(ps_client_push(a, 10, 0, ka, N, ga, NULL), PS_OK);
  assert_int_equal(ps_client_step(a, 0, 0, NULL), PS_OK);
  /* a is done with step 0; its pull of step 1 must wait for b. */
  float r1[N * DIM];
  ps_client_req *r = NULL;
  assert_int_equal(ps_client_pull_start(a, 10, 1, ka, N, false, r1, &r, NULL), PS_OK);
  bool done = true;
  assert_int_equal(ps_client_ready(a, r, 500, &done, NULL), PS_OK);
  assert_false(done);
  /* b's pushes of step 0 are not applied yet either: its own pull at step 0 sees the start. */
  float rb0[N * DIM];
  assert_int_equal(ps_client_pull(b, 10, 0, kb, N, rb0, NULL), PS_OK);
  assert_memory_equal(rb0, rb, sizeof rb);
  assert_int_equal(ps_client_push(b, 10, 0, kb, N, gb, NULL), PS_OK);
  assert_int_equal(ps_client_ready(a, r, 300, &done, NULL), PS_OK);
  assert_false(done);
  assert_int_equal(ps_client_step(b, 0, 0, NULL), PS_OK);
  assert_int_equal(ps_client_wait(a, &r, NULL), PS_OK);

  /* Reference: one push of both workers' gradients, applied once. */
  ps_store *ref = pt_ref_store(g_cl.dir, "ref", 16 << 20, &t);
  assert_non_null(ref);
  uint64_t kall[2 * N];
  float gall[2 * N * DIM];
  memcpy(kall, ka, sizeof ka);
  memcpy(kall + N, kb, sizeof kb);
  memcpy(gall, ga, sizeof ga);
  memcpy(gall + N * DIM, gb, sizeof gb);
  assert_int_equal(ps_store_push(ref, 10, kall, 2 * N, gall), PS_OK);
  float want[N * DIM];
  assert_int_equal(ps_store_pull(ref, 10, ka, N, want), PS_OK);
  for (int i = 0; i < N * DIM; i++) assert_true(fabsf(r1[i] - want[i]) <= 1e-6f);
  /* The test can fail: two separate applications give other rows for the shared keys. */
  ps_store *twice = pt_ref_store(g_cl.dir, "ref2", 16 << 20, &t);
  assert_non_null(twice);
  assert_int_equal(ps_store_push(twice, 10, ka, N, ga), PS_OK);
  assert_int_equal(ps_store_push(twice, 10, kb, N, gb), PS_OK);
  float other[N * DIM];
  assert_int_equal(ps_store_pull(twice, 10, ka, N, other), PS_OK);
  float maxdiff = 0;
  for (int i = 0; i < N * DIM; i++) maxdiff = fmaxf(maxdiff, fabsf(other[i] - want[i]));
  assert_true(maxdiff > 1e-3f);
  ps_store_close(&ref);
  ps_store_close(&twice);

  /* A push for an applied step is refused. */
  assert_int_equal(ps_client_push(b, 10, 0, kb, N, gb, NULL), PS_ERR_CONFLICT);
  ps_client_destroy(&a);
  ps_client_destroy(&b);
}

/* One step of worker c at step s on table id: pull, push, step. */
static void do_step(ps_client *c, uint32_t id, uint64_t s, const uint64_t *k, size_t n) {
  float rows[16 * DIM], g[16 * DIM];
  for (size_t i = 0; i < n * DIM; i++) g[i] = 0.01f;
  assert_int_equal(ps_client_pull(c, id, s, k, n, rows, NULL), PS_OK);
  assert_int_equal(ps_client_push(c, id, s, k, n, g, NULL), PS_OK);
  assert_int_equal(ps_client_step(c, id, s, NULL), PS_OK);
}

static void test_ssp(void **state) {
  (void)state;
  const uint32_t K = 2;
  ps_client *fast = client(0), *slow = client(1);
  ps_table_spec t;
  ps_table_spec_default(&t, 11, "ssp", DIM);
  t.consistency = PS_CONS_SSP;
  t.staleness = K;
  t.num_workers = 2;
  assert_int_equal(ps_client_declare(fast, &t, NULL), PS_OK);
  assert_int_equal(ps_client_declare(slow, &t, NULL), PS_OK);
  /* Declaring another staleness is refused. */
  ps_table_spec t2 = t;
  t2.staleness = K + 1;
  assert_int_equal(ps_client_declare(slow, &t2, NULL), PS_ERR_CONFLICT);
  uint64_t k[6] = {1, 2, 3, 4, 5, 6};
  /* The fast worker runs K steps ahead of the slow one (which is at step 0): allowed. */
  for (uint64_t s = 0; s <= K; s++) {
    float rows[6 * DIM];
    ps_client_req *r = NULL;
    assert_int_equal(ps_client_pull_start(fast, 11, s, k, 6, false, rows, &r, NULL), PS_OK);
    bool done = false;
    assert_int_equal(ps_client_ready(fast, r, 3000, &done, NULL), PS_OK);
    assert_true(done);
    assert_int_equal(ps_client_wait(fast, &r, NULL), PS_OK);
    if (s < K) {
      float g[6 * DIM];
      for (int i = 0; i < 6 * DIM; i++) g[i] = 0.01f;
      assert_int_equal(ps_client_push(fast, 11, s, k, 6, g, NULL), PS_OK);
      assert_int_equal(ps_client_step(fast, 11, s, NULL), PS_OK);
    }
  }
  assert_int_equal(ps_client_step(fast, 11, K, NULL), PS_OK);
  /* Step K+1 is K+1 ahead of the slowest: held. */
  float rows[6 * DIM];
  ps_client_req *r = NULL;
  assert_int_equal(ps_client_pull_start(fast, 11, K + 1, k, 6, false, rows, &r, NULL), PS_OK);
  bool done = true;
  assert_int_equal(ps_client_ready(fast, r, 600, &done, NULL), PS_OK);
  assert_false(done);
  /* Async application: the slow worker sees the fast one's pushes already. */
  float seen[6 * DIM], init[6 * DIM];
  assert_int_equal(ps_client_pull(slow, 11, 0, k, 6, seen, NULL), PS_OK);
  for (int i = 0; i < 6; i++) ps_store_init_row(&t, k[i], init + i * DIM);
  for (int i = 0; i < 6 * DIM; i++) assert_true(fabsf(seen[i] - (init[i] - K * 0.01f * 0.01f)) < 1e-6f);
  /* The slowest finishes step 0: the held pull goes through. */
  do_step(slow, 11, 0, k, 6);
  assert_int_equal(ps_client_ready(fast, r, 5000, &done, NULL), PS_OK);
  assert_true(done);
  assert_int_equal(ps_client_wait(fast, &r, NULL), PS_OK);
  ps_client_destroy(&fast);
  ps_client_destroy(&slow);
}

/* Issue 36: a sync worker that dies (its connection closes) fails the other's pull that waits
 * for its step 3 s later, naming its rank (it waited out the client's whole timeout and named
 * no one); a pull arriving later fails at once, and so does a checkpoint; a rank whose new
 * connection steps within those 3 s, or that restarts later, is live again. */
static void test_sync_lost_rank(void **state) {
  (void)state;
  ps_client *a = client(0), *b = client(1);
  ps_table_spec t;
  ps_table_spec_default(&t, 12, "lost", DIM);
  t.consistency = PS_CONS_SYNC;
  t.num_workers = 2;
  assert_int_equal(ps_client_declare(a, &t, NULL), PS_OK);
  assert_int_equal(ps_client_declare(b, &t, NULL), PS_OK);
  uint64_t k[6] = {11, 12, 13, 14, 15, 16};
  do_step(a, 12, 0, k, 6);
  do_step(b, 12, 0, k, 6);
  do_step(a, 12, 1, k, 6);
  float rows[6 * DIM];
  ps_client_req *r = NULL;
  assert_int_equal(ps_client_pull_start(a, 12, 2, k, 6, false, rows, &r, NULL), PS_OK);
  bool done = true;
  assert_int_equal(ps_client_ready(a, r, 300, &done, NULL), PS_OK);
  assert_false(done); /* waits for b's step 1 */
  /* b's connection closes and a new one of rank 1 steps within the grace: no death. */
  ps_client_destroy(&b);
  b = client(1);
  assert_int_equal(ps_client_declare(b, &t, NULL), PS_OK);
  do_step(b, 12, 1, k, 6);
  assert_int_equal(ps_client_wait(a, &r, NULL), PS_OK);
  do_step(a, 12, 2, k, 6);
  assert_int_equal(ps_client_pull_start(a, 12, 3, k, 6, false, rows, &r, NULL), PS_OK);
  ps_client_destroy(&b); /* b "dies" after step 1 */
  /* The shard gives b 3 s to come back (a reconnect, a move between replicas). */
  assert_int_equal(ps_client_ready(a, r, 1500, &done, NULL), PS_OK);
  assert_false(done);
  assert_int_equal(ps_client_ready(a, r, 10000, &done, NULL), PS_OK); /* the timeout is 15 s */
  assert_true(done);
  ps_error err;
  assert_int_equal(ps_client_wait(a, &r, &err), PS_ERR_UNAVAILABLE);
  printf("lost rank: %s\n", err.msg);
  assert_non_null(strstr(err.msg, "waits for rank 1, which disconnected"));
  assert_non_null(strstr(err.msg, "after 2 steps"));
  /* A pull of that step arriving now fails at once; one b has finished is answered. */
  assert_int_equal(ps_client_pull(a, 12, 3, k, 6, rows, &err), PS_ERR_UNAVAILABLE);
  assert_non_null(strstr(err.msg, "rank 1"));
  assert_int_equal(ps_client_pull(a, 12, 2, k, 6, rows, NULL), PS_OK);
  /* So does a checkpoint of step 3, which waits for every rank's step 2 (it waited out the
   * checkpoint bound, 10 minutes; this driver's is 8 s). */
  const char *urls[2] = {g_cl.srv[0].url, g_cl.srv[1].url};
  ps_client_options o;
  ps_client_options_default(&o);
  o.ckpt_timeout_ms = 8000;
  ps_client *d = NULL;
  assert_int_equal(ps_client_create(urls, 2, &o, &d, NULL), PS_OK);
  char ck[600];
  snprintf(ck, sizeof ck, "%s/ck-lost", g_cl.dir);
  assert_int_equal(ps_client_checkpoint(d, 3, ck, &err), PS_ERR_UNAVAILABLE);
  printf("lost rank: %s\n", err.msg);
  assert_non_null(strstr(err.msg, "checkpoint of step 3 of table"));
  assert_non_null(strstr(err.msg, "which disconnected"));
  ps_client_destroy(&d);
  /* Rank 1 restarted (a new connection) finishes step 2: a's pull of step 3 goes through. */
  b = client(1);
  assert_int_equal(ps_client_declare(b, &t, NULL), PS_OK);
  do_step(b, 12, 2, k, 6);
  assert_int_equal(ps_client_pull(a, 12, 3, k, 6, rows, NULL), PS_OK);
  ps_client_destroy(&a);
  ps_client_destroy(&b);
}

PT_GROUP_MAIN(g_cl,
  cmocka_unit_test(test_sync),
  cmocka_unit_test(test_ssp),
  cmocka_unit_test(test_sync_lost_rank))

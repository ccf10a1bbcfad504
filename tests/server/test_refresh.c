/* Integration: lookahead pulls and REFRESH (issue 32) through a real ps-server, with lost
 * requests.
 *
 * A sync Adagrad table, one worker. Step t trains batch A_t; batch A_{t+1} overlaps it (half
 * its keys are A_t's, half new) and is pulled as ps-worker --lookahead does: PULL(step=t) before
 * STEP(t), then REFRESH(step=t+1, since=t) sent before the push of step t, so that it waits on
 * the shard (deferred) while the push goes. The shard cuts the connection of every 2nd push it
 * takes (EMBER_TEST_DROP_REPLY=2): the push's reply is lost, the deferred REFRESH is dropped
 * with the connection, and the client re-sends both over the new one. Checked every step:
 *   - the refreshed rows are bit for bit those of a plain PULL(step=t+1) of the same keys;
 *   - the refresh carried exactly |A_t & A_{t+1}| rows (ps_client_refreshed), the keys step t
 *     pushed, even when its first copy was lost (a copy is answered like the original);
 * and at the end every row equals the same steps on a second shard that drops nothing (the
 * re-sent pushes applied once), and the client re-sent requests (the cuts happened).
 * An async table answers a REFRESH with every row (it keeps no record of what changed). */
#include <jansson.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_client.h"
#include "pt_cluster.h"

#define DIM 8
#define N 64 /* keys a batch */
#define T 8  /* steps */

/* Batch t: keys t*N/2 .. t*N/2 + N - 1, so batch t+1 shares half of batch t's keys. */
static void batch(int t, uint64_t *k) {
  for (int i = 0; i < N; i++) k[i] = 7919ull * (uint64_t)(t * N / 2 + i) + 3;
}

static float gval(int t, int i, int j) { return (float)((((t * 5 + i * 3 + j) % 9) - 4) * 0.125); }

static void start(pt_server *s, char *dir, int every) {
  assert_true(pt_start_dropping(s, "refresh", dir, every, NULL));
}

static ps_client *client(const pt_server *s, ps_consistency cons) {
  ps_client *c = pt_client(s, 1, 0, 20000);
  ps_table_spec t = pt_adagrad_spec(1, "la", DIM, 0.1, 1e-8, 0.1, cons, 1);
  ps_error e;
  if (ps_client_declare(c, &t, &e) != PS_OK) fail_msg("declare: %s", e.msg);
  return c;
}

#define OK(x)                                                     \
  do {                                                            \
    ps_status st_ = (x);                                          \
    if (st_ != PS_OK) fail_msg("%s: %s", #x, ps_status_str(st_)); \
  } while (0)

/* A field of table 1's entry in the shard's STATS. */
static json_int_t table_stat(ps_client *c, const char *field) {
  char *js = NULL;
  assert_int_equal(ps_client_stats(c, 0, &js, NULL), PS_OK);
  json_t *doc = json_loads(js, 0, NULL);
  assert_non_null(doc);
  json_int_t v = json_integer_value(json_object_get(json_array_get(json_object_get(doc, "tables"), 0), field));
  json_decref(doc);
  free(js);
  return v;
}

/* T steps with lookahead and refresh on shard s (cutting every `every`-th push, 0: none);
 * leaves every row of the last batch in `last`. */
static void run(pt_server *s, int every, float last[N * DIM]) {
  char dir[512];
  start(s, dir, every);
  ps_client *c = client(s, PS_CONS_SYNC);
  uint64_t k[N], kn[N];
  static float rows[N * DIM], ahead[N * DIM], plain[N * DIM], g[N * DIM];
  batch(0, k);
  OK(ps_client_pull_unique(c, 1, 0, k, N, rows, NULL));
  for (int t = 0; t < T; t++) {
    batch(t + 1, kn);
    ps_client_req *la = NULL, *rf = NULL;
    OK(ps_client_pull_start(c, 1, (uint64_t)t, kn, N, true, ahead, &la, NULL));
    OK(ps_client_wait(c, &la, NULL));
    uint64_t before = ps_client_refreshed(c);
    OK(ps_client_refresh_start(c, 1, (uint64_t)t + 1, (uint64_t)t, kn, N, ahead, &rf, NULL));
    for (int i = 0; i < N; i++)
      for (int j = 0; j < DIM; j++) g[i * DIM + j] = gval(t, i, j) + rows[i * DIM + j];
    OK(ps_client_push_unique(c, 1, (uint64_t)t, k, N, g, NULL));
    OK(ps_client_step(c, 1, (uint64_t)t, NULL));
    OK(ps_client_wait(c, &rf, NULL));
    assert_int_equal(ps_client_refreshed(c) - before, N / 2); /* the keys batch t had */
    OK(ps_client_pull_unique(c, 1, (uint64_t)t + 1, kn, N, plain, NULL));
    assert_memory_equal(ahead, plain, sizeof plain);
    memcpy(rows, ahead, sizeof rows);
    memcpy(k, kn, sizeof k);
  }
  memcpy(last, rows, sizeof rows);
  /* Both ends counted the same rows (a refresh cut and re-sent is answered, and counted, on
   * the shard twice when its first copy's reply left before the cut: at least as many). */
  json_int_t served = table_stat(c, "rows_refreshed"), full = table_stat(c, "refreshes_full");
  if (every) assert_true(served >= (json_int_t)ps_client_refreshed(c));
  else assert_int_equal(served, (json_int_t)ps_client_refreshed(c));
  assert_int_equal(full, 0);
  uint64_t disc = 0, resent = 0;
  ps_client_counters(c, &disc, &resent);
  if (every) assert_true(resent >= (uint64_t)(T / every)); /* pushes, and the refreshes cut */
  ps_client_destroy(&c);
  pt_stop_clean(s, dir);
}

static void test_refresh_with_lost_requests(void **st) {
  (void)st;
  pt_server a, b;
  static float ra[N * DIM], rb[N * DIM];
  run(&a, 2, ra);
  run(&b, 0, rb);
  assert_memory_equal(ra, rb, sizeof ra);
}

static void test_refresh_async_is_full(void **st) {
  (void)st;
  pt_server s;
  char dir[512];
  start(&s, dir, 0);
  ps_client *c = client(&s, PS_CONS_ASYNC);
  uint64_t k[N];
  static float rows[N * DIM], plain[N * DIM];
  batch(0, k);
  OK(ps_client_pull_unique(c, 1, 0, k, N, rows, NULL));
  ps_client_req *rf = NULL;
  OK(ps_client_refresh_start(c, 1, 1, 0, k, N, rows, &rf, NULL));
  OK(ps_client_wait(c, &rf, NULL));
  assert_int_equal(ps_client_refreshed(c), N);
  assert_int_equal(table_stat(c, "refreshes_full"), 1);
  OK(ps_client_pull_unique(c, 1, 1, k, N, plain, NULL));
  assert_memory_equal(rows, plain, sizeof plain);
  ps_client_destroy(&c);
  pt_stop_clean(&s, dir);
}

PS_TEST_MAIN("refresh", NULL, NULL,
  cmocka_unit_test(test_refresh_with_lost_requests),
  cmocka_unit_test(test_refresh_async_is_full))

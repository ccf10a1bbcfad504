/* Integration: the coordinator on shard 0 (one real server): rank assignment and re-join,
 * another world (its own ranks), KV_SET/KV_GET with a wait (a getter blocked in another
 * thread is woken by a later set), KV_GET timeout, a 3-worker barrier, the ps_rendezvous callbacks, that shard 1
 * refuses coordinator ops, and ranks held per connection: a second worker asking for a taken
 * rank is told who has it, and a rank is free again once its worker's connection closed. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "ps_client.h"
#include "pt_cluster.h"

static pt_group g_cl = {.n = 2, .tag = "coord", .threads = {1, 1}, .timeout_ms = 10000};

static ps_client *client(void) { return pt_group_client(&g_cl, 0); }

static void test_join(void **state) {
  (void)state;
  ps_client *c[3] = {client(), client(), client()};
  int r[3] = {-5, -5, -5};
  assert_int_equal(ps_client_join(c[0], 3, -1, "w-a", &r[0], NULL), PS_OK);
  assert_int_equal(ps_client_join(c[1], 3, 2, "w-b", &r[1], NULL), PS_OK);
  assert_int_equal(ps_client_join(c[2], 3, -1, "w-c", &r[2], NULL), PS_OK);
  assert_int_equal(r[0], 0);
  assert_int_equal(r[1], 2);
  assert_int_equal(r[2], 1);
  int again = -1;
  assert_int_equal(ps_client_join(c[2], 3, -1, "w-c", &again, NULL), PS_OK);
  assert_int_equal(again, 1);
  assert_int_equal(ps_client_join(c[2], 3, -1, "w-d", &again, NULL), PS_ERR_CONFLICT); /* full */
  /* Another world is another set of ranks: rank 0 of 4, the world of 3 untouched. */
  assert_int_equal(ps_client_join(c[2], 4, -1, "w-e", &again, NULL), PS_OK);
  assert_int_equal(again, 0);
  assert_int_equal(ps_client_join(c[0], 3, -1, "w-a", &again, NULL), PS_OK);
  assert_int_equal(again, 0);
  for (int i = 0; i < 3; i++) ps_client_destroy(&c[i]);
}

typedef struct getter {
  ps_client *c;
  ps_status st;
  char val[64];
} getter;

static void *get_thread(void *arg) {
  getter *g = arg;
  void *v = NULL;
  size_t n = 0;
  g->st = ps_client_rdv_get(g->c, "nccl/uid", &v, &n, 10000);
  if (g->st == PS_OK && n < sizeof g->val) memcpy(g->val, v, n);
  free(v);
  return NULL;
}

static void test_kv(void **state) {
  (void)state;
  getter g = {.c = client()};
  pthread_t th;
  pthread_create(&th, NULL, get_thread, &g);
  struct timespec ts = {0, 300000000};
  nanosleep(&ts, NULL);
  ps_client *c = client();
  assert_int_equal(ps_client_rdv_set(c, "nccl/uid", "0123456789", 10), PS_OK);
  pthread_join(th, NULL);
  assert_int_equal(g.st, PS_OK);
  assert_string_equal(g.val, "0123456789");
  void *v = NULL;
  size_t n = 0;
  assert_int_equal(ps_client_kv_get(c, "missing", &v, &n, 200, NULL), PS_ERR_TIMEOUT);
  assert_int_equal(ps_client_kv_get(c, "missing", &v, &n, 0, NULL), PS_ERR_NOT_FOUND);
  /* Binary values, overwrite. */
  uint8_t bin[300];
  for (int i = 0; i < 300; i++) bin[i] = (uint8_t)i;
  assert_int_equal(ps_client_kv_set(c, "gloo/x", bin, 300, NULL), PS_OK);
  assert_int_equal(ps_client_kv_set(c, "gloo/x", bin + 1, 299, NULL), PS_OK);
  assert_int_equal(ps_client_kv_get(c, "gloo/x", &v, &n, 0, NULL), PS_OK);
  assert_int_equal(n, 299);
  assert_memory_equal(v, bin + 1, 299);
  free(v);
  /* Shard 1 is not the coordinator. */
  const char *u1[1] = {g_cl.srv[1].url};
  ps_client *one = NULL;
  assert_int_equal(ps_client_create(u1, 1, NULL, &one, NULL), PS_OK);
  assert_int_equal(ps_client_kv_set(one, "k", "v", 1, NULL), PS_ERR_UNSUPPORTED);
  ps_client_destroy(&one);
  ps_client_destroy(&g.c);
  ps_client_destroy(&c);
}

typedef struct bw {
  int rank;
  ps_status st;
} bw;

static void *barrier_thread(void *arg) {
  bw *b = arg;
  ps_client *c = client();
  ps_client_set_rank(c, (uint32_t)b->rank);
  struct timespec ts = {0, (long)b->rank * 100000000L};
  nanosleep(&ts, NULL);
  b->st = ps_client_barrier(c, "start", 3, 10000, NULL);
  ps_client_destroy(&c);
  return NULL;
}

static void test_barrier(void **state) {
  (void)state;
  pthread_t th[3];
  bw b[3];
  for (int i = 0; i < 3; i++) {
    b[i].rank = i;
    b[i].st = PS_ERR_INTERNAL;
    pthread_create(&th[i], NULL, barrier_thread, &b[i]);
  }
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 3; i++) assert_int_equal(b[i].st, PS_OK);
  /* Alone at a barrier of 2: times out. */
  ps_client *c = client();
  assert_int_equal(ps_client_barrier(c, "lonely", 2, 200, NULL), PS_ERR_TIMEOUT);
  ps_client_destroy(&c);
}

/* JOIN, retried for up to 5 s while it is refused (a disconnect reaches the server a moment
 * after the client closed). */
static ps_status join_retry(ps_client *c, uint32_t world, int want, const char *name, int *rank) {
  ps_status st = PS_ERR_INTERNAL;
  for (int i = 0; i < 100; i++) {
    st = ps_client_join(c, world, want, name, rank, NULL);
    if (st != PS_ERR_CONFLICT) return st;
    struct timespec ts = {0, 50000000L};
    nanosleep(&ts, NULL);
  }
  return st;
}

static void test_rank_held_per_connection(void **state) {
  (void)state;
  ps_client *a = client(), *b = client();
  int r = -1;
  assert_int_equal(join_retry(a, 2, 1, NULL, &r), PS_OK); /* test_join's members may linger */
  assert_int_equal(r, 1);
  ps_error e;
  assert_int_equal(ps_client_join(b, 2, 1, NULL, &r, &e), PS_ERR_CONFLICT);
  print_message("second worker on rank 1: %s\n", e.msg);
  assert_non_null(strstr(e.msg, "rank 1 is already taken by a worker at 127.0.0.1"));
  /* The holder goes away (a worker that failed before training): the rank is free again. */
  ps_client_destroy(&a);
  assert_int_equal(join_retry(b, 2, 1, NULL, &r), PS_OK);
  assert_int_equal(r, 1);
  /* A world of 1 with an assigned rank, as ps-worker joins: its next run gets the rank again,
   * and with nobody left the world may change. */
  ps_client_destroy(&b);
  ps_client *c = client();
  assert_int_equal(join_retry(c, 1, -1, "host/1", &r), PS_OK);
  assert_int_equal(r, 0);
  ps_client_destroy(&c);
  c = client();
  assert_int_equal(join_retry(c, 1, -1, "host/2", &r), PS_OK);
  assert_int_equal(r, 0);
  ps_client_destroy(&c);
}

PT_GROUP_MAIN(g_cl,
  cmocka_unit_test(test_join),
  cmocka_unit_test(test_kv),
  cmocka_unit_test(test_barrier),
  cmocka_unit_test(test_rank_held_per_connection))

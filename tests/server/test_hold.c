/* Integration: store ops that arrive while a checkpoint waits for the store work in flight are
 * held, and handled afterwards in their order of arrival. A real server with
 * `--inject-delay-us 1500000`, so that a pull keeps the store busy for 1.5 s (long enough for
 * the steps below to land on a loaded machine, or under ASan):
 *   t=0    pull P0 (in flight until ~1500 ms)
 *   t=20   CHECKPOINT from another client (waits for P0)
 *   t=300  push U, then pull P1 of the same keys: both held (STATS shows queue.held == 2 within
 *          a bounded poll, well before P0 ends)
 *   later  the checkpoint succeeds, then U, then P1: P1 reads U's update (SGD: P0 - lr*G), and
 *          nothing is held any more. */
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
#include <time.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_client.h"
#include "pt_cluster.h"

#define DIM 4
#define N 8
#define TAB 7

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

typedef struct ckpt_job {
  ps_client *c;
  ps_status st;
} ckpt_job;

static void *ckpt_thread(void *arg) {
  ckpt_job *j = arg;
  j->st = ps_client_checkpoint(j->c, 1, "ck-hold", NULL);
  return NULL;
}

static json_int_t queue_field(ps_client *c, const char *key) {
  char *js = NULL;
  assert_int_equal(ps_client_stats(c, 0, &js, NULL), PS_OK);
  json_t *doc = json_loads(js, 0, NULL);
  free(js);
  assert_non_null(doc);
  json_int_t v = json_integer_value(json_object_get(json_object_get(doc, "queue"), key));
  json_decref(doc);
  return v;
}

static void test_held_during_checkpoint(void **state) {
  (void)state;
  char dir[512], d[600];
  pt_tmpdir_s0("hold", dir, d);
  pt_server s;
  const char *extra[] = {"--inject-delay-us", "1500000", NULL};
  assert_true(pt_start_args(&s, 0, 1, d, 0, 1, extra));
  ps_client *a = pt_client(&s, 1, 0, 15000), *b = pt_client(&s, 1, 0, 15000);
  ps_client *c = pt_client(&s, 1, 0, 15000);
  assert_non_null(a);
  assert_non_null(b);
  assert_non_null(c);
  ps_table_spec t;
  ps_table_spec_default(&t, TAB, "hold", DIM);
  assert_int_equal(ps_client_declare(a, &t, NULL), PS_OK);
  uint64_t k[N];
  float g[N * DIM], p0[N * DIM], p1[N * DIM];
  for (int i = 0; i < N; i++) k[i] = 100 + (uint64_t)i;
  for (int i = 0; i < N * DIM; i++) g[i] = 1.0f + (float)i;

  ps_client_req *r0 = NULL, *ru = NULL, *r1 = NULL;
  assert_int_equal(ps_client_pull_start(a, TAB, 0, k, N, true, p0, &r0, NULL), PS_OK);
  sleep_ms(20);
  ckpt_job job = {.c = b, .st = PS_ERR_INTERNAL};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, ckpt_thread, &job), 0);
  sleep_ms(280);
  assert_int_equal(ps_client_push_start(a, TAB, 0, k, N, true, g, &ru, NULL), PS_OK);
  assert_int_equal(ps_client_pull_start(a, TAB, 0, k, N, true, p1, &r1, NULL), PS_OK);
  /* poll, bounded: on a loaded machine the requests may land late (P0 ends at 1.5 s) */
  json_int_t held = 0;
  for (int i = 0; i < 20 && held != 2; i++) {
    sleep_ms(50);
    held = queue_field(c, "held");
  }
  assert_int_equal(held, 2);

  assert_int_equal(ps_client_wait(a, &r0, NULL), PS_OK);
  assert_int_equal(ps_client_wait(a, &ru, NULL), PS_OK);
  assert_int_equal(ps_client_wait(a, &r1, NULL), PS_OK);
  pthread_join(th, NULL);
  assert_int_equal(job.st, PS_OK);
  for (int i = 0; i < N * DIM; i++)
    if (fabsf(p1[i] - (p0[i] - t.lr * g[i])) > 1e-5f)
      fail_msg("value %d: the held pull read %g, want %g (the held push applied first)", i,
               p1[i], p0[i] - t.lr * g[i]);
  assert_int_equal(queue_field(c, "held"), 0);
  ps_client_destroy(&a);
  ps_client_destroy(&b);
  ps_client_destroy(&c);
  assert_int_equal(pt_stop(&s, SIGTERM, 10000), 0);
  pt_rmrf(dir);
}

PS_TEST_MAIN("hold", NULL, NULL,
  cmocka_unit_test(test_held_during_checkpoint))

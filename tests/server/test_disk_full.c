/* Integration: ps-server on a disk that fills and empties again (issue 18). The data dir is a
 * 64 MB tmpfs (needs root: SKIPPED, exit 77, where mounting is not permitted); --cache-mb 1
 * and 2 partition threads, so every push is split over threads and most rows are written back.
 * Rows of 32 floats: once the disk is full RocksDB still takes writes until its 16 MB memtable
 * is full, so the keys pushed before the first refusal are ~16 MB over the row size (~350k at
 * 8 floats, ~170k at 32), and each of the three read-backs of every key costs that many.
 * - The disk fills; pushes of new keys go on (rows kept in memory) until one is answered with
 *   an error. That push applied nothing: every key reads what the test computed on its own
 *   (SGD, lr 1, from zero rows: minus the sum of the gradients pushed, in multiples of 1/8),
 *   and pulls of pushed, written-back and never-seen keys all work on the full disk. STATS says
 *   writes_failing.
 * - Space comes back: without a restart the same push is retried until it is accepted (writes
 *   recover by themselves), and then it has been applied exactly once. Pushes alone: the
 *   shard used to find out only on a pull or a checkpoint, so refused pushes never ended.
 * - A clean shutdown (SIGTERM) and a restart on the same dir: every acknowledged row is there.
 * Before this change the push answered with an error had been applied, the pulls on the full
 * disk failed, and the refused push's retry applied it twice. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "ps_client.h"
#include "ps_test_disk.h"
#include "pt_cluster.h"

#define DIM 32
#define BATCH 4096
#define MAX_KEYS (1u << 19)

static char root[128], data[192], filler[192];
static float *expect;

static float grad_of(uint64_t key, int round, int d) {
  return (float)((key + (uint64_t)round * 5 + (uint64_t)d) % 9) * 0.125f;
}

static ps_status push(ps_client *c, const uint64_t *k, int round, ps_error *e) {
  static float g[BATCH * DIM];
  for (size_t i = 0; i < BATCH; i++)
    for (int d = 0; d < DIM; d++) g[i * DIM + d] = grad_of(k[i], round, d);
  ps_status st = ps_client_push_unique(c, 1, 0, k, BATCH, g, e);
  if (st == PS_OK)
    for (size_t i = 0; i < BATCH; i++)
      for (int d = 0; d < DIM; d++) expect[k[i] * DIM + d] -= g[i * DIM + d];
  return st;
}

/* Keys below nkeys and a batch beyond them (never pushed) read as expected. */
static void check_all(ps_client *c, uint64_t nkeys) {
  static uint64_t k[BATCH];
  static float row[BATCH * DIM];
  for (uint64_t base = 0; base < nkeys + BATCH; base += BATCH) {
    for (size_t i = 0; i < BATCH; i++) k[i] = base + i;
    ps_error e;
    ps_status st = ps_client_pull_unique(c, 1, 0, k, BATCH, row, &e);
    if (st != PS_OK) fail_msg("pull at key %llu: %s", (unsigned long long)base, e.msg);
    assert_true(ps_test_rows_match(k, BATCH, DIM, row, expect, nkeys));
  }
}

static bool writes_failing(ps_client *c) {
  char *js = NULL;
  assert_int_equal(ps_client_stats(c, 0, &js, NULL), PS_OK);
  bool f = strstr(js, "\"writes_failing\": true") || strstr(js, "\"writes_failing\":true");
  free(js);
  return f;
}

static ps_client *connect_to(const pt_server *s) {
  ps_client *c = pt_client(s, 1, 0, 60000);
  assert_non_null(c);
  ps_table_spec t;
  ps_test_sgd_spec(&t, DIM);
  assert_int_equal(ps_client_declare(c, &t, NULL), PS_OK);
  return c;
}

static void test_disk_full(void **st) {
  (void)st;
  expect = calloc((size_t)MAX_KEYS * DIM, sizeof(float));
  assert_non_null(expect);
  const char *args[] = {"--cache-mb", "1", NULL};
  pt_server s;
  assert_true(pt_start_args(&s, 0, 1, data, 0, 2, args));
  ps_client *c = connect_to(&s);
  static uint64_t k[BATCH];
  uint64_t next = 0;
  int round = 0;
  ps_error e;
  for (; next < 8 * BATCH; next += BATCH, round++) { /* 8x the hot tier, written back */
    for (size_t i = 0; i < BATCH; i++) k[i] = next + i;
    assert_int_equal(push(c, k, round, &e), PS_OK);
  }
  assert_true(ps_test_fill(filler));
  bool refused = false, seen_failing = false;
  while (!refused) {
    assert_true(next + 2 * BATCH <= MAX_KEYS);
    for (size_t i = 0; i < BATCH; i++) k[i] = next + i;
    refused = push(c, k, round, &e) != PS_OK;
    if (!refused) {
      next += BATCH;
      round++;
      seen_failing |= writes_failing(c);
    }
  }
  /* Nothing of the refused push applied; every read works on the full disk. */
  check_all(c, next + BATCH);
  if (!strstr(e.msg, "refused")) fail_msg("the push failed otherwise: %s", e.msg);
  assert_true(seen_failing || writes_failing(c));
  /* Space comes back: the same push, retried, gets in once writes work again. */
  assert_int_equal(unlink(filler), 0);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    ps_status pst = push(c, k, round, &e);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (pst == PS_OK) break;
    assert_true(t1.tv_sec - t0.tv_sec < 60);
    usleep(100 * 1000);
  }
  print_message("pushes alone got in again %.1f s after space came back\n",
                (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
  next += BATCH;
  assert_false(writes_failing(c));
  check_all(c, next);
  /* A clean shutdown keeps every acknowledged row. */
  ps_client_destroy(&c);
  assert_int_equal(pt_stop(&s, SIGTERM, 60000), 0);
  assert_true(pt_start_args(&s, 0, 1, data, 0, 2, args));
  c = connect_to(&s);
  check_all(c, next);
  ps_client_destroy(&c);
  assert_int_equal(pt_stop(&s, SIGTERM, 60000), 0);
  free(expect);
}

int main(void) {
  snprintf(root, sizeof root, "/tmp/ember-test-srv-disk-%d", (int)getpid());
  if (!ps_test_tmpfs(root, "64m")) {
    printf("SKIPPED: cannot mount a tmpfs here (%s): needs root\n", strerror(errno));
    rmdir(root);
    return 77;
  }
  snprintf(data, sizeof data, "%s/s0", root);
  snprintf(filler, sizeof filler, "%s/filler", root);
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_disk_full)};
  int rc = cmocka_run_group_tests_name("server_disk_full", tests, NULL, NULL);
  ps_test_tmpfs_drop(root);
  return rc;
}

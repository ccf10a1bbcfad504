/* A store whose disk fills and empties again: nothing acknowledged is lost, nothing refused is
 * applied, reads go on, writes resume by themselves.
 *
 * One scenario, two ways of filling the disk (one source, two ctest targets):
 * - test_store_write_fail (everywhere): the linker's --wrap makes rocksdb_write and
 *   rocksdb_flush_cf fail with RocksDB's "No space left on device" text while `full` is set;
 * - test_store_disk_full (root): the data dir is a 32 MB tmpfs, filled with a filler file and
 *   given back by deleting it, so RocksDB itself stops and resumes writes (SKIPPED, exit 77,
 *   where mounting is not permitted).
 * The scenario: rows pushed with a small hot tier (most are written back), the disk fills,
 * pushes go on (new keys and rows read back from RocksDB) until ps_store_push_admit refuses one;
 * that push and its retry change nothing and every row reads as expected; space comes back,
 * writes recover without a restart (stats), the refused push is retried once, and after a close
 * and reopen every row is what the test computed on its own: SGD with lr 1 from zero rows is
 * minus the sum of the gradients pushed, in multiples of 1/8 that float adds exactly. Before
 * this change a push on the full disk answered PS_ERR_IO after applying its rows, and the rows
 * whose write-back failed were dropped from memory. */
#include <setjmp.h>
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
#include <rocksdb/c.h>

#include "ps_store.h"
#include "ps_test_disk.h"

#define DIM 8
#define BATCH 256
#define OLD_KEYS 20000 /* pushed before the disk fills: ~4x what the hot tier holds */
#define MAX_KEYS 400000

static char dir[256], filler[300];
static bool full;

#ifdef DISK_INJECT
void __real_rocksdb_write(rocksdb_t *db, const rocksdb_writeoptions_t *o, rocksdb_writebatch_t *b,
                          char **err);
void __wrap_rocksdb_write(rocksdb_t *db, const rocksdb_writeoptions_t *o, rocksdb_writebatch_t *b,
                          char **err) {
  if (full) *err = strdup("IO error: No space left on device: injected by the test");
  else __real_rocksdb_write(db, o, b, err);
}
void __real_rocksdb_flush_cf(rocksdb_t *db, const rocksdb_flushoptions_t *o,
                             rocksdb_column_family_handle_t *cf, char **err);
void __wrap_rocksdb_flush_cf(rocksdb_t *db, const rocksdb_flushoptions_t *o,
                             rocksdb_column_family_handle_t *cf, char **err) {
  if (full) *err = strdup("IO error: No space left on device: injected by the test");
  else __real_rocksdb_flush_cf(db, o, cf, err);
}
static void fill(void) { full = true; }
static void unfill(void) { full = false; }
#else
static void fill(void) {
  assert_true(ps_test_fill(filler));
  full = true;
}
static void unfill(void) {
  assert_int_equal(unlink(filler), 0);
  full = false;
}
#endif

static float *expect; /* MAX_KEYS x DIM: what every row must read */

static float grad_of(uint64_t key, int round, int d) {
  return (float)((key + (uint64_t)round * 3 + (uint64_t)d) % 9) * 0.125f;
}

static int push_errors; /* pushes that answered an error other than the admission's refusal */

/* A push the way ps-server makes one: admitted first; *applied says whether it got in. A push
 * that answers an error counts, as for a client, as not applied. */
static ps_status push(ps_store *s, const uint64_t *k, size_t n, int round, bool *applied) {
  float g[BATCH * DIM];
  for (size_t i = 0; i < n; i++)
    for (int d = 0; d < DIM; d++) g[i * DIM + d] = grad_of(k[i], round, d);
  ps_error e;
  *applied = false;
  ps_status st = ps_store_push_admit(s, 1, n, &e);
  if (st != PS_OK) {
    assert_int_equal(st, PS_ERR_NOMEM);
    assert_non_null(strstr(e.msg, "refused"));
    return st;
  }
  st = ps_store_push(s, 1, k, n, g);
  if (st != PS_OK) { /* a write that fails must not fail the push: checked at the end */
    push_errors++;
    return st;
  }
  *applied = true;
  for (size_t i = 0; i < n; i++)
    for (int d = 0; d < DIM; d++) expect[k[i] * DIM + d] -= g[i * DIM + d];
  return st;
}

/* Every key below nkeys (and some never pushed) reads as expected. */
static void check_all(ps_store *s, uint64_t nkeys) {
  uint64_t k[BATCH];
  float row[BATCH * DIM];
  for (uint64_t base = 0; base < nkeys + BATCH; base += BATCH) {
    for (size_t i = 0; i < BATCH; i++) k[i] = base + i;
    assert_int_equal(ps_store_pull(s, 1, k, BATCH, row), PS_OK);
    assert_true(ps_test_rows_match(k, BATCH, DIM, row, expect, nkeys));
  }
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Both tests' store: a 256 KB hot tier over 2 partitions (most rows get written back) and
 * 2 MB memtables (RocksDB resumes writes once that much is free); expectations all zero. */
static const ps_store_options opts = {.path = dir, .cache_bytes = 256u << 10, .partitions = 2,
                                      .write_buffer_bytes = 2u << 20};

static ps_store *open_fresh(void) {
  expect = calloc((size_t)MAX_KEYS * DIM, sizeof(float));
  assert_non_null(expect);
  ps_store *s = NULL;
  assert_int_equal(ps_store_open(&opts, &s, NULL), PS_OK);
  ps_table_spec t;
  ps_test_sgd_spec(&t, DIM);
  assert_int_equal(ps_store_declare(s, &t, NULL), PS_OK);
  return s;
}

/* Closes the store, reopens it, and checks every row (then closes it for good); no push may
 * have answered an error. */
static void close_and_check(ps_store **s, uint64_t nkeys) {
  ps_store_close(s);
  assert_int_equal(ps_store_open(&opts, s, NULL), PS_OK);
  check_all(*s, nkeys);
  ps_store_close(s);
  free(expect);
  assert_int_equal(push_errors, 0);
}

static void test_full_disk(void **st) {
  (void)st;
  ps_store *s = open_fresh();
  uint64_t k[BATCH];
  bool applied;
  for (uint64_t base = 0; base < OLD_KEYS; base += BATCH) {
    for (size_t i = 0; i < BATCH; i++) k[i] = base + i;
    assert_int_equal(push(s, k, BATCH, 0, &applied), PS_OK);
  }
  ps_store_stats ss;
  ps_store_get_stats(s, &ss);
  assert_true(ss.writebacks > 0 && ss.writes_failing == 0);

  /* The disk fills. Pushes of new keys and of rows written back before go on until the rows
   * that cannot be written fill the hot tier. */
  fill();
  uint64_t next = OLD_KEYS, round = 1;
  bool failing_seen = false, applied_while_failing = false, refused = false;
  while (!refused) {
    assert_true(next + BATCH <= MAX_KEYS);
    for (size_t i = 0; i < BATCH; i++)
      k[i] = i % 4 == 0 ? (next + i * 7919) % OLD_KEYS : next + i; /* 1/4 old, cold rows */
    refused = push(s, k, BATCH, (int)round, &applied) != PS_OK;
    if (applied) {
      next += BATCH;
      round++;
      applied_while_failing |= failing_seen;
    }
    ps_store_get_stats(s, &ss);
    failing_seen |= ss.writes_failing == 1;
  }
  /* The refused push changed nothing, a retry while full is refused again, and every row and
   * unseen key reads as expected on the full disk. */
  assert_int_not_equal(push(s, k, BATCH, (int)round, &applied), PS_OK);
  check_all(s, next + BATCH);
  assert_int_equal(push_errors, 0);
  assert_true(failing_seen && applied_while_failing);
  assert_true(ss.unwritten_bytes > 0 && ss.write_failures > 0);
  ps_error e;
  assert_int_not_equal(ps_store_flush(s, &e), PS_OK);

  /* Space comes back: writes recover by themselves (RocksDB within its 5 s poll, the store on
   * its next try), with reads as the only traffic. */
  unfill();
  double t0 = now_s();
  for (;;) {
    ps_store_get_stats(s, &ss);
    if (!ss.writes_failing) break;
    assert_true(now_s() - t0 < 60.0);
    uint64_t probe[2] = {1, 2};
    float row[2 * DIM];
    assert_int_equal(ps_store_pull(s, 1, probe, 2, row), PS_OK);
    usleep(50 * 1000);
  }
  /* The refused push, retried: applied exactly once. */
  assert_int_equal(push(s, k, BATCH, (int)round, &applied), PS_OK);
  next += BATCH;
  check_all(s, next);
  assert_int_equal(ps_store_flush(s, NULL), PS_OK);
  ps_store_get_stats(s, &ss);
  assert_int_equal(ss.unwritten_rows, 0);
  close_and_check(&s, next); /* everything acknowledged survives a clean shutdown */
}

/* The data dir sees a full disk and it is given back before close: the rows kept in memory
 * are all written by the close itself (which waits for RocksDB to take writes again). */
static void test_close_after_space_returns(void **st) {
  (void)st;
  ps_store *s = open_fresh();
  uint64_t k[BATCH], next = 0;
  bool applied;
  fill();
  ps_store_stats ss;
  for (int round = 0; round < 400; round++) { /* until writes fail and a while after */
    for (size_t i = 0; i < BATCH; i++) k[i] = next + i;
    if (push(s, k, BATCH, round, &applied) != PS_OK) break;
    next += BATCH;
    ps_store_get_stats(s, &ss);
    if (ss.writes_failing && ss.unwritten_rows > 1000) break;
  }
  ps_store_get_stats(s, &ss);
  assert_true(ss.writes_failing == 1 && ss.unwritten_rows > 0);
  unfill();
  close_and_check(&s, next);
}

static int setup(void **st) {
  (void)st;
  char root[128];
  snprintf(root, sizeof root, "/tmp/ember-test-disk-full-%d", (int)getpid());
  mkdir(root, 0700);
#ifndef DISK_INJECT
  if (!ps_test_tmpfs(root, "32m")) return -1;
#endif
  snprintf(dir, sizeof dir, "%s/db", root);
  snprintf(filler, sizeof filler, "%s/filler", root);
  return 0;
}

static int per_test_clean(void **st) {
  (void)st;
  ps_store_snapshot_remove(dir, NULL);
  unlink(filler);
  full = false;
  push_errors = 0;
  return 0;
}

int main(void) {
  if (setup(NULL) != 0) {
    printf("SKIPPED: cannot mount a tmpfs here (%s): needs root\n", strerror(errno));
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_full_disk, per_test_clean, per_test_clean),
      cmocka_unit_test_setup_teardown(test_close_after_space_returns, per_test_clean,
                                      per_test_clean),
  };
  int rc = cmocka_run_group_tests_name("store_disk_full", tests, NULL, NULL);
  char root[128];
  snprintf(root, sizeof root, "/tmp/ember-test-disk-full-%d", (int)getpid());
#ifndef DISK_INJECT
  ps_test_tmpfs_drop(root);
#endif
  rmdir(root);
  return rc;
}

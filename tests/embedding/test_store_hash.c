/* A key hashed once: the store's partition of a key comes from the same hash that names its
 * shard (ps_key_hash), from bits disjoint from the shard's so one shard's keys still spread
 * over every partition, and a batch answers the server's ownership question from the hashes
 * it already holds (ps_store_batch_check_shard), naming the lowest foreign position. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_hash.h"
#include "ps_store.h"

enum { P = 4, SHARDS = 3, N = 60000 };

static ps_store *open_store(char *dir, size_t cap) {
  snprintf(dir, cap, "/tmp/ember-test-store-hash-%d", (int)getpid());
  ps_store_options o = {.path = dir, .cache_bytes = 8u << 20, .partitions = P};
  ps_store *s = NULL;
  assert_int_equal(ps_store_open(&o, &s, NULL), PS_OK);
  return s;
}

static void test_partition_from_the_shard_hash(void **st) {
  (void)st;
  char dir[128];
  ps_store *s = open_store(dir, sizeof dir);
  /* The partition is a function of ps_key_hash, and the keys of one shard (a third of the
   * key hash's top range) fill all P partitions within 5% of evenly. */
  uint64_t per[P] = {0};
  size_t n0 = 0;
  for (uint64_t k = 0; k < N; k++) {
    uint64_t h = ps_key_hash(k * 7919 + 3);
    assert_int_equal(ps_store_partition_of(s, k * 7919 + 3), ps_partition_of_hash(h, P));
    if (ps_shard_of_hash(h, SHARDS) != 0) continue;
    per[ps_partition_of_hash(h, P)]++;
    n0++;
  }
  for (int p = 0; p < P; p++) {
    double share = (double)per[p] / (double)n0;
    assert_true(share > 0.95 / P && share < 1.05 / P);
  }
  ps_store_close(&s);
  assert_int_equal(ps_store_snapshot_remove(dir, NULL), PS_OK);
}

static void test_batch_checks_shard(void **st) {
  (void)st;
  char dir[128];
  ps_store *s = open_store(dir, sizeof dir);
  /* 500 keys of shard 1, then two foreign keys at positions 321 and 77. */
  uint64_t keys[500];
  size_t n = 0;
  for (uint64_t k = 1; n < 500; k++)
    if (ps_shard_of(k, SHARDS) == 1) keys[n++] = k;
  ps_store_batch *b = NULL;
  assert_int_equal(ps_store_batch_create(s, keys, n, &b), PS_OK);
  size_t pos = 99;
  assert_int_equal(ps_store_batch_check_shard(b, 1, SHARDS, &pos), PS_OK);
  assert_int_equal(pos, 99); /* untouched */
  assert_int_equal(ps_store_batch_check_shard(b, 0, 1, &pos), PS_OK); /* one shard owns all */
  ps_store_batch_destroy(&b);
  uint64_t foreign[2];
  size_t nf = 0;
  for (uint64_t k = 1000000; nf < 2; k++)
    if (ps_shard_of(k, SHARDS) != 1) foreign[nf++] = k;
  keys[321] = foreign[0];
  keys[77] = foreign[1];
  assert_int_equal(ps_store_batch_create(s, keys, n, &b), PS_OK);
  assert_int_equal(ps_store_batch_check_shard(b, 1, SHARDS, &pos), PS_ERR_WRONG_SHARD);
  assert_int_equal(pos, 77);
  ps_store_batch_destroy(&b);
  assert_int_equal(ps_store_batch_check_shard(NULL, 1, SHARDS, &pos), PS_ERR_INVALID);
  ps_store_close(&s);
  assert_int_equal(ps_store_snapshot_remove(dir, NULL), PS_OK);
}

PS_TEST_MAIN("store_hash", NULL, NULL,
    cmocka_unit_test(test_partition_from_the_shard_hash),
    cmocka_unit_test(test_batch_checks_shard))

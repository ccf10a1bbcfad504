/* ps_store_pull_state (a PULL with_state's store read, for ps-worker's deep lookahead): after
 * three pushes over 6,000 keys with a 256 KiB hot tier (most rows then in RocksDB), every key's
 * row with state is, byte for byte, a replay on this side -- the initial row
 * (ps_store_init_row), the initial state (ps_optim_init_state) and the three gradients through
 * ps_optim_apply, the function the store calls -- for each sparse optimizer, hot and cold; its
 * values equal ps_store_pull's; a key never pushed gives its initial row and state; an f16
 * table is refused. Fails if the read misses the state, Adam's step count or a cold row, or if
 * the store's arithmetic were not ps_optim's. */
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
#include "ps_optim.h"
#include "ps_store.h"

enum { D = 8, N = 6000, NEW = 50, PASSES = 3 };

static float grad_of(uint64_t key, uint32_t j, uint32_t pass) {
  uint64_t r = ps_mix64(key * 131 + j + ((uint64_t)pass << 40));
  return (float)((double)(r >> 11) * 0x1.0p-53 - 0.5);
}

/* A store at dir with a hot tier of cache bytes in parts partitions. */
static ps_store *open_at(const char *dir, size_t cache, uint32_t parts) {
  ps_store_options o = {.path = dir, .cache_bytes = cache, .partitions = parts};
  ps_store *s = NULL;
  assert_int_equal(ps_store_open(&o, &s, NULL), PS_OK);
  return s;
}

static void one_optimizer(ps_optimizer opt) {
  char dir[256];
  snprintf(dir, sizeof dir, "/tmp/ember-test-store-state-%d-%d", (int)opt, (int)getpid());
  ps_store *s = open_at(dir, 256u << 10, 4);
  ps_table_spec sp;
  ps_table_spec_default(&sp, 1, "emb", D);
  sp.optimizer = opt;
  sp.lr = 0.05f;
  sp.initial_accumulator = 0.1f;
  sp.eps = 1e-8f;
  assert_int_equal(ps_store_declare(s, &sp, NULL), PS_OK);
  const size_t w = ps_store_state_row_floats(&sp);
  assert_int_equal(w, ps_optim_row_floats(&sp));
  uint64_t *keys = malloc((N + NEW) * sizeof *keys);
  float *g = malloc((size_t)N * D * sizeof *g);
  float *got = malloc((size_t)(N + NEW) * w * sizeof *got);
  float *vals = malloc((size_t)(N + NEW) * D * sizeof *vals);
  assert_non_null(keys && g && got && vals);
  for (size_t i = 0; i < N + NEW; i++) keys[i] = ps_mix64(i + 7);
  for (uint32_t p = 0; p < PASSES; p++) {
    for (size_t i = 0; i < N; i++)
      for (uint32_t j = 0; j < D; j++) g[i * D + j] = grad_of(keys[i], j, p);
    assert_int_equal(ps_store_push(s, 1, keys, N, g), PS_OK);
  }
  ps_store_stats st;
  ps_store_get_stats(s, &st);
  assert_true(st.evictions > 0 && st.rows_hot < N); /* most rows are read back from RocksDB */
  assert_int_equal(ps_store_pull_state(s, 1, keys, N + NEW, got), PS_OK);
  assert_int_equal(ps_store_pull(s, 1, keys, N + NEW, vals), PS_OK);
  float want[4 * D + 1], gk[D];
  size_t bad = 0;
  for (size_t i = 0; i < N + NEW; i++) {
    const bool adam = opt == PS_OPT_ADAM;
    uint32_t at = 0;
    ps_store_init_row(&sp, keys[i], want);
    ps_optim_init_state(&sp, want + D, adam ? &at : NULL);
    for (uint32_t p = 0; i < N && p < PASSES; p++) {
      for (uint32_t j = 0; j < D; j++) gk[j] = grad_of(keys[i], j, p);
      ps_optim_apply(&sp, want, want + D, adam ? &at : NULL, gk);
    }
    if (adam) memcpy(want + w - 1, &at, sizeof at);
    bad += memcmp(want, got + i * w, w * sizeof(float)) != 0 ||
           memcmp(vals + i * D, got + i * w, D * sizeof(float)) != 0;
  }
  assert_int_equal(bad, 0);
  free(keys);
  free(g);
  free(got);
  free(vals);
  ps_store_close(&s);
  assert_int_equal(ps_store_snapshot_remove(dir, NULL), PS_OK);
}

static void test_every_optimizer(void **state) {
  (void)state;
  const ps_optimizer opts[] = {PS_OPT_SGD, PS_OPT_ADAGRAD, PS_OPT_ROWWISE_ADAGRAD, PS_OPT_ADAM,
                               PS_OPT_FTRL};
  for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++) one_optimizer(opts[k]);
}

static void test_f16_refused(void **state) {
  (void)state;
  char dir[256];
  snprintf(dir, sizeof dir, "/tmp/ember-test-store-state-f16-%d", (int)getpid());
  ps_store *s = open_at(dir, 1u << 20, 2);
  ps_table_spec sp;
  ps_table_spec_default(&sp, 2, "emb16", D);
  sp.row_type = PS_ROW_F16;
  assert_int_equal(ps_store_declare(s, &sp, NULL), PS_OK);
  uint64_t k = 5;
  float out[4 * D + 1];
  assert_int_equal(ps_store_pull_state(s, 2, &k, 1, out), PS_ERR_UNSUPPORTED);
  ps_store_close(&s);
  assert_int_equal(ps_store_snapshot_remove(dir, NULL), PS_OK);
}

PS_TEST_MAIN("store_state", NULL, NULL, cmocka_unit_test(test_every_optimizer),
             cmocka_unit_test(test_f16_refused))

/* A push over a batch said to be unique (ps_store_batch_set_unique, what ps-server does for a
 * push flagged keys_unique): with distinct keys, the rows are bit for bit those of the same
 * push unflagged (Adagrad, hits and misses, four partitions); with the word wrong (a key
 * twice, among hits and among never-stored keys), the push is still applied as one Adagrad
 * step of the summed gradient, checked against a hand calculation in double, and equal bit
 * for bit to the unflagged push. Trusting the word would give two steps (a different row)
 * and insert a never-stored key twice. */
#include <math.h>
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

enum { P = 4, D = 5, TAB = 3, NPRE = 200, N1 = 300 };
static const float LR = 0.1f, IA = 0.1f, EPS = 1e-8f;

static ps_store *open_store(const char *tag, char *dir, size_t cap) {
  snprintf(dir, cap, "/tmp/ember-test-store-unique-%s-%d", tag, (int)getpid());
  ps_store_options o = {.path = dir, .cache_bytes = 16u << 20, .partitions = P};
  ps_store *s = NULL;
  assert_int_equal(ps_store_open(&o, &s, NULL), PS_OK);
  ps_table_spec sp;
  ps_table_spec_default(&sp, TAB, "emb", D);
  sp.optimizer = PS_OPT_ADAGRAD;
  sp.lr = LR;
  sp.initial_accumulator = IA;
  sp.eps = EPS;
  assert_int_equal(ps_store_declare(s, &sp, NULL), PS_OK);
  return s;
}

static void close_store(ps_store **s, const char *dir) {
  ps_store_close(s);
  assert_int_equal(ps_store_snapshot_remove(dir, NULL), PS_OK);
}

static float grad_of(uint64_t key, uint32_t j, uint32_t pass) {
  uint64_t r = ps_mix64(key * 31 + j + ((uint64_t)pass << 40));
  return (float)((double)(r >> 11) * 0x1.0p-53 - 0.5);
}

/* One push through a batch, flagged unique or not. */
static void push(ps_store *s, const uint64_t *keys, size_t n, const float *g, bool unique) {
  ps_store_batch *b = NULL;
  assert_int_equal(ps_store_batch_create(s, keys, n, &b), PS_OK);
  ps_store_batch_set_unique(b, unique);
  assert_int_equal(ps_store_push_batch(s, TAB, b, 0, 1, g), PS_OK);
  ps_store_batch_destroy(&b);
}

static void pull(ps_store *s, const uint64_t *keys, size_t n, float *out) {
  assert_int_equal(ps_store_pull(s, TAB, keys, n, out), PS_OK);
}

/* One Adagrad step in double: acc += g^2, w -= lr g / (sqrt(acc) + eps). */
static void adagrad(double *w, double *acc, const double *g) {
  for (int j = 0; j < D; j++) {
    acc[j] += g[j] * g[j];
    w[j] -= LR * g[j] / (sqrt(acc[j]) + EPS);
  }
}

static void test_unique_push(void **st) {
  (void)st;
  char da[128], db[128];
  ps_store *a = open_store("a", da, sizeof da), *b = open_store("b", db, sizeof db);
  static uint64_t keys[N1 + 8];
  static float g[(N1 + 8) * D], ra[(N1 + 8) * D], rb[(N1 + 8) * D], w0[(N1 + 8) * D];
  /* Keys 0..NPRE-1 stored by an unflagged push to both; their rows before it kept in w0. */
  for (size_t i = 0; i < NPRE; i++) keys[i] = i * 7919 + 11;
  pull(a, keys, NPRE, w0);
  for (size_t i = 0; i < NPRE * D; i++) g[i] = grad_of(keys[i / D], (uint32_t)(i % D), 0);
  push(a, keys, NPRE, g, false);
  push(b, keys, NPRE, g, false);

  /* Distinct keys, a third stored (hits), the rest never stored (misses): flagged on a,
   * unflagged on b, the same rows. */
  for (size_t i = 0; i < N1; i++) keys[i] = (i + NPRE / 2) * 7919 + 11;
  for (size_t i = 0; i < N1 * D; i++) g[i] = grad_of(keys[i / D], (uint32_t)(i % D), 1);
  push(a, keys, N1, g, true);
  push(b, keys, N1, g, false);
  pull(a, keys, N1, ra);
  pull(b, keys, N1, rb);
  assert_memory_equal(ra, rb, N1 * D * sizeof(float));

  /* The word wrong: key 0 (stored once, by the first push, and not by the second) twice and
   * a never-stored key twice, among distinct ones. */
  const uint64_t k0 = 11, knew = 987654321;
  uint64_t dk[8] = {k0, 5 * 7919 + 11, knew, 6 * 7919 + 11, k0, 4242424242ull, knew, 17};
  float dg[8 * D], before[D], wn0[D];
  for (size_t i = 0; i < 8 * D; i++)
    dg[i] = grad_of(dk[i / D], (uint32_t)(i % D), 2 + (uint32_t)(i / D));
  pull(a, &knew, 1, wn0); /* its initial row (a pull of a never-stored key stores nothing) */
  pull(a, &k0, 1, before);
  push(a, dk, 8, dg, true);
  push(b, dk, 8, dg, false);
  pull(a, dk, 8, ra);
  pull(b, dk, 8, rb);
  assert_memory_equal(ra, rb, 8 * D * sizeof(float));
  /* By hand: k0 had one step from its initial row w0[0] with grad_of(k0, ., 0), then one
   * step of the sum of its two gradients here; knew one step of its sum from its initial row. */
  double w[D], acc[D], gs[D];
  for (int j = 0; j < D; j++) {
    w[j] = w0[j];
    acc[j] = IA;
    gs[j] = grad_of(k0, (uint32_t)j, 0);
  }
  adagrad(w, acc, gs);
  for (int j = 0; j < D; j++) assert_true(fabs(w[j] - before[j]) < 1e-6);
  for (int j = 0; j < D; j++) gs[j] = (double)(dg[0 * D + j] + dg[4 * D + j]);
  adagrad(w, acc, gs);
  for (int j = 0; j < D; j++) {
    assert_true(fabs(w[j] - ra[0 * D + j]) < 1e-6);
    assert_true(ra[4 * D + j] == ra[0 * D + j]);
  }
  for (int j = 0; j < D; j++) {
    w[j] = wn0[j];
    acc[j] = IA;
    gs[j] = (double)(dg[2 * D + j] + dg[6 * D + j]);
  }
  adagrad(w, acc, gs);
  for (int j = 0; j < D; j++) assert_true(fabs(w[j] - ra[2 * D + j]) < 1e-6);
  /* One row per key: the never-stored key entered the store once. */
  ps_store_stats sa, sb;
  ps_store_get_stats(a, &sa);
  ps_store_get_stats(b, &sb);
  assert_int_equal(sa.rows_hot, sb.rows_hot);
  assert_int_equal(sa.rows_hot, NPRE + N1 - NPRE / 2 + 3);
  close_store(&a, da);
  close_store(&b, db);
}

PS_TEST_MAIN("store_unique", NULL, NULL, cmocka_unit_test(test_unique_push))

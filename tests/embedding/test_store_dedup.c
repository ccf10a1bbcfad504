/* Unit: the _at forms of ps_dedup that the store's push uses (keys and gradient rows read
 * through a position list, as a batch groups the keys of one partition): the same unique
 * keys, inverse index and float sums, bit for bit, as ps_dedup_keys / ps_dedup_sum_rows over
 * a gathered copy, and a NULL position list refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ps_dedup.h"
#include "ps_hash.h"

enum { N = 3000, M = 1700, D = 5 };

static void test_dedup_at(void **state) {
  (void)state;
  ps_dedup *d = NULL;
  assert_int_equal(ps_dedup_create(&d), PS_OK);
  static uint64_t keys[N], gk[M], u1[M], u2[M];
  static uint32_t pos[M], inv1[M], inv2[M];
  static float grads[N * D], gg[M * D], s1[M * D], s2[M * D];
  for (size_t i = 0; i < N; i++) keys[i] = ps_mix64(i % 400); /* many repeats */
  for (size_t i = 0; i < N * D; i++) grads[i] = (float)(ps_mix64(i + 7) % 1000) * 1e-3f - 0.5f;
  /* Positions in increasing order with gaps (a partition's share of a batch). */
  for (size_t i = 0, p = 0; i < M; i++, p += 1 + (ps_mix64(i) & 1)) pos[i] = (uint32_t)p;
  for (size_t i = 0; i < M; i++) {
    gk[i] = keys[pos[i]];
    memcpy(gg + i * D, grads + (size_t)pos[i] * D, D * sizeof(float));
  }
  size_t n1 = 0, n2 = 0;
  assert_int_equal(ps_dedup_keys(d, gk, M, u1, inv1, &n1), PS_OK);
  assert_int_equal(ps_dedup_keys_at(d, keys, pos, M, u2, inv2, &n2), PS_OK);
  assert_true(n1 > 1 && n1 < M);
  assert_int_equal(n2, n1);
  assert_memory_equal(u2, u1, n1 * sizeof *u1);
  assert_memory_equal(inv2, inv1, M * sizeof *inv1);
  ps_dedup_sum_rows(inv1, M, n1, gg, D, s1);
  ps_dedup_sum_rows_at(inv2, pos, M, grads, D, s2);
  assert_memory_equal(s2, s1, n1 * D * sizeof *s1);
  /* An empty list is fine; positions missing for a non-empty one are not. */
  assert_int_equal(ps_dedup_keys_at(d, keys, pos, 0, u2, inv2, &n2), PS_OK);
  assert_int_equal(n2, 0);
  assert_int_equal(ps_dedup_keys_at(d, keys, NULL, M, u2, inv2, &n2), PS_ERR_INVALID);
  ps_dedup_destroy(&d);
  assert_null(d);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_dedup_at)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}

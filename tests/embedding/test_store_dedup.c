/* Unit: ps_dedup_sum_at, the one-pass de-duplication and gradient sum of the store's push
 * (keys, hashes and rows read through a position list, as a batch groups the keys of one
 * partition): the same unique keys and float sums, bit for bit, as ps_dedup_keys +
 * ps_dedup_sum_rows over a gathered copy, each unique key's own hash, and missing arguments
 * refused; ps_dedup_gather_unique_at, the check of keys said to be distinct, stopping at the
 * first repeat. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_dedup.h"
#include "ps_hash.h"

enum { N = 3000, M = 1700, D = 5 };

static void test_dedup_sum_at(void **state) {
  (void)state;
  ps_dedup *d = NULL;
  assert_int_equal(ps_dedup_create(&d), PS_OK);
  static uint64_t keys[N], hs[M], gk[M], u1[M], u2[M], uh[M];
  static uint32_t pos[M], inv[M];
  static float grads[N * D], gg[M * D], s1[M * D], s2[M * D];
  for (size_t i = 0; i < N; i++) keys[i] = ps_mix64(i % 400); /* many repeats */
  for (size_t i = 0; i < N * D; i++) grads[i] = (float)(ps_mix64(i + 7) % 1000) * 1e-3f - 0.5f;
  /* Positions in increasing order with gaps (a partition's share of a batch). */
  for (size_t i = 0, p = 0; i < M; i++, p += 1 + (ps_mix64(i) & 1)) pos[i] = (uint32_t)p;
  for (size_t i = 0; i < M; i++) {
    gk[i] = keys[pos[i]];
    hs[i] = ps_hash_u64(gk[i], 12345);
    memcpy(gg + i * D, grads + (size_t)pos[i] * D, D * sizeof(float));
  }
  size_t n1 = 0, n2 = 0;
  assert_int_equal(ps_dedup_keys(d, gk, M, u1, inv, &n1), PS_OK);
  ps_dedup_sum_rows(inv, M, n1, gg, D, s1);
  assert_int_equal(ps_dedup_sum_at(d, keys, pos, hs, M, grads, D, u2, uh, s2, &n2), PS_OK);
  assert_true(n1 > 1 && n1 < M);
  assert_int_equal(n2, n1);
  assert_memory_equal(u2, u1, n1 * sizeof *u1);
  assert_memory_equal(s2, s1, n1 * D * sizeof *s1);
  for (size_t u = 0; u < n2; u++) assert_true(uh[u] == ps_hash_u64(u2[u], 12345));
  /* Without unique_hashes: the same keys and sums. */
  memset(s2, 0, sizeof s2);
  assert_int_equal(ps_dedup_sum_at(d, keys, pos, hs, M, grads, D, u2, NULL, s2, &n2), PS_OK);
  assert_int_equal(n2, n1);
  assert_memory_equal(u2, u1, n1 * sizeof *u1);
  assert_memory_equal(s2, s1, n1 * D * sizeof *s1);
  /* An empty list is fine; positions, hashes or sums missing for a non-empty one are not. */
  n2 = 99;
  assert_int_equal(ps_dedup_sum_at(d, keys, pos, hs, 0, grads, D, u2, uh, s2, &n2), PS_OK);
  assert_int_equal(n2, 0);
  assert_int_equal(ps_dedup_sum_at(d, keys, NULL, hs, M, grads, D, u2, uh, s2, &n2),
                   PS_ERR_INVALID);
  assert_int_equal(ps_dedup_sum_at(d, keys, pos, NULL, M, grads, D, u2, uh, s2, &n2),
                   PS_ERR_INVALID);
  assert_int_equal(ps_dedup_sum_at(d, keys, pos, hs, M, grads, D, u2, uh, NULL, &n2),
                   PS_ERR_INVALID);
  ps_dedup_destroy(&d);
  assert_null(d);
}

/* ps_dedup_gather_unique_at: distinct keys gathered through the positions (all n); a repeat
 * stops it at the repeat's position, whether the first copy is one key back or far back. */
static void test_gather_unique_at(void **state) {
  (void)state;
  ps_dedup *d = NULL;
  assert_int_equal(ps_dedup_create(&d), PS_OK);
  static uint64_t keys[N], hs[M], got[M];
  static uint32_t pos[M];
  for (size_t i = 0; i < N; i++) keys[i] = ps_mix64(i) | 1; /* distinct */
  for (size_t i = 0, p = 0; i < M; i++, p += 1 + (ps_mix64(i) & 1)) pos[i] = (uint32_t)p;
  for (size_t i = 0; i < M; i++) hs[i] = ps_hash_u64(keys[pos[i]], 12345);
  size_t g = 0;
  assert_int_equal(ps_dedup_gather_unique_at(d, keys, pos, hs, M, got, &g), PS_OK);
  assert_int_equal(g, M);
  for (size_t i = 0; i < M; i++) assert_true(got[i] == keys[pos[i]]);
  const size_t at[][2] = {{1000, 999}, {1500, 3}, {M - 1, 0}}; /* {repeat, first copy} */
  for (size_t c = 0; c < 3; c++) {
    const uint32_t keep = pos[at[c][0]];
    const uint64_t keeph = hs[at[c][0]];
    pos[at[c][0]] = pos[at[c][1]];
    hs[at[c][0]] = hs[at[c][1]];
    assert_int_equal(ps_dedup_gather_unique_at(d, keys, pos, hs, M, got, &g), PS_OK);
    assert_int_equal(g, at[c][0]);
    pos[at[c][0]] = keep;
    hs[at[c][0]] = keeph;
  }
  assert_int_equal(ps_dedup_gather_unique_at(d, keys, pos, hs, 0, got, &g), PS_OK);
  assert_int_equal(g, 0);
  assert_int_equal(ps_dedup_gather_unique_at(d, keys, NULL, hs, M, got, &g), PS_ERR_INVALID);
  assert_int_equal(ps_dedup_gather_unique_at(d, keys, pos, NULL, M, got, &g), PS_ERR_INVALID);
  ps_dedup_destroy(&d);
}

PS_TEST_MAIN("store_dedup", NULL, NULL,
    cmocka_unit_test(test_dedup_sum_at),
    cmocka_unit_test(test_gather_unique_at))

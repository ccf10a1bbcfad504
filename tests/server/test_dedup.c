/* Unit: ps_dedup against a naive O(n^2) reference: unique keys in first-occurrence order,
 * inverse index, gather and sum of rows; sizes 0, 1, all equal, all distinct, random. */
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

static void check(ps_dedup *d, const uint64_t *k, size_t n) {
  uint64_t *u = malloc((n + 1) * sizeof *u), *ru = malloc((n + 1) * sizeof *ru);
  uint32_t *inv = malloc((n + 1) * sizeof *inv);
  size_t nu = 99, rn = 0;
  assert_int_equal(ps_dedup_keys(d, k, n, u, inv, &nu), PS_OK);
  for (size_t i = 0; i < n; i++) {
    size_t j = 0;
    while (j < rn && ru[j] != k[i]) j++;
    if (j == rn) ru[rn++] = k[i];
    assert_int_equal(inv[i], j);
  }
  assert_int_equal(nu, rn);
  if (rn) assert_memory_equal(u, ru, rn * sizeof *u);
  /* rows */
  enum { D = 3 };
  float *in = malloc((n + 1) * D * sizeof *in), *sum = calloc((nu + 1) * D, sizeof *sum),
        *rsum = calloc((nu + 1) * D, sizeof *rsum), *g = malloc((n + 1) * D * sizeof *g);
  for (size_t i = 0; i < n * D; i++) in[i] = (float)(i % 17) * 0.25f;
  ps_dedup_sum_rows(inv, n, nu, in, D, sum);
  for (size_t i = 0; i < n; i++)
    for (int j = 0; j < D; j++) rsum[inv[i] * D + j] += in[i * D + j];
  for (size_t i = 0; i < nu * D; i++) assert_true(sum[i] == rsum[i]);
  ps_dedup_gather_rows(inv, n, sum, D, g);
  for (size_t i = 0; i < n; i++)
    for (int j = 0; j < D; j++) assert_true(g[i * D + j] == sum[inv[i] * D + j]);
  free(u);
  free(ru);
  free(inv);
  free(in);
  free(sum);
  free(rsum);
  free(g);
}

static void test_dedup(void **state) {
  (void)state;
  ps_dedup *d = NULL;
  assert_int_equal(ps_dedup_create(&d), PS_OK);
  check(d, NULL, 0);
  uint64_t one = 42;
  check(d, &one, 1);
  uint64_t same[100];
  for (int i = 0; i < 100; i++) same[i] = 0;
  check(d, same, 100);
  uint64_t *k = malloc(5000 * sizeof *k);
  for (int i = 0; i < 5000; i++) k[i] = ps_mix64((uint64_t)i);
  check(d, k, 5000);
  uint64_t x = 1;
  for (int round = 0; round < 20; round++) {
    size_t n = 1 + (size_t)(ps_mix64(x) % 3000);
    for (size_t i = 0; i < n; i++) {
      x = ps_mix64(x);
      k[i] = x % (1 + (uint64_t)round * 50); /* heavy to light duplication */
    }
    check(d, k, n);
  }
  free(k);
  ps_dedup_destroy(&d);
  assert_null(d);
}

PS_TEST_MAIN("dedup", NULL, NULL,
  cmocka_unit_test(test_dedup))

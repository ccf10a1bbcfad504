/* Histogram percentiles against sorted exact values, merge, count_le, bucket bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <math.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_hash.h"
#include "ps_hist.h"

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The exact percentile under the same definition: smallest v with >= p% of values <= v. */
static uint64_t exact_pct(const uint64_t *sorted, size_t n, double p) {
  if (p <= 0) return sorted[0];
  size_t rank = (size_t)ceil(p / 100.0 * (double)n);
  if (rank < 1) rank = 1;
  if (rank > n) rank = n;
  return sorted[rank - 1];
}

static void check_distribution(uint64_t (*gen)(uint64_t *state), size_t n) {
  uint64_t *v = malloc(n * sizeof *v);
  ps_hist *h = ps_hist_create();
  uint64_t st = 42;
  for (size_t i = 0; i < n; i++) {
    v[i] = gen(&st);
    ps_hist_record(h, v[i]);
  }
  qsort(v, n, sizeof *v, cmp_u64);
  const double ps[] = {0, 1, 10, 25, 50, 75, 90, 99, 99.9, 99.99, 100};
  for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
    double e = (double)exact_pct(v, n, ps[i]);
    double got = (double)ps_hist_percentile(h, ps[i]);
    double rel = e == 0 ? fabs(got) : fabs(got - e) / e;
    if (rel > 0.01) fail_msg("p%.2f: hist %.0f exact %.0f (rel err %.4f)", ps[i], got, e, rel);
  }
  assert_int_equal(ps_hist_count(h), n);
  assert_int_equal(ps_hist_min(h), v[0]);
  assert_int_equal(ps_hist_max(h), v[n - 1]);
  free(v);
  ps_hist_destroy(&h);
  assert_null(h);
}

static uint64_t gen_uniform(uint64_t *s) { return (*s = ps_mix64(*s)) % 1000000; }
static uint64_t gen_lognormal(uint64_t *s) {
  double u1 = ((*s = ps_mix64(*s)) >> 11) * 0x1.0p-53, u2 = ((*s = ps_mix64(*s)) >> 11) * 0x1.0p-53;
  double z = sqrt(-2 * log(u1 + 1e-300)) * cos(6.283185307179586 * u2);
  return (uint64_t)exp(11.0 + 2.0 * z); /* latencies in ns spanning µs to s */
}
static uint64_t gen_small(uint64_t *s) { return (*s = ps_mix64(*s)) % 300; }
static uint64_t gen_huge(uint64_t *s) { return (*s = ps_mix64(*s)) | (1ull << 62); }

static void test_uniform(void **st) { (void)st; check_distribution(gen_uniform, 100000); }
static void test_lognormal(void **st) { (void)st; check_distribution(gen_lognormal, 200000); }
static void test_small_values(void **st) { (void)st; check_distribution(gen_small, 5000); }
static void test_huge_values(void **st) { (void)st; check_distribution(gen_huge, 5000); }

static void test_merge_equals_single(void **st) {
  (void)st;
  ps_hist *a = ps_hist_create(), *b = ps_hist_create(), *all = ps_hist_create();
  uint64_t s = 7;
  for (int i = 0; i < 50000; i++) {
    uint64_t x = gen_lognormal(&s);
    ps_hist_record(i % 3 ? a : b, x);
    ps_hist_record(all, x);
  }
  ps_hist_merge(a, b);
  assert_int_equal(ps_hist_count(a), ps_hist_count(all));
  for (double p = 0; p <= 100; p += 0.5)
    assert_int_equal(ps_hist_percentile(a, p), ps_hist_percentile(all, p));
  /* Raw bucket transfer (as a stats reply does) reproduces the histogram. */
  ps_hist *c = ps_hist_create();
  ps_hist_add_buckets(c, ps_hist_buckets(all), ps_hist_nbuckets(), ps_hist_min(all), ps_hist_max(all));
  for (double p = 0; p <= 100; p += 0.5)
    assert_int_equal(ps_hist_percentile(c, p), ps_hist_percentile(all, p));
  ps_hist_destroy(&a);
  ps_hist_destroy(&b);
  ps_hist_destroy(&all);
  ps_hist_destroy(&c);
}

static void test_buckets_tile_the_range(void **st) {
  (void)st;
  uint64_t prev_hi = 0;
  size_t n = ps_hist_nbuckets();
  for (size_t i = 0; i < n; i++) {
    uint64_t lo, hi;
    ps_hist_bucket_range(i, &lo, &hi);
    if (i) assert_int_equal(lo, prev_hi + 1);
    else assert_int_equal(lo, 0);
    assert_true(hi >= lo);
    /* relative width <= 1/64 keeps the midpoint within 1/128 */
    if (lo >= 128) assert_true((double)(hi - lo + 1) / (double)lo <= 1.0 / 64 + 1e-12);
    prev_hi = hi;
  }
  assert_true(prev_hi == UINT64_MAX);
}

static void test_count_le_and_empty(void **st) {
  (void)st;
  ps_hist *h = ps_hist_create();
  assert_int_equal(ps_hist_percentile(h, 50), 0);
  assert_int_equal(ps_hist_count_le(h, 1000), 0);
  for (uint64_t i = 1; i <= 100; i++) ps_hist_record(h, i);
  assert_int_equal(ps_hist_count_le(h, 50), 50);
  assert_int_equal(ps_hist_count_le(h, 100), 100);
  assert_int_equal(ps_hist_count_le(h, 0), 0);
  assert_int_equal(ps_hist_percentile(h, 50), 50);
  assert_true(fabs(ps_hist_mean(h) - 50.5) < 1e-9);
  ps_hist_reset(h);
  assert_int_equal(ps_hist_count(h), 0);
  ps_hist_record_n(h, 5000, 10);
  assert_int_equal(ps_hist_count(h), 10);
  ps_hist_destroy(&h);
}

PS_TEST_MAIN("hist", NULL, NULL,
    cmocka_unit_test(test_uniform), cmocka_unit_test(test_lognormal),
    cmocka_unit_test(test_small_values), cmocka_unit_test(test_huge_values),
    cmocka_unit_test(test_merge_equals_single), cmocka_unit_test(test_buckets_tile_the_range),
    cmocka_unit_test(test_count_le_and_empty))

/* ps_keydist (ps-bench's key streams) against the exact distributions: Zipf(a) rank
 * frequencies vs the pmf k^-a / H(K, a) summed directly (chi-square, fixed seed), for several
 * exponents including a = 1 (the log/exp limit of the closed forms); a K = 1e8 key space
 * (no table) against its directly summed head probabilities; uniform coverage; the key map is
 * injective on a range. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_keydist.h"

/* Pearson chi-square of n draws over K ranks against the exact pmf; returns the statistic
 * divided by its degrees of freedom (about 1 when right; a wrong sampler is far above). */
static double zipf_chi2(uint64_t K, double a, uint64_t n, uint64_t seed) {
  ps_keydist d;
  assert_int_equal(ps_keydist_init(&d, K, a), 0);
  double *p = calloc(K, sizeof *p);
  uint64_t *cnt = calloc(K, sizeof *cnt);
  assert_non_null(p);
  assert_non_null(cnt);
  double H = 0;
  for (uint64_t k = 1; k <= K; k++) H += pow((double)k, -a);
  for (uint64_t k = 1; k <= K; k++) p[k - 1] = pow((double)k, -a) / H;
  ps_rng r = {seed};
  for (uint64_t i = 0; i < n; i++) {
    uint64_t x = ps_keydist_rank(&d, &r);
    assert_true(x < K);
    cnt[x]++;
  }
  /* Pool the tail into cells with expectation >= 20 so the statistic is well behaved. */
  double chi = 0, e = 0, o = 0;
  int cells = 0;
  for (uint64_t k = 0; k < K; k++) {
    e += p[k] * (double)n;
    o += (double)cnt[k];
    if (e >= 20 || k == K - 1) {
      chi += (o - e) * (o - e) / e;
      cells++;
      e = o = 0;
    }
  }
  free(p);
  free(cnt);
  return chi / (cells - 1);
}

static void test_zipf_matches_pmf(void **st) {
  (void)st;
  double as[] = {0.5, 0.99, 1.0, 1.1, 1.5, 2.5};
  for (size_t i = 0; i < sizeof as / sizeof *as; i++) {
    double c = zipf_chi2(1000, as[i], 400000, 42 + i);
    print_message("zipf a=%.2f K=1000: chi2/dof = %.3f\n", as[i], c);
    /* dof is in the hundreds: 1.5 is many standard deviations above the mean of 1. */
    assert_true(c < 1.5);
  }
}

/* A biased sampler must be caught: the same check on a = 1.1 draws scored against a = 1.2. */
static void test_chi2_can_fail(void **st) {
  (void)st;
  ps_keydist d;
  assert_int_equal(ps_keydist_init(&d, 1000, 1.1), 0);
  const uint64_t K = 1000, n = 400000;
  uint64_t *cnt = calloc(K, sizeof *cnt);
  ps_rng r = {7};
  for (uint64_t i = 0; i < n; i++) cnt[ps_keydist_rank(&d, &r)]++;
  double H = 0;
  for (uint64_t k = 1; k <= K; k++) H += pow((double)k, -1.2);
  double chi = 0;
  for (uint64_t k = 0; k < 50; k++) {
    double e = pow((double)(k + 1), -1.2) / H * (double)n;
    chi += ((double)cnt[k] - e) * ((double)cnt[k] - e) / e;
  }
  free(cnt);
  assert_true(chi / 49 > 10);
}

static void test_zipf_huge_key_space(void **st) {
  (void)st;
  const uint64_t K = 100000000ull;
  const double a = 1.1;
  ps_keydist d;
  assert_int_equal(ps_keydist_init(&d, K, a), 0);
  double H = 0;
  for (uint64_t k = K; k >= 1; k--) H += pow((double)k, -a); /* small terms first */
  const uint64_t n = 2000000;
  uint64_t head[10] = {0}, top = 0, big = 0;
  ps_rng r = {99};
  for (uint64_t i = 0; i < n; i++) {
    uint64_t x = ps_keydist_rank(&d, &r);
    assert_true(x < K);
    if (x < 10) head[x]++;
    if (x > top) top = x;
    if (x >= K / 2) big++;
  }
  for (int k = 0; k < 10; k++) {
    double e = pow((double)(k + 1), -a) / H * (double)n;
    double sd = sqrt(e);
    print_message("K=1e8 rank %d: %llu draws, expected %.0f\n", k + 1, (unsigned long long)head[k], e);
    assert_true(fabs((double)head[k] - e) < 5 * sd);
  }
  /* P(rank > K/2) = sum over the upper half; reached, and in proportion. */
  double pu = 0;
  for (uint64_t k = K; k > K / 2; k--) pu += pow((double)k, -a);
  pu /= H;
  double eu = pu * (double)n;
  print_message("K=1e8 upper half: %llu draws, expected %.0f\n", (unsigned long long)big, eu);
  assert_true(fabs((double)big - eu) < 5 * sqrt(eu));
  assert_true(top > K / 2);
}

static void test_uniform(void **st) {
  (void)st;
  ps_keydist d;
  assert_int_equal(ps_keydist_init(&d, 100, 0.0), 0);
  uint64_t cnt[100] = {0};
  ps_rng r = {3};
  for (int i = 0; i < 1000000; i++) {
    uint64_t x = ps_keydist_rank(&d, &r);
    assert_true(x < 100);
    cnt[x]++;
  }
  for (int i = 0; i < 100; i++) assert_true(cnt[i] > 9500 && cnt[i] < 10500);
  assert_int_equal(ps_keydist_init(&d, 0, 1.1), -1);
  assert_int_equal(ps_keydist_init(&d, 10, -1), -1);
  assert_int_equal(ps_keydist_init(&d, 10, NAN), -1);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void test_key_map_injective(void **st) {
  (void)st;
  enum { N = 200000 };
  uint64_t *k = malloc(N * sizeof *k);
  for (uint64_t i = 0; i < N; i++) k[i] = ps_keydist_key(i);
  qsort(k, N, sizeof *k, cmp_u64);
  for (size_t i = 1; i < N; i++) assert_true(k[i] != k[i - 1]);
  free(k);
}

PS_TEST_MAIN("keydist", NULL, NULL,
  cmocka_unit_test(test_zipf_matches_pmf),
  cmocka_unit_test(test_chi2_can_fail),
  cmocka_unit_test(test_zipf_huge_key_space),
  cmocka_unit_test(test_uniform),
  cmocka_unit_test(test_key_map_injective))

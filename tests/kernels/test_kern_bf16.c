/* test_kern_bf16: the CPU backend's bf16 GEMM (ps_kern_gemm with PS_KERN_BF16) against
 * double-precision references, at tolerances derived from bf16's precision.
 *
 * The error model. bf16 keeps 8 significant bits, so rounding x to nearest even gives
 * x(1 + d) with |d| <= u = 2^-8 (the unit roundoff). The GEMM rounds each input once,
 * a^ = a(1 + da), b^ = b(1 + db), so a^ b^ = ab(1 + e) with |e| <= 2u + u^2, and then sums
 * k such products in FP32 (a product of two bf16 values is exact in FP32: 8 + 8 bits <= 24).
 * FP32 summation of k terms in any order errs by at most gamma_k = k v / (1 - k v) of the sum
 * of their magnitudes, v = 2^-24 (Higham, Accuracy and Stability, Sec. 3.1). Hence for
 * C = alpha op(A) op(B) + beta C0:
 *   (1) against the exact product of the ROUNDED inputs, computed here in double:
 *         |C - alpha sum a^ b^ - beta C0| <= |alpha| gamma_k sum |a^ b^| + 2v |beta C0| + tiny;
 *       tight (2^-24 scale): it fails unless the inputs were rounded exactly as bf16 RNE;
 *   (2) against the FP32 inputs' exact product (what the model means):
 *         |C - alpha sum a b - beta C0| <= |alpha| (2u + u^2 + gamma_k (1 + u)^2) sum |a b|
 *                                          + 2v |beta C0|.
 * Shapes: the model's (thin K = 13, N = 1 and 16, batch-long reductions K = 2048), every
 * transpose pair, padded leading dimensions, alpha != 1, beta 0 / 1 / 0.5, K = 0; and the
 * rounding itself on exact ties. The fallback on a CPU without AVX512_BF16 runs under
 * EMBER_CPU_NO_BF16=1 (the test_kern_bf16_off registration): no bf16, the call refused. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_kernels.h"

static const double U16 = 1.0 / 256, V32 = 1.0 / 16777216;

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static float frand(float lo, float hi) {
  rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
  return lo + (hi - lo) * (float)((rs >> 11) * (1.0 / 9007199254740992.0));
}

/* bf16 round to nearest even, written independently of the backend: by scaling, not bits.
 * x = m 2^e with 0.5 <= |m| < 1; keep 8 bits of m: rint(m 2^8) 2^(e-8) (rint: ties to even). */
static double bf16_round(float x) {
  if (x == 0.0f || !isfinite(x)) return x;
  int e;
  double m = frexp((double)x, &e);
  return ldexp(nearbyint(ldexp(m, 8)), e - 8);
}

static ps_kern *K;

static bool bf16_off(void) {
  const char *v = getenv("EMBER_CPU_NO_BF16");
  return v && *v && strcmp(v, "0") != 0;
}

/* One 2-thread backend for the group; says which path the run covers. */
static int setup(void **st) {
  (void)st;
  if (ps_kern_cpu_create(2, &K) != PS_OK) return -1;
  print_message("bf16 GEMM %s%s\n", ps_kern_has_bf16(K) ? "available" : "not available",
                bf16_off() ? " (EMBER_CPU_NO_BF16 set)" : "");
  return 0;
}
static int teardown(void **st) {
  (void)st;
  ps_kern_destroy(&K);
  return K ? -1 : 0;
}

/* One GEMM against both references; returns the largest error of C against the FP32 inputs'
 * product relative to the bound (2), so callers can see it is used, not just met. */
static double check_gemm(bool ta, bool tb, int m, int n, int kk, float alpha, float beta,
                         int pad) {
  int lda = (ta ? m : kk) + pad, ldb = (tb ? kk : n) + pad, ldc = n + pad;
  size_t an = (size_t)(ta ? kk : m) * lda, bn = (size_t)(tb ? n : kk) * ldb,
         cn = (size_t)m * ldc;
  float *a = malloc((an ? an : 1) * sizeof(float)), *b = malloc((bn ? bn : 1) * sizeof(float));
  float *c = malloc(cn * sizeof(float)), *c0 = malloc(cn * sizeof(float));
  for (size_t i = 0; i < an; i++) a[i] = frand(-1.0f, 1.0f);
  for (size_t i = 0; i < bn; i++) b[i] = frand(-2.0f, 2.0f);
  for (size_t i = 0; i < cn; i++) c[i] = c0[i] = frand(-1.0f, 1.0f);
  assert_int_equal(ps_kern_gemm(K, PS_KERN_BF16, ta, tb, m, n, kk, alpha, a, lda, b, ldb, beta, c,
                                ldc),
                   PS_OK);
  double gk = kk * V32 / (1 - kk * V32), worst = 0;
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double exact = 0, rounded = 0, mag = 0, magr = 0;
      for (int p = 0; p < kk; p++) {
        float x = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
        float y = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
        exact += (double)x * y, mag += fabs((double)x * y);
        double r = bf16_round(x) * bf16_round(y);
        rounded += r, magr += fabs(r);
      }
      double cv = c[(size_t)i * ldc + j], bc = beta == 0.0f ? 0 : (double)beta * c0[(size_t)i * ldc + j];
      double tiny = 1e-30;
      double e1 = fabs(cv - (alpha * rounded + bc)),
             b1 = fabs(alpha) * gk * magr + 2 * V32 * fabs(bc) + 2 * V32 * fabs(cv) + tiny;
      if (e1 > b1)
        fail_msg("ta %d tb %d m %d n %d k %d alpha %g beta %g: C[%d,%d] = %.9g, rounded-input "
                 "product %.9g, error %.3g > %.3g",
                 ta, tb, m, n, kk, alpha, beta, i, j, cv, alpha * rounded + bc, e1, b1);
      double e2 = fabs(cv - (alpha * exact + bc)),
             b2 = fabs(alpha) * (2 * U16 + U16 * U16 + gk * (1 + U16) * (1 + U16)) * mag +
                  2 * V32 * fabs(bc) + 2 * V32 * fabs(cv) + tiny;
      if (e2 > b2) fail_msg("C[%d,%d]: error %.3g over the bf16 bound %.3g", i, j, e2, b2);
      if (e2 / b2 > worst) worst = e2 / b2;
    }
  for (int i = 0; i < m; i++) /* the padding of C is not written */
    for (int j = n; j < ldc; j++) assert_true(c[(size_t)i * ldc + j] == c0[(size_t)i * ldc + j]);
  free(a), free(b), free(c), free(c0);
  return worst;
}

static void test_gemm_bounds(void **st) {
  (void)st;
  if (!ps_kern_has_bf16(K)) skip();
  /* (m, n, k) of the model's GEMMs at batch 64: 13-32-16 bottom, a 367-wide top, N = 1 */
  static const int shapes[][3] = {{64, 32, 13}, {32, 13, 64}, {64, 16, 32}, {16, 32, 64},
                                  {64, 32, 16}, {64, 64, 367}, {64, 367, 64}, {1, 64, 64},
                                  {64, 1, 64},  {7, 5, 3},     {17, 33, 2048}, {3, 1, 1}};
  double worst = 0;
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
    for (int t = 0; t < 4; t++) {
      double w = check_gemm(t & 1, t & 2, shapes[s][0], shapes[s][1], shapes[s][2], 1.0f, 0.0f,
                            s % 3 ? 0 : 5);
      if (w > worst) worst = w;
    }
  check_gemm(false, true, 33, 40, 50, -1.5f, 1.0f, 3); /* alpha, beta: sums into C */
  check_gemm(true, false, 40, 33, 50, 0.25f, 0.5f, 0);
  check_gemm(false, false, 9, 10, 0, 1.0f, 0.5f, 1); /* K = 0: C = beta C */
  /* the rounding shows: C is not FP32's product (a worst error far below the bound would
   * mean the inputs were not rounded), and no element exceeds the bound */
  print_message("worst error / bf16 bound: %.3f\n", worst);
  assert_true(worst > 0.05 && worst <= 1.0);
}

/* Exact ties and carries, through the 16-wide vector path (n = 32) and the scalar tail
 * (n = 3): A = [1, x_j] rows times B = identity, so C = the rounded x. */
static void test_rounding(void **st) {
  (void)st;
  if (!ps_kern_has_bf16(K)) skip();
  static const float xs[] = {1.0f + 1.0f / 256,         /* tie, rounds down to even 1 */
                             1.0f + 3.0f / 256,         /* tie, rounds up to 1 + 2^-6 */
                             1.0f + 1.0f / 256 + 1e-6f, /* above the tie: up */
                             255.5f,                    /* tie at 8 bits: to 256 */
                             -1.0f - 1.0f / 256,        /* negative tie */
                             3.0e38f,                   /* large, stays finite */
                             1e-30f};
  const int nx = (int)(sizeof(xs) / sizeof(xs[0]));
  for (int n = 3; n <= 32; n += 29) {
    float a[32], one = 1.0f, c[32];
    for (int j = 0; j < n; j++) a[j] = xs[j % nx];
    /* C[1, n] = one [1, 1] x a [1, n] */
    assert_int_equal(ps_kern_gemm(K, PS_KERN_BF16, false, false, 1, n, 1, 1.0f, &one, 1, a, n,
                                  0.0f, c, n),
                     PS_OK);
    for (int j = 0; j < n; j++)
      if ((double)c[j] != bf16_round(a[j]))
        fail_msg("n %d: bf16(%.9g) = %.9g, want %.9g", n, a[j], c[j], bf16_round(a[j]));
  }
}

/* Without AVX512_BF16 (or with EMBER_CPU_NO_BF16=1) the backend says so and refuses bf16;
 * FP32 through the same call still works. */
static void test_availability(void **st) {
  (void)st;
  __builtin_cpu_init();
  bool hw = __builtin_cpu_supports("avx512bf16");
  assert_int_equal(ps_kern_has_bf16(K), hw && !bf16_off());
  float a = 2.0f, b = 3.0f, c = 0.0f;
  assert_int_equal(ps_kern_gemm(K, PS_KERN_BF16, false, false, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f,
                                &c, 1),
                   ps_kern_has_bf16(K) ? PS_OK : PS_ERR_UNSUPPORTED);
  assert_int_equal(ps_kern_gemm(K, PS_KERN_FP32, false, false, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f,
                                &c, 1),
                   PS_OK);
  assert_true(c == 6.0f);
  assert_int_equal(ps_kern_gemm(K, PS_KERN_BF16, false, false, 1, 1, 1, 1.0f, &a, 0, &b, 1, 0.0f,
                                &c, 1),
                   PS_ERR_INVALID);
  assert_int_equal(ps_kern_gemm(NULL, PS_KERN_BF16, false, false, 1, 1, 1, 1.0f, &a, 1, &b, 1,
                                0.0f, &c, 1),
                   PS_ERR_INVALID);
}

PS_TEST_MAIN("kern_bf16", setup, teardown, cmocka_unit_test(test_availability),
             cmocka_unit_test(test_gemm_bounds), cmocka_unit_test(test_rounding))

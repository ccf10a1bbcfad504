/* ps_quant: the fused row-wise int8 layout (ps_quant.h) — bytes q, then the float32 scale and
 * bias at dim and dim + 4 — with scale = (max - min) / 255 and bias = min as FBGEMM defines
 * them, q of the minimum 0 and of the maximum 255, every value within scale / 2 of its decoded
 * value (computed here in double from the bytes, not by ps_quant_int8_decode), the decoder's
 * value the float nearest q * scale + bias; a constant row decoded exactly, a row of one
 * value, huge and tiny magnitudes, and a NaN or an infinity refused with the output untouched. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_quant.h"

#define MAXD 300

/* Encodes x, then checks the layout and the bound from the bytes alone. */
static void check_row(const float *x, uint32_t dim) {
  uint8_t row[MAXD + 8];
  float back[MAXD];
  assert_int_equal(ps_quant_int8_row_bytes(dim), dim + 8);
  assert_int_equal(ps_quant_int8_encode(x, dim, row), PS_OK);
  float lo = x[0], hi = x[0];
  for (uint32_t i = 1; i < dim; i++) {
    lo = fminf(lo, x[i]);
    hi = fmaxf(hi, x[i]);
  }
  float scale, bias;
  memcpy(&scale, row + dim, 4); /* the layout: little-endian float32s after the bytes */
  memcpy(&bias, row + dim + 4, 4);
  assert_true(bias == lo);
  assert_true(scale == (float)(((double)hi - lo) / 255.0));
  float s2, b2;
  ps_quant_int8_params(row, dim, &s2, &b2);
  assert_true(s2 == scale && b2 == bias);
  ps_quant_int8_decode(row, dim, back);
  int saw_lo = 0, saw_hi = 0;
  for (uint32_t i = 0; i < dim; i++) {
    double deq = (double)row[i] * scale + bias;
    if (fabs(deq - x[i]) > scale / 2.0) fail_msg("value %u: %.9g decodes to %.9g, scale %.9g", i, x[i], deq, scale);
    assert_true(back[i] == (float)deq);
    saw_lo |= x[i] == lo && row[i] == 0;
    saw_hi |= x[i] == hi && row[i] == (scale > 0 ? 255 : 0);
  }
  assert_true(saw_lo && saw_hi);
}

static double urand(unsigned *s) {
  *s = *s * 1103515245u + 12345u;
  return ((*s >> 8) & 0xffffff) / 16777216.0;
}

static void test_random_rows(void **st) {
  (void)st;
  unsigned seed = 7;
  static const uint32_t dims[] = {1, 2, 7, 16, 64, 129, MAXD};
  static const double mags[] = {1e-30, 1e-4, 0.05, 1.0, 300.0, 1e30};
  float x[MAXD];
  for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
    for (size_t m = 0; m < sizeof mags / sizeof mags[0]; m++)
      for (int rep = 0; rep < 20; rep++) {
        double off = rep % 3 == 0 ? 0.0 : (urand(&seed) - 0.5) * mags[m] * 10;
        for (uint32_t i = 0; i < dims[d]; i++)
          x[i] = (float)(off + (urand(&seed) - 0.5) * mags[m]);
        check_row(x, dims[d]);
      }
}

/* Values on the grid's half-way points, and the max a hair above 255 scales. */
static void test_edges(void **st) {
  (void)st;
  float x[MAXD];
  for (int i = 0; i < 256; i++) x[i] = (float)i + (i > 0 && i < 255 ? 0.5f : 0.0f);
  check_row(x, 256); /* scale 1: every inner value is a tie, its error exactly scale / 2 */
  const float odd[] = {-1.0f, 0.1f, 0.2f, 0.3f, 1.0f / 3.0f, 16777215.0f};
  check_row(odd, 6);
  const float neg[] = {-3e38f, 3e38f, 0.0f}; /* the widest finite range */
  check_row(neg, 3);
}

static void test_constant_row(void **st) {
  (void)st;
  float x[5] = {0.25f, 0.25f, 0.25f, 0.25f, 0.25f}, back[5];
  uint8_t row[13];
  assert_int_equal(ps_quant_int8_encode(x, 5, row), PS_OK);
  ps_quant_int8_decode(row, 5, back);
  for (int i = 0; i < 5; i++) assert_true(row[i] == 0 && back[i] == 0.25f);
  check_row(x, 5);
}

static void test_non_finite_refused(void **st) {
  (void)st;
  float x[4] = {1, 2, 3, 4};
  uint8_t row[12];
  memset(row, 0xab, sizeof row);
  x[2] = NAN;
  assert_int_equal(ps_quant_int8_encode(x, 4, row), PS_ERR_INVALID);
  x[2] = -INFINITY;
  assert_int_equal(ps_quant_int8_encode(x, 4, row), PS_ERR_INVALID);
  for (size_t i = 0; i < sizeof row; i++) assert_int_equal(row[i], 0xab);
}

PS_TEST_MAIN("quant", NULL, NULL, cmocka_unit_test(test_random_rows), cmocka_unit_test(test_edges),
             cmocka_unit_test(test_constant_row), cmocka_unit_test(test_non_finite_refused))

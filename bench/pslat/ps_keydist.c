/* ps_keydist: see ps_keydist.h. The helper functions keep the integral H(x) = (x^(1-a) - 1)/(1-a)
 * and its inverse accurate near a = 1 (where they become log and exp) by using log1p/expm1
 * series, exactly as in the reference implementation. */
#include "ps_keydist.h"

#include <math.h>

#include "ps_hash.h"

/* log1p(x)/x, accurate near 0. */
static double helper1(double x) {
  return fabs(x) > 1e-8 ? log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}
/* expm1(x)/x, accurate near 0. */
static double helper2(double x) {
  return fabs(x) > 1e-8 ? expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
}
/* H(x) = integral of h(t) = t^-a, shifted so that it is well defined for a = 1. */
static double h_integral(double a, double x) {
  double lx = log(x);
  return helper2((1.0 - a) * lx) * lx;
}
static double h(double a, double x) { return exp(-a * log(x)); }
static double h_integral_inv(double a, double x) {
  double t = x * (1.0 - a);
  if (t < -1.0) t = -1.0; /* rounding guard: H^-1 is only defined above -1/(1-a) */
  return exp(helper1(t) * x);
}

int ps_keydist_init(ps_keydist *d, uint64_t n, double a) {
  if (!d || n == 0 || n > (1ull << 53) || !(a >= 0.0) || !isfinite(a)) return -1;
  d->n = n;
  d->a = a;
  if (a > 0.0) {
    d->h_x1 = h_integral(a, 1.5) - 1.0;
    d->h_n = h_integral(a, (double)n + 0.5);
    d->s = 2.0 - h_integral_inv(a, h_integral(a, 2.5) - h(a, 2.0));
  }
  return 0;
}

uint64_t ps_keydist_rank(const ps_keydist *d, ps_rng *r) {
  if (d->a == 0.0) {
    /* Lemire's multiply-shift: uniform enough for n << 2^64 and division-free. */
    return (uint64_t)(((unsigned __int128)ps_rng_next(r) * d->n) >> 64);
  }
  const double a = d->a;
  for (;;) {
    double u = d->h_n + ps_rng_unit(r) * (d->h_x1 - d->h_n);
    double x = h_integral_inv(a, u);
    double kf = floor(x + 0.5);
    uint64_t k = kf < 1.0 ? 1 : kf > (double)d->n ? d->n : (uint64_t)kf;
    if ((double)k - x <= d->s || u >= h_integral(a, (double)k + 0.5) - h(a, (double)k))
      return k - 1;
  }
}

uint64_t ps_keydist_key(uint64_t rank) { return ps_mix64(rank); }

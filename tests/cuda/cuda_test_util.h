/* cuda_test_util: shared pieces of the CUDA-vs-CPU tests — a seeded RNG, a normalised-error
 * comparison, the "no GPU -> exit 77 (SKIPPED)" rule, and the CPU and GPU backends.
 *
 * Comparison is by normalised max error, as ggml's test-backend-ops does: max|a - b| divided
 * by max|b| (the CPU value is the reference), so one tolerance fits values of any scale. */
#ifndef CUDA_TEST_UTIL_H
#define CUDA_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef CT_NO_GPU
#include "ps_kernels_cuda.h"
#endif

#define CT_SKIP 77

typedef struct ct_rng {
  uint64_t s;
} ct_rng;

static inline uint64_t ct_next(ct_rng *r) { /* splitmix64 */
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
/* Uniform in [lo, hi). */
static inline float ct_uniform(ct_rng *r, float lo, float hi) {
  return lo + (hi - lo) * (float)((ct_next(r) >> 40) * (1.0 / 16777216.0));
}
static inline int ct_int(ct_rng *r, int n) { return (int)(ct_next(r) % (uint64_t)n); }
static inline void ct_fill(ct_rng *r, float *x, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++) x[i] = ct_uniform(r, lo, hi);
}

/* max|a - b| / max|b| (or the absolute error when b is all zeros); NaN anywhere gives inf. */
static inline double ct_norm_err(const float *a, const float *b, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; i++) {
    if (isnan(a[i]) != isnan(b[i])) return INFINITY;
    double d = fabs((double)a[i] - (double)b[i]);
    if (d > num) num = d;
    if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
  }
  return den > 0.0 ? num / den : num;
}

#ifndef CT_NO_GPU
/* Exit 77 unless a GPU is usable; prints why, so ctest's log says it. */
static inline void ct_require_gpu(const char *test) {
  if (!ps_cuda_available()) {
    printf("%s: SKIPPED: no usable CUDA device (cudaGetDeviceCount failed or found none)\n", test);
    fflush(stdout);
    exit(CT_SKIP);
  }
  char desc[160];
  if (ps_cuda_device_describe(0, desc, sizeof desc) == 0) printf("%s: device 0: %s\n", test, desc);
}
#endif

#ifdef CT_BACKENDS
/* The two backends a CUDA-vs-CPU test compares (define CT_BACKENDS before the include): made
 * once per cmocka group, with ct_setup and ct_teardown as the group's setup and teardown. */
static ps_kern *CPU, *GPU;
static int ct_setup(void **st) {
  (void)st;
  if (ps_kern_cpu_create(0, &CPU) != PS_OK) return -1;
  if (ps_kern_cuda_create(0, &GPU, NULL) != PS_OK) return -1;
  return 0;
}
static int ct_teardown(void **st) {
  (void)st;
  ps_kern_destroy(&GPU);
  ps_kern_destroy(&CPU);
  return 0;
}
#endif

#endif

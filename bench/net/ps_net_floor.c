/* The memory floor of ps-net-bench: see ps_net_floor.h. The gather has the shape of the store's
 * (embedding/ps_store_batch.c): a software pipeline that prefetches the row D keys ahead, so
 * the figure is the DRAM-miss throughput of a core, not the latency of one miss. */
#include "ps_net_floor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_hash.h"
#include "ps_time.h"

#define FLOOR_D 32 /* = the store's PREFETCH_DIST */

struct ps_floor {
  char *base;
  size_t stride;
  uint64_t rows;
  int dim;
};

size_t ps_floor_row_stride(int dim) {
  const size_t n = (size_t)dim * 4 * 2;
  if (n <= 8) return 8; /* jemalloc's smallest classes: 8, then every 16 up to 128 */
  if (n <= 128) return (n + 15) & ~(size_t)15;
  size_t p = 128; /* then 4 classes per doubling: (p, 2p] in steps of p / 4 */
  while (p * 2 < n) p *= 2;
  const size_t step = p / 4;
  return (n + step - 1) / step * step;
}

float ps_floor_init_value(uint64_t row, int j) { return (float)((row * 31 + (uint64_t)j) % 1021); }

ps_floor *ps_floor_create(int64_t rows, int dim) {
  ps_floor *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  f->stride = ps_floor_row_stride(dim);
  f->rows = (uint64_t)rows;
  f->dim = dim;
  f->base = aligned_alloc(64, (f->stride * f->rows + 63) / 64 * 64);
  if (!f->base) {
    free(f);
    return NULL;
  }
  for (uint64_t r = 0; r < f->rows; r++) {
    float *v = (float *)(f->base + r * f->stride);
    for (int j = 0; j < dim; j++) {
      v[j] = ps_floor_init_value(r, j);
      v[dim + j] = 0.1f; /* Adagrad's initial accumulator */
    }
    memset(v + 2 * dim, 0, f->stride - (size_t)dim * 8); /* the size-class tail */
  }
  return f;
}

int ps_floor_dim(const ps_floor *f) { return f->dim; }

static inline char *row_of(const ps_floor *f, uint64_t key) {
  return f->base + (key % f->rows) * f->stride;
}

void ps_floor_pull(const ps_floor *f, const uint64_t *keys, size_t n, float *out) {
  size_t rb = (size_t)f->dim * 4;
  for (size_t i = 0; i < n && i < FLOOR_D; i++) __builtin_prefetch(row_of(f, keys[i]));
  for (size_t i = 0; i < n; i++) {
    if (i + FLOOR_D < n) {
      const char *p = row_of(f, keys[i + FLOOR_D]);
      /* every line of the row's values, as the store's copy reads them */
      for (size_t o = 0; o < rb; o += 64) __builtin_prefetch(p + o);
    }
    memcpy(out + i * (size_t)f->dim, row_of(f, keys[i]), rb);
  }
}

void ps_floor_push(ps_floor *f, const uint64_t *keys, size_t n, const float *g) {
  const int d = f->dim;
  const size_t span = (size_t)d * 8; /* values and state: both read and written */
  const float lr = 0.01f, eps = 1e-8f;
  for (size_t i = 0; i < n && i < FLOOR_D; i++) __builtin_prefetch(row_of(f, keys[i]), 1);
  for (size_t i = 0; i < n; i++) {
    if (i + FLOOR_D < n) {
      char *p = row_of(f, keys[i + FLOOR_D]);
      for (size_t o = 0; o < span; o += 64) __builtin_prefetch(p + o, 1);
    }
    /* restrict: the row's values, its state and the gradient never overlap, so the loop
     * vectorizes as the store's optimizer does (with -fno-math-errno, set in CMakeLists). */
    float *restrict w = (float *)row_of(f, keys[i]), *restrict s = w + d;
    const float *restrict gi = g + i * (size_t)d;
    for (int j = 0; j < d; j++) {
      s[j] += gi[j] * gi[j];
      w[j] -= lr * gi[j] / sqrtf(s[j] + eps);
    }
  }
}

/* One figure: the median over rounds of ns per key for a gather of 4096 random keys. */
static double gather_ns(const char *base, uint64_t rows, size_t rb, int prefetch, float *out,
                        uint64_t *keys) {
  enum { N = 4096, ROUNDS = 41 };
  double t[ROUNDS];
  uint64_t x = 7;
  for (int r = 0; r < ROUNDS; r++) {
    for (int i = 0; i < N; i++) keys[i] = (x = ps_mix64(x)) % rows;
    uint64_t t0 = ps_now_ns();
    if (prefetch)
      for (int i = 0; i < N; i++) {
        if (i + FLOOR_D < N)
          for (size_t o = 0; o < rb; o += 64) __builtin_prefetch(base + keys[i + FLOOR_D] * rb + o);
        memcpy((char *)out + (size_t)i * rb, base + keys[i] * rb, rb);
      }
    else
      for (int i = 0; i < N; i++) memcpy((char *)out + (size_t)i * rb, base + keys[i] * rb, rb);
    t[r] = (double)(ps_now_ns() - t0) / N;
    __asm__ volatile("" : : "r"(out) : "memory"); /* the copies are not dead */
  }
  for (int i = 1; i < ROUNDS; i++) /* insertion sort: 41 values */
    for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
      double tmp = t[j];
      t[j] = t[j - 1];
      t[j - 1] = tmp;
    }
  return t[ROUNDS / 2];
}

void ps_floor_gather_bench(void) {
  const size_t sizes[2] = {42u << 20, 170u << 20}, rbs[2] = {64, 256};
  char *base = aligned_alloc(64, sizes[1]);
  float *out = aligned_alloc(64, 4096 * 256);
  uint64_t *keys = malloc(4096 * sizeof *keys);
  if (!base || !out || !keys) {
    fprintf(stderr, "ps-net-bench: --mem-only: out of memory\n");
    free(base), free(out), free(keys);
    return;
  }
  memset(base, 1, sizes[1]); /* fault every page in before timing */
  printf("%-10s %-8s %14s %14s\n", "array_MB", "row_B", "ns/key_nopf", "ns/key_pf");
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++) {
      uint64_t rows = sizes[a] / rbs[b];
      double np = gather_ns(base, rows, rbs[b], 0, out, keys);
      double pf = gather_ns(base, rows, rbs[b], 1, out, keys);
      printf("%-10zu %-8zu %14.2f %14.2f\n", sizes[a] >> 20, rbs[b], np, pf);
    }
  free(base), free(out), free(keys);
}

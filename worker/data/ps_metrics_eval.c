/* ps_metrics_eval.c: exact AUC / logloss / accuracy (definitions in ps_metrics_eval.h).
 *
 * AUC: sort (score, label) pairs by score with an LSD radix sort on the float's bits
 * mapped to an order-preserving u32 (O(n), and ties stay together exactly), then walk tie
 * groups giving each the average rank. */
#include "ps_metrics_eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct ps_eval {
  float *p, *y;
  size_t n, cap;
  double eps;
};

ps_status ps_eval_create(ps_eval **out) {
  *out = calloc(1, sizeof **out);
  if (!*out) return PS_ERR_NOMEM;
  (*out)->eps = 1e-7;
  return PS_OK;
}

void ps_eval_destroy(ps_eval **e) {
  if (!e || !*e) return;
  free((*e)->p), free((*e)->y), free(*e);
  *e = NULL;
}

uint64_t ps_eval_count(const ps_eval *e) { return e->n; }

static ps_status reserve(ps_eval *e, size_t n) {
  if (n <= e->cap) return PS_OK;
  size_t cap = e->cap ? e->cap : 1024;
  while (cap < n) cap *= 2;
  float *p = realloc(e->p, cap * sizeof(float));
  if (!p) return PS_ERR_NOMEM;
  e->p = p;
  float *y = realloc(e->y, cap * sizeof(float));
  if (!y) return PS_ERR_NOMEM;
  e->y = y;
  e->cap = cap;
  return PS_OK;
}

ps_status ps_eval_add(ps_eval *e, const float *p, const float *y, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!(p[i] >= 0.0f && p[i] <= 1.0f) || (y[i] != 0.0f && y[i] != 1.0f)) return PS_ERR_INVALID;
  if (n == 0) return PS_OK;
  ps_status st = reserve(e, e->n + n);
  if (st) return st;
  memcpy(e->p + e->n, p, n * sizeof(float));
  memcpy(e->y + e->n, y, n * sizeof(float));
  e->n += n;
  return PS_OK;
}

ps_status ps_eval_merge(ps_eval *dst, const ps_eval *src) {
  if (src->n == 0) return PS_OK;
  ps_status st = reserve(dst, dst->n + src->n);
  if (st) return st;
  memcpy(dst->p + dst->n, src->p, src->n * sizeof(float));
  memcpy(dst->y + dst->n, src->y, src->n * sizeof(float));
  dst->n += src->n;
  return PS_OK;
}

/* Order-preserving map of a float to u32 (for p in [0, 1], -0.0 and +0.0 tie). */
static inline uint32_t fkey(float f) {
  if (f == 0.0f) f = 0.0f;
  uint32_t u;
  memcpy(&u, &f, 4);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* AUC by average ranks. Returns NaN if a class is absent or on allocation failure. */
double ps_eval_auc(const float *p, const float *y, size_t n) {
  uint64_t *a = malloc(n * sizeof(uint64_t)), *t = malloc(n * sizeof(uint64_t));
  if (!a || !t) {
    free(a), free(t);
    return NAN;
  }
  /* key in the high 32 bits, label in bit 0: only the key decides the order. */
  for (size_t i = 0; i < n; i++) a[i] = ((uint64_t)fkey(p[i]) << 32) | (y[i] != 0.0f);
  for (int pass = 0; pass < 4; pass++) { /* 4 x 8-bit LSD radix over the key */
    size_t cnt[257] = {0};
    int sh = 32 + 8 * pass;
    for (size_t i = 0; i < n; i++) cnt[((a[i] >> sh) & 255) + 1]++;
    for (int b = 0; b < 256; b++) cnt[b + 1] += cnt[b];
    for (size_t i = 0; i < n; i++) t[cnt[(a[i] >> sh) & 255]++] = a[i];
    uint64_t *s = a;
    a = t;
    t = s;
  }
  double pos = 0, rank_sum = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    double gp = 0;
    while (j < n && (a[j] >> 32) == (a[i] >> 32)) gp += (double)(a[j++] & 1);
    /* ranks i+1 .. j, average (i + 1 + j) / 2 */
    rank_sum += gp * ((double)(i + 1) + (double)j) / 2.0;
    pos += gp;
    i = j;
  }
  free(a), free(t);
  double neg = (double)n - pos;
  if (pos == 0 || neg == 0) return NAN;
  return (rank_sum - pos * (pos + 1) / 2.0) / (pos * neg);
}

double ps_eval_logloss(const float *p, const float *y, size_t n, double eps) {
  double s = 0;
  for (size_t i = 0; i < n; i++) {
    double q = p[i];
    if (q < eps) q = eps;
    if (q > 1.0 - eps) q = 1.0 - eps;
    s -= y[i] != 0.0f ? log(q) : log1p(-q);
  }
  return n ? s / (double)n : NAN;
}

ps_status ps_eval_compute(const ps_eval *e, ps_eval_result *out) {
  memset(out, 0, sizeof *out);
  out->n = e->n;
  double correct = 0, ps = 0, pos = 0;
  for (size_t i = 0; i < e->n; i++) {
    int yi = e->y[i] != 0.0f;
    pos += yi;
    ps += e->p[i];
    correct += ((e->p[i] >= 0.5f) == yi);
  }
  out->positives = (uint64_t)pos;
  out->auc = ps_eval_auc(e->p, e->y, e->n);
  out->logloss = ps_eval_logloss(e->p, e->y, e->n, e->eps);
  out->accuracy = e->n ? correct / (double)e->n : NAN;
  out->mean_score = e->n ? ps / (double)e->n : NAN;
  out->ctr = e->n ? pos / (double)e->n : NAN;
  return PS_OK;
}

ps_status ps_eval_allgather(ps_eval *e, ps_eval_allreduce_fn allreduce, void *ctx, int rank,
                            int world) {
  if (world <= 0 || rank < 0 || rank >= world) return PS_ERR_INVALID;
  /* Counts as floats, split into 20-bit halves so each is exact in a float's 24 bits. */
  size_t W = (size_t)world;
  float *cnt = calloc(2 * W, sizeof(float));
  if (!cnt) return PS_ERR_NOMEM;
  if ((uint64_t)e->n >= (1ull << 40)) {
    free(cnt);
    return PS_ERR_INVALID;
  }
  cnt[2 * rank] = (float)(e->n >> 20);
  cnt[2 * rank + 1] = (float)(e->n & 0xFFFFF);
  ps_status st = allreduce(ctx, cnt, 2 * W);
  size_t total = 0, off = 0;
  for (size_t i = 0; i < W && !st; i++) {
    size_t ni = ((size_t)cnt[2 * i] << 20) | (size_t)cnt[2 * i + 1];
    if ((int)i < rank) off += ni;
    total += ni;
  }
  free(cnt);
  if (st) return st;
  float *buf = calloc(2 * total + 1, sizeof(float));
  if (!buf) return PS_ERR_NOMEM;
  if (e->n) {
    memcpy(buf + off, e->p, e->n * sizeof(float));
    memcpy(buf + total + off, e->y, e->n * sizeof(float));
  }
  st = allreduce(ctx, buf, 2 * total);
  if (!st) {
    e->n = 0;
    st = reserve(e, total);
    if (!st && total) {
      memcpy(e->p, buf, total * sizeof(float));
      memcpy(e->y, buf + total, total * sizeof(float));
      e->n = total;
    }
  }
  free(buf);
  return st;
}

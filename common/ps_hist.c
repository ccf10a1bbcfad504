/* ps_hist: the log-linear histogram of ps_hist.h — bucket index by one bit scan, fixed size,
 * merge by addition (the layout and its error bound are in the header). Every write marks its
 * chunk of 64 buckets (one power of two above the linear part) in a 59-bit mask: one OR per
 * record buys a sync that copies the octaves the latencies fell in (512 bytes each) instead of
 * all 30 KB, and an outlier costs its own chunk, not the range between it and the rest. */
#include "ps_hist.h"

#include <stdlib.h>
#include <string.h>

#define SUB_BITS 6                        /* 64 buckets per power of two */
#define LINEAR (2u << SUB_BITS)           /* 128 values with a bucket each */
#define NBUCKETS (LINEAR + (63 - SUB_BITS) * (1u << SUB_BITS))

struct ps_hist {
  uint64_t total;
  uint64_t min, max;
  long double sum;
  uint64_t dirty; /* bit c: bucket chunk c written since the last sync */
  uint64_t counts[NBUCKETS];
};

#define CHUNK_BITS SUB_BITS /* 64 buckets a chunk */
#define NCHUNKS ((NBUCKETS + (1u << CHUNK_BITS) - 1) >> CHUNK_BITS)
_Static_assert(NCHUNKS <= 64, "the dirty mask has a bit per chunk");
#define ALL_CHUNKS (NCHUNKS == 64 ? ~0ull : (1ull << NCHUNKS) - 1)

static inline size_t bucket_of(uint64_t v) {
  if (v < LINEAR) return (size_t)v;
  unsigned m = 63u - (unsigned)__builtin_clzll(v); /* >= SUB_BITS + 1 */
  unsigned shift = m - SUB_BITS;
  return LINEAR + (size_t)(m - SUB_BITS - 1) * (1u << SUB_BITS) +
         (size_t)((v >> shift) - (1u << SUB_BITS));
}

void ps_hist_bucket_range(size_t i, uint64_t *lo, uint64_t *hi) {
  if (i < LINEAR) {
    *lo = *hi = i;
    return;
  }
  size_t j = i - LINEAR;
  unsigned m = (unsigned)(j >> SUB_BITS) + SUB_BITS + 1;
  unsigned shift = m - SUB_BITS;
  uint64_t top = (uint64_t)((j & ((1u << SUB_BITS) - 1)) + (1u << SUB_BITS));
  *lo = top << shift;
  *hi = *lo + ((1ull << shift) - 1);
}

ps_hist *ps_hist_create(void) {
  ps_hist *h = calloc(1, sizeof *h);
  if (h) ps_hist_reset(h);
  return h;
}

void ps_hist_destroy(ps_hist **h) {
  if (!h || !*h) return;
  free(*h);
  *h = NULL;
}

void ps_hist_reset(ps_hist *h) {
  memset(h, 0, sizeof *h);
  h->min = UINT64_MAX;
  h->dirty = ALL_CHUNKS; /* a copy must learn of the reset */
}

void ps_hist_record_n(ps_hist *h, uint64_t v, uint64_t count) {
  if (!count) return;
  size_t b = bucket_of(v);
  h->counts[b] += count;
  h->dirty |= 1ull << (b >> CHUNK_BITS);
  h->total += count;
  h->sum += (long double)v * (long double)count;
  if (v < h->min) h->min = v;
  if (v > h->max) h->max = v;
}

void ps_hist_record(ps_hist *h, uint64_t v) { ps_hist_record_n(h, v, 1); }

void ps_hist_merge(ps_hist *dst, const ps_hist *src) {
  if (!src->total) return;
  for (size_t i = 0; i < NBUCKETS; i++) dst->counts[i] += src->counts[i];
  dst->dirty = ALL_CHUNKS;
  dst->total += src->total;
  dst->sum += src->sum;
  if (src->min < dst->min) dst->min = src->min;
  if (src->max > dst->max) dst->max = src->max;
}

size_t ps_hist_sync(ps_hist *dst, ps_hist *src) {
  if (!src->dirty) return 0;
  size_t n = 0;
  for (uint64_t m = src->dirty; m; m &= m - 1) {
    size_t lo = (size_t)__builtin_ctzll(m) << CHUNK_BITS, len = (size_t)1 << CHUNK_BITS;
    if (lo + len > NBUCKETS) len = NBUCKETS - lo;
    memcpy(dst->counts + lo, src->counts + lo, len * sizeof *src->counts);
    n += len;
  }
  dst->total = src->total;
  dst->min = src->min;
  dst->max = src->max;
  dst->sum = src->sum;
  src->dirty = 0;
  return n;
}

uint64_t ps_hist_count(const ps_hist *h) { return h->total; }
uint64_t ps_hist_min(const ps_hist *h) { return h->total ? h->min : 0; }
uint64_t ps_hist_max(const ps_hist *h) { return h->total ? h->max : 0; }
double ps_hist_mean(const ps_hist *h) {
  return h->total ? (double)(h->sum / (long double)h->total) : 0.0;
}

uint64_t ps_hist_percentile(const ps_hist *h, double p) {
  if (!h->total) return 0;
  if (p <= 0) return h->min;
  if (p >= 100) return h->max;
  /* rank = ceil(p/100 * n), at least 1: the same definition as the exact sorted value. */
  long double want = (long double)p / 100.0L * (long double)h->total;
  uint64_t rank = (uint64_t)want;
  if ((long double)rank < want) rank++;
  if (rank < 1) rank = 1;
  uint64_t seen = 0;
  for (size_t i = 0; i < NBUCKETS; i++) {
    seen += h->counts[i];
    if (seen >= rank) {
      uint64_t lo, hi;
      ps_hist_bucket_range(i, &lo, &hi);
      uint64_t mid = lo + (hi - lo) / 2;
      if (mid < h->min) mid = h->min;
      if (mid > h->max) mid = h->max;
      return mid;
    }
  }
  return h->max;
}

uint64_t ps_hist_count_le(const ps_hist *h, uint64_t v) {
  size_t last = bucket_of(v);
  uint64_t c = 0;
  for (size_t i = 0; i <= last; i++) c += h->counts[i];
  return c;
}

size_t ps_hist_nbuckets(void) { return NBUCKETS; }
const uint64_t *ps_hist_buckets(const ps_hist *h) { return h->counts; }

void ps_hist_add_buckets(ps_hist *h, const uint64_t *counts, size_t n, uint64_t min, uint64_t max) {
  if (n > NBUCKETS) n = NBUCKETS;
  uint64_t added = 0;
  for (size_t i = 0; i < n; i++) {
    h->counts[i] += counts[i];
    added += counts[i];
    if (counts[i]) {
      uint64_t lo, hi;
      ps_hist_bucket_range(i, &lo, &hi);
      h->sum += ((long double)lo + (long double)(hi - lo) / 2) * (long double)counts[i];
    }
  }
  if (!added) return;
  h->dirty = ALL_CHUNKS;
  h->total += added;
  if (min < h->min) h->min = min;
  if (max > h->max) h->max = max;
}

/* ps_hist: a log-linear latency histogram in the style of HdrHistogram.
 *
 * Values are non-negative integers (Ember records nanoseconds). Values below 128 have a
 * bucket each; above, every power of two is split into 64 equal buckets, so a bucket is at
 * most 1/64 of its lower bound wide and the reported midpoint is within 1/128 (< 1%) of any
 * value in it, across the whole 64-bit range, in a fixed 30 KB. Recording is one bit scan
 * and an increment, with no allocation; histograms of the same layout merge by addition,
 * which is how per-thread histograms become one report. Not thread-safe: one per thread,
 * then merge.
 *
 * A histogram remembers which buckets (in chunks of 64) it wrote since its last ps_hist_sync,
 * so that a copy kept current for another thread (the server's published statistics) costs
 * the chunks that changed, not 30 KB: at light load a few, and none for an op not seen. */
#ifndef PS_HIST_H
#define PS_HIST_H

#include <stddef.h>
#include <stdint.h>

typedef struct ps_hist ps_hist;

ps_hist *ps_hist_create(void);
void ps_hist_destroy(ps_hist **h);
void ps_hist_reset(ps_hist *h);

void ps_hist_record(ps_hist *h, uint64_t value);
void ps_hist_record_n(ps_hist *h, uint64_t value, uint64_t count);
/* dst += src. */
void ps_hist_merge(ps_hist *dst, const ps_hist *src);

uint64_t ps_hist_count(const ps_hist *h);
uint64_t ps_hist_min(const ps_hist *h); /* exact; 0 when empty */
uint64_t ps_hist_max(const ps_hist *h); /* exact; 0 when empty */
double ps_hist_mean(const ps_hist *h);
/* The value at percentile p in [0, 100]: the smallest recorded value v such that at least
 * p% of the values are <= v, within 1% relative error (clamped to [min, max]). 0 if empty. */
uint64_t ps_hist_percentile(const ps_hist *h, double p);
/* How many recorded values are <= v, counting a whole bucket when v falls inside it (the
 * bucket's upper edge is what matters): Prometheus's cumulative `le` buckets. */
uint64_t ps_hist_count_le(const ps_hist *h, uint64_t v);

/* dst = src, where dst has been written only by ps_hist_sync(dst, src) since src was created
 * (the first sync copies everything): copies the chunks of 64 buckets src wrote since its last
 * sync, and its count, sum, min and max, and forgets them. Returns how many buckets it copied
 * (0 when src did not change), for tests and cost accounting. */
size_t ps_hist_sync(ps_hist *dst, ps_hist *src);

/* Raw bucket access, for serialization (stats replies) and tests. */
size_t ps_hist_nbuckets(void);
const uint64_t *ps_hist_buckets(const ps_hist *h);
/* Adds raw bucket counts (as from ps_hist_buckets of another process) into h. */
void ps_hist_add_buckets(ps_hist *h, const uint64_t *counts, size_t n, uint64_t min, uint64_t max);
/* The inclusive range [lo, hi] of values that land in bucket i. */
void ps_hist_bucket_range(size_t i, uint64_t *lo, uint64_t *hi);

#endif

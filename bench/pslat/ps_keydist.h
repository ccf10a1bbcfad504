/* ps_keydist: the key streams of ps-bench: uniform or Zipf(a) ranks over a key space of K,
 * mapped to 64-bit keys.
 *
 * Zipf uses rejection-inversion sampling (W. Hormann and G. Derflinger, "Rejection-inversion
 * to generate variates from monotone discrete distributions", ACM TOMACS 6(3), 1996; the
 * method of Apache Commons RNG's RejectionInversionZipfSampler): it inverts the integral of
 * the continuous envelope x^-a in closed form and accepts with a cheap test, so it is O(1)
 * per sample (about 1.1 tries for a = 1.1), needs no table, and is exact for any a > 0 and any
 * K up to 2^53 (1e8 is nothing to it). Rank 1 is the hottest key.
 *
 * A rank r (0-based) becomes the key ps_mix64(r): a bijection, so distinct ranks are distinct
 * keys, and hot ranks spread over shards and partitions instead of sitting in one. Keys do not
 * depend on the seed, so --prepopulate and later runs touch the same rows. */
#ifndef PS_KEYDIST_H
#define PS_KEYDIST_H

#include <stdint.h>

typedef struct ps_keydist {
  uint64_t n;      /* key space K */
  double a;        /* Zipf exponent; 0 = uniform */
  double h_x1, h_n, s; /* rejection-inversion constants */
} ps_keydist;

/* splitmix64 stream. */
typedef struct ps_rng {
  uint64_t s;
} ps_rng;

static inline uint64_t ps_rng_next(ps_rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
/* Uniform in [0, 1). */
static inline double ps_rng_unit(ps_rng *r) { return (double)(ps_rng_next(r) >> 11) * 0x1p-53; }

/* a == 0: uniform. Returns 0, or -1 for n == 0, n > 2^53 or a < 0. */
int ps_keydist_init(ps_keydist *d, uint64_t n, double a);
/* A 0-based rank in [0, n). */
uint64_t ps_keydist_rank(const ps_keydist *d, ps_rng *r);
/* The key of a rank. */
uint64_t ps_keydist_key(uint64_t rank);

#endif

/* ps_hash: 64-bit hashing through xxHash (XXH3), the one hash family of Ember.
 *
 * Key placement (which shard, which partition), categorical-feature keys and deterministic
 * row initialization all derive from these functions, so they must never change meaning:
 * results would stop being reproducible across versions. */
#ifndef PS_HASH_H
#define PS_HASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t ps_hash64(const void *data, size_t len, uint64_t seed);

/* Hash of one 64-bit value (little-endian bytes), seeded. Inline: every pulled or pushed key
 * is hashed two or three times (shard, partition, dedup), and a call per key into the library
 * cost as much as the hash itself. */
#define XXH_INLINE_ALL
#include <xxhash.h>
static inline uint64_t ps_hash_u64(uint64_t v, uint64_t seed) {
  unsigned char b[8];
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
  return XXH3_64bits_withSeed(b, 8, seed);
}

/* splitmix64 finalizer: a cheap bijective mixer, for PRNG streams. */
static inline uint64_t ps_mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Which of n shards owns a key. Uses a seed distinct from partitioning inside a server so
 * that keys of one shard still spread over its partitions. */
static inline uint32_t ps_shard_of(uint64_t key, uint32_t nshards);

#define PS_HASH_SEED_SHARD 0x5348415244ull     /* "SHARD" */
#define PS_HASH_SEED_PARTITION 0x50415254ull   /* "PART" */

static inline uint32_t ps_shard_of(uint64_t key, uint32_t nshards) {
  if (nshards <= 1) return 0;
  /* Lemire's multiply-shift range reduction: unbiased enough and division-free. */
  uint64_t h = ps_hash_u64(key, PS_HASH_SEED_SHARD);
  return (uint32_t)(((unsigned __int128)h * nshards) >> 64);
}

#endif

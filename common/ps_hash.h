/* ps_hash: 64-bit hashing through xxHash (XXH3), the one hash family of Ember.
 *
 * Key placement (which shard, which partition), categorical-feature keys and deterministic
 * row initialization all derive from these functions, so they must never change meaning:
 * results would stop being reproducible across versions. */
#ifndef PS_HASH_H
#define PS_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

uint64_t ps_hash64(const void *data, size_t len, uint64_t seed);

/* Hash of one 64-bit value (little-endian bytes), seeded. Inline: every pulled or pushed key
 * is hashed two or three times (shard, partition, dedup), and a call per key into the library
 * cost as much as the hash itself. */
#define XXH_INLINE_ALL
#include <xxhash.h>
static inline uint64_t ps_hash_u64(uint64_t v, uint64_t seed) {
  /* The value's little-endian bytes, stored whole: a byte loop here stayed a loop of 8 stores
   * at -O2 (48 of the hash's ~70 instructions; bench/RESULTS-net.md, issue 22). */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  unsigned char b[8];
  memcpy(b, &v, sizeof b);
  return XXH3_64bits_withSeed(b, 8, seed);
}

/* splitmix64 finalizer: a cheap bijective mixer, for PRNG streams. */
static inline uint64_t ps_mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* The key hash: the one hash of a key on its way through Ember. A process hashes a key once
 * and takes everything from that value: the shard from its high bits (ps_shard_of_hash), the
 * server's store partition from its low 32 bits (ps_partition_of_hash), the store's index
 * slot from its lowest bits. Shard and partition come from disjoint bits, so the keys of one
 * shard still spread evenly over its partitions. The shard mapping is the one Ember has always
 * used (seed "SHARD", multiply-shift of the whole hash): data dirs and checkpoints keep their
 * meaning. */
#define PS_HASH_SEED_SHARD 0x5348415244ull /* "SHARD" */

static inline uint64_t ps_key_hash(uint64_t key) { return ps_hash_u64(key, PS_HASH_SEED_SHARD); }

/* Which of n shards owns the key of hash h (Lemire's multiply-shift: division-free). */
static inline uint32_t ps_shard_of_hash(uint64_t h, uint32_t nshards) {
  if (nshards <= 1) return 0;
  return (uint32_t)(((unsigned __int128)h * nshards) >> 64);
}

/* Which of n store partitions holds the key of hash h: multiply-shift of the low 32 bits. */
static inline uint32_t ps_partition_of_hash(uint64_t h, uint32_t nparts) {
  return (uint32_t)(((uint64_t)(uint32_t)h * nparts) >> 32);
}

/* Which of n shards owns a key. */
static inline uint32_t ps_shard_of(uint64_t key, uint32_t nshards) {
  if (nshards <= 1) return 0;
  return ps_shard_of_hash(ps_key_hash(key), nshards);
}

#endif

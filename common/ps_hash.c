#include "ps_hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t ps_hash64(const void *data, size_t len, uint64_t seed) {
  return XXH3_64bits_withSeed(data, len, seed);
}

uint64_t ps_hash_u64(uint64_t v, uint64_t seed) {
  unsigned char b[8];
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
  return XXH3_64bits_withSeed(b, 8, seed);
}

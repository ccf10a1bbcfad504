#include "ps_hash.h"

uint64_t ps_hash64(const void *data, size_t len, uint64_t seed) {
  return XXH3_64bits_withSeed(data, len, seed);
}

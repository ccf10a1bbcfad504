/* ps_hash: the out-of-line hash of a byte string (ps_hash.h). The 64-bit key hash is inline in
 * the header, since every key of every request goes through it. */
#include "ps_hash.h"

uint64_t ps_hash64(const void *data, size_t len, uint64_t seed) {
  return XXH3_64bits_withSeed(data, len, seed);
}

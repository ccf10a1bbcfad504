/* ps_dedup: de-duplication of a batch of 64-bit keys into unique keys plus an inverse index,
 * and the two row operations that go with it (gather rows per original position, sum rows per
 * unique key). The PS client uses it for every pull and push; ps-worker uses it directly, since
 * its embedding-bag kernels want the unique keys and the inverse index too; the embedding store
 * sums the gradients of a push with it (ps_dedup_sum_at), or checks that a push said to be
 * unique is (ps_dedup_gather_unique_at).
 *
 * Unique keys come out in order of first occurrence, so results are deterministic and do not
 * depend on hash-table layout. The workspace is an open-addressing table of indices kept
 * sparse (load <= 1/4), so a call costs O(n) with no allocation once the workspace has grown. */
#ifndef PS_DEDUP_H
#define PS_DEDUP_H

#include <stddef.h>
#include <stdint.h>

#include "ps_status.h"

typedef struct ps_dedup ps_dedup;

ps_status ps_dedup_create(ps_dedup **out);
void ps_dedup_destroy(ps_dedup **d);

/* unique[0..*nunique) = the distinct keys in order of first occurrence; inverse[i] = index of
 * keys[i] in unique. unique needs room for n keys, inverse for n entries. n < 2^32. */
ps_status ps_dedup_keys(ps_dedup *d, const uint64_t *keys, size_t n, uint64_t *unique,
                        uint32_t *inverse, size_t *nunique);

/* out[i*dim ..] = rows[inverse[i]*dim ..] for i < n (rows of unique keys -> per position). */
void ps_dedup_gather_rows(const uint32_t *inverse, size_t n, const float *rows, size_t dim,
                          float *out);
/* out[u*dim ..] = sum of in[i*dim ..] over i with inverse[i] == u, for u < nunique; summed in
 * order of position, first occurrence copied (so a key seen once is passed through exactly). */
void ps_dedup_sum_rows(const uint32_t *inverse, size_t n, size_t nunique, const float *in,
                       size_t dim, float *out);

/* De-duplication and summing in one pass, for a caller that has the keys' hashes and wants
 * the sums, not the inverse index (the store's push, over one partition's share of a batch):
 * over the keys keys[pos[i]] for i < n, with hashes[i] a well-mixed 64-bit hash of that key,
 * unique[u] as ps_dedup_keys gives them, unique_hashes[u] their hashes (when not NULL), and
 * sums[u*dim ..] = the rows in[pos[i]*dim ..] of key u summed as ps_dedup_sum_rows does (bit
 * for bit the same). unique and unique_hashes need room for n entries, sums for n rows. */
ps_status ps_dedup_sum_at(ps_dedup *d, const uint64_t *keys, const uint32_t *pos,
                          const uint64_t *hashes, size_t n, const float *in, size_t dim,
                          uint64_t *unique, uint64_t *unique_hashes, float *sums,
                          size_t *nunique);

/* For a caller told that the keys keys[pos[i]] (i < n) are distinct, which must not trust it
 * (the store's push of a request flagged keys_unique): gathers them, unique[i] = keys[pos[i]],
 * checking as it goes. *ngathered = n when they are distinct; else the position of the first
 * key seen before (unique then holds the keys up to it; the caller de-duplicates, e.g. with
 * ps_dedup_sum_at). hashes as for ps_dedup_sum_at. The same probe as the other calls, without
 * writing sums: 30 instructions a key against ps_dedup_sum_at's 74 at dim 16
 * (bench/RESULTS-net.md). */
ps_status ps_dedup_gather_unique_at(ps_dedup *d, const uint64_t *keys, const uint32_t *pos,
                                    const uint64_t *hashes, size_t n, uint64_t *unique,
                                    size_t *ngathered);

#endif

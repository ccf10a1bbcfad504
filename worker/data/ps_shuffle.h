/* ps_shuffle: a seeded shuffle buffer of samples between a batch source (the reader's batches
 * in file order) and its consumer, so the order of the lines in a file stops mattering
 * (a file sorted by label, by time or by campaign trains as if it were mixed).
 *
 * How: a pool of up to `capacity` + one batch of samples. Before batch k goes out, source
 * batches are read until the pool holds `capacity` samples more than batch k needs (or the
 * epoch's input is exhausted); then batch k's samples are drawn uniformly at random from the
 * pool, without replacement. A sample therefore leaves at a uniformly random time among the
 * next ~capacity draws (TensorFlow's shuffle buffer; a capacity at least the rank's share of
 * the file is a full uniform shuffle of it).
 *
 * Design decisions (why):
 *  - The output batches keep the source's sizes and metadata (epoch, index, last_in_epoch,
 *    first_line), one output batch per source batch, in order. So every rank still takes the
 *    same number of steps of the same sizes (the sync-mode contract of ps_reader.h), only which
 *    of the rank's samples sit in which batch changes. Samples never cross an epoch boundary:
 *    the pool drains at the end of each epoch.
 *  - Deterministic: the draws come from a counter-based generator seeded by (seed, epoch), the
 *    caller folds the rank into seed. Given the same source batches the output is the same, so
 *    a resumed run that re-reads and drops the first S batches (ps_train's resume) trains on
 *    exactly the samples, in exactly the order, of an uninterrupted run, with no buffer state
 *    in the checkpoint.
 *  - Each rank shuffles its own shard (no cross-rank traffic, no rank reads another's lines).
 *    The price: W workers with batch B no longer see, step for step, the rows one worker with
 *    batch W*B sees; that equivalence holds with the buffer off (capacity 0).
 *  - Samples, not rows, are stored: label, dense values and the keys of each bag (one key a
 *    bag for one-hot, any number for multi-hot), so the buffer is independent of the text
 *    format. Slots are swapped by pointer on removal (no copying inside the pool).
 *
 * Memory: capacity + 2*max_batch slots of (48 + 4*ndense + 8*nbags) bytes for one-hot samples
 * (the Criteo shape: 308 bytes, so 32768 + 512 slots ~ 10.3 MB), plus 4*nbags per slot once a
 * multi-hot sample is seen and the keys of bags beyond one key (ps_shuffle_bytes). */
#ifndef PS_SHUFFLE_H
#define PS_SHUFFLE_H

#include <stddef.h>
#include <stdint.h>

#include "ps_reader.h"
#include "ps_status.h"

/* The source: the next batch in *b (valid until the next call), or *end = 1 when none is left. */
typedef ps_status (*ps_shuffle_source)(void *ctx, ps_batch **b, int *end);

typedef struct ps_shuffle_opts {
  size_t capacity;  /* samples held back (> 0) */
  uint64_t seed;    /* fold the rank in: every rank shuffles differently */
  size_t max_batch; /* the largest source batch (samples) */
  size_t ndense;    /* dense values per sample */
  size_t nbags;     /* categorical bags per sample */
  /* For multi-hot output: make b->keys hold nkeys keys (and b->key_offsets n*nbags+1 entries);
   * nonzero on failure. NULL: b->keys holds max_batch*nbags keys (one-hot only). */
  int (*reserve_keys)(void *ctx, ps_batch *b, size_t nkeys);
} ps_shuffle_opts;

typedef struct ps_shuffle ps_shuffle;

ps_status ps_shuffle_create(const ps_shuffle_opts *o, ps_shuffle_source src, void *ctx,
                            ps_shuffle **out);
/* Fills out with the next shuffled batch (its buffers are the caller's, sized for max_batch);
 * *end = 1 when the source has nothing left. A source failure is returned as is. */
ps_status ps_shuffle_next(ps_shuffle *s, ps_batch *out, int *end);
/* Bytes the pool holds now (slots, dense values, keys). */
size_t ps_shuffle_bytes(const ps_shuffle *s);
void ps_shuffle_destroy(ps_shuffle **s);

#endif

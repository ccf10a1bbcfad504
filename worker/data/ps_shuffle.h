/* ps_shuffle: a seeded shuffle buffer of sample records (ps_sample.h) between a source of
 * record batches (the reader's rounds in file order) and its consumer, so the order of the
 * lines in a file stops mattering (a file sorted by label, by time or by campaign trains as if
 * it were mixed).
 *
 * How: a pool of up to `capacity` + one batch of records. Before batch k goes out, source
 * batches are read until the pool holds `capacity` records more than batch k needs (or the
 * epoch's input is exhausted); then batch k's records are drawn uniformly at random from the
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
 *  - The pool holds the reader's own sample records, not decoded samples: one representation
 *    for every schema (any dense and feature count, bags of any size, empty bags), keys are
 *    made once, when the drawn batch is decoded, and the buffer knows nothing of the schema
 *    beyond the records' lengths. Each slot owns `slot_bytes` of an arena (the caller passes
 *    the schema's one-value record size); a longer record gets its own allocation, kept by the
 *    slot for later records. Slots are swapped by pointer on removal (no copying in the pool).
 *
 * Memory: (capacity + 2*max_batch) * (16 + slot_bytes) bytes, plus max_batch * slot_bytes for
 * the drawn batch, plus the records longer than slot_bytes. Criteo's record is 270 bytes:
 * 32768 + 512 slots ~ 9.6 MB. */
#ifndef PS_SHUFFLE_H
#define PS_SHUFFLE_H

#include <stddef.h>
#include <stdint.h>

#include "ps_status.h"

/* A batch of n sample records: record i at data + off[i] (ps_sample_len bytes), and where the
 * batch sits in its rank's stream. */
typedef struct ps_shuffle_batch {
  const unsigned char *data;
  const size_t *off;
  size_t n;
  int epoch;         /* 0-based */
  int last_in_epoch; /* 1 on the epoch's last batch */
  uint64_t index;    /* batch index within the epoch */
  uint64_t first_line;
} ps_shuffle_batch;

/* The source: the next batch in *b (its records valid until the next call), or *end = 1 when
 * none is left. */
typedef ps_status (*ps_shuffle_source)(void *ctx, ps_shuffle_batch *b, int *end);

typedef struct ps_shuffle_opts {
  size_t capacity;   /* samples held back (> 0) */
  uint64_t seed;     /* fold the rank in: every rank shuffles differently */
  size_t max_batch;  /* the largest source batch (samples) */
  size_t slot_bytes; /* arena bytes per slot: the usual record's length */
} ps_shuffle_opts;

typedef struct ps_shuffle ps_shuffle;

ps_status ps_shuffle_create(const ps_shuffle_opts *o, ps_shuffle_source src, void *ctx,
                            ps_shuffle **out);
/* Fills out with the next shuffled batch (data and off are the buffer's, valid until the next
 * call); *end = 1 when the source has nothing left. A source failure is returned as is. */
ps_status ps_shuffle_next(ps_shuffle *s, ps_shuffle_batch *out, int *end);
void ps_shuffle_destroy(ps_shuffle **s);

#endif

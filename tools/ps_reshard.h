/* ps_reshard: a checkpoint taken on N shards rewritten for M shards (ps-reshard): every row
 * moves to the shard its key routes to on M (ps_shard_of), bit for bit — values, optimizer
 * state and metadata — with the tables' specs and the servers' table metadata, and the dense
 * state, config and schema copied, so that `ps-worker --resume` on M servers continues the
 * run the checkpoint stopped. docs/CHECKPOINTS.md ("Resharding") is the user's side.
 *
 * Design decisions:
 * - The source is read only through ps_ckpt (the read-only open that also composes what a
 *   checkpoint is made of) and the store's own calls: ps_store_scan names the rows,
 *   ps_store_export_row gives each one's full record. The destination is written through the
 *   store too (ps_store_import_rows into a fresh store per shard, then ps_store_snapshot), so
 *   the record and snapshot formats stay the store's alone.
 * - What the checkpoint does not hold is not invented: the admission sketch (the counts of
 *   keys pushed fewer than admit_threshold times) lives in server memory only and a resume on
 *   the same shard count starts it empty too; a resharded checkpoint resumes exactly as one on
 *   the old count would. TTL and Adam steps are per row (metadata) and move with the rows.
 * - Exactly once, checked: the rows written are counted again from the finished snapshots,
 *   each on the shard its key routes to; a key stored on two source shards (a damaged
 *   checkpoint) makes the counts differ and fails the run.
 * - The output is complete or not a checkpoint: `latest` is written last (rename), as
 *   ps-worker does; a failed run removes the step directory it made. */
#ifndef PS_RESHARD_H
#define PS_RESHARD_H

#include <stdint.h>

#include "ps_ckpt.h"
#include "ps_status.h"

/* The most shards a checkpoint is resharded to (one open store per shard while writing). */
#define PS_RESHARD_MAX_SHARDS 1024u

typedef struct ps_reshard_stats {
  uint64_t rows;      /* rows moved, all tables */
  uint32_t tables;
  double seconds;     /* the rows' move (reading, routing, writing), without the final check */
  double check_seconds;
} ps_reshard_stats;

/* Writes into out (absent or an empty directory) a complete checkpoint directory — `latest`
 * and step-N/ with config, dense.bin, schema.json (if any) and shards/shard-J{,.json} for J <
 * nshards — holding ck's model on nshards shards. Logs progress (rows, rows/s) at info.
 * PS_ERR_INVALID (out not empty, nshards out of range), PS_ERR_IO, PS_ERR_CORRUPT (a source
 * shard that does not read, or a key stored twice), PS_ERR_NOMEM: one line in err. */
ps_status ps_reshard(ps_ckpt *ck, uint32_t nshards, const char *out, ps_reshard_stats *stats,
                     ps_error *err);

#endif

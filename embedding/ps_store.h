/* ps_store: the storage engine of one server shard — embedding tables with a hot DRAM tier
 * and a RocksDB cold tier, sparse optimizers applied on push, deterministic initialization,
 * feature admission, TTL and snapshots. No networking here.
 *
 * Thread safety: every call may be made concurrently from several threads. Internally the
 * key space is split into partitions by ps_partition_of_hash(ps_key_hash(key), P) — the key
 * hash that also names the key's shard, so a batch's hashes serve both; a server
 * whose partition threads each touch only their own partition's keys (see
 * ps_store_partition_of) never contends. */
#ifndef PS_STORE_H
#define PS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ps_status.h"
#include "ps_table.h"

/* The table spec (ps_table.h): the store persists and compares its row fields only; the
 * stepping fields (consistency, staleness, workers) are the server's and ignored here. */

/* Tables one store holds at most (a declaration past it fails with PS_ERR_NOMEM). */
#define PS_STORE_MAX_TABLES 4096u

typedef enum ps_durability {
  PS_DURABILITY_NONE = 0,   /* no WAL: rows are durable at flush/snapshot only (default) */
  PS_DURABILITY_WAL = 1,    /* WAL on, not synced */
  PS_DURABILITY_SYNC = 2    /* WAL synced on every write batch */
} ps_durability;

/* Memory: cache_bytes bounds the hot tier (row allocations at their jemalloc size class plus
 * the index arrays; split evenly over partitions). Beyond it a store uses the RocksDB block
 * cache (block_cache_bytes), up to 2 memtables of write_buffer_bytes per table plus one for
 * metadata, table readers' bloom filters and indexes (~1.3 bytes per cold row), and for
 * tables with admit_threshold > 1 a 2 MB count-min sketch each. tests/embedding/test_store.c
 * checks RSS growth <= cache_bytes + block cache + memtables + 24 MB. */
typedef struct ps_store_options {
  const char *path;          /* RocksDB directory (created if absent) */
  size_t cache_bytes;        /* hot-tier budget for row memory + index, all tables */
  uint32_t partitions;       /* >= 1 */
  ps_durability durability;
  size_t block_cache_bytes;  /* RocksDB block cache; 0 = a default */
  size_t write_buffer_bytes; /* RocksDB memtable size per table; 0 = a default (16 MB) */
  bool read_only;            /* open an existing database (a snapshot) without writing to it:
                              * pulls only; declare and push fail with PS_ERR_INVALID, close
                              * writes nothing (ps-predict, ps-export) */
} ps_store_options;

typedef struct ps_store_stats {
  uint64_t rows_hot;
  uint64_t rows_cold;        /* estimate, from RocksDB */
  uint64_t hits, misses;     /* hot-tier lookups */
  uint64_t evictions, writebacks;
  uint64_t admitted, pending_admission_pushes;
  uint64_t expired;
  uint64_t hot_bytes;        /* bytes of row memory + index in use */
  uint64_t cold_bytes;       /* RocksDB live data size estimate */
  uint64_t unwritten_rows;   /* dirty hot rows: updates not yet written to RocksDB */
  uint64_t unwritten_bytes;  /* their memory */
  uint64_t write_failures;   /* failed writes to RocksDB (each retry counts) */
  uint64_t writes_failing;   /* 1 while RocksDB refuses writes (full disk), else 0 */
  uint64_t prefetched;       /* rows loaded into the hot tier by ps_store_warm */
} ps_store_stats;

typedef struct ps_store ps_store;

/* Errors (ps_status.h): the calls that can fail for a reason worth telling — open, declare,
 * flush, snapshot, restore, snapshot_remove, export_row, push_admit — take `ps_error *err`
 * last and put the reason there (RocksDB's text, the path, the table); they log nothing they
 * return. The data calls (get_spec, batch_create, pull, push and their _batch forms) return a
 * bare status: they fail on a bad argument, no memory or an unknown table, which the status
 * says in full, and once per request they run, so no message is formatted for them. Their
 * rare storage failures (a RocksDB read error, a corrupt stored row) are logged, rate-limited
 * (PS_ERROR_RL), and return PS_ERR_IO / PS_ERR_CORRUPT.
 *
 * Writes that fail (a full disk) fail no data call: dirty rows stay in memory until RocksDB
 * takes writes again, which the store notices by itself (one log line when writes start
 * failing, one when they work again; stats writes_failing). Meanwhile pulls work, and pushes
 * are applied in memory as long as ps_store_push_admit lets them in. */

/* Opens (creating if absent) the database at opt->path and registers the tables it holds. */
ps_status ps_store_open(const ps_store_options *opt, ps_store **out, ps_error *err);
/* Flushes dirty rows and closes; sets *s to NULL. */
void ps_store_close(ps_store **s);

/* Declares a table: a no-op for the same spec, PS_ERR_CONFLICT for another spec under the same
 * id or name. Specs persist in the database, so a reopened store knows its tables. */
ps_status ps_store_declare(ps_store *s, const ps_table_spec *spec, ps_error *err);
/* Copies the spec of a declared table; PS_ERR_UNKNOWN_TABLE if none. */
ps_status ps_store_get_spec(ps_store *s, uint32_t table, ps_table_spec *out);
/* The ids of all declared tables (at most max); returns the count. */
size_t ps_store_tables(ps_store *s, uint32_t *ids, size_t max);

/* out[i*dim .. (i+1)*dim) = row of keys[i] (a 16-bit table's values widened, exactly). A key
 * never seen gets its deterministic initial value (from table seed and key) without being
 * stored. Duplicate keys are fine. */
ps_status ps_store_pull(ps_store *s, uint32_t table, const uint64_t *keys, size_t n, float *out);
/* ps_store_pull with the rows as the table stores them (its row_type, ps_table.h): n * dim
 * values of ps_row_type_size bytes each, never widened and rounded again (for an f32 table the
 * same as ps_store_pull). What ps-server sends for a pull in the table's own 16-bit type. */
ps_status ps_store_pull_rows(ps_store *s, uint32_t table, const uint64_t *keys, size_t n,
                             void *out);
/* Applies the table's optimizer with grads[i*dim ..] for keys[i]; gradients of the same key
 * within one call are summed first, then applied once. */
ps_status ps_store_push(ps_store *s, uint32_t table, const uint64_t *keys, size_t n,
                        const float *grads);
/* Whether a push of n keys to table may proceed: PS_OK, except while writes to RocksDB fail
 * and the rows not yet written, plus n new rows, would exceed the hot budget: then
 * PS_ERR_NOMEM with the reason in err. Pushes themselves never fail for lack of disk or
 * budget (they go over the budget instead), so a caller that wants memory bounded on a full
 * disk asks here first, once per request before any part of it is applied (ps-server does,
 * on its socket thread): a refused push has changed nothing. */
ps_status ps_store_push_admit(ps_store *s, uint32_t table, size_t n, ps_error *err);
/* A batch of keys hashed and grouped by store partition once, for callers that spread one
 * request over several threads (ps-server's partition threads): each thread then pulls or
 * pushes the partitions it owns, rows land at their keys' positions, and no key is hashed
 * or copied again. The batch borrows keys: they must outlive it. */
typedef struct ps_store_batch ps_store_batch;
ps_status ps_store_batch_create(const ps_store *s, const uint64_t *keys, size_t n,
                                ps_store_batch **out);
void ps_store_batch_destroy(ps_store_batch **b);
/* Checks, from the hashes the batch already holds, that every key belongs to shard `shard` of
 * `nshards` (ps_shard_of): PS_OK, or PS_ERR_WRONG_SHARD with *pos the lowest position (index
 * into keys) of a key that does not. */
ps_status ps_store_batch_check_shard(const ps_store_batch *b, uint32_t shard, uint32_t nshards,
                                     size_t *pos);
/* Says the batch's keys are distinct (a sender's word: ps-server passes on a push's
 * keys_unique). A push over it then skips summing duplicate keys, gathering each partition's
 * keys with a check instead (ps_dedup_gather_unique_at); a partition where the word was wrong
 * is summed as usual, so the rows are the same bits either way, only the time differs. */
void ps_store_batch_set_unique(ps_store_batch *b, bool unique);
/* Positions (indices into keys) of the batch's keys in store partition part; returns count. */
size_t ps_store_batch_part(const ps_store_batch *b, uint32_t part, const uint32_t **pos);
/* ps_store_pull / ps_store_push restricted to the partitions p with p % stride == first;
 * out and grads are indexed by key position like the whole-batch calls. Calls for disjoint
 * partition sets may run concurrently on the same batch and out buffer. */
ps_status ps_store_pull_batch(ps_store *s, uint32_t table, const ps_store_batch *b,
                              uint32_t first, uint32_t stride, float *out);
ps_status ps_store_push_batch(ps_store *s, uint32_t table, const ps_store_batch *b,
                              uint32_t first, uint32_t stride, const float *grads);
/* Rows with their optimizer state (ps-worker's deep lookahead applies its own updates to
 * them): row i at out + i * ps_store_state_row_floats(spec) holds the dim values, the state
 * floats (common/ps_optim.h) and, for Adam, its step count's uint32 bits -- what the next push
 * of the key will update. A key stored nowhere gives its initial row and state. f32 tables only
 * (PS_ERR_UNSUPPORTED). A read: nothing enters the hot tier or is counted. The _batch form
 * reads the partitions first, first + stride, ... of a batch made of `keys`. */
size_t ps_store_state_row_floats(const ps_table_spec *spec);
ps_status ps_store_pull_state(ps_store *s, uint32_t table, const uint64_t *keys, size_t n,
                              float *out);
ps_status ps_store_pull_state_batch(ps_store *s, uint32_t table, const uint64_t *keys,
                                    const ps_store_batch *b, uint32_t first, uint32_t stride,
                                    float *out);
/* Warms the hot tier for keys about to be pulled (a prefetch): rows in RocksDB and not in
 * memory are loaded into the hot tier as a pull would load them; nothing is copied out, rows
 * already hot only get CLOCK's reference bit, and keys stored nowhere are left alone. Counts
 * stats.prefetched, not hits or misses. Values never change: it is caching only, under the
 * same locks as pull and push. The _batch form is restricted like ps_store_pull_batch. */
ps_status ps_store_warm(ps_store *s, uint32_t table, const uint64_t *keys, size_t n);
ps_status ps_store_warm_batch(ps_store *s, uint32_t table, const ps_store_batch *b,
                              uint32_t first, uint32_t stride);
/* Tells the store the global training step (for TTL in steps and row metadata). */
void ps_store_set_step(ps_store *s, uint64_t step);
/* Expires rows not touched for ttl_steps (per table); returns how many were removed.
 * "Touched" means pushed (a row's last-touch step is the step of its last update or of its
 * creation); a row last touched at step t survives while step <= t + ttl_steps and is removed
 * from both tiers by an expire at a later step; it then reads as its initial value again.
 * Cost: writes back dirty rows and scans the cold tier of every TTL table (O(rows)), so call
 * it every few hundred steps, not every step (a no-op when no table has a TTL). */
uint64_t ps_store_expire(ps_store *s);

/* Writes every dirty hot row to RocksDB and flushes its memtables. */
ps_status ps_store_flush(ps_store *s, ps_error *err);
/* flush + RocksDB checkpoint into dir (must not exist): consistent at this moment. */
ps_status ps_store_snapshot(ps_store *s, const char *dir, ps_error *err);
/* Replaces the store's content by the snapshot in dir (the hot tier is dropped); a delta is
 * composed with its chain first (below), and the checkpoint restored becomes the base of the
 * store's next delta. PS_ERR_CONFLICT (nothing changed) when a table declared here has
 * another row type in the checkpoint's manifest. */
ps_status ps_store_restore(ps_store *s, const char *dir, ps_error *err);
/* The spec of table `table` as checkpoint dir's manifest records it (row type included), without
 * opening it: PS_ERR_NOT_FOUND when the checkpoint has no manifest or no such table. For a
 * server that checks a restore against the tables declared to it before restoring. */
ps_status ps_store_checkpoint_spec(const char *dir, uint32_t table, ps_table_spec *out,
                                   ps_error *err);
/* Deletes a snapshot directory and everything under it; PS_OK when there is none. */
ps_status ps_store_snapshot_remove(const char *dir, ps_error *err);

/* Incremental checkpoints (ps_store_delta.c; the format is in docs/CHECKPOINTS.md). A
 * checkpoint is a directory: a full one is a snapshot as above; a delta holds only the rows
 * whose stored record changed since the store's base (its last committed checkpoint, or the
 * checkpoint it was restored from) — their whole records, optimizer state included — and a
 * tombstone for every row removed since (TTL expiry), one SST file per table; both carry
 * EMBER-SNAPSHOT, a checksummed manifest with the checkpoint's step, a random id and, for a
 * delta, its base's step, id and path relative to the delta's parent directory.
 *
 * Change tracking: from the first checkpoint on (and after a restore), every push records its
 * keys in a per-partition, per-table key set, and expiry its removed keys; a checkpoint moves
 * the sets aside (pending) so pushes go on into fresh ones; a commit drops the pending keys, an
 * abort puts them back. A store that has no base (a fresh open: the rows flushed at the last
 * close are not a checkpoint) writes a full checkpoint when asked for a delta.
 *
 * Reading: ps_store_restore and a read-only ps_store_open of a delta compose its chain (the full
 * base, then each delta in order), checking every link (the base's step and id as the delta
 * names them) and every file's checksum: a missing or mismatched link or a damaged file fails
 * with PS_ERR_CORRUPT, said in err. A read-only open
 * composes into a private directory under $TMPDIR (SST files hard-linked when on the same file
 * system, else copied), removed at close; the checkpoint's own files are never written. */
typedef struct ps_store_ckpt_info {
  bool delta;           /* a delta was written (else a full snapshot) */
  uint64_t id;          /* the new checkpoint's id */
  uint64_t base_step;   /* delta: its base's step and id */
  uint64_t base_id;
  uint32_t depth;       /* deltas since the last full checkpoint (0 = this one is full) */
  uint64_t rows;        /* delta: rows written, and tombstones; full: about its rows
                         * (RocksDB's estimate) */
  uint64_t tombstones;
} ps_store_ckpt_info;
/* Writes the checkpoint of `step` into dir (must not exist): a delta against the store's base
 * when max_depth > 0 and the store has a base whose chain depth is below max_depth, else a
 * full snapshot. It is pending until ps_store_checkpoint_commit (final_dir: where it ended
 * up, e.g. after a rename) or ps_store_checkpoint_abort; a second checkpoint while one is
 * pending is refused (PS_ERR_CONFLICT). info may be NULL. */
ps_status ps_store_checkpoint(ps_store *s, const char *dir, uint64_t step, uint32_t max_depth,
                              ps_store_ckpt_info *info, ps_error *err);
ps_status ps_store_checkpoint_commit(ps_store *s, const char *final_dir, ps_error *err);
void ps_store_checkpoint_abort(ps_store *s);
/* Whether dir is a delta checkpoint (holds an EMBER-SNAPSHOT of kind delta). */
bool ps_store_is_delta(const char *dir);

/* Calls fn(ctx, key, values) for every stored row of a table of a READ-ONLY store (a snapshot:
 * its RocksDB files hold every row), in RocksDB's key order; values (dim floats, a 16-bit
 * table's widened exactly, so narrowing them to the row type again gives the stored bits) are valid
 * during the call only. Stops at the first status fn returns other than PS_OK and returns it.
 * PS_ERR_INVALID on a writable store (its newest rows may be in the hot tier only); a record
 * that does not decode is PS_ERR_CORRUPT, said in err. For ps-export. */
typedef ps_status (*ps_store_row_fn)(void *ctx, uint64_t key, const float *values);
ps_status ps_store_scan(ps_store *s, uint32_t table, ps_store_row_fn fn, void *ctx,
                        ps_error *err);

void ps_store_get_stats(ps_store *s, ps_store_stats *out);
/* The partition (0..partitions-1) that owns a key. */
uint32_t ps_store_partition_of(const ps_store *s, uint64_t key);
uint32_t ps_store_partitions(const ps_store *s);

/* The deterministic initial row of a key (what a pull of an unseen key returns): for a 16-bit
 * row type, the f32 initial values rounded once to it (and widened back). */
void ps_store_init_row(const ps_table_spec *spec, uint64_t key, float *row);

/* Size in bytes of a stored row record of this spec (what ps_store_export_row writes):
 * an 8-byte versioned header, 16 bytes of metadata, dim values and the optimizer state. */
size_t ps_store_record_bytes(const ps_table_spec *spec);
/* Copies the full stored record of a key (values, optimizer state, metadata), from the hot
 * tier or RocksDB, into buf (cap bytes; *len gets the size). PS_ERR_NOT_FOUND if the key
 * has no stored row. For tests, tools and shard migration. */
ps_status ps_store_export_row(ps_store *s, uint32_t table, uint64_t key, void *buf, size_t cap,
                              size_t *len, ps_error *err);
/* Makes n records (each ps_store_record_bytes of the table's spec, as ps_store_export_row
 * writes them, back to back in recs) the stored rows of keys[i], bit for bit: values,
 * optimizer state and metadata, replacing any row the keys had (a hot copy is dropped). A
 * maintenance call (the store is locked exclusively), for moving rows between stores: ps-reshard.
 * PS_ERR_INVALID on a read-only store or a record of another table's header (nothing is
 * written then), PS_ERR_IO when RocksDB refuses the write; said in err. */
ps_status ps_store_import_rows(ps_store *s, uint32_t table, const uint64_t *keys,
                               const void *recs, size_t n, ps_error *err);

#endif

/* ps_store_int.h: the store's private vocabulary, shared by the ps_store_*.c files and by
 * nothing outside embedding/ (the public API is ps_store.h).
 *
 * The design, in one place (measured in bench/RESULTS-embedding.md):
 * - Share-nothing partitions. A key belongs to partition ps_partition_of_hash(h, P) of its
 *   key hash h = ps_key_hash(key) (the hash that also picks its shard); each partition has its own mutex, its own
 *   open-addressing index per table, its own CLOCK hand, its own count-min sketches and its
 *   share cache_bytes / P of the budget. A batch call splits its keys by partition (counting
 *   sort) and handles one partition at a time, so threads that own disjoint partitions never
 *   touch the same lock or cache line. A store-wide rwlock is taken shared by data calls and
 *   exclusively by declare/flush/snapshot/restore/expire (maintenance at step boundaries).
 * - Files, one concept each: ps_store_index.c (hash index), ps_store_hot.c (hot tier, CLOCK
 *   eviction), ps_store_optim.c (optimizers, row init), ps_store_cold.c (RocksDB: options,
 *   records, specs on disk), ps_store_tables.c (declaration), ps_store_admit.c (count-min
 *   admission, TTL), ps_store_snapshot.c, ps_store_delta.c, ps_store_manifest.c,
 *   ps_store_chain.c and ps_store_restore.c (checkpoints: snapshots, change tracking, deltas,
 *   manifests, chains, restore), ps_store_batch.c (pull/push pipeline) and ps_store.c
 *   (open/close/flush/stats). Composition sits above the plain open: a read-only
 *   ps_store_open of a delta composes its chain (ps_store_chain.c) and opens the copy with
 *   store_open_dir (ps_store.c), which never composes; restore composes, then swaps
 *   (ps_store_restore.c); nothing below calls either.
 * - What the pull and push loops call per key lives here as static inline (index probe, key
 *   hash, row layout), so splitting the files costs the hot loops no call.
 * - Floats and metadata are stored in host (little-endian) byte order. */
#ifndef PS_STORE_INT_H
#define PS_STORE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <rocksdb/c.h>

#include "ps_hash.h"
#include "ps_status.h"
#include "ps_store.h"

/* ------------------------------------------------------------ row memory */

#if defined(__SANITIZE_ADDRESS__)
#define PS_STORE_PLAIN_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PS_STORE_PLAIN_MALLOC 1
#endif
#endif

#ifdef PS_STORE_PLAIN_MALLOC
/* Under ASan rows come from the sanitizer's malloc so overflows are caught. */
static inline void *row_alloc(size_t n) { return malloc(n); }
static inline void row_free(void *p, size_t n) { (void)n; free(p); }
static inline size_t row_class(size_t n) { return (n + 15) & ~(size_t)15; }
#else
#include <jemalloc/jemalloc.h>
static inline void *row_alloc(size_t n) { return mallocx(n, 0); }
static inline void row_free(void *p, size_t n) { sdallocx(p, n, 0); }
static inline size_t row_class(size_t n) { return nallocx(n, 0); }
#endif

#define REC_HDR 8        /* stored value header */
#define ROW_META 16      /* a record's u64 last_step, u32 adam step, u32 reserved */
#define REC_MAGIC 0x45   /* 'E' */
#define REC_VERSION 1
#define F_REF ((uintptr_t)1)
#define F_DIRTY ((uintptr_t)2)
#define F_MASK ((uintptr_t)3)
#define CMS_DEPTH 4
#define PREFETCH_DIST 32

typedef struct row_meta {
  uint64_t last_step;
  uint32_t adam_t;
  uint32_t reserved;
} row_meta;

/* ----------------------------------------------------------------- state */

/* An index entry carries the row's last-touch step, so the row itself is only its floats
 * (values, then optimizer state; an Adam row also its step count, after them): a dim-16 pull
 * reads one line of row instead of two (16 bytes of metadata before the values made every
 * 64-byte value run straddle a line), an Adagrad push three lines instead of four, and rows
 * of 2^k floats fill their jemalloc class (a dim-128 Adagrad row: 1024 bytes, where 1040 took
 * the 1280 class). The entry grows from 16 to 24 bytes; measured in bench/RESULTS-embedding.md.
 * A record (RocksDB, an export) keeps its row_meta in front of the floats: the format on disk
 * did not change (ent_meta / ent_set_meta convert). */
typedef struct hentry {
  uint64_t key;
  uintptr_t p;   /* row pointer | F_REF | F_DIRTY; 0 = empty slot */
  uint64_t step; /* the row's last-touch step (a record's row_meta.last_step) */
} hentry;
_Static_assert(sizeof(hentry) == 24 && sizeof(row_meta) == ROW_META, "index entry layout");

typedef struct ptable { /* one table inside one partition */
  hentry *slots;
  size_t cap, count; /* cap: power of two or 0 */
  uint16_t *cms;     /* CMS_DEPTH x cms_width saturating counters, or NULL */
  size_t cms_width;
  /* Keys whose stored row changed since the last checkpoint (ps_store_delta.c): an open-
   * addressing set, 0 = empty slot (key 0 is chg_zero), kept while the store tracks. */
  uint64_t *chg;
  size_t chg_cap, chg_n;
  bool chg_zero;
} ptable;

/* A checkpoint the store knows (ps_store_delta.c): its id, step, chain depth, directory. */
typedef struct store_ckpt_ref {
  bool have;
  uint64_t id, step;
  uint32_t depth;
  char *dir; /* canonical absolute path (malloc'd) */
} store_ckpt_ref;

/* The keys of one table moved aside by a pending checkpoint, sorted. */
typedef struct store_pend_keys {
  uint32_t table;
  uint64_t *keys;
  size_t n;
} store_pend_keys;

/* A dirty row evicted during a data call: out of the index, its record in the partition's
 * WriteBatch, its memory kept until that batch is written (ps_store_writeback.c). */
typedef struct staged_row {
  size_t ti;
  uint64_t key;
  void *row;
} staged_row;

typedef struct partition {
  pthread_mutex_t mu;
  ptable *tabs; /* indexed like store->tables */
  size_t used, budget;
  size_t ndirty, dirty_bytes; /* rows with F_DIRTY (not yet in RocksDB) and their alloc bytes */
  size_t hand_tab, hand_slot;
  rocksdb_writebatch_t *wb;
  staged_row *stage; /* rows whose records are in wb */
  size_t nstage, stage_cap;
  uint64_t hits, misses, evictions, writebacks, admitted, pending, expired;
  uint64_t prefetched; /* rows loaded by ps_store_warm */
  uintptr_t *huge;   /* 2 MB regions of row memory already madvise(MADV_HUGEPAGE)d */
  size_t nhuge, huge_cap;
} __attribute__((aligned(64))) partition; /* own cache lines: no false sharing between partitions */

typedef struct table {
  ps_table_spec spec;
  size_t state_floats;
  size_t val_bytes;   /* the values as stored: dim x the row type's size, padded to 4 bytes so
                       * the f32 optimizer state after them is aligned */
  size_t float_bytes; /* values + optimizer state, as a record holds them after its row_meta */
  size_t row_bytes;   /* a hot row: float_bytes, + 4 for Adam's step count (see hentry) */
  size_t rec_bytes;   /* a record: REC_HDR + ROW_META + float_bytes */
  size_t alloc_bytes; /* jemalloc size class of row_bytes */
  rocksdb_column_family_handle_t *cf;
  char hdr[REC_HDR];
  /* false while RocksDB can hold no row of this table (declared here, nothing written back,
   * imported or ingested since): a miss is then a key stored nowhere, and its MultiGet --
   * most of a first-touch pull's server time -- is skipped. Set (never cleared) before any
   * row can reach the column family; true for a table found at open. See store_cold_mark. */
  atomic_bool on_disk;
} table;

struct ps_store {
  ps_store_options opt;
  char *path;
  rocksdb_t *db;
  rocksdb_options_t *dbopt;
  rocksdb_block_based_table_options_t *bbto;
  rocksdb_cache_t *cache;
  rocksdb_readoptions_t *ro, *ro_iter;
  rocksdb_writeoptions_t *wo, *wo_sync;
  rocksdb_flushoptions_t *fo;
  rocksdb_column_family_handle_t *meta_cf;
  rocksdb_column_family_handle_t **orphan; /* "t<id>" families without a spec */
  char **orphan_names;
  size_t norphan;
  pthread_rwlock_t lock;
  table *tables;
  size_t ntables;
  uint16_t *idmap; /* table id -> index + 1 */
  partition *parts;
  uint32_t nparts;
  _Atomic uint64_t step;
  /* Write-back state (ps_store_writeback.c): failing is set while RocksDB refuses writes
   * (a full disk); retry_ns is when a data call next tries a write-back. */
  _Atomic int failing;
  _Atomic uint64_t retry_ns;
  _Atomic uint64_t write_failures;
  _Atomic uint64_t failing_since_ns;
  /* Incremental checkpoints (ps_store_delta.c): track says whether pushes and expiry record
   * changed keys (from a store's first checkpoint or restore on); base is the last committed
   * checkpoint (a delta's base), pend the one written and not yet committed or aborted, with
   * the keys it moved aside. compose_dir: a read-only open of a delta chain reads this private
   * composed copy, removed at close. */
  bool track;
  _Atomic int track_lost; /* a key could not be recorded (no memory): next one is full */
  store_ckpt_ref base, pend;
  store_pend_keys *pendk;
  size_t npendk;
  char *compose_dir;
};

/* -------------------------------------------------------- inline helpers */

/* ps_key_hash (common/ps_hash.h): the same hash the client's shard choice and the server's
 * ownership check use, so a batch's hashes serve all three (ps_store_batch_check_shard). */
static inline uint64_t key_hash(uint64_t key) { return ps_key_hash(key); }
static inline uint32_t part_of_hash(uint64_t h, uint32_t n) { return ps_partition_of_hash(h, n); }
static inline void key_be(uint64_t key, char out[8]) {
  for (int i = 0; i < 8; i++) out[i] = (char)(key >> (56 - 8 * i));
}
static inline uint64_t be_key(const char *in) {
  uint64_t k = 0;
  for (int i = 0; i < 8; i++) k = (k << 8) | (uint8_t)in[i];
  return k;
}
static inline void *ent_row(const hentry *e) { return (void *)(e->p & ~F_MASK); }
/* An Adam row's step count: the 4 bytes after its floats (hentry says why); NULL for the
 * other optimizers, whose rows end with their floats. */
static inline uint32_t *row_adam_t(const table *t, void *row) {
  return t->spec.optimizer == PS_OPT_ADAM ? (uint32_t *)((char *)row + t->float_bytes) : NULL;
}
/* The optimizer state of a row: f32, after its values whatever the row type. */
static inline float *row_state(const table *t, void *row) {
  return (float *)((char *)row + t->val_bytes);
}
/* Row type of a table, and whether its values are stored as 16-bit numbers. */
static inline bool tab_narrow(const table *t) { return t->spec.row_type != PS_ROW_F32; }
/* The row_meta a record of hot entry e carries: its step from the entry, Adam's step count
 * from the end of the row. */
static inline row_meta ent_meta(const table *t, const hentry *e) {
  const uint32_t *at = row_adam_t(t, ent_row(e));
  return (row_meta){e->step, at ? *at : 0, 0};
}
/* The converse, for a row read from a record. */
static inline void ent_set_meta(const table *t, hentry *e, const row_meta *m) {
  uint32_t *at = row_adam_t(t, ent_row(e));
  e->step = m->last_step;
  if (at) *at = m->adam_t;
}
/* A hot row's record after its REC_HDR header: the entry's metadata, then the row's floats. */
static inline void rec_fill(const table *t, const hentry *e, char *rec) {
  row_meta m = ent_meta(t, e);
  memcpy(rec + REC_HDR, &m, ROW_META);
  memcpy(rec + REC_HDR + ROW_META, ent_row(e), t->float_bytes);
}
/* Dirty-bit changes go through these two so the partition's count of unwritten rows (what
 * eviction may not drop and what ps_store_push_admit weighs) stays exact. */
static inline void mark_dirty(partition *pa, size_t alloc_bytes, hentry *e) {
  if (e->p & F_DIRTY) return;
  e->p |= F_DIRTY;
  pa->ndirty++;
  pa->dirty_bytes += alloc_bytes;
}
static inline void clear_dirty(partition *pa, size_t alloc_bytes, hentry *e) {
  if (!(e->p & F_DIRTY)) return;
  e->p &= ~F_DIRTY;
  pa->ndirty--;
  pa->dirty_bytes -= alloc_bytes;
}
static inline bool store_failing(ps_store *s) {
  return atomic_load_explicit(&s->failing, memory_order_relaxed) != 0;
}

/* The index probe (ps_store_index.c holds the rest of the index): the slot is h & mask, the
 * low bits of the hash whose high bits chose the partition. */
static inline hentry *idx_find(const ptable *pt, uint64_t key, uint64_t h) {
  if (!pt->cap) return NULL;
  const size_t mask = pt->cap - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    hentry *e = &pt->slots[i];
    if (!e->p) return NULL;
    if (e->key == key) return e;
  }
}

/* The table of an id and its index (*ti), or NULL when not declared. */
static inline table *find_table(ps_store *s, uint32_t id, size_t *ti) {
  if (id == 0 || id > 65535) return NULL;
  uint16_t m = s->idmap[id];
  if (!m) return NULL;
  *ti = m - 1u;
  return &s->tables[m - 1];
}

/* The start of every data call on one table: the store lock taken shared and the table found.
 * On NULL (*st = PS_ERR_UNKNOWN_TABLE) the lock is held all the same: the caller unlocks. */
static inline table *store_read_table(ps_store *s, uint32_t id, size_t *ti, ps_status *st) {
  pthread_rwlock_rdlock(&s->lock);
  table *t = find_table(s, id, ti);
  *st = t ? PS_OK : PS_ERR_UNKNOWN_TABLE;
  return t;
}

/* ---------------------------------------------- ps_store_index.c: index */

/* Whether one more key takes the index past its largest load, 0.7 (it doubles there, so it
 * runs at 0.35-0.7: 34-69 bytes a row of 24-byte entries). 7/8 was measured for issue 33 (bench/
 * RESULTS-embedding.md): 27-55 bytes a row, and dim-64 f16 rows reach 0.55x of f32 ones at
 * sizes where it stays undoubled, but there hot uniform pulls and pushes ran 15-30% slower
 * (a hit probes 4.5 entries at 7/8, 2.2 at 0.7), so the bound stays 0.7. */
static inline bool idx_full(const ptable *pt) {
  return (pt->count + 1) * 10 > pt->cap * 7;
}
/* Removes the entry at slot i (backward shift: no tombstones). */
void store_idx_delete_at(ptable *pt, size_t i);
/* Puts key (hash h, absent, with room in the index) with pointer-and-flags p; returns its entry. */
hentry *store_idx_put(ptable *pt, uint64_t key, uint64_t h, uintptr_t p);
/* Doubles pt's index (64 slots when empty), charging the growth to pa's budget. */
ps_status store_idx_grow(partition *pa, ptable *pt);

/* ------------------------------------ ps_store_hot.c: hot tier, eviction */

/* Inserts a new row for key (not present) and returns its index entry (the row: ent_row; valid
 * until the next insert or removal in the partition); evicts to stay in budget (only rows
 * already written while writes fail). NULL when out of memory, or for a clean row (no F_DIRTY
 * in flags: a pull) when nothing can be evicted while writes fail; a dirty row then goes over
 * the budget (ps_store_push_admit bounds by how much). */
hentry *store_hot_insert(ps_store *s, partition *pa, size_t ti, uint64_t key, uint64_t h,
                       uintptr_t flags);
/* Brings key's row (absent from the hot tier) in from its cold-tier record v. Returns its
 * entry, or NULL with *st set: PS_ERR_NOMEM, or PS_ERR_CORRUPT when the record does not decode (the
 * row just inserted is taken out again, so the hot tier is as it was). */
hentry *store_hot_load(ps_store *s, partition *pa, size_t ti, uint64_t key, uint64_t h,
                       uintptr_t flags, const char *v, size_t len, ps_status *st);
/* Frees the row of entry e of table ti and takes e out of the index (no write-back: a dirty
 * row's update is dropped, as expire and a failed load want). */
void store_hot_remove(ps_store *s, partition *pa, size_t ti, hentry *e);
/* Frees every hot row, index and sketch and forgets every table (store write-locked). */
void store_hot_drop(ps_store *s);

/* --------------------------------- ps_store_optim.c: optimizers, row init */

/* Floats of optimizer state a row of this spec carries after its values. */
size_t store_state_floats(const ps_table_spec *sp);
/* Bytes of its values: dim x the row type's size, padded to 4 (table.val_bytes). */
size_t store_val_bytes(const ps_table_spec *sp);
/* A new stored row (entry e's): initial values and optimizer state, its step stamped. */
void store_init_full_row(const table *t, uint64_t key, hentry *e, uint64_t step);
/* Applies one (already summed) gradient to entry e's row and stamps its last step. */
void store_apply_grad(const table *t, hentry *e, const float *g, uint64_t step);

/* -------------------------------------------- ps_store_cold.c: RocksDB */

/* A table found in the database at open: its decoded spec and its column family. */
typedef struct store_cold_table {
  ps_table_spec spec;
  rocksdb_column_family_handle_t *cf;
} store_cold_table;

/* Logs a RocksDB error, rate-limited (and frees it); returns PS_ERR_IO. For the data paths,
 * whose public calls have no ps_error to fill. */
ps_status store_rdb_log(const char *what, char *rerr);
/* Fills err from a RocksDB error (and frees it); returns PS_ERR_IO. */
ps_status store_rdb_error(ps_error *err, const char *what, char *rerr);
/* The RocksDB options (tuned for point lookups of small values) and their destruction. */
void store_cold_options_create(ps_store *s);
void store_cold_options_destroy(ps_store *s);
/* Opens RocksDB at s->path with every column family and returns the tables its specs name
 * (*found, *nfound; the caller frees the array and owns the handles). Families without a
 * spec are kept as orphans. */
ps_status store_cold_open(ps_store *s, store_cold_table **found, size_t *nfound, ps_error *err);
/* Closes RocksDB and every column family handle (the tables' too). */
void store_cold_close(ps_store *s);
/* Creates table spec's column family (dropping an orphan of the same name) and persists the
 * spec with a synced write; *cf gets the family. */
ps_status store_cold_table_create(ps_store *s, const ps_table_spec *spec,
                                  rocksdb_column_family_handle_t **cf, ps_error *err);
/* The stored form of a spec into b (SPEC_BYTES); returns its length. */
#define SPEC_BYTES 160
size_t store_spec_encode(const ps_table_spec *sp, char *b);
/* A stored spec record back into a spec; PS_ERR_CORRUPT when it is not one. */
ps_status store_spec_decode(const char *b, size_t len, ps_table_spec *sp);
/* Checks the row fields of a spec (the stepping fields are the server's, ps_table.h). */
ps_status store_spec_validate(const ps_table_spec *sp, ps_error *err);
/* Copies a stored record's metadata into meta (ROW_META bytes; NULL: not wanted) and its floats
 * into row (t->float_bytes); PS_ERR_CORRUPT if it does not have table t's length and header,
 * said in err, or (err NULL: the data path) in a rate-limited log line. */
ps_status store_cold_decode(const table *t, uint64_t key, const char *v, size_t len, void *meta,
                            void *row, ps_error *err);
/* MultiGet for n keys of one table. vals[i] is NULL when absent; the caller destroys them. */
ps_status store_cold_multiget(ps_store *s, const table *t, const uint64_t *keys, size_t n,
                              rocksdb_pinnableslice_t **vals);
/* Appends a record (header, the ROW_META bytes at meta, t->float_bytes at row) to a write batch. */
void store_cold_put_row(rocksdb_writebatch_t *wb, const table *t, uint64_t key, const void *meta,
                        const void *row);
/* Records that rows of t may be in RocksDB from now on (before they are written there). */
void store_cold_mark(const table *t);
/* Writes (and clears) a partition's write batch; a failure is said in err. */
ps_status store_cold_flush_wb(ps_store *s, partition *pa, ps_error *err);
/* The payload of a stored record of table t (ROW_META bytes of metadata, then the floats), or NULL when the record does not have its length
 * and header (store_cold_decode says why). */
const char *store_cold_row_of(const table *t, const char *v, size_t len);
/* A dirty hot row to write back: its key and index entry. */
typedef struct store_dirty_ref {
  uint64_t key;
  hentry *e;
} store_dirty_ref;
/* Writes n dirty rows of table ti (sorted here) as one SST file ingested into the database;
 * the caller clears their dirty bits once it is in. A failure's reason (RocksDB's) goes in err,
 * not to the log: the caller, which falls back to WriteBatches, logs one line with it. */
ps_status store_cold_ingest(ps_store *s, size_t ti, store_dirty_ref *d, size_t n, ps_error *err);

/* -------------------------------------------- ps_store_tables.c: tables */

/* Opens the database and registers the tables it holds (store write-locked or opening). */
ps_status store_tables_open(ps_store *s, ps_error *err);

/* ----------------------------------- ps_store_admit.c: admission and TTL */

/* A table's share of the count-min sketch in one partition (2 MB per table over all). */
ps_status store_cms_create(ptable *pt, uint32_t nparts);
/* Counts one more push of a new key (hash h); returns the estimated count so far. */
uint32_t store_cms_bump(ptable *pt, uint64_t h);

/* ------------------------- ps_store_writeback.c: evicted rows, failing writes */

/* Evicts dirty entry e of table ti: its record goes into pa's WriteBatch, the entry leaves the
 * index, its memory waits in pa's stage until store_wb_settle. False (nothing changed) when
 * the stage cannot grow. */
bool store_wb_stage(ps_store *s, partition *pa, size_t ti, hentry *e);
/* Ends every data call on pa (partition locked): writes the staged rows' batch and frees them,
 * or on failure puts them back in the index, still dirty, and marks the store failing. While
 * failing, writes some of pa's dirty rows once per retry interval to find out whether writes
 * work again. */
void store_wb_settle(ps_store *s, partition *pa);
/* Puts pa's dirty rows into its write batch (pa->wb), at most `max`, from table *t slot *i on
 * (a cursor that it advances): each row's entry and allocation size go to done[] and alloc[],
 * for clear_dirty once the batch is written. Returns how many; fewer than max: no more. */
size_t store_wb_put_dirty(ps_store *s, partition *pa, size_t *t, size_t *i, hentry **done,
                          size_t *alloc, size_t max);
/* A write to RocksDB failed (msg: why) / every write since the failure worked: each logs one
 * line when the store's state changes. */
void store_wb_failed(ps_store *s, const char *what, const char *msg);
void store_wb_ok(ps_store *s);
/* Whether the data dir's file system has room for RocksDB to resume writes by itself
 * (its write buffer's worth free), so waiting for that is worth it. */
bool store_wb_space_back(const ps_store *s);

/* ------------------------------- ps_store_delta.c: incremental checkpoints */

/* Records that keys[0..n) (hashes: their key_hash) of table ti changed (partition pa locked; a
 * no-op unless tracking). */
void store_track_keys(ps_store *s, partition *pa, size_t ti, const uint64_t *keys,
                      const uint64_t *hashes, size_t n);
/* Forgets every tracked and pending key and the base (store write-locked): after a restore the
 * caller sets the base again. */
void store_track_reset(ps_store *s);
/* Composes the checkpoint in dir (full, or a delta and its chain) into dst, which must not
 * exist: the full base copied (SST files hard-linked when link is true and the file system
 * allows), then each delta applied in order. *head gets dir's id, step and depth (have false
 * for a snapshot without a manifest, from before them). */
ps_status store_chain_compose(const char *dir, const char *dst, bool link, store_ckpt_ref *head,
                              ps_error *err);
/* A checkpoint's manifest (ps_store_manifest.c; docs/CHECKPOINTS.md has the format). */
#define STORE_MANIFEST "EMBER-SNAPSHOT"
typedef struct store_manifest_table {
  ps_table_spec spec;
  uint64_t rows, tombstones; /* a delta's puts and deletes in t<id>.sst (none: no file) */
  uint64_t bytes, sum;       /* that file's size and XXH3-64 */
} store_manifest_table;
typedef struct store_manifest {
  bool delta;
  uint64_t step, id;
  uint32_t depth;
  uint64_t base_step, base_id;
  char base[4096]; /* delta: the base's path relative to the delta's parent directory */
  store_manifest_table *tables;
  size_t ntables;
} store_manifest;
ps_status store_manifest_write(const char *dir, const store_manifest *m, ps_error *err);
/* PS_ERR_NOT_FOUND when dir has none, PS_ERR_CORRUPT when it is damaged. */
ps_status store_manifest_read(const char *dir, store_manifest *m, ps_error *err);
void store_manifest_free(store_manifest *m);
/* XXH3-64 (seed 0) of a file's bytes, and its size. */
ps_status store_delta_file_sum(const char *path, uint64_t *sum, uint64_t *size);
/* Frees r's directory and clears it (ps_store_manifest.c). */
void store_ckpt_ref_clear(store_ckpt_ref *r);
/* Flush + RocksDB checkpoint into dir (store write-locked). */
ps_status store_snapshot_locked(ps_store *s, const char *dir, ps_error *err);

/* ---------------------------------------------- ps_store.c: open, write-back */

/* Opens the database in opt->path as it is (ps_store_open, in ps_store_chain.c, composes a
 * delta's chain first for a read-only open, and then opens the composed copy with this). */
ps_status store_open_dir(const ps_store_options *opt, ps_store **out, ps_error *err);

/* Writes every dirty hot row to RocksDB (store write-locked); err must not be NULL. A row's
 * dirty bit is cleared only once its write succeeded, so a failure loses nothing. */
ps_status store_write_dirty(ps_store *s, ps_error *err);
/* RocksDB's estimate of table t's rows (what it holds; 0 if it cannot tell). */
uint64_t store_cold_rows(ps_store *s, size_t t);
/* write_dirty + flush of every memtable (store write-locked); err must not be NULL. */
ps_status store_flush_locked(ps_store *s, ps_error *err);

#endif

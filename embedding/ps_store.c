/* ps_store: hot DRAM tier + RocksDB cold tier for embedding rows (see ps_store.h).
 *
 * Key design decisions (measured in bench/RESULTS-embedding.md):
 * - Share-nothing partitions. A key belongs to partition (h * P) >> 64 with
 *   h = ps_hash_u64(key, PS_HASH_SEED_PARTITION); each partition has its own mutex, its own
 *   open-addressing index per table, its own CLOCK hand, its own count-min sketches and its
 *   share cache_bytes / P of the budget. A batch call splits its keys by partition (counting
 *   sort) and handles one partition at a time, so threads that own disjoint partitions never
 *   touch the same lock or cache line. A store-wide rwlock is taken shared by data calls and
 *   exclusively by declare/flush/snapshot/restore/expire (maintenance at step boundaries).
 * - Index: linear probing over 16-byte entries {key, row pointer | REF | DIRTY}, load <= 0.7,
 *   backward-shift deletion (no tombstones, eviction churn does not degrade probes). The CLOCK
 *   reference bit and the dirty bit live in the low bits of the pointer so the CLOCK sweep reads
 *   only the index, never the rows. The slot is h & mask (low bits of the same hash whose high
 *   bits choose the partition).
 * - Rows: one jemalloc allocation per row (size class from nallocx, counted in the budget), so
 *   tables of different row sizes share one partition budget and evicting a row of table A
 *   makes room for table B. CLOCK over all tables of a partition: approximates LRU at O(1)
 *   per hit (one bit, set only if clear) — no list to relink on the pull path, unlike LRU;
 *   LFU would need counters and aging for little gain on Zipf keys.
 * - Pull pipeline: hash+split, probe with software prefetch of index slots, then copy with
 *   prefetch of rows, so the two dependent cache misses per key overlap across keys.
 * - Cold tier: RocksDB, column family "t<id>" per table, "default" holds specs. Keys are 8-byte
 *   big-endian; values are an 8-byte header {'E', version 1, optimizer, 0, dim u32 LE} + row.
 *   A value of another length or header gives PS_ERR_CORRUPT and a log line.
 *   Dirty rows evicted during a call go into the partition's WriteBatch, written before the
 *   partition lock is released (so no reader can miss a row in flight).
 * - Floats and metadata are stored in host (little-endian) byte order. */
#include "ps_store.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rocksdb/c.h>

#include "ps_hash.h"
#include "ps_log.h"
#include "ps_rowcopy.h"

#if defined(__SANITIZE_ADDRESS__)
#define PS_STORE_PLAIN_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PS_STORE_PLAIN_MALLOC 1
#endif
#endif

#ifdef PS_STORE_PLAIN_MALLOC
/* Under ASan rows come from the sanitizer's malloc so overflows are caught. */
static void *row_alloc(size_t n) { return malloc(n); }
static void row_free(void *p, size_t n) { (void)n; free(p); }
static size_t row_class(size_t n) { return (n + 15) & ~(size_t)15; }
#else
#include <jemalloc/jemalloc.h>
static void *row_alloc(size_t n) { return mallocx(n, 0); }
static void row_free(void *p, size_t n) { sdallocx(p, n, 0); }
static size_t row_class(size_t n) { return nallocx(n, 0); }
#endif

#define REC_HDR 8        /* stored value header */
#define ROW_META 16      /* u64 last_step, u32 adam step, u32 reserved */
#define REC_MAGIC 0x45   /* 'E' */
#define REC_VERSION 1
#define SPEC_VERSION 1
#define F_REF ((uintptr_t)1)
#define F_DIRTY ((uintptr_t)2)
#define F_MASK ((uintptr_t)3)
#define CMS_DEPTH 4
#define MAX_TABLES PS_STORE_MAX_TABLES
#define PREFETCH_DIST 32

typedef struct row_meta {
  uint64_t last_step;
  uint32_t adam_t;
  uint32_t reserved;
} row_meta;

typedef struct hentry {
  uint64_t key;
  uintptr_t p; /* row pointer | F_REF | F_DIRTY; 0 = empty slot */
} hentry;

typedef struct ptable { /* one table inside one partition */
  hentry *slots;
  size_t cap, count; /* cap: power of two or 0 */
  uint16_t *cms;     /* CMS_DEPTH x cms_width saturating counters, or NULL */
  size_t cms_width;
} ptable;

typedef struct partition {
  pthread_mutex_t mu;
  ptable *tabs; /* indexed like store->tables */
  size_t used, budget;
  size_t hand_tab, hand_slot;
  rocksdb_writebatch_t *wb;
  uint64_t hits, misses, evictions, writebacks, admitted, pending, expired;
  uintptr_t *huge;   /* 2 MB regions of row memory already madvise(MADV_HUGEPAGE)d */
  size_t nhuge, huge_cap;
} __attribute__((aligned(64))) partition; /* own cache lines: no false sharing between partitions */

typedef struct table {
  ps_table_spec spec;
  size_t state_floats;
  size_t row_bytes;   /* meta + values + state */
  size_t alloc_bytes; /* jemalloc size class of row_bytes */
  rocksdb_column_family_handle_t *cf;
  char hdr[REC_HDR];
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
};

/* ---------------------------------------------------------------- helpers */

static inline uint64_t key_hash(uint64_t key) { return ps_hash_u64(key, PS_HASH_SEED_PARTITION); }
static inline uint32_t part_of_hash(uint64_t h, uint32_t n) {
  return (uint32_t)(((unsigned __int128)h * n) >> 64);
}
static inline void key_be(uint64_t key, char out[8]) {
  for (int i = 0; i < 8; i++) out[i] = (char)(key >> (56 - 8 * i));
}
static inline uint64_t be_key(const char *in) {
  uint64_t k = 0;
  for (int i = 0; i < 8; i++) k = (k << 8) | (uint8_t)in[i];
  return k;
}
static inline row_meta *row_m(void *row) { return (row_meta *)row; }
static inline float *row_vals(void *row) { return (float *)((char *)row + ROW_META); }
static inline void *ent_row(const hentry *e) { return (void *)(e->p & ~F_MASK); }

static size_t state_floats_of(const ps_table_spec *sp) {
  switch (sp->optimizer) {
    case PS_OPT_SGD: return 0;
    case PS_OPT_ADAGRAD: return sp->dim;
    case PS_OPT_ROWWISE_ADAGRAD: return 1;
    case PS_OPT_ADAM: return 2 * (size_t)sp->dim;
    case PS_OPT_FTRL: return 2 * (size_t)sp->dim;
  }
  return 0;
}

size_t ps_store_record_bytes(const ps_table_spec *spec) {
  return REC_HDR + ROW_META + 4 * ((size_t)spec->dim + state_floats_of(spec));
}

static ps_status rdb_err(const char *what, char *err) {
  PS_ERROR("rocksdb %s: %s", what, err ? err : "?");
  free(err);
  return PS_ERR_IO;
}

/* ------------------------------------------------------------ initializer */

/* Element j of a key's initial row uses the counter-based stream
 * r_j = ps_mix64(ps_hash_u64(key, seed) + j * golden): pure function of (seed, key, j), so the
 * value is the same on every shard, partition, thread and run. Normal uses Box-Muller on
 * consecutive pairs in double precision. */
void ps_store_init_row(const ps_table_spec *spec, uint64_t key, float *row) {
  const uint64_t base = ps_hash_u64(key, spec->seed);
  const uint64_t gamma = 0x9e3779b97f4a7c15ull;
  const uint32_t dim = spec->dim;
  switch (spec->init) {
    case PS_INIT_UNIFORM: {
      const double a = spec->init_a, w = (double)spec->init_b - (double)spec->init_a;
      for (uint32_t j = 0; j < dim; j++) {
        double u = (double)(ps_mix64(base + j * gamma) >> 11) * 0x1.0p-53;
        float v = (float)(a + w * u);
        if (v >= spec->init_b && w > 0) v = nextafterf(spec->init_b, spec->init_a);
        row[j] = v;
      }
      break;
    }
    case PS_INIT_NORMAL: {
      const double sd = spec->init_a;
      for (uint32_t j = 0; j < dim; j += 2) {
        uint64_t r1 = ps_mix64(base + j * gamma), r2 = ps_mix64(base + (j + 1) * gamma);
        double u1 = ((double)(r1 >> 11) + 1.0) * 0x1.0p-53; /* (0, 1] */
        double u2 = (double)(r2 >> 11) * 0x1.0p-53;
        double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
        row[j] = (float)(sd * rad * cos(th));
        if (j + 1 < dim) row[j + 1] = (float)(sd * rad * sin(th));
      }
      break;
    }
    default: memset(row, 0, sizeof(float) * dim); break;
  }
}

static void init_full_row(const table *t, uint64_t key, void *row, uint64_t step) {
  row_meta *m = row_m(row);
  m->last_step = step;
  m->adam_t = 0;
  m->reserved = 0;
  float *w = row_vals(row);
  ps_store_init_row(&t->spec, key, w);
  float *st = w + t->spec.dim;
  const uint32_t d = t->spec.dim;
  switch (t->spec.optimizer) {
    case PS_OPT_ADAGRAD:
      for (uint32_t j = 0; j < d; j++) st[j] = t->spec.initial_accumulator;
      break;
    case PS_OPT_ROWWISE_ADAGRAD: st[0] = t->spec.initial_accumulator; break;
    case PS_OPT_ADAM: memset(st, 0, sizeof(float) * 2 * d); break;
    case PS_OPT_FTRL: /* z = 0, n = initial accumulator */
      for (uint32_t j = 0; j < d; j++) st[j] = 0.0f;
      for (uint32_t j = 0; j < d; j++) st[d + j] = t->spec.initial_accumulator;
      break;
    default: break;
  }
}

/* -------------------------------------------------------------- optimizers */

/* Applies one (already summed) gradient to a row. SGD/Adagrad/Adam follow torch.optim's
 * float32 arithmetic operation by operation (Adam's bias corrections in double, as torch
 * computes them from Python floats); row-wise Adagrad and FTRL use double intermediates and
 * store float, the same as their numpy references in tests/embedding/. */
static void apply_grad(const table *t, void *row, const float *g, uint64_t step) {
  const ps_table_spec *sp = &t->spec;
  const uint32_t d = sp->dim;
  float *w = row_vals(row);
  float *st = w + d;
  row_m(row)->last_step = step;
  switch (sp->optimizer) {
    case PS_OPT_SGD: {
      const float nlr = -sp->lr;
      /* torch's add_(grad, alpha=-lr) is one fused multiply-add (bit-identical, checked). */
      for (uint32_t j = 0; j < d; j++) w[j] = fmaf(nlr, g[j], w[j]);
      break;
    }
    case PS_OPT_ADAGRAD: {
      const float nlr = -sp->lr, eps = sp->eps;
      for (uint32_t j = 0; j < d; j++) {
        st[j] = st[j] + g[j] * g[j];
        float den = sqrtf(st[j]) + eps;
        w[j] = w[j] + nlr * (g[j] / den);
      }
      break;
    }
    case PS_OPT_ROWWISE_ADAGRAD: {
      double s2 = 0;
      for (uint32_t j = 0; j < d; j++) s2 += (double)g[j] * g[j];
      st[0] = (float)((double)st[0] + s2 / d);
      const double den = sqrt((double)st[0]) + sp->eps;
      for (uint32_t j = 0; j < d; j++) w[j] = (float)((double)w[j] - (double)sp->lr * g[j] / den);
      break;
    }
    case PS_OPT_ADAM: {
      float *m = st, *v = st + d;
      uint32_t ts = ++row_m(row)->adam_t;
      const double b1 = sp->beta1, b2 = sp->beta2;
      const float w1 = (float)(1.0 - b1), w2 = (float)(1.0 - b2), fb2 = sp->beta2;
      const double bc1 = 1.0 - pow(b1, ts), bc2 = 1.0 - pow(b2, ts);
      const float nstep = (float)(-((double)sp->lr / bc1));
      const float bc2s = (float)sqrt(bc2), eps = sp->eps;
      for (uint32_t j = 0; j < d; j++) {
        m[j] = m[j] + w1 * (g[j] - m[j]); /* torch: exp_avg.lerp_(grad, 1 - beta1) */
        v[j] = v[j] * fb2 + w2 * (g[j] * g[j]);
        float den = sqrtf(v[j]) / bc2s + eps;
        w[j] = w[j] + nstep * (m[j] / den);
      }
      break;
    }
    case PS_OPT_FTRL: {
      /* McMahan et al. 2013, per coordinate, generalized to n^(-lr_power); alpha = lr,
       * beta = eps. */
      float *z = st, *n = st + d;
      const double alpha = sp->lr, beta = sp->eps, l1 = sp->l1, l2 = sp->l2;
      const double pw = -(double)sp->lr_power;
      const int use_sqrt = sp->lr_power == -0.5f;
      for (uint32_t j = 0; j < d; j++) {
        const double gj = g[j], nold = n[j], nnew = nold + gj * gj;
        const double pold = use_sqrt ? sqrt(nold) : pow(nold, pw);
        const double pnew = use_sqrt ? sqrt(nnew) : pow(nnew, pw);
        const double sigma = (pnew - pold) / alpha;
        const double zn = (double)z[j] + gj - sigma * (double)w[j];
        z[j] = (float)zn;
        n[j] = (float)nnew;
        if (fabs(zn) <= l1) {
          w[j] = 0.0f;
        } else {
          const double sgn = zn < 0 ? -1.0 : 1.0;
          w[j] = (float)(-(zn - sgn * l1) / ((beta + pnew) / alpha + l2));
        }
      }
      break;
    }
  }
}

/* ------------------------------------------------------------------- index */

static hentry *idx_find(const ptable *pt, uint64_t key, uint64_t h) {
  if (!pt->cap) return NULL;
  const size_t mask = pt->cap - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    hentry *e = &pt->slots[i];
    if (!e->p) return NULL;
    if (e->key == key) return e;
  }
}

/* Backward-shift deletion: keeps every probe chain intact without tombstones. */
static void idx_delete_at(ptable *pt, size_t i) {
  const size_t mask = pt->cap - 1;
  size_t j = i;
  for (;;) {
    j = (j + 1) & mask;
    hentry *e = &pt->slots[j];
    if (!e->p) break;
    size_t home = key_hash(e->key) & mask;
    /* e may move to i if its home is not in the cyclic range (i, j]. */
    int in_range = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
    if (!in_range) {
      pt->slots[i] = *e;
      i = j;
    }
  }
  pt->slots[i].p = 0;
  pt->slots[i].key = 0;
  pt->count--;
}

static void idx_insert_raw(hentry *slots, size_t cap, uint64_t key, uintptr_t p) {
  const size_t mask = cap - 1;
  size_t i = key_hash(key) & mask;
  while (slots[i].p) i = (i + 1) & mask;
  slots[i].key = key;
  slots[i].p = p;
}

/* Index arrays of 2 MB and more are 2 MB-aligned and madvise(MADV_HUGEPAGE)d: every probe is
 * a random access, and with 4 KB pages each one would also miss the TLB. */
static hentry *idx_alloc(size_t cap) {
  const size_t bytes = cap * sizeof(hentry), huge = (size_t)2 << 20;
  if (bytes < huge) return calloc(cap, sizeof(hentry));
  hentry *p = aligned_alloc(huge, bytes);
  if (!p) return NULL;
  (void)madvise(p, bytes, MADV_HUGEPAGE);
  memset(p, 0, bytes);
  return p;
}

static ps_status idx_grow(partition *pa, ptable *pt) {
  size_t ncap = pt->cap ? pt->cap * 2 : 64;
  hentry *ns = idx_alloc(ncap);
  if (!ns) return PS_ERR_NOMEM;
  for (size_t i = 0; i < pt->cap; i++)
    if (pt->slots[i].p) idx_insert_raw(ns, ncap, pt->slots[i].key, pt->slots[i].p);
  free(pt->slots);
  pa->used += (ncap - pt->cap) * sizeof(hentry);
  pt->slots = ns;
  pt->cap = ncap;
  return PS_OK;
}

/* ------------------------------------------------------------------ CLOCK */

static void put_row(ps_store *s, rocksdb_writebatch_t *wb, const table *t, uint64_t key,
                    const void *row) {
  char kb[8];
  key_be(key, kb);
  const char *kl[1] = {kb};
  size_t ks[1] = {8};
  const char *vl[2] = {t->hdr, (const char *)row};
  size_t vs[2] = {REC_HDR, t->row_bytes};
  (void)s;
  rocksdb_writebatch_putv_cf(wb, t->cf, 1, kl, ks, 2, vl, vs);
}

/* Evicts one row of the partition (any table); false if it holds none. */
static bool clock_evict_one(ps_store *s, partition *pa) {
  size_t total = 0;
  for (size_t t = 0; t < s->ntables; t++) total += pa->tabs[t].count;
  if (!total) return false;
  for (;;) {
    if (pa->hand_tab >= s->ntables) pa->hand_tab = 0;
    ptable *pt = &pa->tabs[pa->hand_tab];
    if (pa->hand_slot >= pt->cap || !pt->count) {
      pa->hand_tab++;
      pa->hand_slot = 0;
      continue;
    }
    hentry *e = &pt->slots[pa->hand_slot];
    if (!e->p) {
      pa->hand_slot++;
      continue;
    }
    if (e->p & F_REF) {
      e->p &= ~F_REF;
      pa->hand_slot++;
      continue;
    }
    const table *t = &s->tables[pa->hand_tab];
    void *row = ent_row(e);
    if (e->p & F_DIRTY) {
      put_row(s, pa->wb, t, e->key, row);
      pa->writebacks++;
    }
    row_free(row, t->row_bytes);
    pa->used -= t->alloc_bytes;
    idx_delete_at(pt, pa->hand_slot); /* the slot may now hold a shifted entry: re-examine */
    pa->evictions++;
    return true;
  }
}

/* Row memory comes from jemalloc in 4 KB pages; random row reads then miss the TLB on
 * nearly every access. Before a row is first touched, its 2 MB region is hinted
 * MADV_HUGEPAGE once (a handful of syscalls per GB), so the first touch faults in a huge
 * page where the kernel can. Measured: bench/RESULTS-embedding.md. */
static void hugepage_hint(partition *pa, const void *row) {
#ifndef PS_STORE_PLAIN_MALLOC
  const uintptr_t base = (uintptr_t)row & ~(((uintptr_t)2 << 20) - 1);
  for (size_t i = pa->nhuge; i-- > 0;)
    if (pa->huge[i] == base) return;
  if (pa->nhuge == pa->huge_cap) {
    if (pa->huge_cap >= 65536) return;
    size_t nc = pa->huge_cap ? 2 * pa->huge_cap : 16;
    uintptr_t *nh = realloc(pa->huge, nc * sizeof(uintptr_t));
    if (!nh) return;
    pa->huge = nh;
    pa->huge_cap = nc;
  }
  pa->huge[pa->nhuge++] = base;
  (void)madvise((void *)base, (size_t)2 << 20, MADV_HUGEPAGE);
#else
  (void)pa;
  (void)row;
#endif
}

/* Inserts a new row for key (not present) and returns its memory; evicts to stay in budget. */
static void *hot_insert(ps_store *s, partition *pa, size_t ti, uint64_t key, uint64_t h,
                        uintptr_t flags) {
  const table *t = &s->tables[ti];
  ptable *pt = &pa->tabs[ti];
  if ((pt->count + 1) * 10 > pt->cap * 7 && idx_grow(pa, pt) != PS_OK) return NULL;
  while (pa->used + t->alloc_bytes > pa->budget)
    if (!clock_evict_one(s, pa)) break; /* budget smaller than one row: overshoot by one */
  void *row = row_alloc(t->row_bytes);
  if (!row) return NULL;
  pa->used += t->alloc_bytes;
  hugepage_hint(pa, row);
  const size_t mask = pt->cap - 1;
  size_t i = h & mask;
  while (pt->slots[i].p) i = (i + 1) & mask;
  pt->slots[i].key = key;
  pt->slots[i].p = (uintptr_t)row | flags;
  pt->count++;
  return row;
}

/* ------------------------------------------------------------- cold tier */

static ps_status decode_rec(const table *t, uint64_t key, const char *v, size_t len, void *row) {
  const size_t want = REC_HDR + t->row_bytes;
  if (len != want || memcmp(v, t->hdr, REC_HDR) != 0) {
    PS_ERROR("table %u key %llu: stored row is corrupt (%zu bytes, expected %zu, header %s)",
             t->spec.id, (unsigned long long)key, len, want,
             len >= REC_HDR && memcmp(v, t->hdr, REC_HDR) == 0 ? "ok" : "bad");
    return PS_ERR_CORRUPT;
  }
  memcpy(row, v + REC_HDR, t->row_bytes);
  return PS_OK;
}

/* Brings key's row (absent from the hot tier) in from its cold-tier record v. Returns the row,
 * or NULL with *st set: PS_ERR_NOMEM, or PS_ERR_CORRUPT when the record does not decode (the
 * row just inserted is taken out again, so the hot tier is as it was). */
static void *hot_load(ps_store *s, partition *pa, size_t ti, uint64_t key, uint64_t h,
                      uintptr_t flags, const char *v, size_t len, ps_status *st) {
  void *row = hot_insert(s, pa, ti, key, h, flags);
  if (!row) {
    *st = PS_ERR_NOMEM;
    return NULL;
  }
  const table *t = &s->tables[ti];
  ps_status ds = decode_rec(t, key, v, len, row);
  if (ds == PS_OK) return row;
  ptable *pt = &pa->tabs[ti];
  hentry *e = idx_find(pt, key, h);
  row_free(row, t->row_bytes);
  pa->used -= t->alloc_bytes;
  idx_delete_at(pt, (size_t)(e - pt->slots));
  *st = ds;
  return NULL;
}

/* MultiGet for n keys of one table. vals[i] is NULL when absent; the caller destroys them. */
static ps_status cold_multiget(ps_store *s, const table *t, const uint64_t *keys, size_t n,
                               rocksdb_pinnableslice_t **vals) {
  char *kbuf = malloc(n * 8 + 1);
  const char **kl = calloc(n + 1, sizeof(char *));
  size_t *ks = calloc(n + 1, sizeof(size_t));
  char **errs = calloc(n + 1, sizeof(char *));
  ps_status st = PS_OK;
  if (!kbuf || !kl || !ks || !errs) {
    st = PS_ERR_NOMEM;
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    key_be(keys[i], kbuf + 8 * i);
    kl[i] = kbuf + 8 * i;
    ks[i] = 8;
    vals[i] = NULL;
  }
  rocksdb_batched_multi_get_cf(s->db, s->ro, t->cf, n, kl, ks, vals, errs, false);
  for (size_t i = 0; i < n; i++) {
    if (errs[i]) {
      if (st == PS_OK) st = rdb_err("multiget", errs[i]);
      else free(errs[i]);
    }
  }
out:
  free(kbuf);
  free(kl);
  free(ks);
  free(errs);
  return st;
}

static ps_status flush_wb(ps_store *s, partition *pa) {
  if (rocksdb_writebatch_count(pa->wb) == 0) return PS_OK;
  char *err = NULL;
  rocksdb_write(s->db, s->wo, pa->wb, &err);
  rocksdb_writebatch_clear(pa->wb);
  return err ? rdb_err("write", err) : PS_OK;
}

/* ----------------------------------------------------------- admission */

static uint32_t cms_bump(ptable *pt, uint64_t h) {
  /* Conservative update: raise only the minimal counters; estimate = min. */
  size_t idx[CMS_DEPTH];
  uint32_t mn = UINT32_MAX;
  for (int d = 0; d < CMS_DEPTH; d++) {
    idx[d] = d * pt->cms_width + (ps_mix64(h + (uint64_t)d * 0x632be59bd9b4e019ull) & (pt->cms_width - 1));
    if (pt->cms[idx[d]] < mn) mn = pt->cms[idx[d]];
  }
  uint32_t nv = mn < UINT16_MAX ? mn + 1 : UINT16_MAX;
  for (int d = 0; d < CMS_DEPTH; d++)
    if (pt->cms[idx[d]] < nv) pt->cms[idx[d]] = (uint16_t)nv;
  return nv;
}

/* ---------------------------------------------------------- partitioning */

struct ps_store_batch {
  const uint64_t *keys;
  size_t n;
  uint32_t nparts;
  uint32_t *order; /* key indices grouped by partition */
  uint64_t *hash;  /* hash of keys[order[i]] */
  size_t *start;   /* nparts + 1 offsets */
};

ps_status ps_store_batch_create(const ps_store *s, const uint64_t *keys, size_t n,
                                ps_store_batch **out) {
  if (!s || !out || (n && !keys)) return PS_ERR_INVALID;
  *out = NULL;
  const uint32_t P = s->nparts;
  ps_store_batch *b = calloc(1, sizeof *b);
  if (!b) return PS_ERR_NOMEM;
  b->keys = keys;
  b->n = n;
  b->nparts = P;
  /* One allocation for the three arrays and the scratch (hashes in input order + cursors):
   * a batch is made per request, so its cost is per request too. */
  size_t hoff = n * sizeof(uint32_t);
  hoff = (hoff + 7) & ~(size_t)7;
  size_t soff = hoff + n * sizeof(uint64_t), h0off = soff + (P + 1) * sizeof(size_t);
  size_t poff = h0off + n * sizeof(uint64_t), total = poff + (P + 1) * sizeof(size_t);
  char *mem = malloc(total);
  if (!mem) {
    free(b);
    return PS_ERR_NOMEM;
  }
  b->order = (uint32_t *)mem;
  b->hash = (uint64_t *)(mem + hoff);
  b->start = (size_t *)(mem + soff);
  uint64_t *h0 = (uint64_t *)(mem + h0off);
  size_t *pos = (size_t *)(mem + poff);
  memset(b->start, 0, (P + 1) * sizeof(size_t));
  if (P == 1) { /* one partition (a server without partition threads): nothing to group */
    for (size_t i = 0; i < n; i++) {
      b->order[i] = (uint32_t)i;
      b->hash[i] = key_hash(keys[i]);
    }
    b->start[1] = n;
    *out = b;
    return PS_OK;
  }
  for (size_t i = 0; i < n; i++) {
    h0[i] = key_hash(keys[i]);
    b->start[part_of_hash(h0[i], P) + 1]++;
  }
  for (uint32_t p = 0; p < P; p++) b->start[p + 1] += b->start[p];
  memcpy(pos, b->start, (P + 1) * sizeof(size_t));
  for (size_t i = 0; i < n; i++) {
    size_t k = pos[part_of_hash(h0[i], P)]++;
    b->order[k] = (uint32_t)i;
    b->hash[k] = h0[i];
  }
  *out = b;
  return PS_OK;
}

void ps_store_batch_destroy(ps_store_batch **bp) {
  if (!bp || !*bp) return;
  free((*bp)->order); /* the head of the one allocation */
  free(*bp);
  *bp = NULL;
}

size_t ps_store_batch_part(const ps_store_batch *b, uint32_t part, const uint32_t **pos) {
  if (!b || part >= b->nparts) {
    if (pos) *pos = NULL;
    return 0;
  }
  if (pos) *pos = b->order + b->start[part];
  return b->start[part + 1] - b->start[part];
}

static table *find_table(ps_store *s, uint32_t id, size_t *ti) {
  if (id == 0 || id > 65535) return NULL;
  uint16_t m = s->idmap[id];
  if (!m) return NULL;
  *ti = m - 1u;
  return &s->tables[m - 1];
}

/* ---------------------------------------------------------------- pull */

static ps_status pull_part(ps_store *s, partition *pa, size_t ti, const uint64_t *keys,
                           const uint32_t *ord, const uint64_t *hs, size_t n, float *out,
                           hentry **ents) {
  const table *t = &s->tables[ti];
  ptable *pt = &pa->tabs[ti];
  const uint32_t dim = t->spec.dim;
  const size_t vb = sizeof(float) * dim;
  size_t nmiss = 0;
  ps_status st = PS_OK;
  /* Hits in one software pipeline: the index slot of key i + 2D is prefetched, key i + D is
   * probed (its slot arrived meanwhile) and its row prefetched, key i's row is copied. Each
   * key's two dependent cache misses overlap with other keys' as in a plain gather, and a
   * prefetched line is used about D keys later, before it can leave L1. Misses are recorded
   * and served after the loop (inserting could evict rows already probed). */
  if (pt->cap) {
    const size_t mask = pt->cap - 1, D = PREFETCH_DIST;
    for (size_t i = 0; i < n && i < 2 * D; i++) __builtin_prefetch(&pt->slots[hs[i] & mask]);
    for (size_t i = 0; i < n + D; i++) {
      if (i + 2 * D < n) __builtin_prefetch(&pt->slots[hs[i + 2 * D] & mask]);
      if (i < n) {
        hentry *e = idx_find(pt, keys[ord[i]], hs[i]);
        ents[i] = e;
        if (e) {
          const char *r = (const char *)ent_row(e) + ROW_META;
          __builtin_prefetch(r);
          __builtin_prefetch(r + vb - 1); /* values may straddle two lines */
        } else {
          nmiss++;
        }
      }
      if (i >= D) {
        hentry *e = ents[i - D];
        if (!e) continue;
        if (!(e->p & F_REF)) e->p |= F_REF;
        ps_row_copy(out + (size_t)ord[i - D] * dim, row_vals(ent_row(e)), vb);
      }
    }
  } else {
    for (size_t i = 0; i < n; i++) ents[i] = NULL;
    nmiss = n;
  }
  pa->hits += n - nmiss;
  pa->misses += nmiss;
  if (!nmiss) return PS_OK;
  /* Stage 3: misses go to RocksDB in one MultiGet; found rows enter the hot tier clean. */
  uint64_t *mk = malloc(nmiss * sizeof(uint64_t));
  size_t *mi = malloc(nmiss * sizeof(size_t));
  rocksdb_pinnableslice_t **vals = malloc(nmiss * sizeof(*vals));
  if (!mk || !mi || !vals) {
    st = PS_ERR_NOMEM;
    goto out;
  }
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (!ents[i]) {
      mk[m] = keys[ord[i]];
      mi[m++] = i;
    }
  st = cold_multiget(s, t, mk, m, vals);
  if (st != PS_OK) {
    for (size_t j = 0; j < m; j++)
      if (vals[j]) rocksdb_pinnableslice_destroy(vals[j]);
    goto out;
  }
  for (size_t j = 0; j < m; j++) {
    size_t i = mi[j];
    float *dst = out + (size_t)ord[i] * dim;
    if (!vals[j]) {
      ps_store_init_row(&t->spec, mk[j], dst);
      continue;
    }
    size_t len;
    const char *v = rocksdb_pinnableslice_value(vals[j], &len);
    hentry *e = idx_find(pt, mk[j], hs[i]); /* a duplicate key inserted just before */
    if (e) {
      memcpy(dst, row_vals(ent_row(e)), vb);
    } else {
      ps_status ls = PS_OK;
      void *row = hot_load(s, pa, ti, mk[j], hs[i], F_REF, v, len, &ls);
      if (row) {
        memcpy(dst, row_vals(row), vb);
      } else {
        if (ls == PS_ERR_CORRUPT) memset(dst, 0, vb);
        st = ls;
      }
    }
    rocksdb_pinnableslice_destroy(vals[j]);
  }
out:
  free(mk);
  free(mi);
  free(vals);
  ps_status ws = flush_wb(s, pa);
  return st != PS_OK ? st : ws;
}

ps_status ps_store_pull_batch(ps_store *s, uint32_t table_id, const ps_store_batch *b,
                              uint32_t first, uint32_t stride, float *out) {
  if (!s || !b || stride == 0 || (b->n && !out) || b->nparts != s->nparts) return PS_ERR_INVALID;
  pthread_rwlock_rdlock(&s->lock);
  size_t ti;
  ps_status st = PS_OK;
  if (!find_table(s, table_id, &ti)) {
    st = PS_ERR_UNKNOWN_TABLE;
    goto done;
  }
  if (!b->n) goto done;
  hentry **ents = malloc(b->n * sizeof(hentry *));
  if (!ents) st = PS_ERR_NOMEM;
  for (uint32_t p = first; st == PS_OK && p < s->nparts; p += stride) {
    size_t lo = b->start[p], hi = b->start[p + 1];
    if (lo == hi) continue;
    partition *pa = &s->parts[p];
    pthread_mutex_lock(&pa->mu);
    st = pull_part(s, pa, ti, b->keys, b->order + lo, b->hash + lo, hi - lo, out, ents);
    pthread_mutex_unlock(&pa->mu);
  }
  free(ents);
done:
  pthread_rwlock_unlock(&s->lock);
  return st;
}

/* ---------------------------------------------------------------- push */

/* Deduplicates a partition's keys (first-appearance order), summing gradients in float in
 * that order. uk/uh/ug get the unique keys, hashes and summed gradients. */
static size_t dedup(const uint64_t *keys, const uint32_t *ord, const uint64_t *hs, size_t n,
                    const float *grads, uint32_t dim, uint64_t *uk, uint64_t *uh, float *ug,
                    uint32_t *tab, size_t tcap) {
  const size_t mask = tcap - 1;
  memset(tab, 0xff, tcap * sizeof(uint32_t));
  size_t u = 0;
  for (size_t i = 0; i < n; i++) {
    const uint64_t k = keys[ord[i]];
    const float *g = grads + (size_t)ord[i] * dim;
    size_t j = ps_mix64(hs[i]) & mask;
    for (;;) {
      uint32_t x = tab[j];
      if (x == UINT32_MAX) {
        tab[j] = (uint32_t)u;
        uk[u] = k;
        uh[u] = hs[i];
        memcpy(ug + u * dim, g, sizeof(float) * dim);
        u++;
        break;
      }
      if (uk[x] == k) {
        float *a = ug + (size_t)x * dim;
        for (uint32_t d = 0; d < dim; d++) a[d] += g[d];
        break;
      }
      j = (j + 1) & mask;
    }
  }
  return u;
}

static ps_status push_part(ps_store *s, partition *pa, size_t ti, const uint64_t *uk,
                           const uint64_t *uh, const float *ug, size_t u, size_t *miss_i,
                           hentry **ents) {
  const table *t = &s->tables[ti];
  ptable *pt = &pa->tabs[ti];
  const uint32_t dim = t->spec.dim;
  const uint64_t step = atomic_load_explicit(&s->step, memory_order_relaxed);
  size_t nmiss = 0;
  ps_status st = PS_OK;
  /* Hits in the software pipeline of pull_part (slot prefetch 2D keys ahead, probe and row
   * prefetch D ahead, update): a push is a read-modify-write of the whole row (values, optimizer
   * state, metadata), so every line of it is prefetched for writing. */
  for (size_t i = 0; i < u; i++) ents[i] = NULL;
  if (pt->cap) {
    const size_t mask = pt->cap - 1, D = PREFETCH_DIST, rb = t->row_bytes;
    for (size_t i = 0; i < u && i < 2 * D; i++) __builtin_prefetch(&pt->slots[uh[i] & mask]);
    for (size_t i = 0; i < u + D; i++) {
      if (i + 2 * D < u) __builtin_prefetch(&pt->slots[uh[i + 2 * D] & mask]);
      if (i < u && (ents[i] = idx_find(pt, uk[i], uh[i]))) {
        const char *r = ent_row(ents[i]);
        for (size_t off = 0; off < rb; off += 64) __builtin_prefetch(r + off, 1);
        __builtin_prefetch(r + rb - 1, 1);
      }
      if (i >= D) {
        const size_t j = i - D;
        hentry *e = ents[j];
        if (!e) {
          miss_i[nmiss++] = j;
          continue;
        }
        e->p |= F_REF | F_DIRTY;
        apply_grad(t, ent_row(e), ug + j * dim, step);
      }
    }
  } else {
    for (size_t i = 0; i < u; i++) miss_i[nmiss++] = i;
  }
  pa->hits += u - nmiss;
  pa->misses += nmiss;
  if (!nmiss) return PS_OK;
  uint64_t *mk = malloc(nmiss * sizeof(uint64_t));
  rocksdb_pinnableslice_t **vals = malloc(nmiss * sizeof(*vals));
  if (!mk || !vals) {
    st = PS_ERR_NOMEM;
    goto out;
  }
  for (size_t j = 0; j < nmiss; j++) mk[j] = uk[miss_i[j]];
  st = cold_multiget(s, t, mk, nmiss, vals);
  for (size_t j = 0; j < nmiss; j++) {
    if (st != PS_OK) {
      if (vals[j]) rocksdb_pinnableslice_destroy(vals[j]);
      continue;
    }
    const size_t i = miss_i[j];
    if (!vals[j]) {
      /* Not stored anywhere: feature admission decides whether it gets a row. */
      if (t->spec.admit_threshold > 1 && pt->cms &&
          cms_bump(pt, uh[i]) < t->spec.admit_threshold) {
        pa->pending++;
        continue;
      }
      void *row = hot_insert(s, pa, ti, uk[i], uh[i], F_REF | F_DIRTY);
      if (!row) {
        st = PS_ERR_NOMEM;
        continue;
      }
      init_full_row(t, uk[i], row, step);
      apply_grad(t, row, ug + i * dim, step);
      pa->admitted++;
      continue;
    }
    size_t len;
    const char *v = rocksdb_pinnableslice_value(vals[j], &len);
    void *row = hot_load(s, pa, ti, uk[i], uh[i], F_REF | F_DIRTY, v, len, &st);
    if (row) apply_grad(t, row, ug + i * dim, step);
    rocksdb_pinnableslice_destroy(vals[j]);
  }
out:
  free(mk);
  free(vals);
  ps_status ws = flush_wb(s, pa);
  return st != PS_OK ? st : ws;
}

ps_status ps_store_push_batch(ps_store *s, uint32_t table_id, const ps_store_batch *b,
                              uint32_t first, uint32_t stride, const float *grads) {
  if (!s || !b || stride == 0 || (b->n && !grads) || b->nparts != s->nparts) return PS_ERR_INVALID;
  pthread_rwlock_rdlock(&s->lock);
  size_t ti;
  ps_status st = PS_OK;
  table *t = find_table(s, table_id, &ti);
  if (!t) {
    st = PS_ERR_UNKNOWN_TABLE;
    goto done;
  }
  /* Scratch sized for the largest partition served here, not for the whole batch. */
  size_t n = 0;
  for (uint32_t p = first; p < s->nparts; p += stride)
    if (b->start[p + 1] - b->start[p] > n) n = b->start[p + 1] - b->start[p];
  if (!n) goto done;
  const uint32_t dim = t->spec.dim;
  size_t tcap = 16;
  while (tcap < 2 * n) tcap <<= 1;
  uint64_t *uk = malloc(n * sizeof(uint64_t));
  uint64_t *uh = malloc(n * sizeof(uint64_t));
  float *ug = malloc(n * dim * sizeof(float));
  uint32_t *tab = malloc(tcap * sizeof(uint32_t));
  size_t *mi = malloc(n * sizeof(size_t));
  hentry **ents = malloc(n * sizeof(hentry *));
  if (!uk || !uh || !ug || !tab || !mi || !ents) st = PS_ERR_NOMEM;
  for (uint32_t p = first; st == PS_OK && p < s->nparts; p += stride) {
    size_t lo = b->start[p], hi = b->start[p + 1];
    if (lo == hi) continue;
    size_t u = dedup(b->keys, b->order + lo, b->hash + lo, hi - lo, grads, dim, uk, uh, ug, tab,
                     tcap);
    partition *pa = &s->parts[p];
    pthread_mutex_lock(&pa->mu);
    st = push_part(s, pa, ti, uk, uh, ug, u, mi, ents);
    pthread_mutex_unlock(&pa->mu);
  }
  free(ents);
  free(uk);
  free(uh);
  free(ug);
  free(tab);
  free(mi);
done:
  pthread_rwlock_unlock(&s->lock);
  return st;
}

/* The whole-batch calls: one batch over every partition (out for a pull, grads for a push). */
static ps_status whole(ps_store *s, uint32_t table_id, const uint64_t *keys, size_t n, float *out,
                       const float *grads) {
  if (!s || (n && (!keys || (!out && !grads)))) return PS_ERR_INVALID;
  ps_store_batch *b;
  ps_status st = ps_store_batch_create(s, keys, n, &b);
  if (st != PS_OK) return st;
  st = out ? ps_store_pull_batch(s, table_id, b, 0, 1, out)
           : ps_store_push_batch(s, table_id, b, 0, 1, grads);
  ps_store_batch_destroy(&b);
  return st;
}

ps_status ps_store_pull(ps_store *s, uint32_t table_id, const uint64_t *keys, size_t n,
                        float *out) {
  return whole(s, table_id, keys, n, out, NULL);
}

ps_status ps_store_push(ps_store *s, uint32_t table_id, const uint64_t *keys, size_t n,
                        const float *grads) {
  return whole(s, table_id, keys, n, NULL, grads);
}

void ps_store_set_step(ps_store *s, uint64_t step) {
  if (s) atomic_store_explicit(&s->step, step, memory_order_relaxed);
}

/* ------------------------------------------------------------ specs */

#define SPEC_BYTES 160

static size_t spec_encode(const ps_table_spec *sp, char *b) {
  memset(b, 0, SPEC_BYTES);
  size_t o = 0;
#define PUT(x) (memcpy(b + o, &(x), sizeof(x)), o += sizeof(x))
  uint32_t ver = SPEC_VERSION, opt = (uint32_t)sp->optimizer, init = (uint32_t)sp->init;
  PUT(ver);
  PUT(sp->id);
  memcpy(b + o, sp->name, strnlen(sp->name, sizeof(sp->name)));
  o += sizeof(sp->name);
  PUT(sp->dim);
  PUT(opt);
  PUT(sp->lr);
  PUT(sp->beta1);
  PUT(sp->beta2);
  PUT(sp->eps);
  PUT(sp->l1);
  PUT(sp->l2);
  PUT(sp->lr_power);
  PUT(sp->initial_accumulator);
  PUT(init);
  PUT(sp->init_a);
  PUT(sp->init_b);
  PUT(sp->seed);
  PUT(sp->admit_threshold);
  PUT(sp->ttl_steps);
#undef PUT
  return o;
}

static ps_status spec_decode(const char *b, size_t len, ps_table_spec *sp) {
  ps_table_spec tmp;
  char chk[SPEC_BYTES];
  memset(&tmp, 0, sizeof(tmp));
  size_t need = spec_encode(&tmp, chk);
  if (len != need) return PS_ERR_CORRUPT;
  size_t o = 0;
#define GET(x) (memcpy(&(x), b + o, sizeof(x)), o += sizeof(x))
  uint32_t ver, opt, init;
  GET(ver);
  if (ver != SPEC_VERSION) return PS_ERR_CORRUPT;
  GET(tmp.id);
  memcpy(tmp.name, b + o, sizeof(tmp.name));
  tmp.name[sizeof(tmp.name) - 1] = 0;
  o += sizeof(tmp.name);
  GET(tmp.dim);
  GET(opt);
  GET(tmp.lr);
  GET(tmp.beta1);
  GET(tmp.beta2);
  GET(tmp.eps);
  GET(tmp.l1);
  GET(tmp.l2);
  GET(tmp.lr_power);
  GET(tmp.initial_accumulator);
  GET(init);
  GET(tmp.init_a);
  GET(tmp.init_b);
  GET(tmp.seed);
  GET(tmp.admit_threshold);
  GET(tmp.ttl_steps);
#undef GET
  tmp.optimizer = (ps_optimizer)opt;
  tmp.init = (ps_init)init;
  *sp = tmp;
  return PS_OK;
}

/* The store checks the row fields only: the stepping fields are the server's (ps_table.h). */
static ps_status spec_validate(const ps_table_spec *sp) {
  ps_table_spec rows = *sp;
  rows.consistency = PS_CONS_ASYNC;
  rows.staleness = 0;
  rows.num_workers = 1;
  return ps_table_spec_validate(&rows, NULL);
}

static void spec_key(uint32_t id, char k[16]) { snprintf(k, 16, "spec/%05u", id); }

/* Adds a table to the in-memory arrays (store write-locked or opening). */
static ps_status add_table(ps_store *s, const ps_table_spec *sp, rocksdb_column_family_handle_t *cf) {
  if (s->ntables >= MAX_TABLES) return PS_ERR_NOMEM;
  table *nt = realloc(s->tables, (s->ntables + 1) * sizeof(table));
  if (!nt) return PS_ERR_NOMEM;
  s->tables = nt;
  for (uint32_t p = 0; p < s->nparts; p++) {
    ptable *np = realloc(s->parts[p].tabs, (s->ntables + 1) * sizeof(ptable));
    if (!np) return PS_ERR_NOMEM;
    s->parts[p].tabs = np;
    memset(&np[s->ntables], 0, sizeof(ptable));
    if (sp->admit_threshold > 1) {
      /* 2^18 counters per table in all, split over partitions (>= 1024 each): 2 MB/table. */
      size_t w = 1024;
      while (w * s->nparts < (1u << 18)) w <<= 1;
      np[s->ntables].cms = calloc(CMS_DEPTH * w, sizeof(uint16_t));
      if (!np[s->ntables].cms) return PS_ERR_NOMEM;
      np[s->ntables].cms_width = w;
    }
  }
  table *t = &s->tables[s->ntables];
  memset(t, 0, sizeof(*t));
  t->spec = *sp;
  t->state_floats = state_floats_of(sp);
  t->row_bytes = ROW_META + 4 * ((size_t)sp->dim + t->state_floats);
  t->alloc_bytes = row_class(t->row_bytes);
  t->cf = cf;
  t->hdr[0] = REC_MAGIC;
  t->hdr[1] = REC_VERSION;
  t->hdr[2] = (char)sp->optimizer;
  t->hdr[3] = 0;
  memcpy(t->hdr + 4, &sp->dim, 4);
  s->ntables++;
  s->idmap[sp->id] = (uint16_t)s->ntables;
  return PS_OK;
}

ps_status ps_store_declare(ps_store *s, const ps_table_spec *spec) {
  if (!s || !spec) return PS_ERR_INVALID;
  ps_status st = spec_validate(spec);
  if (st != PS_OK) return st;
  char enc[SPEC_BYTES], enc2[SPEC_BYTES];
  size_t elen = spec_encode(spec, enc);
  pthread_rwlock_wrlock(&s->lock);
  size_t ti;
  table *t = find_table(s, spec->id, &ti);
  if (t) {
    spec_encode(&t->spec, enc2);
    st = memcmp(enc, enc2, elen) == 0 ? PS_OK : PS_ERR_CONFLICT;
    if (st) PS_WARN("table %u (%s): declared again with a different spec", spec->id, spec->name);
    goto done;
  }
  for (size_t i = 0; i < s->ntables; i++)
    if (strncmp(s->tables[i].spec.name, spec->name, sizeof(spec->name)) == 0) {
      PS_WARN("table name %s already used by table %u", spec->name, s->tables[i].spec.id);
      st = PS_ERR_CONFLICT;
      goto done;
    }
  char cfname[16];
  snprintf(cfname, sizeof(cfname), "t%u", spec->id);
  rocksdb_column_family_handle_t *cf = NULL;
  for (size_t i = 0; i < s->norphan; i++)
    if (s->orphan[i] && strcmp(s->orphan_names[i], cfname) == 0) {
      /* A family left without its spec (crash between create and spec write): its rows
       * cannot be trusted to match this spec, so start it empty. */
      char *err = NULL;
      rocksdb_drop_column_family(s->db, s->orphan[i], &err);
      if (err) {
        st = rdb_err("drop orphan column family", err);
        goto done;
      }
      rocksdb_column_family_handle_destroy(s->orphan[i]);
      s->orphan[i] = NULL;
    }
  char *err = NULL;
  cf = rocksdb_create_column_family(s->db, s->dbopt, cfname, &err);
  if (err) {
    st = rdb_err("create column family", err);
    goto done;
  }
  char k[16];
  spec_key(spec->id, k);
  rocksdb_put_cf(s->db, s->wo_sync, s->meta_cf, k, strlen(k), enc, elen, &err);
  if (err) {
    st = rdb_err("put spec", err);
    rocksdb_column_family_handle_destroy(cf);
    goto done;
  }
  st = add_table(s, spec, cf);
  if (st == PS_OK) PS_INFO("declared table %u (%s): dim %u, optimizer %d", spec->id, spec->name, spec->dim, spec->optimizer);
done:
  pthread_rwlock_unlock(&s->lock);
  return st;
}

ps_status ps_store_get_spec(ps_store *s, uint32_t table_id, ps_table_spec *out) {
  if (!s || !out) return PS_ERR_INVALID;
  pthread_rwlock_rdlock(&s->lock);
  size_t ti;
  table *t = find_table(s, table_id, &ti);
  if (t) *out = t->spec;
  pthread_rwlock_unlock(&s->lock);
  return t ? PS_OK : PS_ERR_UNKNOWN_TABLE;
}

size_t ps_store_tables(ps_store *s, uint32_t *ids, size_t max) {
  if (!s) return 0;
  pthread_rwlock_rdlock(&s->lock);
  size_t n = s->ntables;
  for (size_t i = 0; i < n && i < max && ids; i++) ids[i] = s->tables[i].spec.id;
  pthread_rwlock_unlock(&s->lock);
  return n;
}

/* --------------------------------------------------------- open / close */

static void db_close(ps_store *s) {
  for (size_t i = 0; i < s->ntables; i++) {
    if (s->tables[i].cf) rocksdb_column_family_handle_destroy(s->tables[i].cf);
    s->tables[i].cf = NULL;
  }
  for (size_t i = 0; i < s->norphan; i++) {
    if (s->orphan[i]) rocksdb_column_family_handle_destroy(s->orphan[i]);
    free(s->orphan_names[i]);
  }
  free(s->orphan);
  free(s->orphan_names);
  s->orphan = NULL;
  s->orphan_names = NULL;
  s->norphan = 0;
  if (s->meta_cf) rocksdb_column_family_handle_destroy(s->meta_cf);
  s->meta_cf = NULL;
  if (s->db) rocksdb_close(s->db);
  s->db = NULL;
}

static void hot_drop(ps_store *s) {
  for (uint32_t p = 0; p < s->nparts; p++) {
    partition *pa = &s->parts[p];
    for (size_t t = 0; t < s->ntables; t++) {
      ptable *pt = &pa->tabs[t];
      for (size_t i = 0; i < pt->cap; i++)
        if (pt->slots[i].p) row_free(ent_row(&pt->slots[i]), s->tables[t].row_bytes);
      free(pt->slots);
      free(pt->cms);
    }
    free(pa->tabs);
    pa->tabs = NULL;
    pa->used = 0;
    pa->hand_tab = pa->hand_slot = 0;
  }
  free(s->tables);
  s->tables = NULL;
  s->ntables = 0;
  memset(s->idmap, 0, 65536 * sizeof(uint16_t));
}

/* Opens RocksDB at s->path with every column family, loads specs. */
static ps_status db_open(ps_store *s) {
  char *err = NULL;
  size_t ncf = 0;
  char **names = rocksdb_list_column_families(s->dbopt, s->path, &ncf, &err);
  if (err) { /* a new database (RocksDB still returns a malloc(0) array) */
    free(err);
    err = NULL;
    free(names);
    names = NULL;
    ncf = 0;
  }
  const char *defname = "default";
  size_t n = ncf ? ncf : 1;
  const char **cfn = malloc(n * sizeof(char *));
  const rocksdb_options_t **cfo = malloc(n * sizeof(rocksdb_options_t *));
  rocksdb_column_family_handle_t **h = calloc(n, sizeof(*h));
  ps_status st = PS_OK;
  if (!cfn || !cfo || !h) {
    st = PS_ERR_NOMEM;
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    cfn[i] = ncf ? names[i] : defname;
    cfo[i] = s->dbopt;
  }
  s->db = rocksdb_open_column_families(s->dbopt, s->path, (int)n, cfn, cfo, h, &err);
  if (err) {
    st = rdb_err("open", err);
    s->db = NULL;
    goto out;
  }
  /* Specs first, then match families by name. */
  for (size_t i = 0; i < n; i++)
    if (strcmp(cfn[i], "default") == 0) s->meta_cf = h[i];
  rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->ro_iter, s->meta_cf);
  rocksdb_iter_seek(it, "spec/", 5);
  for (; rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
    size_t kl, vl;
    const char *k = rocksdb_iter_key(it, &kl);
    const char *v = rocksdb_iter_value(it, &vl);
    if (kl < 5 || memcmp(k, "spec/", 5) != 0) break;
    ps_table_spec sp;
    if (spec_decode(v, vl, &sp) != PS_OK || spec_validate(&sp) != PS_OK) {
      PS_ERROR("%s: stored table spec %.*s is corrupt", s->path, (int)kl, k);
      st = PS_ERR_CORRUPT;
      break;
    }
    char cfname[16];
    snprintf(cfname, sizeof(cfname), "t%u", sp.id);
    rocksdb_column_family_handle_t *cf = NULL;
    for (size_t i = 0; i < n; i++)
      if (h[i] && strcmp(cfn[i], cfname) == 0) {
        cf = h[i];
        h[i] = NULL;
      }
    if (!cf) {
      cf = rocksdb_create_column_family(s->db, s->dbopt, cfname, &err);
      if (err) {
        st = rdb_err("create column family", err);
        break;
      }
    }
    st = add_table(s, &sp, cf);
    if (st != PS_OK) {
      rocksdb_column_family_handle_destroy(cf);
      break;
    }
  }
  rocksdb_iter_destroy(it);
  for (size_t i = 0; i < n; i++) {
    if (!h[i] || h[i] == s->meta_cf) continue;
    PS_WARN("%s: column family %s has no table spec; kept until declared", s->path, cfn[i]);
    void *no = realloc(s->orphan, (s->norphan + 1) * sizeof(*s->orphan));
    void *nn = no ? realloc(s->orphan_names, (s->norphan + 1) * sizeof(char *)) : NULL;
    if (no) s->orphan = no;
    if (nn) s->orphan_names = nn;
    if (!no || !nn) {
      rocksdb_column_family_handle_destroy(h[i]);
      continue;
    }
    s->orphan[s->norphan] = h[i];
    s->orphan_names[s->norphan++] = strdup(cfn[i]);
  }
out:
  if (names) rocksdb_list_column_families_destroy(names, ncf);
  free(cfn);
  free(cfo);
  free(h);
  return st;
}

static void opts_destroy(ps_store *s) {
  if (s->ro) rocksdb_readoptions_destroy(s->ro);
  if (s->ro_iter) rocksdb_readoptions_destroy(s->ro_iter);
  if (s->wo) rocksdb_writeoptions_destroy(s->wo);
  if (s->wo_sync) rocksdb_writeoptions_destroy(s->wo_sync);
  if (s->fo) rocksdb_flushoptions_destroy(s->fo);
  if (s->dbopt) rocksdb_options_destroy(s->dbopt);
  if (s->bbto) rocksdb_block_based_options_destroy(s->bbto);
  if (s->cache) rocksdb_cache_destroy(s->cache);
}

/* RocksDB tuned for random point lookups of small fixed-size values (see the file comment
 * of bench/embedding/ps_store_bench.c and bench/RESULTS-embedding.md):
 * - full-key bloom filters (10 bits/key, ~1% false positives) so a miss for a never-stored
 *   key (first pull of a new feature) rarely reads a data block; memtable bloom too;
 * - 4 KB blocks with the in-block hash index (kDataBlockBinaryAndHash): a lookup inside a
 *   cached block is a hash probe, not a binary search;
 * - index and filter blocks held by the table readers (not in the LRU block cache, where
 *   row blocks would push them out), max_open_files = -1 so no reader is ever closed;
 * - no compression: rows are float32 with random mantissas that do not compress, and every
 *   miss would pay decompression;
 * - WAL by durability: NONE disables it (rows become durable at flush/snapshot — the server
 *   checkpoints at step boundaries anyway), WAL keeps it unsynced, SYNC syncs each batch.
 *   Table specs are always written with a synced WAL write. */
static ps_status opts_create(ps_store *s) {
  s->dbopt = rocksdb_options_create();
  rocksdb_options_set_create_if_missing(s->dbopt, 1);
  rocksdb_options_set_create_missing_column_families(s->dbopt, 1);
  rocksdb_options_set_max_open_files(s->dbopt, -1);
  rocksdb_options_set_max_background_jobs(s->dbopt, 2);
  rocksdb_options_set_compression(s->dbopt, rocksdb_no_compression);
  rocksdb_options_set_level_compaction_dynamic_level_bytes(s->dbopt, 1);
  rocksdb_options_set_write_buffer_size(s->dbopt, s->opt.write_buffer_bytes);
  rocksdb_options_set_max_write_buffer_number(s->dbopt, 2);
  /* Memtable: a hash of short sorted lists keyed by the whole 8-byte key (fixed-prefix
   * extractor of 8) instead of the default skip list: every write-back of an evicted row and
   * every memtable probe of a miss is a hash lookup, not a log(n) walk of cache misses
   * (measured: the skip list insert was the largest cost of the over-budget cases).
   * Iteration (specs at open, expire) then needs total_order_seek. */
  rocksdb_options_set_prefix_extractor(s->dbopt, rocksdb_slicetransform_create_fixed_prefix(8));
  rocksdb_options_set_hash_link_list_rep(s->dbopt, 1u << 16);
  rocksdb_options_set_allow_concurrent_memtable_write(s->dbopt, 0);
  rocksdb_options_set_memtable_prefix_bloom_size_ratio(s->dbopt, 0.02);
  rocksdb_options_set_memtable_whole_key_filtering(s->dbopt, 1);
  rocksdb_options_set_info_log_level(s->dbopt, 2 /* WARN */);
  rocksdb_options_set_keep_log_file_num(s->dbopt, 2);
  s->bbto = rocksdb_block_based_options_create();
  rocksdb_block_based_options_set_block_size(s->bbto, 4096);
  rocksdb_block_based_options_set_filter_policy(s->bbto, rocksdb_filterpolicy_create_bloom_full(10));
  rocksdb_block_based_options_set_whole_key_filtering(s->bbto, 1);
  rocksdb_block_based_options_set_data_block_index_type(s->bbto, 1 /* binary and hash */);
  rocksdb_block_based_options_set_data_block_hash_ratio(s->bbto, 0.75);
  rocksdb_block_based_options_set_format_version(s->bbto, 5);
  s->cache = rocksdb_cache_create_lru(s->opt.block_cache_bytes);
  rocksdb_block_based_options_set_block_cache(s->bbto, s->cache);
  rocksdb_options_set_block_based_table_factory(s->dbopt, s->bbto);
  s->ro = rocksdb_readoptions_create();
  s->ro_iter = rocksdb_readoptions_create();
  rocksdb_readoptions_set_total_order_seek(s->ro_iter, 1);
  rocksdb_readoptions_set_fill_cache(s->ro_iter, 0); /* scans must not flush the block cache */
  s->wo = rocksdb_writeoptions_create();
  s->wo_sync = rocksdb_writeoptions_create();
  rocksdb_writeoptions_set_sync(s->wo_sync, 1);
  if (s->opt.durability == PS_DURABILITY_NONE) rocksdb_writeoptions_disable_WAL(s->wo, 1);
  if (s->opt.durability == PS_DURABILITY_SYNC) rocksdb_writeoptions_set_sync(s->wo, 1);
  s->fo = rocksdb_flushoptions_create();
  rocksdb_flushoptions_set_wait(s->fo, 1);
  return PS_OK;
}

ps_status ps_store_open(const ps_store_options *opt, ps_store **out) {
  if (!opt || !out || !opt->path || !opt->path[0]) return PS_ERR_INVALID;
  if ((unsigned)opt->durability > PS_DURABILITY_SYNC) return PS_ERR_INVALID;
  *out = NULL;
  ps_store *s = calloc(1, sizeof(*s));
  if (!s) return PS_ERR_NOMEM;
  s->opt = *opt;
  if (!s->opt.partitions) s->opt.partitions = 1;
  if (s->opt.partitions > 1024) {
    free(s);
    return PS_ERR_INVALID;
  }
  if (!s->opt.cache_bytes) s->opt.cache_bytes = (size_t)256 << 20;
  if (!s->opt.block_cache_bytes) s->opt.block_cache_bytes = (size_t)32 << 20;
  if (!s->opt.write_buffer_bytes) s->opt.write_buffer_bytes = (size_t)16 << 20;
  s->path = strdup(opt->path);
  s->opt.path = s->path;
  s->nparts = s->opt.partitions;
  s->idmap = calloc(65536, sizeof(uint16_t));
  /* aligned_alloc wants a size that is a multiple of the alignment (ASan enforces it). */
  size_t parts_bytes = (sizeof(partition) * s->nparts + 63) & ~(size_t)63;
  s->parts = aligned_alloc(64, parts_bytes);
  if (!s->path || !s->idmap || !s->parts) {
    free(s->path);
    free(s->idmap);
    free(s->parts);
    free(s);
    return PS_ERR_NOMEM;
  }
  memset(s->parts, 0, sizeof(partition) * s->nparts);
  for (uint32_t p = 0; p < s->nparts; p++) {
    pthread_mutex_init(&s->parts[p].mu, NULL);
    s->parts[p].budget = s->opt.cache_bytes / s->nparts;
    s->parts[p].wb = rocksdb_writebatch_create();
  }
  pthread_rwlock_init(&s->lock, NULL);
  opts_create(s);
  ps_status st = db_open(s);
  if (st != PS_OK) {
    ps_store_close(&s);
    return st;
  }
  PS_INFO("store %s: %zu tables, %u partitions, hot budget %zu MB", s->path, s->ntables,
          s->nparts, s->opt.cache_bytes >> 20);
  *out = s;
  return PS_OK;
}

/* Dirty rows of one table, sorted by key, written as one SST file and ingested: the bulk path
 * of write_dirty. Through the memtable, millions of rows cost far more than the writes: the
 * hash memtable (see opts_create) re-sorts every entry through a skip list when it is flushed
 * (measured: 2M dirty dim-16 rows took 9.4 s to shut down, 61% in that flush). Sorted keys
 * into an SST file are sequential I/O, and ingestion only links the file in. Dirty bits are
 * cleared only once the file is in the database. */
typedef struct dirty_ref {
  uint64_t key;
  hentry *e;
} dirty_ref;

static int dirty_cmp(const void *a, const void *b) {
  uint64_t x = ((const dirty_ref *)a)->key, y = ((const dirty_ref *)b)->key;
  return x < y ? -1 : x > y;
}

static ps_status ingest_dirty(ps_store *s, size_t ti, dirty_ref *d, size_t n) {
  const table *t = &s->tables[ti];
  qsort(d, n, sizeof *d, dirty_cmp); /* big-endian keys: numeric order is RocksDB's order */
  size_t plen = strlen(s->path) + 64;
  char *file = malloc(plen);
  char *val = malloc(REC_HDR + t->row_bytes);
  if (!file || !val) {
    free(file);
    free(val);
    return PS_ERR_NOMEM;
  }
  snprintf(file, plen, "%s/ingest-t%u.sst", s->path, t->spec.id);
  unlink(file); /* a leftover of a crash during an earlier flush */
  ps_status st = PS_OK;
  char *err = NULL;
  rocksdb_envoptions_t *eo = rocksdb_envoptions_create();
  rocksdb_sstfilewriter_t *w = rocksdb_sstfilewriter_create(eo, s->dbopt);
  rocksdb_sstfilewriter_open(w, file, &err);
  memcpy(val, t->hdr, REC_HDR);
  for (size_t i = 0; !err && i < n; i++) {
    char kb[8];
    key_be(d[i].key, kb);
    memcpy(val + REC_HDR, ent_row(d[i].e), t->row_bytes);
    rocksdb_sstfilewriter_put(w, kb, 8, val, REC_HDR + t->row_bytes, &err);
  }
  if (!err) rocksdb_sstfilewriter_finish(w, &err);
  if (err) st = rdb_err("writing an SST file of dirty rows", err);
  rocksdb_sstfilewriter_destroy(w);
  rocksdb_envoptions_destroy(eo);
  if (st == PS_OK) {
    rocksdb_ingestexternalfileoptions_t *io = rocksdb_ingestexternalfileoptions_create();
    rocksdb_ingestexternalfileoptions_set_move_files(io, 1);
    const char *files[1] = {file};
    err = NULL;
    rocksdb_ingest_external_file_cf(s->db, t->cf, files, 1, io, &err);
    rocksdb_ingestexternalfileoptions_destroy(io);
    if (err) st = rdb_err("ingesting dirty rows", err);
  }
  unlink(file); /* moved into the database (hard link) or failed: either way not needed */
  free(file);
  free(val);
  if (st != PS_OK) return st;
  for (size_t i = 0; i < n; i++) d[i].e->p &= ~F_DIRTY;
  return PS_OK;
}

/* Below this many dirty rows in a table a WriteBatch is cheaper than an SST file. */
#define INGEST_MIN_ROWS 65536

/* Writes every dirty hot row (store write-locked): tables with many, in bulk; the rest (and
 * anything the bulk path could not take) through each partition's WriteBatch. */
static ps_status write_dirty(ps_store *s) {
  ps_status st = PS_OK;
  for (size_t t = 0; t < s->ntables; t++) {
    size_t rows = 0, n = 0;
    for (uint32_t p = 0; p < s->nparts; p++) rows += s->parts[p].tabs[t].count;
    if (rows < INGEST_MIN_ROWS) continue; /* cannot have enough dirty rows: no scan for them */
    for (uint32_t p = 0; p < s->nparts; p++) {
      const ptable *pt = &s->parts[p].tabs[t];
      for (size_t i = 0; i < pt->cap; i++) n += (pt->slots[i].p & F_DIRTY) != 0;
    }
    if (n < INGEST_MIN_ROWS) continue;
    dirty_ref *d = malloc(n * sizeof *d);
    size_t *per = calloc(s->nparts, sizeof *per);
    if (!d || !per) { /* the WriteBatch path below still writes them */
      free(d);
      free(per);
      continue;
    }
    size_t m = 0;
    for (uint32_t p = 0; p < s->nparts; p++) {
      ptable *pt = &s->parts[p].tabs[t];
      const size_t before = m;
      for (size_t i = 0; i < pt->cap; i++)
        if (pt->slots[i].p & F_DIRTY) d[m++] = (dirty_ref){pt->slots[i].key, &pt->slots[i]};
      per[p] = m - before;
    }
    ps_status is = ingest_dirty(s, t, d, m);
    if (is == PS_OK)
      for (uint32_t p = 0; p < s->nparts; p++) s->parts[p].writebacks += per[p];
    else
      PS_WARN("store %s: bulk write of %zu dirty rows of table %u failed (%s); writing them in "
              "batches", s->path, m, s->tables[t].spec.id, ps_status_str(is));
    free(d);
    free(per);
  }
  for (uint32_t p = 0; p < s->nparts; p++) {
    partition *pa = &s->parts[p];
    for (size_t t = 0; t < s->ntables; t++) {
      ptable *pt = &pa->tabs[t];
      for (size_t i = 0; i < pt->cap; i++) {
        hentry *e = &pt->slots[i];
        if (!(e->p & F_DIRTY)) continue;
        put_row(s, pa->wb, &s->tables[t], e->key, ent_row(e));
        e->p &= ~F_DIRTY;
        pa->writebacks++;
        if (rocksdb_writebatch_count(pa->wb) >= 4096) {
          ps_status ws = flush_wb(s, pa);
          if (st == PS_OK) st = ws;
        }
      }
    }
    ps_status ws = flush_wb(s, pa);
    if (st == PS_OK) st = ws;
  }
  return st;
}

static ps_status flush_locked(ps_store *s) {
  ps_status st = write_dirty(s);
  char *err = NULL;
  rocksdb_flush_cf(s->db, s->fo, s->meta_cf, &err);
  if (err && st == PS_OK) st = rdb_err("flush", err);
  else free(err);
  for (size_t t = 0; t < s->ntables; t++) {
    err = NULL;
    rocksdb_flush_cf(s->db, s->fo, s->tables[t].cf, &err);
    if (err && st == PS_OK) st = rdb_err("flush", err);
    else free(err);
  }
  return st;
}

ps_status ps_store_flush(ps_store *s) {
  if (!s) return PS_ERR_INVALID;
  pthread_rwlock_wrlock(&s->lock);
  ps_status st = flush_locked(s);
  pthread_rwlock_unlock(&s->lock);
  return st;
}

void ps_store_close(ps_store **sp) {
  if (!sp || !*sp) return;
  ps_store *s = *sp;
  if (s->db) {
    ps_status st = flush_locked(s);
    if (st != PS_OK) PS_ERROR("store %s: flush at close failed: %s", s->path, ps_status_str(st));
  }
  db_close(s);
  hot_drop(s);
  for (uint32_t p = 0; s->parts && p < s->nparts; p++) {
    pthread_mutex_destroy(&s->parts[p].mu);
    free(s->parts[p].huge);
    if (s->parts[p].wb) rocksdb_writebatch_destroy(s->parts[p].wb);
  }
  opts_destroy(s);
  pthread_rwlock_destroy(&s->lock);
  free(s->parts);
  free(s->idmap);
  free(s->path);
  free(s);
  *sp = NULL;
}

/* ------------------------------------------------------------- expire */

uint64_t ps_store_expire(ps_store *s) {
  if (!s) return 0;
  pthread_rwlock_wrlock(&s->lock);
  const uint64_t step = atomic_load(&s->step);
  uint64_t removed = 0;
  bool any_ttl = false;
  for (size_t ti = 0; ti < s->ntables; ti++) any_ttl |= s->tables[ti].spec.ttl_steps > 0;
  if (!any_ttl) goto done; /* cheap to call every step when no table uses TTL */
  /* After write_dirty every hot row has an identical cold copy, so one scan of the cold
   * tier decides; expired keys are dropped from the hot index too. */
  if (write_dirty(s) != PS_OK) goto done;
  rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
  for (size_t ti = 0; ti < s->ntables; ti++) {
    const table *t = &s->tables[ti];
    const uint64_t ttl = t->spec.ttl_steps;
    if (!ttl) continue;
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->ro_iter, t->cf);
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
      size_t kl, vl;
      const char *k = rocksdb_iter_key(it, &kl);
      const char *v = rocksdb_iter_value(it, &vl);
      if (kl != 8 || vl != REC_HDR + t->row_bytes) continue; /* corrupt: left for pull to report */
      row_meta m;
      memcpy(&m, v + REC_HDR, sizeof(m));
      if (step <= m.last_step || step - m.last_step <= ttl) continue;
      uint64_t key = be_key(k);
      uint64_t h = key_hash(key);
      partition *pa = &s->parts[part_of_hash(h, s->nparts)];
      ptable *pt = &pa->tabs[ti];
      hentry *e = idx_find(pt, key, h);
      if (e) {
        row_free(ent_row(e), t->row_bytes);
        pa->used -= t->alloc_bytes;
        idx_delete_at(pt, (size_t)(e - pt->slots));
      }
      rocksdb_writebatch_delete_cf(wb, t->cf, k, 8);
      pa->expired++;
      removed++;
      if (rocksdb_writebatch_count(wb) >= 4096) {
        char *err = NULL;
        rocksdb_write(s->db, s->wo, wb, &err);
        if (err) rdb_err("expire write", err);
        rocksdb_writebatch_clear(wb);
      }
    }
    rocksdb_iter_destroy(it);
  }
  char *err = NULL;
  rocksdb_write(s->db, s->wo, wb, &err);
  if (err) rdb_err("expire write", err);
  rocksdb_writebatch_destroy(wb);
done:
  pthread_rwlock_unlock(&s->lock);
  return removed;
}

/* ---------------------------------------------------- snapshot / restore */

ps_status ps_store_snapshot(ps_store *s, const char *dir) {
  if (!s || !dir || !dir[0]) return PS_ERR_INVALID;
  struct stat sb;
  if (stat(dir, &sb) == 0) return PS_ERR_INVALID; /* must not exist */
  pthread_rwlock_wrlock(&s->lock);
  ps_status st = flush_locked(s);
  if (st == PS_OK) {
    char *err = NULL;
    rocksdb_checkpoint_t *cp = rocksdb_checkpoint_object_create(s->db, &err);
    if (!err) rocksdb_checkpoint_create(cp, dir, 0, &err);
    if (err) st = rdb_err("checkpoint", err);
    if (cp) rocksdb_checkpoint_object_destroy(cp);
  }
  pthread_rwlock_unlock(&s->lock);
  if (st == PS_OK) PS_INFO("store %s: snapshot at %s", s->path, dir);
  return st;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(p);
}
static int rm_rf(const char *p) { return nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

ps_status ps_store_snapshot_remove(const char *dir) {
  if (!dir || !dir[0]) return PS_ERR_INVALID;
  struct stat sb;
  if (lstat(dir, &sb) != 0) return errno == ENOENT ? PS_OK : PS_ERR_IO;
  return rm_rf(dir) == 0 ? PS_OK : PS_ERR_IO;
}

static int copy_file(const char *src, const char *dst) {
  int in = open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0) return -1;
  int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    close(in);
    return -1;
  }
  char buf[1 << 16];
  ssize_t r;
  int rc = 0;
  while ((r = read(in, buf, sizeof(buf))) > 0) {
    for (ssize_t o = 0; o < r;) {
      ssize_t w = write(out, buf + o, (size_t)(r - o));
      if (w <= 0) {
        rc = -1;
        break;
      }
      o += w;
    }
    if (rc) break;
  }
  if (r < 0) rc = -1;
  if (fsync(out) != 0) rc = -1;
  close(in);
  if (close(out) != 0) rc = -1;
  return rc;
}

static const char *copy_root_src, *copy_root_dst;
static int copy_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)ftw;
  char dst[4096];
  if (snprintf(dst, sizeof(dst), "%s%s", copy_root_dst, p + strlen(copy_root_src)) >= (int)sizeof(dst))
    return -1;
  if (flag == FTW_D) return (mkdir(dst, 0755) == 0 || errno == EEXIST) ? 0 : -1;
  if (flag == FTW_F && S_ISREG(sb->st_mode)) return copy_file(p, dst);
  return 0;
}

/* Restore: copy the snapshot beside the data dir, close RocksDB, swap directories, reopen.
 * The live directory is replaced only once the copy is complete; on a failed reopen the old
 * one is put back. */
ps_status ps_store_restore(ps_store *s, const char *dir) {
  if (!s || !dir || !dir[0]) return PS_ERR_INVALID;
  char cur[4096];
  if (snprintf(cur, sizeof(cur), "%s/CURRENT", dir) >= (int)sizeof(cur)) return PS_ERR_INVALID;
  if (access(cur, R_OK) != 0) {
    PS_ERROR("restore: %s is not a snapshot (no CURRENT file)", dir);
    return PS_ERR_NOT_FOUND;
  }
  char tmp[4096], old[4096];
  snprintf(tmp, sizeof(tmp), "%s.restore-tmp", s->path);
  snprintf(old, sizeof(old), "%s.restore-old", s->path);
  rm_rf(tmp);
  rm_rf(old);
  static pthread_mutex_t copy_mu = PTHREAD_MUTEX_INITIALIZER; /* nftw callbacks use globals */
  pthread_mutex_lock(&copy_mu);
  copy_root_src = dir;
  copy_root_dst = tmp;
  int rc = nftw(dir, copy_cb, 16, FTW_PHYS);
  pthread_mutex_unlock(&copy_mu);
  if (rc != 0) {
    PS_ERROR("restore: copying %s failed", dir);
    rm_rf(tmp);
    return PS_ERR_IO;
  }
  pthread_rwlock_wrlock(&s->lock);
  db_close(s);
  hot_drop(s);
  ps_status st = PS_OK;
  if (rename(s->path, old) != 0 || rename(tmp, s->path) != 0) {
    PS_ERROR("restore: swapping %s failed: %s", s->path, strerror(errno));
    st = PS_ERR_IO;
  }
  if (st == PS_OK) st = db_open(s);
  if (st != PS_OK) {
    db_close(s);
    hot_drop(s);
    rm_rf(s->path);
    if (rename(old, s->path) == 0) {
      ps_status rs = db_open(s);
      if (rs != PS_OK) PS_ERROR("restore: reopening the previous content failed too");
    }
  } else {
    rm_rf(old);
  }
  for (uint32_t p = 0; p < s->nparts; p++) rocksdb_writebatch_clear(s->parts[p].wb);
  pthread_rwlock_unlock(&s->lock);
  if (st == PS_OK) PS_INFO("store %s: restored from %s (%zu tables)", s->path, dir, s->ntables);
  return st;
}

/* ------------------------------------------------------------- misc */

ps_status ps_store_export_row(ps_store *s, uint32_t table_id, uint64_t key, void *buf, size_t cap,
                              size_t *len) {
  if (!s || !buf) return PS_ERR_INVALID;
  pthread_rwlock_rdlock(&s->lock);
  size_t ti;
  ps_status st = PS_OK;
  table *t = find_table(s, table_id, &ti);
  if (!t) {
    st = PS_ERR_UNKNOWN_TABLE;
    goto done;
  }
  const size_t need = REC_HDR + t->row_bytes;
  if (len) *len = need;
  if (cap < need) {
    st = PS_ERR_INVALID;
    goto done;
  }
  uint64_t h = key_hash(key);
  partition *pa = &s->parts[part_of_hash(h, s->nparts)];
  pthread_mutex_lock(&pa->mu);
  hentry *e = idx_find(&pa->tabs[ti], key, h);
  if (e) {
    memcpy(buf, t->hdr, REC_HDR);
    memcpy((char *)buf + REC_HDR, ent_row(e), t->row_bytes);
  } else {
    char kb[8], *err = NULL;
    size_t vl = 0;
    key_be(key, kb);
    char *v = rocksdb_get_cf(s->db, s->ro, t->cf, kb, 8, &vl, &err);
    if (err) {
      st = rdb_err("get", err);
    } else if (!v) {
      st = PS_ERR_NOT_FOUND;
    } else {
      st = decode_rec(t, key, v, vl, (char *)buf + REC_HDR);
      if (st == PS_OK) memcpy(buf, t->hdr, REC_HDR);
    }
    free(v);
  }
  pthread_mutex_unlock(&pa->mu);
done:
  pthread_rwlock_unlock(&s->lock);
  return st;
}

void ps_store_get_stats(ps_store *s, ps_store_stats *o) {
  if (!o) return;
  memset(o, 0, sizeof(*o));
  if (!s) return;
  pthread_rwlock_rdlock(&s->lock);
  for (uint32_t p = 0; p < s->nparts; p++) {
    partition *pa = &s->parts[p];
    pthread_mutex_lock(&pa->mu);
    for (size_t t = 0; t < s->ntables; t++) o->rows_hot += pa->tabs[t].count;
    o->hits += pa->hits;
    o->misses += pa->misses;
    o->evictions += pa->evictions;
    o->writebacks += pa->writebacks;
    o->admitted += pa->admitted;
    o->pending_admission_pushes += pa->pending;
    o->expired += pa->expired;
    o->hot_bytes += pa->used;
    pthread_mutex_unlock(&pa->mu);
  }
  for (size_t t = 0; t < s->ntables; t++) {
    uint64_t v = 0;
    if (rocksdb_property_int_cf(s->db, s->tables[t].cf, "rocksdb.estimate-num-keys", &v) == 0)
      o->rows_cold += v;
    v = 0;
    if (rocksdb_property_int_cf(s->db, s->tables[t].cf, "rocksdb.estimate-live-data-size", &v) == 0)
      o->cold_bytes += v;
    v = 0;
    if (rocksdb_property_int_cf(s->db, s->tables[t].cf, "rocksdb.cur-size-all-mem-tables", &v) == 0)
      o->cold_bytes += v;
  }
  pthread_rwlock_unlock(&s->lock);
}

uint32_t ps_store_partition_of(const ps_store *s, uint64_t key) {
  if (!s || s->nparts <= 1) return 0;
  return part_of_hash(key_hash(key), s->nparts);
}

uint32_t ps_store_partitions(const ps_store *s) { return s ? s->nparts : 0; }

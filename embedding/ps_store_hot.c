/* ps_store_hot: the hot tier — rows in DRAM under a byte budget per partition, and CLOCK
 * eviction.
 *
 * - Rows: one jemalloc allocation per row, its floats only (the metadata is in the index
 *   entry; size class from nallocx, counted in the budget), so
 *   tables of different row sizes share one partition budget and evicting a row of table A
 *   makes room for table B.
 * - CLOCK over all tables of a partition: approximates LRU at O(1) per hit (one bit, set only
 *   if clear) — no list to relink on the pull path, unlike LRU; LFU would need counters and
 *   aging for little gain on Zipf keys. Dirty rows evicted during a call go into the
 *   partition's WriteBatch, written before the partition lock is released (so no reader can
 *   miss a row in flight); their memory is freed only once that write succeeded
 *   (ps_store_writeback.c), and while writes fail only clean rows are evicted. */
#include <string.h>
#include <sys/mman.h>

#include "ps_store_int.h"

void store_hot_remove(ps_store *s, partition *pa, size_t ti, hentry *e) {
  const table *t = &s->tables[ti];
  ptable *pt = &pa->tabs[ti];
  clear_dirty(pa, t->alloc_bytes, e);
  row_free(ent_row(e), t->row_bytes);
  pa->used -= t->alloc_bytes;
  store_idx_delete_at(pt, (size_t)(e - pt->slots));
}

/* Evicts one row of the partition (any table); false if none can go. A dirty row goes only by
 * way of the stage (its record is written at the end of the call, and a failed write puts it
 * back), and not at all while writes fail: only rows safely in RocksDB leave memory then. The
 * scan is bounded by two sweeps (the first may only clear reference bits). */
static bool clock_evict_one(ps_store *s, partition *pa) {
  const bool failing = store_failing(s);
  size_t total = 0, slots = 0;
  for (size_t t = 0; t < s->ntables; t++) {
    total += pa->tabs[t].count;
    slots += pa->tabs[t].cap;
  }
  if (!total || (failing && total == pa->ndirty)) return false;
  for (size_t seen = 0; seen <= 2 * (slots + s->ntables); seen++) {
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
    if (!(e->p & F_DIRTY)) {
      store_hot_remove(s, pa, pa->hand_tab, e); /* the slot may now hold a shifted entry */
    } else if (failing || !store_wb_stage(s, pa, pa->hand_tab, e)) {
      pa->hand_slot++;
      continue;
    }
    pa->evictions++;
    return true;
  }
  return false;
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

hentry *store_hot_insert(ps_store *s, partition *pa, size_t ti, uint64_t key, uint64_t h,
                         uintptr_t flags) {
  const table *t = &s->tables[ti];
  ptable *pt = &pa->tabs[ti];
  if (idx_full(pt) && store_idx_grow(pa, pt) != PS_OK) return NULL;
  while (pa->used + t->alloc_bytes > pa->budget)
    if (!clock_evict_one(s, pa)) {
      /* Nothing can go: a budget smaller than one row, or only unwritten rows left while
       * writes fail. A row read from RocksDB is then served without caching it; a pushed row
       * (admitted by ps_store_push_admit) goes over the budget. */
      if (!(flags & F_DIRTY) && store_failing(s)) return NULL;
      break;
    }
  void *row = row_alloc(t->row_bytes);
  if (!row) return NULL;
  pa->used += t->alloc_bytes;
  hugepage_hint(pa, row);
  hentry *e = store_idx_put(pt, key, h, (uintptr_t)row | (flags & F_REF));
  if (flags & F_DIRTY) mark_dirty(pa, t->alloc_bytes, e);
  return e;
}

hentry *store_hot_load(ps_store *s, partition *pa, size_t ti, uint64_t key, uint64_t h,
                       uintptr_t flags, const char *v, size_t len, ps_status *st) {
  hentry *e = store_hot_insert(s, pa, ti, key, h, flags);
  if (!e) {
    *st = PS_ERR_NOMEM;
    return NULL;
  }
  row_meta m;
  ps_status ds = store_cold_decode(&s->tables[ti], key, v, len, &m, ent_row(e), NULL);
  if (ds == PS_OK) {
    ent_set_meta(&s->tables[ti], e, &m);
    return e;
  }
  store_hot_remove(s, pa, ti, e);
  *st = ds;
  return NULL;
}

void store_hot_drop(ps_store *s) {
  for (uint32_t p = 0; p < s->nparts; p++) {
    partition *pa = &s->parts[p];
    for (size_t t = 0; t < s->ntables; t++) {
      ptable *pt = &pa->tabs[t];
      for (size_t i = 0; i < pt->cap; i++)
        if (pt->slots[i].p) row_free(ent_row(&pt->slots[i]), s->tables[t].row_bytes);
      free(pt->slots);
      free(pt->cms);
      free(pt->chg);
    }
    free(pa->tabs);
    pa->tabs = NULL;
    pa->used = pa->ndirty = pa->dirty_bytes = 0;
    pa->hand_tab = pa->hand_slot = 0;
  }
  free(s->tables);
  s->tables = NULL;
  s->ntables = 0;
  memset(s->idmap, 0, 65536 * sizeof(uint16_t));
}

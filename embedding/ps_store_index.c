/* ps_store_index: the hash index of one table in one partition — key -> row pointer.
 *
 * Linear probing over 24-byte entries {key, row pointer | REF | DIRTY, last step}, load <= 7/8,
 * backward-shift deletion (no tombstones, so eviction churn does not degrade probes). The
 * CLOCK reference bit and the dirty bit live in the low bits of the pointer so the CLOCK sweep
 * reads only the index, never the rows. The probe itself (idx_find) is static inline in
 * ps_store_int.h: the pull and push loops call it for every key. */
#include <string.h>
#include <sys/mman.h>

#include "ps_store_int.h"

/* Backward-shift deletion: keeps every probe chain intact without tombstones. */
void store_idx_delete_at(ptable *pt, size_t i) {
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

static void idx_insert_raw(hentry *slots, size_t cap, const hentry *e) {
  const size_t mask = cap - 1;
  size_t i = key_hash(e->key) & mask;
  while (slots[i].p) i = (i + 1) & mask;
  slots[i] = *e;
}

hentry *store_idx_put(ptable *pt, uint64_t key, uint64_t h, uintptr_t p) {
  const size_t mask = pt->cap - 1;
  size_t i = h & mask;
  while (pt->slots[i].p) i = (i + 1) & mask;
  pt->slots[i].key = key;
  pt->slots[i].p = p;
  pt->slots[i].step = 0;
  pt->count++;
  return &pt->slots[i];
}

/* Index arrays of 2 MB and more are 2 MB-aligned and madvise(MADV_HUGEPAGE)d: every probe is
 * a random access, and with 4 KB pages each one would also miss the TLB. They are mapped
 * directly and unmapped when the index doubles: from the allocator, the old array's pages
 * stayed resident until its decay (about 10 s), half the new index's bytes again in RSS right
 * after every growth (bench/RESULTS-sizing.md, issue 33: RSS per row). Under ASan, malloc, so
 * an overrun is caught. */
static const size_t idx_huge = (size_t)2 << 20;

static size_t idx_mapped(size_t cap) {
  const size_t bytes = cap * sizeof(hentry);
  return bytes < idx_huge ? 0 : (bytes + idx_huge - 1) & ~(idx_huge - 1);
}

static hentry *idx_alloc(size_t cap) {
  const size_t whole = idx_mapped(cap);
  if (!whole) return calloc(cap, sizeof(hentry));
#ifdef PS_STORE_PLAIN_MALLOC
  /* C11's aligned_alloc wants a size that is a multiple of the alignment: 24-byte entries
   * times a power of two are not. */
  hentry *p = aligned_alloc(idx_huge, whole);
  if (p) memset(p, 0, whole);
#else
  /* Anonymous pages read as zeros; the map is trimmed to its 2 MB-aligned part. */
  char *m = mmap(NULL, whole + idx_huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1, 0);
  if (m == MAP_FAILED) return NULL;
  const size_t head = (idx_huge - ((uintptr_t)m & (idx_huge - 1))) & (idx_huge - 1);
  if (head) munmap(m, head);
  if (idx_huge - head) munmap(m + head + whole, idx_huge - head);
  hentry *p = (hentry *)(m + head);
#endif
  if (p) (void)madvise(p, whole, MADV_HUGEPAGE);
  return p;
}

void store_idx_free(ptable *pt) {
  const size_t whole = idx_mapped(pt->cap);
#ifndef PS_STORE_PLAIN_MALLOC
  if (whole) {
    munmap(pt->slots, whole);
    return;
  }
#endif
  (void)whole;
  free(pt->slots);
}

ps_status store_idx_grow(partition *pa, ptable *pt) {
  size_t ncap = pt->cap ? pt->cap * 2 : 64;
  hentry *ns = idx_alloc(ncap);
  if (!ns) return PS_ERR_NOMEM;
  for (size_t i = 0; i < pt->cap; i++)
    if (pt->slots[i].p) idx_insert_raw(ns, ncap, &pt->slots[i]);
  store_idx_free(pt);
  pa->used += (ncap - pt->cap) * sizeof(hentry);
  pt->slots = ns;
  pt->cap = ncap;
  return PS_OK;
}

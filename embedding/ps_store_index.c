/* ps_store_index: the hash index of one table in one partition — key -> row pointer.
 *
 * Linear probing over 24-byte entries {key, row pointer | REF | DIRTY, last step}, load <= 0.7,
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
 * a random access, and with 4 KB pages each one would also miss the TLB. */
static hentry *idx_alloc(size_t cap) {
  const size_t bytes = cap * sizeof(hentry), huge = (size_t)2 << 20;
  if (bytes < huge) return calloc(cap, sizeof(hentry));
  /* C11's aligned_alloc wants a size that is a multiple of the alignment: 24-byte entries
   * times a power of two are not. */
  const size_t whole = (bytes + huge - 1) & ~(huge - 1);
  hentry *p = aligned_alloc(huge, whole);
  if (!p) return NULL;
  (void)madvise(p, whole, MADV_HUGEPAGE);
  memset(p, 0, bytes);
  return p;
}

ps_status store_idx_grow(partition *pa, ptable *pt) {
  size_t ncap = pt->cap ? pt->cap * 2 : 64;
  hentry *ns = idx_alloc(ncap);
  if (!ns) return PS_ERR_NOMEM;
  for (size_t i = 0; i < pt->cap; i++)
    if (pt->slots[i].p) idx_insert_raw(ns, ncap, &pt->slots[i]);
  free(pt->slots);
  pa->used += (ncap - pt->cap) * sizeof(hentry);
  pt->slots = ns;
  pt->cap = ncap;
  return PS_OK;
}

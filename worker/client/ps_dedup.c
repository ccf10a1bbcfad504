/* ps_dedup: see ps_dedup.h. The table holds (key, index, stamp) slots; a slot whose stamp is
 * not the current call's is empty, which is what lets a call skip clearing the table. */
#include "ps_dedup.h"

#include <stdlib.h>
#include <string.h>

#include "ps_hash.h"
#include "ps_rowcopy.h"

typedef struct dd_slot {
  uint64_t key;
  uint32_t idx;
  uint32_t stamp;
} dd_slot;

struct ps_dedup {
  dd_slot *slots;
  size_t cap; /* power of two */
  uint32_t stamp;
};

ps_status ps_dedup_create(ps_dedup **out) {
  *out = calloc(1, sizeof **out);
  return *out ? PS_OK : PS_ERR_NOMEM;
}

void ps_dedup_destroy(ps_dedup **d) {
  if (!d || !*d) return;
  free((*d)->slots);
  free(*d);
  *d = NULL;
}

ps_status ps_dedup_keys(ps_dedup *d, const uint64_t *keys, size_t n, uint64_t *unique,
                        uint32_t *inverse, size_t *nunique) {
  *nunique = 0;
  if (n == 0) return PS_OK;
  if (n >= UINT32_MAX || !keys || !unique || !inverse) return PS_ERR_INVALID;
  size_t need = 16;
  while (need < 2 * n) need <<= 1; /* load factor <= 1/2 */
  if (need > d->cap) {
    dd_slot *ns = calloc(need, sizeof *ns);
    if (!ns) return PS_ERR_NOMEM;
    free(d->slots);
    d->slots = ns;
    d->cap = need;
    d->stamp = 0;
  }
  if (++d->stamp == 0) { /* wrapped: clear once every 2^32 calls */
    memset(d->slots, 0, d->cap * sizeof *d->slots);
    d->stamp = 1;
  }
  const uint32_t st = d->stamp;
  const size_t mask = d->cap - 1;
  dd_slot *tab = d->slots;
  size_t nu = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t k = keys[i];
    size_t j = ps_mix64(k) & mask;
    for (;;) {
      dd_slot *sl = &tab[j];
      if (sl->stamp != st) {
        sl->stamp = st;
        sl->key = k;
        sl->idx = (uint32_t)nu;
        unique[nu] = k;
        inverse[i] = (uint32_t)nu++;
        break;
      }
      if (sl->key == k) {
        inverse[i] = sl->idx;
        break;
      }
      j = (j + 1) & mask;
    }
  }
  *nunique = nu;
  return PS_OK;
}

void ps_dedup_gather_rows(const uint32_t *inverse, size_t n, const float *rows, size_t dim,
                          float *out) {
  for (size_t i = 0; i < n; i++)
    ps_row_copy(out + i * dim, rows + (size_t)inverse[i] * dim, dim * sizeof(float));
}

void ps_dedup_sum_rows(const uint32_t *inverse, size_t n, size_t nunique, const float *in,
                       size_t dim, float *out) {
  /* Unique indices are assigned in order of first occurrence, so position i is the first
   * occurrence of its key exactly when inverse[i] == the number of keys seen so far. */
  size_t seen = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t u = inverse[i];
    float *dst = out + (size_t)u * dim;
    const float *src = in + i * dim;
    if (u == seen) {
      memcpy(dst, src, dim * sizeof(float));
      seen++;
    } else {
      for (size_t j = 0; j < dim; j++) dst[j] += src[j];
    }
  }
  (void)nunique;
}

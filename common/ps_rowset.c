/* ps_rowset: exported rows held as exported, found by key (see ps_rowset.h). */
#include "ps_rowset.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ps_hash.h"
#include "ps_quant.h"
#include "ps_table.h"

struct ps_rowset {
  uint64_t *keys, n;
  unsigned char *values;
  size_t row_bytes;
  uint32_t dim;
  ps_rowset_form form;
  uint32_t *slot; /* row index + 1, 0 empty */
  uint64_t mask;
};

size_t ps_rowset_form_bytes(ps_rowset_form f, uint32_t dim) {
  return f == PS_ROWSET_INT8 ? ps_quant_int8_row_bytes(dim)
                             : (size_t)dim * (f == PS_ROWSET_F32 ? sizeof(float) : 2);
}

/* Keeps the rows of shard `shard` of `shards`, in order; returns how many. */
static uint64_t keep_shard(uint64_t *keys, unsigned char *values, uint64_t n, size_t rb,
                           uint32_t shard, uint32_t shards) {
  uint64_t m = 0;
  for (uint64_t i = 0; i < n; i++) {
    if (ps_shard_of(keys[i], shards) != shard) continue;
    if (m != i) {
      keys[m] = keys[i];
      memcpy(values + m * rb, values + i * rb, rb);
    }
    m++;
  }
  return m;
}

ps_status ps_rowset_create(uint64_t *keys, void *values, uint64_t n, uint32_t dim,
                           ps_rowset_form form,
                           uint32_t shard, uint32_t shards, ps_rowset **out, ps_error *err) {
  *out = NULL;
  ps_rowset *r = calloc(1, sizeof *r);
  if (!r) {
    free(keys);
    free(values);
    return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  }
  r->keys = keys;
  r->values = values;
  r->dim = dim;
  r->form = form;
  r->row_bytes = ps_rowset_form_bytes(form, dim);
  r->n = shards > 1 ? keep_shard(keys, values, n, r->row_bytes, shard, shards) : n;
  if (r->n == 0) { /* none of this shard's: nothing to hold */
    free(r->keys);
    free(r->values);
    r->keys = NULL;
    r->values = NULL;
  } else if (r->n < n) { /* give the other shards' rows back */
    uint64_t *k = realloc(r->keys, r->n * sizeof *k);
    unsigned char *v = realloc(r->values, r->n * r->row_bytes);
    if (k) r->keys = k;
    if (v) r->values = v;
  }
  uint64_t cap = 16;
  while (cap < 2 * r->n) cap *= 2;
  if (r->n >= UINT32_MAX || !(r->slot = calloc(cap, sizeof *r->slot))) {
    ps_rowset_destroy(&r);
    return ps_error_set(err, PS_ERR_NOMEM, "out of memory indexing %" PRIu64 " rows", n);
  }
  r->mask = cap - 1;
  for (uint64_t i = 0; i < r->n; i++) {
    uint64_t s = ps_mix64(r->keys[i]) & r->mask;
    for (; r->slot[s]; s = (s + 1) & r->mask)
      if (r->keys[r->slot[s] - 1] == r->keys[i]) {
        ps_status st = ps_error_set(err, PS_ERR_CORRUPT, "key %" PRIu64 " has two rows", r->keys[i]);
        ps_rowset_destroy(&r);
        return st;
      }
    r->slot[s] = (uint32_t)(i + 1);
  }
  *out = r;
  return PS_OK;
}

void ps_rowset_destroy(ps_rowset **rp) {
  if (!rp || !*rp) return;
  free((*rp)->keys);
  free((*rp)->values);
  free((*rp)->slot);
  free(*rp);
  *rp = NULL;
}

bool ps_rowset_get(const ps_rowset *r, uint64_t key, float *out) {
  uint64_t s = ps_mix64(key) & r->mask;
  while (r->slot[s] && r->keys[r->slot[s] - 1] != key) s = (s + 1) & r->mask;
  if (!r->slot[s]) return false;
  const unsigned char *v = r->values + (size_t)(r->slot[s] - 1) * r->row_bytes;
  switch (r->form) {
  case PS_ROWSET_INT8: ps_quant_int8_decode(v, r->dim, out); break;
  case PS_ROWSET_F16: ps_row_widen(PS_ROW_F16, v, out, r->dim); break;
  case PS_ROWSET_BF16: ps_row_widen(PS_ROW_BF16, v, out, r->dim); break;
  default: memcpy(out, v, r->row_bytes);
  }
  return true;
}

uint64_t ps_rowset_rows(const ps_rowset *r) { return r->n; }
size_t ps_rowset_row_bytes(const ps_rowset *r) { return r->row_bytes; }
size_t ps_rowset_bytes(const ps_rowset *r) {
  return (size_t)r->n * (sizeof *r->keys + r->row_bytes) + (size_t)(r->mask + 1) * sizeof *r->slot;
}

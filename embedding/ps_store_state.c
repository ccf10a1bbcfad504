/* ps_store_state: rows read with their optimizer state (ps_store_pull_state), for a worker that
 * applies its own pushes' updates to the rows it holds (ps-worker's deep lookahead,
 * docs/DESIGN.md). A read only: a hit keeps its place in the hot tier, a cold row is decoded
 * from its record and not brought in (its push will), and nothing is counted as a pull. */
#include <stdlib.h>
#include <string.h>

#include "ps_optim.h"
#include "ps_store_int.h"

size_t ps_store_state_row_floats(const ps_table_spec *spec) { return ps_optim_row_floats(spec); }

/* One partition's keys at positions pos[0..m): hot rows copied whole (values, state and Adam's
 * count lie in that order, row_bytes of them, in an f32 table's hot row), the rest from
 * RocksDB in one MultiGet or, stored nowhere, their initial row and state. */
static ps_status state_part(ps_store *s, partition *pa, size_t ti, const uint64_t *keys,
                            const uint32_t *pos, size_t m, float *out) {
  const table *t = &s->tables[ti];
  const ptable *pt = &pa->tabs[ti];
  const size_t w = ps_store_state_row_floats(&t->spec), dim = t->spec.dim;
  const bool adam = t->spec.optimizer == PS_OPT_ADAM;
  size_t nmiss = 0;
  uint32_t *miss = malloc(m * sizeof *miss);
  uint64_t *mk = malloc(m * sizeof *mk);
  rocksdb_pinnableslice_t **vals = calloc(m ? m : 1, sizeof *vals);
  ps_status st = miss && mk && vals ? PS_OK : PS_ERR_NOMEM;
  for (size_t i = 0; st == PS_OK && i < m; i++) {
    const uint64_t key = keys[pos[i]];
    hentry *e = idx_find(pt, key, key_hash(key));
    if (e) memcpy(out + (size_t)pos[i] * w, ent_row(e), t->row_bytes);
    else miss[nmiss] = pos[i], mk[nmiss++] = key;
  }
  if (st == PS_OK && nmiss) st = store_cold_multiget(s, t, mk, nmiss, vals);
  for (size_t j = 0; st == PS_OK && j < nmiss; j++) {
    float *row = out + (size_t)miss[j] * w;
    uint32_t at = 0;
    row_meta meta;
    if (!vals[j]) {
      ps_store_init_row(&t->spec, mk[j], row);
      ps_optim_init_state(&t->spec, row + dim, NULL);
    } else {
      size_t len;
      const char *v = rocksdb_pinnableslice_value(vals[j], &len);
      st = store_cold_decode(t, mk[j], v, len, &meta, row, NULL);
      at = meta.adam_t;
    }
    if (adam) memcpy(row + w - 1, &at, sizeof at);
  }
  if (vals)
    for (size_t j = 0; j < nmiss; j++)
      if (vals[j]) rocksdb_pinnableslice_destroy(vals[j]);
  free(miss);
  free(mk);
  free(vals);
  return st;
}

ps_status ps_store_pull_state_batch(ps_store *s, uint32_t table_id, const uint64_t *keys,
                                    const ps_store_batch *b, uint32_t first, uint32_t stride,
                                    float *out) {
  if (!s || !b || stride == 0) return PS_ERR_INVALID;
  size_t ti;
  ps_status st;
  const table *t = store_read_table(s, table_id, &ti, &st);
  if (t && t->spec.row_type != PS_ROW_F32) st = PS_ERR_UNSUPPORTED;
  for (uint32_t p = first; st == PS_OK && p < s->nparts; p += stride) {
    const uint32_t *pos;
    size_t m = ps_store_batch_part(b, p, &pos);
    if (!m) continue;
    partition *pa = &s->parts[p];
    pthread_mutex_lock(&pa->mu);
    st = state_part(s, pa, ti, keys, pos, m, out);
    pthread_mutex_unlock(&pa->mu);
  }
  pthread_rwlock_unlock(&s->lock);
  return st;
}

ps_status ps_store_pull_state(ps_store *s, uint32_t table_id, const uint64_t *keys, size_t n,
                              float *out) {
  if (!s || (n && (!keys || !out))) return PS_ERR_INVALID;
  ps_store_batch *b;
  ps_status st = ps_store_batch_create(s, keys, n, &b);
  if (st != PS_OK) return st;
  st = ps_store_pull_state_batch(s, table_id, keys, b, 0, 1, out);
  ps_store_batch_destroy(&b);
  return st;
}

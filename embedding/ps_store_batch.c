/* ps_store_batch: the data path — a batch of keys grouped by partition, and the pull and push
 * pipelines over it.
 *
 * - A batch hashes each key once and groups the keys by partition with a counting sort; the
 *   pull/push calls then take one partition lock at a time, so threads that own disjoint
 *   partitions (ps-server's partition threads) never meet.
 * - Pull: hash+split, probe with software prefetch of index slots, then copy with prefetch of
 *   rows, so the two dependent cache misses per key overlap across keys. Misses go to RocksDB
 *   in one MultiGet per partition.
 * - Push: a partition's keys are de-duplicated and their gradients summed first (ps_dedup, in
 *   order of position, so a result does not depend on hash layout), then each row gets one
 *   optimizer step in the same pipeline; a never-stored key passes admission first. A batch
 *   said to be unique (ps_store_batch_set_unique: ps_client sums duplicates before sending)
 *   skips the sum: its keys are gathered through the same probe, which stops at a repeat, and
 *   the gradients are read in place. The word is checked, not trusted: a partition with a
 *   repeat is summed as usual, since two optimizer steps are not one step of the sum (Adagrad)
 *   and two misses of one key would insert it twice.
 * - Warm (a prefetch): a pull's miss path without the copy out, so a batch's cold rows are in
 *   the hot tier before its pull; counted as prefetched, never as hits or misses. */
#include <string.h>

#include "ps_dedup.h"
#include "ps_rowcopy.h"
#include "ps_store_int.h"

struct ps_store_batch {
  const uint64_t *keys;
  size_t n;
  uint32_t nparts;
  uint32_t *order; /* key indices grouped by partition */
  uint64_t *hash;  /* hash of keys[order[i]] */
  size_t *start;   /* nparts + 1 offsets */
  bool unique;     /* the sender's word that keys are distinct (checked by the push) */
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

ps_status ps_store_batch_check_shard(const ps_store_batch *b, uint32_t shard, uint32_t nshards,
                                     size_t *pos) {
  if (!b) return PS_ERR_INVALID;
  if (nshards <= 1) return PS_OK;
  size_t first = SIZE_MAX;
  for (size_t k = 0; k < b->n; k++)
    if (ps_shard_of_hash(b->hash[k], nshards) != shard && b->order[k] < first) first = b->order[k];
  if (first == SIZE_MAX) return PS_OK;
  if (pos) *pos = first;
  return PS_ERR_WRONG_SHARD;
}

void ps_store_batch_destroy(ps_store_batch **bp) {
  if (!bp || !*bp) return;
  free((*bp)->order); /* the head of the one allocation */
  free(*bp);
  *bp = NULL;
}

void ps_store_batch_set_unique(ps_store_batch *b, bool unique) {
  if (b) b->unique = unique;
}

size_t ps_store_batch_part(const ps_store_batch *b, uint32_t part, const uint32_t **pos) {
  if (!b || part >= b->nparts) {
    if (pos) *pos = NULL;
    return 0;
  }
  if (pos) *pos = b->order + b->start[part];
  return b->start[part + 1] - b->start[part];
}

/* ---------------------------------------------------------------- pull */

/* Counts a call's n lookups, nmiss of them misses. With none missing the call is done: the
 * partition settles its write-back (a failing store tries its write-back on every call). */
static bool all_hit(ps_store *s, partition *pa, size_t n, size_t nmiss) {
  pa->hits += n - nmiss;
  pa->misses += nmiss;
  if (nmiss) return false;
  store_wb_settle(s, pa);
  return true;
}

/* The end of a partition's pull or warm: its miss scratch freed, its write-back settled. */
static ps_status miss_done(ps_store *s, partition *pa, uint64_t *mk, size_t *mi,
                           rocksdb_pinnableslice_t **vals, ps_status st) {
  free(mk);
  free(mi);
  free(vals);
  store_wb_settle(s, pa);
  return st;
}

/* How a pull writes its rows: widened from `from` (a 16-bit row type, into f32), or copied as
 * stored (from = PS_ROW_F32: an f32 table, or a pull in the row type), ob bytes a row. Worked
 * out once per call, so an f32 table's copy loop is what it was. */
typedef struct pull_out {
  ps_row_type from;
  size_t ob;
  uint32_t dim;
} pull_out;

static pull_out pull_out_of(const table *t, bool raw) {
  const bool widen = !raw && tab_narrow(t);
  return (pull_out){widen ? t->spec.row_type : PS_ROW_F32,
                    (size_t)t->spec.dim * ps_row_type_size(raw ? t->spec.row_type : PS_ROW_F32),
                    t->spec.dim};
}

/* Row i of a pull's output from stored values v. */
static inline void row_out(const pull_out *po, void *out, size_t i, const void *v) {
  if (po->from == PS_ROW_F32) ps_row_copy((char *)out + i * po->ob, v, po->ob);
  else ps_row_widen(po->from, v, (float *)out + i * po->dim, po->dim);
}

/* The initial row of a key never stored, into row i of a pull's output. */
static void init_out(const table *t, bool raw, void *out, size_t i, uint64_t key) {
  const uint32_t dim = t->spec.dim;
  if (!raw || !tab_narrow(t)) {
    ps_store_init_row(&t->spec, key, (float *)out + i * dim);
    return;
  }
  float v[PS_TABLE_MAX_DIM];
  ps_store_init_row(&t->spec, key, v); /* already rounded: narrowing it again is exact */
  ps_row_narrow(t->spec.row_type, v, (char *)out + i * dim * (size_t)2, dim);
}

static ps_status pull_part(ps_store *s, partition *pa, size_t ti, const uint64_t *keys,
                           const uint32_t *ord, const uint64_t *hs, size_t n, void *out,
                           bool raw, hentry **ents) {
  const table *t = &s->tables[ti];
  ptable *pt = &pa->tabs[ti];
  const uint32_t dim = t->spec.dim;
  const size_t vb = (size_t)dim * ps_row_type_size(t->spec.row_type); /* stored values */
  const pull_out po = pull_out_of(t, raw);
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
          const char *r = ent_row(e);
          __builtin_prefetch(r);
          __builtin_prefetch(r + vb - 1); /* values longer than a line, or not line-aligned */
        } else {
          nmiss++;
        }
      }
      if (i >= D) {
        hentry *e = ents[i - D];
        if (!e) continue;
        if (!(e->p & F_REF)) e->p |= F_REF;
        row_out(&po, out, ord[i - D], ent_row(e));
      }
    }
  } else {
    for (size_t i = 0; i < n; i++) ents[i] = NULL;
    nmiss = n;
  }
  if (all_hit(s, pa, n, nmiss)) return PS_OK;
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
  st = store_cold_multiget(s, t, mk, m, vals);
  if (st != PS_OK) {
    for (size_t j = 0; j < m; j++)
      if (vals[j]) rocksdb_pinnableslice_destroy(vals[j]);
    goto out;
  }
  for (size_t j = 0; j < m; j++) {
    size_t i = mi[j];
    if (!vals[j]) {
      init_out(t, raw, out, ord[i], mk[j]);
      continue;
    }
    size_t len;
    const char *v = rocksdb_pinnableslice_value(vals[j], &len);
    hentry *e = idx_find(pt, mk[j], hs[i]); /* a duplicate key inserted just before */
    if (e) {
      row_out(&po, out, ord[i], ent_row(e));
    } else {
      ps_status ls = PS_OK;
      hentry *le = store_hot_load(s, pa, ti, mk[j], hs[i], F_REF, v, len, &ls);
      const char *rec = le ? NULL : store_cold_row_of(t, v, len);
      if (le) {
        row_out(&po, out, ord[i], ent_row(le));
      } else if (ls != PS_ERR_CORRUPT && rec) {
        /* no room to cache it: served as read (a record's values are 4-aligned in it, but a
         * RocksDB value is not: copied before a 16-bit widening reads it as uint16_t) */
        uint16_t al[PS_TABLE_MAX_DIM];
        memcpy(al, rec + ROW_META, vb);
        row_out(&po, out, ord[i], tab_narrow(t) ? (const void *)al : rec + ROW_META);
      } else {
        if (ls == PS_ERR_CORRUPT) memset((char *)out + (size_t)ord[i] * po.ob, 0, po.ob);
        st = ls;
      }
    }
    rocksdb_pinnableslice_destroy(vals[j]);
  }
out:
  return miss_done(s, pa, mk, mi, vals, st);
}

static ps_status pull_batch(ps_store *s, uint32_t table_id, const ps_store_batch *b,
                           uint32_t first, uint32_t stride, void *out, bool raw) {
  if (!s || !b || stride == 0 || (b->n && !out) || b->nparts != s->nparts) return PS_ERR_INVALID;
  size_t ti;
  ps_status st;
  if (!store_read_table(s, table_id, &ti, &st) || !b->n) goto done;
  hentry **ents = malloc(b->n * sizeof(hentry *));
  if (!ents) st = PS_ERR_NOMEM;
  for (uint32_t p = first; st == PS_OK && p < s->nparts; p += stride) {
    size_t lo = b->start[p], hi = b->start[p + 1];
    if (lo == hi) continue;
    partition *pa = &s->parts[p];
    pthread_mutex_lock(&pa->mu);
    st = pull_part(s, pa, ti, b->keys, b->order + lo, b->hash + lo, hi - lo, out, raw, ents);
    pthread_mutex_unlock(&pa->mu);
  }
  free(ents);
done:
  pthread_rwlock_unlock(&s->lock);
  return st;
}

ps_status ps_store_pull_batch(ps_store *s, uint32_t table_id, const ps_store_batch *b,
                              uint32_t first, uint32_t stride, float *out) {
  return pull_batch(s, table_id, b, first, stride, out, false);
}

/* ---------------------------------------------------------------- warm (prefetch) */

/* Loads the partition's keys that are in RocksDB but not in memory into the hot tier, clean
 * and referenced (so CLOCK keeps them for the pull that follows), and replies nothing. A hit
 * only gets its reference bit; a key stored nowhere is left alone (its pull computes its
 * initial row, and admission is a push's business). Neither counts as a hit or miss: those
 * stay the pulls' and pushes' own, so a warm that worked shows as pulls that hit. Best effort:
 * no memory, or a full hot tier while writes fail, leaves a row cold (its pull reads it). */
static ps_status warm_part(ps_store *s, partition *pa, size_t ti, const uint64_t *keys,
                           const uint32_t *ord, const uint64_t *hs, size_t n) {
  const table *t = &s->tables[ti];
  ptable *pt = &pa->tabs[ti];
  uint64_t *mk = malloc(n * sizeof(uint64_t));
  size_t *mi = malloc(n * sizeof(size_t));
  rocksdb_pinnableslice_t **vals = malloc(n * sizeof(*vals));
  ps_status st = PS_OK;
  size_t m = 0;
  if (!mk || !mi || !vals) goto out;
  for (size_t i = 0; i < n; i++) {
    hentry *e = idx_find(pt, keys[ord[i]], hs[i]);
    if (e) e->p |= F_REF;
    else mk[m] = keys[ord[i]], mi[m++] = i;
  }
  if (!m) goto out;
  st = store_cold_multiget(s, t, mk, m, vals);
  for (size_t j = 0; j < m; j++) {
    if (!vals[j]) continue;
    size_t len;
    const char *v = rocksdb_pinnableslice_value(vals[j], &len);
    if (st == PS_OK && !idx_find(pt, mk[j], hs[mi[j]])) { /* not a duplicate loaded just now */
      ps_status ls = PS_OK;
      if (store_hot_load(s, pa, ti, mk[j], hs[mi[j]], F_REF, v, len, &ls)) pa->prefetched++;
      else if (ls == PS_ERR_CORRUPT) st = ls;
    }
    rocksdb_pinnableslice_destroy(vals[j]);
  }
out:
  return miss_done(s, pa, mk, mi, vals, st);
}

ps_status ps_store_warm_batch(ps_store *s, uint32_t table_id, const ps_store_batch *b,
                              uint32_t first, uint32_t stride) {
  if (!s || !b || stride == 0 || b->nparts != s->nparts) return PS_ERR_INVALID;
  size_t ti;
  ps_status st;
  if (!store_read_table(s, table_id, &ti, &st) || !b->n) goto done;
  for (uint32_t p = first; st == PS_OK && p < s->nparts; p += stride) {
    size_t lo = b->start[p], hi = b->start[p + 1];
    if (lo == hi) continue;
    partition *pa = &s->parts[p];
    pthread_mutex_lock(&pa->mu);
    st = warm_part(s, pa, ti, b->keys, b->order + lo, b->hash + lo, hi - lo);
    pthread_mutex_unlock(&pa->mu);
  }
done:
  pthread_rwlock_unlock(&s->lock);
  return st;
}

ps_status ps_store_warm(ps_store *s, uint32_t table_id, const uint64_t *keys, size_t n) {
  if (!s || (n && !keys)) return PS_ERR_INVALID;
  ps_store_batch *b;
  ps_status st = ps_store_batch_create(s, keys, n, &b);
  if (st != PS_OK) return st;
  st = ps_store_warm_batch(s, table_id, b, 0, 1);
  ps_store_batch_destroy(&b);
  return st;
}

/* One optimizer step for each of the u distinct keys uk (hashes uh) of partition pa; key i's
 * gradient is row gpos[i] of ug (row i when gpos is NULL: sums made by ps_dedup_sum_at). */
static ps_status push_part(ps_store *s, partition *pa, size_t ti, const uint64_t *uk,
                           const uint64_t *uh, const float *ug, const uint32_t *gpos, size_t u,
                           size_t *miss_i, hentry **ents) {
  const uint64_t step = atomic_load_explicit(&s->step, memory_order_relaxed);
  const table *t = &s->tables[ti];
  ptable *pt = &pa->tabs[ti];
  const uint32_t dim = t->spec.dim;
  size_t nmiss = 0;
  ps_status st = PS_OK;
  store_track_keys(s, pa, ti, uk, uh, u); /* for the next delta checkpoint */
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
        e->p |= F_REF;
        mark_dirty(pa, t->alloc_bytes, e);
        store_apply_grad(t, e, ug + (gpos ? gpos[j] : j) * dim, step);
      }
    }
  } else {
    for (size_t i = 0; i < u; i++) miss_i[nmiss++] = i;
  }
  if (all_hit(s, pa, u, nmiss)) return PS_OK;
  uint64_t *mk = malloc(nmiss * sizeof(uint64_t));
  rocksdb_pinnableslice_t **vals = malloc(nmiss * sizeof(*vals));
  if (!mk || !vals) {
    st = PS_ERR_NOMEM;
    goto out;
  }
  for (size_t j = 0; j < nmiss; j++) mk[j] = uk[miss_i[j]];
  st = store_cold_multiget(s, t, mk, nmiss, vals);
  for (size_t j = 0; j < nmiss; j++) {
    if (st != PS_OK) {
      if (vals[j]) rocksdb_pinnableslice_destroy(vals[j]);
      continue;
    }
    const size_t i = miss_i[j];
    const float *g = ug + (gpos ? gpos[i] : i) * dim;
    if (!vals[j]) {
      /* Not stored anywhere: feature admission decides whether it gets a row. */
      if (t->spec.admit_threshold > 1 && pt->cms &&
          store_cms_bump(pt, uh[i]) < t->spec.admit_threshold) {
        pa->pending++;
        continue;
      }
      hentry *e = store_hot_insert(s, pa, ti, uk[i], uh[i], F_REF | F_DIRTY);
      if (!e) {
        st = PS_ERR_NOMEM;
        continue;
      }
      store_init_full_row(t, uk[i], e, step);
      store_apply_grad(t, e, g, step);
      pa->admitted++;
      continue;
    }
    size_t len;
    const char *v = rocksdb_pinnableslice_value(vals[j], &len);
    hentry *e = store_hot_load(s, pa, ti, uk[i], uh[i], F_REF | F_DIRTY, v, len, &st);
    if (e) store_apply_grad(t, e, g, step);
    rocksdb_pinnableslice_destroy(vals[j]);
  }
out:
  free(mk);
  free(vals);
  store_wb_settle(s, pa);
  return st;
}

ps_status ps_store_push_batch(ps_store *s, uint32_t table_id, const ps_store_batch *b,
                              uint32_t first, uint32_t stride, const float *grads) {
  if (!s || !b || stride == 0 || (b->n && !grads) || b->nparts != s->nparts || s->opt.read_only)
    return PS_ERR_INVALID;
  size_t ti;
  ps_status st;
  const table *t = store_read_table(s, table_id, &ti, &st);
  if (!t) goto done;
  /* Scratch sized for the largest partition served here, not for the whole batch. */
  size_t n = 0;
  for (uint32_t p = first; p < s->nparts; p += stride)
    if (b->start[p + 1] - b->start[p] > n) n = b->start[p + 1] - b->start[p];
  if (!n) goto done;
  const uint32_t dim = t->spec.dim;
  ps_dedup *dd = NULL;
  uint64_t *uk = malloc(n * sizeof(uint64_t));
  uint64_t *uh = malloc(n * sizeof(uint64_t));
  float *ug = malloc(n * dim * sizeof(float));
  size_t *mi = malloc(n * sizeof(size_t));
  hentry **ents = malloc(n * sizeof(hentry *));
  if (ps_dedup_create(&dd) != PS_OK || !uk || !uh || !ug || !mi || !ents)
    st = PS_ERR_NOMEM;
  for (uint32_t p = first; st == PS_OK && p < s->nparts; p += stride) {
    size_t lo = b->start[p], hi = b->start[p + 1], u = 0;
    if (lo == hi) continue;
    const uint32_t *ord = b->order + lo;
    const uint64_t *hs = b->hash + lo;
    /* Said unique and found so: the keys gathered, hashes and gradients used where they are. */
    if (b->unique &&
        (st = ps_dedup_gather_unique_at(dd, b->keys, ord, hs, hi - lo, uk, &u)) != PS_OK)
      break;
    const bool gathered = b->unique && u == hi - lo;
    /* Else the partition's unique keys (first-appearance order), their hashes, and their
     * gradients summed in float in order of position. */
    if (!gathered &&
        (st = ps_dedup_sum_at(dd, b->keys, ord, hs, hi - lo, grads, dim, uk, uh, ug, &u)) != PS_OK)
      break;
    partition *pa = &s->parts[p];
    pthread_mutex_lock(&pa->mu);
    st = gathered ? push_part(s, pa, ti, uk, hs, grads, ord, u, mi, ents)
                  : push_part(s, pa, ti, uk, uh, ug, NULL, u, mi, ents);
    pthread_mutex_unlock(&pa->mu);
  }
  free(ents);
  free(uk);
  free(uh);
  free(ug);
  free(mi);
  ps_dedup_destroy(&dd);
done:
  pthread_rwlock_unlock(&s->lock);
  return st;
}

/* The whole-batch calls: one batch over every partition (out for a pull, in the row type when
 * raw; grads for a push). */
static ps_status whole(ps_store *s, uint32_t table_id, const uint64_t *keys, size_t n, void *out,
                       bool raw, const float *grads) {
  if (!s || (n && (!keys || (!out && !grads)))) return PS_ERR_INVALID;
  ps_store_batch *b;
  ps_status st = ps_store_batch_create(s, keys, n, &b);
  if (st != PS_OK) return st;
  st = out ? pull_batch(s, table_id, b, 0, 1, out, raw)
           : ps_store_push_batch(s, table_id, b, 0, 1, grads);
  ps_store_batch_destroy(&b);
  return st;
}

ps_status ps_store_pull(ps_store *s, uint32_t table_id, const uint64_t *keys, size_t n,
                        float *out) {
  return whole(s, table_id, keys, n, out, false, NULL);
}

ps_status ps_store_pull_rows(ps_store *s, uint32_t table_id, const uint64_t *keys, size_t n,
                             void *out) {
  return whole(s, table_id, keys, n, out, true, NULL);
}

ps_status ps_store_push(ps_store *s, uint32_t table_id, const uint64_t *keys, size_t n,
                        const float *grads) {
  return whole(s, table_id, keys, n, NULL, false, grads);
}

/* ps_store_delta: incremental checkpoints — which rows changed since the last checkpoint, and
 * writing a checkpoint as a delta of only those (ps_store.h has the API, ps_store_manifest.c
 * the manifest, ps_store_chain.c the composition of a chain).
 *
 * - Changed rows are known from a key set per partition and table, kept by push (every key a
 *   push touches) and by expiry (every key it removes), under the partition's own lock. We
 *   chose the set over the rows' last-step metadata: finding the rows with last_step > S means
 *   scanning every row of the cold tier (O(rows) for 1% changed), and a row removed by expiry
 *   leaves no row to carry a step. The set costs one probe per pushed key, 8 bytes per changed
 *   key at most 70% full, and exists only once the store took its first checkpoint (or was
 *   restored): a store that never checkpoints tracks nothing.
 * - A checkpoint copies the sets (under the store's exclusive lock, as a snapshot) and empties
 *   them only once its files are written; the copied keys stay pending until the commit drops
 *   them or an abort puts them back, so an aborted delta loses no change and the next one
 *   includes it.
 * - A delta reads each changed key's current record from the hot tier or RocksDB: present, the
 *   whole record (values, optimizer state, metadata) goes into the table's SST file; absent
 *   (expired, or pushed but never admitted), a tombstone. The delta does not flush: its cost is
 *   its rows, not the store's size.
 * - Ids are random (getrandom): a base that was written again, or a checkpoint copied from
 *   another run, has another id, so a stale link cannot pass for a good one. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_fs.h"
#include "ps_log.h"
#include "ps_store_int.h"

/* ------------------------------------------------------------ key sets */

static bool set_grow(ptable *pt) {
  size_t nc = pt->chg_cap ? 2 * pt->chg_cap : 64;
  uint64_t *ns = calloc(nc, sizeof *ns);
  if (!ns) return false;
  for (size_t i = 0; i < pt->chg_cap; i++) {
    uint64_t k = pt->chg[i];
    if (!k) continue;
    size_t j = key_hash(k) & (nc - 1);
    while (ns[j]) j = (j + 1) & (nc - 1);
    ns[j] = k;
  }
  free(pt->chg);
  pt->chg = ns;
  pt->chg_cap = nc;
  return true;
}

/* Adds key (hash h = key_hash(key)); false when out of memory (the change is then not
 * recorded). */
static bool set_add(ptable *pt, uint64_t key, uint64_t h) {
  if (!key) return pt->chg_zero = true;
  if ((pt->chg_n + 1) * 10 > pt->chg_cap * 7 && !set_grow(pt)) return false;
  const size_t mask = pt->chg_cap - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    if (pt->chg[i] == key) return true;
    if (!pt->chg[i]) {
      pt->chg[i] = key;
      pt->chg_n++;
      return true;
    }
  }
}

static void set_clear(ptable *pt) {
  if (pt->chg) memset(pt->chg, 0, pt->chg_cap * sizeof *pt->chg);
  pt->chg_n = 0;
  pt->chg_zero = false;
}

void store_track_keys(ps_store *s, partition *pa, size_t ti, const uint64_t *keys,
                      const uint64_t *hashes, size_t n) {
  if (!s->track) return;
  ptable *pt = &pa->tabs[ti];
  /* Room first, so the slots prefetched below stay where they are. */
  while ((pt->chg_n + n) * 10 > pt->chg_cap * 7)
    if (!set_grow(pt)) {
      atomic_store(&s->track_lost, 1);
      return;
    }
  enum { AHEAD = 8 };
  const size_t mask = pt->chg_cap - 1;
  for (size_t i = 0; i < n; i++) {
    if (i + AHEAD < n) __builtin_prefetch(&pt->chg[hashes[i + AHEAD] & mask], 1);
    set_add(pt, keys[i], hashes[i]);
  }
}

static void pend_free(ps_store *s) {
  for (size_t i = 0; i < s->npendk; i++) free(s->pendk[i].keys);
  free(s->pendk);
  s->pendk = NULL;
  s->npendk = 0;
  store_ckpt_ref_clear(&s->pend);
}

void store_track_reset(ps_store *s) {
  for (uint32_t p = 0; p < s->nparts; p++)
    for (size_t t = 0; s->parts[p].tabs && t < s->ntables; t++) set_clear(&s->parts[p].tabs[t]);
  pend_free(s);
  store_ckpt_ref_clear(&s->base);
  s->track = false;
  atomic_store(&s->track_lost, 0);
}

static int key_cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Every table's changed keys, sorted (store write-locked): k[ti] of n[ti] keys. */
static ps_status gather(ps_store *s, uint64_t **k, size_t *n) {
  for (size_t t = 0; t < s->ntables; t++) {
    size_t total = 0;
    for (uint32_t p = 0; p < s->nparts; p++)
      total += s->parts[p].tabs[t].chg_n + s->parts[p].tabs[t].chg_zero;
    k[t] = malloc((total ? total : 1) * sizeof **k);
    if (!k[t]) return PS_ERR_NOMEM;
    size_t m = 0;
    for (uint32_t p = 0; p < s->nparts; p++) {
      const ptable *pt = &s->parts[p].tabs[t];
      if (pt->chg_zero) k[t][m++] = 0;
      for (size_t i = 0; i < pt->chg_cap; i++)
        if (pt->chg[i]) k[t][m++] = pt->chg[i];
    }
    qsort(k[t], m, sizeof **k, key_cmp);
    n[t] = m;
  }
  return PS_OK;
}

/* ------------------------------------------------------------- writing */

/* Writes table ti's changed keys (sorted) as dir/t<id>.sst: each key's current record, or a
 * tombstone when it has none. Fills the manifest's counts. */
static ps_status write_table(ps_store *s, size_t ti, const uint64_t *keys, size_t n,
                             const char *dir, store_manifest_table *mt, ps_error *err) {
  const table *t = &s->tables[ti];
  mt->spec = t->spec;
  if (!n) return PS_OK;
  char file[4200];
  snprintf(file, sizeof file, "%s/t%u.sst", dir, t->spec.id);
  char *val = malloc(t->rec_bytes), *rerr = NULL;
  if (!val) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  memcpy(val, t->hdr, REC_HDR);
  rocksdb_envoptions_t *eo = rocksdb_envoptions_create();
  rocksdb_sstfilewriter_t *w = rocksdb_sstfilewriter_create(eo, s->dbopt);
  rocksdb_sstfilewriter_open(w, file, &rerr);
  ps_status st = PS_OK;
  for (size_t i = 0; !rerr && st == PS_OK && i < n; i++) {
    char kb[8];
    key_be(keys[i], kb);
    uint64_t h = key_hash(keys[i]);
    hentry *e = idx_find(&s->parts[part_of_hash(h, s->nparts)].tabs[ti], keys[i], h);
    if (e) {
      rec_fill(t, e, val);
      rocksdb_sstfilewriter_put(w, kb, 8, val, t->rec_bytes, &rerr);
      mt->rows++;
      continue;
    }
    size_t vl = 0;
    char *v = rocksdb_get_cf(s->db, s->ro, t->cf, kb, 8, &vl, &rerr);
    if (rerr) break;
    if (!v) {
      rocksdb_sstfilewriter_delete(w, kb, 8, &rerr);
      mt->tombstones++;
    } else if ((st = store_cold_decode(t, keys[i], v, vl, val + REC_HDR, val + REC_HDR + ROW_META,
                                       err)) == PS_OK) {
      rocksdb_sstfilewriter_put(w, kb, 8, val, t->rec_bytes, &rerr);
      mt->rows++;
    }
    free(v);
  }
  if (!rerr && st == PS_OK) rocksdb_sstfilewriter_finish(w, &rerr);
  if (rerr) st = store_rdb_error(err, "writing a delta", rerr);
  rocksdb_sstfilewriter_destroy(w);
  rocksdb_envoptions_destroy(eo);
  free(val);
  if (st == PS_OK && store_delta_file_sum(file, &mt->sum, &mt->bytes) != PS_OK)
    st = ps_error_set(err, PS_ERR_IO, "reading back %s: %s", file, strerror(errno));
  return st;
}

/* The path of `to` relative to the directory `from` (both canonical and absolute). */
static void rel_path(const char *from, const char *to, char *out, size_t len) {
  size_t i = 0, common = 0;
  while (from[i] && from[i] == to[i]) {
    if (from[i] == '/') common = i;
    i++;
  }
  if (!from[i] && (to[i] == '/' || !to[i])) common = i; /* from is a prefix of to */
  out[0] = '\0';
  for (const char *p = from + common; *p; p++)
    if (*p == '/') strncat(out, "../", len - strlen(out) - 1);
  const char *rest = to[common] == '/' ? to + common + 1 : to + common;
  strncat(out, rest[0] ? rest : ".", len - strlen(out) - 1);
}

/* Writes a delta against s->base into dir (store write-locked). */
static ps_status write_delta(ps_store *s, const char *dir, uint64_t **k, const size_t *n,
                             store_manifest *m, ps_error *err) {
  char parent[PATH_MAX], abs[PATH_MAX];
  snprintf(parent, sizeof parent, "%s", dir);
  char *slash = strrchr(parent, '/');
  if (slash && slash != parent) *slash = '\0';
  else snprintf(parent, sizeof parent, "%s", slash ? "/" : ".");
  if (!realpath(parent, abs))
    return ps_error_set(err, PS_ERR_IO, "delta %s: %s: %s", dir, parent, strerror(errno));
  if (mkdir(dir, 0755) != 0)
    return ps_error_set(err, PS_ERR_IO, "delta %s: %s", dir, strerror(errno));
  m->delta = true;
  m->base_step = s->base.step;
  m->base_id = s->base.id;
  m->depth = s->base.depth + 1;
  rel_path(abs, s->base.dir, m->base, sizeof m->base);
  m->tables = calloc(s->ntables ? s->ntables : 1, sizeof *m->tables);
  if (!m->tables) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  m->ntables = s->ntables;
  ps_status st = PS_OK;
  for (size_t t = 0; st == PS_OK && t < s->ntables; t++)
    st = write_table(s, t, k[t], n[t], dir, &m->tables[t], err);
  return st;
}

/* A full checkpoint's manifest lists its tables too, with no file (rows 0): their specs, so a
 * restore can be checked against the declared tables' row types without opening it. */
static ps_status full_tables(ps_store *s, store_manifest *m, ps_error *err) {
  m->tables = calloc(s->ntables ? s->ntables : 1, sizeof *m->tables);
  if (!m->tables) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  m->ntables = s->ntables;
  for (size_t t = 0; t < s->ntables; t++) m->tables[t].spec = s->tables[t].spec;
  return PS_OK;
}

ps_status ps_store_checkpoint(ps_store *s, const char *dir, uint64_t step, uint32_t max_depth,
                              ps_store_ckpt_info *info, ps_error *err) {
  if (!s || !dir || !dir[0] || s->opt.read_only)
    return ps_error_set(err, PS_ERR_INVALID, "checkpoint: no store or dir, or a read-only store");
  struct stat sb;
  if (stat(dir, &sb) == 0)
    return ps_error_set(err, PS_ERR_INVALID, "checkpoint: %s already exists", dir);
  ps_error local;
  if (!err) err = &local;
  store_manifest m;
  memset(&m, 0, sizeof m);
  m.step = step;
  if (getrandom(&m.id, sizeof m.id, 0) != (ssize_t)sizeof m.id)
    return ps_error_set(err, PS_ERR_IO, "checkpoint: no random id: %s", strerror(errno));
  pthread_rwlock_wrlock(&s->lock);
  ps_status st = PS_OK;
  if (s->pend.have)
    st = ps_error_set(err, PS_ERR_CONFLICT, "checkpoint: the one of step %" PRIu64 " in %s is "
                      "neither committed nor aborted", s->pend.step, s->pend.dir);
  uint64_t **k = st == PS_OK ? calloc(s->ntables + 1, sizeof *k) : NULL;
  size_t *n = st == PS_OK ? calloc(s->ntables + 1, sizeof *n) : NULL;
  if (st == PS_OK && (!k || !n)) st = ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  if (st == PS_OK && gather(s, k, n) != PS_OK)
    st = ps_error_set(err, PS_ERR_NOMEM, "checkpoint: no memory for the changed keys");
  bool delta = st == PS_OK && max_depth > 0 && s->track && s->base.have &&
               s->base.depth < max_depth && !atomic_load(&s->track_lost);
  if (st == PS_OK)
    st = delta ? write_delta(s, dir, k, n, &m, err) : store_snapshot_locked(s, dir, err);
  if (st == PS_OK && !delta) st = full_tables(s, &m, err);
  if (st == PS_OK) st = store_manifest_write(dir, &m, err);
  store_pend_keys *pk = NULL;
  char *pdir = NULL;
  if (st == PS_OK) {
    /* Written: the keys move aside until the commit or abort, and from now on pushes are
     * tracked against this checkpoint. */
    pk = calloc(s->ntables + 1, sizeof *pk);
    pdir = strdup(dir);
    if (!pk || !pdir) st = ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  }
  if (st == PS_OK) {
    s->pendk = pk;
    s->pend.dir = pdir;
    for (size_t t = 0; t < s->ntables; t++) {
      s->pendk[t] = (store_pend_keys){s->tables[t].spec.id, k[t], n[t]};
      k[t] = NULL;
      for (uint32_t p = 0; p < s->nparts; p++) set_clear(&s->parts[p].tabs[t]);
    }
    s->npendk = s->ntables;
    s->pend.have = true;
    s->pend.id = m.id;
    s->pend.step = step;
    s->pend.depth = m.depth;
    if (!delta) atomic_store(&s->track_lost, 0); /* a full checkpoint needs no history */
    s->track = true;
    if (info) {
      memset(info, 0, sizeof *info);
      info->delta = delta;
      info->id = m.id;
      info->base_step = m.base_step;
      info->base_id = m.base_id;
      info->depth = m.depth;
      for (size_t t = 0; t < m.ntables; t++) {
        info->rows += m.tables[t].rows;
        info->tombstones += m.tables[t].tombstones;
      }
      /* A full snapshot holds every row, all written to RocksDB by now: its estimate (the
       * log said "0 rows" of a snapshot of 24,684). */
      for (size_t t = 0; !delta && t < s->ntables; t++) info->rows += store_cold_rows(s, t);
    }
  } else {
    free(pk);
    free(pdir);
    if (!s->pend.have || strcmp(s->pend.dir, dir) != 0)
      ps_rm_rf(dir); /* it did not exist when called */
  }
  for (size_t t = 0; k && t < s->ntables; t++) free(k[t]);
  free(k);
  free(n);
  pthread_rwlock_unlock(&s->lock);
  store_manifest_free(&m);
  if (st == PS_OK)
    PS_INFO("store %s: %s checkpoint of step %" PRIu64 " in %s", s->path,
            delta ? "delta" : "full", step, dir);
  return st;
}

ps_status ps_store_checkpoint_commit(ps_store *s, const char *final_dir, ps_error *err) {
  if (!s || !final_dir) return ps_error_set(err, PS_ERR_INVALID, "commit: no store or dir");
  char abs[PATH_MAX];
  if (!realpath(final_dir, abs))
    return ps_error_set(err, PS_ERR_IO, "commit: %s: %s", final_dir, strerror(errno));
  pthread_rwlock_wrlock(&s->lock);
  ps_status st = PS_OK;
  if (!s->pend.have) {
    st = ps_error_set(err, PS_ERR_NOT_FOUND, "commit: store %s has no pending checkpoint",
                      s->path);
  } else {
    char *d = strdup(abs);
    if (!d) {
      st = ps_error_set(err, PS_ERR_NOMEM, "out of memory");
    } else {
      store_ckpt_ref_clear(&s->base);
      s->base = s->pend;
      free(s->base.dir);
      s->base.dir = d;
      s->pend.dir = NULL;
      pend_free(s);
    }
  }
  pthread_rwlock_unlock(&s->lock);
  return st;
}

void ps_store_checkpoint_abort(ps_store *s) {
  if (!s) return;
  pthread_rwlock_wrlock(&s->lock);
  for (size_t i = 0; s->pend.have && i < s->npendk; i++) {
    size_t ti;
    if (!find_table(s, s->pendk[i].table, &ti)) continue;
    for (size_t j = 0; j < s->pendk[i].n; j++) {
      uint64_t key = s->pendk[i].keys[j];
      uint64_t h = key_hash(key);
      partition *pa = &s->parts[part_of_hash(h, s->nparts)];
      if (!set_add(&pa->tabs[ti], key, h)) atomic_store(&s->track_lost, 1);
    }
  }
  pend_free(s);
  pthread_rwlock_unlock(&s->lock);
}

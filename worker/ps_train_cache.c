/* ps_train_cache.c: ps-worker's row cache (--row-cache-mb; docs/DESIGN.md, "The worker's row
 * cache") -- the cache itself, and how a slot's pull uses it.
 *
 * The cache is set-associative: a key hashes to one set of PS_ROWCACHE_WAYS entries, looked up
 * by a scan and, when full, the entry of the oldest version evicted. No tombstones, no
 * rehashing, memory fixed at creation: the bound in MB is exact and a step allocates nothing.
 *
 * Which rows a pull of step `step` may take from the cache:
 * - sync, a lookahead (PULL(step) of batch step + 1, refreshed after STEP(step)): a row at
 *   most PS_TRAIN_CACHE_SYNC_AGE steps older than the lookahead. The refresh asks for the rows
 *   changed since the oldest version used, so every cached row that changed comes back and the
 *   step trains on exactly PULL(step + 1)'s rows. The age is 0: only the rows of this worker's
 *   batch `step` (version `step`), whose refresh since `step` is the one the lookahead sends
 *   anyway -- the cache then saves their fetch in the lookahead and adds nothing after the
 *   step. An older row is changed by this worker's own push in the step that last used it, so
 *   it always comes back in the refresh, on the critical path, and its older `since` also
 *   re-sends the misses changed since: measured slower (age 30: bench/RESULTS-e2e.md, "The
 *   worker's row cache"). Any age up to 31 stays exact (a refresh of step s covers
 *   [since, s) only when s - since <= 32, the shards' record, server/ps_server_refresh.c).
 * - sync, any other pull (no refresh follows): none -- nothing would make it exact.
 * - ssp:K: a row whose version is at least step - K, used as it is (counted in
 *   cache_max_age, which the summary reports).
 * Every pull's fetched rows (and, after a refresh, every row of the batch) are stored at the
 * pull's version. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ps_hash.h"
#include "ps_train_cache.h"
#include "ps_train_int.h"

#define PS_ROWCACHE_WAYS 8
#define PS_ROWCACHE_EMPTY UINT64_MAX
/* sync: how many steps older than the lookahead a cached row may be (see the top; <= 31) */
#define PS_TRAIN_CACHE_SYNC_AGE 0

struct ps_rowcache {
  size_t nsets, dim;
  uint64_t *keys;
  uint64_t *vers; /* PS_ROWCACHE_EMPTY: a free entry */
  float *rows;
};

ps_status ps_rowcache_create(size_t mb, int dim, ps_rowcache **out) {
  *out = NULL;
  size_t per = (size_t)dim * sizeof(float) + 2 * sizeof(uint64_t);
  size_t nsets = (mb << 20) / per / PS_ROWCACHE_WAYS;
  if (nsets == 0 || dim <= 0) return PS_ERR_NOMEM;
  ps_rowcache *c = calloc(1, sizeof *c);
  if (!c) return PS_ERR_NOMEM;
  size_t n = nsets * PS_ROWCACHE_WAYS;
  c->nsets = nsets;
  c->dim = (size_t)dim;
  c->keys = malloc(n * sizeof *c->keys);
  c->vers = malloc(n * sizeof *c->vers);
  c->rows = malloc(n * c->dim * sizeof *c->rows);
  if (!c->keys || !c->vers || !c->rows) {
    ps_rowcache_destroy(&c);
    return PS_ERR_NOMEM;
  }
  for (size_t i = 0; i < n; i++) c->vers[i] = PS_ROWCACHE_EMPTY;
  *out = c;
  return PS_OK;
}

void ps_rowcache_destroy(ps_rowcache **c) {
  if (!*c) return;
  free((*c)->keys);
  free((*c)->vers);
  free((*c)->rows);
  free(*c);
  *c = NULL;
}

size_t ps_rowcache_capacity(const ps_rowcache *c) { return c->nsets * PS_ROWCACHE_WAYS; }

static size_t set_of(const ps_rowcache *c, uint64_t key) {
  /* the hash's high bits scaled to [0, nsets): no modulo, any number of sets */
  return (size_t)(((ps_mix64(key) >> 32) * (uint64_t)c->nsets) >> 32) * PS_ROWCACHE_WAYS;
}

static size_t find(const ps_rowcache *c, size_t set, uint64_t key) {
  for (size_t i = set; i < set + PS_ROWCACHE_WAYS; i++)
    if (c->vers[i] != PS_ROWCACHE_EMPTY && c->keys[i] == key) return i;
  return SIZE_MAX;
}

bool ps_rowcache_get(const ps_rowcache *c, uint64_t key, uint64_t min_version, float *row,
                     uint64_t *version) {
  size_t i = find(c, set_of(c, key), key);
  if (i == SIZE_MAX || c->vers[i] < min_version) return false;
  memcpy(row, c->rows + i * c->dim, c->dim * sizeof *row);
  *version = c->vers[i];
  return true;
}

void ps_rowcache_put(ps_rowcache *c, uint64_t key, const float *row, uint64_t version) {
  size_t set = set_of(c, key), i = find(c, set, key);
  if (i == SIZE_MAX) {
    i = set; /* a free entry, else the oldest version's */
    for (size_t j = set; j < set + PS_ROWCACHE_WAYS; j++) {
      if (c->vers[j] == PS_ROWCACHE_EMPTY) {
        i = j;
        break;
      }
      if (c->vers[j] < c->vers[i]) i = j;
    }
  }
  c->keys[i] = key;
  c->vers[i] = version;
  memcpy(c->rows + i * c->dim, row, c->dim * sizeof *row);
}

/* ------------------------------------------------------------------ the trainer's side */

/* The slot's miss buffers, as large as its key buffers. */
static ps_status grow_miss(ps_trainer *t, ps_train_slot *s) {
  if (s->mcap >= s->cap) return PS_OK;
  uint64_t *k = realloc(s->mkeys, s->cap * sizeof *k);
  if (k) s->mkeys = k;
  uint32_t *p = realloc(s->mpos, s->cap * sizeof *p);
  if (p) s->mpos = p;
  ps_kern_host_free(t->kern, s->mrows);
  s->mrows = NULL;
  if (!k || !p) return PS_ERR_NOMEM;
  PS_TRAIN_TRY(ps_kern_host_alloc(t->kern, s->cap * (size_t)t->dim * sizeof(float),
                                  (void **)&s->mrows));
  s->mcap = s->cap;
  return PS_OK;
}

ps_status ps_train_pull_start(ps_trainer *t, ps_train_slot *s, uint64_t step, bool look) {
  const ps_train_config *c = t->cfg;
  const ps_train_plan *p = t->plan;
  const size_t d = (size_t)t->dim, n = s->nunique;
  if (c->row_cache_mb > 0 && !t->rc) {
    ps_status st = ps_rowcache_create((size_t)c->row_cache_mb, t->dim, &t->rc);
    if (st != PS_OK) {
      PS_ERROR("--row-cache-mb %" PRId64 ": no room for one set of rows", c->row_cache_mb);
      return st;
    }
  }
  const bool ssp = p->consistency == PS_CONS_SSP;
  const bool use = t->rc && (look || ssp);
  uint64_t back = look ? PS_TRAIN_CACHE_SYNC_AGE : p->staleness;
  uint64_t minv = step > back ? step - back : 0;
  size_t nm = 0;
  s->refresh = false;
  if (use) {
    PS_TRAIN_TRY(grow_miss(t, s));
    for (size_t i = 0; i < n; i++) {
      uint64_t v;
      t->cache_lookups++;
      if (ps_rowcache_get(t->rc, s->unique[i], minv, s->rows + i * d, &v)) {
        t->cache_hits++;
        if (v < s->oldest) s->oldest = v;
        if (!look && step > v && step - v > t->cache_max_age) t->cache_max_age = step - v;
      } else {
        s->mkeys[nm] = s->unique[i];
        s->mpos[nm++] = (uint32_t)i;
      }
    }
  }
  /* No hit: the pull is today's, straight into the slot's rows. */
  const bool split = use && nm < n;
  s->npulled = split ? nm : n;
  s->scattered = !split;
  /* With the cache, the fetch is always `look`: ps_train_slot_wait lands it, then a refresh. */
  ps_client_req **r = look || t->rc ? &s->look : &s->pull;
  if (s->npulled == 0) return PS_OK;
  ps_status st = ps_client_pull_start(t->cl, PS_TRAIN_TABLE_ID, step, split ? s->mkeys : s->unique,
                                      s->npulled, true, split ? s->mrows : s->rows, r, &t->cerr);
  if (st != PS_OK) return ps_train_client_fail(t, "pull", st);
  return PS_OK;
}

void ps_train_cache_landed(ps_trainer *t, ps_train_slot *s) {
  if (s->scattered) return;
  const size_t d = (size_t)t->dim;
  for (size_t i = 0; i < s->npulled; i++)
    memcpy(s->rows + (size_t)s->mpos[i] * d, s->mrows + i * d, d * sizeof(float));
  s->scattered = true;
}

void ps_train_cache_keep(ps_trainer *t, ps_train_slot *s) {
  if (!t->rc) return;
  const size_t d = (size_t)t->dim;
  /* After a refresh every row is PULL(step)'s; else only the fetched ones are new. */
  if (s->refresh || s->npulled == s->nunique) {
    for (size_t i = 0; i < s->nunique; i++)
      ps_rowcache_put(t->rc, s->unique[i], s->rows + i * d, s->step);
  } else {
    for (size_t i = 0; i < s->npulled; i++)
      ps_rowcache_put(t->rc, s->mkeys[i], s->mrows + i * d, s->step);
  }
  s->refresh = false;
}

void ps_train_cache_free(ps_trainer *t) {
  for (int i = 0; i < 2; i++) {
    ps_train_slot *s = &t->slots[i];
    free(s->mkeys);
    free(s->mpos);
    ps_kern_host_free(t->kern, s->mrows);
  }
  ps_rowcache_destroy(&t->rc);
}

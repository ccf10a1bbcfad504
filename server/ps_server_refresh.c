/* ps_server_refresh: what each sync step changed, and the REFRESH op that answers with only
 * those rows (docs/PROTOCOL.md, "Lookahead pulls and refreshes").
 *
 * A worker that knows its next batch pulls its rows early (a PULL of the step it is on, which a
 * sync shard answers at once), overlapping that pull with its compute; once the step is applied
 * it asks again with a REFRESH of the same keys, and gets back only the rows the step changed.
 * For that, a sync table keeps, per step, the set of keys its pushes carried (by every worker):
 * a sync step changes a row only by applying the buffered pushes of that step, so a key pushed
 * in no step of [since, step) has the value it had with every step below `since` applied.
 * Recording a key that ends up not changing (a push refused after it was noted) only sends a
 * row again; never recording one would send a stale row, so every uncertainty answers with
 * every row: a step whose record was overwritten or could not be allocated, a step before the
 * record began (a restart, a restore), a table whose rows change otherwise (TTL expiry,
 * admission) or outside sync (ssp and async apply pushes as they come, and keep no record). */
#include <stdlib.h>
#include <string.h>

#include "ps_hash.h"
#include "ps_log.h"
#include "ps_server_int.h"
#include "ps_server_partition_threads_int.h"
#include "ps_server_refresh_int.h"

/* Steps of history: twice the sync window, so that a refresh answered late (parked for memory)
 * still finds the steps it asks about while the workers buffer up to SRV_WINDOW ahead. */
#define CHG_SLOTS (2u * SRV_WINDOW)

typedef struct chg_slot {
  uint64_t step;   /* the step whose keys it holds, when has */
  bool has;
  bool lost;       /* a key could not be recorded (no memory): the step's changes are unknown */
  uint64_t *keys;  /* open addressing, cap a power of two; used[] marks the taken entries */
  uint8_t *used;
  size_t n, cap;
} chg_slot;

struct srv_changed {
  uint64_t from;   /* every push of a step >= from was recorded */
  chg_slot slot[CHG_SLOTS];
};

static void slot_clear(chg_slot *sl, uint64_t step) {
  if (sl->n) memset(sl->used, 0, sl->cap);
  sl->n = 0;
  sl->step = step;
  sl->has = true;
  sl->lost = false;
}

static bool slot_has(const chg_slot *sl, uint64_t key) {
  if (!sl->cap) return false;
  size_t m = sl->cap - 1;
  for (size_t i = (size_t)ps_mix64(key) & m;; i = (i + 1) & m) {
    if (!sl->used[i]) return false;
    if (sl->keys[i] == key) return true;
  }
}

static bool slot_grow(chg_slot *sl) {
  size_t cap = sl->cap ? sl->cap * 2 : 1024;
  uint64_t *k = malloc(cap * sizeof *k);
  uint8_t *u = calloc(cap, 1);
  if (!k || !u) {
    free(k);
    free(u);
    return false;
  }
  for (size_t i = 0; i < sl->cap; i++) {
    if (!sl->used[i]) continue;
    size_t j = (size_t)ps_mix64(sl->keys[i]) & (cap - 1);
    while (u[j]) j = (j + 1) & (cap - 1);
    u[j] = 1;
    k[j] = sl->keys[i];
  }
  free(sl->keys);
  free(sl->used);
  sl->keys = k;
  sl->used = u;
  sl->cap = cap;
  return true;
}

static void slot_add(chg_slot *sl, uint64_t key) {
  if (sl->lost) return;
  if (2 * (sl->n + 1) > sl->cap && !slot_grow(sl)) {
    sl->lost = true;
    return;
  }
  size_t m = sl->cap - 1, i = (size_t)ps_mix64(key) & m;
  for (; sl->used[i]; i = (i + 1) & m)
    if (sl->keys[i] == key) return;
  sl->used[i] = 1;
  sl->keys[i] = key;
  sl->n++;
}

void srv_changed_free(srv_changed *c) {
  if (!c) return;
  for (unsigned i = 0; i < CHG_SLOTS; i++) {
    free(c->slot[i].keys);
    free(c->slot[i].used);
  }
  free(c);
}

void srv_changed_reset(srv_table *t) {
  srv_changed_free(t->chg);
  t->chg = NULL;
}

void srv_changed_note(srv_table *t, uint64_t step, const uint64_t *keys, size_t n) {
  if (t->spec.consistency != PS_CONS_SYNC) return;
  if (!t->chg) {
    /* Pushes of steps below apply_issued are refused from now on, and every later one is
     * noted here: the record is complete from apply_issued (a step before: unknown). */
    t->chg = calloc(1, sizeof *t->chg);
    if (!t->chg) return;
    t->chg->from = t->apply_issued;
  }
  chg_slot *sl = &t->chg->slot[step % CHG_SLOTS];
  if (!sl->has || sl->step != step) slot_clear(sl, step);
  for (size_t i = 0; i < n; i++) slot_add(sl, keys[i]);
}

/* The slots of the steps [since, step) when all of them are known, else false. */
static bool changed_known(const srv_table *t, uint64_t since, uint64_t step,
                          const chg_slot *out[CHG_SLOTS], size_t *nout) {
  const srv_changed *c = t->chg;
  *nout = 0;
  if (t->spec.consistency != PS_CONS_SYNC || t->spec.ttl_steps || t->spec.admit_threshold ||
      !c || since < c->from || since > step || step - since > CHG_SLOTS)
    return false;
  for (uint64_t k = since; k < step; k++) {
    const chg_slot *sl = &c->slot[k % CHG_SLOTS];
    /* A slot of a later step: k's record was overwritten. One of an earlier step (or none):
     * no push of step k came, so k changed nothing. */
    if (sl->has && sl->step > k) return false;
    if (sl->has && sl->step == k) {
      if (sl->lost) return false;
      if (sl->n) out[(*nout)++] = sl;
    }
  }
  return true;
}

ps_status srv_refresh_select(srv_req *r) {
  if (r->refresh_pos) return PS_OK; /* selected already (a held request handled again) */
  srv_table *t = r->tab;
  const size_t n = r->msg.nkeys;
  const chg_slot *sl[CHG_SLOTS];
  size_t nsl = 0;
  const bool known = changed_known(t, r->h->since, r->h->step, sl, &nsl);
  r->refresh_pos = malloc((n ? n : 1) * sizeof *r->refresh_pos);
  if (!r->refresh_pos) return PS_ERR_NOMEM;
  /* The keys frame is the request's own (or its decoded copy): compacted in place. */
  uint64_t *keys = (uint64_t *)r->msg.keys;
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    bool ch = !known;
    for (size_t j = 0; j < nsl && !ch; j++) ch = slot_has(sl[j], keys[i]);
    if (!ch) continue;
    keys[m] = keys[i];
    r->refresh_pos[m++] = i;
  }
  r->msg.nkeys = m;
  ps_store_batch_destroy(&r->batch); /* of every key: srv_dispatch makes one of the selected */
  t->refreshed += m;
  t->refresh_full += !known;
  return PS_OK;
}

/* ps_coord: the cluster coordinator hosted by shard 0 on the same socket as its data ops:
 * worker membership and ranks (JOIN), a rendezvous key-value store for the collectives
 * (KV_SET / KV_GET with a wait), and named barriers. Global checkpoints are driven by a worker
 * (CHECKPOINT prepare, then commit, to every shard, then KV_SET "ember/checkpoint/latest");
 * see PROTOCOL.md.
 *
 * Everything runs on the server's main thread, so no locks. Waits (KV_GET of an absent key,
 * BARRIER) park the request with a deadline; the main loop asks srv_coord_expire for the next
 * deadline and answers PS_ERR_TIMEOUT when it passes. The data sets are small (a few dozen
 * workers, a few keys each), so lists are searched linearly. */
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ps_log.h"
#include "ps_server_int.h"
#include "ps_time.h"

typedef struct coord_kv {
  char *key;
  uint8_t *val;
  size_t len;
  struct coord_kv *next;
} coord_kv;

typedef struct coord_barrier {
  char *name;
  uint32_t world, arrived;
  srv_req **waiters; /* by rank */
  struct coord_barrier *next;
} coord_barrier;

struct srv_coord {
  uint32_t world;       /* 0 until the first JOIN */
  char **member;        /* by rank: the member's name ("" when it gave none), NULL = free */
  uint32_t members;
  uint64_t joins;
  coord_kv *kv;
  size_t kv_bytes;
  srv_req *kv_wait;     /* KV_GET waiters (singly linked) */
  coord_barrier *barriers;
};

srv_coord *srv_coord_create(void) { return calloc(1, sizeof(srv_coord)); }

static void barrier_free(coord_barrier *b) {
  free(b->name);
  free(b->waiters);
  free(b);
}

void srv_coord_destroy(srv_coord **cp) {
  if (!cp || !*cp) return;
  srv_coord *c = *cp;
  for (uint32_t i = 0; c->member && i < c->world; i++) free(c->member[i]);
  free(c->member);
  while (c->kv) {
    coord_kv *k = c->kv;
    c->kv = k->next;
    free(k->key);
    free(k->val);
    free(k);
  }
  while (c->barriers) {
    coord_barrier *b = c->barriers;
    c->barriers = b->next;
    barrier_free(b);
  }
  free(c);
  *cp = NULL;
}

static uint64_t deadline_of(uint32_t timeout_ms) {
  return timeout_ms ? ps_now_ns() + (uint64_t)timeout_ms * 1000000ull : 0;
}

/* ------------------------------------------------------------------ JOIN */

static void handle_join(ps_server *s, srv_req *r) {
  srv_coord *c = s->coord;
  Ember__Header *h = r->h;
  const char *name = h->name ? h->name : "";
  if (h->world == 0 || h->world > SRV_MAX_WORKERS || strlen(name) > SRV_MAX_NAME) {
    srv_reply_error(s, r, PS_ERR_INVALID, "JOIN needs a world in 1..%u and a name of at most %u "
                    "bytes", SRV_MAX_WORKERS, SRV_MAX_NAME);
    return;
  }
  if (c->world && c->world != h->world) {
    srv_reply_error(s, r, PS_ERR_CONFLICT, "JOIN with world %u, but the cluster has world %u",
                    h->world, c->world);
    return;
  }
  if (!c->world) {
    c->member = calloc(h->world, sizeof *c->member);
    if (!c->member) {
      srv_reply_error(s, r, PS_ERR_NOMEM, "out of memory");
      return;
    }
    c->world = h->world;
  }
  int rank = h->rank;
  if (rank >= (int)c->world) {
    srv_reply_error(s, r, PS_ERR_INVALID, "JOIN asks for rank %d of world %u", rank, c->world);
    return;
  }
  if (rank < 0 && name[0]) { /* a member re-joining under its name keeps its rank */
    for (uint32_t i = 0; i < c->world; i++)
      if (c->member[i] && strcmp(c->member[i], name) == 0) rank = (int)i;
  }
  if (rank < 0) {
    for (uint32_t i = 0; i < c->world && rank < 0; i++)
      if (!c->member[i]) rank = (int)i;
    if (rank < 0) {
      srv_reply_error(s, r, PS_ERR_CONFLICT, "all %u ranks are taken", c->world);
      return;
    }
  }
  char *nm = strdup(name);
  if (!nm) {
    srv_reply_error(s, r, PS_ERR_NOMEM, "out of memory");
    return;
  }
  if (c->member[rank]) {
    if (strcmp(c->member[rank], name) != 0)
      PS_INFO("rank %d re-joined (was '%s', now '%s')", rank, c->member[rank], name);
    free(c->member[rank]);
  } else {
    c->members++;
  }
  c->member[rank] = nm;
  c->joins++;
  PS_INFO("worker '%s' joined as rank %d of %u (%u members)", name, rank, c->world, c->members);
  Ember__Header rh;
  ps_wire_header_init(&rh, EMBER__OP__OP_JOIN);
  rh.rank = rank;
  rh.world = c->world;
  rh.count = c->members;
  srv_reply(s, r, &rh, NULL);
}

/* ------------------------------------------------------------------ KV */

static coord_kv *kv_find(srv_coord *c, const char *key) {
  for (coord_kv *k = c->kv; k; k = k->next)
    if (strcmp(k->key, key) == 0) return k;
  return NULL;
}

static void reply_kv(ps_server *s, srv_req *r, const coord_kv *k) {
  Ember__Header rh;
  ps_wire_header_init(&rh, EMBER__OP__OP_KV_GET);
  rh.blob.data = k->val;
  rh.blob.len = k->len;
  rh.name = k->key;
  srv_reply(s, r, &rh, NULL);
}

static void handle_kv_set(ps_server *s, srv_req *r) {
  srv_coord *c = s->coord;
  Ember__Header *h = r->h;
  const char *key = h->name ? h->name : "";
  size_t len = h->blob.data ? h->blob.len : 0;
  if (!key[0] || strlen(key) > SRV_MAX_NAME) {
    srv_reply_error(s, r, PS_ERR_INVALID, "KV_SET needs a key of 1..%u bytes", SRV_MAX_NAME);
    return;
  }
  coord_kv *k = kv_find(c, key);
  size_t old = k ? k->len : 0;
  if (c->kv_bytes - old + len > SRV_MAX_KV_BYTES) {
    srv_reply_error(s, r, PS_ERR_NOMEM, "the rendezvous store is full (%zu bytes)",
                    (size_t)SRV_MAX_KV_BYTES);
    return;
  }
  uint8_t *v = malloc(len ? len : 1);
  if (!v) {
    srv_reply_error(s, r, PS_ERR_NOMEM, "out of memory");
    return;
  }
  if (len) memcpy(v, h->blob.data, len);
  if (!k) {
    k = calloc(1, sizeof *k);
    char *kc = strdup(key);
    if (!k || !kc) {
      free(k);
      free(kc);
      free(v);
      srv_reply_error(s, r, PS_ERR_NOMEM, "out of memory");
      return;
    }
    k->key = kc;
    k->next = c->kv;
    c->kv = k;
  }
  free(k->val);
  k->val = v;
  k->len = len;
  c->kv_bytes = c->kv_bytes - old + len;
  /* Wake the waiters of this key. */
  srv_req **pp = &c->kv_wait;
  while (*pp) {
    srv_req *w = *pp;
    if (strcmp(w->h->name ? w->h->name : "", key) == 0) {
      *pp = w->next;
      reply_kv(s, w, k);
    } else {
      pp = &w->next;
    }
  }
  srv_reply_ok(s, r);
}

static void handle_kv_get(ps_server *s, srv_req *r) {
  srv_coord *c = s->coord;
  const char *key = r->h->name ? r->h->name : "";
  if (!key[0] || strlen(key) > SRV_MAX_NAME) {
    srv_reply_error(s, r, PS_ERR_INVALID, "KV_GET needs a key of 1..%u bytes", SRV_MAX_NAME);
    return;
  }
  coord_kv *k = kv_find(c, key);
  if (k) {
    reply_kv(s, r, k);
    return;
  }
  if (r->h->timeout_ms == 0) {
    srv_reply_error(s, r, PS_ERR_NOT_FOUND, "key '%s' is not set", key);
    return;
  }
  r->deadline = deadline_of(r->h->timeout_ms);
  r->next = c->kv_wait;
  c->kv_wait = r;
}

/* ------------------------------------------------------------------ BARRIER */

static void handle_barrier(ps_server *s, srv_req *r) {
  srv_coord *c = s->coord;
  Ember__Header *h = r->h;
  const char *name = h->name ? h->name : "";
  if (!name[0] || strlen(name) > SRV_MAX_NAME || h->world == 0 || h->world > SRV_MAX_WORKERS) {
    srv_reply_error(s, r, PS_ERR_INVALID, "BARRIER needs a name and a world in 1..%u",
                    SRV_MAX_WORKERS);
    return;
  }
  if (h->worker >= h->world) {
    srv_reply_error(s, r, PS_ERR_INVALID, "BARRIER '%s': worker %u of world %u", name, h->worker,
                    h->world);
    return;
  }
  coord_barrier *b = c->barriers;
  while (b && strcmp(b->name, name) != 0) b = b->next;
  if (b && b->world != h->world) {
    srv_reply_error(s, r, PS_ERR_CONFLICT, "BARRIER '%s' has world %u, this request says %u",
                    name, b->world, h->world);
    return;
  }
  if (!b) {
    b = calloc(1, sizeof *b);
    if (b) {
      b->name = strdup(name);
      b->waiters = calloc(h->world, sizeof *b->waiters);
    }
    if (!b || !b->name || !b->waiters) {
      if (b) barrier_free(b);
      srv_reply_error(s, r, PS_ERR_NOMEM, "out of memory");
      return;
    }
    b->world = h->world;
    b->next = c->barriers;
    c->barriers = b;
  }
  srv_req *prev = b->waiters[h->worker];
  if (prev) {
    /* The same rank again (a client retrying after a reconnect): the newest request waits. */
    srv_reply_error(s, prev, PS_ERR_CONFLICT, "superseded by a newer BARRIER request");
  } else {
    b->arrived++;
  }
  r->deadline = deadline_of(h->timeout_ms);
  b->waiters[h->worker] = r;
  if (b->arrived < b->world) return;
  for (uint32_t i = 0; i < b->world; i++) {
    srv_req *w = b->waiters[i];
    Ember__Header rh;
    ps_wire_header_init(&rh, EMBER__OP__OP_BARRIER);
    rh.world = b->world;
    srv_reply(s, w, &rh, NULL);
  }
  coord_barrier **pp = &c->barriers;
  while (*pp != b) pp = &(*pp)->next;
  *pp = b->next;
  barrier_free(b);
}

void srv_coord_handle(ps_server *s, srv_req *r) {
  switch (r->h->op) {
    case EMBER__OP__OP_JOIN: handle_join(s, r); return;
    case EMBER__OP__OP_KV_SET: handle_kv_set(s, r); return;
    case EMBER__OP__OP_KV_GET: handle_kv_get(s, r); return;
    case EMBER__OP__OP_BARRIER: handle_barrier(s, r); return;
    default: srv_reply_error(s, r, PS_ERR_UNKNOWN_OP, "not a coordinator op"); return;
  }
}

uint64_t srv_coord_expire(ps_server *s, uint64_t now) {
  srv_coord *c = s->coord;
  uint64_t next = 0;
#define NOTE(d) \
  if ((d) && (!next || (d) < next)) next = (d)
  srv_req **pp = &c->kv_wait;
  while (*pp) {
    srv_req *w = *pp;
    if (w->deadline && w->deadline <= now) {
      *pp = w->next;
      srv_reply_error(s, w, PS_ERR_TIMEOUT, "key '%s' was not set within %u ms", w->h->name,
                      w->h->timeout_ms);
    } else {
      NOTE(w->deadline);
      pp = &w->next;
    }
  }
  coord_barrier **bp = &c->barriers;
  while (*bp) {
    coord_barrier *b = *bp;
    for (uint32_t i = 0; i < b->world; i++) {
      srv_req *w = b->waiters[i];
      if (!w) continue;
      if (w->deadline && w->deadline <= now) {
        b->waiters[i] = NULL;
        b->arrived--;
        srv_reply_error(s, w, PS_ERR_TIMEOUT,
                        "barrier '%s': %u of %u workers arrived within %u ms", b->name,
                        b->arrived + 1, b->world, w->h->timeout_ms);
      } else {
        NOTE(w->deadline);
      }
    }
    if (b->arrived == 0) {
      *bp = b->next;
      barrier_free(b);
    } else {
      bp = &b->next;
    }
  }
#undef NOTE
  return next;
}

void srv_coord_drain(ps_server *s) {
  srv_coord *c = s->coord;
  while (c->kv_wait) {
    srv_req *w = c->kv_wait;
    c->kv_wait = w->next;
    srv_reply_error(s, w, PS_ERR_UNAVAILABLE, "the coordinator is shutting down");
  }
  while (c->barriers) {
    coord_barrier *b = c->barriers;
    c->barriers = b->next;
    for (uint32_t i = 0; i < b->world; i++)
      if (b->waiters[i])
        srv_reply_error(s, b->waiters[i], PS_ERR_UNAVAILABLE, "the coordinator is shutting down");
    barrier_free(b);
  }
}

void srv_coord_stats(ps_server *s, json_t *obj) {
  srv_coord *c = s->coord;
  json_t *m = json_array();
  for (uint32_t i = 0; c->member && i < c->world; i++)
    if (c->member[i])
      json_array_append_new(m, json_pack("{s:i, s:s}", "rank", (int)i, "name", c->member[i]));
  size_t kvn = 0, waits = 0, barriers = 0;
  for (coord_kv *k = c->kv; k; k = k->next) kvn++;
  for (srv_req *w = c->kv_wait; w; w = w->next) waits++;
  for (coord_barrier *b = c->barriers; b; b = b->next) barriers++;
  json_object_set_new(
      obj, "coordinator",
      json_pack("{s:I, s:I, s:I, s:o, s:I, s:I, s:I, s:I}", "world", (json_int_t)c->world,
                "members", (json_int_t)c->members, "joins", (json_int_t)c->joins, "ranks", m,
                "kv_keys", (json_int_t)kvn, "kv_bytes", (json_int_t)c->kv_bytes, "kv_waiting",
                (json_int_t)waits, "barriers_open", (json_int_t)barriers));
}

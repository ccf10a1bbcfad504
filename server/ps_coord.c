/* ps_coord: the cluster coordinator hosted by shard 0 on the same socket as its data ops:
 * worker membership and ranks (JOIN), a rendezvous key-value store for the collectives
 * (KV_SET / KV_GET with a wait), and named barriers. Global checkpoints are driven by a worker
 * (CHECKPOINT prepare, then commit, to every shard, then KV_SET "ember/checkpoint/latest");
 * see docs/PROTOCOL.md.
 *
 * Everything runs on the server's main thread, so no locks. It sees requests only as opaque
 * handles with their headers and answers through the reply interface it was created with
 * (ps_coord_int.h), so it can be tested without a server. Waits (KV_GET of an absent key,
 * BARRIER) park the handle with a deadline; the main loop asks srv_coord_expire for the next
 * deadline and answers PS_ERR_TIMEOUT when it passes. The data sets are small (a few dozen
 * workers, a few keys each), so lists are searched linearly.
 *
 * A rank is held by the connection that joined it, not forever: when that connection closes
 * (the worker exited or failed before training) the server calls srv_coord_peer_gone and the
 * rank is free again, so today's JOIN/BARRIER messages need nothing new from the client. A
 * JOIN of a held rank from another connection is refused, naming the holder. Disconnects are
 * known by file descriptor (ZeroMQ's monitor names no routing id), so a request whose fd
 * matches a holder's but whose connection does not proves the holder gone before its
 * disconnect event arrived: the holder is released then, and that late event ignored. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_coord_int.h"
#include "ps_log.h"
#include "ps_time.h"

#define COORD_MAX_WORKERS PS_TABLE_MAX_WORKERS
#define COORD_MAX_NAME 1024u
#define COORD_MAX_KV_BYTES ((size_t)64 << 20)
/* What one client (a peer address) may keep in the rendezvous store: key and value bytes, and
 * keys. A job's Gloo/NCCL rendezvous needs a few KB per rank. */
#define COORD_CLIENT_KV_BYTES ((size_t)8 << 20)
#define COORD_CLIENT_KV_KEYS 4096u
/* Keys under this prefix are the job's (ps-worker's run id and barriers' keys, the checkpoint
 * record): only members of the world set them, and the server checks the checkpoint record. */
#define COORD_RESERVED "ember/"

/* A parked request. */
typedef struct coord_wait {
  void *req;              /* NULL = empty slot */
  const Ember__Header *h; /* the request's, valid until it is answered */
  uint64_t deadline;      /* 0 = none */
  bool known;             /* peer is the sender's connection */
  srv_coord_peer peer;
  struct coord_wait *next;
} coord_wait;

/* A taken rank. */
typedef struct coord_member {
  char *name;          /* "" when the worker gave none; NULL = the rank is free */
  bool known;          /* peer is the holder's connection */
  srv_coord_peer peer;
  uint64_t since;      /* when it joined (ns) */
} coord_member;

#define COORD_MAX_STALE 32

typedef struct coord_kv {
  char *key;
  uint8_t *val;
  size_t len;
  char owner[64]; /* the setter's address ("" = in-process): its quota is charged */
  struct coord_kv *next;
} coord_kv;

/* One client's share of the store. */
typedef struct coord_quota {
  char addr[64];
  size_t bytes, keys;
} coord_quota;

typedef struct coord_barrier {
  char *name;
  uint32_t world, arrived;
  coord_wait *waiters; /* by rank */
  struct coord_barrier *next;
} coord_barrier;

struct srv_coord {
  srv_coord_reply io;
  uint32_t world;       /* 0 until the first JOIN */
  coord_member *member; /* by rank */
  uint32_t members;
  int stale_fd[COORD_MAX_STALE]; /* disconnect events still to come for holders released early */
  uint32_t nstale;
  uint64_t joins;
  coord_kv *kv;
  size_t kv_bytes;
  coord_quota *quota; /* by address, searched linearly */
  size_t nquota, quota_cap;
  coord_wait *kv_wait;  /* KV_GET waiters (singly linked, allocated) */
  coord_barrier *barriers;
};

srv_coord *srv_coord_create(const srv_coord_reply *io) {
  srv_coord *c = calloc(1, sizeof *c);
  if (c) c->io = *io;
  return c;
}

static void reply(srv_coord *c, void *req, Ember__Header *rh) { c->io.reply(c->io.ctx, req, rh); }

static void fail(srv_coord *c, void *req, ps_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail(srv_coord *c, void *req, ps_status st, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  c->io.error(c->io.ctx, req, st, msg);
}

static void barrier_free(coord_barrier *b) {
  free(b->name);
  free(b->waiters);
  free(b);
}

void srv_coord_destroy(srv_coord **cp) {
  if (!cp || !*cp) return;
  srv_coord *c = *cp;
  for (uint32_t i = 0; c->member && i < c->world; i++) free(c->member[i].name);
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
  while (c->kv_wait) {
    coord_wait *w = c->kv_wait;
    c->kv_wait = w->next;
    free(w);
  }
  free(c->quota);
  free(c);
  *cp = NULL;
}

static uint64_t deadline_of(uint32_t timeout_ms) {
  return timeout_ms ? ps_now_ns() + (uint64_t)timeout_ms * 1000000ull : 0;
}

/* ------------------------------------------------------------------ JOIN */

/* "worker 'NAME' at ADDR" or "a worker at ADDR", plus how long ago it joined. */
static void member_describe(const coord_member *m, char *out, size_t len) {
  double ago = (double)(ps_now_ns() - m->since) / 1e9;
  const char *addr = m->known && m->peer.addr[0] ? m->peer.addr : "an unknown address";
  if (m->name[0])
    snprintf(out, len, "worker '%s' at %s (joined %.1f s ago)", m->name, addr, ago);
  else
    snprintf(out, len, "a worker at %s (joined %.1f s ago)", addr, ago);
}

static void member_release(srv_coord *c, uint32_t rank, const char *why) {
  coord_member *m = &c->member[rank];
  PS_INFO("rank %u of %u is free again: %s", rank, c->world, why);
  free(m->name);
  memset(m, 0, sizeof *m);
  c->members--;
  if (c->members == 0 && !c->barriers) {
    /* Nobody is left: the next run may have another world. */
    free(c->member);
    c->member = NULL;
    c->world = 0;
  }
}

/* The holder of `rank` (if any) against the sender p: whether another live connection holds
 * it. A holder on p's file descriptor under another connection is gone (its disconnect event
 * is late): it is released here and that event is ignored when it comes. */
static bool held_by_other(srv_coord *c, uint32_t rank, const srv_coord_peer *p) {
  coord_member *m = &c->member[rank];
  if (!m->name || !p || !m->known || m->peer.conn == p->conn) return false;
  if (m->peer.fd != p->fd) return true;
  if (c->nstale < COORD_MAX_STALE) c->stale_fd[c->nstale++] = p->fd;
  member_release(c, rank, "its connection closed");
  return false;
}

static void handle_join(srv_coord *c, void *r, const Ember__Header *h, const srv_coord_peer *p) {
  const char *name = h->name ? h->name : "";
  if (h->world == 0 || h->world > COORD_MAX_WORKERS || strlen(name) > COORD_MAX_NAME) {
    fail(c, r, PS_ERR_INVALID, "JOIN needs a world in 1..%u and a name of at most %u "
                    "bytes", COORD_MAX_WORKERS, COORD_MAX_NAME);
    return;
  }
  if (c->world && c->world != h->world) {
    fail(c, r, PS_ERR_CONFLICT, "JOIN with world %u, but the cluster has world %u",
                    h->world, c->world);
    return;
  }
  if (!c->world) {
    free(c->member);
    c->member = calloc(h->world, sizeof *c->member);
    if (!c->member) {
      fail(c, r, PS_ERR_NOMEM, "out of memory");
      return;
    }
    c->world = h->world;
  }
  int rank = h->rank;
  if (rank >= (int)c->world) {
    fail(c, r, PS_ERR_INVALID, "JOIN asks for rank %d of world %u", rank, c->world);
    return;
  }
  if (rank < 0 && name[0]) { /* a member re-joining under its name keeps its rank */
    for (uint32_t i = 0; i < c->world; i++)
      if (c->member[i].name && strcmp(c->member[i].name, name) == 0) rank = (int)i;
  }
  if (rank < 0) {
    for (uint32_t i = 0; i < c->world && rank < 0; i++)
      if (!c->member[i].name) rank = (int)i;
    if (rank < 0) {
      fail(c, r, PS_ERR_CONFLICT, "all %u ranks are taken", c->world);
      return;
    }
  }
  coord_member *m = &c->member[rank];
  /* Held by another open connection: refused even under the holder's name (which STATS
   * shows), so no client can take over a running worker's rank. */
  if (held_by_other(c, (uint32_t)rank, p)) {
    char who[COORD_MAX_NAME + 128];
    member_describe(m, who, sizeof who);
    fail(c, r, PS_ERR_CONFLICT, "rank %d is already taken by %s", rank, who);
    return;
  }
  if (!c->world) { /* the holder released above was the last member */
    handle_join(c, r, h, p);
    return;
  }
  char *nm = strdup(name);
  if (!nm) {
    fail(c, r, PS_ERR_NOMEM, "out of memory");
    return;
  }
  if (m->name) {
    if (strcmp(m->name, name) != 0)
      PS_INFO("rank %d re-joined (was '%s', now '%s')", rank, m->name, name);
    free(m->name);
  } else {
    c->members++;
  }
  m->name = nm;
  m->known = p != NULL;
  if (p) m->peer = *p;
  m->since = ps_now_ns();
  c->joins++;
  char who[COORD_MAX_NAME + 128];
  if (name[0]) snprintf(who, sizeof who, "worker '%s'", name);
  else snprintf(who, sizeof who, "a worker without a name");
  PS_INFO("%s from %s joined as rank %d of %u (%u members)", who,
          p && p->addr[0] ? p->addr : "an in-process caller", rank, c->world, c->members);
  Ember__Header rh;
  ps_wire_header_init(&rh, EMBER__OP__OP_JOIN);
  rh.rank = rank;
  rh.world = c->world;
  rh.count = c->members;
  reply(c, r, &rh);
}

/* ------------------------------------------------------------------ KV */

static coord_kv *kv_find(srv_coord *c, const char *key) {
  for (coord_kv *k = c->kv; k; k = k->next)
    if (strcmp(k->key, key) == 0) return k;
  return NULL;
}

static void reply_kv(srv_coord *c, void *r, const coord_kv *k) {
  Ember__Header rh;
  ps_wire_header_init(&rh, EMBER__OP__OP_KV_GET);
  rh.blob.data = k->val;
  rh.blob.len = k->len;
  rh.name = k->key;
  reply(c, r, &rh);
}

static void reply_ok(srv_coord *c, void *r, const Ember__Header *h) {
  Ember__Header rh;
  ps_wire_header_init(&rh, h->op);
  reply(c, r, &rh);
}

/* The share of addr ("" = in-process: none); NULL without memory. */
static coord_quota *quota_of(srv_coord *c, const char *addr, bool create) {
  for (size_t i = 0; i < c->nquota; i++)
    if (strcmp(c->quota[i].addr, addr) == 0) return &c->quota[i];
  if (!create) return NULL;
  if (c->nquota == c->quota_cap) {
    size_t nc = c->quota_cap ? 2 * c->quota_cap : 8;
    coord_quota *q = realloc(c->quota, nc * sizeof *q);
    if (!q) return NULL;
    c->quota = q;
    c->quota_cap = nc;
  }
  coord_quota *q = &c->quota[c->nquota++];
  memset(q, 0, sizeof *q);
  snprintf(q->addr, sizeof q->addr, "%s", addr);
  return q;
}

static void quota_charge(srv_coord *c, const char *addr, const coord_kv *k, int sign) {
  coord_quota *q = addr[0] ? quota_of(c, addr, false) : NULL;
  if (!q) return;
  size_t b = strlen(k->key) + k->len;
  if (sign > 0) {
    q->bytes += b;
    q->keys++;
  } else {
    q->bytes -= b;
    q->keys--;
  }
}

/* Whether p holds a rank of the current world. */
static bool is_member(const srv_coord *c, const srv_coord_peer *p) {
  for (uint32_t i = 0; c->member && i < c->world; i++)
    if (c->member[i].name && c->member[i].known && c->member[i].peer.conn == p->conn &&
        c->member[i].peer.fd == p->fd)
      return true;
  return false;
}

static void handle_kv_set(srv_coord *c, void *r, const Ember__Header *h, const srv_coord_peer *p) {
  const char *key = h->name ? h->name : "";
  size_t len = h->blob.data ? h->blob.len : 0;
  if (!key[0] || strlen(key) > COORD_MAX_NAME) {
    fail(c, r, PS_ERR_INVALID, "KV_SET needs a key of 1..%u bytes", COORD_MAX_NAME);
    return;
  }
  if (p && strncmp(key, COORD_RESERVED, strlen(COORD_RESERVED)) == 0 &&
      strcmp(key, SRV_COORD_CKPT_KEY) != 0 && !is_member(c, p)) {
    fail(c, r, PS_ERR_CONFLICT, "KV_SET '%s' refused: keys under '%s' are the job's, set only by "
         "a worker that joined it (%s holds no rank)", key, COORD_RESERVED,
         p->addr[0] ? p->addr : "this connection");
    return;
  }
  coord_kv *k = kv_find(c, key);
  size_t old = k ? k->len : 0;
  if (c->kv_bytes - old + len > COORD_MAX_KV_BYTES) {
    fail(c, r, PS_ERR_NOMEM, "the rendezvous store is full (%zu bytes)",
                    (size_t)COORD_MAX_KV_BYTES);
    return;
  }
  const char *addr = p ? p->addr : "";
  coord_quota *q = addr[0] ? quota_of(c, addr, true) : NULL;
  if (addr[0] && !q) {
    fail(c, r, PS_ERR_NOMEM, "out of memory");
    return;
  }
  if (q) {
    /* What this client would hold after the set (an overwrite of its own key replaces it). */
    bool own = k && strcmp(k->owner, addr) == 0;
    size_t bytes = q->bytes + strlen(key) + len - (own ? strlen(key) + old : 0);
    size_t keys = q->keys + (own ? 0 : 1);
    if (bytes > COORD_CLIENT_KV_BYTES || keys > COORD_CLIENT_KV_KEYS) {
      fail(c, r, PS_ERR_NOMEM, "KV_SET '%s' refused: %s would hold %zu keys and %zu bytes in "
           "the rendezvous store, over its quota of %u keys and %zu bytes", key, addr, keys,
           bytes, COORD_CLIENT_KV_KEYS, (size_t)COORD_CLIENT_KV_BYTES);
      return;
    }
  }
  uint8_t *v = malloc(len ? len : 1);
  if (!v) {
    fail(c, r, PS_ERR_NOMEM, "out of memory");
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
      fail(c, r, PS_ERR_NOMEM, "out of memory");
      return;
    }
    k->key = kc;
    k->next = c->kv;
    c->kv = k;
  } else {
    quota_charge(c, k->owner, k, -1);
  }
  free(k->val);
  k->val = v;
  k->len = len;
  snprintf(k->owner, sizeof k->owner, "%s", addr);
  quota_charge(c, k->owner, k, +1);
  c->kv_bytes = c->kv_bytes - old + len;
  /* Wake the waiters of this key. */
  coord_wait **pp = &c->kv_wait;
  while (*pp) {
    coord_wait *w = *pp;
    if (strcmp(w->h->name ? w->h->name : "", key) == 0) {
      *pp = w->next;
      reply_kv(c, w->req, k);
      free(w);
    } else {
      pp = &w->next;
    }
  }
  reply_ok(c, r, h);
}

static void handle_kv_get(srv_coord *c, void *r, const Ember__Header *h,
                          const srv_coord_peer *p) {
  const char *key = h->name ? h->name : "";
  if (!key[0] || strlen(key) > COORD_MAX_NAME) {
    fail(c, r, PS_ERR_INVALID, "KV_GET needs a key of 1..%u bytes", COORD_MAX_NAME);
    return;
  }
  coord_kv *k = kv_find(c, key);
  if (k) {
    reply_kv(c, r, k);
    return;
  }
  if (h->timeout_ms == 0) {
    fail(c, r, PS_ERR_NOT_FOUND, "key '%s' is not set", key);
    return;
  }
  coord_wait *w = calloc(1, sizeof *w);
  if (!w) {
    fail(c, r, PS_ERR_NOMEM, "out of memory");
    return;
  }
  w->req = r;
  w->h = h;
  w->deadline = deadline_of(h->timeout_ms);
  w->known = p != NULL;
  if (p) w->peer = *p;
  w->next = c->kv_wait;
  c->kv_wait = w;
}

/* ------------------------------------------------------------------ BARRIER */

static void handle_barrier(srv_coord *c, void *r, const Ember__Header *h,
                           const srv_coord_peer *p) {
  const char *name = h->name ? h->name : "";
  if (!name[0] || strlen(name) > COORD_MAX_NAME || h->world == 0 || h->world > COORD_MAX_WORKERS) {
    fail(c, r, PS_ERR_INVALID, "BARRIER needs a name and a world in 1..%u",
                    COORD_MAX_WORKERS);
    return;
  }
  if (h->worker >= h->world) {
    fail(c, r, PS_ERR_INVALID, "BARRIER '%s': worker %u of world %u", name, h->worker,
                    h->world);
    return;
  }
  if (c->world == h->world && held_by_other(c, h->worker, p)) {
    char who[COORD_MAX_NAME + 128];
    member_describe(&c->member[h->worker], who, sizeof who);
    fail(c, r, PS_ERR_CONFLICT, "barrier '%s': rank %u is already taken by %s", name, h->worker,
         who);
    return;
  }
  coord_barrier *b = c->barriers;
  while (b && strcmp(b->name, name) != 0) b = b->next;
  if (b && b->world != h->world) {
    fail(c, r, PS_ERR_CONFLICT, "BARRIER '%s' has world %u, this request says %u",
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
      fail(c, r, PS_ERR_NOMEM, "out of memory");
      return;
    }
    b->world = h->world;
    b->next = c->barriers;
    c->barriers = b;
  }
  coord_wait *slot = &b->waiters[h->worker];
  if (slot->req) {
    /* The same rank again (a client retrying after a reconnect): the newest request waits. */
    fail(c, slot->req, PS_ERR_CONFLICT, "superseded by a newer BARRIER request");
  } else {
    b->arrived++;
  }
  slot->req = r;
  slot->h = h;
  slot->deadline = deadline_of(h->timeout_ms);
  slot->known = p != NULL;
  if (p) slot->peer = *p;
  if (b->arrived < b->world) return;
  for (uint32_t i = 0; i < b->world; i++) {
    Ember__Header rh;
    ps_wire_header_init(&rh, EMBER__OP__OP_BARRIER);
    rh.world = b->world;
    reply(c, b->waiters[i].req, &rh);
  }
  coord_barrier **pp = &c->barriers;
  while (*pp != b) pp = &(*pp)->next;
  *pp = b->next;
  barrier_free(b);
}

void srv_coord_handle_from(srv_coord *c, void *r, const Ember__Header *h,
                           const srv_coord_peer *p) {
  switch (h->op) {
    case EMBER__OP__OP_JOIN: handle_join(c, r, h, p); return;
    case EMBER__OP__OP_KV_SET: handle_kv_set(c, r, h, p); return;
    case EMBER__OP__OP_KV_GET: handle_kv_get(c, r, h, p); return;
    case EMBER__OP__OP_BARRIER: handle_barrier(c, r, h, p); return;
    default: fail(c, r, PS_ERR_UNKNOWN_OP, "not a coordinator op"); return;
  }
}

void srv_coord_handle(srv_coord *c, void *r, const Ember__Header *h) {
  srv_coord_handle_from(c, r, h, NULL);
}

static bool on_fd(const coord_wait *w, int fd) { return w->req && w->known && w->peer.fd == fd; }

void srv_coord_peer_gone(srv_coord *c, int fd) {
  for (uint32_t i = 0; i < c->nstale; i++)
    if (c->stale_fd[i] == fd) { /* its holder was released when the fd came back */
      c->stale_fd[i] = c->stale_fd[--c->nstale];
      return;
    }
  coord_wait **pp = &c->kv_wait;
  while (*pp) {
    coord_wait *w = *pp;
    if (on_fd(w, fd)) {
      *pp = w->next;
      fail(c, w->req, PS_ERR_UNAVAILABLE, "the connection closed");
      free(w);
    } else {
      pp = &w->next;
    }
  }
  coord_barrier **bp = &c->barriers;
  while (*bp) {
    coord_barrier *b = *bp;
    for (uint32_t i = 0; i < b->world; i++) {
      if (!on_fd(&b->waiters[i], fd)) continue;
      void *req = b->waiters[i].req;
      b->waiters[i].req = NULL;
      b->arrived--;
      fail(c, req, PS_ERR_UNAVAILABLE, "the connection closed");
    }
    if (b->arrived == 0) {
      *bp = b->next;
      barrier_free(b);
    } else {
      bp = &b->next;
    }
  }
  for (uint32_t i = 0; c->member && i < c->world; i++) {
    coord_member *m = &c->member[i];
    if (!m->name || !m->known || m->peer.fd != fd) continue;
    char who[COORD_MAX_NAME + 128];
    member_describe(m, who, sizeof who);
    char why[COORD_MAX_NAME + 160];
    snprintf(why, sizeof why, "%s disconnected", who);
    member_release(c, i, why);
    if (!c->member) break; /* the last one: the world is forgotten */
  }
}

uint64_t srv_coord_expire(srv_coord *c, uint64_t now) {
  uint64_t next = 0;
#define NOTE(d) \
  if ((d) && (!next || (d) < next)) next = (d)
  coord_wait **pp = &c->kv_wait;
  while (*pp) {
    coord_wait *w = *pp;
    if (w->deadline && w->deadline <= now) {
      *pp = w->next;
      fail(c, w->req, PS_ERR_TIMEOUT, "key '%s' was not set within %u ms", w->h->name,
           w->h->timeout_ms);
      free(w);
    } else {
      NOTE(w->deadline);
      pp = &w->next;
    }
  }
  coord_barrier **bp = &c->barriers;
  while (*bp) {
    coord_barrier *b = *bp;
    for (uint32_t i = 0; i < b->world; i++) {
      coord_wait *w = &b->waiters[i];
      if (!w->req) continue;
      if (w->deadline && w->deadline <= now) {
        void *req = w->req;
        w->req = NULL;
        b->arrived--;
        fail(c, req, PS_ERR_TIMEOUT, "barrier '%s': %u of %u workers arrived within %u ms",
             b->name, b->arrived + 1, b->world, w->h->timeout_ms);
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

void srv_coord_drain(srv_coord *c) {
  while (c->kv_wait) {
    coord_wait *w = c->kv_wait;
    c->kv_wait = w->next;
    fail(c, w->req, PS_ERR_UNAVAILABLE, "the coordinator is shutting down");
    free(w);
  }
  while (c->barriers) {
    coord_barrier *b = c->barriers;
    c->barriers = b->next;
    for (uint32_t i = 0; i < b->world; i++)
      if (b->waiters[i].req)
        fail(c, b->waiters[i].req, PS_ERR_UNAVAILABLE, "the coordinator is shutting down");
    barrier_free(b);
  }
}

void srv_coord_get_stats(const srv_coord *c, ps_server_coord_stats *out) {
  out->world = c->world;
  out->members = c->members;
  out->joins = c->joins;
  for (size_t i = 0; i < out->nranks; i++) free(out->ranks[i].name);
  out->nranks = 0;
  for (uint32_t i = 0; c->member && i < c->world; i++) {
    if (!c->member[i].name) continue;
    if (out->nranks == out->ranks_cap) {
      size_t nc = out->ranks_cap ? 2 * out->ranks_cap : 16;
      ps_server_rank *nr = realloc(out->ranks, nc * sizeof *nr);
      if (!nr) break;
      out->ranks = nr;
      out->ranks_cap = nc;
    }
    char *name = strdup(c->member[i].name);
    if (!name) break;
    out->ranks[out->nranks++] = (ps_server_rank){.rank = i, .name = name};
  }
  out->kv_keys = out->kv_waiting = out->barriers_open = 0;
  for (coord_kv *k = c->kv; k; k = k->next) out->kv_keys++;
  for (coord_wait *w = c->kv_wait; w; w = w->next) out->kv_waiting++;
  for (coord_barrier *b = c->barriers; b; b = b->next) out->barriers_open++;
  out->kv_bytes = c->kv_bytes;
}

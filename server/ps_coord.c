/* ps_coord: the cluster coordinator hosted by shard 0 on the same socket as its data ops:
 * worker membership and ranks (JOIN), named barriers, and the rendezvous key-value store for
 * the collectives (KV_SET / KV_GET with a wait, ps_coord_kv.c). Global checkpoints are driven
 * by a worker (CHECKPOINT prepare, then commit, to every shard, then KV_SET
 * "ember/checkpoint/latest"); see docs/PROTOCOL.md.
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
 * JOIN of a held rank from another connection is refused, naming the holder, even under the
 * holder's own name. Disconnects are known by file descriptor (ZeroMQ's monitor names no
 * routing id), so a request whose fd matches a holder's but whose connection does not proves
 * the holder gone before its disconnect event arrived: the holder is released then, and that
 * late event ignored.
 *
 * Worlds. Each world size is its own set of ranks, and a barrier is named by its name and its
 * world: a JOIN or BARRIER with another world size joins another world and cannot take a
 * rank, or a barrier, of the running job (it used to fix the cluster's world for whoever came
 * first, so one JOIN before the job made every worker fail). A worker started with the wrong
 * --world therefore waits alone; its barrier's timeout says that another world waits under the
 * same name. STATS shows the world with the most members. A world is forgotten once its last
 * member left.
 *
 * Replicated shard 0 (srv_coord_apply): a backup applies the JOIN, KV_SET and BARRIER its
 * primary forwarded with no requester (COORD_NOREQ: answers go nowhere) and no connection, so
 * the ranks it records are held by nobody (any JOIN of that rank takes it, as in-process) until
 * a worker re-joins it after a failover; a forwarded barrier arrival waits as a placeholder the
 * worker's re-sent BARRIER supersedes. Disconnects are not forwarded: a rank the primary freed
 * stays taken, by nobody, on its backups. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_coord_kv_int.h"
#include "ps_grow.h"
#include "ps_log.h"
#include "ps_time.h"

#define COORD_MAX_WORKERS PS_TABLE_MAX_WORKERS
#define COORD_MAX_WORLDS 64u /* worlds forming or running at once */

/* A parked request. */
typedef struct coord_wait {
  void *req;              /* NULL = empty slot */
  const Ember__Header *h; /* the request's, valid until it is answered */
  uint64_t deadline;      /* 0 = none */
  bool known;             /* peer is the sender's connection */
  srv_coord_peer peer;
} coord_wait;

/* A taken rank. */
typedef struct coord_member {
  char *name;          /* "" when the worker gave none; NULL = the rank is free */
  bool known;          /* peer is the holder's connection */
  srv_coord_peer peer;
  uint64_t since;      /* when it joined (ns) */
} coord_member;

#define COORD_MAX_STALE 32

/* The ranks of one world size. */
typedef struct coord_world {
  uint32_t size;
  coord_member *member; /* by rank */
  uint32_t members;
  struct coord_world *next;
} coord_world;

typedef struct coord_barrier {
  char *name;
  uint32_t world, arrived;
  coord_wait *waiters; /* by rank */
  struct coord_barrier *next;
} coord_barrier;

struct srv_coord {
  srv_coord_reply io;
  coord_world *worlds;
  uint32_t nworlds;
  int stale_fd[COORD_MAX_STALE]; /* disconnect events still to come for holders released early */
  uint32_t nstale;
  uint64_t joins;
  coord_kvs *kvs;
  coord_barrier *barriers;
};

srv_coord *srv_coord_create(const srv_coord_reply *io) {
  srv_coord *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->io = *io;
  if (!(c->kvs = coord_kvs_create(io))) {
    free(c);
    return NULL;
  }
  return c;
}

static void reply(srv_coord *c, void *req, Ember__Header *rh) {
  if (req != COORD_NOREQ) c->io.reply(c->io.ctx, req, rh);
}

#define fail(c, ...) coord_fail(&(c)->io, __VA_ARGS__)

static void barrier_free(coord_barrier *b) {
  free(b->name);
  free(b->waiters);
  free(b);
}

static void world_free(coord_world *w) {
  for (uint32_t i = 0; w->member && i < w->size; i++) free(w->member[i].name);
  free(w->member);
  free(w);
}

void srv_coord_destroy(srv_coord **cp) {
  if (!cp || !*cp) return;
  srv_coord *c = *cp;
  while (c->worlds) {
    coord_world *w = c->worlds;
    c->worlds = w->next;
    world_free(w);
  }
  coord_kvs_destroy(&c->kvs);
  while (c->barriers) {
    coord_barrier *b = c->barriers;
    c->barriers = b->next;
    barrier_free(b);
  }
  free(c);
  *cp = NULL;
}

/* The world of that size, or NULL. */
static coord_world *world_find(srv_coord *c, uint32_t size) {
  for (coord_world *w = c->worlds; w; w = w->next)
    if (w->size == size) return w;
  return NULL;
}

static void world_drop(srv_coord *c, coord_world *w) {
  coord_world **pp = &c->worlds;
  while (*pp != w) pp = &(*pp)->next;
  *pp = w->next;
  c->nworlds--;
  world_free(w);
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

/* Frees the rank; true when that was w's last member and w is gone with it. */
static bool member_release(srv_coord *c, coord_world *w, uint32_t rank, const char *why) {
  coord_member *m = &w->member[rank];
  PS_INFO("rank %u of %u is free again: %s", rank, w->size, why);
  free(m->name);
  memset(m, 0, sizeof *m);
  w->members--;
  if (w->members) return false;
  world_drop(c, w); /* nobody is left: the next run may have another */
  return true;
}

/* The holder of `rank` of w (if any) against the sender p: whether another live connection
 * holds it. A holder on p's file descriptor under another connection is gone (its disconnect
 * event is late): it is released here (*gone: w went with it) and that event is ignored when
 * it comes. */
static bool held_by_other(srv_coord *c, coord_world *w, uint32_t rank, const srv_coord_peer *p,
                          bool *gone) {
  coord_member *m = &w->member[rank];
  *gone = false;
  if (!m->name || !p || !m->known || m->peer.conn == p->conn) return false;
  if (m->peer.fd != p->fd) return true;
  if (c->nstale < COORD_MAX_STALE) c->stale_fd[c->nstale++] = p->fd;
  *gone = member_release(c, w, rank, "its connection closed");
  return false;
}

/* The world of h->world, made if new (NULL after answering r when it cannot be). */
static coord_world *join_world(srv_coord *c, void *r, uint32_t size, const char *addr) {
  coord_world *w = world_find(c, size);
  if (w) return w;
  if (c->nworlds >= COORD_MAX_WORLDS) {
    fail(c, r, PS_ERR_CONFLICT, "JOIN with world %u refused: %u worlds are forming or running",
         size, COORD_MAX_WORLDS);
    return NULL;
  }
  w = calloc(1, sizeof *w);
  if (w) w->member = calloc(size, sizeof *w->member);
  if (!w || !w->member) {
    free(w);
    fail(c, r, PS_ERR_NOMEM, "out of memory");
    return NULL;
  }
  w->size = size;
  for (coord_world *o = c->worlds; o; o = o->next)
    PS_WARN("JOIN with world %u from %s while world %u has %u members: a separate world (a "
            "worker started with the wrong --world waits alone)",
            size, addr, o->size, o->members);
  w->next = c->worlds;
  c->worlds = w;
  c->nworlds++;
  return w;
}

static void handle_join(srv_coord *c, void *r, const Ember__Header *h, const srv_coord_peer *p) {
  const char *name = h->name ? h->name : "";
  const char *addr = p && p->addr[0]   ? p->addr
                     : r == COORD_NOREQ ? "the primary (a forward)"
                                        : "an in-process caller";
  if (h->world == 0 || h->world > COORD_MAX_WORKERS || strlen(name) > COORD_MAX_NAME) {
    fail(c, r, PS_ERR_INVALID, "JOIN needs a world in 1..%u and a name of at most %u "
                    "bytes", COORD_MAX_WORKERS, COORD_MAX_NAME);
    return;
  }
  int rank = h->rank;
  if (rank >= (int)h->world) {
    fail(c, r, PS_ERR_INVALID, "JOIN asks for rank %d of world %u", rank, h->world);
    return;
  }
  coord_world *w = join_world(c, r, h->world, addr);
  if (!w) return;
  if (rank < 0 && name[0]) { /* a member re-joining under its name keeps its rank */
    for (uint32_t i = 0; i < w->size; i++)
      if (w->member[i].name && strcmp(w->member[i].name, name) == 0) rank = (int)i;
  }
  if (rank < 0) {
    for (uint32_t i = 0; i < w->size && rank < 0; i++)
      if (!w->member[i].name) rank = (int)i;
    if (rank < 0) {
      fail(c, r, PS_ERR_CONFLICT, "all %u ranks are taken", w->size);
      return;
    }
  }
  coord_member *m = &w->member[rank];
  /* Held by another open connection: refused even under the holder's name (which STATS
   * shows), so no client can take over a running worker's rank. */
  bool gone;
  if (held_by_other(c, w, (uint32_t)rank, p, &gone)) {
    char who[COORD_MAX_NAME + 128];
    member_describe(m, who, sizeof who);
    fail(c, r, PS_ERR_CONFLICT, "rank %d is already taken by %s", rank, who);
    return;
  }
  if (gone) { /* the holder released above was the last member */
    handle_join(c, r, h, p);
    return;
  }
  char *nm = strdup(name);
  if (!nm) {
    fail(c, r, PS_ERR_NOMEM, "out of memory");
    if (w->members == 0) world_drop(c, w);
    return;
  }
  if (m->name) {
    if (strcmp(m->name, name) != 0)
      PS_INFO("rank %d re-joined (was '%s', now '%s')", rank, m->name, name);
    free(m->name);
  } else {
    w->members++;
  }
  m->name = nm;
  m->known = p != NULL;
  if (p) m->peer = *p;
  m->since = ps_now_ns();
  c->joins++;
  char who[COORD_MAX_NAME + 128];
  if (name[0]) snprintf(who, sizeof who, "worker '%s'", name);
  else snprintf(who, sizeof who, "a worker without a name");
  PS_INFO("%s from %s joined as rank %d of %u (%u members)", who, addr, rank, w->size,
          w->members);
  Ember__Header rh;
  ps_wire_header_init(&rh, EMBER__OP__OP_JOIN);
  rh.rank = rank;
  rh.world = w->size;
  rh.count = w->members;
  reply(c, r, &rh);
}

/* Whether p holds a rank of some world. */
static bool is_member(const srv_coord *c, const srv_coord_peer *p) {
  for (const coord_world *w = c->worlds; w; w = w->next)
    for (uint32_t i = 0; i < w->size; i++) {
      const coord_member *m = &w->member[i];
      if (m->name && m->known && m->peer.conn == p->conn && m->peer.fd == p->fd) return true;
    }
  return false;
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
  coord_world *w = world_find(c, h->world);
  bool gone;
  if (w && held_by_other(c, w, h->worker, p, &gone)) {
    char who[COORD_MAX_NAME + 128];
    member_describe(&w->member[h->worker], who, sizeof who);
    fail(c, r, PS_ERR_CONFLICT, "barrier '%s': rank %u is already taken by %s", name, h->worker,
         who);
    return;
  }
  /* A barrier is its name and its world: one of another world is another barrier. */
  coord_barrier *b = c->barriers;
  while (b && (strcmp(b->name, name) != 0 || b->world != h->world)) b = b->next;
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
  slot->h = r == COORD_NOREQ ? NULL : h; /* a forward's header is freed once acked */
  slot->deadline = coord_deadline(h->timeout_ms);
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
    case EMBER__OP__OP_KV_SET: coord_kvs_set(c->kvs, r, h, p, p && is_member(c, p)); return;
    case EMBER__OP__OP_KV_GET: coord_kvs_get(c->kvs, r, h, p); return;
    case EMBER__OP__OP_BARRIER: handle_barrier(c, r, h, p); return;
    default: fail(c, r, PS_ERR_UNKNOWN_OP, "not a coordinator op"); return;
  }
}

void srv_coord_apply(srv_coord *c, const Ember__Header *h) {
  switch (h->op) {
    case EMBER__OP__OP_JOIN: handle_join(c, COORD_NOREQ, h, NULL); return;
    case EMBER__OP__OP_KV_SET: coord_kvs_set(c->kvs, COORD_NOREQ, h, NULL, true); return;
    case EMBER__OP__OP_BARRIER: handle_barrier(c, COORD_NOREQ, h, NULL); return;
    default: return;
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
  coord_kvs_peer_gone(c->kvs, fd);
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
  coord_world *w = c->worlds;
  while (w) {
    coord_world *next = w->next;
    for (uint32_t i = 0; i < w->size; i++) {
      coord_member *m = &w->member[i];
      if (!m->name || !m->known || m->peer.fd != fd) continue;
      char who[COORD_MAX_NAME + 128];
      member_describe(m, who, sizeof who);
      char why[COORD_MAX_NAME + 160];
      snprintf(why, sizeof why, "%s disconnected", who);
      if (member_release(c, w, i, why)) break; /* the last one: the world is forgotten */
    }
    w = next;
  }
}

/* The size of another world with a barrier of that name waiting, or 0 (a timeout's hint). */
static uint32_t other_world(const srv_coord *c, const coord_barrier *b) {
  for (const coord_barrier *o = c->barriers; o; o = o->next)
    if (o != b && o->arrived && strcmp(o->name, b->name) == 0) return o->world;
  return 0;
}

uint64_t srv_coord_expire(srv_coord *c, uint64_t now) {
  uint64_t next = coord_kvs_expire(c->kvs, now);
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
        if (req == COORD_NOREQ) continue; /* a forwarded arrival: its primary answers it */
        char hint[96] = "";
        uint32_t ow = other_world(c, b);
        if (ow)
          snprintf(hint, sizeof hint, " (a barrier '%s' of world %u waits too: check --world)",
                   b->name, ow);
        fail(c, req, PS_ERR_TIMEOUT, "barrier '%s': %u of %u workers arrived within %u ms%s",
             b->name, b->arrived + 1, b->world, w->h->timeout_ms, hint);
      } else if (w->deadline && (!next || w->deadline < next)) {
        next = w->deadline;
      }
    }
    if (b->arrived == 0) {
      *bp = b->next;
      barrier_free(b);
    } else {
      bp = &b->next;
    }
  }
  return next;
}

void srv_coord_drain(srv_coord *c) {
  coord_kvs_drain(c->kvs);
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
  /* The world with the most members: the job's. */
  const coord_world *w = NULL;
  for (const coord_world *o = c->worlds; o; o = o->next)
    if (!w || o->members > w->members) w = o;
  out->world = w ? w->size : 0;
  out->members = w ? w->members : 0;
  out->joins = c->joins;
  for (size_t i = 0; i < out->nranks; i++) free(out->ranks[i].name);
  out->nranks = 0;
  for (uint32_t i = 0; w && i < w->size; i++) {
    if (!w->member[i].name) continue;
    if (!ps_grow((void **)&out->ranks, &out->ranks_cap, out->nranks + 1, sizeof *out->ranks, 16))
      break;
    char *name = strdup(w->member[i].name);
    if (!name) break;
    out->ranks[out->nranks++] = (ps_server_rank){.rank = i, .name = name};
  }
  coord_kvs_stats(c->kvs, out);
  out->barriers_open = 0;
  for (coord_barrier *b = c->barriers; b; b = b->next) out->barriers_open++;
}

/* ps_coord_kv: the coordinator's rendezvous store (ps_coord_kv_int.h): KV_SET, and KV_GET that
 * waits for an absent key up to its timeout. Collectives (Gloo, NCCL) exchange their addresses
 * through it, ps-worker its run id, and ps_client_checkpoint records the global checkpoint.
 *
 * Bounds. The store holds at most 64 MiB of values in all, and each client address (the
 * connection's peer address; several workers on one host share it, so a client cannot escape
 * its share by reconnecting) at most 4096 keys and 8 MiB of keys and values -- a job needs a
 * few KB per rank. A key is charged to whoever set its current value. Keys under "ember/" are
 * the job's: set only by members of the world (the coordinator says who), except the
 * checkpoint record, whose value the server checked against shard 0's last commit. The data
 * sets are small, so lists are searched linearly. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_coord_kv_int.h"
#include "ps_grow.h"

#define COORD_MAX_KV_BYTES ((size_t)64 << 20)
#define COORD_CLIENT_KV_BYTES ((size_t)8 << 20)
#define COORD_CLIENT_KV_KEYS 4096u
#define COORD_RESERVED "ember/"

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

/* A parked KV_GET. */
typedef struct kv_wait {
  void *req;
  const Ember__Header *h; /* the request's, valid until it is answered */
  uint64_t deadline;      /* 0 = none */
  bool known;
  int fd;
  struct kv_wait *next;
} kv_wait;

struct coord_kvs {
  srv_coord_reply io;
  coord_kv *kv;
  size_t kv_bytes;
  coord_quota *quota; /* by address */
  size_t nquota, quota_cap;
  kv_wait *wait;
};

char coord_noreq;

void coord_fail(const srv_coord_reply *io, void *req, ps_status st, const char *fmt, ...) {
  if (req == COORD_NOREQ) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  io->error(io->ctx, req, st, msg);
}

coord_kvs *coord_kvs_create(const srv_coord_reply *io) {
  coord_kvs *k = calloc(1, sizeof *k);
  if (k) k->io = *io;
  return k;
}

void coord_kvs_destroy(coord_kvs **kp) {
  if (!kp || !*kp) return;
  coord_kvs *k = *kp;
  while (k->kv) {
    coord_kv *e = k->kv;
    k->kv = e->next;
    free(e->key);
    free(e->val);
    free(e);
  }
  while (k->wait) {
    kv_wait *w = k->wait;
    k->wait = w->next;
    free(w);
  }
  free(k->quota);
  free(k);
  *kp = NULL;
}

static coord_kv *kv_find(coord_kvs *k, const char *key) {
  for (coord_kv *e = k->kv; e; e = e->next)
    if (strcmp(e->key, key) == 0) return e;
  return NULL;
}

static void reply_kv(coord_kvs *k, void *r, const coord_kv *e) {
  Ember__Header rh;
  ps_wire_header_init(&rh, EMBER__OP__OP_KV_GET);
  rh.blob.data = e->val;
  rh.blob.len = e->len;
  rh.name = e->key;
  k->io.reply(k->io.ctx, r, &rh);
}

/* The share of addr; NULL without memory (or, unless create, when it has none). */
static coord_quota *quota_of(coord_kvs *k, const char *addr, bool create) {
  for (size_t i = 0; i < k->nquota; i++)
    if (strcmp(k->quota[i].addr, addr) == 0) return &k->quota[i];
  if (!create) return NULL;
  if (!ps_grow((void **)&k->quota, &k->quota_cap, k->nquota + 1, sizeof *k->quota, 8))
    return NULL;
  coord_quota *q = &k->quota[k->nquota++];
  memset(q, 0, sizeof *q);
  snprintf(q->addr, sizeof q->addr, "%s", addr);
  return q;
}

static void quota_charge(coord_kvs *k, const coord_kv *e, int sign) {
  coord_quota *q = e->owner[0] ? quota_of(k, e->owner, false) : NULL;
  if (!q) return;
  size_t b = strlen(e->key) + e->len;
  q->bytes = sign > 0 ? q->bytes + b : q->bytes - b;
  q->keys = sign > 0 ? q->keys + 1 : q->keys - 1;
}

/* Whether p may set key, and its quota allows the value (e: the key's entry, if any). */
static bool set_allowed(coord_kvs *k, void *r, const char *key, size_t len, const coord_kv *e,
                        const srv_coord_peer *p, bool member) {
  const srv_coord_reply *io = &k->io;
  if (p && strncmp(key, COORD_RESERVED, strlen(COORD_RESERVED)) == 0 &&
      strcmp(key, SRV_COORD_CKPT_KEY) != 0 && !member) {
    coord_fail(io, r, PS_ERR_CONFLICT, "KV_SET '%s' refused: keys under '%s' are the job's, set "
               "only by a worker that joined it (%s holds no rank)", key, COORD_RESERVED,
               p->addr[0] ? p->addr : "this connection");
    return false;
  }
  size_t old = e ? e->len : 0;
  if (k->kv_bytes - old + len > COORD_MAX_KV_BYTES) {
    coord_fail(io, r, PS_ERR_NOMEM, "the rendezvous store is full (%zu bytes)",
               (size_t)COORD_MAX_KV_BYTES);
    return false;
  }
  const char *addr = p ? p->addr : "";
  if (!addr[0]) return true;
  coord_quota *q = quota_of(k, addr, true);
  if (!q) {
    coord_fail(io, r, PS_ERR_NOMEM, "out of memory");
    return false;
  }
  /* What this client would hold after the set (an overwrite of its own key replaces it). */
  bool own = e && strcmp(e->owner, addr) == 0;
  size_t bytes = q->bytes + strlen(key) + len - (own ? strlen(key) + old : 0);
  size_t keys = q->keys + (own ? 0 : 1);
  if (bytes <= COORD_CLIENT_KV_BYTES && keys <= COORD_CLIENT_KV_KEYS) return true;
  coord_fail(io, r, PS_ERR_NOMEM, "KV_SET '%s' refused: %s would hold %zu keys and %zu bytes in "
             "the rendezvous store, over its quota of %u keys and %zu bytes", key, addr, keys,
             bytes, COORD_CLIENT_KV_KEYS, (size_t)COORD_CLIENT_KV_BYTES);
  return false;
}

void coord_kvs_set(coord_kvs *k, void *r, const Ember__Header *h, const srv_coord_peer *p,
                   bool member) {
  const char *key = h->name ? h->name : "";
  size_t len = h->blob.data ? h->blob.len : 0;
  if (!key[0] || strlen(key) > COORD_MAX_NAME) {
    coord_fail(&k->io, r, PS_ERR_INVALID, "KV_SET needs a key of 1..%u bytes", COORD_MAX_NAME);
    return;
  }
  coord_kv *e = kv_find(k, key);
  if (!set_allowed(k, r, key, len, e, p, member)) return;
  size_t old = e ? e->len : 0;
  uint8_t *v = malloc(len ? len : 1);
  if (!v) {
    coord_fail(&k->io, r, PS_ERR_NOMEM, "out of memory");
    return;
  }
  if (len) memcpy(v, h->blob.data, len);
  if (!e) {
    e = calloc(1, sizeof *e);
    char *kc = strdup(key);
    if (!e || !kc) {
      free(e);
      free(kc);
      free(v);
      coord_fail(&k->io, r, PS_ERR_NOMEM, "out of memory");
      return;
    }
    e->key = kc;
    e->next = k->kv;
    k->kv = e;
  } else {
    quota_charge(k, e, -1);
  }
  free(e->val);
  e->val = v;
  e->len = len;
  snprintf(e->owner, sizeof e->owner, "%s", p ? p->addr : "");
  quota_charge(k, e, +1);
  k->kv_bytes = k->kv_bytes - old + len;
  /* Wake the waiters of this key. */
  kv_wait **pp = &k->wait;
  while (*pp) {
    kv_wait *w = *pp;
    if (strcmp(w->h->name ? w->h->name : "", key) == 0) {
      *pp = w->next;
      reply_kv(k, w->req, e);
      free(w);
    } else {
      pp = &w->next;
    }
  }
  Ember__Header rh;
  ps_wire_header_init(&rh, h->op);
  if (r != COORD_NOREQ) k->io.reply(k->io.ctx, r, &rh);
}

void coord_kvs_get(coord_kvs *k, void *r, const Ember__Header *h, const srv_coord_peer *p) {
  const char *key = h->name ? h->name : "";
  if (!key[0] || strlen(key) > COORD_MAX_NAME) {
    coord_fail(&k->io, r, PS_ERR_INVALID, "KV_GET needs a key of 1..%u bytes", COORD_MAX_NAME);
    return;
  }
  coord_kv *e = kv_find(k, key);
  if (e) {
    reply_kv(k, r, e);
    return;
  }
  if (h->timeout_ms == 0) {
    coord_fail(&k->io, r, PS_ERR_NOT_FOUND, "key '%s' is not set", key);
    return;
  }
  kv_wait *w = calloc(1, sizeof *w);
  if (!w) {
    coord_fail(&k->io, r, PS_ERR_NOMEM, "out of memory");
    return;
  }
  w->req = r;
  w->h = h;
  w->deadline = coord_deadline(h->timeout_ms);
  w->known = p != NULL;
  w->fd = p ? p->fd : -1;
  w->next = k->wait;
  k->wait = w;
}

void coord_kvs_peer_gone(coord_kvs *k, int fd) {
  kv_wait **pp = &k->wait;
  while (*pp) {
    kv_wait *w = *pp;
    if (w->known && w->fd == fd) {
      *pp = w->next;
      coord_fail(&k->io, w->req, PS_ERR_UNAVAILABLE, "the connection closed");
      free(w);
    } else {
      pp = &w->next;
    }
  }
}

uint64_t coord_kvs_expire(coord_kvs *k, uint64_t now) {
  uint64_t next = 0;
  kv_wait **pp = &k->wait;
  while (*pp) {
    kv_wait *w = *pp;
    if (w->deadline && w->deadline <= now) {
      *pp = w->next;
      coord_fail(&k->io, w->req, PS_ERR_TIMEOUT, "key '%s' was not set within %u ms",
                 w->h->name, w->h->timeout_ms);
      free(w);
    } else {
      if (w->deadline && (!next || w->deadline < next)) next = w->deadline;
      pp = &w->next;
    }
  }
  return next;
}

void coord_kvs_drain(coord_kvs *k) {
  while (k->wait) {
    kv_wait *w = k->wait;
    k->wait = w->next;
    coord_fail(&k->io, w->req, PS_ERR_UNAVAILABLE, "the coordinator is shutting down");
    free(w);
  }
}

void coord_kvs_stats(const coord_kvs *k, ps_server_coord_stats *out) {
  out->kv_keys = out->kv_waiting = 0;
  for (coord_kv *e = k->kv; e; e = e->next) out->kv_keys++;
  for (kv_wait *w = k->wait; w; w = w->next) out->kv_waiting++;
  out->kv_bytes = k->kv_bytes;
}

/* ps_server_exactly_once: exactly-once pushes -- the table of ps_server_exactly_once_int.h
 * (which pushes of which client a shard has taken) and the server's use of it: a push that names its client and seq
 * is looked up before anything is applied (srv_once_intake), and its reply settles it
 * (srv_once_replied).
 *
 * Design decisions:
 * - A copy of a push is answered with the original's outcome and never applied: OK when the
 *   original's reply left with success, the refusal when it failed, and, while the original is
 *   still being applied (partition threads, a sync buffer, an injected delay), the copy waits on
 *   the original's request and gets a copy of its reply. So a client that re-sends after a lost
 *   reply learns what happened to its push, whichever way the race went.
 * - The look-up sits in handle_push after the checks of the request's own content (dim, keys,
 *   finite values: a copy is the same bytes) and before those that depend on the shard's state
 *   (the memory budget, a sync step's window): a copy of a push whose step was applied since is
 *   answered OK, not refused as late.
 * - Clients are found in a chained hash table of their ids (random 64-bit numbers, so the low
 *   bits index it directly); every other record is per client and small.
 * - EMBER_TEST_DROP_REPLY=N (test-only fault injection, read at server create): the connection
 *   of every N-th push taken is cut (shutdown(2) of its socket) as soon as the push is taken,
 *   so its reply is lost on the way and the client re-sends over a new connection. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "ps_log.h"
#include "ps_server_exactly_once_int.h"
#include "ps_server_int.h"
#include "ps_server_replication_int.h"
#include "ps_time.h"

/* ---------------------------------------------------------------- the table */

typedef struct once_flight {
  uint64_t seq;
  void *req;
} once_flight;

typedef struct once_client {
  struct once_client *next; /* hash chain */
  uint64_t id, first, base, last_ns;
  uint64_t *done, *failed; /* bit i: seq base + i taken / failed; nw words each, one block */
  uint32_t nw;
  once_flight *fl; /* taken, reply not sent */
  size_t nfl, flcap;
} once_client;

struct srv_once {
  once_client **b; /* buckets */
  size_t nb, n;
  uint64_t last_sweep, dups, unknown;
};

srv_once *srv_once_create(void) {
  srv_once *x = calloc(1, sizeof *x);
  if (!x) return NULL;
  x->nb = 64;
  x->b = calloc(x->nb, sizeof *x->b);
  if (!x->b) {
    free(x);
    return NULL;
  }
  return x;
}

static void client_free(once_client *e) {
  free(e->done);
  free(e->fl);
  free(e);
}

void srv_once_clear(srv_once *x) {
  for (size_t i = 0; i < x->nb; i++) {
    while (x->b[i]) {
      once_client *e = x->b[i];
      x->b[i] = e->next;
      client_free(e);
    }
  }
  x->n = 0;
}

void srv_once_destroy(srv_once **xp) {
  if (!xp || !*xp) return;
  srv_once_clear(*xp);
  free((*xp)->b);
  free(*xp);
  *xp = NULL;
}

void srv_once_counts(const srv_once *x, uint64_t *clients, uint64_t *duplicates,
                    uint64_t *unknown) {
  *clients = x ? x->n : 0;
  *duplicates = x ? x->dups : 0;
  *unknown = x ? x->unknown : 0;
}

static once_client **slot(srv_once *x, uint64_t id) {
  once_client **p = &x->b[(id ^ (id >> 29)) & (x->nb - 1)];
  while (*p && (*p)->id != id) p = &(*p)->next;
  return p;
}

static void grow_buckets(srv_once *x) {
  size_t nb = x->nb * 2;
  once_client **b = calloc(nb, sizeof *b);
  if (!b) return; /* longer chains, still correct */
  once_client **old = x->b;
  size_t onb = x->nb;
  x->b = b;
  x->nb = nb;
  for (size_t i = 0; i < onb; i++) {
    while (old[i]) {
      once_client *e = old[i];
      old[i] = e->next;
      once_client **p = slot(x, e->id);
      e->next = *p;
      *p = e;
    }
  }
  free(old);
}

/* Forgets the idle clients with nothing in flight; with `lru`, if none was idle, the one heard
 * of least recently (to make room). */
static void sweep(srv_once *x, uint64_t now, bool lru) {
  once_client **oldest = NULL;
  size_t dropped = 0;
  for (size_t i = 0; i < x->nb; i++) {
    for (once_client **p = &x->b[i]; *p;) {
      once_client *e = *p;
      if (e->nfl == 0 && now - e->last_ns > SRV_ONCE_IDLE_NS) {
        *p = e->next;
        client_free(e);
        x->n--;
        dropped++;
        continue;
      }
      if (e->nfl == 0 && (!oldest || e->last_ns < (*oldest)->last_ns)) oldest = p;
      p = &e->next;
    }
  }
  if (lru && !dropped && oldest) {
    once_client *e = *oldest;
    *oldest = e->next;
    client_free(e);
    x->n--;
  }
  x->last_sweep = now;
}

/* Moves base up to floor: the bitmaps shift down by floor - base bits. */
static void advance(once_client *e, uint64_t floor) {
  if (floor <= e->base) return;
  uint64_t k = floor - e->base, bits = 64ull * e->nw;
  e->base = floor;
  if (k >= bits) {
    if (e->nw) memset(e->done, 0, 2 * e->nw * sizeof *e->done);
    return;
  }
  size_t wk = (size_t)(k / 64), bk = (size_t)(k % 64);
  for (int m = 0; m < 2; m++) {
    uint64_t *w = m ? e->failed : e->done;
    for (size_t i = 0; i < e->nw; i++) {
      uint64_t lo = i + wk < e->nw ? w[i + wk] : 0, hi = i + wk + 1 < e->nw ? w[i + wk + 1] : 0;
      w[i] = bk ? (lo >> bk) | (hi << (64 - bk)) : lo;
    }
  }
}

/* Room in the bitmaps for bit off (< SRV_ONCE_WINDOW). */
static bool cover(once_client *e, uint64_t off) {
  uint32_t need = (uint32_t)(off / 64) + 1;
  if (need <= e->nw) return true;
  uint32_t nw = e->nw ? e->nw : 1;
  while (nw < need) nw *= 2;
  uint64_t *b = calloc(2 * (size_t)nw, sizeof *b);
  if (!b) return false;
  if (e->nw) {
    memcpy(b, e->done, e->nw * sizeof *b);
    memcpy(b + nw, e->failed, e->nw * sizeof *b);
  }
  free(e->done);
  e->done = b;
  e->failed = b + nw;
  e->nw = nw;
  return true;
}

static bool bit(const uint64_t *w, uint64_t off) { return (w[off / 64] >> (off % 64)) & 1u; }

srv_once_verdict srv_once_check(srv_once *x, uint64_t client, uint64_t seq, uint64_t floor,
                              bool retry, uint64_t now_ns, void *req, void **orig) {
  if (now_ns - x->last_sweep > 10ull * 1000000000ull) sweep(x, now_ns, false);
  once_client **p = slot(x, client), *e = *p;
  if (!e) {
    if (retry) {
      x->unknown++;
      return SRV_ONCE_UNKNOWN;
    }
    if (x->n >= SRV_ONCE_MAX_CLIENTS) {
      sweep(x, now_ns, true);
      if (x->n >= SRV_ONCE_MAX_CLIENTS) return SRV_ONCE_NOMEM;
      p = slot(x, client);
    }
    if (!(e = calloc(1, sizeof *e))) return SRV_ONCE_NOMEM;
    e->id = client;
    e->first = e->base = seq;
    *p = e;
    if (++x->n > x->nb) grow_buckets(x);
  }
  e->last_ns = now_ns;
  for (size_t i = 0; i < e->nfl; i++) {
    if (e->fl[i].seq == seq) {
      *orig = e->fl[i].req;
      x->dups++;
      return SRV_ONCE_INFLIGHT;
    }
  }
  if (seq < e->first) {
    x->unknown++;
    return SRV_ONCE_UNKNOWN;
  }
  advance(e, floor);
  if (seq < e->base) {
    x->dups++;
    return SRV_ONCE_DONE; /* settled: taken, or given up by the client (a stale copy) */
  }
  uint64_t off = seq - e->base;
  if (off >= SRV_ONCE_WINDOW) return SRV_ONCE_TOO_MANY;
  if (!cover(e, off)) return SRV_ONCE_NOMEM;
  if (bit(e->done, off)) {
    x->dups++;
    return bit(e->failed, off) ? SRV_ONCE_FAILED : SRV_ONCE_DONE;
  }
  if (!srv_grow((void **)&e->fl, &e->flcap, e->nfl + 1, sizeof *e->fl, 4)) return SRV_ONCE_NOMEM;
  e->done[off / 64] |= 1ull << (off % 64);
  e->fl[e->nfl++] = (once_flight){seq, req};
  return SRV_ONCE_APPLY;
}

void srv_once_settle(srv_once *x, uint64_t client, uint64_t seq, bool ok) {
  once_client *e = *slot(x, client);
  if (!e) return; /* forgotten meanwhile (a restore) */
  for (size_t i = 0; i < e->nfl; i++) {
    if (e->fl[i].seq == seq) {
      e->fl[i] = e->fl[--e->nfl];
      break;
    }
  }
  if (!ok && seq >= e->base && seq - e->base < 64ull * e->nw)
    e->failed[(seq - e->base) / 64] |= 1ull << ((seq - e->base) % 64);
}

/* ---------------------------------------------------------------- the server's side */

/* A shard's records, and the test-only fault injection that cuts connections after a push. */
struct srv_exactly_once {
  srv_once *records;
  uint64_t drop_every; /* EMBER_TEST_DROP_REPLY: cut every N-th push's connection */
  uint64_t taken;      /* pushes taken, for the above */
};

ps_status srv_once_init(ps_server *s) {
  srv_exactly_once *x = calloc(1, sizeof *x);
  if (!x || !(x->records = srv_once_create())) {
    free(x);
    return PS_ERR_NOMEM;
  }
  s->once = x;
  const char *drop = getenv("EMBER_TEST_DROP_REPLY");
  if (drop && *drop) {
    x->drop_every = strtoull(drop, NULL, 10);
    PS_WARN("EMBER_TEST_DROP_REPLY=%s: the connection of every %" PRIu64
            "-th push is cut (test-only fault injection)",
            drop, x->drop_every);
  }
  return PS_OK;
}

void srv_once_free(ps_server *s) {
  if (!s->once) return;
  srv_once_destroy(&s->once->records);
  free(s->once);
  s->once = NULL;
}

void srv_once_forget(ps_server *s) {
  if (s->once) srv_once_clear(s->once->records);
}

void srv_once_stats(const ps_server *s, uint64_t *clients, uint64_t *duplicates,
                    uint64_t *unknown) {
  if (s->once) srv_once_counts(s->once->records, clients, duplicates, unknown);
}

/* The fault injection: cuts r's connection under ZeroMQ, which then sees it closed. */
static void test_cut(ps_server *s, srv_req *r) {
  srv_exactly_once *x = s->once;
  if (!x->drop_every || !r->has_ident || ++x->taken % x->drop_every) return;
  int fd = zmq_msg_get(&r->fr[0], ZMQ_SRCFD);
  if (fd >= 0) shutdown(fd, SHUT_RDWR);
}

bool srv_once_intake(ps_server *s, srv_req *r, bool complete) {
  const Ember__Header *h = r->h;
  if (!h->client_id || !s->once) return false;
  void *orig = NULL;
  char why[200] = "";
  ps_status st = PS_ERR_UNAVAILABLE;
  srv_once_verdict v =
      /* A replica that saw every push of its shard knows that a re-send it has no record of was
       * applied nowhere (a dead primary forwarded it first or not at all): new, not unknown. */
      srv_once_check(s->once->records, h->client_id, h->seq, h->seq_floor,
                    h->retry && !complete, ps_now_ns(), r, &orig);
  switch (v) {
    case SRV_ONCE_APPLY:
      r->once_reg = true;
      test_cut(s, r);
      return false;
    case SRV_ONCE_DONE: srv_reply_ok(s, r); return true;
    case SRV_ONCE_INFLIGHT: {
      srv_req *o = orig;
      r->next = o->once_dups;
      o->once_dups = r;
      return true;
    }
    case SRV_ONCE_FAILED:
      snprintf(why, sizeof why, "failed on shard %u before; this copy is not applied",
               s->opt.shard);
      break;
    case SRV_ONCE_UNKNOWN:
      snprintf(why, sizeof why, "is a re-send that shard %u has no record of (it restarted, or "
               "forgot the client): it may or may not have been applied", s->opt.shard);
      break;
    case SRV_ONCE_TOO_MANY:
      st = PS_ERR_INVALID;
      snprintf(why, sizeof why, "is %u or more past its floor %" PRIu64 " on shard %u (too many "
               "pushes in flight)", SRV_ONCE_WINDOW, h->seq_floor, s->opt.shard);
      break;
    case SRV_ONCE_NOMEM:
      st = PS_ERR_NOMEM;
      snprintf(why, sizeof why, "could not be recorded on shard %u (out of memory)", s->opt.shard);
      break;
  }
  srv_reply_error(s, r, st, "push %" PRIu64 " of client %016" PRIx64 " %s", h->seq, h->client_id,
                  why);
  return true;
}

void srv_once_replied(ps_server *s, srv_req *r, const Ember__Header *rh) {
  if (r->once_reg) {
    r->once_reg = false;
    srv_once_settle(s->once->records, r->h->client_id, r->h->seq, rh->status == 0);
  }
  srv_req *d = r->once_dups;
  r->once_dups = NULL;
  while (d) {
    srv_req *next = d->next;
    Ember__Header dh;
    ps_wire_header_init(&dh, rh->op);
    dh.status = rh->status;
    dh.message = rh->message;
    srv_reply(s, d, &dh, NULL);
    d = next;
  }
}

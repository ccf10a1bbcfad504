/* ps_client: see ps_client.h.
 *
 * Design: no background thread. Requests are sent from the caller's thread when they start;
 * ps_client_wait polls every server socket and handles whatever reply arrives, for any request
 * in flight, until the one it waits for is complete (so a pipelined caller never loses a
 * reply). A request is a set of sub-requests, one per shard it touches, each with its own
 * request id. Bulk frames are written straight into zmq messages (keys sharded into them,
 * gradients summed into them), and pulled rows are copied once, from the reply frames to the
 * caller's rows. A socket monitor per server tells us when a connection drops and comes back,
 * which is what drives re-sending (idempotent requests) or failing (the others). */
#include "ps_client.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "ember.pb-c.h"
#include "ps_cli.h"
#include "ps_dedup.h"
#include "ps_hash.h"
#include "ps_rowcopy.h"
#include "ps_time.h"
#include "ps_wire.h"

#define CL_MAX_SERVERS 4096

typedef struct cl_sub {
  uint64_t rid;
  struct ps_client_req *req;
  uint32_t srv;
  bool pending;  /* registered, waiting for its reply */
  bool lost;     /* its connection dropped; re-send when it is back */
  zmq_msg_t part[PS_WIRE_MAX_FRAMES]; /* kept for re-sending (idempotent requests) */
  int nparts;
  zmq_msg_t vals; /* pull reply rows */
  bool has_vals;
  Ember__Header *rep; /* control replies */
  size_t nkeys;
} cl_sub;

struct ps_client_req {
  ps_client *c;
  struct ps_client_req *next_free, *next_all;
  Ember__Op op;
  uint32_t table, dim;
  size_t n, nu;
  float *out;
  bool unique;
  bool idempotent;
  bool in_use;
  uint64_t *ukeys;
  uint32_t *inv, *ush, *uidx;
  size_t cap;
  cl_sub *subs;   /* one per server */
  uint32_t active, done;
  ps_status st;
  char err[1024];
  uint64_t deadline;
  uint64_t timeout_ms;
};

typedef struct cl_server {
  char url[256];
  void *sock;
  void *mon;
  bool down;
} cl_server;

struct ps_client {
  ps_client_options opt;
  void *ctx;
  cl_server *srv;
  size_t nsrv;
  zmq_pollitem_t *items;
  ps_dedup *dd;
  uint64_t next_rid;
  cl_sub **pend;
  size_t npend, pend_cap;
  struct ps_client_req *free_reqs, *all_reqs;
  uint16_t *dims; /* by table id; 0 = not declared here */
  char err[1024];
  uint64_t disconnects, resent, stale;
  size_t *cnt; /* per-shard scratch */
  char **vbase;
  float *acc;  /* f16 pushes: gradients summed in f32 before conversion */
  size_t acc_cap;
};

static const char *op_name(int op) {
  static const char *n[] = {"NONE", "DECLARE", "PULL", "PUSH", "STEP", "CHECKPOINT", "STATS",
                            "ERROR", "JOIN", "KV_SET", "KV_GET", "BARRIER", "RESTORE", "PING"};
  return op >= 0 && op < 14 ? n[op] : "?";
}

static ps_status set_err(ps_client *c, ps_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ps_status set_err(ps_client *c, ps_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
  return st;
}

void ps_client_options_default(ps_client_options *o) {
  memset(o, 0, sizeof *o);
  o->timeout_ms = 30000;
  o->ckpt_timeout_ms = 600000;
}

/* ------------------------------------------------------------------ lifecycle */

ps_status ps_client_create(const char *const *urls, size_t n, const ps_client_options *opt,
                           ps_client **out) {
  *out = NULL;
  if (!urls || n == 0 || n > CL_MAX_SERVERS) return PS_ERR_INVALID;
  ps_client *c = calloc(1, sizeof *c);
  if (!c) return PS_ERR_NOMEM;
  if (opt) c->opt = *opt;
  else ps_client_options_default(&c->opt);
  if (!c->opt.timeout_ms) c->opt.timeout_ms = 30000;
  if (!c->opt.ckpt_timeout_ms) c->opt.ckpt_timeout_ms = 600000;
  c->next_rid = 1;
  c->nsrv = n;
  c->ctx = zmq_ctx_new();
  c->srv = calloc(n, sizeof *c->srv);
  c->items = calloc(2 * n, sizeof *c->items);
  c->dims = calloc(PS_WIRE_MAX_TABLE + 1, sizeof *c->dims);
  c->cnt = calloc(n, sizeof *c->cnt);
  c->vbase = calloc(n, sizeof *c->vbase);
  ps_status st = PS_ERR_NOMEM;
  if (!c->ctx || !c->srv || !c->items || !c->dims || !c->cnt || !c->vbase ||
      ps_dedup_create(&c->dd) != PS_OK)
    goto fail;
  for (size_t i = 0; i < n; i++) {
    cl_server *s = &c->srv[i];
    if (!urls[i] || strlen(urls[i]) >= sizeof s->url) {
      st = set_err(c, PS_ERR_INVALID, "server URL %zu is missing or too long", i);
      goto fail;
    }
    snprintf(s->url, sizeof s->url, "%s", urls[i]);
    s->sock = zmq_socket(c->ctx, ZMQ_DEALER);
    if (!s->sock) goto fail;
    int zero = 0, hwm = 100000, ivl = 100, ivl_max = 1000;
    zmq_setsockopt(s->sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s->sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s->sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(s->sock, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max);
    char mon[128];
    snprintf(mon, sizeof mon, "inproc://ember-client-%p-%zu", (void *)c, i);
    if (zmq_socket_monitor(s->sock, mon, ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED) !=
        0)
      goto fail;
    s->mon = zmq_socket(c->ctx, ZMQ_PAIR);
    if (!s->mon || zmq_connect(s->mon, mon) != 0) goto fail;
    zmq_setsockopt(s->mon, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_connect(s->sock, s->url) != 0) {
      st = set_err(c, PS_ERR_INVALID, "cannot connect to '%s': %s", s->url, zmq_strerror(errno));
      goto fail;
    }
    c->items[2 * i].socket = s->sock;
    c->items[2 * i].events = ZMQ_POLLIN;
    c->items[2 * i + 1].socket = s->mon;
    c->items[2 * i + 1].events = ZMQ_POLLIN;
  }
  *out = c;
  return PS_OK;
fail:
  ps_client_destroy(&c);
  return st;
}

ps_status ps_client_create_list(const char *urls, const ps_client_options *opt,
                                ps_client **out) {
  char *items[CL_MAX_SERVERS];
  int n = ps_split_list(urls, ',', items, CL_MAX_SERVERS);
  if (n <= 0) return PS_ERR_INVALID;
  ps_status st = ps_client_create((const char *const *)items, (size_t)n, opt, out);
  free(items[0]);
  return st;
}

static void sub_clear(cl_sub *s) {
  for (int i = 0; i < s->nparts; i++) zmq_msg_close(&s->part[i]);
  s->nparts = 0;
  if (s->has_vals) zmq_msg_close(&s->vals);
  s->has_vals = false;
  if (s->rep) ember__header__free_unpacked(s->rep, NULL);
  s->rep = NULL;
}

static void unregister(ps_client *c, cl_sub *s) {
  if (!s->pending) return;
  for (size_t i = 0; i < c->npend; i++) {
    if (c->pend[i] == s) {
      c->pend[i] = c->pend[--c->npend];
      break;
    }
  }
  s->pending = false;
}

static void req_release(ps_client *c, struct ps_client_req *r) {
  if (!r || !r->in_use) return;
  for (size_t i = 0; i < c->nsrv; i++) {
    unregister(c, &r->subs[i]);
    sub_clear(&r->subs[i]);
  }
  r->in_use = false;
  r->next_free = c->free_reqs;
  c->free_reqs = r;
}

void ps_client_destroy(ps_client **cp) {
  if (!cp || !*cp) return;
  ps_client *c = *cp;
  *cp = NULL;
  while (c->all_reqs) {
    struct ps_client_req *r = c->all_reqs;
    c->all_reqs = r->next_all;
    if (r->in_use)
      for (size_t i = 0; i < c->nsrv; i++) sub_clear(&r->subs[i]);
    free(r->ukeys);
    free(r->inv);
    free(r->ush);
    free(r->uidx);
    free(r->subs);
    free(r);
  }
  for (size_t i = 0; c->srv && i < c->nsrv; i++) {
    if (c->srv[i].sock) {
      zmq_socket_monitor(c->srv[i].sock, NULL, 0);
      zmq_close(c->srv[i].sock);
    }
    if (c->srv[i].mon) zmq_close(c->srv[i].mon);
  }
  if (c->ctx) zmq_ctx_term(c->ctx);
  ps_dedup_destroy(&c->dd);
  free(c->srv);
  free(c->items);
  free(c->dims);
  free(c->pend);
  free(c->cnt);
  free(c->vbase);
  free(c->acc);
  free(c);
}

const char *ps_client_error(const ps_client *c) { return c ? c->err : ""; }
size_t ps_client_servers(const ps_client *c) { return c->nsrv; }
const char *ps_client_url(const ps_client *c, size_t i) {
  return i < c->nsrv ? c->srv[i].url : "";
}
void ps_client_set_rank(ps_client *c, uint32_t rank) { c->opt.rank = rank; }
void ps_client_counters(const ps_client *c, uint64_t *disconnects, uint64_t *resent) {
  if (disconnects) *disconnects = c->disconnects;
  if (resent) *resent = c->resent;
}

/* ------------------------------------------------------------------ requests */

static struct ps_client_req *req_get(ps_client *c, Ember__Op op, uint64_t timeout_ms) {
  struct ps_client_req *r = c->free_reqs;
  if (r) {
    c->free_reqs = r->next_free;
  } else {
    r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->subs = calloc(c->nsrv, sizeof *r->subs);
    if (!r->subs) {
      free(r);
      return NULL;
    }
    r->next_all = c->all_reqs;
    c->all_reqs = r;
  }
  r->c = c;
  r->op = op;
  r->in_use = true;
  r->active = r->done = 0;
  r->st = PS_OK;
  r->err[0] = '\0';
  r->out = NULL;
  r->n = r->nu = 0;
  r->idempotent = op != EMBER__OP__OP_PUSH && op != EMBER__OP__OP_STEP &&
                  op != EMBER__OP__OP_CHECKPOINT && op != EMBER__OP__OP_RESTORE &&
                  op != EMBER__OP__OP_KV_SET;
  r->deadline = ps_now_ns() + timeout_ms * 1000000ull;
  r->timeout_ms = timeout_ms;
  for (size_t i = 0; i < c->nsrv; i++) {
    cl_sub *s = &r->subs[i];
    s->req = r;
    s->srv = (uint32_t)i;
    s->pending = s->lost = false;
    s->nkeys = 0;
  }
  return r;
}

static bool req_reserve(struct ps_client_req *r, size_t n) {
  if (n <= r->cap) return true;
  size_t nc = r->cap ? r->cap : 1024;
  while (nc < n) nc *= 2;
  uint64_t *k = realloc(r->ukeys, nc * sizeof *k);
  if (k) r->ukeys = k;
  uint32_t *a = realloc(r->inv, nc * sizeof *a);
  if (a) r->inv = a;
  uint32_t *b = realloc(r->ush, nc * sizeof *b);
  if (b) r->ush = b;
  uint32_t *d = realloc(r->uidx, nc * sizeof *d);
  if (d) r->uidx = d;
  if (!k || !a || !b || !d) return false;
  r->cap = nc;
  return true;
}

static void sub_fail(cl_sub *s, ps_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void sub_fail(cl_sub *s, ps_status st, const char *fmt, ...) {
  struct ps_client_req *r = s->req;
  ps_client *c = r->c;
  if (r->st == PS_OK) {
    r->st = st;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->err, sizeof r->err, "%s (shard %u): %s", c->srv[s->srv].url, s->srv, msg);
  }
  unregister(c, s);
  r->done++;
}

static void sub_done(cl_sub *s) {
  unregister(s->req->c, s);
  s->req->done++;
}

/* Sends the sub-request's frames; keeps copies when it may have to be re-sent. */
static int sub_send(ps_client *c, cl_sub *s, bool keep) {
  void *sock = c->srv[s->srv].sock;
  for (int i = 0; i < s->nparts; i++) {
    int flags = i + 1 < s->nparts ? ZMQ_SNDMORE : 0;
    if (keep) {
      zmq_msg_t m;
      zmq_msg_init(&m);
      zmq_msg_copy(&m, &s->part[i]); /* shares the buffer: no byte copy for large frames */
      if (zmq_msg_send(&m, sock, flags) < 0) {
        zmq_msg_close(&m);
        return -1;
      }
    } else if (zmq_msg_send(&s->part[i], sock, flags) < 0) {
      return -1;
    }
  }
  if (!keep) {
    /* zmq took the messages; re-initialize so sub_clear has nothing to close. */
    s->nparts = 0;
  }
  return 0;
}

static bool register_sub(ps_client *c, cl_sub *s) {
  if (c->npend == c->pend_cap) {
    size_t nc = c->pend_cap ? c->pend_cap * 2 : 64;
    cl_sub **np = realloc(c->pend, nc * sizeof *np);
    if (!np) return false;
    c->pend = np;
    c->pend_cap = nc;
  }
  c->pend[c->npend++] = s;
  s->pending = true;
  return true;
}

/* Packs h (with a fresh request id) as part 0 of s, and sends s with `bulk` further parts
 * already in s->part[1..]. */
static void sub_start(ps_client *c, cl_sub *s, Ember__Header *h, int nbulk) {
  struct ps_client_req *r = s->req;
  s->rid = c->next_rid++;
  h->request_id = s->rid;
  size_t hs = ember__header__get_packed_size(h);
  zmq_msg_init_size(&s->part[0], hs);
  ember__header__pack(h, zmq_msg_data(&s->part[0]));
  s->nparts = 1 + nbulk;
  r->active++;
  if (!register_sub(c, s)) {
    sub_fail(s, PS_ERR_NOMEM, "out of memory");
    return;
  }
  if (sub_send(c, s, r->idempotent) != 0)
    sub_fail(s, PS_ERR_UNAVAILABLE, "send failed: %s", zmq_strerror(errno));
}

/* ------------------------------------------------------------------ receiving */

static cl_sub *find_pending(ps_client *c, uint32_t srv, uint64_t rid) {
  for (size_t i = 0; i < c->npend; i++)
    if (c->pend[i]->rid == rid && c->pend[i]->srv == srv) return c->pend[i];
  return NULL;
}

static void handle_reply(ps_client *c, uint32_t srv, zmq_msg_t *fr, int nfr) {
  Ember__Header *h = ember__header__unpack(NULL, zmq_msg_size(&fr[0]), zmq_msg_data(&fr[0]));
  if (!h) {
    c->stale++;
    return;
  }
  cl_sub *s = find_pending(c, srv, h->request_id);
  if (!s || !h->is_reply) {
    c->stale++; /* a reply to a request that timed out, or a duplicate after a re-send */
    ember__header__free_unpacked(h, NULL);
    return;
  }
  struct ps_client_req *r = s->req;
  if (h->version != PS_WIRE_VERSION) {
    sub_fail(s, PS_ERR_VERSION, "server speaks protocol version %u, this client %u", h->version,
             PS_WIRE_VERSION);
  } else if (h->status != 0 || h->op == EMBER__OP__OP_ERROR) {
    ps_status st = h->status > 0 && h->status < PS_ERR_COUNT_ ? (ps_status)h->status
                                                              : PS_ERR_INTERNAL;
    sub_fail(s, st, "%s refused: %s", op_name(r->op), h->message ? h->message : "");
  } else if (r->op == EMBER__OP__OP_PULL) {
    size_t vs = c->opt.wire_f16 ? 2 : sizeof(float);
    Ember__ValueType vt = c->opt.wire_f16 ? EMBER__VALUE_TYPE__VT_F16 : EMBER__VALUE_TYPE__VT_F32;
    size_t want = s->nkeys * (size_t)r->dim * vs;
    if (nfr != 2 || h->count != s->nkeys || h->dim != r->dim || zmq_msg_size(&fr[1]) != want ||
        h->value_type != vt) {
      sub_fail(s, PS_ERR_PROTO, "PULL reply does not match the request (%" PRIu64
               " keys of dim %u, %zu bytes; expected %zu keys of dim %u)",
               h->count, h->dim, nfr == 2 ? zmq_msg_size(&fr[1]) : 0, s->nkeys, r->dim);
    } else {
      zmq_msg_init(&s->vals);
      if (c->opt.wire_f16 && ((uintptr_t)zmq_msg_data(&fr[1]) & 1)) {
        /* f16 rows are read as uint16_t: give an odd-addressed frame an aligned copy. */
        zmq_msg_init_size(&s->vals, want);
        memcpy(zmq_msg_data(&s->vals), zmq_msg_data(&fr[1]), want);
      } else {
        zmq_msg_move(&s->vals, &fr[1]);
      }
      s->has_vals = true;
      sub_done(s);
    }
  } else {
    s->rep = h;
    h = NULL;
    sub_done(s);
  }
  if (h) ember__header__free_unpacked(h, NULL);
}

static void drain_socket(ps_client *c, uint32_t srv) {
  void *sock = c->srv[srv].sock;
  for (;;) {
    zmq_msg_t fr[PS_WIRE_MAX_FRAMES];
    int nfr = 0;
    zmq_msg_init(&fr[0]);
    if (zmq_msg_recv(&fr[0], sock, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&fr[0]);
      return;
    }
    nfr = 1;
    bool extra = false;
    int more = zmq_msg_more(&fr[0]);
    while (more) {
      zmq_msg_t scratch, *m = nfr < (int)PS_WIRE_MAX_FRAMES ? &fr[nfr] : &scratch;
      zmq_msg_init(m);
      if (zmq_msg_recv(m, sock, 0) < 0) {
        zmq_msg_close(m);
        break;
      }
      more = zmq_msg_more(m);
      if (m == &scratch) {
        zmq_msg_close(m);
        extra = true;
      } else {
        nfr++;
      }
    }
    if (!extra) handle_reply(c, srv, fr, nfr);
    else c->stale++;
    for (int i = 0; i < nfr; i++) zmq_msg_close(&fr[i]);
  }
}

static void handle_monitor(ps_client *c, uint32_t srv) {
  cl_server *S = &c->srv[srv];
  for (;;) {
    zmq_msg_t ev, addr;
    zmq_msg_init(&ev);
    if (zmq_msg_recv(&ev, S->mon, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&ev);
      return;
    }
    uint16_t event = 0;
    if (zmq_msg_size(&ev) >= 2) memcpy(&event, zmq_msg_data(&ev), 2);
    bool more = zmq_msg_more(&ev);
    zmq_msg_close(&ev);
    while (more) {
      zmq_msg_init(&addr);
      if (zmq_msg_recv(&addr, S->mon, 0) < 0) {
        zmq_msg_close(&addr);
        break;
      }
      more = zmq_msg_more(&addr);
      zmq_msg_close(&addr);
    }
    if (event == ZMQ_EVENT_DISCONNECTED) {
      S->down = true;
      c->disconnects++;
      /* Walk a snapshot: sub_fail edits the pending array. */
      for (size_t i = 0; i < c->npend;) {
        cl_sub *s = c->pend[i];
        if (s->srv != srv) {
          i++;
          continue;
        }
        if (s->req->idempotent) {
          s->lost = true;
          i++;
        } else {
          sub_fail(s, PS_ERR_UNAVAILABLE,
                   "connection lost while a %s request was outstanding; it may or may not have "
                   "been applied",
                   op_name(s->req->op));
        }
      }
    } else if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      if (!S->down) continue;
      S->down = false;
      for (size_t i = 0; i < c->npend; i++) {
        cl_sub *s = c->pend[i];
        if (s->srv != srv || !s->lost) continue;
        s->lost = false;
        c->resent++;
        sub_send(c, s, true);
      }
    }
  }
}

/* Handles whatever arrives within timeout_ms (0 = just what is there). */
static void pump(ps_client *c, long timeout_ms) {
  int rc = zmq_poll(c->items, (int)(2 * c->nsrv), timeout_ms);
  if (rc <= 0) return;
  for (size_t i = 0; i < c->nsrv; i++) {
    if (c->items[2 * i + 1].revents & ZMQ_POLLIN) handle_monitor(c, (uint32_t)i);
    if (c->items[2 * i].revents & ZMQ_POLLIN) drain_socket(c, (uint32_t)i);
  }
}

static void scatter_pull_f16(ps_client *c, struct ps_client_req *r) {
  const size_t dim = r->dim;
  for (size_t i = 0; i < c->nsrv; i++)
    c->vbase[i] = r->subs[i].has_vals ? zmq_msg_data(&r->subs[i].vals) : NULL;
  for (size_t k = 0; k < r->n; k++) {
    uint32_t u = r->unique ? (uint32_t)k : r->inv[k];
    uint32_t sh = c->nsrv == 1 ? 0 : r->ush[u], idx = c->nsrv == 1 ? u : r->uidx[u];
    ps_wire_f16_to_f32((const uint16_t *)c->vbase[sh] + (size_t)idx * dim, r->out + k * dim, dim);
  }
}

static void scatter_pull(ps_client *c, struct ps_client_req *r) {
  if (c->opt.wire_f16) {
    scatter_pull_f16(c, r);
    return;
  }
  const size_t row = (size_t)r->dim * sizeof(float);
  if (c->nsrv == 1) {
    const char *v = zmq_msg_data(&r->subs[0].vals);
    if (r->unique) memcpy(r->out, v, r->n * row);
    else
      for (size_t k = 0; k < r->n; k++)
        ps_row_copy((char *)r->out + k * row, v + (size_t)r->inv[k] * row, row);
    return;
  }
  for (size_t i = 0; i < c->nsrv; i++)
    c->vbase[i] = r->subs[i].has_vals ? zmq_msg_data(&r->subs[i].vals) : NULL;
  for (size_t k = 0; k < r->n; k++) {
    uint32_t u = r->unique ? (uint32_t)k : r->inv[k];
    ps_row_copy((char *)r->out + k * row, c->vbase[r->ush[u]] + (size_t)r->uidx[u] * row, row);
  }
}

/* Waits for r; leaves it in use (the caller reads its replies and releases it). */
static ps_status req_wait(ps_client *c, struct ps_client_req *r) {
  while (r->done < r->active) {
    uint64_t now = ps_now_ns();
    if (now >= r->deadline) {
      for (size_t i = 0; i < c->nsrv; i++) {
        cl_sub *s = &r->subs[i];
        if (!s->pending) continue;
        sub_fail(s, PS_ERR_TIMEOUT, "no answer to %s (request %" PRIu64 ") within %" PRIu64
                 " ms%s", op_name(r->op), s->rid, r->timeout_ms,
                 c->srv[i].down ? " (the connection is down)" : "");
      }
      break;
    }
    long ms = (long)((r->deadline - now) / 1000000ull) + 1;
    pump(c, ms > 1000 ? 1000 : ms);
  }
  if (r->st != PS_OK) {
    snprintf(c->err, sizeof c->err, "%s", r->err);
    return r->st;
  }
  if (r->op == EMBER__OP__OP_PULL && r->out && r->n) scatter_pull(c, r);
  return PS_OK;
}

ps_status ps_client_ready(ps_client *c, ps_client_req *r, uint32_t wait_ms, bool *done) {
  if (!r || !done) return PS_ERR_INVALID;
  uint64_t end = ps_now_ns() + (uint64_t)wait_ms * 1000000ull;
  for (;;) {
    *done = r->done >= r->active;
    uint64_t now = ps_now_ns();
    if (*done || now >= end || now >= r->deadline) break;
    long ms = (long)((end - now) / 1000000ull);
    pump(c, ms);
    if (ms == 0) {
      *done = r->done >= r->active;
      break;
    }
  }
  if (!*done && ps_now_ns() >= r->deadline) *done = true; /* ps_client_wait reports the timeout */
  return PS_OK;
}

ps_status ps_client_wait(ps_client *c, ps_client_req **rp) {
  if (!rp || !*rp) return PS_ERR_INVALID;
  ps_status st = req_wait(c, *rp);
  req_release(c, *rp);
  *rp = NULL;
  return st;
}

/* ------------------------------------------------------------------ pull / push */

static ps_status data_start(ps_client *c, Ember__Op op, uint32_t table, uint64_t step,
                            const uint64_t *keys, size_t n, bool unique, float *out,
                            const float *grads, ps_client_req **rp) {
  *rp = NULL;
  if (table == 0 || table > PS_WIRE_MAX_TABLE || !c->dims[table])
    return set_err(c, PS_ERR_UNKNOWN_TABLE,
                   "table %u was not declared by this client (call ps_client_declare first)",
                   table);
  if (n && !keys) return set_err(c, PS_ERR_INVALID, "keys missing");
  if (n >= UINT32_MAX) return set_err(c, PS_ERR_INVALID, "%zu keys in one request", n);
  uint32_t dim = c->dims[table];
  struct ps_client_req *r = req_get(c, op, c->opt.timeout_ms);
  if (!r || !req_reserve(r, n ? n : 1)) {
    if (r) req_release(c, r);
    return set_err(c, PS_ERR_NOMEM, "out of memory");
  }
  r->table = table;
  r->dim = dim;
  r->n = n;
  r->out = out;
  r->unique = unique;
  const uint64_t *uk = keys;
  size_t nu = n;
  if (!unique) {
    ps_status st = ps_dedup_keys(c->dd, keys, n, r->ukeys, r->inv, &nu);
    if (st != PS_OK) {
      req_release(c, r);
      return set_err(c, st, "de-duplicating %zu keys failed", n);
    }
    uk = r->ukeys;
  }
  r->nu = nu;
  /* Shard the unique keys: count, then write each key straight into its shard's frame. */
  size_t S = c->nsrv;
  memset(c->cnt, 0, S * sizeof *c->cnt);
  if (S == 1) {
    c->cnt[0] = nu;
  } else {
    for (size_t u = 0; u < nu; u++) {
      uint32_t sh = ps_shard_of(uk[u], (uint32_t)S);
      r->ush[u] = sh;
      r->uidx[u] = (uint32_t)c->cnt[sh]++;
    }
  }
  const size_t row = (size_t)dim * sizeof(float);
  for (size_t i = 0; i < S; i++) {
    cl_sub *s = &r->subs[i];
    s->nkeys = c->cnt[i];
    if (!c->cnt[i]) continue;
    if (c->cnt[i] > PS_WIRE_MAX_KEYS) {
      req_release(c, r);
      return set_err(c, PS_ERR_INVALID, "%zu keys for one shard exceed the limit %u", c->cnt[i],
                     PS_WIRE_MAX_KEYS);
    }
    zmq_msg_init_size(&s->part[1], c->cnt[i] * sizeof(uint64_t));
    c->vbase[i] = zmq_msg_data(&s->part[1]);
    s->nparts = 2;
  }
  if (S == 1) {
    if (nu) memcpy(c->vbase[0], uk, nu * sizeof(uint64_t));
  } else {
    for (size_t u = 0; u < nu; u++) ((uint64_t *)c->vbase[r->ush[u]])[r->uidx[u]] = uk[u];
  }
  if (op == EMBER__OP__OP_PUSH) {
    const bool f16 = c->opt.wire_f16;
    if (f16 && nu * dim > c->acc_cap) {
      float *a = realloc(c->acc, nu * dim * sizeof(float));
      if (!a) {
        req_release(c, r);
        return set_err(c, PS_ERR_NOMEM, "out of memory");
      }
      c->acc = a;
      c->acc_cap = nu * dim;
    }
    size_t off = 0;
    for (size_t i = 0; i < S; i++) {
      cl_sub *s = &r->subs[i];
      if (s->nparts != 2) continue;
      zmq_msg_init_size(&s->part[2], s->nkeys * dim * (f16 ? 2 : sizeof(float)));
      c->vbase[i] = f16 ? (char *)(c->acc + off * dim) : zmq_msg_data(&s->part[2]);
      off += s->nkeys;
      s->nparts = 3;
    }
    /* Sum duplicates straight into the frames: the first occurrence of a key is copied, later
     * ones added (unique indices follow first occurrence). */
    size_t seen = 0;
    for (size_t k = 0; k < n; k++) {
      uint32_t u = unique ? (uint32_t)k : r->inv[k];
      float *dst = (float *)(c->vbase[S == 1 ? 0 : r->ush[u]] +
                             (size_t)(S == 1 ? u : r->uidx[u]) * row);
      const float *src = grads + k * dim;
      if (u == seen) {
        memcpy(dst, src, row);
        seen++;
      } else {
        for (uint32_t j = 0; j < dim; j++) dst[j] += src[j];
      }
    }
    if (f16)
      for (size_t i = 0; i < S; i++)
        if (r->subs[i].nparts == 3)
          ps_wire_f32_to_f16((const float *)c->vbase[i], zmq_msg_data(&r->subs[i].part[2]),
                             r->subs[i].nkeys * dim);
  }
  for (size_t i = 0; i < S; i++) {
    cl_sub *s = &r->subs[i];
    if (s->nparts < 2) continue;
    Ember__Header h;
    ps_wire_header_init(&h, op);
    h.table_id = table;
    h.step = step;
    h.worker = c->opt.rank;
    h.count = s->nkeys;
    h.dim = dim;
    if (c->opt.wire_f16) h.value_type = EMBER__VALUE_TYPE__VT_F16;
    int nbulk = s->nparts - 1;
    sub_start(c, s, &h, nbulk);
  }
  *rp = r;
  return PS_OK;
}

ps_status ps_client_pull_start(ps_client *c, uint32_t table, uint64_t step,
                               const uint64_t *keys, size_t n, bool unique, float *out,
                               ps_client_req **r) {
  if (n && !out) return set_err(c, PS_ERR_INVALID, "no output buffer");
  return data_start(c, EMBER__OP__OP_PULL, table, step, keys, n, unique, out, NULL, r);
}

ps_status ps_client_push_start(ps_client *c, uint32_t table, uint64_t step,
                               const uint64_t *keys, size_t n, bool unique, const float *grads,
                               ps_client_req **r) {
  if (n && !grads) return set_err(c, PS_ERR_INVALID, "no gradients");
  return data_start(c, EMBER__OP__OP_PUSH, table, step, keys, n, unique, NULL, grads, r);
}

static ps_status run_data(ps_client *c, Ember__Op op, uint32_t table, uint64_t step,
                          const uint64_t *keys, size_t n, bool unique, float *out,
                          const float *grads) {
  ps_client_req *r = NULL;
  ps_status st = op == EMBER__OP__OP_PULL
                     ? ps_client_pull_start(c, table, step, keys, n, unique, out, &r)
                     : ps_client_push_start(c, table, step, keys, n, unique, grads, &r);
  if (st != PS_OK) return st;
  return ps_client_wait(c, &r);
}

ps_status ps_client_pull(ps_client *c, uint32_t table, uint64_t step, const uint64_t *keys,
                         size_t n, float *out) {
  return run_data(c, EMBER__OP__OP_PULL, table, step, keys, n, false, out, NULL);
}
ps_status ps_client_push(ps_client *c, uint32_t table, uint64_t step, const uint64_t *keys,
                         size_t n, const float *grads) {
  return run_data(c, EMBER__OP__OP_PUSH, table, step, keys, n, false, NULL, grads);
}
ps_status ps_client_pull_unique(ps_client *c, uint32_t table, uint64_t step,
                                const uint64_t *keys, size_t n, float *out) {
  return run_data(c, EMBER__OP__OP_PULL, table, step, keys, n, true, out, NULL);
}
ps_status ps_client_push_unique(ps_client *c, uint32_t table, uint64_t step,
                                const uint64_t *keys, size_t n, const float *grads) {
  return run_data(c, EMBER__OP__OP_PUSH, table, step, keys, n, true, NULL, grads);
}

/* ------------------------------------------------------------------ control ops */

/* Sends h to one shard (shard >= 0) or all (-1) and waits; on success the caller reads
 * r->subs[i].rep and releases r. */
static ps_status ctl_start(ps_client *c, int shard, Ember__Header *h, uint64_t timeout_ms,
                           struct ps_client_req **out) {
  struct ps_client_req *r = req_get(c, h->op, timeout_ms);
  if (!r) return set_err(c, PS_ERR_NOMEM, "out of memory");
  h->worker = c->opt.rank;
  for (size_t i = 0; i < c->nsrv; i++) {
    if (shard >= 0 && (size_t)shard != i) continue;
    sub_start(c, &r->subs[i], h, 0);
  }
  *out = r;
  return PS_OK;
}

static ps_status ctl(ps_client *c, int shard, Ember__Header *h, uint64_t timeout_ms,
                     struct ps_client_req **out) {
  struct ps_client_req *r = NULL;
  ps_status st = ctl_start(c, shard, h, timeout_ms, &r);
  if (st != PS_OK) return st;
  st = req_wait(c, r);
  if (st != PS_OK || !out) req_release(c, r);
  else *out = r;
  return st;
}

ps_status ps_client_declare(ps_client *c, const ps_table_spec *t) {
  if (!t) return set_err(c, PS_ERR_INVALID, "no table spec");
  ps_table_spec v = *t;
  if (v.num_workers == 0) v.num_workers = 1; /* as the wire reads 0 */
  ps_error e;
  if (ps_table_spec_validate(&v, &e) != PS_OK) return set_err(c, e.code, "%s", e.msg);
  Ember__TableSpec sp;
  ps_wire_spec_to_pb(t, &sp);
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_DECLARE);
  h.table_id = t->id;
  h.table = &sp;
  ps_status st = ctl(c, -1, &h, c->opt.timeout_ms, NULL);
  if (st == PS_OK) c->dims[t->id] = (uint16_t)t->dim;
  return st;
}

ps_status ps_client_step_start(ps_client *c, uint32_t table, uint64_t step, ps_client_req **r) {
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_STEP);
  h.table_id = table;
  h.step = step;
  return ctl_start(c, -1, &h, c->opt.timeout_ms, r);
}

ps_status ps_client_step(ps_client *c, uint32_t table, uint64_t step) {
  ps_client_req *r = NULL;
  ps_status st = ps_client_step_start(c, table, step, &r);
  if (st != PS_OK) return st;
  return ps_client_wait(c, &r);
}

ps_status ps_client_join(ps_client *c, uint32_t world, int want_rank, const char *name,
                         int *rank) {
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_JOIN);
  h.world = world;
  h.rank = want_rank;
  h.name = (char *)(name ? name : "");
  struct ps_client_req *r = NULL;
  ps_status st = ctl(c, 0, &h, c->opt.timeout_ms, &r);
  if (st != PS_OK) return st;
  int got = r->subs[0].rep->rank;
  req_release(c, r);
  if (rank) *rank = got;
  c->opt.rank = (uint32_t)got;
  return PS_OK;
}

ps_status ps_client_barrier(ps_client *c, const char *name, uint32_t world,
                            uint32_t timeout_ms) {
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_BARRIER);
  h.name = (char *)name;
  h.world = world;
  h.timeout_ms = timeout_ms;
  return ctl(c, 0, &h, (uint64_t)timeout_ms + c->opt.timeout_ms, NULL);
}

ps_status ps_client_kv_set(ps_client *c, const char *key, const void *val, size_t len) {
  if (len > PS_WIRE_MAX_HEADER - 4096)
    return set_err(c, PS_ERR_INVALID, "value of %zu bytes is too large for the store", len);
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_KV_SET);
  h.name = (char *)key;
  h.blob.data = (uint8_t *)val;
  h.blob.len = len;
  return ctl(c, 0, &h, c->opt.timeout_ms, NULL);
}

ps_status ps_client_kv_get(ps_client *c, const char *key, void **val, size_t *len,
                           uint32_t timeout_ms) {
  *val = NULL;
  *len = 0;
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_KV_GET);
  h.name = (char *)key;
  h.timeout_ms = timeout_ms;
  struct ps_client_req *r = NULL;
  ps_status st = ctl(c, 0, &h, (uint64_t)timeout_ms + c->opt.timeout_ms, &r);
  if (st != PS_OK) return st;
  Ember__Header *rep = r->subs[0].rep;
  void *v = malloc(rep->blob.len ? rep->blob.len : 1);
  if (!v) {
    req_release(c, r);
    return set_err(c, PS_ERR_NOMEM, "out of memory");
  }
  if (rep->blob.len) memcpy(v, rep->blob.data, rep->blob.len);
  *val = v;
  *len = rep->blob.len;
  req_release(c, r);
  return PS_OK;
}

ps_status ps_client_rdv_set(void *client, const char *key, const void *val, size_t len) {
  return ps_client_kv_set(client, key, val, len);
}
ps_status ps_client_rdv_get(void *client, const char *key, void **val, size_t *len,
                            uint32_t timeout_ms) {
  return ps_client_kv_get(client, key, val, len, timeout_ms);
}

ps_status ps_client_checkpoint_phase(ps_client *c, ps_ckpt_phase phase, uint64_t step,
                                     const char *path) {
  if (phase < PS_CKPT_PREPARE || phase > PS_CKPT_ABORT)
    return set_err(c, PS_ERR_INVALID, "checkpoint phase %d", (int)phase);
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_CHECKPOINT);
  h.ckpt_phase = (Ember__CkptPhase)phase;
  h.step = step;
  h.path = (char *)(path ? path : "");
  /* Only a prepare snapshots; commit and abort rename or delete files. */
  struct ps_client_req *r = NULL;
  ps_status st = ctl(c, -1, &h,
                     phase == PS_CKPT_PREPARE ? c->opt.ckpt_timeout_ms : c->opt.timeout_ms, &r);
  if (st != PS_OK) return st;
  /* A server older than phases ignores the field and takes a one-phase checkpoint; its reply
   * does not echo the phase. Say so, rather than let the commit fail as a conflict. */
  for (size_t i = 0; i < c->nsrv && st == PS_OK; i++)
    if (r->subs[i].rep->ckpt_phase != h.ckpt_phase)
      st = set_err(c, PS_ERR_UNSUPPORTED,
                   "%s (shard %zu) does not know checkpoint phases: upgrade the servers before "
                   "the workers",
                   c->srv[i].url, i);
  req_release(c, r);
  return st;
}

ps_status ps_client_checkpoint(ps_client *c, uint64_t step, const char *path) {
  ps_status st = ps_client_checkpoint_phase(c, PS_CKPT_PREPARE, step, path);
  if (st != PS_OK) {
    /* Best effort, for disk space: a prepare never committed is dropped by the shard's next
     * prepare or restart anyway. The prepare's error is the one to report. */
    char err[sizeof c->err];
    memcpy(err, c->err, sizeof err);
    (void)ps_client_checkpoint_phase(c, PS_CKPT_ABORT, step, path);
    memcpy(c->err, err, sizeof err);
    return st;
  }
  if ((st = ps_client_checkpoint_phase(c, PS_CKPT_COMMIT, step, path)) != PS_OK) return st;
  /* Every shard has committed: record the global checkpoint at the coordinator. */
  json_t *j = json_pack("{s:I, s:s, s:I}", "step", (json_int_t)step, "path", path ? path : "",
                        "shards", (json_int_t)c->nsrv);
  char *js = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  json_decref(j);
  if (!js) return set_err(c, PS_ERR_NOMEM, "out of memory");
  st = ps_client_kv_set(c, "ember/checkpoint/latest", js, strlen(js));
  free(js);
  return st;
}

ps_status ps_client_latest_checkpoint(ps_client *c, uint64_t *step, char *path,
                                      size_t pathlen) {
  void *v = NULL;
  size_t n = 0;
  ps_status st = ps_client_kv_get(c, "ember/checkpoint/latest", &v, &n, 0);
  if (st != PS_OK) return st;
  json_error_t jerr;
  json_t *j = json_loadb(v, n, 0, &jerr);
  free(v);
  json_int_t s = 0;
  const char *p = NULL;
  if (!j || json_unpack(j, "{s:I, s:s}", "step", &s, "path", &p) != 0 || s < 0) {
    json_decref(j);
    return set_err(c, PS_ERR_CORRUPT, "the coordinator's checkpoint record does not parse");
  }
  if (step) *step = (uint64_t)s;
  if (path && pathlen) snprintf(path, pathlen, "%s", p);
  json_decref(j);
  return PS_OK;
}

ps_status ps_client_restore(ps_client *c, const char *path, uint64_t *step) {
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_RESTORE);
  h.path = (char *)(path ? path : "");
  struct ps_client_req *r = NULL;
  ps_status st = ctl(c, -1, &h, c->opt.ckpt_timeout_ms, &r);
  if (st != PS_OK) return st;
  uint64_t s0 = r->subs[0].rep->step;
  for (size_t i = 1; i < c->nsrv; i++) {
    if (r->subs[i].rep->step != s0) {
      st = set_err(c, PS_ERR_CORRUPT,
                   "shards restored different steps: %s at %" PRIu64 ", %s at %" PRIu64,
                   c->srv[0].url, s0, c->srv[i].url, r->subs[i].rep->step);
      break;
    }
  }
  req_release(c, r);
  if (step) *step = s0;
  return st;
}

ps_status ps_client_stats(ps_client *c, size_t shard, char **json) {
  *json = NULL;
  if (shard >= c->nsrv) return set_err(c, PS_ERR_INVALID, "no shard %zu", shard);
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_STATS);
  struct ps_client_req *r = NULL;
  ps_status st = ctl(c, (int)shard, &h, c->opt.timeout_ms, &r);
  if (st != PS_OK) return st;
  Ember__Header *rep = r->subs[shard].rep;
  char *s = malloc(rep->blob.len + 1);
  if (s) {
    memcpy(s, rep->blob.data, rep->blob.len);
    s[rep->blob.len] = '\0';
  }
  req_release(c, r);
  *json = s;
  return s ? PS_OK : set_err(c, PS_ERR_NOMEM, "out of memory");
}

ps_status ps_client_ping(ps_client *c, size_t shard) {
  if (shard >= c->nsrv) return set_err(c, PS_ERR_INVALID, "no shard %zu", shard);
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_PING);
  return ctl(c, (int)shard, &h, c->opt.timeout_ms, NULL);
}

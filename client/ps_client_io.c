/* ps_client_io: request bookkeeping and I/O of the client (see ps_client_int.h): request
 * ids, the in-flight table, sending, receiving and validating replies, timeouts and
 * reconnect (what is re-sent, and failover between replicas: ps_client_resend.c).
 *
 * Every sub-request waiting for its reply sits in one in-flight table (c->pend), found by
 * (shard, request id) when a reply comes. A reply is held to the request it answers by
 * ps_wire_check_reply, the validator the server uses for requests; a reply nobody waits for
 * (its request timed out, or a duplicate after a re-send) is counted as stale and dropped.
 * When a connection drops, idempotent requests outstanding on it are re-sent once it is back
 * (their frames are kept, sharing their buffers with the sent ones); the others fail at once,
 * since they may or may not have been applied. Pushes count as idempotent: each carries the
 * client's id and a sequence number per shard (cl_seq_take), and a re-sent one says so (retry)
 * so that the shard answers it from its records instead of applying it again. A server that
 * has never completed a handshake
 * PS_CLIENT_SILENT_WARN_MS into a request is named once at WARN (a wrong port would otherwise
 * be silent for the whole bound); the request still waits out its bound. A send waits for
 * its socket no longer than the request's bound either: a connection refused at the CURVE
 * handshake leaves the socket nothing to send on (see writable), and the request fails naming
 * the refusal, as a reply that never comes does. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "ps_client_int.h"
#include "ps_log.h"
#include "ps_op.h"
#include "ps_time.h"
#include "ps_zmq.h"

static void sub_clear(cl_sub *s) {
  for (int i = 0; i < s->nparts; i++) zmq_msg_close(&s->part[i]);
  s->nparts = 0;
  if (s->has_vals) zmq_msg_close(&s->vals);
  s->has_vals = false;
  if (s->has_pos) zmq_msg_close(&s->pos);
  s->has_pos = false;
  if (s->rep) ember__header__free_unpacked(s->rep, NULL);
  s->rep = NULL;
}

static void unregister(ps_client *c, cl_sub *s) {
  if (!s->pending) return;
  if (s->busy_ns) c->nbusy--;
  s->busy_ns = 0;
  for (size_t i = 0; i < c->npend; i++) {
    if (c->pend[i] == s) {
      c->pend[i] = c->pend[--c->npend];
      break;
    }
  }
  s->pending = false;
}

void cl_req_release(ps_client *c, struct ps_client_req *r) {
  if (!r || !r->in_use) return;
  cl_req_release(c, r->chain);
  r->chain = NULL;
  for (size_t i = 0; i < c->nsrv; i++) {
    unregister(c, &r->subs[i]);
    sub_clear(&r->subs[i]);
    if (r->subs[i].seq) cl_seq_settle(c, (uint32_t)i, r->subs[i].seq);
    r->subs[i].seq = 0;
  }
  r->in_use = false;
  r->next_free = c->free_reqs;
  c->free_reqs = r;
}

void cl_reqs_free(ps_client *c) {
  while (c->all_reqs) {
    struct ps_client_req *r = c->all_reqs;
    c->all_reqs = r->next_all;
    if (r->in_use)
      for (size_t i = 0; i < c->nsrv; i++) sub_clear(&r->subs[i]);
    free(r->scratch);
    free(r->subs);
    free(r);
  }
}

struct ps_client_req *cl_req_get(ps_client *c, Ember__Op op, uint64_t timeout_ms) {
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
  r->warm = false;
  r->chain = NULL;
  r->n = r->nu = 0;
  /* Which ops are re-sent is the op table's (ps_op.h). With replicas every request keeps
   * its frames: a replica's not-primary answer means it was not applied, so it goes to the
   * primary whatever its op. */
  const ps_op_info *info = ps_op_info_of(op);
  r->idempotent = c->replicated ? info->resend_replicated : info->resend;
  r->keep = r->idempotent || c->replicated;
  r->deadline = ps_now_ns() + timeout_ms * 1000000ull;
  r->timeout_ms = timeout_ms;
  for (size_t i = 0; i < c->nsrv; i++) {
    cl_sub *s = &r->subs[i];
    s->req = r;
    s->srv = (uint32_t)i;
    s->pending = s->lost = false;
    s->busy_ns = 0;
    s->busy_tries = 0;
    s->nkeys = 0;
    s->seq = 0;
  }
  return r;
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

/* Sends the sub-request's frames; keeps copies when it may have to be re-sent. first_flags:
 * ZMQ_DONTWAIT or 0, for the first frame (a message is taken whole or not at all). */
static int sub_send_flags(ps_client *c, cl_sub *s, bool keep, int first_flags) {
  void *sock = c->srv[s->srv].sock;
  for (int i = 0; i < s->nparts; i++) {
    int flags = (i + 1 < s->nparts ? ZMQ_SNDMORE : 0) | (i == 0 ? first_flags : 0);
    if (keep) {
      zmq_msg_t m;
      zmq_msg_init(&m);
      zmq_msg_copy(&m, &s->part[i]); /* shares the buffer: no byte copy for large frames */
      if (zmq_msg_send(&m, sock, flags) < 0) {
        int e = errno;
        zmq_msg_close(&m);
        errno = e;
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

int cl_sub_send(ps_client *c, cl_sub *s, bool keep) { return sub_send_flags(c, s, keep, 0); }

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

/* Whether the sub-request's socket takes a message before its request's deadline. A DEALER
 * blocks a send while it has no pipe, and a connection the server refused at the handshake
 * (a CURVE key it does not list, ZeroMQ's protocol error) leaves none: libzmq does not
 * reconnect after it, so a blocking send would never return. */
static bool writable(ps_client *c, const cl_sub *s) {
  zmq_pollitem_t it = {.socket = c->srv[s->srv].sock, .events = ZMQ_POLLOUT};
  for (;;) {
    uint64_t now = ps_now_ns();
    long ms = now < s->req->deadline ? (long)((s->req->deadline - now) / 1000000ull) + 1 : 0;
    int rc = zmq_poll(&it, 1, ms);
    if (rc > 0) return true;
    if (rc == 0 || errno != EINTR) return false;
  }
}

static void handle_monitor(ps_client *c, uint32_t srv);
static const char *refusal(const ps_client *c, const cl_server *S);

void cl_sub_start(ps_client *c, cl_sub *s, Ember__Header *h, int nbulk) {
  struct ps_client_req *r = s->req;
  s->rid = c->next_rid++;
  h->request_id = s->rid;
  ps_error se;
  const bool seq_ok =
      r->op != EMBER__OP__OP_PUSH || cl_seq_take(c, s->srv, h, &s->seq, &se) == PS_OK;
  size_t hs = ember__header__get_packed_size(h);
  zmq_msg_init_size(&s->part[0], hs);
  ember__header__pack(h, zmq_msg_data(&s->part[0]));
  s->nparts = 1 + nbulk;
  r->active++;
  if (!seq_ok) {
    sub_fail(s, se.code, "%s", se.msg);
    return;
  }
  if (!register_sub(c, s)) {
    sub_fail(s, PS_ERR_NOMEM, "out of memory");
    return;
  }
  int rc = sub_send_flags(c, s, r->keep, ZMQ_DONTWAIT);
  if (rc != 0 && errno == EAGAIN) {
    if (!writable(c, s)) {
      handle_monitor(c, s->srv); /* for the reason */
      sub_fail(s, PS_ERR_TIMEOUT, "could not send %s within %" PRIu64 " ms%s",
               ps_wire_op_name(r->op), r->timeout_ms,
               *refusal(c, &c->srv[s->srv]) ? refusal(c, &c->srv[s->srv]) : " (no connection)");
      return;
    }
    rc = cl_sub_send(c, s, r->keep);
  }
  if (rc != 0) sub_fail(s, PS_ERR_UNAVAILABLE, "send failed: %s", zmq_strerror(errno));
}

/* ------------------------------------------------------------------ receiving */

static cl_sub *find_pending(ps_client *c, uint32_t srv, uint64_t rid) {
  for (size_t i = 0; i < c->npend; i++)
    if (c->pend[i]->rid == rid && c->pend[i]->srv == srv) return c->pend[i];
  return NULL;
}

/* A pull the shard refused "busy" (its waiting room for requests over its memory bounds was
 * full, ps_server_mem.c: nothing of it ran) goes again after a backoff of 10, 20, ... 640 ms,
 * while its bound allows: a large pull split into parts of the request cap, from several
 * clients at once, filled that room and failed (2 of 4 pulls of 256 MiB). Pushes are not
 * re-sent so: their exactly-once records are the resend path's (ps_client_resend.c). */
static bool busy_retry(ps_client *c, cl_sub *s, const Ember__Header *h) {
  struct ps_client_req *r = s->req;
  if (h->status != PS_ERR_NOMEM || !h->message || strncmp(h->message, "busy", 4) != 0 ||
      r->op != EMBER__OP__OP_PULL || !r->keep)
    return false;
  uint64_t at = ps_now_ns() + (10ull << (s->busy_tries < 6 ? s->busy_tries : 6)) * 1000000ull;
  if (at >= r->deadline) return false; /* no time left: the refusal is the answer */
  if (!s->busy_tries++)
    PS_DEBUG_RL("shard %u is busy (%s): re-sending a pull part after a backoff", s->srv,
                h->message);
  if (!s->busy_ns) c->nbusy++;
  s->busy_ns = at;
  return true;
}

/* Re-sends the sub-requests whose backoff after a "busy" refusal is over; the milliseconds
 * until the next one is due (cap if none is sooner). */
static long resend_busy(ps_client *c, long cap) {
  if (!c->nbusy) return cap;
  uint64_t now = ps_now_ns();
  for (size_t i = 0; i < c->npend; i++) {
    cl_sub *s = c->pend[i];
    if (!s->busy_ns) continue;
    if (s->lost || s->busy_ns <= now) {
      s->busy_ns = 0;
      c->nbusy--;
      c->resent++;
      if (!s->lost) cl_sub_send(c, s, true); /* a lost one goes when its connection is back */
    } else {
      long ms = (long)((s->busy_ns - now) / 1000000ull) + 1;
      if (ms < cap) cap = ms;
    }
  }
  return cap;
}

static void handle_reply(ps_client *c, uint32_t srv, zmq_msg_t *fr, int nfr) {
  ps_frame f[PS_WIRE_MAX_FRAMES];
  for (int i = 0; i < nfr; i++) {
    f[i].data = zmq_msg_data(&fr[i]);
    f[i].size = zmq_msg_size(&fr[i]);
  }
  Ember__Header *h = ps_wire_header_unpack(&f[0]);
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
  cl_server *S = &c->srv[srv];
  if (S->nrep > 1 && h->status == PS_ERR_UNAVAILABLE && h->repl_primary && r->keep) {
    /* A replica that is not the primary: nothing was applied; on to the one it names, or the
     * next when it names itself or none it can reach. */
    uint32_t to = h->repl_primary - 1;
    if (to >= S->nrep || to == S->cur) to = (S->cur + 1) % S->nrep;
    s->lost = true;
    ember__header__free_unpacked(h, NULL);
    cl_failover(c, srv, to, "it is not the primary");
    return;
  }
  if (S->lost_ns && h->status == 0) {
    uint64_t ms = (ps_now_ns() - S->lost_ns) / 1000000ull;
    c->failovers++;
    c->failover_ms_last = ms;
    S->lost_ns = 0;
    PS_INFO("failover: shard %u answered by %s (replica %u) %" PRIu64 " ms after %s (replica %u)"
            " was lost", srv, S->url, S->cur, ms, S->rep[S->lost_from], S->lost_from);
  }
  if (busy_retry(c, s, h)) {
    ember__header__free_unpacked(h, NULL);
    return;
  }
  ps_wire_expect want = {r->op, r->table, r->warm ? 0 : s->nkeys, r->dim,
                         c->opt.wire_f16 ? EMBER__VALUE_TYPE__VT_F16 : EMBER__VALUE_TYPE__VT_F32};
  ps_error e;
  ps_status st = ps_wire_check_reply(h, f, (size_t)nfr, &want, &e);
  if (st != PS_OK) {
    sub_fail(s, st, "%s", e.msg);
  } else if (r->op == EMBER__OP__OP_PULL || r->op == EMBER__OP__OP_REFRESH) {
    if (h->served < S->served_lo) S->served_lo = h->served;
    if (h->served > S->served_hi) S->served_hi = h->served;
    const int vf = r->op == EMBER__OP__OP_REFRESH ? 2 : 1; /* a REFRESH: positions first */
    if (vf == 2) {
      zmq_msg_init(&s->pos);
      if ((uintptr_t)f[1].data & 7) { /* read as uint64_t: an aligned copy */
        zmq_msg_init_size(&s->pos, f[1].size);
        memcpy(zmq_msg_data(&s->pos), f[1].data, f[1].size);
      } else {
        zmq_msg_move(&s->pos, &fr[1]);
      }
      s->has_pos = true;
    }
    zmq_msg_init(&s->vals);
    if (c->opt.wire_f16 && ((uintptr_t)f[vf].data & 1)) {
      /* f16 rows are read as uint16_t: give an odd-addressed frame an aligned copy. */
      zmq_msg_init_size(&s->vals, f[vf].size);
      memcpy(zmq_msg_data(&s->vals), f[vf].data, f[vf].size);
    } else {
      zmq_msg_move(&s->vals, &fr[vf]);
    }
    s->has_vals = true;
    sub_done(s);
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

/* Shard srv's connection dropped: what it had outstanding fails when it may or may not have
 * been applied, and waits to be re-sent (lost) when it is idempotent. */
static void fail_or_mark_lost(ps_client *c, uint32_t srv) {
  /* Walk in place: sub_fail removes the failed one from the pending array. */
  for (size_t i = 0; i < c->npend;) {
    cl_sub *s = c->pend[i];
    if (s->srv == srv && !s->req->idempotent) {
      sub_fail(s, PS_ERR_UNAVAILABLE,
               "connection lost while a %s request was outstanding; it may or may not have "
               "been applied",
               ps_wire_op_name(s->req->op));
      continue;
    }
    if (s->srv == srv) s->lost = true;
    i++;
  }
}

static void handle_monitor(ps_client *c, uint32_t srv) {
  cl_server *S = &c->srv[srv];
  uint16_t event;
  uint32_t value;
  char ep[256];
  while (ps_zmq_monitor_next(S->mon, &event, &value, ep, sizeof ep)) {
    /* A replica the client left: what its old connection does is no news. */
    if (S->nrep > 1 && ep[0] && strcmp(ep, S->url) != 0) continue;
    if (event == ZMQ_EVENT_DISCONNECTED) {
      c->disconnects++;
      fail_or_mark_lost(c, srv);
      if (S->nrep > 1) cl_failover(c, srv, (S->cur + 1) % S->nrep, "its connection dropped");
      else S->down = true;
    } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ||
               event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
      S->refused = event;
    } else if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      S->refused = 0;
      S->moved_ns = 0;
      if (!S->answered && !S->warned) c->nunsure--;
      S->answered = true;
      if (!S->down) continue;
      S->down = false;
      cl_resend_lost(c, srv);
    }
  }
}

/* Handles whatever arrives within timeout_ms (0 = just what is there); with replicas, at most
 * a tenth of failover_ms, so that a replica that never connects is left in time. */
static void pump(ps_client *c, long timeout_ms) {
  cl_failover_check(c);
  timeout_ms = resend_busy(c, timeout_ms);
  if (c->replicated && timeout_ms > (long)c->opt.failover_ms / 10 + 1)
    timeout_ms = (long)c->opt.failover_ms / 10 + 1;
  int rc = zmq_poll(c->items, (int)(2 * c->nsrv), timeout_ms);
  if (rc <= 0) return;
  for (size_t i = 0; i < c->nsrv; i++) {
    if (c->items[2 * i + 1].revents & ZMQ_POLLIN) handle_monitor(c, (uint32_t)i);
    if (c->items[2 * i].revents & ZMQ_POLLIN) drain_socket(c, (uint32_t)i);
  }
}

/* Why a server's handshakes fail, for the messages of a request that waits on it ("" when
 * none failed). */
static const char *refusal(const ps_client *c, const cl_server *S) {
  if (S->refused == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
    return " (it refused this client's CURVE key: is the key's .public in the server's "
           "--curve-clients?)";
  if (S->refused == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
    return " (the handshake failed: one side uses CURVE and the other does not?)";
  /* A CURVE server that cannot open the client's HELLO (another server key) just closes. */
  if (c->opt.curve_secret[0] && S->down && !S->answered)
    return " (the server closed every CURVE handshake: is --curve-server its public key?)";
  /* A CURVE server closes a plain client's connection as soon as it reads its greeting; the
   * client sees the mismatch itself only when the server's greeting arrives before the reset,
   * a race it often loses under load. DISCONNECTED is only raised for connections TCP
   * accepted, so a connection closed before any handshake completed means the same thing. */
  if (S->down && !S->answered)
    return " (the server closed the connection during the handshake: one side uses CURVE and "
           "the other does not?)";
  return "";
}

/* Names, once per server, a server r still waits for that never completed a handshake,
 * once r has waited PS_CLIENT_SILENT_WARN_MS. */
static void warn_silent(ps_client *c, const struct ps_client_req *r, uint64_t now) {
  uint64_t start = r->deadline - r->timeout_ms * 1000000ull;
  if (!c->nunsure || now - start < PS_CLIENT_SILENT_WARN_MS * 1000000ull) return;
  for (size_t i = 0; i < c->nsrv; i++) {
    cl_server *S = &c->srv[i];
    if (S->answered || S->warned || !r->subs[i].pending) continue;
    S->warned = true;
    c->nunsure--;
    PS_WARN("server %s (shard %zu) does not answer yet%s; waiting up to %" PRIu64 " s", S->url, i,
            refusal(c, S), (r->timeout_ms + 999) / 1000);
  }
}

/* How long a wait may poll before warn_silent has to look (ms), at most cap. */
static long poll_cap(const ps_client *c, const struct ps_client_req *r, uint64_t now, long cap) {
  uint64_t at = r->deadline - r->timeout_ms * 1000000ull + PS_CLIENT_SILENT_WARN_MS * 1000000ull;
  if (!c->nunsure || now >= at) return cap;
  for (size_t i = 0; i < c->nsrv; i++) {
    if (c->srv[i].answered || c->srv[i].warned || !r->subs[i].pending) continue;
    long ms = (long)((at - now) / 1000000ull) + 1;
    return ms < cap ? ms : cap;
  }
  return cap;
}

static ps_status wait_one(ps_client *c, struct ps_client_req *r, ps_error *err) {
  while (r->done < r->active) {
    uint64_t now = ps_now_ns();
    warn_silent(c, r, now);
    if (now >= r->deadline) {
      for (size_t i = 0; i < c->nsrv; i++) {
        cl_sub *s = &r->subs[i];
        if (!s->pending) continue;
        sub_fail(s, PS_ERR_TIMEOUT, "no answer to %s (request %" PRIu64 ") within %" PRIu64
                 " ms%s", ps_wire_op_name(r->op), s->rid, r->timeout_ms,
                 *refusal(c, &c->srv[i]) ? refusal(c, &c->srv[i])
                 : c->srv[i].down      ? " (the connection is down)"
                 : !c->srv[i].answered ? " (the server never answered: is one listening there?)"
                                       : "");
      }
      break;
    }
    long ms = (long)((r->deadline - now) / 1000000ull) + 1;
    pump(c, poll_cap(c, r, now, ms > 1000 ? 1000 : ms));
  }
  if (r->st != PS_OK) return ps_error_set(err, r->st, "%s", r->err);
  if (r->op == EMBER__OP__OP_PULL && r->out && r->n) cl_scatter_pull(c, r);
  if (r->op == EMBER__OP__OP_REFRESH && r->n) return cl_scatter_refresh(c, r, err);
  return PS_OK;
}

ps_status cl_req_wait(ps_client *c, struct ps_client_req *r, ps_error *err) {
  ps_status st = PS_OK;
  ps_error later;
  for (struct ps_client_req *p = r; p; p = p->chain) { /* every part of a split one */
    ps_status st2 = wait_one(c, p, st == PS_OK ? err : &later);
    if (st == PS_OK) st = st2; /* the first failure is the one reported */
  }
  return st;
}

/* Pumps until r (one part) is complete or `end` passes; *done as ps_client_ready's. */
static void ready_one(ps_client *c, struct ps_client_req *r, uint64_t end, bool *done) {
  for (;;) {
    *done = r->done >= r->active;
    uint64_t now = ps_now_ns();
    if (*done || now >= end || now >= r->deadline) break;
    warn_silent(c, r, now);
    long ms = (long)((end - now) / 1000000ull);
    pump(c, ms ? poll_cap(c, r, now, ms) : 0);
    if (ms == 0) {
      *done = r->done >= r->active;
      break;
    }
  }
  if (!*done && ps_now_ns() >= r->deadline) *done = true; /* ps_client_wait reports the timeout */
}

ps_status ps_client_ready(ps_client *c, ps_client_req *r, uint32_t wait_ms, bool *done,
                          ps_error *err) {
  if (!r || !done) return ps_error_set(err, PS_ERR_INVALID, "no request or no done flag");
  uint64_t end = ps_now_ns() + (uint64_t)wait_ms * 1000000ull;
  for (struct ps_client_req *p = r; p; p = p->chain) { /* every part of a split one */
    ready_one(c, p, end, done);
    if (!*done) break;
  }
  return PS_OK;
}

ps_status ps_client_wait(ps_client *c, ps_client_req **rp, ps_error *err) {
  if (!rp || !*rp) return ps_error_set(err, PS_ERR_INVALID, "no request to wait for");
  ps_status st = cl_req_wait(c, *rp, err);
  cl_req_release(c, *rp);
  *rp = NULL;
  return st;
}

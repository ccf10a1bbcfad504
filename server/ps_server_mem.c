/* ps_server_mem: the shard's memory bounds against whatever clients send -- the request cap,
 * and the bytes that requests hold, per connection and in all.
 *
 * R, the request cap (--max-request-mb, else max(64 MiB, min(cache/4, 256 MiB))), bounds every
 * frame (ZMQ_MAXMSGSIZE: a peer announcing a larger one is disconnected by ZeroMQ before
 * anything is buffered) and every pull reply (a larger pull is refused at intake with
 * PS_ERR_NOMEM, "too large", before any store work), and so the keys of a request.
 *
 * Every request is charged at intake: its frames (plus SRV_REQ_COST), and for a pull that can
 * run now its reply too, reserved then so that it never waits again once admitted. The frames
 * come back when the request is freed; the reply when ZeroMQ lets go of it -- the reply buffer
 * is ours (zmq_msg_init_data) and its free callback, on ZeroMQ's I/O thread once the bytes are
 * in the kernel or the peer is gone, gives the bytes back. So a peer that never reads holds
 * its replies' bytes and no more. A request that would take its connection past R, or all
 * requests past 2R, is parked (FIFO; nothing blocks) until bytes come back; at most R of
 * frames and SRV_PARK_MAX requests wait, beyond that a request is refused with PS_ERR_NOMEM
 * ("busy"). A request alone on its connection and alone in all always fits. A pull deferred
 * for its step (sync/ssp) holds its frames only, and charges its reply when its step is
 * readable -- parked then if it does not fit (later requests never waited for a deferred pull
 * anyway), so no deferred pull holds a reply's bytes that the pushes it waits for would need.
 *
 * Connections are told apart by a hash of their routing id into SRV_CONN_SLOTS slots (two
 * connections sharing a slot share its cap: a fairness cost, never a memory one). A slot with
 * parked requests parks its later ones behind them, and srv_mem_unpark starts them in order
 * per slot, so the order of a connection's requests is kept.
 *
 * One released reply buffer of SRV_SPARE_MIN..min(R, SRV_SPARE_MAX) bytes is kept (the spare,
 * an atomic pointer: released on ZeroMQ's I/O thread, taken on the main thread) and reused by
 * the next pull it fits. A fresh buffer of that size comes from mmap and is freed back to the
 * kernel: a 25 MB multi-hot reply's ~6,000 page faults (zeroing, memcg charge, unmap) were a
 * third of the server's CPU on such pulls (bench/RESULTS-net.md, issue 22). Every byte of a
 * reply sent is written by its pull (an error sends no rows), so reuse shows no old rows. The
 * spare adds at most SRV_SPARE_MAX to the shard's memory (docs/OPERATIONS.md).
 *
 * Sync pushes outlive their requests: buffered per table and step until every worker reported
 * the step, they would otherwise grow without bound under a step that never completes (one
 * connection pushing into it forever). Their gradients (as the f32 rows the buffers hold, with
 * their keys) are charged to a cap of R from the push until the step is applied; a push past
 * it is refused with PS_ERR_NOMEM. The buffers grow by doubling, so they hold at most 2R, plus
 * SRV_SYNC_KEEP of applied steps' buffers kept for reuse (ps_server_partition_threads.c).
 *
 * A CURVE peer with no key must not hold memory either, but libzmq (4.3) applies the one
 * ZMQ_MAXMSGSIZE (R) to the handshake's commands as to data, so a peer may announce a HELLO of
 * R and fill it; libzmq keeps it until its handshake timeout, and says neither which
 * connection authenticated nor offers to close one. What the server can see: the monitor's
 * ACCEPTED event names a connection's socket, a request names the socket it came from, and
 * the kernel counts the bytes a socket received (TCP_INFO). A connection that received more
 * than a handshake without delivering a message is in the middle of a frame -- an
 * unauthenticated one's HELLO, or a legitimate first request; at most SRV_HS_HEAVY of them
 * may be, newer ones are shut down (shutdown(2): libzmq sees the peer go and closes it), with
 * one WARN. Young connections are looked at every 10 ms; after ZMQ_HANDSHAKE_IVL a connection
 * still open has authenticated, and is forgotten. */
#include <arpa/inet.h>
#include <inttypes.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ps_log.h"
#include "ps_op.h"
#include "ps_server_int.h"
#include "ps_server_mem_int.h"
#include "ps_server_ops_int.h"
#include "ps_server_partition_threads_int.h"
#include "ps_server_request_schedule_int.h"
#include "ps_time.h"

/* The reply buffer: this header, then the bytes (64 bytes: the rows keep malloc's alignment). */
typedef struct mem_hdr {
  ps_server *s;
  uint64_t bytes;
  uint64_t cap; /* allocated bytes after the header (a reused spare may exceed `bytes`) */
  uint32_t slot;
  char pad[64 - sizeof(void *) - 2 * sizeof(uint64_t) - sizeof(uint32_t)];
} mem_hdr;
_Static_assert(sizeof(mem_hdr) == 64, "reply header keeps rows aligned");

typedef struct srv_hs {
  int fd;
  uint64_t t; /* accepted (ns) */
} srv_hs;

/* A shard's memory bounds. The atomics are also written on ZeroMQ's I/O thread (a reply's
 * bytes released) and by partition threads (sync_kept). */
struct srv_mem {
  size_t req_cap, conn_cap, all_cap, park_cap;
  _Atomic uint64_t inflight_bytes; /* charged: frames of store requests, unreleased replies */
  _Atomic uint64_t *conn_bytes;    /* the same per connection slot (SRV_CONN_SLOTS) */
  uint32_t *conn_parked;           /* parked requests per slot */
  srv_req *park_head, *park_tail;  /* waiting for bytes, FIFO */
  uint64_t parked, parked_bytes;
  atomic_bool park_wake;           /* a released reply wakes the main loop */
  _Atomic(mem_hdr *) reply_spare;  /* a released reply buffer kept for reuse */
  srv_hs *hs;                      /* CURVE: connections that delivered no message yet */
  size_t nhs, hs_cap;
  size_t sync_cap;                 /* of sync pushes buffered for steps not applied yet */
  uint64_t sync_bytes;             /* charged to that cap (the tables' sync_bytes summed) */
  _Atomic uint64_t sync_kept;      /* buffers of applied steps kept for reuse (threads) */
};

size_t ps_server_request_cap(size_t cache_bytes, size_t max_request_bytes) {
  if (max_request_bytes) return max_request_bytes;
  size_t r = cache_bytes / 4;
  if (r > ((size_t)256 << 20)) r = (size_t)256 << 20;
  if (r < ((size_t)64 << 20)) r = (size_t)64 << 20;
  return r;
}

ps_status srv_mem_init(ps_server *s) {
  if (!(s->mem = calloc(1, sizeof *s->mem))) return PS_ERR_NOMEM;
  s->mem->req_cap = ps_server_request_cap(s->opt.cache_bytes, s->opt.max_request_bytes);
  s->mem->conn_cap = s->mem->req_cap;
  s->mem->all_cap = 2 * s->mem->req_cap;
  s->mem->park_cap = s->mem->req_cap;
  s->mem->sync_cap = s->mem->req_cap;
  s->mem->conn_bytes = calloc(SRV_CONN_SLOTS, sizeof *s->mem->conn_bytes);
  s->mem->conn_parked = calloc(SRV_CONN_SLOTS, sizeof *s->mem->conn_parked);
  return s->mem->conn_bytes && s->mem->conn_parked ? PS_OK : PS_ERR_NOMEM;
}

void srv_mem_free(ps_server *s) {
  free(s->gone);
  s->gone = NULL;
  s->ngone = s->gone_cap = 0;
  srv_mem *m = s->mem;
  if (!m) return;
  free(atomic_exchange(&m->reply_spare, NULL));
  free(m->hs);
  free((void *)m->conn_bytes);
  free(m->conn_parked);
  free(m);
  s->mem = NULL;
}

size_t srv_mem_request_cap(const ps_server *s) { return s->mem->req_cap; }

bool srv_mem_hs_young(const ps_server *s) { return s->mem->nhs != 0; }

void srv_mem_stats(const ps_server *s, ps_server_stats *out) {
  out->parked = s->mem->parked;
  out->bytes_in_flight = atomic_load(&s->mem->inflight_bytes);
}

bool srv_mem_keep_sync(ps_server *s, uint64_t b) {
  if (atomic_fetch_add(&s->mem->sync_kept, b) + b <= SRV_SYNC_KEEP) return true;
  atomic_fetch_sub(&s->mem->sync_kept, b);
  return false;
}

void srv_mem_unkeep_sync(ps_server *s, uint64_t b) { atomic_fetch_sub(&s->mem->sync_kept, b); }

uint32_t srv_conn_slot(zmq_msg_t *ident) {
  const uint8_t *p = zmq_msg_data(ident);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0, n = zmq_msg_size(ident); i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  h ^= h >> 29;
  return (uint32_t)(h % SRV_CONN_SLOTS);
}

static void charge(ps_server *s, uint32_t slot, uint64_t bytes) {
  atomic_fetch_add(&s->mem->inflight_bytes, bytes);
  atomic_fetch_add(&s->mem->conn_bytes[slot], bytes);
}

static void release(ps_server *s, uint32_t slot, uint64_t bytes) {
  atomic_fetch_sub(&s->mem->conn_bytes[slot], bytes);
  atomic_fetch_sub(&s->mem->inflight_bytes, bytes);
}

/* The largest reply buffer kept as the spare: at most R, and SRV_SPARE_MAX. */
static size_t spare_max(const ps_server *s) {
  return s->mem->req_cap < SRV_SPARE_MAX ? s->mem->req_cap : SRV_SPARE_MAX;
}

/* A buffer for a reply of rb bytes: the spare when it is large enough (its pages are mapped
 * already), else a new one. */
static mem_hdr *reply_buf(ps_server *s, size_t rb) {
  mem_hdr *h = rb >= SRV_SPARE_MIN ? atomic_exchange(&s->mem->reply_spare, NULL) : NULL;
  if (h && h->cap >= rb) return h;
  free(h);
  h = malloc(sizeof *h + rb);
  if (h) h->cap = rb;
  return h;
}

/* ZeroMQ is done with a reply (any thread): its bytes are free again; the main loop is woken
 * once if requests wait for them. */
static void reply_free(void *data, void *hint) {
  (void)hint;
  mem_hdr *h = (mem_hdr *)data - 1;
  ps_server *s = h->s;
  release(s, h->slot, h->bytes);
  if (h->cap >= SRV_SPARE_MIN && h->cap <= spare_max(s)) h = atomic_exchange(&s->mem->reply_spare, h);
  free(h); /* the spare it replaced, or itself */
  if (atomic_exchange(&s->mem->park_wake, false) && s->sigpipe[1] >= 0) {
    char c = 0;
    ssize_t w = write(s->sigpipe[1], &c, 1);
    (void)w;
  }
}

/* A request's frames, and the batch its keys may get (check_keys, srv_dispatch: a position
 * and a hash, 12 bytes a key, 1.5 times the keys themselves) while it runs. */
static size_t frame_bytes(srv_req *r) {
  size_t n = SRV_REQ_COST + r->msg.nkeys * (sizeof(uint32_t) + sizeof(uint64_t));
  for (size_t i = 0; i < r->nfr; i++) n += zmq_msg_size(&r->fr[i]);
  return n;
}

uint32_t srv_pull_row_floats(const srv_req *r, const srv_table *t) {
  if (!r->h->with_state || r->h->op != EMBER__OP__OP_PULL) return t->spec.dim;
  return (uint32_t)ps_store_state_row_floats(&t->spec);
}

/* The reply of a pull of r's keys from table t. */
static size_t pull_bytes(const srv_req *r, const srv_table *t) {
  size_t vs = r->h->value_type == EMBER__VALUE_TYPE__VT_F16 ? 2 : sizeof(float);
  return r->msg.nkeys * (size_t)srv_pull_row_floats(r, t) * vs;
}

/* Whether `bytes` more fit for a request that holds `own` already: its connection and all
 * requests stay within their caps, or nothing but itself is in flight there. */
static bool fits(ps_server *s, uint32_t slot, uint64_t bytes, uint64_t own) {
  uint64_t all = atomic_load(&s->mem->inflight_bytes), conn = atomic_load(&s->mem->conn_bytes[slot]);
  return (conn == own || conn + bytes <= s->mem->conn_cap) && (all == own || all + bytes <= s->mem->all_cap);
}

static const srv_table *pull_table(ps_server *s, const srv_req *r) {
  const Ember__Header *h = r->h;
  if (h->op != EMBER__OP__OP_PULL || !h->table_id || h->table_id > PS_WIRE_MAX_TABLE)
    return NULL;
  return s->tables[h->table_id];
}

bool srv_mem_too_large(ps_server *s, srv_req *r) {
  const srv_table *t = pull_table(s, r);
  size_t bytes = t ? pull_bytes(r, t) : 0;
  if (bytes <= s->mem->req_cap) return false;
  s->traffic.refused_memory++;
  srv_reply_error(s, r, PS_ERR_NOMEM,
                  "too large: a pull of %zu keys x dim %u is a %zu-byte reply, over this "
                  "server's request cap of %zu bytes (--max-request-mb): split it",
                  r->msg.nkeys, t->spec.dim, bytes, s->mem->req_cap);
  return true;
}

/* Charges r's frames, and the reply of a pull that can run now (reserved: no later wait);
 * false if they do not fit now. */
static bool take_intake(ps_server *s, srv_req *r) {
  const srv_table *t = pull_table(s, r);
  size_t fb = frame_bytes(r), rb = 0;
  if (t && (t->spec.consistency == PS_CONS_ASYNC || !t->step_init || srv_pull_ready(t, r->h->step)))
    rb = pull_bytes(r, t);
  if (!fits(s, r->slot, fb + rb, 0)) return false;
  charge(s, r->slot, fb + rb);
  r->charged = fb + rb;
  r->reserved = rb;
  return true;
}

/* Allocates r's reply into r->out out of its reservation, or charging it now if it fits. */
static bool take_reply(ps_server *s, srv_req *r, bool *nomem) {
  size_t rb = pull_bytes(r, r->tab);
  *nomem = false;
  if (rb > r->reserved && !fits(s, r->slot, rb, r->charged)) return false;
  mem_hdr *h = rb ? reply_buf(s, rb) : NULL;
  if (rb && (!h || zmq_msg_init_data(&r->out, h + 1, rb, reply_free, NULL) != 0)) {
    free(h);
    *nomem = true;
    return false;
  }
  if (!rb) zmq_msg_init(&r->out);
  if (rb > r->reserved) charge(s, r->slot, rb);
  else r->charged -= rb; /* the reservation moves to the reply */
  r->reserved = 0;
  if (h) *h = (mem_hdr){.s = s, .bytes = rb, .cap = h->cap, .slot = r->slot};
  r->has_out = true;
  r->outp = zmq_msg_data(&r->out);
  return true;
}

/* Parks r (to be resumed as `kind`), or refuses it when the waiting room is full. */
static void park(ps_server *s, srv_req *r, int kind) {
  size_t fb = frame_bytes(r);
  if (s->mem->parked >= SRV_PARK_MAX || s->mem->parked_bytes + fb > s->mem->park_cap) {
    s->traffic.refused_memory++;
    srv_reply_error(s, r, PS_ERR_NOMEM,
                    "busy: %" PRIu64 " bytes in flight (cap %zu, %zu per connection) and %" PRIu64
                    " requests waiting; retry later",
                    (uint64_t)atomic_load(&s->mem->inflight_bytes), s->mem->all_cap, s->mem->conn_cap,
                    s->mem->parked);
    return;
  }
  r->park_kind = kind;
  r->park_bytes = fb;
  s->mem->parked++;
  s->mem->parked_bytes += fb;
  s->mem->conn_parked[r->slot]++;
  srv_list_push(&s->mem->park_head, &s->mem->park_tail, r);
  atomic_store(&s->mem->park_wake, true);
}

bool srv_mem_intake(ps_server *s, srv_req *r) {
  if (!s->mem->conn_parked[r->slot] && take_intake(s, r)) return true;
  const int op = (int)r->h->op;
  if (!s->mem->conn_parked[r->slot] && ps_op_info_of(op)->unparked) {
    /* Answered at once, never waiting: monitoring goes on while the caps are full. A STATS
     * reply is charged though: past R of its connection's own, or 3R in all (a request alone
     * may take that much), it is refused with a short error, so that STATS replies nobody
     * reads cannot grow past the caps. */
    if (op == EMBER__OP__OP_STATS &&
        (atomic_load(&s->mem->conn_bytes[r->slot]) > s->mem->conn_cap ||
         atomic_load(&s->mem->inflight_bytes) > s->mem->all_cap + s->mem->req_cap)) {
      s->traffic.refused_memory++;
      srv_reply_error(s, r, PS_ERR_NOMEM, "busy: replies not read yet hold the memory caps; "
                                          "read them, or retry later");
      return false;
    }
    size_t fb = frame_bytes(r);
    charge(s, r->slot, fb);
    r->charged = fb;
    return true;
  }
  park(s, r, PARK_HANDLE);
  return false;
}

bool srv_mem_admit(ps_server *s, srv_req *r, int kind) {
  if (r->kind != REQ_CLIENT || kind != TK_PULL || r->has_out) return true;
  bool nomem;
  if (take_reply(s, r, &nomem)) return true;
  if (nomem) srv_reply_error(s, r, PS_ERR_NOMEM, "no memory for a pull reply");
  else park(s, r, TK_PULL); /* a pull deferred for its step: later ones did not wait for it */
  return false;
}

/* Takes r (after prev, or the head) out of the parked list. */
static void unlink_parked(ps_server *s, srv_req *r, srv_req *prev) {
  if (prev) prev->next = r->next;
  else s->mem->park_head = r->next;
  if (s->mem->park_tail == r) s->mem->park_tail = prev;
  r->next = NULL;
  s->mem->parked--;
  s->mem->parked_bytes -= r->park_bytes;
  s->mem->conn_parked[r->slot]--;
}

void srv_mem_unpark(ps_server *s, const srv_unpark_to *to) {
  if (!s->mem->park_head || s->stopping) return;
  atomic_store(&s->mem->park_wake, false);
  uint8_t blocked[SRV_CONN_SLOTS / 8];
  memset(blocked, 0, sizeof blocked);
  srv_req *r = s->mem->park_head, *prev = NULL;
  while (r && !to->stop(s)) {
    srv_req *next = r->next;
    const uint32_t sl = r->slot;
    bool nomem = false, go = !(blocked[sl / 8] & (1u << (sl % 8)));
    if (go) go = r->park_kind == PARK_HANDLE ? take_intake(s, r) : take_reply(s, r, &nomem);
    if (go || nomem) {
      unlink_parked(s, r, prev);
      if (nomem) srv_reply_error(s, r, PS_ERR_NOMEM, "no memory for a pull reply");
      else if (r->park_kind == PARK_HANDLE) to->handle(s, r);
      else to->pull(s, r);
    } else {
      blocked[sl / 8] |= (uint8_t)(1u << (sl % 8)); /* its later requests keep their place */
      prev = r;
    }
    r = next;
  }
  if (s->mem->park_head) atomic_store(&s->mem->park_wake, true);
}

void srv_mem_peer_gone(ps_server *s, int fd) {
  srv_req *r = s->mem->park_head, *prev = NULL;
  while (r) {
    srv_req *next = r->next;
    if (r->fd == fd) {
      unlink_parked(s, r, prev);
      srv_drop_gone(s, r);
    } else {
      prev = r;
    }
    r = next;
  }
}

void srv_mem_drop_parked(ps_server *s, bool answer) {
  srv_req *r = s->mem->park_head;
  s->mem->park_head = s->mem->park_tail = NULL;
  while (r) {
    srv_req *next = r->next;
    s->mem->conn_parked[r->slot]--;
    if (answer) srv_reply_error(s, r, PS_ERR_UNAVAILABLE, "shard %u is shutting down", s->opt.shard);
    else srv_req_free(s, r);
    r = next;
  }
  s->mem->parked = s->mem->parked_bytes = 0;
}

bool srv_mem_msg(ps_server *s, const srv_req *r, zmq_msg_t *m, size_t n) {
  mem_hdr *h = malloc(sizeof *h + n);
  if (!h || zmq_msg_init_data(m, h + 1, n, reply_free, NULL) != 0) {
    free(h);
    return false;
  }
  *h = (mem_hdr){.s = s, .bytes = n, .slot = r->slot};
  charge(s, r->slot, n);
  return true;
}

void srv_mem_done(ps_server *s, srv_req *r) {
  if (r->charged) release(s, r->slot, r->charged);
  r->charged = 0;
}

/* The bytes a buffered sync push holds: its keys and its gradients widened to f32. */
static uint64_t sync_push_bytes(const srv_req *r) {
  return (uint64_t)r->msg.nkeys * (sizeof(uint64_t) + (size_t)r->tab->spec.dim * sizeof(float));
}

bool srv_mem_sync_take(ps_server *s, srv_req *r) {
  srv_table *t = r->tab;
  const uint64_t b = sync_push_bytes(r);
  if (s->mem->sync_bytes + b > s->mem->sync_cap) {
    s->traffic.refused_memory++;
    srv_reply_error(s, r, PS_ERR_NOMEM,
                    "busy: sync pushes buffered for steps not applied yet hold %" PRIu64
                    " bytes (cap %zu, the request cap); this push of %" PRIu64
                    " more waits for step %" PRIu64 " of table %u, applied once all %u workers "
                    "STEP it (a job whose workers push more than the cap in one step needs a "
                    "larger --max-request-mb on the servers)",
                    s->mem->sync_bytes, s->mem->sync_cap, b, t->apply_issued, t->spec.id,
                    t->spec.num_workers);
    return false;
  }
  s->mem->sync_bytes += b;
  t->sync_bytes[r->step % SRV_WINDOW] += b;
  return true;
}

void srv_mem_sync_release(ps_server *s, srv_table *t, uint64_t step) {
  uint64_t *b = &t->sync_bytes[step % SRV_WINDOW];
  s->mem->sync_bytes -= *b < s->mem->sync_bytes ? *b : s->mem->sync_bytes;
  *b = 0;
}

void srv_mem_sync_reset(ps_server *s) {
  s->mem->sync_bytes = 0;
  atomic_store(&s->mem->sync_kept, 0);
  for (uint32_t id = 1; s->tables && id <= PS_WIRE_MAX_TABLE; id++)
    if (s->tables[id]) memset(s->tables[id]->sync_bytes, 0, sizeof s->tables[id]->sync_bytes);
}

/* ---------------------------------------------------------------- CURVE handshakes */

void srv_mem_hs_accepted(ps_server *s, int fd) {
  if (!srv_grow((void **)&s->mem->hs, &s->mem->hs_cap, s->mem->nhs + 1, sizeof *s->mem->hs, 16)) return;
  s->mem->hs[s->mem->nhs++] = (srv_hs){.fd = fd, .t = ps_now_ns()};
}

void srv_mem_hs_gone(ps_server *s, int fd) {
  for (size_t i = 0; i < s->mem->nhs; i++)
    if (s->mem->hs[i].fd == fd) {
      memmove(&s->mem->hs[i], &s->mem->hs[i + 1], (s->mem->nhs - i - 1) * sizeof *s->mem->hs); /* keeps the order */
      s->mem->nhs--;
      return;
    }
}

void srv_mem_hs_seen(ps_server *s, int fd) { srv_mem_hs_gone(s, fd); }

long srv_mem_hs_check(ps_server *s) {
  const uint64_t now = ps_now_ns(), track = (SRV_HS_IVL_MS + 1000) * 1000000ull;
  uint32_t heavy = 0;
  for (size_t i = 0; i < s->mem->nhs;) {
    const srv_hs *h = &s->mem->hs[i];
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    if (now - h->t > track || getsockopt(h->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) {
      srv_mem_hs_gone(s, h->fd); /* authenticated by now (or gone) */
      continue;
    }
    if (ti.tcpi_bytes_received <= SRV_HS_BYTES || ++heavy <= SRV_HS_HEAVY) {
      i++;
      continue;
    }
    /* The oldest keep their place: a legitimate first request finishes, a handshake times
     * out; the newest wait for their turn by reconnecting. */
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    char addr[INET6_ADDRSTRLEN] = "?";
    if (getpeername(h->fd, (struct sockaddr *)&sa, &sl) == 0)
      inet_ntop(sa.ss_family,
                sa.ss_family == AF_INET6 ? (void *)&((struct sockaddr_in6 *)&sa)->sin6_addr
                                         : (void *)&((struct sockaddr_in *)&sa)->sin_addr,
                addr, sizeof addr);
    PS_WARN_RL("closed a connection from %s: %" PRIu64 " bytes received and no message after "
               "%" PRIu64 " ms, while %u older connections are in the same state (a peer "
               "filling a CURVE handshake? at most %u may hold memory so)",
               addr, (uint64_t)ti.tcpi_bytes_received, (now - h->t) / 1000000, SRV_HS_HEAVY,
               SRV_HS_HEAVY);
    shutdown(h->fd, SHUT_RDWR);
    srv_mem_hs_gone(s, h->fd);
  }
  return s->mem->nhs ? 10 : 100;
}

/* ps_server_requests: a request's life on the main thread, from its pooled srv_req to its reply.
 *
 * Requests are recycled through a free list (with their per-thread task array) because every
 * message needs one and the main thread is the hot path. A reply always ends the request: every
 * srv_reply* call sends (or hands to the in-process sink), records the op's latency split
 * (arrival -> store work -> reply) and frees r, so no caller can answer twice. A header frame
 * over SRV_SMALL_REPLY (a STATS document) is charged to the connection like a pull's rows
 * (ps_server_mem.c) until ZeroMQ has sent it.
 *
 * Who sent a request (its connection, file descriptor and address) is looked up only for the
 * coordinator's ops, which hold ranks per connection (srv_peer_of); closed connections are
 * ps_server_connections.c's. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_log.h"
#include "ps_op.h"
#include "ps_server_delay_int.h"
#include "ps_server_exactly_once_int.h"
#include "ps_server_int.h"
#include "ps_server_mem_int.h"
#include "ps_time.h"

/* An op's name in messages and STATS (the op table's). */
const char *ps_server_op_name(int op) { return ps_op_info_of(op)->stat_name; }

srv_req *srv_req_new(ps_server *s, int kind) {
  srv_req *r = s->free_reqs;
  if (r) {
    s->free_reqs = r->next;
  } else {
    r = calloc(1, sizeof *r);
    if (!r) return NULL;
    uint32_t nt = s->nthreads ? s->nthreads : 1;
    r->tasks = calloc(nt, sizeof *r->tasks);
    if (!r->tasks) {
      free(r);
      return NULL;
    }
  }
  srv_task *tasks = r->tasks;
  memset(r, 0, sizeof *r);
  r->tasks = tasks;
  r->kind = kind;
  r->fd = -1;
  r->t0 = ps_now_ns();
  s->reqs_live++;
  return r;
}

void srv_req_free(ps_server *s, srv_req *r) {
  if (!r) return;
  if (r->once_reg || r->once_dups) { /* a recorded push dropped without a reply */
    Ember__Header eh;
    ps_wire_header_init(&eh, EMBER__OP__OP_ERROR);
    eh.status = PS_ERR_UNAVAILABLE;
    eh.message = "the original of this push was dropped unanswered";
    srv_once_replied(s, r, &eh);
  }
  srv_mem_done(s, r);
  if (r->has_ident) zmq_msg_close(&r->ident);
  for (size_t i = 0; i < r->nfr; i++) zmq_msg_close(&r->fr[i]);
  if (r->has_out) zmq_msg_close(&r->out);
  if (r->delay_keys) zmq_msg_close(&r->delay_keys_msg);
  r->delay_keys = false;
  ps_store_batch_destroy(&r->batch);
  free(r->refresh_pos);
  r->refresh_pos = NULL;
  ps_msg_clear(&r->msg);
  r->has_ident = r->has_out = false;
  r->nfr = 0;
  r->h = NULL;
  r->next = s->free_reqs;
  s->free_reqs = r;
  s->reqs_live--;
}

void srv_req_destroy_pool(ps_server *s) {
  while (s->free_reqs) {
    srv_req *r = s->free_reqs;
    s->free_reqs = r->next;
    free(r->tasks);
    free(r);
  }
}

static void record(ps_server *s, srv_req *r, bool ok) {
  int op = r->h ? (int)r->h->op : 0;
  if (op < 0 || op >= SRV_NOPS) op = 0;
  srv_opstat *o = &s->ops[op];
  o->count++;
  if (!ok) o->errors++;
  uint64_t now = ps_now_ns();
  ps_hist_record(o->lat, now - r->t0);
  if (r->t_svc) {
    ps_hist_record(o->queue, r->t_svc - r->t0);
    ps_hist_record(o->svc, now - r->t_svc);
  }
}

/* Sends [ident][header][keys?][values?] (or hands it to the in-process sink), then frees r. */
void srv_reply(ps_server *s, srv_req *r, Ember__Header *rh, zmq_msg_t *values) {
  srv_reply_keys(s, r, rh, NULL, values);
}

void srv_reply_keys(ps_server *s, srv_req *r, Ember__Header *rh, zmq_msg_t *keys,
                    zmq_msg_t *values) {
  if (srv_delay_hold(s, r, rh, keys, values)) return; /* --inject-delay-us: sent from the loop */
  if (r->once_reg || r->once_dups) srv_once_replied(s, r, rh);
  rh->version = PS_WIRE_VERSION;
  rh->is_reply = true;
  rh->request_id = r->h ? r->h->request_id : 0;
  rh->shard = s->opt.shard;
  rh->shards = s->opt.shards;
  record(s, r, rh->status == 0);
  size_t hs = ember__header__get_packed_size(rh);
  zmq_msg_t hm;
  if (hs > SRV_SMALL_REPLY ? !srv_mem_msg(s, r, &hm, hs) : zmq_msg_init_size(&hm, hs) != 0) {
    srv_req_free(s, r);
    return;
  }
  ember__header__pack(rh, zmq_msg_data(&hm));
  if (s->router) {
    if (!r->has_ident) {
      zmq_msg_close(&hm);
      srv_req_free(s, r);
      return;
    }
    s->traffic.bytes_out +=
        hs + (values ? zmq_msg_size(values) : 0) + (keys ? zmq_msg_size(keys) : 0);
    r->has_ident = false;
    /* ROUTER never blocks: a peer that is gone or past its HWM loses the reply. */
    if (zmq_msg_send(&r->ident, s->router, ZMQ_SNDMORE) < 0) {
      zmq_msg_close(&r->ident);
      zmq_msg_close(&hm);
      s->traffic.replies_dropped++;
    } else if (zmq_msg_send(&hm, s->router, values || keys ? ZMQ_SNDMORE : 0) < 0) {
      zmq_msg_close(&hm);
      s->traffic.replies_dropped++;
    } else if (keys && zmq_msg_send(keys, s->router, values ? ZMQ_SNDMORE : 0) < 0) {
      s->traffic.replies_dropped++;
    } else if (values && zmq_msg_send(values, s->router, 0) < 0) {
      s->traffic.replies_dropped++;
    }
  } else {
    if (s->sink) {
      const void *f[3] = {zmq_msg_data(&hm)};
      size_t z[3] = {hs}, nf = 1;
      if (keys) f[nf] = zmq_msg_data(keys), z[nf++] = zmq_msg_size(keys);
      if (values) f[nf] = zmq_msg_data(values), z[nf++] = zmq_msg_size(values);
      s->sink(s->sink_ctx, f, z, nf);
    }
    zmq_msg_close(&hm);
  }
  srv_req_free(s, r);
}

void srv_reply_ok(ps_server *s, srv_req *r) {
  Ember__Header rh;
  ps_wire_header_init(&rh, r->h ? r->h->op : EMBER__OP__OP_NONE);
  srv_reply(s, r, &rh, NULL);
}

void srv_reply_error(ps_server *s, srv_req *r, ps_status st, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* The server's own failures (a full disk fails every write) are worth an operator's eye;
   * refusals of bad requests are the client's to report. Both can repeat once per request. */
  if (st == PS_ERR_IO || st == PS_ERR_NOMEM || st == PS_ERR_CORRUPT || st == PS_ERR_INTERNAL)
    PS_ERROR_RL("%s failed (%s): %s", ps_server_op_name(r->h ? (int)r->h->op : 0),
                ps_status_str(st), msg);
  else
    PS_DEBUG_RL("error reply (%s): %s", ps_status_str(st), msg);
  Ember__Header rh;
  ps_wire_header_init(&rh, EMBER__OP__OP_ERROR);
  rh.status = (int32_t)st;
  rh.message = msg;
  srv_reply(s, r, &rh, NULL);
}

void srv_drop_gone(ps_server *s, srv_req *r) {
  srv_reply_error(s, r, PS_ERR_UNAVAILABLE,
                  "the connection of this request closed while it waited; it was dropped");
}

void srv_reply_unavailable_all(ps_server *s, srv_req **head, srv_req **tail) {
  srv_req *r = *head;
  *head = NULL;
  if (tail) *tail = NULL;
  while (r) {
    srv_req *next = r->next;
    srv_reply_error(s, r, PS_ERR_UNAVAILABLE, "shard %u is shutting down", s->opt.shard);
    r = next;
  }
}

/* ---------------------------------------------------------------- the coordinator's replies */

static void coord_reply(void *ctx, void *req, Ember__Header *rh) { srv_reply(ctx, req, rh, NULL); }

static void coord_error(void *ctx, void *req, ps_status st, const char *msg) {
  srv_reply_error(ctx, req, st, "%s", msg);
}

srv_coord_reply srv_coord_io(ps_server *s) {
  return (srv_coord_reply){.ctx = s, .reply = coord_reply, .error = coord_error};
}

void srv_peer_of(const srv_req *r, srv_coord_peer *p) {
  memset(p, 0, sizeof *p);
  zmq_msg_t *m = (zmq_msg_t *)&r->fr[0];
  const uint8_t *id = zmq_msg_data((zmq_msg_t *)&r->ident);
  size_t n = zmq_msg_size((zmq_msg_t *)&r->ident);
  /* ROUTER's own routing ids are 5 bytes (0 and a counter); a client-chosen one is hashed. */
  for (size_t i = 0; i < n; i++) p->conn = p->conn * 1099511628211ull + id[i] + 1;
  p->fd = zmq_msg_get(m, ZMQ_SRCFD);
  const char *addr = zmq_msg_gets(m, "Peer-Address");
  snprintf(p->addr, sizeof p->addr, "%s", addr ? addr : "");
}

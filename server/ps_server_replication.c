/* ps_server_replication: replicated shards -- primary-backup replication of one shard over K
 * replicas (ps-server --replica R --replicas K --peers 'URL|URL|...' --failover-ms N).
 *
 * Design decisions (docs/DESIGN.md, "Replicated shards", says why at more length):
 * - Primary-backup, not chain replication: the primary already orders every request of the
 *   shard on its main thread, so that order is the replication order for free, and a client
 *   talks to one replica per shard whatever K is. The lowest-numbered live replica is the
 *   primary; epochs (a counter raised by each promotion) let a replica that was primary once
 *   learn that it is not any more.
 * - Forward, then apply: the primary hands a state-changing request (DECLARE, PUSH, STEP) to
 *   every live backup first, and handles it itself only once all of them acknowledged it, in
 *   the order it took the requests (a FIFO; requests after one waiting for acks wait behind
 *   it, pulls and checkpoints included, so every connection keeps read-your-writes). Each
 *   backup gets the same requests in the same order over one DEALER channel and runs them
 *   through the same code, so partition threads, sync buffers and the exactly-once records see
 *   the same sequence and rows stay bit-identical. Forwarding first keeps the reply path of
 *   the server untouched (the primary's reply is its own, as with K = 1) and gives the property
 *   failover needs: a backup is never behind what the primary applied, so a push a dead primary
 *   took but never forwarded was applied nowhere, and applying its re-send is right. The price
 *   is latency: a write costs a backup round trip before its own store work.
 * - Liveness by heartbeats on the same channel: the primary PINGs every backup each
 *   failover-ms / 4 (with its epoch and live set); a backup that leaves a forward or a beat
 *   unanswered for failover-ms, or refuses one, is dropped from the live set (logged, counted)
 *   and is stale from then on. A backup that hears nothing from its primary for failover-ms
 *   promotes itself when it is the lowest live backup (the next one waits one more period per
 *   place). A replica only promotes after it has heard its primary once: one started while
 *   the primary is down waits rather than start a second history.
 * - A replica that is not the primary holds a client's request for up to failover-ms before it
 *   refuses it (PS_ERR_UNAVAILABLE naming the primary it knows, in repl_primary): a client
 *   that lost its primary comes here at once, and the hold lets the promotion happen under the
 *   request instead of sending the client back to a dead primary. STATS and PING are answered.
 * - Start: a replica first asks its peers (PING with repl_from, repl_epoch 0) whether a primary
 *   lives; one that does makes the newcomer stale (it lost the history in between). When none
 *   answers as primary within failover-ms, replica 0 becomes primary with every backup live
 *   (a fresh shard: every data dir as the last clean stop of all of them left it).
 * - The coordinator (shard 0) is replicated the same way: JOIN, KV_SET and BARRIER go through
 *   the FIFO like a PUSH (and into the history), and a backup applies them to its own
 *   coordinator with no requester (srv_coord_apply) and acks at once -- a forwarded BARRIER
 *   records the arrival and never waits for the barrier, which would stall the FIFO behind it.
 *   A promoted shard-0 replica serves JOIN, KV and BARRIER; clients re-send what was
 *   outstanding. Disconnects are not forwarded (a rank is held by nobody on a backup).
 * - CHECKPOINT and RESTORE run on the primary only; a RESTORE makes every backup stale. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_log.h"
#include "ps_op.h"
#include "ps_server_replication_int.h"
#include "ps_server_request_schedule_int.h"
#include "ps_time.h"

void srv_repl_restored(ps_server *s, uint64_t step) {
  if (s->repl && s->repl->role == SRV_REPL_PRIMARY) srv_repl_base_take(s, step);
}

/* ---------------------------------------------------------------- sending to peers */

bool srv_repl_send(srv_repl *x, uint32_t i, Ember__Header *h, zmq_msg_t *bulk, size_t nb) {
  void *sock = x->peer[i].sock;
  if (!sock) return false;
  size_t hs = ember__header__get_packed_size(h);
  zmq_msg_t m;
  if (zmq_msg_init_size(&m, hs) != 0) return false;
  ember__header__pack(h, zmq_msg_data(&m));
  if (zmq_msg_send(&m, sock, (nb ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&m);
    return false;
  }
  for (size_t f = 0; f < nb; f++) { /* a message is queued whole once its first frame is */
    zmq_msg_t c;
    zmq_msg_init(&c);
    zmq_msg_copy(&c, &bulk[f]);
    if (zmq_msg_send(&c, sock, f + 1 < nb ? ZMQ_SNDMORE : 0) < 0) zmq_msg_close(&c);
  }
  return true;
}

static void release_heads(ps_server *s) {
  srv_repl *x = s->repl;
  while (x->q_head && x->q_head->repl_wait == 0) {
    srv_req *r = x->q_head;
    x->q_head = r->next;
    if (!x->q_head) x->q_tail = NULL;
    r->repl_done = true;
    srv_ready_add(s, r);
  }
}

/* Takes backup i out of the live set: it is stale until it catches up; its socket is opened
 * afresh, so nothing queued for it is delivered late. */
static void drop_backup(ps_server *s, uint32_t i, const char *why) {
  srv_repl *x = s->repl;
  repl_peer *p = &x->peer[i];
  if (!p->live) return;
  p->live = false;
  x->dropped++;
  PS_WARN("replica %u (%s) of shard %u dropped from the live set: %s; it must catch up before "
          "it counts again", i, p->url, s->opt.shard, why);
  for (srv_req *r = x->q_head; r; r = r->next) r->repl_wait &= ~(1u << i);
  if (p->sock) zmq_close(p->sock);
  p->sock = NULL;
  srv_repl_open_peer(s, p);
  release_heads(s);
}

uint32_t srv_repl_live_mask(const srv_repl *x) {
  uint32_t m = 1u << x->self;
  for (uint32_t i = 0; i < x->n; i++)
    if (x->peer[i].live) m |= 1u << i;
  return m;
}

/* Forwards r to every live backup and queues it until they acked. */
static void forward(ps_server *s, srv_req *r) {
  srv_repl *x = s->repl;
  Ember__Header *h = r->h;
  uint64_t rid = h->request_id;
  r->repl_seq = ++x->fseq;
  r->repl_wait = 0;
  r->repl_sent = ps_now_ns();
  h->request_id = r->repl_seq;
  h->repl_epoch = x->epoch;
  h->repl_from = x->self + 1;
  for (uint32_t i = 0; i < x->n; i++) {
    if (!x->peer[i].live) continue;
    if (srv_repl_send(x, i, h, r->fr + 1, r->nfr - 1)) r->repl_wait |= 1u << i;
    else drop_backup(s, i, "its channel does not take messages");
  }
  h->request_id = rid;
  h->repl_epoch = 0;
  h->repl_from = 0;
  if (r->repl_wait) x->forwarded++;
  srv_list_push(&x->q_head, &x->q_tail, r);
  release_heads(s);
}

static void beat(ps_server *s, uint64_t now) {
  srv_repl *x = s->repl;
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_PING);
  h.version = PS_WIRE_VERSION;
  h.repl_epoch = x->role == SRV_REPL_PRIMARY ? x->epoch : 0;
  h.repl_from = x->self + 1;
  h.repl_live = srv_repl_live_mask(x);
  for (uint32_t i = 0; i < x->n; i++) {
    if (i == x->self) continue;
    h.request_id = ++x->fseq; /* a dropped backup too: the live set tells it it is stale */
    srv_repl_send(x, i, &h, NULL, 0);
  }
  x->next_beat = now + x->beat_ns;
}

/* ---------------------------------------------------------------- roles */

static void hold(srv_repl *x, srv_req *r) {
  r->repl_sent = ps_now_ns(); /* held since */
  srv_list_push(&x->h_head, &x->h_tail, r);
}

/* The role is known: what was held while probing is judged again, in order. */
static void unhold(ps_server *s) {
  srv_repl *x = s->repl;
  while (x->h_head) {
    srv_req *r = x->h_head;
    x->h_head = r->next;
    srv_ready_add(s, r);
  }
  x->h_tail = NULL;
}

static void become_primary(ps_server *s, const char *how) {
  srv_repl *x = s->repl;
  x->role = SRV_REPL_PRIMARY;
  x->primary = x->self;
  unhold(s); /* held client requests run now, in the order they came */
  PS_INFO("replica %u of shard %u is primary (epoch %" PRIu64 ", %s); live set 0x%x",
          x->self, s->opt.shard, x->epoch, how, srv_repl_live_mask(x));
  beat(s, ps_now_ns());
}

static void become_stale(ps_server *s, uint32_t primary, uint64_t epoch) {
  srv_repl *x = s->repl;
  if (x->role != SRV_REPL_STALE)
    PS_WARN("replica %u of shard %u is stale: replica %u is primary (epoch %" PRIu64 ") and "
            "this one does not have its history; it serves nothing until it catches up",
            x->self, s->opt.shard, primary, epoch);
  x->role = SRV_REPL_STALE;
  x->primary = primary;
  if (epoch > x->epoch) x->epoch = epoch;
  x->complete = false;
  for (uint32_t i = 0; i < x->n; i++) {
    x->peer[i].live = false;
    srv_repl_sync_stop(&x->peer[i]);
  }
  /* A primary that learns it is not one: what waited for acks was applied nowhere (the new
   * primary refused it), so it is refused too and its client sends it to the new primary. */
  while (x->q_head) {
    srv_req *r = x->q_head;
    x->q_head = r->next;
    srv_repl_refuse(s, r, ps_server_op_name((int)r->h->op));
  }
  x->q_tail = NULL;
  unhold(s); /* judged again: refused */
  srv_repl_sync_ask(s);
}

/* ---------------------------------------------------------------- intake */

void srv_repl_refuse(ps_server *s, srv_req *r, const char *what) {
  srv_repl *x = s->repl;
  Ember__Header rh;
  ps_wire_header_init(&rh, EMBER__OP__OP_ERROR);
  char msg[512];
  if (x->primary < x->n)
    snprintf(msg, sizeof msg, "replica %u of shard %u is %s, not the primary: %s goes to "
             "replica %u (%s)", x->self, s->opt.shard, srv_repl_role_name(x->role), what, x->primary,
             x->peer[x->primary].url);
  else
    snprintf(msg, sizeof msg, "replica %u of shard %u is %s and knows no primary", x->self,
             s->opt.shard, srv_repl_role_name(x->role));
  rh.status = PS_ERR_UNAVAILABLE;
  rh.message = msg;
  rh.repl_primary = x->primary < x->n ? x->primary + 1 : 0;
  rh.repl_epoch = x->epoch;
  rh.repl_from = x->self + 1; /* a refusal (a reply to a forward has none) */
  x->refused++;
  srv_reply(s, r, &rh, NULL);
}

/* A PING from a peer: a primary's heartbeat (epoch > 0) or a newcomer's question. */
static void peer_ping(ps_server *s, srv_req *r) {
  srv_repl *x = s->repl;
  const Ember__Header *h = r->h;
  uint32_t from = h->repl_from - 1;
  if (h->repl_epoch && from < x->n && from != x->self) {
    const bool newer = h->repl_epoch > x->epoch;
    if (x->role == SRV_REPL_PRIMARY && newer) {
      become_stale(s, from, h->repl_epoch);
    } else if (x->role == SRV_REPL_PROBING) {
      srv_req_free(s, r); /* not yet known whether it missed anything: no answer either way */
      return;
    } else if (from == x->primary && h->repl_epoch == x->epoch &&
               (x->role == SRV_REPL_STALE || x->role == SRV_REPL_CATCHING ||
                !(h->repl_live >> x->self & 1u))) {
      x->primary_heard = ps_now_ns();
      if (x->role == SRV_REPL_CATCHING && (h->repl_live >> x->self & 1u)) {
        x->role = SRV_REPL_BACKUP;
        x->live_mask = h->repl_live;
        PS_INFO("replica %u of shard %u is backup of replica %u again (caught up)", x->self,
                s->opt.shard, from);
      } else if (x->role == SRV_REPL_BACKUP) {
        become_stale(s, from, h->repl_epoch); /* the primary dropped it */
      }
    } else if (x->role == SRV_REPL_BACKUP &&
               (newer || (h->repl_epoch == x->epoch && from == x->primary) ||
                x->primary == x->n)) {
      if (x->primary != from)
        PS_INFO("replica %u of shard %u: backup of replica %u (epoch %" PRIu64 ")", x->self,
                s->opt.shard, from, h->repl_epoch);
      x->primary = from;
      x->epoch = h->repl_epoch;
      x->live_mask = h->repl_live;
      x->primary_heard = ps_now_ns();
    }
    if (x->role == SRV_REPL_PRIMARY || x->primary != from) {
      srv_repl_refuse(s, r, "a heartbeat");
      return;
    }
  }
  Ember__Header rh;
  ps_wire_header_init(&rh, EMBER__OP__OP_PING);
  rh.repl_epoch = x->epoch;
  rh.repl_primary = x->role == SRV_REPL_PRIMARY ? x->self + 1
                    : x->primary < x->n && x->role != SRV_REPL_PROBING ? x->primary + 1
                                                                       : 0;
  /* A newcomer this primary counts live but never heard from: a replica of the fresh shard
   * that started late, not one that lost history. */
  if (x->role == SRV_REPL_PRIMARY && from < x->n && x->peer[from].live && !x->peer[from].heard)
    rh.repl_live = 1u << from;
  srv_reply(s, r, &rh, NULL);
}

bool srv_repl_intake(ps_server *s, srv_req *r) {
  srv_repl *x = s->repl;
  if (!x || r->repl_done) return false;
  const Ember__Header *h = r->h;
  const int op = (int)h->op;
  const ps_op_info *info = ps_op_info_of(op);
  if (op == EMBER__OP__OP_PING && h->repl_from) {
    peer_ping(s, r);
    return true;
  }
  /* A replica's PING carries its epoch and is judged below, as a forward is. */
  if (info->replica_local && !(op == EMBER__OP__OP_PING && h->repl_epoch)) return false;
  if (op == EMBER__OP__OP_REPL_CATCHUP) {
    if (h->repl_from && h->repl_from - 1 < x->n && h->repl_from - 1 != x->self)
      srv_repl_sync_start(s, r, h->repl_from - 1);
    else
      srv_reply_error(s, r, PS_ERR_INVALID, "a catch-up request from replica %u", h->repl_from);
    return true;
  }
  if (srv_repl_sync_intake(s, r)) return true; /* the base, on a catching replica */
  if (x->role == SRV_REPL_PROBING) { /* forwards too: taken or refused once it knows */
    hold(x, r);
    return true;
  }
  if (h->repl_epoch) { /* a forward from a primary */
    const uint32_t from = h->repl_from - 1;
    const bool catching = x->role == SRV_REPL_CATCHING && from == x->primary &&
                          h->repl_epoch == x->epoch;
    if (catching || (x->role == SRV_REPL_BACKUP && from < x->n && from != x->self &&
                     (h->repl_epoch > x->epoch || x->primary == x->n ||
                      (from == x->primary && h->repl_epoch == x->epoch)))) {
      if (x->primary != from)
        PS_INFO("replica %u of shard %u: backup of replica %u (epoch %" PRIu64 ")", x->self,
                s->opt.shard, from, h->repl_epoch);
      x->primary = from;
      x->epoch = h->repl_epoch;
      x->primary_heard = x->sync_heard = ps_now_ns();
      srv_repl_log_add(s, r); /* the shard's history, for a catch-up from this replica */
      r->repl_done = true;    /* judged once: a request held meanwhile is not logged twice */
      if (info->kind != PS_OP_COORD || !s->coord) return false;
      srv_coord_apply(s->coord, h); /* acked now: a barrier must not hold the FIFO */
      srv_reply_ok(s, r);
      return true;
    }
    srv_repl_refuse(s, r, "a forward");
    return true;
  }
  if (x->role != SRV_REPL_PRIMARY) {
    hold(x, r);
    return true;
  }
  if (info->kind == PS_OP_COORD && !s->coord) { /* not shard 0: refused as with K = 1 */
    r->repl_done = true;
    return false;
  }
  if (op == EMBER__OP__OP_RESTORE) {
    for (uint32_t i = 0; i < x->n; i++)
      if (x->peer[i].live) drop_backup(s, i, "a RESTORE on the primary rolls back only its rows");
  }
  if (info->forwarded) {
    srv_repl_log_add(s, r);
    if (srv_repl_live_mask(x) != (1u << x->self)) {
      forward(s, r);
      return true;
    }
  }
  if (x->q_head) { /* behind a request that waits for acks */
    r->repl_wait = 0;
    srv_list_push(&x->q_head, &x->q_tail, r);
    return true;
  }
  r->repl_done = true; /* judged once: a request held meanwhile is not logged twice */
  return false;
}

/* ---------------------------------------------------------------- answers from peers */

static void ack(ps_server *s, uint32_t i, const Ember__Header *h) {
  srv_repl *x = s->repl;
  repl_peer *p = &x->peer[i];
  const uint64_t now = ps_now_ns();
  if (x->role == SRV_REPL_PROBING || x->role == SRV_REPL_BACKUP) {
    /* A peer's answer to the question at start: it names the primary it knows. */
    uint32_t pr = h->repl_primary;
    if (x->role != SRV_REPL_PROBING || !pr || pr - 1 == x->self || pr - 1 >= x->n ||
        h->op != EMBER__OP__OP_PING || h->status != 0)
      return;
    if (h->repl_live >> x->self & 1u) { /* the fresh shard's late starter */
      x->role = SRV_REPL_BACKUP;
      x->complete = true;
      x->primary = pr - 1;
      x->epoch = h->repl_epoch;
      x->primary_heard = now;
      PS_INFO("replica %u of shard %u: backup of replica %u (epoch %" PRIu64 ")", x->self,
              s->opt.shard, pr - 1, h->repl_epoch);
      srv_repl_base_take(s, 0);
      unhold(s);
    } else {
      become_stale(s, pr - 1, h->repl_epoch);
    }
    return;
  }
  if (x->role != SRV_REPL_PRIMARY || srv_repl_sync_ack(s, i, h)) return;
  if (!p->live) return; /* a dropped backup's answer to a heartbeat */
  p->heard = true;
  p->heard_ns = now;
  if (h->status == PS_ERR_UNAVAILABLE && h->repl_from) {
    if (h->repl_epoch > x->epoch) {
      become_stale(s, h->repl_primary - 1, h->repl_epoch);
      return;
    }
    drop_backup(s, i, "it refused a forward (it does not take this primary's history)");
    return;
  }
  for (srv_req *r = x->q_head; r; r = r->next)
    if (r->repl_seq == h->request_id) {
      r->repl_wait &= ~(1u << i);
      break;
    }
  release_heads(s);
}

int srv_repl_poll_items(ps_server *s, zmq_pollitem_t *items) {
  srv_repl *x = s->repl;
  if (!x) return 0;
  int n = 0;
  for (uint32_t i = 0; i < x->n; i++)
    if (x->peer[i].sock) items[n++] = (zmq_pollitem_t){.socket = x->peer[i].sock, .events = ZMQ_POLLIN};
  return n;
}

static void drain_peer(ps_server *s, uint32_t i) {
  for (int k = 0; k < 1024 && s->repl->peer[i].sock; k++) {
    void *sock = s->repl->peer[i].sock;
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&m);
      return;
    }
    Ember__Header *h = ember__header__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
    bool more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    while (more) { /* a reply carries no bulk to a forwarder, but skip any */
      zmq_msg_init(&m);
      if (zmq_msg_recv(&m, sock, 0) < 0) more = false;
      else more = zmq_msg_more(&m);
      zmq_msg_close(&m);
    }
    if (h) {
      if (h->is_reply) ack(s, i, h);
      ember__header__free_unpacked(h, NULL);
    }
  }
}

void srv_repl_poll(ps_server *s, const zmq_pollitem_t *items, int n) {
  srv_repl *x = s->repl;
  if (!x) return;
  for (int k = 0; k < n; k++) {
    if (!(items[k].revents & ZMQ_POLLIN)) continue;
    for (uint32_t i = 0; i < x->n; i++)
      if (x->peer[i].sock == items[k].socket) drain_peer(s, i);
  }
}

/* ---------------------------------------------------------------- time */

/* Backups: the primary silent for failover-ms (one more period per live backup below this
 * one, so that the lowest promotes first): take over. */
static void watch_primary(ps_server *s, uint64_t now) {
  srv_repl *x = s->repl;
  if (x->role != SRV_REPL_BACKUP || !x->primary_heard) return;
  uint32_t place = 0;
  for (uint32_t i = 0; i < x->self; i++)
    if (i != x->primary && (x->live_mask >> i & 1u)) place++;
  uint64_t silent = now - x->primary_heard;
  if (silent <= x->failover_ns * (1 + place)) return;
  uint32_t old = x->primary;
  x->epoch++;
  x->promotions++;
  for (uint32_t i = 0; i < x->n; i++) {
    repl_peer *p = &x->peer[i];
    p->live = i != x->self && i != old && (x->live_mask >> i & 1u);
    p->heard = false;
    p->heard_ns = now;
  }
  char how[128];
  snprintf(how, sizeof how, "promoted: replica %u silent for %" PRIu64 " ms", old,
           silent / 1000000);
  become_primary(s, how);
}

long srv_repl_tick(ps_server *s) {
  srv_repl *x = s->repl;
  if (!x) return 100;
  const uint64_t now = ps_now_ns();
  const bool probing = x->role == SRV_REPL_PROBING;
  if (x->role == SRV_REPL_PROBING && now >= x->probe_end) {
    srv_repl_base_take(s, 0); /* the shard's history starts here */
    if (x->self == 0) {
      x->epoch = 1;
      x->complete = true;
      for (uint32_t i = 1; i < x->n; i++) {
        x->peer[i].live = true;
        x->peer[i].heard_ns = now;
      }
      become_primary(s, "no other primary answered at start");
    } else {
      x->role = SRV_REPL_BACKUP; /* waits for replica 0's heartbeat */
      x->complete = true;        /* nobody was primary: the shard starts here */
    }
  }
  if (x->role == SRV_REPL_PROBING && now >= x->next_beat) beat(s, now); /* the question */
  if (x->role == SRV_REPL_PRIMARY) {
    if (now >= x->next_beat) beat(s, now);
    for (uint32_t i = 0; i < x->n; i++) {
      repl_peer *p = &x->peer[i];
      if (!p->live) continue;
      bool late = false; /* the queue is in sending order: only its old head can be late */
      for (srv_req *r = x->q_head; r && !late && now - r->repl_sent > x->failover_ns;
           r = r->next)
        late = r->repl_wait >> i & 1u;
      if (late) drop_backup(s, i, "a forward went unanswered for --failover-ms");
      else if (p->heard && now - p->heard_ns > x->failover_ns)
        drop_backup(s, i, "its heartbeats went unanswered for --failover-ms");
    }
  }
  watch_primary(s, now);
  if (probing && x->role != SRV_REPL_PROBING) unhold(s);
  if (x->role == SRV_REPL_CATCHING && now - x->sync_heard > 4 * x->failover_ns)
    x->role = SRV_REPL_STALE; /* the primary went quiet: ask again */
  if (x->role == SRV_REPL_STALE && now - x->sync_asked > 2 * x->failover_ns)
    srv_repl_sync_ask(s);
  if (x->role == SRV_REPL_PRIMARY) srv_repl_sync_pump(s);
  /* Held client requests: refused once failover-ms passed without a promotion. */
  while (x->h_head && x->role != SRV_REPL_PROBING &&
         (x->role == SRV_REPL_STALE || x->role == SRV_REPL_CATCHING ||
          now - x->h_head->repl_sent > x->failover_ns)) {
    srv_req *r = x->h_head;
    x->h_head = r->next;
    if (!x->h_head) x->h_tail = NULL;
    srv_repl_refuse(s, r, ps_server_op_name((int)r->h->op));
  }
  uint64_t next = x->next_beat > now ? x->next_beat - now : 0;
  long ms = (long)(next / 1000000) + 1;
  return ms < 100 ? ms : 100;
}

void srv_repl_drain(ps_server *s) {
  srv_repl *x = s->repl;
  if (!x) return;
  srv_reply_unavailable_all(s, &x->q_head, &x->q_tail);
  srv_reply_unavailable_all(s, &x->h_head, &x->h_tail);
}

/* ps_server_request_schedule: scheduling and consistency, the main thread's bookkeeping of when a
 * request may run and when its reply may leave.
 *
 * Nothing here ever blocks a thread on another worker: a reply that must wait (a sync pull of
 * a step not yet applied, an ssp pull too far ahead, a store op during a checkpoint) is parked in a list and taken up when its condition turns true.
 * Sync tables apply a step once every worker reported it (STEP), as one store call per
 * partition thread. Checkpoints and restores are exclusive: they run with no store work in
 * flight, store ops arriving meanwhile are held, and afterwards the held requests move to a
 * ready queue that the main loop drains in order (srv_run_ready) -- never handled again from
 * inside a handler, so no handler re-enters another. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ps_log.h"
#include "ps_server_int.h"
#include "ps_time.h"

static void reply_finished(ps_server *s, srv_req *r);
void srv_finish(ps_server *s, srv_req *r) {
  s->inflight--;
  if (r->kind == REQ_APPLY) {
    srv_table *t = r->tab;
    if (r->st != PS_OK)
      PS_ERROR_RL("applying step %" PRIu64 " of table %u failed: %s", r->step, t->spec.id,
               ps_status_str(r->st));
    if (r->step + 1 > t->applied) t->applied = r->step + 1;
    srv_mem_sync_release(s, t, r->step);
    srv_req_free(s, r);
    srv_release_waiters(s, t);
    srv_try_exclusive(s);
    return;
  }
  reply_finished(s, r);
}

static void reply_finished(ps_server *s, srv_req *r) {
  if (r->st != PS_OK) {
    srv_reply_error(s, r, r->st, "%s of %zu keys in table %u failed: %s",
                    ps_server_op_name(r->h->op), r->msg.nkeys, r->tab->spec.id,
                    ps_status_str(r->st));
  } else if (r->task_kind == TK_PULL) {
    Ember__Header rh;
    const bool refresh = r->h->op == EMBER__OP__OP_REFRESH;
    ps_wire_header_init(&rh, refresh ? EMBER__OP__OP_REFRESH : EMBER__OP__OP_PULL);
    rh.table_id = r->tab->spec.id;
    rh.count = r->msg.nkeys;
    rh.dim = srv_pull_row_floats(r, r->tab);
    rh.step = r->h->step;
    rh.value_type = r->f16 ? EMBER__VALUE_TYPE__VT_F16 : EMBER__VALUE_TYPE__VT_F32;
    r->has_out = false;
    zmq_msg_t out, pos;
    zmq_msg_init(&out);
    zmq_msg_move(&out, &r->out);
    if (refresh) {
      /* Its rows' positions in the request: the keys frame of a REFRESH reply. */
      zmq_msg_init_size(&pos, r->msg.nkeys * sizeof(uint64_t));
      if (r->msg.nkeys)
        memcpy(zmq_msg_data(&pos), r->refresh_pos, r->msg.nkeys * sizeof(uint64_t));
    }
    srv_reply_keys(s, r, &rh, refresh ? &pos : NULL, &out);
    zmq_msg_close(&out);
    if (refresh) zmq_msg_close(&pos);
  } else if (r->task_kind == TK_WARM) {
    /* A prefetch's ack: a PULL reply of no rows (count 0, an empty values frame). */
    Ember__Header rh;
    ps_wire_header_init(&rh, EMBER__OP__OP_PULL);
    rh.table_id = r->tab->spec.id;
    rh.dim = r->tab->spec.dim;
    rh.step = r->h->step;
    rh.value_type = r->h->value_type; /* what the client expects, though no row comes */
    rh.warm = true;
    zmq_msg_t out;
    zmq_msg_init(&out);
    srv_reply(s, r, &rh, &out);
    zmq_msg_close(&out);
  } else {
    Ember__Header rh;
    ps_wire_header_init(&rh, r->h->op);
    rh.table_id = r->tab->spec.id;
    rh.count = r->msg.nkeys;
    rh.step = r->h->step;
    srv_reply(s, r, &rh, NULL);
  }
  if (s->excl_active) srv_try_exclusive(s);
}

/* ---------------------------------------------------------------- consistency */

void srv_adopt_step(srv_table *t, uint64_t step) {
  if (t->step_init) return;
  t->step_init = true;
  t->applied = t->apply_issued = step;
  for (uint32_t w = 0; w < t->spec.num_workers; w++) t->clock[w] = step;
}

static uint64_t min_clock(const srv_table *t) {
  uint64_t m = UINT64_MAX;
  for (uint32_t w = 0; w < t->spec.num_workers; w++)
    if (t->clock[w] < m) m = t->clock[w];
  return m == UINT64_MAX ? 0 : m;
}

/* May a pull of this step be answered now? */
bool srv_pull_ready(const srv_table *t, uint64_t step) {
  switch (t->spec.consistency) {
    case PS_CONS_SYNC: return step <= t->applied;
    case PS_CONS_SSP: return step <= t->applied + t->spec.staleness;
    default: return true;
  }
}

/* The reply buffer is allocated (and charged) by srv_dispatch (ps_server_mem.c). A REFRESH
 * keeps only its keys that changed since the rows its sender holds (ps_server_refresh.c). */
void srv_start_pull(ps_server *s, srv_req *r) {
  if (r->h->op == EMBER__OP__OP_REFRESH && srv_refresh_select(r) != PS_OK) {
    srv_reply_error(s, r, PS_ERR_NOMEM, "out of memory selecting a refresh's rows");
    return;
  }
  srv_dispatch(s, r, TK_PULL);
}

void srv_release_waiters(ps_server *s, srv_table *t) {
  srv_req *r = t->wait_head, *keep_h = NULL, *keep_t = NULL;
  t->wait_head = t->wait_tail = NULL;
  while (r) {
    srv_req *next = r->next;
    if (srv_pull_ready(t, r->h->step)) {
      s->deferred_now--;
      if (s->excl_active) srv_list_push(&s->held_head, &s->held_tail, r), s->held++;
      else srv_start_pull(s, r);
    } else {
      srv_list_push(&keep_h, &keep_t, r);
    }
    r = next;
  }
  /* Waiters that arrived while we were dispatching went to t's (now fresh) list. */
  if (keep_h) {
    keep_t->next = t->wait_head;
    t->wait_head = keep_h;
    if (!t->wait_tail) t->wait_tail = keep_t;
  }
}

/* Sync: hands to the threads the application of every step all workers have finished. */
static void issue_applies(ps_server *s, srv_table *t) {
  uint64_t done = min_clock(t);
  while (t->apply_issued < done) {
    srv_req *a = srv_req_new(s, REQ_APPLY);
    if (!a) {
      PS_ERROR_RL("out of memory issuing step %" PRIu64, t->apply_issued);
      return;
    }
    a->tab = t;
    a->step = t->apply_issued++;
    srv_dispatch(s, a, TK_APPLY);
  }
}

/* Advances the store's clock (row metadata, TTL) and runs TTL expiry once the clock moved by
 * the smallest ttl_steps of any table since the last run. Expiry scans the cold tier under the
 * store's write lock, so it is rare by construction. */
static void advance_clock(ps_server *s, uint64_t step) {
  if (step <= s->step_max) return;
  s->step_max = step;
  ps_store_set_step(s->store, step);
  uint64_t ttl = 0;
  for (uint32_t id = 1; id <= s->max_table; id++) {
    srv_table *t = s->tables[id];
    if (t && t->spec.ttl_steps && (!ttl || t->spec.ttl_steps < ttl)) ttl = t->spec.ttl_steps;
  }
  if (ttl && step - s->expired_at >= ttl) {
    s->expired_at = step;
    uint64_t n = ps_store_expire(s->store);
    if (n) PS_INFO("TTL: expired %" PRIu64 " rows at step %" PRIu64, n, step);
  }
}

ps_status srv_table_step(ps_server *s, srv_table *t, uint32_t worker, uint64_t step,
                         ps_error *err) {
  /* Async tables keep clocks only for stats: a STEP for "all tables" from a rank beyond an
   * async table's num_workers is not an error there. */
  if (t->spec.consistency == PS_CONS_ASYNC && worker >= t->spec.num_workers) return PS_OK;
  if (worker >= t->spec.num_workers) {
    return ps_error_set(err, PS_ERR_INVALID,
                        "worker %u out of range: table %u was declared for %u workers", worker,
                        t->spec.id, t->spec.num_workers);
  }
  srv_adopt_step(t, step);
  if (t->spec.consistency == PS_CONS_SYNC && step >= t->apply_issued + SRV_WINDOW) {
    return ps_error_set(err, PS_ERR_INVALID,
                        "step %" PRIu64 " is more than %u steps ahead of step %" PRIu64, step,
                        SRV_WINDOW, t->apply_issued);
  }
  if (step + 1 > t->clock[worker]) t->clock[worker] = step + 1;
  advance_clock(s, step + 1);
  if (t->spec.consistency == PS_CONS_SYNC) {
    issue_applies(s, t);
  } else {
    t->applied = min_clock(t);
    srv_release_waiters(s, t);
  }
  return PS_OK;
}

/* ---------------------------------------------------------------- lost ranks */

/* A sync (or ssp) pull of step s waits until every rank reported the steps before it. When a
 * rank's connection closes (kill -9 of one worker of a job), the others' pulls would wait out
 * their whole timeout and then fail naming no one; every shard sees that disconnect, so the
 * pulls (and a checkpoint) that wait for the gone rank fail naming it. A rank is known by the
 * connection of its latest STEP of each table (every worker steps every shard after each
 * push). A closed connection is not yet a dead worker: a client reconnects after a network
 * blip, and moves between a shard's replicas. So a rank is given up only SRV_RANK_GRACE_MS
 * (plus two failovers per replica on a replicated shard) after its disconnect, unless its
 * STEP or its pull came meanwhile; a STEP on a new connection (a restarted worker) makes it
 * live again, and a restore (a new job) forgets them all. */

#define SRV_RANK_GRACE_MS 3000u

static void rank_note(ps_server *s, const srv_coord_peer *p, uint32_t id, uint32_t worker) {
  srv_rank_conn *k = NULL;
  for (size_t i = 0; i < s->nrconn && !k; i++)
    if (s->rconn[i].table == id && s->rconn[i].rank == worker) k = &s->rconn[i];
  if (!k) {
    if (!srv_grow((void **)&s->rconn, &s->rconn_cap, s->nrconn + 1, sizeof *s->rconn, 16))
      return; /* out of memory: that rank's loss goes unnamed (its pulls time out) */
    k = &s->rconn[s->nrconn++];
    *k = (srv_rank_conn){.table = id, .rank = worker};
  }
  if (k->lost) s->nlost--;
  k->lost = k->gone = false;
  k->peer = *p;
}

void srv_rank_note(ps_server *s, const srv_req *r, uint32_t id, uint32_t worker) {
  if (!r->has_ident) return; /* in-process or forwarded by a primary: no connection to watch */
  srv_coord_peer p;
  srv_peer_of(r, &p);
  for (uint32_t i = id ? id : 1; i <= (id ? id : s->max_table); i++)
    if (s->tables[i] && s->tables[i]->spec.consistency != PS_CONS_ASYNC)
      rank_note(s, &p, i, worker);
}

/* A lost rank that holds back a pull of `step` in t for good, or NULL. */
static const srv_rank_conn *lost_blocker(const ps_server *s, const srv_table *t, uint64_t step) {
  if (t->spec.consistency == PS_CONS_ASYNC) return NULL;
  uint64_t slack = t->spec.consistency == PS_CONS_SSP ? t->spec.staleness : 0;
  for (size_t i = 0; i < s->nrconn; i++) {
    const srv_rank_conn *k = &s->rconn[i];
    if (k->gone && k->table == t->spec.id && k->rank < t->spec.num_workers &&
        t->clock[k->rank] + slack < step)
      return k;
  }
  return NULL;
}

/* Answers r, a pull or a checkpoint that waits for step r->h->step of t, which lost rank k
 * will never report. */
static void fail_lost(ps_server *s, srv_req *r, const srv_table *t, const srv_rank_conn *k) {
  srv_reply_error(s, r, PS_ERR_UNAVAILABLE,
                  "%s of step %" PRIu64 " of table %u waits for rank %u, which disconnected "
                  "%.1f s ago after %" PRIu64 " steps (its connection from %s closed): that "
                  "worker died or exited",
                  r->h->op == EMBER__OP__OP_CHECKPOINT ? "checkpoint" : "pull", r->h->step,
                  t->spec.id, k->rank, (double)(ps_now_ns() - k->lost_ns) / 1e9,
                  t->clock[k->rank], k->peer.addr[0] ? k->peer.addr : "an unknown address");
}

bool srv_pull_fail_lost(ps_server *s, srv_req *r, uint64_t step) {
  for (size_t i = 0; s->nlost && i < s->nrconn; i++) { /* a pull of a lost rank: it is back */
    srv_rank_conn *k = &s->rconn[i];
    if (k->lost && !k->gone && k->rank == r->h->worker && k->table == r->tab->spec.id) {
      k->lost = false;
      s->nlost--;
    }
  }
  const srv_rank_conn *k = lost_blocker(s, r->tab, step);
  if (!k) return false;
  fail_lost(s, r, r->tab, k);
  return true;
}

/* The head exclusive op r, a snapshot waiting for its step's pushes (excl_ready): answered and
 * dequeued when a lost rank holds that step back for good (it waited out the client's
 * checkpoint bound, 10 minutes, naming no one). */
static bool excl_fail_lost(ps_server *s, srv_req *r) {
  for (uint32_t id = 1; id <= s->max_table; id++) {
    srv_table *t = s->tables[id];
    if (!t || t->spec.consistency != PS_CONS_SYNC || !t->step_init) continue;
    if (r->h->table_id && r->h->table_id != id) continue;
    const srv_rank_conn *k = t->applied < r->h->step ? lost_blocker(s, t, r->h->step) : NULL;
    if (!k) continue;
    s->excl_head = r->next;
    if (!s->excl_head) s->excl_tail = NULL;
    r->next = NULL;
    fail_lost(s, r, t, k);
    return true;
  }
  return false;
}

void srv_ranks_gone(ps_server *s, int fd) {
  for (size_t i = 0; i < s->nrconn; i++) {
    srv_rank_conn *k = &s->rconn[i];
    if (k->lost || k->gone || k->peer.fd != fd) continue;
    k->lost = true;
    k->lost_ns = ps_now_ns();
    s->nlost++;
    /* Every rank disconnects at the end of a job: only a pull failing for it is a warning. */
    PS_INFO("rank %u of table %u disconnected (its connection from %s closed)", k->rank,
            k->table, k->peer.addr[0] ? k->peer.addr : "an unknown address");
  }
}

static uint64_t srv_list_remove_if(ps_server *s, srv_req **head, srv_req **tail,
                                   bool (*test)(ps_server *, srv_req *, void *), void *ctx);

/* srv_list_remove_if's test for a pull deferred on table t: it waits for a rank given up. */
typedef struct {
  const srv_table *t;
  uint64_t now, failed;
} lost_ctx;

static bool fail_if_lost(ps_server *s, srv_req *r, void *ctx) {
  lost_ctx *c = ctx;
  const srv_rank_conn *k = lost_blocker(s, c->t, r->h->step);
  if (!k) return false;
  if (!c->failed++)
    PS_WARN("rank %u disconnected %.1f s ago and did not come back: the pulls of table %u "
            "that wait for its steps fail", k->rank, (double)(c->now - k->lost_ns) / 1e9,
            c->t->spec.id);
  fail_lost(s, r, c->t, k);
  return true;
}

void srv_ranks_tick(ps_server *s) {
  if (!s->nlost) return;
  uint64_t grace = SRV_RANK_GRACE_MS, now = ps_now_ns();
  if (s->opt.replicas > 1)
    grace += 2ull * s->opt.replicas * (s->opt.failover_ms ? s->opt.failover_ms : 1000);
  bool any = false;
  for (size_t i = 0; i < s->nrconn; i++) {
    srv_rank_conn *k = &s->rconn[i];
    if (!k->lost || now - k->lost_ns < grace * 1000000ull) continue;
    k->lost = false;
    k->gone = any = true;
    s->nlost--;
  }
  if (!any) return;
  for (uint32_t id = 1; id <= s->max_table; id++) {
    srv_table *t = s->tables[id];
    lost_ctx c = {.t = t, .now = now};
    if (t) s->deferred_now -= srv_list_remove_if(s, &t->wait_head, &t->wait_tail, fail_if_lost, &c);
  }
  srv_try_exclusive(s); /* a checkpoint waiting for the lost rank's step fails too */
}

void srv_ranks_reset(ps_server *s) { s->nrconn = s->nlost = 0; }

/* ---------------------------------------------------------------- exclusive operations */

static bool excl_ready(ps_server *s, srv_req *r) {
  /* Only a snapshot needs its step's pushes applied; commit and abort touch files alone. */
  if (r->h->op != EMBER__OP__OP_CHECKPOINT ||
      (r->h->ckpt_phase != EMBER__CKPT_PHASE__CKPT_ONESHOT &&
       r->h->ckpt_phase != EMBER__CKPT_PHASE__CKPT_PREPARE))
    return true;
  uint64_t step = r->h->step;
  for (uint32_t id = 1; id <= s->max_table; id++) {
    srv_table *t = s->tables[id];
    if (!t || t->spec.consistency != PS_CONS_SYNC || !t->step_init) continue;
    if (r->h->table_id && r->h->table_id != id) continue;
    if (t->applied < step) return false;
  }
  return true;
}

void srv_exclusive_add(ps_server *s, srv_req *r) {
  srv_list_push(&s->excl_head, &s->excl_tail, r);
  srv_try_exclusive(s);
}

/* Runs the head exclusive operation once its step condition holds and no store work is in
 * flight; requests arriving meanwhile are held, and released to the ready queue afterwards. */
void srv_try_exclusive(ps_server *s) {
  while (s->excl_head) {
    srv_req *r = s->excl_head;
    if (!s->excl_active) {
      if (!excl_ready(s, r)) {
        if (excl_fail_lost(s, r)) continue;
        return;
      }
      s->excl_active = true;
    }
    if (s->inflight) return;
    s->excl_head = r->next;
    if (!s->excl_head) s->excl_tail = NULL;
    srv_run_exclusive(s, r);
    s->excl_active = false;
    if (s->held_head) {
      if (s->ready_tail) s->ready_tail->next = s->held_head;
      else s->ready_head = s->held_head;
      s->ready_tail = s->held_tail;
    }
    s->held_head = s->held_tail = NULL;
    s->held = 0;
  }
}

void srv_run_ready(ps_server *s) {
  while (s->ready_head) {
    srv_req *r = s->ready_head;
    s->ready_head = r->next;
    if (!s->ready_head) s->ready_tail = NULL;
    r->next = NULL;
    srv_handle(s, r);
  }
}

/* ---------------------------------------------------------------- closed connections */

/* Takes out of the list (head, tail may be NULL) every request test consumes (returns true
 * for: it has answered or freed r), in order; how many. */
static uint64_t srv_list_remove_if(ps_server *s, srv_req **head, srv_req **tail,
                                   bool (*test)(ps_server *, srv_req *, void *), void *ctx) {
  srv_req *r = *head, *keep_h = NULL, *keep_t = NULL;
  uint64_t n = 0;
  *head = NULL;
  if (tail) *tail = NULL;
  while (r) {
    srv_req *next = r->next;
    r->next = NULL;
    if (test(s, r, ctx)) n++;
    else srv_list_push(&keep_h, &keep_t, r);
    r = next;
  }
  *head = keep_h;
  if (tail) *tail = keep_t;
  return n;
}

static bool drop_if_fd(ps_server *s, srv_req *r, void *fd) {
  if (r->fd != *(int *)fd) return false;
  srv_drop_gone(s, r);
  return true;
}

/* Drops the requests of the connection on fd from the list; how many. */
static uint64_t drop_fd(ps_server *s, srv_req **head, srv_req **tail, int fd) {
  return srv_list_remove_if(s, head, tail, drop_if_fd, &fd);
}

/* Nothing else would ever free them: a pull deferred for a step that never comes, and the
 * requests parked behind the bytes it holds, kept the whole in-flight budget after their
 * client had gone, and every later large request waited or was refused as busy. */
static void drop_peer(ps_server *s, int fd) {
  if (fd < 0) return;
  const uint64_t live = s->reqs_live;
  for (uint32_t id = 1; id <= s->max_table; id++) {
    srv_table *t = s->tables[id];
    if (t && t->wait_head) s->deferred_now -= drop_fd(s, &t->wait_head, &t->wait_tail, fd);
  }
  s->held -= drop_fd(s, &s->held_head, &s->held_tail, fd);
  if (s->excl_active) {
    /* Its head runs as soon as the store work in flight is done (requests are held for it):
     * it stays; the checkpoints and restores queued behind it go. */
    drop_fd(s, &s->excl_head->next, NULL, fd);
    for (s->excl_tail = s->excl_head; s->excl_tail->next; s->excl_tail = s->excl_tail->next) {
    }
  } else {
    /* Waiting for a step that may never come: a PREPARE of step 1000000 from a connection that
     * left held every later CHECKPOINT and RESTORE (a --resume hung) until a restart. */
    const srv_req *head = s->excl_head;
    drop_fd(s, &s->excl_head, &s->excl_tail, fd);
    if (s->excl_head && s->excl_head != head) srv_try_exclusive(s); /* the next may be ready */
  }
  srv_mem_peer_gone(s, fd);
  if (live > s->reqs_live)
    PS_LOG_RL(PS_LOG_INFO, "a connection closed with %" PRIu64 " requests waiting: dropped",
            live - s->reqs_live);
}

void srv_drop_gone_peers(ps_server *s) {
  for (size_t i = 0; i < s->ngone; i++) drop_peer(s, s->gone[i]);
  s->ngone = 0;
}

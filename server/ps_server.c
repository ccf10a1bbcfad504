/* ps_server: the main loop, request dispatch to partition threads, and the step bookkeeping
 * of the consistency modes.
 *
 * Design: the main thread is the only one that touches the ROUTER socket and the step state,
 * so none of that needs a lock. A pull or push becomes one task per partition thread (each
 * thread scans the batch and takes the keys of its own store partitions, so the main thread
 * does no per-key work beyond the shard check); tasks travel as pointers over inproc PUSH/PULL
 * sockets and come back the same way. Replies that must wait (sync pulls of a step not yet
 * applied, ssp pulls too far ahead, coordinator waits, checkpoints) are parked in lists and
 * answered when their condition turns true: no thread ever blocks on another worker.
 * Pull replies are written by the threads straight into the zmq message that is sent. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_fs.h"
#include "ps_hash.h"
#include "ps_log.h"
#include "ps_server_int.h"
#include "ps_time.h"

/* ---------------------------------------------------------------- requests */

static srv_req *req_new(ps_server *s, int kind) {
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
  r->t0 = ps_now_ns();
  s->reqs_live++;
  return r;
}

void srv_req_free(ps_server *s, srv_req *r) {
  if (!r) return;
  if (r->has_ident) zmq_msg_close(&r->ident);
  for (size_t i = 0; i < r->nfr; i++) zmq_msg_close(&r->fr[i]);
  if (r->has_out) zmq_msg_close(&r->out);
  ps_store_batch_destroy(&r->batch);
  ps_msg_clear(&r->msg);
  r->has_ident = r->has_out = false;
  r->nfr = 0;
  r->h = NULL;
  r->next = s->free_reqs;
  s->free_reqs = r;
  s->reqs_live--;
}

static void req_destroy_pool(ps_server *s) {
  while (s->free_reqs) {
    srv_req *r = s->free_reqs;
    s->free_reqs = r->next;
    free(r->tasks);
    free(r);
  }
}

static void list_push(srv_req **head, srv_req **tail, srv_req *r) {
  r->next = NULL;
  if (*tail) (*tail)->next = r;
  else *head = r;
  *tail = r;
}

/* ---------------------------------------------------------------- replies */

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

/* Sends [ident][header][values?] (or hands it to the in-process sink), then frees r. */
void srv_reply(ps_server *s, srv_req *r, Ember__Header *rh, zmq_msg_t *values) {
  rh->version = PS_WIRE_VERSION;
  rh->is_reply = true;
  rh->request_id = r->h ? r->h->request_id : 0;
  rh->shard = s->opt.shard;
  rh->shards = s->opt.shards;
  record(s, r, rh->status == 0);
  size_t hs = ember__header__get_packed_size(rh);
  zmq_msg_t hm;
  if (zmq_msg_init_size(&hm, hs) != 0) {
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
    s->bytes_out += hs + (values ? zmq_msg_size(values) : 0);
    r->has_ident = false;
    /* ROUTER never blocks: a peer that is gone or past its HWM loses the reply. */
    if (zmq_msg_send(&r->ident, s->router, ZMQ_SNDMORE) < 0) {
      zmq_msg_close(&r->ident);
      zmq_msg_close(&hm);
      s->dropped++;
    } else if (zmq_msg_send(&hm, s->router, values ? ZMQ_SNDMORE : 0) < 0) {
      zmq_msg_close(&hm);
      s->dropped++;
    } else if (values && zmq_msg_send(values, s->router, 0) < 0) {
      s->dropped++;
    }
  } else {
    if (s->sink) {
      const void *f[2] = {zmq_msg_data(&hm), values ? zmq_msg_data(values) : NULL};
      size_t z[2] = {hs, values ? zmq_msg_size(values) : 0};
      s->sink(s->sink_ctx, f, z, values ? 2 : 1);
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
  PS_DEBUG("error reply (%s): %s", ps_status_str(st), msg);
  Ember__Header rh;
  ps_wire_header_init(&rh, EMBER__OP__OP_ERROR);
  rh.status = (int32_t)st;
  rh.message = msg;
  srv_reply(s, r, &rh, NULL);
}

/* ---------------------------------------------------------------- partition work */

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return true;
  size_t nc = *cap ? *cap : 1024;
  while (nc < need) nc *= 2;
  void *q = realloc(*p, nc * elem);
  if (!q) return false;
  *p = q;
  *cap = nc;
  return true;
}

/* Keys (and their positions) of this partition thread's store partitions. */
static bool part_reserve(srv_part *p, size_t n) {
  size_t kc = p->kcap, pc = p->kcap;
  bool ok = grow((void **)&p->kbuf, &kc, n, sizeof *p->kbuf) &&
            grow((void **)&p->pbuf, &pc, n, sizeof *p->pbuf);
  p->kcap = kc < pc ? kc : pc;
  return ok;
}

static ps_status part_filter(srv_part *p, const uint64_t *keys, size_t n, size_t *m_out) {
  if (!part_reserve(p, n)) return PS_ERR_NOMEM;
  uint32_t T = p->s->nthreads;
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    if (ps_store_partition_of(p->s->store, keys[i]) % T != p->idx) continue;
    p->kbuf[m] = keys[i];
    p->pbuf[m++] = (uint32_t)i;
  }
  *m_out = m;
  return PS_OK;
}

static sync_slot *sync_slot_of(srv_part *p, uint32_t table, uint32_t dim, uint64_t step) {
  sync_tab *t = p->sync;
  while (t && t->table != table) t = t->next;
  if (!t) {
    t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->table = table;
    t->dim = dim;
    t->next = p->sync;
    p->sync = t;
  }
  sync_slot *sl = &t->slot[step % SRV_WINDOW];
  if (sl->used && sl->step != step) return NULL; /* the main thread's window check failed */
  sl->used = true;
  sl->step = step;
  return sl;
}

static ps_status sync_append(sync_slot *sl, uint32_t dim, const uint64_t *keys, const float *g,
                             const uint32_t *pos, size_t m) {
  size_t need = sl->n + m;
  if (need > sl->cap) {
    size_t nc = sl->cap ? sl->cap : 1024;
    while (nc < need) nc *= 2;
    uint64_t *nk = realloc(sl->keys, nc * sizeof *nk);
    if (!nk) return PS_ERR_NOMEM;
    sl->keys = nk;
    float *ng = realloc(sl->grads, nc * dim * sizeof *ng);
    if (!ng) return PS_ERR_NOMEM;
    sl->grads = ng;
    sl->cap = nc;
  }
  for (size_t i = 0; i < m; i++) {
    size_t src = pos ? pos[i] : i;
    sl->keys[sl->n + i] = keys[i];
    memcpy(sl->grads + (sl->n + i) * dim, g + src * dim, dim * sizeof(float));
  }
  sl->n = need;
  return PS_OK;
}

enum { TK_PULL = 1, TK_PUSH, TK_BUFFER, TK_APPLY };

/* The keys of this thread's store partitions in a shared batch, into kbuf/pbuf (the sync
 * buffer keeps keys and positions of its own). */
static ps_status part_batch_keys(srv_part *p, const srv_req *r, size_t *m_out) {
  const ps_store_batch *b = r->batch;
  uint32_t P = ps_store_partitions(p->s->store), T = p->s->nthreads;
  size_t m = 0;
  for (uint32_t q = p->idx; q < P; q += T) m += ps_store_batch_part(b, q, NULL);
  if (!part_reserve(p, m)) return PS_ERR_NOMEM;
  m = 0;
  for (uint32_t q = p->idx; q < P; q += T) {
    const uint32_t *pos;
    size_t c = ps_store_batch_part(b, q, &pos);
    for (size_t i = 0; i < c; i++) {
      p->kbuf[m] = r->msg.keys[pos[i]];
      p->pbuf[m++] = pos[i];
    }
  }
  *m_out = m;
  return PS_OK;
}

static ps_status part_run(srv_part *p, srv_req *r) {
  ps_server *s = p->s;
  srv_table *tab = r->tab;
  uint32_t dim = tab->spec.dim, id = tab->spec.id;
  bool split = s->nthreads > 1;
  const uint64_t *keys = r->msg.keys;
  size_t n = r->msg.nkeys, m = n;
  const uint32_t *pos = NULL;
  ps_status st = PS_OK;
  /* f32 pulls and pushes over a shared batch: rows go straight between the store and the
   * request/reply frames, each thread on its own partitions. */
  if (r->batch && r->task_kind == TK_PULL)
    return ps_store_pull_batch(s->store, id, r->batch, p->idx, s->nthreads, r->outp);
  if (r->batch && r->task_kind == TK_PUSH)
    return ps_store_push_batch(s->store, id, r->batch, p->idx, s->nthreads, r->msg.values);
  if (r->batch && r->task_kind == TK_BUFFER) {
    st = part_batch_keys(p, r, &m);
    if (st != PS_OK || m == 0) return st;
    sync_slot *sl = sync_slot_of(p, id, dim, r->step);
    if (!sl) return PS_ERR_INTERNAL;
    return sync_append(sl, dim, p->kbuf, r->msg.values, p->pbuf, m);
  }
  if (r->task_kind != TK_APPLY && split) {
    st = part_filter(p, keys, n, &m);
    if (st != PS_OK) return st;
    keys = p->kbuf;
    pos = p->pbuf;
  }
  switch (r->task_kind) {
    case TK_PULL: {
      if (!split && !r->f16) return ps_store_pull(s->store, id, keys, n, r->outp);
      if (m == 0) return PS_OK;
      if (!grow((void **)&p->vbuf, &p->vcap, m * dim, sizeof(float))) return PS_ERR_NOMEM;
      st = ps_store_pull(s->store, id, keys, m, p->vbuf);
      if (st != PS_OK) return st;
      uint16_t *o16 = (uint16_t *)r->outp;
      if (!split) ps_wire_f32_to_f16(p->vbuf, o16, m * dim);
      else if (r->f16)
        for (size_t i = 0; i < m; i++)
          ps_wire_f32_to_f16(p->vbuf + i * dim, o16 + (size_t)pos[i] * dim, dim);
      else
        for (size_t i = 0; i < m; i++)
          memcpy(r->outp + (size_t)pos[i] * dim, p->vbuf + i * dim, dim * sizeof(float));
      return PS_OK;
    }
    case TK_PUSH:
    case TK_BUFFER: {
      /* Gradients of this thread's keys, as f32 rows: the frame itself when it can be used
       * as is (one thread, f32), else gathered (and widened from f16) into vbuf. */
      const float *g = r->msg.values;
      if (m == 0) return PS_OK;
      if (split || r->f16) {
        if (!grow((void **)&p->vbuf, &p->vcap, m * dim, sizeof(float))) return PS_ERR_NOMEM;
        const uint16_t *g16 = r->msg.values;
        for (size_t i = 0; i < m; i++) {
          size_t src = pos ? pos[i] : i;
          if (r->f16) ps_wire_f16_to_f32(g16 + src * dim, p->vbuf + i * dim, dim);
          else memcpy(p->vbuf + i * dim, g + src * dim, dim * sizeof(float));
        }
        g = p->vbuf;
      }
      if (r->task_kind == TK_PUSH) return ps_store_push(s->store, id, keys, m, g);
      sync_slot *sl = sync_slot_of(p, id, dim, r->step);
      if (!sl) return PS_ERR_INTERNAL;
      return sync_append(sl, dim, keys, g, NULL, m);
    }
    case TK_APPLY: {
      sync_tab *t = p->sync;
      while (t && t->table != id) t = t->next;
      if (!t) return PS_OK;
      sync_slot *sl = &t->slot[r->step % SRV_WINDOW];
      if (!sl->used || sl->step != r->step) return PS_OK; /* nothing pushed here this step */
      /* One call for the whole step: the store sums duplicate keys (the W workers'
       * gradients of a row) and applies the optimizer once. */
      if (sl->n) st = ps_store_push(s->store, id, sl->keys, sl->n, sl->grads);
      sl->n = 0;
      sl->used = false;
      return st;
    }
  }
  return PS_ERR_INTERNAL;
}

static void part_drop_sync(srv_part *p) {
  while (p->sync) {
    sync_tab *t = p->sync;
    p->sync = t->next;
    for (uint32_t i = 0; i < SRV_WINDOW; i++) {
      free(t->slot[i].keys);
      free(t->slot[i].grads);
    }
    free(t);
  }
}

/* Called only while no store work is in flight (an exclusive op), so the threads are idle
 * and their buffers can be touched from the main thread. */
void srv_drop_sync_all(ps_server *s) {
  part_drop_sync(&s->inline_part);
  for (uint32_t i = 0; s->parts && i < s->nthreads; i++) part_drop_sync(&s->parts[i]);
}

static void *part_main(void *arg) {
  srv_part *p = arg;
  char tag[32];
  snprintf(tag, sizeof tag, "server/%u/p%u", p->s->opt.shard, p->idx);
  for (;;) {
    srv_task *t = NULL;
    int rc = zmq_recv(p->in, &t, sizeof t, 0);
    if (rc < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (rc != (int)sizeof t || !t) break;
    t->started = ps_now_ns();
    t->st = part_run(p, t->req);
    while (zmq_send(p->done, &t, sizeof t, 0) < 0 && errno == EINTR) {
    }
  }
  return NULL;
}

/* ---------------------------------------------------------------- dispatch */

static void finish(ps_server *s, srv_req *r);
static void reply_finished(ps_server *s, srv_req *r);
/* --inject-delay-us: when a request's reply may leave. It simulates service time, so it runs
 * from the start of the store work: queueing (a deferred pull, busy partition threads) comes
 * on top of it, as on a server whose service simply takes this long. */
static uint64_t delay_due(const ps_server *s, const srv_req *r) {
  return r->t_svc + s->opt.inject_delay_us * 1000u;
}
static void try_exclusive(ps_server *s);

/* Hands r to every partition thread (or runs it inline). */
static void dispatch(ps_server *s, srv_req *r, int kind) {
  r->task_kind = kind;
  r->st = PS_OK;
  if (s->nthreads == 0) {
    r->t_svc = ps_now_ns();
    r->st = part_run(&s->inline_part, r);
    r->pending = 0;
    s->inflight++;
    finish(s, r);
    return;
  }
  if (s->nthreads > 1 && !r->f16 && kind != TK_APPLY) {
    /* Hash and group the keys once here rather than once per thread. Without memory for
     * it the threads fall back to filtering the keys themselves. */
    if (ps_store_batch_create(s->store, r->msg.keys, r->msg.nkeys, &r->batch) != PS_OK)
      r->batch = NULL;
  }
  r->pending = s->nthreads;
  r->t_svc = 0; /* raised to the last thread's start as the tasks come back */
  s->inflight++;
  for (uint32_t i = 0; i < s->nthreads; i++) {
    srv_task *t = &r->tasks[i];
    t->req = r;
    t->part = i;
    t->st = PS_OK;
    while (zmq_send(s->parts[i].feed, &t, sizeof t, 0) < 0 && errno == EINTR) {
    }
  }
}

static void on_task_done(ps_server *s, srv_task *t) {
  srv_req *r = t->req;
  if (t->st != PS_OK && r->st == PS_OK) r->st = t->st;
  if (t->started > r->t_svc) r->t_svc = t->started;
  if (--r->pending == 0) finish(s, r);
}

static void finish(ps_server *s, srv_req *r) {
  s->inflight--;
  if (r->kind == REQ_APPLY) {
    srv_table *t = r->tab;
    if (r->st != PS_OK)
      PS_ERROR("applying step %" PRIu64 " of table %u failed: %s", r->step, t->spec.id,
               ps_status_str(r->st));
    if (r->step + 1 > t->applied) t->applied = r->step + 1;
    srv_req_free(s, r);
    srv_release_waiters(s, t);
    try_exclusive(s);
    return;
  }
  if (s->opt.inject_delay_us && r->kind == REQ_CLIENT && !s->stopping &&
      ps_now_ns() < delay_due(s, r)) {
    /* An injected service time: the reply waits in a FIFO, no thread waits with it, so
     * requests overlap as they would on a server whose service simply takes this long. The
     * FIFO is in finishing order, which is the order of t_svc but for requests whose store
     * work overlapped: a reply is late by at most that overlap. */
    s->inflight++;
    list_push(&s->delay_head, &s->delay_tail, r);
    return;
  }
  reply_finished(s, r);
}

/* Sends the replies whose injected delay is over (all of them when stopping); returns the
 * nanoseconds until the next one is due, 0 if none waits. */
static uint64_t release_delayed(ps_server *s) {
  uint64_t now = ps_now_ns();
  while (s->delay_head) {
    srv_req *r = s->delay_head;
    uint64_t due = delay_due(s, r);
    if (!s->stopping && due > now) return due - now;
    s->delay_head = r->next;
    if (!s->delay_head) s->delay_tail = NULL;
    r->next = NULL;
    s->inflight--;
    reply_finished(s, r);
  }
  return 0;
}

static void reply_finished(ps_server *s, srv_req *r) {
  if (r->st != PS_OK) {
    srv_reply_error(s, r, r->st, "%s of %zu keys in table %u failed: %s",
                    srv_op_name(r->h->op), r->msg.nkeys, r->tab->spec.id, ps_status_str(r->st));
  } else if (r->task_kind == TK_PULL) {
    Ember__Header rh;
    ps_wire_header_init(&rh, EMBER__OP__OP_PULL);
    rh.table_id = r->tab->spec.id;
    rh.count = r->msg.nkeys;
    rh.dim = r->tab->spec.dim;
    rh.step = r->h->step;
    rh.value_type = r->f16 ? EMBER__VALUE_TYPE__VT_F16 : EMBER__VALUE_TYPE__VT_F32;
    r->has_out = false;
    zmq_msg_t out;
    zmq_msg_init(&out);
    zmq_msg_move(&out, &r->out);
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
  if (s->excl_active) try_exclusive(s);
}

/* ---------------------------------------------------------------- consistency */

static void adopt_step(srv_table *t, uint64_t step) {
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
static bool pull_ready(const srv_table *t, uint64_t step) {
  switch (t->spec.consistency) {
    case PS_CONS_SYNC: return step <= t->applied;
    case PS_CONS_SSP: return step <= t->applied + t->spec.staleness;
    default: return true;
  }
}

static void start_pull(ps_server *s, srv_req *r) {
  size_t bytes = r->msg.nkeys * (size_t)r->tab->spec.dim * (r->f16 ? 2 : sizeof(float));
  if (zmq_msg_init_size(&r->out, bytes) != 0) {
    srv_reply_error(s, r, PS_ERR_NOMEM, "no memory for a %zu-byte reply", bytes);
    return;
  }
  r->has_out = true;
  r->outp = zmq_msg_data(&r->out);
  dispatch(s, r, TK_PULL);
}

void srv_release_waiters(ps_server *s, srv_table *t) {
  srv_req *r = t->wait_head, *keep_h = NULL, *keep_t = NULL;
  t->wait_head = t->wait_tail = NULL;
  while (r) {
    srv_req *next = r->next;
    if (pull_ready(t, r->h->step)) {
      s->deferred_now--;
      if (s->excl_active) list_push(&s->held_head, &s->held_tail, r), s->held++;
      else start_pull(s, r);
    } else {
      list_push(&keep_h, &keep_t, r);
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
    srv_req *a = req_new(s, REQ_APPLY);
    if (!a) {
      PS_ERROR("out of memory issuing step %" PRIu64, t->apply_issued);
      return;
    }
    a->tab = t;
    a->step = t->apply_issued++;
    dispatch(s, a, TK_APPLY);
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

/* Records that `worker` finished `step` in table t. */
static ps_status table_step(ps_server *s, srv_table *t, uint32_t worker, uint64_t step,
                            char *err, size_t errlen) {
  /* Async tables keep clocks only for stats: a STEP for "all tables" from a rank beyond an
   * async table's num_workers is not an error there. */
  if (t->spec.consistency == PS_CONS_ASYNC && worker >= t->spec.num_workers) return PS_OK;
  if (worker >= t->spec.num_workers) {
    snprintf(err, errlen, "worker %u out of range: table %u was declared for %u workers", worker,
             t->spec.id, t->spec.num_workers);
    return PS_ERR_INVALID;
  }
  adopt_step(t, step);
  if (t->spec.consistency == PS_CONS_SYNC && step >= t->apply_issued + SRV_WINDOW) {
    snprintf(err, errlen, "step %" PRIu64 " is more than %u steps ahead of step %" PRIu64, step,
             SRV_WINDOW, t->apply_issued);
    return PS_ERR_INVALID;
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

/* ---------------------------------------------------------------- handlers */

static ps_status check_keys(ps_server *s, srv_req *r) {
  if (s->opt.shards <= 1) return PS_OK;
  const uint64_t *k = r->msg.keys;
  for (size_t i = 0; i < r->msg.nkeys; i++) {
    uint32_t sh = ps_shard_of(k[i], s->opt.shards);
    if (sh != s->opt.shard) {
      srv_reply_error(s, r, PS_ERR_WRONG_SHARD,
                      "key %" PRIu64 " (position %zu) belongs to shard %u of %u, this is shard %u",
                      k[i], i, sh, s->opt.shards, s->opt.shard);
      return PS_ERR_WRONG_SHARD;
    }
  }
  return PS_OK;
}

static bool needs_worker(const srv_table *t) { return t->spec.consistency != PS_CONS_ASYNC; }

static void handle_pull(ps_server *s, srv_req *r) {
  Ember__Header *h = r->h;
  srv_table *t = r->tab;
  if (h->dim && h->dim != t->spec.dim) {
    srv_reply_error(s, r, PS_ERR_INVALID, "pull asks for dim %u, table %u has dim %u", h->dim,
                    t->spec.id, t->spec.dim);
    return;
  }
  if (h->value_type != EMBER__VALUE_TYPE__VT_F32 && h->value_type != EMBER__VALUE_TYPE__VT_F16) {
    srv_reply_error(s, r, PS_ERR_UNSUPPORTED, "value type %d (f32 or f16)", (int)h->value_type);
    return;
  }
  r->f16 = h->value_type == EMBER__VALUE_TYPE__VT_F16;
  if (r->msg.nkeys * (size_t)t->spec.dim * sizeof(float) > SRV_MAX_REPLY_BYTES) {
    srv_reply_error(s, r, PS_ERR_INVALID, "pull of %zu keys x dim %u exceeds the reply limit",
                    r->msg.nkeys, t->spec.dim);
    return;
  }
  if (needs_worker(t) && h->worker >= t->spec.num_workers) {
    srv_reply_error(s, r, PS_ERR_INVALID, "worker %u out of range: table %u has %u workers",
                    h->worker, t->spec.id, t->spec.num_workers);
    return;
  }
  if (check_keys(s, r) != PS_OK) return;
  s->ops[EMBER__OP__OP_PULL].keys += r->msg.nkeys;
  if (t->spec.consistency != PS_CONS_ASYNC) adopt_step(t, h->step);
  if (!pull_ready(t, h->step)) {
    t->deferred++;
    s->deferred_now++;
    list_push(&t->wait_head, &t->wait_tail, r);
    return;
  }
  start_pull(s, r);
}

static void handle_push(ps_server *s, srv_req *r) {
  Ember__Header *h = r->h;
  srv_table *t = r->tab;
  if (h->dim != t->spec.dim) {
    srv_reply_error(s, r, PS_ERR_INVALID, "push has dim %u, table %u has dim %u", h->dim,
                    t->spec.id, t->spec.dim);
    return;
  }
  if (r->msg.value_size != sizeof(float) && r->msg.value_size != 2) {
    srv_reply_error(s, r, PS_ERR_UNSUPPORTED, "push gradients must be f32 or f16");
    return;
  }
  r->f16 = r->msg.value_size == 2;
  if (needs_worker(t) && h->worker >= t->spec.num_workers) {
    srv_reply_error(s, r, PS_ERR_INVALID, "worker %u out of range: table %u has %u workers",
                    h->worker, t->spec.id, t->spec.num_workers);
    return;
  }
  if (check_keys(s, r) != PS_OK) return;
  s->ops[EMBER__OP__OP_PUSH].keys += r->msg.nkeys;
  if (t->spec.consistency != PS_CONS_SYNC) {
    dispatch(s, r, TK_PUSH);
    return;
  }
  adopt_step(t, h->step);
  if (h->step < t->apply_issued) {
    srv_reply_error(s, r, PS_ERR_CONFLICT,
                    "push for step %" PRIu64 " of table %u arrived after that step was applied",
                    h->step, t->spec.id);
    return;
  }
  if (h->step >= t->apply_issued + SRV_WINDOW) {
    srv_reply_error(s, r, PS_ERR_INVALID,
                    "push for step %" PRIu64 " is more than %u steps ahead of step %" PRIu64,
                    h->step, SRV_WINDOW, t->apply_issued);
    return;
  }
  r->step = h->step;
  dispatch(s, r, TK_BUFFER);
}

static void handle_step(ps_server *s, srv_req *r) {
  Ember__Header *h = r->h;
  char err[256] = "";
  ps_status st = PS_OK;
  if (h->table_id) {
    st = table_step(s, r->tab, h->worker, h->step, err, sizeof err);
  } else {
    for (uint32_t id = 1; id <= s->max_table && st == PS_OK; id++)
      if (s->tables[id]) st = table_step(s, s->tables[id], h->worker, h->step, err, sizeof err);
  }
  if (st != PS_OK) srv_reply_error(s, r, st, "%s", err);
  else srv_reply_ok(s, r);
  try_exclusive(s);
}

static void handle_declare(ps_server *s, srv_req *r) {
  ps_table_spec spec;
  ps_error e;
  if (ps_wire_spec_from_pb(r->h->table, &spec, &e) != PS_OK) {
    srv_reply_error(s, r, e.code, "bad table spec: %s", e.msg);
    return;
  }
  const uint32_t id = spec.id;
  srv_table *t = s->tables[id];
  if (t && !t->meta_unknown && !ps_table_spec_stepping_equal(&t->spec, &spec)) {
    srv_reply_error(s, r, PS_ERR_CONFLICT,
                    "table %u '%s' was declared with consistency %s (staleness %u) for %u "
                    "workers; this declaration asks for %s (staleness %u) for %u workers",
                    id, t->spec.name, ps_consistency_name(t->spec.consistency),
                    t->spec.staleness, t->spec.num_workers,
                    ps_consistency_name(spec.consistency), spec.staleness, spec.num_workers);
    return;
  }
  ps_status st = ps_store_declare(s->store, &spec);
  if (st != PS_OK) {
    srv_reply_error(s, r, st,
                    st == PS_ERR_CONFLICT
                        ? "table %u '%s' conflicts with a table already declared (another spec "
                          "under this id or name)"
                        : "declaring table %u '%s' failed",
                    id, spec.name);
    return;
  }
  if (!t || t->meta_unknown) {
    srv_table *nt = srv_table_new(&spec);
    if (!nt) {
      srv_reply_error(s, r, PS_ERR_NOMEM, "out of memory declaring table %u", id);
      return;
    }
    if (t) srv_table_free(t);
    s->tables[id] = nt;
    if (id > s->max_table) s->max_table = id;
    if (srv_meta_save(s, false) != PS_OK) PS_WARN("could not persist the table metadata");
    PS_INFO("declared table %u '%s' dim %u, %s%s for %u workers", id, spec.name, spec.dim,
            ps_consistency_name(spec.consistency), spec.consistency == PS_CONS_SSP ? ":K" : "",
            spec.num_workers);
  }
  Ember__Header rh;
  ps_wire_header_init(&rh, EMBER__OP__OP_DECLARE);
  rh.table_id = id;
  srv_reply(s, r, &rh, NULL);
}

static void handle_stats(ps_server *s, srv_req *r) {
  char *js = srv_stats_build(s);
  if (!js) {
    srv_reply_error(s, r, PS_ERR_NOMEM, "out of memory building stats");
    return;
  }
  Ember__Header rh;
  ps_wire_header_init(&rh, EMBER__OP__OP_STATS);
  rh.blob.data = (uint8_t *)js;
  rh.blob.len = strlen(js);
  srv_reply(s, r, &rh, NULL);
  free(js);
}

/* ---------------------------------------------------------------- checkpoint / restore */

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

static void handle_decoded(ps_server *s, srv_req *r);

static void run_exclusive(ps_server *s, srv_req *r) {
  char err[512] = "";
  Ember__Header rh;
  ps_wire_header_init(&rh, r->h->op);
  ps_status st;
  char dir[4096] = "";
  if (r->h->op == EMBER__OP__OP_CHECKPOINT) {
    st = srv_checkpoint(s, (int)r->h->ckpt_phase, r->h->step, r->h->path, err, sizeof err, dir,
                        sizeof dir);
    rh.step = r->h->step;
    rh.path = dir;
    rh.ckpt_phase = r->h->ckpt_phase;
  } else {
    uint64_t step = 0;
    st = srv_restore(s, r->h->path, &step, err, sizeof err);
    rh.step = step;
    for (uint32_t id = 1; st == PS_OK && id <= s->max_table; id++)
      if (s->tables[id]) srv_release_waiters(s, s->tables[id]);
  }
  if (st != PS_OK) srv_reply_error(s, r, st, "%s", err);
  else srv_reply(s, r, &rh, NULL);
}

/* Runs the head exclusive operation once its step condition holds and no store work is in
 * flight; requests arriving meanwhile are held and replayed in order afterwards. */
static void try_exclusive(ps_server *s) {
  while (s->excl_head) {
    srv_req *r = s->excl_head;
    if (!s->excl_active) {
      if (!excl_ready(s, r)) return;
      s->excl_active = true;
    }
    if (s->inflight) return;
    s->excl_head = r->next;
    if (!s->excl_head) s->excl_tail = NULL;
    run_exclusive(s, r);
    s->excl_active = false;
    srv_req *h = s->held_head;
    s->held_head = s->held_tail = NULL;
    s->held = 0;
    while (h) {
      srv_req *next = h->next;
      handle_decoded(s, h);
      h = next;
    }
  }
}

/* ---------------------------------------------------------------- message intake */

static bool store_op(int op) {
  return op == EMBER__OP__OP_PULL || op == EMBER__OP__OP_PUSH || op == EMBER__OP__OP_STEP ||
         op == EMBER__OP__OP_DECLARE;
}

static bool coord_op(int op) {
  return op == EMBER__OP__OP_JOIN || op == EMBER__OP__OP_KV_SET || op == EMBER__OP__OP_KV_GET ||
         op == EMBER__OP__OP_BARRIER;
}

/* Takes ownership of a decoded request. */
static void handle_decoded(ps_server *s, srv_req *r) {
  Ember__Header *h = r->h;
  int op = (int)h->op;
  if (s->stopping) {
    srv_reply_error(s, r, PS_ERR_UNAVAILABLE, "shard %u is shutting down", s->opt.shard);
    return;
  }
  if (s->excl_active && store_op(op)) {
    list_push(&s->held_head, &s->held_tail, r);
    s->held++;
    return;
  }
  if (op == EMBER__OP__OP_PULL || op == EMBER__OP__OP_PUSH ||
      (op == EMBER__OP__OP_STEP && h->table_id)) {
    srv_table *t = h->table_id ? s->tables[h->table_id] : NULL;
    if (!t) {
      srv_reply_error(s, r, PS_ERR_UNKNOWN_TABLE, "table %u is not declared on shard %u",
                      h->table_id, s->opt.shard);
      return;
    }
    r->tab = t;
  }
  switch (op) {
    case EMBER__OP__OP_DECLARE: handle_declare(s, r); return;
    case EMBER__OP__OP_PULL: handle_pull(s, r); return;
    case EMBER__OP__OP_PUSH: handle_push(s, r); return;
    case EMBER__OP__OP_STEP: handle_step(s, r); return;
    case EMBER__OP__OP_STATS: handle_stats(s, r); return;
    case EMBER__OP__OP_PING: srv_reply_ok(s, r); return;
    case EMBER__OP__OP_CHECKPOINT:
    case EMBER__OP__OP_RESTORE:
      list_push(&s->excl_head, &s->excl_tail, r);
      try_exclusive(s);
      return;
    default: break;
  }
  if (coord_op(op)) {
    if (s->opt.shard != 0 || !s->coord) {
      srv_reply_error(s, r, PS_ERR_UNSUPPORTED,
                      "%s goes to the coordinator on shard 0; this is shard %u", srv_op_name(op),
                      s->opt.shard);
      return;
    }
    srv_coord_handle(s, r);
    return;
  }
  srv_reply_error(s, r, PS_ERR_UNKNOWN_OP, "op %d is not a request", op);
}

/* Decodes r's frames; on failure answers (when the header names a request id) or drops. */
static void handle_frames(ps_server *s, srv_req *r) {
  ps_frame f[PS_WIRE_MAX_FRAMES];
  for (size_t i = 0; i < r->nfr; i++) {
    f[i].data = zmq_msg_data(&r->fr[i]);
    f[i].size = zmq_msg_size(&r->fr[i]);
    s->bytes_in += f[i].size;
  }
  char err[256];
  ps_status st = ps_wire_decode(f, r->nfr, &r->msg, err, sizeof err);
  if (st == PS_OK && r->msg.hdr->is_reply) {
    st = PS_ERR_PROTO;
    snprintf(err, sizeof err, "a reply sent to a server");
    ps_msg_clear(&r->msg);
  }
  if (st != PS_OK) {
    s->malformed++;
    Ember__Header *h = r->nfr ? ember__header__unpack(NULL, f[0].size, f[0].data) : NULL;
    if (!h || h->is_reply) {
      if (h) ember__header__free_unpacked(h, NULL);
      srv_req_free(s, r);
      return;
    }
    r->msg.hdr = h; /* for the request id; freed with the request */
    r->h = h;
    srv_reply_error(s, r, st, "%s", err);
    return;
  }
  r->h = r->msg.hdr;
  handle_decoded(s, r);
}

static bool recv_one(ps_server *s) {
  srv_req *r = req_new(s, REQ_CLIENT);
  if (!r) return false;
  zmq_msg_init(&r->ident);
  if (zmq_msg_recv(&r->ident, s->router, ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&r->ident);
    srv_req_free(s, r);
    return false;
  }
  r->has_ident = true;
  int more = zmq_msg_more(&r->ident);
  bool extra = false;
  while (more) {
    zmq_msg_t *m, scratch;
    if (r->nfr < PS_WIRE_MAX_FRAMES) m = &r->fr[r->nfr];
    else m = &scratch, extra = true;
    zmq_msg_init(m);
    if (zmq_msg_recv(m, s->router, 0) < 0) {
      zmq_msg_close(m);
      break;
    }
    more = zmq_msg_more(m);
    if (m == &scratch) zmq_msg_close(m);
    else r->nfr++;
  }
  if (r->nfr == 0 || extra) {
    /* No header, or more frames than any message has: nothing trustworthy to answer. */
    s->malformed++;
    srv_req_free(s, r);
    return true;
  }
  handle_frames(s, r);
  return true;
}

/* ---------------------------------------------------------------- lifecycle */

static ps_status start_threads(ps_server *s) {
  char ep[128];
  snprintf(ep, sizeof ep, "inproc://ember-%p-done", (void *)s);
  s->done = zmq_socket(s->ctx, ZMQ_PULL);
  int zero = 0;
  zmq_setsockopt(s->done, ZMQ_RCVHWM, &zero, sizeof zero);
  if (!s->done || zmq_bind(s->done, ep) != 0) return PS_ERR_INTERNAL;
  s->parts = calloc(s->nthreads, sizeof *s->parts);
  if (!s->parts) return PS_ERR_NOMEM;
  for (uint32_t i = 0; i < s->nthreads; i++) {
    srv_part *p = &s->parts[i];
    p->s = s;
    p->idx = i;
    char pe[128];
    snprintf(pe, sizeof pe, "inproc://ember-%p-part-%u", (void *)s, i);
    p->in = zmq_socket(s->ctx, ZMQ_PULL);
    p->feed = zmq_socket(s->ctx, ZMQ_PUSH);
    p->done = zmq_socket(s->ctx, ZMQ_PUSH);
    if (!p->in || !p->feed || !p->done) return PS_ERR_INTERNAL;
    zmq_setsockopt(p->in, ZMQ_RCVHWM, &zero, sizeof zero);
    zmq_setsockopt(p->feed, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_setsockopt(p->done, ZMQ_SNDHWM, &zero, sizeof zero);
    if (zmq_bind(p->in, pe) != 0 || zmq_connect(p->feed, pe) != 0 || zmq_connect(p->done, ep) != 0)
      return PS_ERR_INTERNAL;
    if (pthread_create(&p->th, NULL, part_main, p) != 0) return PS_ERR_INTERNAL;
    p->started = true;
  }
  return PS_OK;
}

static void stop_threads(ps_server *s) {
  if (!s->parts) return;
  for (uint32_t i = 0; i < s->nthreads; i++) {
    srv_part *p = &s->parts[i];
    if (p->started) {
      srv_task *nil = NULL;
      zmq_send(p->feed, &nil, sizeof nil, 0);
      pthread_join(p->th, NULL);
    }
    if (p->in) zmq_close(p->in);
    if (p->feed) zmq_close(p->feed);
    if (p->done) zmq_close(p->done);
    free(p->kbuf);
    free(p->pbuf);
    free(p->vbuf);
    part_drop_sync(p);
  }
  free(s->parts);
  s->parts = NULL;
  if (s->done) zmq_close(s->done);
  s->done = NULL;
}

ps_status ps_server_create(const ps_server_options *opt, ps_server **out) {
  *out = NULL;
  if (!opt || opt->shards == 0 || opt->shard >= opt->shards || !opt->data_dir ||
      !opt->data_dir[0] || opt->threads > 256 || strlen(opt->data_dir) > 1900) {
    PS_ERROR("bad server options (need shard < shards, a data dir, at most 256 threads)");
    return PS_ERR_INVALID;
  }
  ps_server *s = calloc(1, sizeof *s);
  if (!s) return PS_ERR_NOMEM;
  s->opt = *opt;
  s->sigpipe[0] = s->sigpipe[1] = -1;
  pthread_mutex_init(&s->snap_mu, NULL);
  s->started_ns = ps_now_ns();
  s->nthreads = opt->threads;
  snprintf(s->data_dir, sizeof s->data_dir, "%s", opt->data_dir);
  s->opt.data_dir = s->data_dir;
  s->opt.listen = NULL;
  ps_status st = PS_ERR_NOMEM;
  s->tables = calloc(PS_WIRE_MAX_TABLE + 1, sizeof *s->tables);
  if (!s->tables) goto fail;
  for (int i = 0; i < SRV_NOPS; i++) {
    srv_opstat *o = &s->ops[i];
    if (!(o->lat = ps_hist_create()) || !(o->queue = ps_hist_create()) ||
        !(o->svc = ps_hist_create()))
      goto fail;
  }
  s->inline_part.s = s;
  if ((st = ps_mkdir_p(s->data_dir)) != PS_OK) {
    PS_ERROR("cannot create data dir %s: %s", s->data_dir, strerror(errno));
    goto fail;
  }
  char dbdir[2100];
  snprintf(dbdir, sizeof dbdir, "%s/store", s->data_dir);
  ps_store_options so = {.path = dbdir,
                         .cache_bytes = opt->cache_bytes,
                         .partitions = s->nthreads ? s->nthreads : 1,
                         .durability = PS_DURABILITY_NONE};
  if ((st = ps_store_open(&so, &s->store)) != PS_OK) {
    PS_ERROR("cannot open the store in %s: %s", dbdir, ps_status_str(st));
    goto fail;
  }
  bool clean = true;
  if ((st = srv_meta_load(s, &clean)) != PS_OK) goto fail;
  s->meta_ok = true;
  /* Nobody can commit a prepare made before this start: its staging is garbage, clean or not. */
  srv_ckpt_discard_staged(s);
  /* Tables the store knows but the metadata does not (metadata lost): serve them, and let
   * the first declaration fix their consistency mode. */
  uint32_t ids[PS_STORE_MAX_TABLES];
  size_t nt = ps_store_tables(s->store, ids, PS_STORE_MAX_TABLES);
  for (size_t i = 0; i < nt; i++) {
    if (ids[i] == 0 || ids[i] > PS_WIRE_MAX_TABLE || s->tables[ids[i]]) continue;
    ps_table_spec sp;
    if (ps_store_get_spec(s->store, ids[i], &sp) != PS_OK) continue;
    srv_table *t = srv_table_new(&sp);
    if (!t) goto fail;
    t->meta_unknown = true;
    s->tables[ids[i]] = t;
    if (ids[i] > s->max_table) s->max_table = ids[i];
  }
  if (!clean && s->have_ckpt) {
    /* The last run died without a flush: the database holds an arbitrary mix of flushed
     * rows. The last committed checkpoint is the consistent state to come back to: every
     * shard has it (two-phase commit, ps_server_meta.c). */
    char err[512];
    uint64_t step = 0;
    PS_WARN("previous run did not shut down cleanly: restoring checkpoint %s (step %" PRIu64 ")",
            s->ckpt_path, s->ckpt_step);
    if ((st = srv_restore(s, s->ckpt_path, &step, err, sizeof err)) != PS_OK) {
      PS_ERROR("restoring the last checkpoint failed: %s", err);
      goto fail;
    }
  } else if (!clean) {
    PS_WARN("previous run did not shut down cleanly and there is no checkpoint: serving what "
            "the database holds");
  }
  if ((st = srv_meta_save(s, false)) != PS_OK) goto fail;
  if (opt->shard == 0 && !(s->coord = srv_coord_create())) {
    st = PS_ERR_NOMEM;
    goto fail;
  }
  s->ctx = zmq_ctx_new();
  if (!s->ctx) {
    st = PS_ERR_INTERNAL;
    goto fail;
  }
  if (s->nthreads && (st = start_threads(s)) != PS_OK) {
    PS_ERROR("cannot start %u partition threads", s->nthreads);
    goto fail;
  }
  if (pipe(s->sigpipe) != 0) {
    st = PS_ERR_IO;
    goto fail;
  }
  fcntl(s->sigpipe[0], F_SETFL, O_NONBLOCK);
  fcntl(s->sigpipe[1], F_SETFL, O_NONBLOCK);
  if (opt->listen) {
    s->router = zmq_socket(s->ctx, ZMQ_ROUTER);
    int hwm = 100000, linger = 2000;
    int64_t maxmsg = (int64_t)1 << 30;
    zmq_setsockopt(s->router, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s->router, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s->router, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s->router, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    if (zmq_bind(s->router, opt->listen) != 0) {
      PS_ERROR("cannot listen on %s: %s", opt->listen, zmq_strerror(errno));
      st = PS_ERR_UNAVAILABLE;
      goto fail;
    }
    size_t len = sizeof s->endpoint;
    zmq_getsockopt(s->router, ZMQ_LAST_ENDPOINT, s->endpoint, &len);
  }
  PS_INFO("shard %u of %u: data dir %s, %u partition threads%s%s", opt->shard, opt->shards,
          s->data_dir, s->nthreads, s->router ? ", listening on " : "", s->endpoint);
  *out = s;
  return PS_OK;
fail:
  ps_server_destroy(&s);
  return st;
}

static void drain_waiters(ps_server *s) {
  for (uint32_t id = 1; id <= s->max_table; id++) {
    srv_table *t = s->tables[id];
    if (!t) continue;
    srv_req *r = t->wait_head;
    t->wait_head = t->wait_tail = NULL;
    while (r) {
      srv_req *next = r->next;
      srv_reply_error(s, r, PS_ERR_UNAVAILABLE, "shard %u is shutting down", s->opt.shard);
      r = next;
    }
  }
  s->deferred_now = 0;
  if (s->coord) srv_coord_drain(s);
  /* Exclusive ops not started yet and held requests are refused too. */
  if (!s->excl_active) {
    srv_req *r = s->excl_head;
    s->excl_head = s->excl_tail = NULL;
    while (r) {
      srv_req *next = r->next;
      srv_reply_error(s, r, PS_ERR_UNAVAILABLE, "shard %u is shutting down", s->opt.shard);
      r = next;
    }
  }
}

static void drain_done(ps_server *s) {
  srv_task *t;
  while (zmq_recv(s->done, &t, sizeof t, ZMQ_DONTWAIT) == (int)sizeof t) on_task_done(s, t);
}

ps_status ps_server_run(ps_server *s) {
  if (!s->router) return PS_ERR_INVALID;
  bool stopping = false;
  uint64_t stop_deadline = 0;
  for (;;) {
    uint64_t now = ps_now_ns();
    if (now - s->snap_ns > 200000000ull) srv_stats_publish(s);
    long timeout_ms = 100;
    /* Rounded up: a reply is late by < 1 ms but the loop never spins; a long delay must not
     * stretch the 100 ms tick. */
    uint64_t due_ms = (release_delayed(s) + 999999) / 1000000;
    if (due_ms && due_ms < (uint64_t)timeout_ms) timeout_ms = (long)due_ms;
    uint64_t next = s->coord ? srv_coord_expire(s, now) : 0;
    if (next) {
      long ms = next > now ? (long)((next - now) / 1000000 + 1) : 0;
      if (ms < timeout_ms) timeout_ms = ms;
    }
    if (!stopping && atomic_load(&s->stop)) {
      stopping = true;
      s->stopping = true;
      stop_deadline = now + 10000000000ull;
      PS_INFO("shutting down: finishing %" PRIu64 " requests in flight", s->inflight);
      drain_waiters(s);
    }
    if (stopping) {
      if (s->done) drain_done(s);
      try_exclusive(s);
      if ((s->inflight == 0 && !s->excl_head) || now > stop_deadline) break;
    }
    zmq_pollitem_t items[3] = {
        {.socket = s->router, .events = stopping ? 0 : ZMQ_POLLIN},
        {.socket = s->done, .events = ZMQ_POLLIN},
        {.fd = s->sigpipe[0], .events = ZMQ_POLLIN},
    };
    int ni = 3;
    if (!s->done) {
      items[1] = items[2];
      ni = 2;
    }
    int rc = zmq_poll(items, ni, stopping ? 10 : timeout_ms);
    if (rc < 0) {
      if (errno == EINTR) continue;
      if (errno == ETERM) break;
      PS_ERROR("poll: %s", zmq_strerror(errno));
      break;
    }
    if (items[ni - 1].revents & ZMQ_POLLIN) {
      char buf[16];
      while (read(s->sigpipe[0], buf, sizeof buf) > 0) {
      }
    }
    if (s->done && (items[1].revents & ZMQ_POLLIN)) drain_done(s);
    if (!stopping && (items[0].revents & ZMQ_POLLIN)) {
      /* A bounded batch per wakeup, so completions are not starved by a flood of requests. */
      for (int i = 0; i < 256 && recv_one(s); i++) {
        if (s->done && (i & 15) == 15) drain_done(s);
      }
    }
  }
  if (s->inflight) PS_WARN("%" PRIu64 " requests still in flight at shutdown", s->inflight);
  return PS_OK;
}

void ps_server_request_stop(ps_server *s) {
  if (!s) return;
  atomic_store(&s->stop, 1);
  if (s->sigpipe[1] >= 0) {
    char c = 1;
    ssize_t w = write(s->sigpipe[1], &c, 1);
    (void)w;
  }
}

const char *ps_server_endpoint(const ps_server *s) { return s->endpoint; }

char *ps_server_stats_json(ps_server *s) {
  pthread_mutex_lock(&s->snap_mu);
  char *j = s->snap_json ? strdup(s->snap_json) : NULL;
  pthread_mutex_unlock(&s->snap_mu);
  if (!j) {
    pthread_mutex_lock(&s->snap_mu);
    j = strdup("{}");
    pthread_mutex_unlock(&s->snap_mu);
  }
  return j;
}

ps_status ps_server_feed(ps_server *s, const void *const *frames, const size_t *sizes,
                         size_t nframes, ps_server_sink sink, void *ctx) {
  if (s->router || s->nthreads) return PS_ERR_INVALID;
  s->sink = sink;
  s->sink_ctx = ctx;
  srv_req *r = req_new(s, REQ_CLIENT);
  if (!r) return PS_ERR_NOMEM;
  if (nframes == 0 || nframes > PS_WIRE_MAX_FRAMES) {
    s->malformed++;
    srv_req_free(s, r);
    return PS_OK;
  }
  for (size_t i = 0; i < nframes; i++) {
    zmq_msg_init_size(&r->fr[i], sizes[i]);
    if (sizes[i]) memcpy(zmq_msg_data(&r->fr[i]), frames[i], sizes[i]);
    r->nfr++;
  }
  handle_frames(s, r);
  uint64_t now = ps_now_ns();
  if (s->coord) srv_coord_expire(s, now);
  try_exclusive(s);
  return PS_OK;
}

void ps_server_destroy(ps_server **sp) {
  if (!sp || !*sp) return;
  ps_server *s = *sp;
  *sp = NULL;
  s->stopping = true;
  if (s->done) drain_done(s);
  drain_waiters(s);
  if (s->router) {
    zmq_close(s->router);
    s->router = NULL;
  }
  stop_threads(s);
  part_drop_sync(&s->inline_part);
  free(s->inline_part.kbuf);
  free(s->inline_part.pbuf);
  free(s->inline_part.vbuf);
  /* Requests still parked (held, or an exclusive op that never ran) are freed unanswered. */
  for (srv_req *r = s->held_head; r;) {
    srv_req *n = r->next;
    srv_req_free(s, r);
    r = n;
  }
  for (srv_req *r = s->excl_head; r;) {
    srv_req *n = r->next;
    srv_req_free(s, r);
    r = n;
  }
  s->held_head = s->excl_head = NULL;
  if (s->store) {
    ps_status st = ps_store_flush(s->store);
    if (st != PS_OK) PS_ERROR("flush at shutdown failed: %s", ps_status_str(st));
    ps_store_close(&s->store);
    if (st == PS_OK && s->meta_ok && srv_meta_save(s, true) != PS_OK)
      PS_WARN("could not mark the data dir clean");
  }
  if (s->coord) srv_coord_destroy(&s->coord);
  if (s->tables) {
    for (uint32_t i = 0; i <= PS_WIRE_MAX_TABLE; i++) srv_table_free(s->tables[i]);
    free(s->tables);
  }
  req_destroy_pool(s);
  for (int i = 0; i < SRV_NOPS; i++) {
    ps_hist_destroy(&s->ops[i].lat);
    ps_hist_destroy(&s->ops[i].queue);
    ps_hist_destroy(&s->ops[i].svc);
  }
  if (s->ctx) zmq_ctx_term(s->ctx);
  if (s->sigpipe[0] >= 0) close(s->sigpipe[0]);
  if (s->sigpipe[1] >= 0) close(s->sigpipe[1]);
  free(s->snap_json);
  pthread_mutex_destroy(&s->snap_mu);
  free(s);
}

/* ps_server_partition_threads: the partition threads, which do all store work.
 *
 * Thread t owns the store partitions p with p % threads == t, so no two threads touch the same
 * rows and no store lock is contended; FIFO order per thread gives read-your-writes per
 * connection. A request becomes one task per thread (each thread scans the batch for the keys
 * of its own partitions, so the main thread does no per-key work beyond the shard check); tasks
 * travel as pointers over inproc PUSH/PULL sockets and come back the same way to the main
 * thread, which finishes the request when the last one is back. Pull replies are written by the
 * threads straight into the zmq message that is sent. Sync pushes are buffered per thread, per
 * table and step (a window of SRV_WINDOW steps) until the step is applied in one store call. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_server_follow_int.h"
#include "ps_server_int.h"
#include "ps_server_pull_state_int.h"
#include "ps_server_mem_int.h"
#include "ps_server_partition_threads_int.h"
#include "ps_server_request_schedule_int.h"
#include "ps_server_serve_int.h"
#include "ps_time.h"

#define PART_KEEP_BYTES ((size_t)16 << 20)

static inline bool grow(void **p, size_t *cap, size_t need, size_t elem) {
  return srv_grow(p, cap, need, elem, 1024);
}

/* Keys (and their positions) of this partition thread's store partitions. */
static bool part_reserve(srv_part *p, size_t n) {
  size_t kc = p->kcap, pc = p->kcap;
  bool ok = grow((void **)&p->kbuf, &kc, n, sizeof *p->kbuf) &&
            grow((void **)&p->pbuf, &pc, n, sizeof *p->pbuf);
  p->kcap = kc < pc ? kc : pc;
  return ok;
}

static ps_status part_filter(srv_part *p, const ps_store *store, const uint64_t *keys, size_t n,
                             size_t *m_out) {
  if (!part_reserve(p, n)) return PS_ERR_NOMEM;
  uint32_t T = p->s->nthreads;
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    if (ps_store_partition_of(store, keys[i]) % T != p->idx) continue;
    p->kbuf[m] = keys[i];
    p->pbuf[m++] = (uint32_t)i;
  }
  *m_out = m;
  return PS_OK;
}

/* The bytes a sync slot's buffers hold (keys and f32 rows). */
static uint64_t slot_cap_bytes(const sync_slot *sl, uint32_t dim) {
  return (uint64_t)sl->cap * (sizeof *sl->keys + (size_t)dim * sizeof *sl->grads);
}

static void slot_free(sync_slot *sl) {
  free(sl->keys);
  free(sl->grads);
  sl->keys = NULL;
  sl->grads = NULL;
  sl->n = sl->cap = 0;
}

/* An applied step's slot keeps its buffers for a later step while all the kept ones stay
 * within SRV_SYNC_KEEP: every thread keeping its largest step's buffers in every slot of every
 * table would hold memory that no cap counts (ps_server_mem.c charges steps not applied). */
static void slot_release(ps_server *s, sync_slot *sl, uint32_t dim) {
  const uint64_t b = slot_cap_bytes(sl, dim);
  if (b && !srv_mem_keep_sync(s, b)) slot_free(sl);
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
  if (!sl->used && sl->cap) /* buffers kept from an applied step: in use again */
    srv_mem_unkeep_sync(p->s, slot_cap_bytes(sl, dim));
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


/* The keys of this thread's store partitions in a shared batch, into kbuf/pbuf (the sync
 * buffer keeps keys and positions of its own). */
static ps_status part_batch_keys(srv_part *p, const srv_req *r, size_t *m_out) {
  const ps_store_batch *b = r->batch;
  uint32_t P = ps_store_partitions(r->store), T = p->s->nthreads;
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

/* Store work reads r->store, never s->store: under --follow the main thread switches the
 * latter while requests that took the previous version still run. */
static ps_status part_run(srv_part *p, srv_req *r) {
  ps_server *s = p->s;
  ps_store *store = r->store;
  srv_table *tab = r->tab;
  uint32_t dim = tab->spec.dim, id = tab->spec.id;
  bool split = s->nthreads > 1;
  const uint64_t *keys = r->msg.keys;
  size_t n = r->msg.nkeys, m = n;
  const uint32_t *pos = NULL;
  ps_status st = PS_OK;
  /* f32 pulls and pushes over the request's batch (check_keys made it): rows go straight
   * between the store and the request/reply frames, each thread on its own partitions (the
   * socket thread on all of them when there are no partition threads). */
  const uint32_t stride = split ? s->nthreads : 1;
  if (r->task_kind == TK_PULL && r->h->with_state)
    return srv_pull_state_run(s, r, split ? p->idx : 0, stride);
  if (r->task_kind == TK_PULL && s->export) { /* --serve EXPORT: rows from the export */
    srv_serve_pull_export(s, r, split ? p->idx : 0, stride);
    return PS_OK;
  }
  const bool f32b = r->batch && !r->f16; /* an f16 request's batch only names its keys */
  if (f32b && r->task_kind == TK_PULL)
    return ps_store_pull_batch(store, id, r->batch, p->idx, stride, r->outp);
  if (r->batch && r->task_kind == TK_WARM)
    return ps_store_warm_batch(store, id, r->batch, p->idx, stride);
  if (f32b && r->task_kind == TK_PUSH)
    return ps_store_push_batch(store, id, r->batch, p->idx, stride, r->msg.values);
  if (f32b && split && r->task_kind == TK_BUFFER) {
    st = part_batch_keys(p, r, &m);
    if (st != PS_OK || m == 0) return st;
    sync_slot *sl = sync_slot_of(p, id, dim, r->step);
    if (!sl) return PS_ERR_INTERNAL;
    return sync_append(sl, dim, p->kbuf, r->msg.values, p->pbuf, m);
  }
  if (r->task_kind != TK_APPLY && split) {
    st = r->batch ? part_batch_keys(p, r, &m) : part_filter(p, store, keys, n, &m);
    if (st != PS_OK) return st;
    keys = p->kbuf;
    pos = p->pbuf;
  }
  switch (r->task_kind) {
    case TK_WARM: return m ? ps_store_warm(store, id, keys, m) : PS_OK;
    case TK_PULL: {
      /* An f16 table pulled as f16 sends its stored rows: never widened and rounded again. */
      const bool rows16 = r->f16 && tab->spec.row_type == PS_ROW_F16;
      if (!split && !r->f16) return ps_store_pull(store, id, keys, n, r->outp);
      if (!split && rows16) return ps_store_pull_rows(store, id, keys, n, r->outp);
      if (m == 0) return PS_OK;
      if (!grow((void **)&p->vbuf, &p->vcap, m * dim, sizeof(float))) return PS_ERR_NOMEM;
      uint16_t *o16 = (uint16_t *)r->outp;
      if (rows16) {
        const uint16_t *v16 = (const uint16_t *)p->vbuf;
        st = ps_store_pull_rows(store, id, keys, m, p->vbuf);
        for (size_t i = 0; st == PS_OK && i < m; i++)
          memcpy(o16 + (size_t)pos[i] * dim, v16 + i * dim, dim * sizeof(uint16_t));
        return st;
      }
      st = ps_store_pull(store, id, keys, m, p->vbuf);
      if (st != PS_OK) return st;
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
      if (r->task_kind == TK_PUSH) return ps_store_push(store, id, keys, m, g);
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
      if (sl->n) st = ps_store_push(store, id, sl->keys, sl->n, sl->grads);
      sl->n = 0;
      sl->used = false;
      slot_release(s, sl, t->dim);
      return st;
    }
  }
  return PS_ERR_INTERNAL;
}

static void part_drop_sync(srv_part *p) {
  while (p->sync) {
    sync_tab *t = p->sync;
    p->sync = t->next;
    for (uint32_t i = 0; i < SRV_WINDOW; i++) slot_free(&t->slot[i]);
    free(t);
  }
}

/* Called only while no store work is in flight (an exclusive op), so the threads are idle
 * and their buffers can be touched from the main thread. */
void srv_drop_sync_all(ps_server *s) {
  part_drop_sync(&s->inline_part);
  for (uint32_t i = 0; s->parts && i < s->nthreads; i++) part_drop_sync(&s->parts[i]);
  srv_mem_sync_reset(s);
}

/* Work buffers grown for a large request are given back after it: kept, every thread would
 * hold its largest request's rows for good (the memory bound counts requests in flight). */
static void part_trim(srv_part *p) {
  if (p->vcap * sizeof(float) > PART_KEEP_BYTES) {
    free(p->vbuf);
    p->vbuf = NULL;
    p->vcap = 0;
  }
  if (p->kcap * (sizeof *p->kbuf + sizeof *p->pbuf) > PART_KEEP_BYTES) {
    free(p->kbuf);
    free(p->pbuf);
    p->kbuf = NULL;
    p->pbuf = NULL;
    p->kcap = 0;
  }
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
    part_trim(p);
    while (zmq_send(p->done, &t, sizeof t, 0) < 0 && errno == EINTR) {
    }
  }
  return NULL;
}

static void part_free(srv_part *p) {
  free(p->kbuf);
  free(p->pbuf);
  free(p->vbuf);
  p->kbuf = NULL;
  p->pbuf = NULL;
  p->vbuf = NULL;
  p->kcap = p->vcap = 0;
  part_drop_sync(p);
}

/* Hands r to every partition thread (or runs it inline). */
void srv_dispatch(ps_server *s, srv_req *r, int kind) {
  if (!srv_mem_admit(s, r, kind)) return; /* parked or refused */
  r->task_kind = kind;
  r->st = PS_OK;
  r->store = s->store;
  if (s->follow) srv_follow_acquire(s, r);
  /* The step of the snapshot r reads (the reply says it: field served): s->last follows the
   * served version on this (the main) thread, together with the version acquired above. */
  r->served = s->opt.serve_dir && s->last.have ? s->last.step + 1 : 0;
  if (s->nthreads == 0) {
    r->t_svc = ps_now_ns();
    r->st = part_run(&s->inline_part, r);
    part_trim(&s->inline_part);
    if (r->ver) srv_follow_release(s, r);
    r->pending = 0;
    s->inflight++;
    s->finish(s, r);
    return;
  }
  if (!r->batch && s->nthreads > 1 && !r->f16 && kind != TK_APPLY) {
    /* Hash and group the keys once here rather than once per thread. Without memory for
     * it the threads fall back to filtering the keys themselves. */
    if (ps_store_batch_create(r->store, r->msg.keys, r->msg.nkeys, &r->batch) != PS_OK)
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
  if (--r->pending) return;
  if (r->ver) srv_follow_release(s, r);
  s->finish(s, r);
}

void srv_parts_drain_done(ps_server *s) {
  srv_task *t;
  while (zmq_recv(s->done, &t, sizeof t, ZMQ_DONTWAIT) == (int)sizeof t) on_task_done(s, t);
}

ps_status srv_parts_start(ps_server *s) {
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

void srv_parts_stop(ps_server *s) {
  part_free(&s->inline_part);
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
    part_free(p);
  }
  free(s->parts);
  s->parts = NULL;
  if (s->done) zmq_close(s->done);
  s->done = NULL;
}

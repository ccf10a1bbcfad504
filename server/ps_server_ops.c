/* ps_server_ops: the op handlers, one per request op, each validating its request against the
 * table and the shard before any store work.
 *
 * A handler owns its request: it replies (an error at the first failed check, so a refused
 * request never reaches the store) or passes it on -- to the partition threads
 * (ps_server_partition_threads.c), to a wait list (ps_server_request_schedule.c), or to the
 * coordinator (ps_coord.c). The reply of store work is built here too (srv_reply_store_work),
 * once the partition threads are done with it.
 * Store ops that arrive during a checkpoint or restore are held and come back here, in order,
 * through the ready queue. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_hash.h"
#include "ps_log.h"
#include "ps_op.h"
#include "ps_server_checkpoint_int.h"
#include "ps_server_connections_int.h"
#include "ps_server_exactly_once_int.h"
#include "ps_server_int.h"
#include "ps_server_pull_state_int.h"
#include "ps_server_mem_int.h"
#include "ps_server_ops_int.h"
#include "ps_server_partition_threads_int.h"
#include "ps_server_permissions_int.h"
#include "ps_server_refresh_int.h"
#include "ps_server_replication_int.h"
#include "ps_server_request_schedule_int.h"
#include "ps_server_serve_int.h"
#include "ps_server_stats_int.h"

/* Every key must be this shard's. A key is hashed once here: when the store will work from a
 * batch (use_batch: f32 pulls, f32 pushes applied on arrival or split over partition
 * threads), the keys go into it (hashed and grouped by partition) and its hashes answer
 * ownership; srv_dispatch and part_run reuse it. An f16 request split over partition threads
 * gets one too, so that each thread finds its keys there rather than hashing every key of the
 * request (the store then hashes its share once more). Otherwise (f16 on the socket thread,
 * a sync push buffered there, a batch that cannot be allocated) keys are checked one by one,
 * and only when there are several shards. */
static ps_status check_keys(ps_server *s, srv_req *r, bool use_batch) {
  const uint64_t *k = r->msg.keys;
  size_t bad = SIZE_MAX;
  if (use_batch && (!r->f16 || s->nthreads > 1) && !r->batch &&
      ps_store_batch_create(s->store, k, r->msg.nkeys, &r->batch) != PS_OK)
    r->batch = NULL;
  if (s->opt.shards <= 1) return PS_OK;
  if (r->batch) {
    if (ps_store_batch_check_shard(r->batch, s->opt.shard, s->opt.shards, &bad) == PS_OK)
      return PS_OK;
  } else {
    for (size_t i = 0; i < r->msg.nkeys && bad == SIZE_MAX; i++)
      if (ps_shard_of(k[i], s->opt.shards) != s->opt.shard) bad = i;
    if (bad == SIZE_MAX) return PS_OK;
  }
  srv_reply_error(s, r, PS_ERR_WRONG_SHARD,
                  "key %" PRIu64 " (position %zu) belongs to shard %u of %u, this is shard %u",
                  k[bad], bad, ps_shard_of(k[bad], s->opt.shards), s->opt.shards, s->opt.shard);
  return PS_ERR_WRONG_SHARD;
}

/* Sync and ssp tables keep a clock per worker, so a data op must name one of them. */
static ps_status check_worker(ps_server *s, srv_req *r) {
  const srv_table *t = r->tab;
  if (t->spec.consistency == PS_CONS_ASYNC || r->h->worker < t->spec.num_workers) return PS_OK;
  srv_reply_error(s, r, PS_ERR_INVALID, "worker %u out of range: table %u has %u workers",
                  r->h->worker, t->spec.id, t->spec.num_workers);
  return PS_ERR_INVALID;
}

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
  if (h->warm && h->op == EMBER__OP__OP_PULL) {
    /* A prefetch: rows cached, none replied, so no step to wait for (and none adopted: it
     * names a step ahead of the pulls). The store counts the rows it loads (prefetched). */
    if (check_keys(s, r, true) != PS_OK) return;
    srv_dispatch(s, r, TK_WARM);
    return;
  }
  if (srv_pull_state_refused(s, r)) return;
  r->f16 = h->value_type == EMBER__VALUE_TYPE__VT_F16;
  if (r->msg.nkeys * (size_t)srv_pull_row_floats(r, t) * sizeof(float) > SRV_MAX_REPLY_BYTES) {
    srv_reply_error(s, r, PS_ERR_INVALID, "pull of %zu keys x dim %u exceeds the reply limit",
                    r->msg.nkeys, t->spec.dim);
    return;
  }
  if (check_worker(s, r) != PS_OK || check_keys(s, r, true) != PS_OK) return;
  if (srv_pull_fail_lost(s, r, h->step)) return; /* it would wait for a gone rank forever */
  s->ops[h->op].keys += r->msg.nkeys;
  if (t->spec.consistency != PS_CONS_ASYNC) srv_adopt_step(t, h->step);
  if (!srv_pull_ready(t, h->step)) {
    /* Its batch (12 bytes a key: 1.5 times its charged keys) would wait with it uncharged;
     * srv_dispatch makes it again when the step is readable. */
    ps_store_batch_destroy(&r->batch);
    t->deferred++;
    s->deferred_now++;
    srv_list_push(&t->wait_head, &t->wait_tail, r);
    return;
  }
  srv_start_pull(s, r);
}

/* The first of n f32 (vsize 4) or f16 (2) values that is NaN or infinite (all exponent bits
 * set), or n. The common all-finite case is one branch-free pass the compiler vectorizes. */
static size_t first_nonfinite(const void *v, size_t n, size_t vsize) {
  const uint32_t mask = vsize == 2 ? 0x7c00u : 0x7f800000u;
  const uint8_t *p = v;
  uint32_t bad = 0;
  if (vsize == 2) {
    for (size_t i = 0; i < n; i++) {
      uint16_t u;
      memcpy(&u, p + 2 * i, 2);
      bad |= (uint32_t)((u & mask) == mask);
    }
  } else {
    for (size_t i = 0; i < n; i++) {
      uint32_t u;
      memcpy(&u, p + 4 * i, 4);
      bad |= (uint32_t)((u & mask) == mask);
    }
  }
  if (!bad) return n;
  for (size_t i = 0; i < n; i++) {
    uint32_t u = 0;
    if (vsize == 2) {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      u = h;
    } else {
      memcpy(&u, p + 4 * i, 4);
    }
    if ((u & mask) == mask) return i;
  }
  return n;
}

/* What the non-finite value i of first_nonfinite's array is: "NaN", "+inf" or "-inf". */
static const char *nonfinite_name(const void *v, size_t i, size_t vsize) {
  uint32_t u = 0;
  if (vsize == 2) {
    uint16_t h;
    memcpy(&h, (const uint8_t *)v + 2 * i, 2);
    u = (uint32_t)h << 16; /* its sign at bit 31 */
    if (h & 0x3ffu) return "NaN";
  } else {
    memcpy(&u, (const uint8_t *)v + 4 * i, 4);
    if (u & 0x7fffffu) return "NaN";
  }
  return u >> 31 ? "-inf" : "+inf";
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
  /* A sync push is buffered; the partition threads group it by the batch, the socket thread
   * (no threads) appends it as it came. */
  const bool use_batch = t->spec.consistency != PS_CONS_SYNC || s->nthreads > 1;
  if (check_worker(s, r) != PS_OK || check_keys(s, r, use_batch) != PS_OK) return;
  /* The sender's word that its keys are distinct spares the store its sum of duplicates; the
   * store checks it as it gathers the keys (ps_store_batch_set_unique). */
  if (r->batch && h->keys_unique) ps_store_batch_set_unique(r->batch, true);
  size_t bad = first_nonfinite(r->msg.values, r->msg.nvalues, r->msg.value_size);
  if (bad < r->msg.nvalues) {
    /* Which element of the key's row and what it is ("value N" read as the value itself). */
    srv_reply_error(s, r, PS_ERR_INVALID,
                    "gradient of key %" PRIu64 " is not finite (element %zu of %u is %s)",
                    r->msg.keys[bad / t->spec.dim], bad % t->spec.dim, t->spec.dim,
                    nonfinite_name(r->msg.values, bad, r->msg.value_size));
    return;
  }
  /* A copy of a push taken before is answered with its outcome, never applied twice. */
  if (srv_once_intake(s, r, srv_repl_records_complete(s))) return;
  /* While the disk refuses writes the store keeps unwritten rows in memory; a push that could
   * take them past the hot budget is refused here, before any partition applies it. */
  ps_error ae;
  if (ps_store_push_admit(s->store, t->spec.id, r->msg.nkeys, &ae) != PS_OK) {
    srv_reply_error(s, r, ae.code, "%s", ae.msg);
    return;
  }
  s->ops[EMBER__OP__OP_PUSH].keys += r->msg.nkeys;
  srv_permit_note_trainer(s, r);
  if (t->spec.consistency != PS_CONS_SYNC) {
    srv_dispatch(s, r, TK_PUSH);
    return;
  }
  srv_adopt_step(t, h->step);
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
  if (!srv_mem_sync_take(s, r)) return; /* the buffers of unfinished steps are full */
  srv_changed_note(t, h->step, r->msg.keys, r->msg.nkeys); /* what a REFRESH sends again */
  srv_dispatch(s, r, TK_BUFFER);
}

/* A pull's rows, a prefetch's ack, a push's or a buffered push's ack: the reply of store work
 * that is over, built here beside the handlers that started it. */
void srv_reply_store_work(ps_server *s, srv_req *r) {
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
    rh.served = r->served;
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
}

static void handle_step(ps_server *s, srv_req *r) {
  Ember__Header *h = r->h;
  ps_error err;
  ps_error_clear(&err);
  ps_status st = PS_OK;
  srv_permit_note_trainer(s, r);
  srv_rank_note(s, r, h->table_id, h->worker);
  if (h->table_id) {
    st = srv_table_step(s, r->tab, h->worker, h->step, &err);
  } else {
    for (uint32_t id = 1; id <= s->max_table && st == PS_OK; id++)
      if (s->tables[id]) st = srv_table_step(s, s->tables[id], h->worker, h->step, &err);
  }
  if (st != PS_OK) srv_reply_error(s, r, st, "%s", err.msg);
  else srv_reply_ok(s, r);
  srv_try_exclusive(s);
}

static void reply_declared(ps_server *s, srv_req *r, uint32_t id) {
  Ember__Header rh;
  ps_wire_header_init(&rh, EMBER__OP__OP_DECLARE);
  rh.table_id = id;
  srv_reply(s, r, &rh, NULL);
}

static void handle_declare(ps_server *s, srv_req *r) {
  ps_table_spec spec, stored;
  ps_error err;
  if (r->h->table && r->h->table->dim == 0) { /* no valid spec has dim 0: attach by name */
    srv_table_lookup(s, r);
    return;
  }
  if (ps_wire_spec_from_pb(r->h->table, &spec, &err) != PS_OK) {
    srv_reply_error(s, r, err.code, "bad table spec: %s", err.msg);
    return;
  }
  const uint32_t id = spec.id;
  if (s->serving) {
    if (srv_serve_declare(s, &spec, &err) != PS_OK)
      srv_reply_error(s, r, err.code, "%s", err.msg);
    else
      reply_declared(s, r, id);
    return;
  }
  srv_table *t = s->tables[id];
  if ((!t || t->provisional) && ps_store_get_spec(s->store, id, &stored) != PS_OK) {
    /* Nobody has used it: provisional, the spec of its first user wins
     * (ps_server_permissions.c). */
    if (srv_permit_declare(s, r, &spec, &err) != PS_OK)
      srv_reply_error(s, r, err.code, "%s", err.msg);
    else
      reply_declared(s, r, id);
    return;
  }
  const bool fresh = !t || t->meta_unknown || t->provisional;
  if (!fresh && !ps_table_spec_stepping_equal(&t->spec, &spec)) {
    srv_reply_error(s, r, PS_ERR_CONFLICT,
                    "table %u '%s' was declared with consistency %s (staleness %u) for %u "
                    "workers; this declaration asks for %s (staleness %u) for %u workers",
                    id, t->spec.name, ps_consistency_name(t->spec.consistency),
                    t->spec.staleness, t->spec.num_workers,
                    ps_consistency_name(spec.consistency), spec.staleness, spec.num_workers);
    return;
  }
  ps_status st = ps_store_declare(s->store, &spec, &err);
  if (st != PS_OK) {
    srv_reply_error(s, r, st,
                    st == PS_ERR_CONFLICT
                        ? "table %u '%s' conflicts with a table already declared (another spec "
                          "under this id or name): %s"
                        : "declaring table %u '%s' failed: %s",
                    id, spec.name, err.msg);
    return;
  }
  if (fresh) {
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
  srv_permit_decl_clear(s, r, id);
  reply_declared(s, r, id);
}

static void handle_stats(ps_server *s, srv_req *r) {
  char *js = srv_stats_json(s);
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

/* A checkpoint's or restore's path (and a restore's timing) against what the shard allows
 * (ps_server_permissions.c). A RESTORE without a path is of the shard's own last checkpoint. */
static ps_status exclusive_allowed(ps_server *s, srv_req *r, ps_error *err) {
  const Ember__Header *h = r->h;
  const bool ck = h->op == EMBER__OP__OP_CHECKPOINT;
  if (h->path && h->path[0]) {
    if (strlen(h->path) > 1800)
      return ps_error_set(err, PS_ERR_INVALID, "checkpoint path too long");
    char root[4096];
    srv_ckpt_root(s, h->path, h->step, root, sizeof root);
    const bool pin = !ck || h->ckpt_phase == EMBER__CKPT_PHASE__CKPT_PREPARE ||
                     h->ckpt_phase == EMBER__CKPT_PHASE__CKPT_ONESHOT;
    if (srv_permit_path(s, h->path, root, pin, err) != PS_OK) return PS_ERR_INVALID;
  }
  srv_peers_poll(s); /* a connection closed a moment ago trains or drives no more */
  return ck ? srv_permit_checkpoint(s, r, err) : srv_permit_restore(s, r, err);
}

void srv_run_exclusive(ps_server *s, srv_req *r) {
  ps_error err;
  ps_error_clear(&err);
  Ember__Header rh;
  ps_wire_header_init(&rh, r->h->op);
  ps_status st = exclusive_allowed(s, r, &err);
  char dir[4096] = "";
  if (st != PS_OK) {
    /* refused: err says why */
  } else if (r->h->op == EMBER__OP__OP_CHECKPOINT) {
    st = srv_checkpoint(s, (int)r->h->ckpt_phase, r->h->step, r->h->path, r->h->ckpt_base,
                        r->h->ckpt_full_every, dir, sizeof dir, &err);
    if (st == PS_OK && r->h->ckpt_phase == EMBER__CKPT_PHASE__CKPT_PREPARE)
      srv_permit_note_stager(s, r);
    rh.step = r->h->step;
    rh.path = dir;
    rh.ckpt_phase = r->h->ckpt_phase;
  } else {
    uint64_t step = 0;
    st = srv_restore(s, r->h->path, SRV_ANY_STEP, &step, &err);
    if (st == PS_OK) srv_drop_sync_all(s); /* pushes buffered for steps rolled back */
    if (st == PS_OK) srv_once_forget(s); /* the pushes it records were rolled back */
    if (st == PS_OK) srv_repl_restored(s, step); /* replication's history starts here */
    if (st == PS_OK) srv_ranks_reset(s); /* every clock rolled back: a new job's ranks */
    for (uint32_t id = 1; st == PS_OK && id <= s->max_table; id++)
      if (s->tables[id]) srv_changed_reset(s->tables[id]); /* rows changed by no push */
    rh.step = step;
    for (uint32_t id = 1; st == PS_OK && id <= s->max_table; id++)
      if (s->tables[id]) srv_release_waiters(s, s->tables[id]);
  }
  if (st != PS_OK) srv_reply_error(s, r, st, "%s", err.msg);
  else srv_reply(s, r, &rh, NULL);
}

void srv_handle(ps_server *s, srv_req *r) {
  Ember__Header *h = r->h;
  int op = (int)h->op;
  const ps_op_info *info = ps_op_info_of(op);
  if (s->stopping) {
    srv_reply_error(s, r, PS_ERR_UNAVAILABLE, "shard %u is shutting down", s->opt.shard);
    return;
  }
  if (s->serving && srv_serve_refuse(s, r, op)) return;
  if (s->repl && srv_repl_intake(s, r)) return; /* forwarded first, held, or refused */
  if (info->kind == PS_OP_STORE && srv_hold_if_exclusive(s, r)) return;
  if (op == EMBER__OP__OP_PULL || op == EMBER__OP__OP_PUSH || op == EMBER__OP__OP_REFRESH ||
      (op == EMBER__OP__OP_STEP && h->table_id)) {
    srv_table *t = h->table_id ? s->tables[h->table_id] : NULL;
    if (!t) {
      srv_reply_error(s, r, PS_ERR_UNKNOWN_TABLE, "table %u is not declared on shard %u",
                      h->table_id, s->opt.shard);
      return;
    }
    ps_error err;
    if ((t->provisional && srv_permit_bind(s, r, h->table_id, &err) != PS_OK) ||
        srv_permit_decl_check(s, r, h->table_id, &err) != PS_OK) {
      srv_reply_error(s, r, err.code, "%s", err.msg);
      return;
    }
    r->tab = s->tables[h->table_id];
  }
  switch (op) {
    case EMBER__OP__OP_DECLARE: handle_declare(s, r); return;
    case EMBER__OP__OP_PULL:
    case EMBER__OP__OP_REFRESH: handle_pull(s, r); return;
    case EMBER__OP__OP_PUSH: handle_push(s, r); return;
    case EMBER__OP__OP_STEP: handle_step(s, r); return;
    case EMBER__OP__OP_STATS: handle_stats(s, r); return;
    case EMBER__OP__OP_PING: srv_reply_ok(s, r); return;
    case EMBER__OP__OP_CHECKPOINT:
    case EMBER__OP__OP_RESTORE:
      srv_exclusive_add(s, r);
      return;
    default: break;
  }
  if (info->kind == PS_OP_COORD) {
    if (s->opt.shard != 0 || !s->coord) {
      srv_reply_error(s, r, PS_ERR_UNSUPPORTED,
                      "%s goes to the coordinator on shard 0; this is shard %u",
                      ps_server_op_name(op), s->opt.shard);
      return;
    }
    ps_error err;
    if (op == EMBER__OP__OP_KV_SET && h->name && strcmp(h->name, SRV_COORD_CKPT_KEY) == 0 &&
        srv_permit_ckpt_record(s, h, &err) != PS_OK) {
      srv_reply_error(s, r, err.code, "%s", err.msg);
      return;
    }
    if (!r->has_ident) {
      srv_coord_handle(s->coord, r, r->h);
      return;
    }
    srv_coord_peer p;
    srv_peer_of(r, &p);
    srv_peers_poll(s); /* a rank freed by a disconnect is free for this request */
    srv_coord_handle_from(s->coord, r, r->h, &p);
    return;
  }
  srv_reply_error(s, r, PS_ERR_UNKNOWN_OP, "op %d is not a request", op);
}

/* ps_client_coord: the coordination ops of the client (see ps_client_int.h for its layout):
 * declare and step on every shard; join, barrier and the key-value store at the coordinator
 * (shard 0); the two-phase global checkpoint, restore, stats and ping.
 *
 * Each is one header-only request (ctl) to one shard or to all, waited for at once except
 * ps_client_step_start; the reply headers are read off the request before it is released.
 * Ops that wait at the server (barrier, kv_get) get their own wait added to the request's
 * timeout, and checkpoint prepare and restore the long ckpt_timeout_ms, since they write or
 * read a whole shard. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_client_int.h"

/* Sends h to one shard (shard >= 0) or to all (-1), as one request. */
static ps_status ctl_start(ps_client *c, int shard, Ember__Header *h, uint64_t timeout_ms,
                           struct ps_client_req **out, ps_error *err) {
  struct ps_client_req *r = cl_req_get(c, h->op, timeout_ms);
  if (!r) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  h->worker = c->opt.rank;
  for (size_t i = 0; i < c->nsrv; i++) {
    if (shard >= 0 && (size_t)shard != i) continue;
    cl_sub_start(c, &r->subs[i], h, 0);
  }
  *out = r;
  return PS_OK;
}

/* ctl_start, then waits. With out, a successful request is handed over: the caller reads
 * (*out)->subs[i].rep and releases it; without, it is released here. */
static ps_status ctl(ps_client *c, int shard, Ember__Header *h, uint64_t timeout_ms,
                     struct ps_client_req **out, ps_error *err) {
  struct ps_client_req *r = NULL;
  ps_status st = ctl_start(c, shard, h, timeout_ms, &r, err);
  if (st != PS_OK) return st;
  st = cl_req_wait(c, r, err);
  if (st != PS_OK || !out) cl_req_release(c, r);
  else *out = r;
  return st;
}

ps_status ps_client_declare(ps_client *c, const ps_table_spec *t, ps_error *err) {
  if (!t) return ps_error_set(err, PS_ERR_INVALID, "no table spec");
  ps_table_spec v = *t;
  if (v.num_workers == 0) v.num_workers = 1; /* as the wire reads 0 */
  ps_status vst = ps_table_spec_validate(&v, err);
  if (vst != PS_OK) return vst;
  Ember__TableSpec sp;
  ps_wire_spec_to_pb(t, &sp);
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_DECLARE);
  h.table_id = t->id;
  h.table = &sp;
  ps_status st = ctl(c, -1, &h, c->opt.timeout_ms, NULL, err);
  if (st == PS_OK) c->dims[t->id] = (uint16_t)t->dim;
  return st;
}

ps_status ps_client_attach(ps_client *c, const char *name, ps_table_spec *out, ps_error *err) {
  if (!name || !*name || strlen(name) >= PS_TABLE_NAME_MAX)
    return ps_error_set(err, PS_ERR_INVALID, "table name '%s': 1..%u characters",
                        name ? name : "", PS_TABLE_NAME_MAX - 1);
  Ember__TableSpec sp;
  ember__table_spec__init(&sp);
  sp.name = (char *)name; /* dim 0: a lookup, not a declaration */
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_DECLARE);
  h.table = &sp;
  struct ps_client_req *r = NULL;
  ps_status st = ctl(c, -1, &h, c->opt.timeout_ms, &r, err);
  if (st != PS_OK) return st;
  ps_table_spec first = {0};
  char diff[160];
  for (size_t i = 0; i < c->nsrv && st == PS_OK; i++) {
    ps_table_spec t;
    const Ember__Header *rep = r->subs[i].rep;
    if (!rep->table || rep->table->dim == 0) /* a server that predates lookups */
      st = ps_error_set(err, PS_ERR_PROTO, "shard %zu answered no spec for table '%s'", i, name);
    else if ((st = ps_wire_spec_from_pb(rep->table, &t, err)) != PS_OK)
      ps_error_prefix(err, "shard %zu: ", i);
    else if (i == 0)
      first = t;
    else if (!ps_table_spec_rows_equal(&first, &t))
      st = ps_error_set(err, PS_ERR_CONFLICT, "table '%s': shards 0 and %zu hold other specs "
                        "(%s)", name, i, ps_table_spec_diff(&first, &t, diff, sizeof diff));
  }
  cl_req_release(c, r);
  if (st != PS_OK) return st;
  c->dims[first.id] = (uint16_t)first.dim;
  *out = first;
  return PS_OK;
}

ps_status ps_client_step_start(ps_client *c, uint32_t table, uint64_t step, ps_client_req **r,
                               ps_error *err) {
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_STEP);
  h.table_id = table;
  h.step = step;
  return ctl_start(c, -1, &h, c->opt.timeout_ms, r, err);
}

ps_status ps_client_step(ps_client *c, uint32_t table, uint64_t step, ps_error *err) {
  ps_client_req *r = NULL;
  ps_status st = ps_client_step_start(c, table, step, &r, err);
  if (st != PS_OK) return st;
  return ps_client_wait(c, &r, err);
}

ps_status ps_client_join(ps_client *c, uint32_t world, int want_rank, const char *name,
                         int *rank, ps_error *err) {
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_JOIN);
  h.world = world;
  h.rank = want_rank;
  h.name = (char *)(name ? name : "");
  struct ps_client_req *r = NULL;
  ps_status st = ctl(c, 0, &h, c->opt.timeout_ms, &r, err);
  if (st != PS_OK) return st;
  int got = r->subs[0].rep->rank;
  cl_req_release(c, r);
  if (rank) *rank = got;
  c->opt.rank = (uint32_t)got;
  return PS_OK;
}

ps_status ps_client_barrier(ps_client *c, const char *name, uint32_t world,
                            uint32_t timeout_ms, ps_error *err) {
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_BARRIER);
  h.name = (char *)name;
  h.world = world;
  h.timeout_ms = timeout_ms;
  return ctl(c, 0, &h, (uint64_t)timeout_ms + c->opt.timeout_ms, NULL, err);
}

ps_status ps_client_kv_set(ps_client *c, const char *key, const void *val, size_t len,
                           ps_error *err) {
  if (len > PS_WIRE_MAX_HEADER - 4096)
    return ps_error_set(err, PS_ERR_INVALID, "value of %zu bytes is too large for the store", len);
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_KV_SET);
  h.name = (char *)key;
  h.blob.data = (uint8_t *)val;
  h.blob.len = len;
  return ctl(c, 0, &h, c->opt.timeout_ms, NULL, err);
}

ps_status ps_client_kv_get(ps_client *c, const char *key, void **val, size_t *len,
                           uint32_t timeout_ms, ps_error *err) {
  *val = NULL;
  *len = 0;
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_KV_GET);
  h.name = (char *)key;
  h.timeout_ms = timeout_ms;
  struct ps_client_req *r = NULL;
  ps_status st = ctl(c, 0, &h, (uint64_t)timeout_ms + c->opt.timeout_ms, &r, err);
  if (st != PS_OK) return st;
  Ember__Header *rep = r->subs[0].rep;
  void *v = malloc(rep->blob.len ? rep->blob.len : 1);
  if (!v) {
    cl_req_release(c, r);
    return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  }
  if (rep->blob.len) memcpy(v, rep->blob.data, rep->blob.len);
  *val = v;
  *len = rep->blob.len;
  cl_req_release(c, r);
  return PS_OK;
}

ps_status ps_client_rdv_set(void *client, const char *key, const void *val, size_t len) {
  return ps_client_kv_set(client, key, val, len, NULL);
}
ps_status ps_client_rdv_get(void *client, const char *key, void **val, size_t *len,
                            uint32_t timeout_ms) {
  return ps_client_kv_get(client, key, val, len, timeout_ms, NULL);
}

/* One phase; a prepare carries the delta request (base, full_every: ember.proto). */
static ps_status ckpt_phase(ps_client *c, ps_ckpt_phase phase, uint64_t step, const char *path,
                            const char *base, uint32_t full_every, ps_error *err) {
  if (phase < PS_CKPT_PREPARE || phase > PS_CKPT_ABORT)
    return ps_error_set(err, PS_ERR_INVALID, "checkpoint phase %d", (int)phase);
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_CHECKPOINT);
  h.ckpt_phase = (Ember__CkptPhase)phase;
  h.step = step;
  h.path = (char *)(path ? path : "");
  if (phase == PS_CKPT_PREPARE && base) {
    h.ckpt_base = (char *)base;
    h.ckpt_full_every = full_every;
  }
  /* Only a prepare snapshots; commit and abort rename or delete files. */
  struct ps_client_req *r = NULL;
  ps_status st = ctl(c, -1, &h,
                     phase == PS_CKPT_PREPARE ? c->opt.ckpt_timeout_ms : c->opt.timeout_ms, &r,
                     err);
  if (st != PS_OK) return st;
  /* A server older than phases ignores the field and takes a one-phase checkpoint; its reply
   * does not echo the phase. Say so, rather than let the commit fail as a conflict. */
  for (size_t i = 0; i < c->nsrv && st == PS_OK; i++)
    if (r->subs[i].rep->ckpt_phase != h.ckpt_phase)
      st = ps_error_set(err, PS_ERR_UNSUPPORTED,
                      "%s (shard %zu) does not know checkpoint phases: upgrade the servers before "
                      "the workers",
                      c->srv[i].url, i);
  cl_req_release(c, r);
  return st;
}

ps_status ps_client_checkpoint_phase(ps_client *c, ps_ckpt_phase phase, uint64_t step,
                                     const char *path, ps_error *err) {
  return ckpt_phase(c, phase, step, path, NULL, 0, err);
}

ps_status ps_client_checkpoint(ps_client *c, uint64_t step, const char *path, ps_error *err) {
  return ps_client_checkpoint_delta(c, step, path, NULL, 0, err);
}

ps_status ps_client_checkpoint_delta(ps_client *c, uint64_t step, const char *path,
                                     const char *base, uint32_t full_every, ps_error *err) {
  ps_status st = ckpt_phase(c, PS_CKPT_PREPARE, step, path, base, full_every, err);
  if (st != PS_OK) {
    /* Best effort, for disk space: a prepare never committed is dropped by the shard's next
     * prepare or restart anyway. The prepare's error is the one to report. */
    (void)ps_client_checkpoint_phase(c, PS_CKPT_ABORT, step, path, NULL);
    return st;
  }
  if ((st = ps_client_checkpoint_phase(c, PS_CKPT_COMMIT, step, path, err)) != PS_OK) return st;
  /* Every shard has committed: record the global checkpoint at the coordinator. */
  json_t *j = json_pack("{s:I, s:s, s:I}", "step", (json_int_t)step, "path", path ? path : "",
                        "shards", (json_int_t)c->nsrv);
  char *js = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  json_decref(j);
  if (!js) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  st = ps_client_kv_set(c, "ember/checkpoint/latest", js, strlen(js), err);
  free(js);
  return st;
}

ps_status ps_client_latest_checkpoint(ps_client *c, uint64_t *step, char *path,
                                      size_t pathlen, ps_error *err) {
  void *v = NULL;
  size_t n = 0;
  ps_status st = ps_client_kv_get(c, "ember/checkpoint/latest", &v, &n, 0, err);
  if (st != PS_OK) return st;
  json_error_t jerr;
  json_t *j = json_loadb(v, n, 0, &jerr);
  free(v);
  json_int_t s = 0;
  const char *p = NULL;
  if (!j || json_unpack(j, "{s:I, s:s}", "step", &s, "path", &p) != 0 || s < 0) {
    json_decref(j);
    return ps_error_set(err, PS_ERR_CORRUPT, "the coordinator's checkpoint record does not parse");
  }
  if (step) *step = (uint64_t)s;
  if (path && pathlen) snprintf(path, pathlen, "%s", p);
  json_decref(j);
  return PS_OK;
}

ps_status ps_client_restore(ps_client *c, const char *path, uint64_t *step, ps_error *err) {
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_RESTORE);
  h.path = (char *)(path ? path : "");
  struct ps_client_req *r = NULL;
  ps_status st = ctl(c, -1, &h, c->opt.ckpt_timeout_ms, &r, err);
  if (st != PS_OK) return st;
  uint64_t s0 = r->subs[0].rep->step;
  for (size_t i = 1; i < c->nsrv; i++) {
    if (r->subs[i].rep->step != s0) {
      st = ps_error_set(err, PS_ERR_CORRUPT,
                      "shards restored different steps: %s at %" PRIu64 ", %s at %" PRIu64,
                      c->srv[0].url, s0, c->srv[i].url, r->subs[i].rep->step);
      break;
    }
  }
  cl_req_release(c, r);
  if (step) *step = s0;
  return st;
}

ps_status ps_client_stats(ps_client *c, size_t shard, char **json, ps_error *err) {
  return ps_client_stats_within(c, shard, c->opt.timeout_ms, json, err);
}

ps_status ps_client_stats_within(ps_client *c, size_t shard, uint32_t timeout_ms, char **json,
                                 ps_error *err) {
  *json = NULL;
  if (shard >= c->nsrv) return ps_error_set(err, PS_ERR_INVALID, "no shard %zu", shard);
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_STATS);
  struct ps_client_req *r = NULL;
  ps_status st = ctl(c, (int)shard, &h, timeout_ms, &r, err);
  if (st != PS_OK) return st;
  Ember__Header *rep = r->subs[shard].rep;
  char *s = malloc(rep->blob.len + 1);
  if (s) {
    memcpy(s, rep->blob.data, rep->blob.len);
    s[rep->blob.len] = '\0';
  }
  cl_req_release(c, r);
  *json = s;
  return s ? PS_OK : ps_error_set(err, PS_ERR_NOMEM, "out of memory");
}

ps_status ps_client_ping(ps_client *c, size_t shard, ps_error *err) {
  if (shard >= c->nsrv) return ps_error_set(err, PS_ERR_INVALID, "no shard %zu", shard);
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_PING);
  return ctl(c, (int)shard, &h, c->opt.timeout_ms, NULL, err);
}

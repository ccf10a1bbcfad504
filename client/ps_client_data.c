/* ps_client_data: pull and push (see ps_client_int.h for the client's layout).
 *
 * A pull or push de-duplicates its keys (unless the caller says they are unique), shards the
 * unique keys by ps_shard_of, and writes each key straight into its shard's zmq frame; a push
 * sums the gradients of duplicate keys straight into the shards' value frames (in f32, then
 * converted once when the wire carries f16). Pulled rows are copied once, from the reply
 * frames to the caller's rows, when the request completes (cl_scatter_pull). With one shard
 * the per-key shard bookkeeping is skipped. These loops are the client's hot path: measure
 * (bench/net) before changing them.
 *
 * A call whose rows (or keys) exceed max_request_bytes (servers refuse larger requests, their
 * request cap) is split into parts of consecutive keys, each a request of its own chained to
 * the first (ps_client_wait waits for them all). A push's duplicate keys are summed first, so
 * that every key is in one part and the optimizer steps once per key, as unsplit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "ps_client_int.h"
#include "ps_hash.h"
#include "ps_rowcopy.h"

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

void cl_scatter_pull(ps_client *c, struct ps_client_req *r) {
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

/* Makes room for n keys in r's key scratch (one block; nothing in it is kept). */
static bool req_reserve(struct ps_client_req *r, size_t n) {
  if (n <= r->cap) return true;
  size_t nc = r->cap ? r->cap : 1024;
  while (nc < n) nc *= 2;
  char *b = malloc(nc * (sizeof *r->ukeys + 3 * sizeof *r->inv));
  if (!b) return false;
  free(r->scratch);
  r->scratch = b;
  r->ukeys = (uint64_t *)b;
  r->inv = (uint32_t *)(r->ukeys + nc);
  r->ush = r->inv + nc;
  r->uidx = r->ush + nc;
  r->cap = nc;
  return true;
}

/* Shards r's nu unique keys uk: counts per shard, then writes each key straight into its
 * shard's keys frame (s->part[1]); c->vbase[i] is left pointing at shard i's frame. */
static ps_status shard_keys(ps_client *c, struct ps_client_req *r, const uint64_t *uk,
                            size_t nu, ps_error *err) {
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
  for (size_t i = 0; i < S; i++) {
    cl_sub *s = &r->subs[i];
    s->nkeys = c->cnt[i];
    if (!c->cnt[i]) continue;
    if (c->cnt[i] > PS_WIRE_MAX_KEYS)
      return ps_error_set(err, PS_ERR_INVALID, "%zu keys for one shard exceed the limit %u",
                           c->cnt[i], PS_WIRE_MAX_KEYS);
    zmq_msg_init_size(&s->part[1], c->cnt[i] * sizeof(uint64_t));
    c->vbase[i] = zmq_msg_data(&s->part[1]);
    s->nparts = 2;
  }
  if (S == 1) {
    if (nu) memcpy(c->vbase[0], uk, nu * sizeof(uint64_t));
  } else {
    for (size_t u = 0; u < nu; u++) ((uint64_t *)c->vbase[r->ush[u]])[r->uidx[u]] = uk[u];
  }
  return PS_OK;
}

/* Adds each shard's values frame (s->part[2]) to a push and sums grads into them: the first
 * occurrence of a key is copied, later ones added (unique indices follow first occurrence).
 * With f16 on the wire the sums are made in f32 (c->acc) and converted once. */
static ps_status sum_grads(ps_client *c, struct ps_client_req *r, const float *grads,
                           ps_error *err) {
  const size_t S = c->nsrv, n = r->n, nu = r->nu;
  const uint32_t dim = r->dim;
  const bool f16 = c->opt.wire_f16, unique = r->unique;
  const size_t row = (size_t)dim * sizeof(float);
  if (f16 && nu * dim > c->acc_cap) {
    float *a = realloc(c->acc, nu * dim * sizeof(float));
    if (!a) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
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
  return PS_OK;
}

/* warm: a pull that only warms the shards' hot tier (a prefetch: no out, no rows back). */
static ps_status data_start(ps_client *c, Ember__Op op, uint32_t table, uint64_t step,
                            const uint64_t *keys, size_t n, bool unique, float *out,
                            const float *grads, bool warm, uint64_t since, uint32_t width,
                            ps_client_req **rp, ps_error *err) {
  *rp = NULL;
  if (table == 0 || table > PS_WIRE_MAX_TABLE || !c->dims[table])
    return ps_error_set(err, PS_ERR_UNKNOWN_TABLE,
                         "table %u was not declared by this client (call ps_client_declare first)",
                         table);
  if (n && !keys) return ps_error_set(err, PS_ERR_INVALID, "keys missing");
  if (n >= UINT32_MAX) return ps_error_set(err, PS_ERR_INVALID, "%zu keys in one request", n);
  uint32_t dim = c->dims[table];
  if (width && c->opt.wire_f16)
    return ps_error_set(err, PS_ERR_UNSUPPORTED, "a pull with state needs f32 on the wire");
  struct ps_client_req *r = cl_req_get(c, op, c->opt.timeout_ms);
  if (!r || !req_reserve(r, n ? n : 1)) {
    if (r) cl_req_release(c, r);
    return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  }
  r->table = table;
  r->dim = width ? width : dim; /* a pull with state: its reply's floats per key */
  r->n = n;
  r->out = out;
  r->unique = unique;
  r->warm = warm;
  const uint64_t *uk = keys;
  size_t nu = n;
  ps_status st = PS_OK;
  if (!unique) {
    st = ps_dedup_keys(c->dd, keys, n, r->ukeys, r->inv, &nu);
    if (st != PS_OK) {
      cl_req_release(c, r);
      return ps_error_set(err, st, "de-duplicating %zu keys failed", n);
    }
    uk = r->ukeys;
  }
  r->nu = nu;
  if ((st = shard_keys(c, r, uk, nu, err)) != PS_OK ||
      (op == EMBER__OP__OP_PUSH && (st = sum_grads(c, r, grads, err)) != PS_OK)) {
    cl_req_release(c, r);
    return st;
  }
  for (size_t i = 0; i < c->nsrv; i++) {
    cl_sub *s = &r->subs[i];
    if (s->nparts < 2) continue;
    Ember__Header h;
    ps_wire_header_init(&h, op);
    h.table_id = table;
    h.step = step;
    h.worker = c->opt.rank;
    h.count = s->nkeys;
    h.dim = dim;
    h.warm = warm;
    h.since = since;
    h.with_state = width != 0;
    h.keys_unique = op == EMBER__OP__OP_PUSH; /* summed above, or unique by the caller's word */
    if (c->opt.wire_f16) h.value_type = EMBER__VALUE_TYPE__VT_F16;
    cl_sub_start(c, s, &h, s->nparts - 1);
  }
  *rp = r;
  return PS_OK;
}

/* Keys per part, so that no frame of a part exceeds max_request_bytes (0 = not split: small
 * enough, or a call data_start refuses anyway). */
static size_t part_keys(const ps_client *c, uint32_t table, const uint64_t *keys, size_t n,
                        uint32_t width) {
  if (!keys || !table || table > PS_WIRE_MAX_TABLE || !c->dims[table] || n >= UINT32_MAX)
    return 0;
  size_t cap = c->opt.max_request_bytes ? c->opt.max_request_bytes : PS_CLIENT_MAX_REQUEST;
  size_t row = (width ? width : c->dims[table]) * (c->opt.wire_f16 ? (size_t)2 : sizeof(float));
  if (row < sizeof(uint64_t)) row = sizeof(uint64_t); /* the keys frame */
  size_t k = cap / row ? cap / row : 1;
  return n > k ? k : 0;
}

/* data_start for a call over max_request_bytes: consecutive parts of k keys, chained. */
static ps_status split_start(ps_client *c, Ember__Op op, uint32_t table, uint64_t step,
                             const uint64_t *keys, size_t n, bool unique, float *out,
                             const float *grads, bool warm, uint64_t since, uint32_t width,
                             size_t k, ps_client_req **rp, ps_error *err) {
  const size_t dim = width ? width : c->dims[table];
  uint64_t *uk = NULL;
  uint32_t *inv = NULL;
  float *sum = NULL;
  ps_status st = PS_OK;
  if (op == EMBER__OP__OP_PUSH && !unique) {
    size_t nu = 0;
    uk = malloc(n * sizeof *uk);
    inv = malloc(n * sizeof *inv);
    if (!uk || !inv || ps_dedup_keys(c->dd, keys, n, uk, inv, &nu) != PS_OK ||
        !(sum = malloc(nu * dim * sizeof *sum)))
      st = ps_error_set(err, PS_ERR_NOMEM, "out of memory splitting a push of %zu keys", n);
    else ps_dedup_sum_rows(inv, n, nu, grads, dim, sum);
    keys = uk, grads = sum, n = nu, unique = true;
  }
  ps_client_req *head = NULL, **tail = &head;
  for (size_t off = 0; st == PS_OK && off < n; off += k) {
    size_t m = n - off < k ? n - off : k;
    st = data_start(c, op, table, step, keys + off, m, unique, out ? out + off * dim : NULL,
                    grads ? grads + off * dim : NULL, warm, since, width, tail, err);
    if (st == PS_OK) tail = &(*tail)->chain;
  }
  free(uk);
  free(inv);
  free(sum); /* the parts' frames hold their copies */
  if (st != PS_OK) cl_req_release(c, head);
  *rp = st == PS_OK ? head : NULL;
  return st;
}

/* A pull (out), a push (grads), a prefetch (warm) or a refresh (since): split over
 * max_request_bytes or not. */
static ps_status start_since(ps_client *c, Ember__Op op, uint32_t table, uint64_t step,
                             const uint64_t *keys, size_t n, bool unique, float *out,
                             const float *grads, bool warm, uint64_t since, uint32_t width,
                             ps_client_req **r, ps_error *err) {
  size_t k = part_keys(c, table, keys, n, width);
  if (k)
    return split_start(c, op, table, step, keys, n, unique, out, grads, warm, since, width, k,
                       r, err);
  return data_start(c, op, table, step, keys, n, unique, out, grads, warm, since, width, r, err);
}

static ps_status start(ps_client *c, Ember__Op op, uint32_t table, uint64_t step,
                       const uint64_t *keys, size_t n, bool unique, float *out,
                       const float *grads, bool warm, ps_client_req **r, ps_error *err) {
  return start_since(c, op, table, step, keys, n, unique, out, grads, warm, 0, 0, r, err);
}

ps_status ps_client_refresh_start(ps_client *c, uint32_t table, uint64_t step, uint64_t since,
                                  const uint64_t *keys, size_t n, float *out, ps_client_req **r,
                                  ps_error *err) {
  if (n && !out) return ps_error_set(err, PS_ERR_INVALID, "no output buffer");
  return start_since(c, EMBER__OP__OP_REFRESH, table, step, keys, n, true, out, NULL, false,
                     since, 0, r, err);
}

ps_status ps_client_pull_state_start(ps_client *c, uint32_t table, uint64_t step,
                                     const uint64_t *keys, size_t n, uint32_t width, float *out,
                                     ps_client_req **r, ps_error *err) {
  if (n && !out) return ps_error_set(err, PS_ERR_INVALID, "no output buffer");
  if (!width) return ps_error_set(err, PS_ERR_INVALID, "a pull with state of width 0");
  return start_since(c, EMBER__OP__OP_PULL, table, step, keys, n, true, out, NULL, false, 0,
                     width, r, err);
}

uint64_t ps_client_refreshed(const ps_client *c) { return c->refreshed; }

bool ps_client_served_take(ps_client *c, size_t server, uint64_t *lo, uint64_t *hi) {
  cl_server *S = &c->srv[server];
  *lo = S->served_lo;
  *hi = S->served_hi;
  S->served_lo = UINT64_MAX;
  S->served_hi = 0;
  return *lo <= *hi;
}

ps_status cl_scatter_refresh(ps_client *c, struct ps_client_req *r, ps_error *err) {
  const size_t S = c->nsrv, dim = r->dim, row = dim * sizeof(float);
  if (S > 1) { /* (shard, index in its sub-request) -> the key's position: rev[off[sh] + idx] */
    if (r->nu > c->rev_cap) {
      uint32_t *v = realloc(c->rev, r->nu * sizeof *v);
      if (!v) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
      c->rev = v;
      c->rev_cap = r->nu;
    }
    size_t off = 0;
    for (size_t i = 0; i < S; i++) c->cnt[i] = off, off += r->subs[i].nkeys;
    for (size_t u = 0; u < r->nu; u++) c->rev[c->cnt[r->ush[u]] + r->uidx[u]] = (uint32_t)u;
  }
  for (size_t i = 0; i < S; i++) {
    const cl_sub *s = &r->subs[i];
    if (!s->has_pos) continue;
    const uint64_t *pos = zmq_msg_data((zmq_msg_t *)&s->pos);
    const char *v = zmq_msg_data((zmq_msg_t *)&s->vals);
    size_t m = zmq_msg_size((zmq_msg_t *)&s->pos) / sizeof(uint64_t);
    for (size_t j = 0; j < m; j++) {
      if (pos[j] >= s->nkeys)
        return ps_error_set(err, PS_ERR_PROTO,
                            "%s (shard %zu): REFRESH reply names position %llu of %zu keys",
                            c->srv[i].url, i, (unsigned long long)pos[j], s->nkeys);
      size_t k = S == 1 ? (size_t)pos[j] : c->rev[c->cnt[i] + pos[j]];
      if (c->opt.wire_f16) ps_wire_f16_to_f32((const uint16_t *)v + j * dim, r->out + k * dim, dim);
      else memcpy(r->out + k * dim, v + j * row, row);
    }
    c->refreshed += m;
  }
  return PS_OK;
}

ps_status ps_client_pull_start(ps_client *c, uint32_t table, uint64_t step,
                               const uint64_t *keys, size_t n, bool unique, float *out,
                               ps_client_req **r, ps_error *err) {
  if (n && !out) return ps_error_set(err, PS_ERR_INVALID, "no output buffer");
  return start(c, EMBER__OP__OP_PULL, table, step, keys, n, unique, out, NULL, false, r, err);
}

ps_status ps_client_prefetch_start(ps_client *c, uint32_t table, uint64_t step,
                                   const uint64_t *keys, size_t n, bool unique,
                                   ps_client_req **r, ps_error *err) {
  return start(c, EMBER__OP__OP_PULL, table, step, keys, n, unique, NULL, NULL, true, r, err);
}

ps_status ps_client_push_start(ps_client *c, uint32_t table, uint64_t step,
                               const uint64_t *keys, size_t n, bool unique, const float *grads,
                               ps_client_req **r, ps_error *err) {
  if (n && !grads) return ps_error_set(err, PS_ERR_INVALID, "no gradients");
  return start(c, EMBER__OP__OP_PUSH, table, step, keys, n, unique, NULL, grads, false, r, err);
}

static ps_status run_data(ps_client *c, Ember__Op op, uint32_t table, uint64_t step,
                          const uint64_t *keys, size_t n, bool unique, float *out,
                          const float *grads, ps_error *err) {
  ps_client_req *r = NULL;
  ps_status st = op == EMBER__OP__OP_PULL
                     ? ps_client_pull_start(c, table, step, keys, n, unique, out, &r, err)
                     : ps_client_push_start(c, table, step, keys, n, unique, grads, &r, err);
  if (st != PS_OK) return st;
  return ps_client_wait(c, &r, err);
}

ps_status ps_client_pull(ps_client *c, uint32_t table, uint64_t step, const uint64_t *keys,
                         size_t n, float *out, ps_error *err) {
  return run_data(c, EMBER__OP__OP_PULL, table, step, keys, n, false, out, NULL, err);
}
ps_status ps_client_push(ps_client *c, uint32_t table, uint64_t step, const uint64_t *keys,
                         size_t n, const float *grads, ps_error *err) {
  return run_data(c, EMBER__OP__OP_PUSH, table, step, keys, n, false, NULL, grads, err);
}
ps_status ps_client_pull_unique(ps_client *c, uint32_t table, uint64_t step,
                                const uint64_t *keys, size_t n, float *out, ps_error *err) {
  return run_data(c, EMBER__OP__OP_PULL, table, step, keys, n, true, out, NULL, err);
}
ps_status ps_client_push_unique(ps_client *c, uint32_t table, uint64_t step,
                                const uint64_t *keys, size_t n, const float *grads,
                                ps_error *err) {
  return run_data(c, EMBER__OP__OP_PUSH, table, step, keys, n, true, NULL, grads, err);
}

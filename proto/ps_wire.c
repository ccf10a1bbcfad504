/* ps_wire: the codec of ps_wire.h. Requests and replies go through one set of checks (frame
 * bounds, the header against the layout of its op and direction, bulk sizes against the
 * header); a request is then viewed as a ps_msg, a reply held to the request it answers. Only
 * the header is parsed with protobuf-c: bulk frames are raw little-endian arrays, viewed in
 * place when aligned. */
#include "ps_wire.h"

#include "ps_op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Which bulk frames a message of this op and direction carries. */
static void frames_of(Ember__Op op, bool is_reply, bool *has_keys, bool *has_values) {
  const ps_op_info *o = ps_op_info_of((int)op);
  const unsigned bulk = is_reply ? o->reply_bulk : o->req_bulk;
  *has_keys = (bulk & PS_OP_BULK_KEYS) != 0;
  *has_values = (bulk & PS_OP_BULK_VALUES) != 0;
}

size_t ps_wire_value_size(Ember__ValueType vt) {
  switch (vt) {
    case EMBER__VALUE_TYPE__VT_F32: return 4;
    case EMBER__VALUE_TYPE__VT_F16: return 2;
    default: return 0;
  }
}

const char *ps_wire_op_name(int op) { return ps_op_info_of(op)->name; }

/* ERROR is a reply-only op; every other known op may travel both ways. */
static bool op_known(int op) {
  const ps_op_info *o = ps_op_info_of(op);
  return o->kind != PS_OP_INVALID && !o->reply_only;
}

void ps_msg_clear(ps_msg *m) {
  if (!m) return;
  if (m->hdr) ember__header__free_unpacked(m->hdr, NULL);
  free(m->owned_keys_);
  free(m->owned_values_);
  memset(m, 0, sizeof *m);
}

/* Bulk frames are viewed in place when aligned (ZeroMQ's heap-allocated message bodies
 * are); small messages stored inline in zmq_msg_t may not be, and are copied. */
static const void *view_or_copy(const ps_frame *f, size_t align, void **owned) {
  if (f->size == 0) return NULL;
  if (((uintptr_t)f->data & (align - 1)) == 0) return f->data;
  *owned = malloc(f->size);
  if (!*owned) return NULL;
  memcpy(*owned, f->data, f->size);
  return *owned;
}

/* ------------------------------------------------------------------ the shared checks
 * Requests (ps_wire_decode) and replies (ps_wire_check_reply) go through the same three
 * steps: frame bounds, the header against the layout of its op and direction, and the bulk
 * frame sizes against the header's count, dim and value type. */

/* What the header promises: which bulk frames, and the bytes of one value. */
typedef struct wire_layout {
  bool has_keys, has_values;
  size_t vsize;
} wire_layout;

/* Requests hold their header frame to PS_WIRE_MAX_HEADER before it is parsed; a reply's has
 * been received already (nothing is saved by refusing it), and a STATS reply of a server with
 * thousands of tables can come near that bound, so replies are not. */
static ps_status check_frames(const ps_frame *frames, size_t nframes, size_t max_header,
                              ps_error *err) {
  if (!frames || nframes == 0) return ps_error_set(err, PS_ERR_PROTO, "empty message");
  if (nframes > PS_WIRE_MAX_FRAMES)
    return ps_error_set(err, PS_ERR_PROTO, "%zu frames (at most %u)", nframes, PS_WIRE_MAX_FRAMES);
  if (frames[0].size == 0 || frames[0].size > max_header || !frames[0].data)
    return ps_error_set(err, PS_ERR_PROTO, "header frame of %zu bytes", frames[0].size);
  return PS_OK;
}

static ps_status check_header(const Ember__Header *h, size_t nframes, wire_layout *lay,
                              ps_error *err) {
  if (h->version != PS_WIRE_VERSION)
    return ps_error_set(err, PS_ERR_VERSION, "protocol version %u (this build speaks %u)",
                        h->version, PS_WIRE_VERSION);
  int op = (int)h->op;
  if (!(op_known(op) || (op == EMBER__OP__OP_ERROR && h->is_reply)))
    return ps_error_set(err, PS_ERR_UNKNOWN_OP, "unknown op %d", op);
  if (h->table_id > PS_WIRE_MAX_TABLE)
    return ps_error_set(err, PS_ERR_PROTO, "table id %u out of range", h->table_id);
  if (h->table && (h->table->id > PS_WIRE_MAX_TABLE || h->table->dim > PS_WIRE_MAX_DIM))
    return ps_error_set(err, PS_ERR_PROTO, "table spec out of range (id %u, dim %u)",
                        h->table->id, h->table->dim);
  /* protobuf-c keeps an out-of-range enum value as it came; a phase on another op would be
   * silently ignored by the receiver, so both are refused rather than guessed at. */
  if ((int)h->ckpt_phase < EMBER__CKPT_PHASE__CKPT_ONESHOT ||
      (int)h->ckpt_phase > EMBER__CKPT_PHASE__CKPT_ABORT ||
      (h->ckpt_phase != EMBER__CKPT_PHASE__CKPT_ONESHOT && op != EMBER__OP__OP_CHECKPOINT))
    return ps_error_set(err, PS_ERR_PROTO, "checkpoint phase %d on op %d", (int)h->ckpt_phase,
                        op);
  /* The same for a push's sequence fields (exactly-once): on a push request only, and then
   * either none (a push applied as it comes) or a client, a seq from 1 and a floor in 1..seq. */
  const bool seqd = h->client_id || h->seq || h->seq_floor || h->retry;
  if (seqd && (op != EMBER__OP__OP_PUSH || h->is_reply || !h->client_id || !h->seq ||
               !h->seq_floor || h->seq_floor > h->seq))
    return ps_error_set(err, PS_ERR_PROTO,
                        "push sequence fields (client %llu, seq %llu, floor %llu) on %s %s",
                        (unsigned long long)h->client_id, (unsigned long long)h->seq,
                        (unsigned long long)h->seq_floor, ps_wire_op_name(op),
                        h->is_reply ? "reply" : "request");
  if (h->warm && op != EMBER__OP__OP_PULL)
    return ps_error_set(err, PS_ERR_PROTO, "warm on op %d (a PULL flag)", op);
  if (h->since && (op != EMBER__OP__OP_REFRESH || h->is_reply))
    return ps_error_set(err, PS_ERR_PROTO, "since on %s %s (a REFRESH request field)",
                        ps_wire_op_name(op), h->is_reply ? "reply" : "request");
  if (h->keys_unique && (op != EMBER__OP__OP_PUSH || h->is_reply))
    return ps_error_set(err, PS_ERR_PROTO, "keys_unique on %s %s (a PUSH request flag)",
                        ps_wire_op_name(op), h->is_reply ? "reply" : "request");
  frames_of((Ember__Op)op, h->is_reply, &lay->has_keys, &lay->has_values);
  size_t want = 1 + (lay->has_keys ? 1 : 0) + (lay->has_values ? 1 : 0);
  if (nframes != want)
    return ps_error_set(err, PS_ERR_PROTO, "op %d %s has %zu frames, expected %zu", op,
                        h->is_reply ? "reply" : "request", nframes, want);
  if (h->count > PS_WIRE_MAX_KEYS)
    return ps_error_set(err, PS_ERR_PROTO, "count %llu over the limit %u",
                        (unsigned long long)h->count, PS_WIRE_MAX_KEYS);
  if (lay->has_values && (h->dim == 0 || h->dim > PS_WIRE_MAX_DIM))
    return ps_error_set(err, PS_ERR_PROTO, "dim %u out of range [1, %u]", h->dim,
                        PS_WIRE_MAX_DIM);
  lay->vsize = ps_wire_value_size(h->value_type);
  if (lay->has_values && lay->vsize == 0)
    return ps_error_set(err, PS_ERR_UNSUPPORTED, "value type %d", (int)h->value_type);
  return PS_OK;
}

/* Bulk frames must be exactly what the (already checked) header promises. */
static ps_status check_bulk(const Ember__Header *h, const ps_frame *frames,
                            const wire_layout *lay, ps_error *err) {
  size_t n = (size_t)h->count, fi = 1;
  if (lay->has_keys) {
    if (frames[fi].size != n * sizeof(uint64_t))
      return ps_error_set(err, PS_ERR_PROTO, "keys frame of %zu bytes for count %zu",
                          frames[fi].size, n);
    fi++;
  }
  /* count <= 2^22 and dim <= 4096: the product fits easily in size_t. */
  if (lay->has_values && frames[fi].size != n * (size_t)h->dim * lay->vsize)
    return ps_error_set(err, PS_ERR_PROTO, "values frame of %zu bytes for %zu x %u values",
                        frames[fi].size, n, h->dim);
  return PS_OK;
}

Ember__Header *ps_wire_header_unpack(const ps_frame *f) {
  if (!f || !f->data || f->size == 0) return NULL;
  return ember__header__unpack(NULL, f->size, f->data);
}

/* ------------------------------------------------------------------ requests */

static ps_status decode(const ps_frame *frames, size_t nframes, ps_msg *out, ps_error *err) {
  ps_status st = check_frames(frames, nframes, PS_WIRE_MAX_HEADER, err);
  if (st != PS_OK) return st;
  Ember__Header *h = ps_wire_header_unpack(&frames[0]);
  if (!h) return ps_error_set(err, PS_ERR_PROTO, "header does not parse");
  out->hdr = h;
  wire_layout lay = {false, false, 0};
  if ((st = check_header(h, nframes, &lay, err)) != PS_OK ||
      (st = check_bulk(h, frames, &lay, err)) != PS_OK)
    return st;
  size_t n = (size_t)h->count, fi = 1;
  if (lay.has_keys) {
    out->keys = view_or_copy(&frames[fi++], 8, &out->owned_keys_);
    if (n && !out->keys) return ps_error_set(err, PS_ERR_NOMEM, "out of memory copying keys");
    out->nkeys = n;
  }
  if (lay.has_values) {
    size_t nv = n * (size_t)h->dim;
    out->values = view_or_copy(&frames[fi], lay.vsize, &out->owned_values_);
    if (nv && !out->values)
      return ps_error_set(err, PS_ERR_NOMEM, "out of memory copying values");
    out->nvalues = nv;
    out->value_size = lay.vsize;
  }
  return PS_OK;
}

ps_status ps_wire_decode(const ps_frame *frames, size_t nframes, ps_msg *out, ps_error *err) {
  memset(out, 0, sizeof *out);
  ps_status st = decode(frames, nframes, out, err);
  if (st != PS_OK) ps_msg_clear(out);
  return st;
}

/* ------------------------------------------------------------------ replies */

ps_status ps_wire_check_reply(const Ember__Header *h, const ps_frame *frames, size_t nframes,
                              const ps_wire_expect *want, ps_error *err) {
  ps_status st = check_frames(frames, nframes, SIZE_MAX, err);
  if (st != PS_OK) return st;
  if (!h->is_reply) return ps_error_set(err, PS_ERR_PROTO, "a request where a reply was due");
  if (h->version != PS_WIRE_VERSION)
    return ps_error_set(err, PS_ERR_VERSION, "server speaks protocol version %u, this client %u",
                        h->version, PS_WIRE_VERSION);
  if (h->op == EMBER__OP__OP_ERROR || h->status != 0) {
    if (nframes != 1)
      return ps_error_set(err, PS_ERR_PROTO, "error reply of %zu frames", nframes);
    st = h->status > 0 && h->status < PS_ERR_COUNT_ ? (ps_status)h->status : PS_ERR_INTERNAL;
    return ps_error_set(err, st, "%s refused: %s", ps_wire_op_name(want->op),
                        h->message ? h->message : "");
  }
  if (h->op != want->op)
    return ps_error_set(err, PS_ERR_PROTO, "%s reply to a %s request", ps_wire_op_name(h->op),
                        ps_wire_op_name(want->op));
  wire_layout lay = {false, false, 0};
  if ((st = check_header(h, nframes, &lay, err)) != PS_OK) return st;
  /* A REFRESH reply carries at most the rows asked for (those changed); a PULL exactly. */
  const bool rows = want->op == EMBER__OP__OP_PULL || want->op == EMBER__OP__OP_REFRESH;
  const bool count_ok =
      want->op == EMBER__OP__OP_PULL ? h->count == want->count : h->count <= want->count;
  if (rows && (!count_ok || h->dim != want->dim || h->value_type != want->value_type ||
               h->table_id != want->table_id))
    return ps_error_set(err, PS_ERR_PROTO,
                        "%s reply does not match the request (%llu keys of dim %u, value "
                        "type %d, table %u; expected %s%llu keys of dim %u, value type %d, "
                        "table %u)",
                        ps_wire_op_name(want->op), (unsigned long long)h->count, h->dim,
                        (int)h->value_type, h->table_id,
                        want->op == EMBER__OP__OP_PULL ? "" : "at most ",
                        (unsigned long long)want->count, want->dim, (int)want->value_type,
                        want->table_id);
  return check_bulk(h, frames, &lay, err);
}

void ps_wire_header_init(Ember__Header *h, Ember__Op op) {
  ember__header__init(h);
  h->version = PS_WIRE_VERSION;
  h->op = op;
}

uint8_t *ps_wire_header_pack(const Ember__Header *h, size_t *size) {
  size_t n = ember__header__get_packed_size(h);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) return NULL;
  *size = ember__header__pack(h, buf);
  return buf;
}

size_t ps_wire_encode(const Ember__Header *h, const uint64_t *keys, const void *values,
                      ps_frame frames[PS_WIRE_MAX_FRAMES]) {
  bool has_keys, has_values;
  frames_of(h->op, h->is_reply, &has_keys, &has_values);
  size_t vsize = ps_wire_value_size(h->value_type);
  if ((has_keys && h->count && !keys) || (has_values && h->count && h->dim && !values) ||
      (has_values && vsize == 0))
    return 0;
  size_t hsize = 0;
  uint8_t *hb = ps_wire_header_pack(h, &hsize);
  if (!hb) return 0;
  size_t nf = 0;
  frames[nf].data = hb;
  frames[nf++].size = hsize;
  if (has_keys) {
    frames[nf].data = keys;
    frames[nf++].size = (size_t)h->count * sizeof(uint64_t);
  }
  if (has_values) {
    frames[nf].data = values;
    frames[nf++].size = (size_t)h->count * h->dim * vsize;
  }
  return nf;
}

/* ps_wire: framing and validation of Ember's ZeroMQ multipart messages.
 *
 * A message is a protobuf header frame (ember.proto's Header) followed by raw little-endian
 * bulk frames whose presence depends on the op and direction:
 *
 *   op            request frames             reply frames
 *   PULL          hdr, keys[count]           hdr, values[count*dim]
 *   PUSH          hdr, keys[count], values   hdr
 *   everything    hdr                        hdr   (ERROR replies: hdr only)
 *
 * The codec knows nothing of sockets: it works on arrays of (pointer, size) frames, so the
 * same code serves the server, the client and the fuzzer. Everything that arrives is
 * untrusted: frame count, header size, version, op, table id, count, dim and value type are
 * checked before any bulk byte is looked at, and bulk frame sizes must match exactly.
 *
 * One validator serves both directions: a server decodes requests with ps_wire_decode; a
 * client checks each reply with ps_wire_check_reply, which runs the same checks and then
 * holds the reply to the request it answers (a reply is only well-formed relative to what
 * was asked, e.g. a PULL reply carries exactly the rows requested). */
#ifndef PS_WIRE_H
#define PS_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember.pb-c.h"
#include "ps_status.h"
#include "ps_table.h"
#include "ps_wire_half.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "Ember's wire format is little-endian; a big-endian port needs byte swaps in ps_wire.c"
#endif

#define PS_WIRE_VERSION 1u
#define PS_WIRE_MAX_HEADER (1u << 20) /* header frame bytes (blob included) */
#define PS_WIRE_MAX_KEYS (1u << 22)   /* keys in one message */
#define PS_WIRE_MAX_DIM 4096u         /* values per key */
#define PS_WIRE_MAX_TABLE 65535u      /* table ids are 1..MAX_TABLE (0 = none) */
#define PS_WIRE_MAX_FRAMES 3u
/* Exactly-once pushes: a client keeps fewer than this many of its pushes to one shard unsettled
 * (seq - seq_floor < PS_WIRE_SEQ_WINDOW); a shard refuses a push past it. */
#define PS_WIRE_SEQ_WINDOW 4096u

typedef struct ps_frame {
  const void *data;
  size_t size;
} ps_frame;

/* A decoded message. Bulk pointers view the frames when they are suitably aligned (the
 * frames must outlive the ps_msg) or point to owned copies otherwise. */
typedef struct ps_msg {
  Ember__Header *hdr;
  const uint64_t *keys; /* hdr->count keys, or NULL */
  size_t nkeys;
  const void *values;   /* nvalues elements of value_size bytes, or NULL */
  size_t nvalues;
  size_t value_size;    /* 4 (f32) or 2 (f16) */
  void *owned_keys_;
  void *owned_values_;
} ps_msg;

/* Decodes and validates. On failure returns PS_ERR_PROTO / PS_ERR_VERSION /
 * PS_ERR_UNKNOWN_OP / PS_ERR_UNSUPPORTED, fills err (when not NULL) with the reason, and
 * leaves *out empty. On success the caller owns *out: release it with ps_msg_clear. */
ps_status ps_wire_decode(const ps_frame *frames, size_t nframes, ps_msg *out, ps_error *err);
void ps_msg_clear(ps_msg *m);

/* Parses a header frame; NULL if it does not parse (free with ember__header__free_unpacked).
 * Checks nothing else: a reply's receiver parses first to find, by request_id, the request
 * the reply answers, then calls ps_wire_check_reply. */
Ember__Header *ps_wire_header_unpack(const ps_frame *f);

/* What a reply must match: the request it answers. */
typedef struct ps_wire_expect {
  Ember__Op op;                /* the request's op */
  uint32_t table_id;           /* PULL only: the table, */
  uint64_t count;              /* the keys asked for, */
  uint32_t dim;                /* the values per key */
  Ember__ValueType value_type; /* and their type */
} ps_wire_expect;

/* Validates a reply: h (unpacked from frames[0]) and its frames get the checks of
 * ps_wire_decode (version, op, ranges, frame count, bulk frame sizes), and the reply must be
 * a reply, of the request's op, and for a PULL carry exactly count*dim values of the
 * requested type and table. Returns PS_OK for a good success reply. A well-formed error reply
 * (op ERROR or a non-zero status, header only) returns the server's status (PS_ERR_INTERNAL
 * for a code this build does not know) with err reading "<OP> refused: <server's message>".
 * Anything else returns PS_ERR_PROTO / PS_ERR_VERSION / PS_ERR_UNKNOWN_OP /
 * PS_ERR_UNSUPPORTED with the reason. Only sizes are read; the caller keeps its frames. The
 * header frame is not held to PS_WIRE_MAX_HEADER: it has arrived already, and a STATS reply
 * of a server with thousands of tables comes near that bound. */
ps_status ps_wire_check_reply(const Ember__Header *h, const ps_frame *frames, size_t nframes,
                              const ps_wire_expect *want, ps_error *err);

/* "PULL", "STEP", ... for an op number; "?" if unknown. */
const char *ps_wire_op_name(int op);

size_t ps_wire_value_size(Ember__ValueType vt); /* 0 if unknown */

/* Initializes a header with the current version and the given op. */
void ps_wire_header_init(Ember__Header *h, Ember__Op op);
/* Serializes a header into a malloc'ed buffer; returns NULL on failure. */
uint8_t *ps_wire_header_pack(const Ember__Header *h, size_t *size);

/* Builds the frames of a message over caller-owned bulk data; frames[0] is the packed header
 * (free it with free((void*)frames[0].data)). Returns the frame count, or 0 when the header
 * cannot be packed or the bulk sizes do not match the layout. */
size_t ps_wire_encode(const Ember__Header *h, const uint64_t *keys, const void *values,
                      ps_frame frames[PS_WIRE_MAX_FRAMES]);

/* f16 bulk values (VT_F16): ps_wire_f32_to_f16 / ps_wire_f16_to_f32 are in ps_wire_half.h,
 * included here for the callers of the codec. */

/* The table spec on the wire (ember.proto's TableSpec), converted in one place. to_pb fills p
 * from t; p->name points into t, which must outlive p. from_pb converts and validates
 * (ps_table_spec_validate): num_workers 0 means 1, staleness is kept for SSP only. */
void ps_wire_spec_to_pb(const ps_table_spec *t, Ember__TableSpec *p);
ps_status ps_wire_spec_from_pb(const Ember__TableSpec *p, ps_table_spec *t, ps_error *err);

#endif

/* Wire codec: round trips, and rejection of truncated frames, wrong counts, oversize counts,
 * unknown ops and wrong versions with an error code; replies checked against the request they
 * answer (ps_wire_check_reply), error replies read with their code. Runs under ASan in CI, so an
 * out-of-bounds read in the decoder fails this test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_hash.h"
#include "ps_wire.h"

static void test_pull_roundtrip(void **st) {
  (void)st;
  uint64_t keys[5] = {1, 2, 0xffffffffffffffffull, 42, 7};
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_PULL);
  h.request_id = 99;
  h.table_id = 3;
  h.count = 5;
  h.step = 1234567890123ull;
  ps_frame f[PS_WIRE_MAX_FRAMES];
  size_t nf = ps_wire_encode(&h, keys, NULL, f);
  assert_int_equal(nf, 2);
  ps_msg m;
  assert_int_equal(ps_wire_decode(f, nf, &m, NULL), PS_OK);
  assert_int_equal(m.hdr->op, EMBER__OP__OP_PULL);
  assert_int_equal(m.hdr->request_id, 99);
  assert_int_equal(m.hdr->table_id, 3);
  assert_true(m.hdr->step == 1234567890123ull);
  assert_int_equal(m.nkeys, 5);
  assert_memory_equal(m.keys, keys, sizeof keys);
  assert_null(m.values);
  ps_msg_clear(&m);
  free((void *)f[0].data);
}

static void test_push_roundtrip_unaligned(void **st) {
  (void)st;
  enum { N = 3, D = 4 };
  uint64_t keys[N] = {10, 20, 30};
  float vals[N * D];
  for (int i = 0; i < N * D; i++) vals[i] = (float)i * 0.5f - 1.0f;
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_PUSH);
  h.count = N;
  h.dim = D;
  h.table_id = 1;
  ps_frame f[PS_WIRE_MAX_FRAMES];
  assert_int_equal(ps_wire_encode(&h, keys, vals, f), 3);
  /* Move the bulk frames to odd addresses: the decoder must copy, not misread. */
  uint8_t *kb = malloc(sizeof keys + 1), *vb = malloc(sizeof vals + 1);
  memcpy(kb + 1, keys, sizeof keys);
  memcpy(vb + 1, vals, sizeof vals);
  f[1].data = kb + 1;
  f[2].data = vb + 1;
  ps_msg m;
  assert_int_equal(ps_wire_decode(f, 3, &m, NULL), PS_OK);
  assert_int_equal(m.nvalues, N * D);
  assert_int_equal(m.value_size, 4);
  assert_memory_equal(m.keys, keys, sizeof keys);
  assert_memory_equal(m.values, vals, sizeof vals);
  assert_true(((uintptr_t)m.keys & 7) == 0);
  ps_msg_clear(&m);
  free(kb);
  free(vb);
  free((void *)f[0].data);
}

/* A DECLARE carrying spec, encoded and decoded into *m (the caller clears it). */
static void declare_roundtrip(Ember__TableSpec *spec, ps_msg *m) {
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_DECLARE);
  h.table = spec;
  ps_frame f[PS_WIRE_MAX_FRAMES];
  assert_int_equal(ps_wire_encode(&h, NULL, NULL, f), 1);
  assert_int_equal(ps_wire_decode(f, 1, m, NULL), PS_OK);
  free((void *)f[0].data); /* the decoded header owns its own copy */
}

static void test_declare_roundtrip(void **st) {
  (void)st;
  Ember__TableSpec spec;
  ember__table_spec__init(&spec);
  spec.id = 7;
  spec.name = "emb";
  spec.dim = 16;
  spec.optimizer = EMBER__OPTIMIZER__OPT_ADAM;
  spec.lr = 0.01f;
  spec.num_workers = 2;
  ps_msg m;
  declare_roundtrip(&spec, &m);
  assert_non_null(m.hdr->table);
  assert_string_equal(m.hdr->table->name, "emb");
  assert_int_equal(m.hdr->table->dim, 16);
  assert_int_equal(m.hdr->table->optimizer, EMBER__OPTIMIZER__OPT_ADAM);
  ps_msg_clear(&m);
}

/* ps_table_spec -> TableSpec -> bytes -> TableSpec -> ps_table_spec gives every field back,
 * and the conversion from the wire validates and normalizes as ps_wire.h says. */
static void test_spec_conversion(void **st) {
  (void)st;
  ps_table_spec t;
  ps_table_spec_default(&t, 9, "users", 32);
  t.optimizer = PS_OPT_FTRL;
  t.lr = 0.3f, t.beta1 = 0.5f, t.beta2 = 0.25f, t.eps = 1e-6f, t.l1 = 0.1f, t.l2 = 0.2f;
  t.lr_power = -0.75f, t.initial_accumulator = 0.125f, t.init = PS_INIT_NORMAL;
  t.init_a = 0.02f, t.init_b = 0.5f, t.seed = 0x123456789ull, t.admit_threshold = 3;
  t.ttl_steps = 1000, t.consistency = PS_CONS_SSP, t.staleness = 4, t.num_workers = 8;
  Ember__TableSpec p;
  ps_wire_spec_to_pb(&t, &p);
  ps_msg m;
  declare_roundtrip(&p, &m);
  ps_table_spec back;
  memset(&back, 0xab, sizeof back);
  assert_int_equal(ps_wire_spec_from_pb(m.hdr->table, &back, NULL), PS_OK);
  assert_true(ps_table_spec_rows_equal(&t, &back));
  assert_true(ps_table_spec_stepping_equal(&t, &back));
  ps_msg_clear(&m);

  /* num_workers 0 reads as 1; staleness only counts for SSP. */
  ps_table_spec_default(&t, 2, "a", 4);
  t.consistency = PS_CONS_SYNC;
  t.staleness = 5;
  ps_wire_spec_to_pb(&t, &p);
  p.num_workers = 0;
  assert_int_equal(ps_wire_spec_from_pb(&p, &back, NULL), PS_OK);
  assert_int_equal(back.num_workers, 1);
  assert_int_equal(back.staleness, 0);
  /* Bad specs are refused with a reason, and *t is left alone. */
  ps_error e;
  char longname[100];
  memset(longname, 'n', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  p.name = longname;
  back.id = 77;
  assert_int_equal(ps_wire_spec_from_pb(&p, &back, &e), PS_ERR_INVALID);
  assert_non_null(strstr(e.msg, "name"));
  assert_int_equal(back.id, 77);
  ps_wire_spec_to_pb(&t, &p);
  p.optimizer = (Ember__Optimizer)17;
  assert_int_equal(ps_wire_spec_from_pb(&p, &back, &e), PS_ERR_INVALID);
  assert_non_null(strstr(e.msg, "optimizer"));
  assert_int_equal(ps_wire_spec_from_pb(NULL, &back, &e), PS_ERR_INVALID);
}

/* A message's frames: h packed into f[0] (free f[0].data), then the bulk frames. */
static void frames_of(const Ember__Header *h, const ps_frame *bulk, size_t nbulk, ps_frame *f) {
  size_t hs;
  f[0].data = ps_wire_header_pack(h, &hs);
  f[0].size = hs;
  for (size_t i = 0; i < nbulk; i++) f[1 + i] = bulk[i];
}

/* Packs a header and decodes it with the given bulk frames; returns the status. */
static ps_status decode_with(Ember__Header *h, const ps_frame *bulk, size_t nbulk) {
  ps_frame f[8];
  frames_of(h, bulk, nbulk, f);
  ps_msg m;
  ps_error err;
  ps_error_clear(&err);
  ps_status s = ps_wire_decode(f, 1 + nbulk, &m, &err);
  if (s == PS_OK) {
    ps_msg_clear(&m);
    assert_int_equal(err.code, PS_OK); /* success leaves err alone */
  } else {
    assert_int_equal(err.code, s); /* err carries the returned code */
    assert_true(err.msg[0] != '\0'); /* and every rejection says why */
  }
  free((void *)f[0].data);
  return s;
}

static void test_rejections(void **st) {
  (void)st;
  uint64_t keys[4] = {0};
  float vals[64] = {0};
  Ember__Header h;

  ps_wire_header_init(&h, EMBER__OP__OP_PULL);
  h.count = 4;
  ps_frame ok_keys = {keys, sizeof keys};
  assert_int_equal(decode_with(&h, &ok_keys, 1), PS_OK);
  ps_frame short_keys = {keys, sizeof keys - 1};
  assert_int_equal(decode_with(&h, &short_keys, 1), PS_ERR_PROTO);   /* truncated frame */
  h.count = 5;
  assert_int_equal(decode_with(&h, &ok_keys, 1), PS_ERR_PROTO);      /* wrong count */
  h.count = (uint64_t)PS_WIRE_MAX_KEYS + 1;
  assert_int_equal(decode_with(&h, &ok_keys, 1), PS_ERR_PROTO);      /* oversize count */
  h.count = 1ull << 61;                                                /* overflowing size */
  assert_int_equal(decode_with(&h, &ok_keys, 1), PS_ERR_PROTO);
  h.count = 4;
  assert_int_equal(decode_with(&h, NULL, 0), PS_ERR_PROTO);          /* missing frame */
  ps_frame two[2] = {ok_keys, ok_keys};
  assert_int_equal(decode_with(&h, two, 2), PS_ERR_PROTO);           /* extra frame */
  h.version = 2;
  assert_int_equal(decode_with(&h, &ok_keys, 1), PS_ERR_VERSION);    /* wrong version */
  h.version = 0;
  assert_int_equal(decode_with(&h, &ok_keys, 1), PS_ERR_VERSION);
  h.version = PS_WIRE_VERSION;
  h.op = (Ember__Op)77;
  assert_int_equal(decode_with(&h, NULL, 0), PS_ERR_UNKNOWN_OP);     /* unknown op */
  h.op = EMBER__OP__OP_ERROR;                                          /* ERROR as a request */
  assert_int_equal(decode_with(&h, NULL, 0), PS_ERR_UNKNOWN_OP);
  h.op = EMBER__OP__OP_PULL;
  h.table_id = PS_WIRE_MAX_TABLE + 1;
  assert_int_equal(decode_with(&h, &ok_keys, 1), PS_ERR_PROTO);      /* table id range */

  ps_wire_header_init(&h, EMBER__OP__OP_PUSH);
  h.count = 4;
  h.dim = 16;
  ps_frame push[2] = {{keys, sizeof keys}, {vals, sizeof vals}};
  assert_int_equal(decode_with(&h, push, 2), PS_OK);
  h.dim = 15;
  assert_int_equal(decode_with(&h, push, 2), PS_ERR_PROTO);          /* values size mismatch */
  h.dim = 0;
  assert_int_equal(decode_with(&h, push, 2), PS_ERR_PROTO);
  h.dim = PS_WIRE_MAX_DIM + 1;
  assert_int_equal(decode_with(&h, push, 2), PS_ERR_PROTO);
  h.dim = 16;
  h.value_type = (Ember__ValueType)9;
  assert_int_equal(decode_with(&h, push, 2), PS_ERR_UNSUPPORTED);
  h.value_type = EMBER__VALUE_TYPE__VT_F16;                            /* half-size values */
  push[1].size = sizeof vals / 2;
  assert_int_equal(decode_with(&h, push, 2), PS_OK);
  /* Exactly-once fields: a client, seq >= 1, floor in 1..seq, on a push request only. */
  h.client_id = 42;
  h.seq = 7;
  h.seq_floor = 3;
  h.retry = true;
  assert_int_equal(decode_with(&h, push, 2), PS_OK);
  h.seq_floor = 8;
  assert_int_equal(decode_with(&h, push, 2), PS_ERR_PROTO);          /* floor above seq */
  h.seq_floor = 0;
  assert_int_equal(decode_with(&h, push, 2), PS_ERR_PROTO);          /* no floor */
  h.seq_floor = 7;
  h.client_id = 0;
  assert_int_equal(decode_with(&h, push, 2), PS_ERR_PROTO);          /* seq without a client */
  h.client_id = 42;
  h.seq = 0;
  h.seq_floor = 0;
  assert_int_equal(decode_with(&h, push, 2), PS_ERR_PROTO);          /* a client without seq */
  h.client_id = 0;
  h.retry = false;
  ps_wire_header_init(&h, EMBER__OP__OP_STEP);
  h.client_id = 42;
  h.seq = h.seq_floor = 1;
  assert_int_equal(decode_with(&h, NULL, 0), PS_ERR_PROTO);          /* on another op */

  /* Checkpoint phases: known values on CHECKPOINT only. */
  ps_wire_header_init(&h, EMBER__OP__OP_CHECKPOINT);
  h.step = 5;
  h.path = "ck";
  h.ckpt_phase = EMBER__CKPT_PHASE__CKPT_COMMIT;
  assert_int_equal(decode_with(&h, NULL, 0), PS_OK);
  h.ckpt_phase = (Ember__CkptPhase)4;
  assert_int_equal(decode_with(&h, NULL, 0), PS_ERR_PROTO);          /* unknown phase */
  h.ckpt_phase = (Ember__CkptPhase)-1;
  assert_int_equal(decode_with(&h, NULL, 0), PS_ERR_PROTO);
  h.op = EMBER__OP__OP_RESTORE;
  h.ckpt_phase = EMBER__CKPT_PHASE__CKPT_PREPARE;
  assert_int_equal(decode_with(&h, NULL, 0), PS_ERR_PROTO);          /* phase on another op */
  h.ckpt_phase = EMBER__CKPT_PHASE__CKPT_ONESHOT;
  assert_int_equal(decode_with(&h, NULL, 0), PS_OK);

  /* warm (a prefetch) is a PULL flag: accepted there, refused on any other op. */
  ps_wire_header_init(&h, EMBER__OP__OP_PULL);
  h.count = 4;
  h.table_id = 1;
  h.warm = true;
  assert_int_equal(decode_with(&h, push, 1), PS_OK);
  ps_wire_header_init(&h, EMBER__OP__OP_PUSH);
  h.count = 4;
  h.dim = 16;
  h.warm = true;
  assert_int_equal(decode_with(&h, push, 2), PS_ERR_PROTO);
  ps_wire_header_init(&h, EMBER__OP__OP_RESTORE);
  h.warm = true;
  assert_int_equal(decode_with(&h, NULL, 0), PS_ERR_PROTO);
  ps_wire_header_init(&h, EMBER__OP__OP_STEP);
  h.warm = true;
  assert_int_equal(decode_with(&h, NULL, 0), PS_ERR_PROTO);

  /* keys_unique is a PUSH request flag: accepted there (push[1] holds f16 values by now),
   * refused on the same header as a PULL. */
  h.op = EMBER__OP__OP_PUSH;
  h.warm = false;
  h.count = 4;
  h.dim = 16;
  h.value_type = EMBER__VALUE_TYPE__VT_F16;
  h.keys_unique = true;
  assert_int_equal(decode_with(&h, push, 2), PS_OK);
  h.op = EMBER__OP__OP_PULL;
  assert_int_equal(decode_with(&h, push, 1), PS_ERR_PROTO);
  h.keys_unique = false;
  assert_int_equal(decode_with(&h, push, 1), PS_OK);
}

/* Packs a reply header, parses it back as a client does and checks it with the given bulk
 * frames against the request `want`; returns the status and the message in e. */
static ps_status check_reply_with(Ember__Header *h, const ps_frame *bulk, size_t nbulk,
                                  const ps_wire_expect *want, ps_error *e) {
  h->is_reply = true;
  ps_frame f[8];
  frames_of(h, bulk, nbulk, f);
  Ember__Header *back = ps_wire_header_unpack(&f[0]);
  assert_non_null(back);
  ps_error_clear(e);
  ps_status s = ps_wire_check_reply(back, f, 1 + nbulk, want, e);
  if (s != PS_OK) assert_true(e->msg[0] != '\0'); /* every rejection says why */
  else assert_int_equal(e->code, PS_OK);            /* and success leaves err alone */
  ember__header__free_unpacked(back, NULL);
  free((void *)f[0].data);
  return s;
}

/* A reply header of `count` rows of dim d in table 3, and what its request expects. */
static ps_wire_expect rows_reply(Ember__Header *h, Ember__Op op, uint64_t n, uint32_t d) {
  ps_wire_header_init(h, op);
  h->table_id = 3;
  h->count = n;
  h->dim = d;
  return (ps_wire_expect){op, 3, n, d, EMBER__VALUE_TYPE__VT_F32};
}

static void test_reply_checks(void **st) {
  (void)st;
  enum { N = 4, D = 8 };
  float vals[N * D] = {0};
  ps_error e;
  Ember__Header h;
  ps_wire_expect pull = rows_reply(&h, EMBER__OP__OP_PULL, N, D);
  ps_frame rows = {vals, sizeof vals};
  assert_int_equal(check_reply_with(&h, &rows, 1, &pull, &e), PS_OK);
  ps_frame short_rows = {vals, sizeof vals - 4};                        /* truncated values */
  assert_int_equal(check_reply_with(&h, &short_rows, 1, &pull, &e), PS_ERR_PROTO);
  assert_non_null(strstr(e.msg, "values frame"));
  assert_int_equal(check_reply_with(&h, NULL, 0, &pull, &e), PS_ERR_PROTO); /* no values */
  ps_frame two[2] = {rows, rows};
  assert_int_equal(check_reply_with(&h, two, 2, &pull, &e), PS_ERR_PROTO);  /* extra frame */
  /* Self-consistent replies that are not what was asked: wrong count, dim, type, table. */
  h.count = N - 1;
  ps_frame fewer = {vals, (N - 1) * D * sizeof(float)};
  assert_int_equal(check_reply_with(&h, &fewer, 1, &pull, &e), PS_ERR_PROTO);
  assert_non_null(strstr(e.msg, "does not match the request"));
  h.count = N;
  h.dim = D / 2;
  ps_frame narrow = {vals, N * (D / 2) * sizeof(float)};
  assert_int_equal(check_reply_with(&h, &narrow, 1, &pull, &e), PS_ERR_PROTO);
  h.dim = D;
  h.value_type = EMBER__VALUE_TYPE__VT_F16;
  ps_frame halves = {vals, sizeof vals / 2};
  assert_int_equal(check_reply_with(&h, &halves, 1, &pull, &e), PS_ERR_PROTO);
  pull.value_type = EMBER__VALUE_TYPE__VT_F16;                           /* f16 asked: fine */
  assert_int_equal(check_reply_with(&h, &halves, 1, &pull, &e), PS_OK);
  assert_int_equal(check_reply_with(&h, &rows, 1, &pull, &e), PS_ERR_PROTO);
  h.table_id = 4;
  assert_int_equal(check_reply_with(&h, &halves, 1, &pull, &e), PS_ERR_PROTO);
  h.table_id = 3;
  h.version = 2;
  assert_int_equal(check_reply_with(&h, &halves, 1, &pull, &e), PS_ERR_VERSION);
  h.version = PS_WIRE_VERSION;

  /* A reply to another op, and a request where a reply was due. */
  ps_wire_header_init(&h, EMBER__OP__OP_STATS);
  assert_int_equal(check_reply_with(&h, NULL, 0, &pull, &e), PS_ERR_PROTO);
  assert_non_null(strstr(e.msg, "STATS reply to a PULL request"));
  ps_wire_expect step = {EMBER__OP__OP_STEP, 0, 0, 0, EMBER__VALUE_TYPE__VT_F32};
  ps_wire_header_init(&h, EMBER__OP__OP_PUSH);
  assert_int_equal(check_reply_with(&h, NULL, 0, &step, &e), PS_ERR_PROTO);
  ps_wire_header_init(&h, EMBER__OP__OP_STEP);
  assert_int_equal(check_reply_with(&h, NULL, 0, &step, &e), PS_OK);
  assert_int_equal(check_reply_with(&h, &rows, 1, &step, &e), PS_ERR_PROTO); /* stray bulk */
  h.ckpt_phase = EMBER__CKPT_PHASE__CKPT_COMMIT;                     /* phase on a STEP */
  assert_int_equal(check_reply_with(&h, NULL, 0, &step, &e), PS_ERR_PROTO);
  {
    ps_wire_header_init(&h, EMBER__OP__OP_STEP);
    ps_frame f;
    frames_of(&h, NULL, 0, &f); /* is_reply left false */
    Ember__Header *back = ps_wire_header_unpack(&f);
    assert_int_equal(ps_wire_check_reply(back, &f, 1, &step, &e), PS_ERR_PROTO);
    ember__header__free_unpacked(back, NULL);
    free((void *)f.data);
  }

  /* Error replies: the server's code and message, for the request's op. */
  ps_wire_expect declare = {EMBER__OP__OP_DECLARE, 0, 0, 0, EMBER__VALUE_TYPE__VT_F32};
  ps_wire_header_init(&h, EMBER__OP__OP_ERROR);
  h.status = PS_ERR_CONFLICT;
  h.message = "table 7 exists with dim 16";
  assert_int_equal(check_reply_with(&h, NULL, 0, &declare, &e), PS_ERR_CONFLICT);
  assert_int_equal(e.code, PS_ERR_CONFLICT);
  assert_string_equal(e.msg, "DECLARE refused: table 7 exists with dim 16");
  h.status = 999;                                                      /* unknown code */
  assert_int_equal(check_reply_with(&h, NULL, 0, &declare, &e), PS_ERR_INTERNAL);
  h.status = 0;                                                        /* ERROR without one */
  assert_int_equal(check_reply_with(&h, NULL, 0, &declare, &e), PS_ERR_INTERNAL);
  h.status = PS_ERR_TIMEOUT;
  assert_int_equal(check_reply_with(&h, &rows, 1, &declare, &e), PS_ERR_PROTO); /* bulk */
  ps_wire_header_init(&h, EMBER__OP__OP_DECLARE);                     /* status on its op */
  h.status = PS_ERR_INVALID;
  assert_int_equal(check_reply_with(&h, NULL, 0, &declare, &e), PS_ERR_INVALID);
  assert_non_null(strstr(e.msg, "DECLARE refused"));
  assert_string_equal(ps_wire_op_name(EMBER__OP__OP_PULL), "PULL");
  assert_string_equal(ps_wire_op_name(99), "?");
  ps_frame empty = {NULL, 0};
  assert_null(ps_wire_header_unpack(&empty));
}

static void test_garbage_headers(void **st) {
  (void)st;
  /* Random bytes and every truncation of a valid header: never a crash, never an OK that
   * promises bulk data that is not there. */
  uint64_t s = 1;
  uint8_t buf[256];
  for (int it = 0; it < 20000; it++) {
    size_t n = 1 + (ps_mix64((uint64_t)it) % sizeof buf);
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)(s = ps_mix64(s));
    ps_frame f[3] = {{buf, n}, {buf, n / 2}, {buf, n / 3}};
    ps_msg m;
    if (ps_wire_decode(f, 1 + (size_t)(it % 3), &m, NULL) == PS_OK) ps_msg_clear(&m);
  }
  Ember__Header h;
  ps_wire_header_init(&h, EMBER__OP__OP_PULL);
  h.count = 100;
  h.request_id = 0x123456789abcull;
  h.message = "some text to make the header longer";
  size_t hs;
  uint8_t *hb = ps_wire_header_pack(&h, &hs);
  for (size_t cut = 1; cut < hs; cut++) {
    uint8_t *t = malloc(cut); /* exact-size copy so ASan catches any over-read */
    memcpy(t, hb, cut);
    ps_frame f[2] = {{t, cut}, {NULL, 0}};
    ps_msg m;
    if (ps_wire_decode(f, 2, &m, NULL) == PS_OK) {
      assert_int_equal(m.nkeys, 0);
      ps_msg_clear(&m);
    }
    free(t);
  }
  free(hb);
  ps_frame empty = {NULL, 0};
  ps_msg m;
  assert_int_equal(ps_wire_decode(&empty, 1, &m, NULL), PS_ERR_PROTO);
  assert_int_equal(ps_wire_decode(NULL, 0, &m, NULL), PS_ERR_PROTO);
}

/* REFRESH (issue 32): `since` only on a REFRESH request; its reply carries m <= n positions
 * (keys frame) and m rows of the asked dim, type and table. */
static void test_refresh_checks(void **st) {
  (void)st;
  enum { N = 4, D = 8 };
  float vals[N * D] = {0};
  uint64_t pos[N] = {0, 1, 2, 3};
  ps_error e;
  Ember__Header h;
  ps_wire_expect want = rows_reply(&h, EMBER__OP__OP_REFRESH, N, D);
  for (uint64_t m = 0; m <= N; m++) { /* any number of the rows asked for, none included */
    h.count = m;
    ps_frame two[2] = {{pos, m * sizeof(uint64_t)}, {vals, m * D * sizeof(float)}};
    assert_int_equal(check_reply_with(&h, two, 2, &want, &e), PS_OK);
  }
  h.count = N + 1; /* more rows than asked for */
  uint64_t pos5[N + 1] = {0};
  float vals5[(N + 1) * D] = {0};
  ps_frame more[2] = {{pos5, sizeof pos5}, {vals5, sizeof vals5}};
  assert_int_equal(check_reply_with(&h, more, 2, &want, &e), PS_ERR_PROTO);
  assert_non_null(strstr(e.msg, "REFRESH reply does not match the request"));
  h.count = 2;
  ps_frame rows_only = {vals, 2 * D * sizeof(float)}; /* the positions frame missing */
  assert_int_equal(check_reply_with(&h, &rows_only, 1, &want, &e), PS_ERR_PROTO);
  ps_frame bad_pos[2] = {{pos, 3 * sizeof(uint64_t)}, {vals, 2 * D * sizeof(float)}};
  assert_int_equal(check_reply_with(&h, bad_pos, 2, &want, &e), PS_ERR_PROTO);
  ps_frame ok[2] = {{pos, 2 * sizeof(uint64_t)}, {vals, 2 * D * sizeof(float)}};
  h.dim = D / 2; /* another dim */
  assert_int_equal(check_reply_with(&h, ok, 2, &want, &e), PS_ERR_PROTO);
  h.dim = D;
  h.since = 5; /* since on a reply */
  assert_int_equal(check_reply_with(&h, ok, 2, &want, &e), PS_ERR_PROTO);
  /* Requests: since on a REFRESH, not on a PULL. */
  ps_wire_header_init(&h, EMBER__OP__OP_REFRESH);
  h.table_id = 3;
  h.count = N;
  h.since = 7;
  ps_frame keys = {pos, sizeof pos};
  assert_int_equal(decode_with(&h, &keys, 1), PS_OK);
  h.op = EMBER__OP__OP_PULL;
  assert_int_equal(decode_with(&h, &keys, 1), PS_ERR_PROTO);
}

PS_TEST_MAIN("wire", NULL, NULL, cmocka_unit_test(test_refresh_checks),
    cmocka_unit_test(test_pull_roundtrip), cmocka_unit_test(test_push_roundtrip_unaligned),
    cmocka_unit_test(test_declare_roundtrip), cmocka_unit_test(test_rejections),
    cmocka_unit_test(test_garbage_headers), cmocka_unit_test(test_spec_conversion),
    cmocka_unit_test(test_reply_checks))

/* The op table (proto/ps_op.h): every op of ember.proto's enum has exactly one row, and each
 * row says what the switches it replaced said. Those switches are kept below verbatim, as
 * they stood before the table (commit 0f92810), and the table is checked against them for
 * every op number, so a row that drifts from what the server and client did before fails
 * here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_op.h"
#include "ps_wire.h"

/* server/ps_server_ops.c */
static bool old_store_op(int op) {
  return op == EMBER__OP__OP_PULL || op == EMBER__OP__OP_PUSH || op == EMBER__OP__OP_STEP ||
         op == EMBER__OP__OP_DECLARE;
}

/* server/ps_server_ops.c and server/ps_server_replication.c, the same twice */
static bool old_coord_op(int op) {
  return op == EMBER__OP__OP_JOIN || op == EMBER__OP__OP_KV_SET || op == EMBER__OP__OP_KV_GET ||
         op == EMBER__OP__OP_BARRIER;
}

/* server/ps_server_replication.c */
static bool old_forwarded_op(int op) {
  return op == EMBER__OP__OP_DECLARE || op == EMBER__OP__OP_PUSH || op == EMBER__OP__OP_STEP ||
         op == EMBER__OP__OP_JOIN || op == EMBER__OP__OP_KV_SET || op == EMBER__OP__OP_BARRIER;
}

/* server/ps_server_replication.c, srv_repl_intake: answered by any replica (a client's PING, which
 * has no repl_epoch; a replica's PING is taken before this test) */
static bool old_replica_local(int op) {
  return op == EMBER__OP__OP_STATS || op == EMBER__OP__OP_PING;
}

/* server/ps_server_mem.c, srv_mem_intake */
static bool old_unparked(int op) { return op == EMBER__OP__OP_PING || op == EMBER__OP__OP_STATS; }

/* client/ps_client_io.c, cl_req_get */
static bool old_idempotent(int op, bool replicated) {
  bool idem = op != EMBER__OP__OP_STEP && op != EMBER__OP__OP_CHECKPOINT &&
              op != EMBER__OP__OP_RESTORE && op != EMBER__OP__OP_KV_SET;
  if (replicated && op == EMBER__OP__OP_STEP) idem = true;
  return idem;
}

/* The ops the client starts (ps_client_coord.c, ps_client_data.c): the only ones
 * cl_req_get's idempotence was ever asked of. */
static bool client_sends(int op) {
  return (op >= EMBER__OP__OP_DECLARE && op <= EMBER__OP__OP_PING && op != EMBER__OP__OP_ERROR);
}

/* proto/ps_wire.c */
static const char *old_wire_name(int op) {
  static const char *n[] = {"NONE", "DECLARE", "PULL", "PUSH", "STEP", "CHECKPOINT", "STATS",
                            "ERROR", "JOIN", "KV_SET", "KV_GET", "BARRIER", "RESTORE", "PING"};
  static const char *repl[] = {"REPL_CATCHUP", "REPL_FILE", "REPL_BASE"};
  if (op >= EMBER__OP__OP_REPL_CATCHUP && op <= EMBER__OP__OP_REPL_BASE)
    return repl[op - EMBER__OP__OP_REPL_CATCHUP];
  return op >= 0 && op < (int)(sizeof n / sizeof n[0]) ? n[op] : "?";
}

static bool old_op_known(int op) {
  return (op >= EMBER__OP__OP_DECLARE && op <= EMBER__OP__OP_PING && op != EMBER__OP__OP_ERROR) ||
         (op >= EMBER__OP__OP_REPL_CATCHUP && op <= EMBER__OP__OP_REPL_BASE);
}

static void old_layout(int op, bool is_reply, bool *has_keys, bool *has_values) {
  *has_keys = false;
  *has_values = false;
  if (op == EMBER__OP__OP_PULL) {
    *has_keys = !is_reply;
    *has_values = is_reply;
  } else if (op == EMBER__OP__OP_PUSH && !is_reply) {
    *has_keys = true;
    *has_values = true;
  }
}

/* server/ps_server_stats.c; the replication ops had no entry and read "unknown" */
static const char *old_stat_name(int op) {
  static const char *names[] = {"none",    "declare", "pull",    "push",   "step",
                                "checkpoint", "stats", "error",  "join",   "kv_set",
                                "kv_get",  "barrier", "restore", "ping"};
  return op >= 0 && op < (int)(sizeof names / sizeof *names) ? names[op] : "unknown";
}

/* Every number the enum names has a row under that name, and the rows are the enum's. */
static void test_one_row_per_op(void **st) {
  (void)st;
  const ProtobufCEnumDescriptor *d = &ember__op__descriptor;
  int named = 0;
  for (int op = 0; op < ps_op_limit(); op++)
    if (strcmp(ps_op_info_of(op)->name, "?") != 0) named++;
  assert_int_equal(named, (int)d->n_values);
  for (unsigned i = 0; i < d->n_values; i++) {
    const ProtobufCEnumValue *v = &d->values[i];
    assert_true(v->value < ps_op_limit());
    assert_string_equal(ps_op_info_of(v->value)->name, v->name + strlen("OP_"));
  }
  assert_string_equal(ps_op_info_of(-1)->name, "?");
  assert_string_equal(ps_op_info_of(ps_op_limit())->name, "?");
  assert_int_equal(ps_op_info_of(99)->kind, PS_OP_INVALID);
}

static void test_rows_match_old_switches(void **st) {
  (void)st;
  for (int op = -2; op < ps_op_limit() + 30; op++) {
    if (op == EMBER__OP__OP_REFRESH) continue; /* newer than the switches: test_refresh_row */
    const ps_op_info *o = ps_op_info_of(op);
    assert_string_equal(o->name, old_wire_name(op));
    assert_string_equal(ps_wire_op_name(op), old_wire_name(op));
    if (op < 14 || !old_op_known(op)) /* the old stats table ended at PING */
      assert_string_equal(o->stat_name, old_stat_name(op));
    assert_int_equal(o->kind == PS_OP_STORE, old_store_op(op));
    assert_int_equal(o->kind == PS_OP_COORD, old_coord_op(op));
    assert_int_equal(o->forwarded, old_forwarded_op(op));
    assert_int_equal(o->replica_local, old_replica_local(op));
    assert_int_equal(o->unparked, old_unparked(op));
    assert_int_equal(o->kind != PS_OP_INVALID && !o->reply_only, old_op_known(op));
    assert_int_equal(o->reply_only, op == EMBER__OP__OP_ERROR);
    if (client_sends(op)) {
      assert_int_equal(o->resend, old_idempotent(op, false));
      assert_int_equal(o->resend_replicated, old_idempotent(op, true));
    }
    for (int reply = 0; reply < 2; reply++) {
      bool k, v;
      old_layout(op, reply, &k, &v);
      unsigned bulk = reply ? o->reply_bulk : o->req_bulk;
      assert_int_equal((bulk & PS_OP_BULK_KEYS) != 0, k);
      assert_int_equal((bulk & PS_OP_BULK_VALUES) != 0, v);
    }
  }
}

/* REFRESH (issue 32) came after the switches: a store read like PULL, re-sent like it, whose
 * reply carries its rows' positions (keys frame) and the rows. */
static void test_refresh_row(void **st) {
  (void)st;
  const ps_op_info *o = ps_op_info_of(EMBER__OP__OP_REFRESH);
  const ps_op_info *p = ps_op_info_of(EMBER__OP__OP_PULL);
  assert_string_equal(o->name, "REFRESH");
  assert_string_equal(o->stat_name, "refresh");
  assert_int_equal(o->kind, PS_OP_STORE);
  assert_int_equal(o->forwarded, p->forwarded);
  assert_int_equal(o->replica_local, p->replica_local);
  assert_int_equal(o->unparked, p->unparked);
  assert_int_equal(o->resend, p->resend);
  assert_int_equal(o->resend_replicated, p->resend_replicated);
  assert_int_equal(o->req_bulk, PS_OP_BULK_KEYS);
  assert_int_equal(o->reply_bulk, PS_OP_BULK_KEYS | PS_OP_BULK_VALUES);
}

PS_TEST_MAIN("op", NULL, NULL, cmocka_unit_test(test_one_row_per_op),
             cmocka_unit_test(test_rows_match_old_switches), cmocka_unit_test(test_refresh_row))

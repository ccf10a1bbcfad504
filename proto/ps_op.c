/* ps_op: the op table of ps_op.h. Designated initializers, so a row sits at its op's number
 * whatever the order here, and an op the enum gains without a row reads as unknown. */
#include "ps_op.h"

#include "ember.pb-c.h"

#define K PS_OP_BULK_KEYS
#define V PS_OP_BULK_VALUES

static const ps_op_info rows[] = {
    /* name, stat_name, kind, reply_only, forwarded, replica_local, unparked, resend,
     * resend_replicated, req_bulk, reply_bulk */
    [EMBER__OP__OP_NONE] = {"NONE", "none", PS_OP_INVALID, false, false, false, false, false,
                            false, 0, 0},
    [EMBER__OP__OP_DECLARE] = {"DECLARE", "declare", PS_OP_STORE, false, true, false, false,
                               true, true, 0, 0},
    [EMBER__OP__OP_PULL] = {"PULL", "pull", PS_OP_STORE, false, false, false, false, true, true,
                            K, V},
    [EMBER__OP__OP_PUSH] = {"PUSH", "push", PS_OP_STORE, false, true, false, false, true, true,
                            K | V, 0},
    /* A STEP is re-sent only with replicas: a worker's clock only moves up, so a copy changes
     * nothing there, and a not-primary answer means it was not applied. */
    [EMBER__OP__OP_STEP] = {"STEP", "step", PS_OP_STORE, false, true, false, false, false, true,
                            0, 0},
    [EMBER__OP__OP_CHECKPOINT] = {"CHECKPOINT", "checkpoint", PS_OP_CONTROL, false, false, false,
                                  false, false, false, 0, 0},
    [EMBER__OP__OP_STATS] = {"STATS", "stats", PS_OP_CONTROL, false, false, true, true, true,
                             true, 0, 0},
    [EMBER__OP__OP_ERROR] = {"ERROR", "error", PS_OP_INVALID, true, false, false, false, false,
                             false, 0, 0},
    [EMBER__OP__OP_JOIN] = {"JOIN", "join", PS_OP_COORD, false, true, false, false, true, true,
                            0, 0},
    [EMBER__OP__OP_KV_SET] = {"KV_SET", "kv_set", PS_OP_COORD, false, true, false, false, false,
                              false, 0, 0},
    [EMBER__OP__OP_KV_GET] = {"KV_GET", "kv_get", PS_OP_COORD, false, false, false, false, true,
                              true, 0, 0},
    [EMBER__OP__OP_BARRIER] = {"BARRIER", "barrier", PS_OP_COORD, false, true, false, false,
                               true, true, 0, 0},
    [EMBER__OP__OP_RESTORE] = {"RESTORE", "restore", PS_OP_CONTROL, false, false, false, false,
                               false, false, 0, 0},
    /* A replica's own PING (with repl_epoch) is judged by the replication layer instead. */
    [EMBER__OP__OP_PING] = {"PING", "ping", PS_OP_CONTROL, false, false, true, true, true, true,
                            0, 0},
    /* A REFRESH reads, like a PULL: a copy answers the same rows (those changed in its steps). */
    [EMBER__OP__OP_REFRESH] = {"REFRESH", "refresh", PS_OP_STORE, false, false, false, false,
                               true, true, K, K | V},
    [EMBER__OP__OP_REPL_CATCHUP] = {"REPL_CATCHUP", "repl_catchup", PS_OP_REPL, false, false,
                                    false, false, false, false, 0, 0},
    [EMBER__OP__OP_REPL_FILE] = {"REPL_FILE", "repl_file", PS_OP_REPL, false, false, false,
                                 false, false, false, 0, 0},
    [EMBER__OP__OP_REPL_BASE] = {"REPL_BASE", "repl_base", PS_OP_REPL, false, false, false,
                                 false, false, false, 0, 0},
};

static const ps_op_info unknown = {"?", "unknown", PS_OP_INVALID, false, false, false, false,
                                   false, false, 0, 0};

const ps_op_info *ps_op_info_of(int op) {
  if (op < 0 || op >= (int)(sizeof rows / sizeof *rows) || !rows[op].name) return &unknown;
  return &rows[op];
}

int ps_op_limit(void) { return (int)(sizeof rows / sizeof *rows); }

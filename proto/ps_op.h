/* ps_op: what each op of the protocol is, in one table (issue 35). Before it, the same facts
 * were decided by separate switches in the server (store op, coordinator op, forwarded to
 * replicas, exempt from the memory caps), the client (re-sent after a timeout) and the codec
 * (names, bulk frames), and a new op had to be added to each; now every one of them reads
 * this table, indexed by the wire's op number (Ember__Op). It lives in proto/ because the
 * server and the client may both use proto/ (docs/DESIGN.md, module map) and the op enum is
 * proto's. */
#ifndef PS_OP_H
#define PS_OP_H

#include <stdbool.h>

/* Who handles an op on a shard. */
typedef enum {
  PS_OP_INVALID = 0, /* not an op a request may carry: NONE, ERROR, an unknown number */
  PS_OP_STORE,       /* reads or writes the shard's tables: held while a checkpoint runs */
  PS_OP_COORD,       /* the coordinator's, on shard 0 only */
  PS_OP_CONTROL,     /* the shard's own: checkpoint, restore, stats, ping */
  PS_OP_REPL,        /* between the replicas of one shard */
} ps_op_kind;

/* Bulk frames after the header (ps_wire.h's table). */
enum { PS_OP_BULK_KEYS = 1u, PS_OP_BULK_VALUES = 2u };

typedef struct {
  const char *name;      /* "PULL": the wire's name, in client and codec messages */
  const char *stat_name; /* "pull": the key in STATS JSON and the metrics' op label */
  ps_op_kind kind;
  bool reply_only;       /* ERROR: valid in a reply, never in a request */
  bool forwarded;        /* a primary forwards it to its backups before answering */
  bool replica_local;    /* answered by whichever replica receives it, primary or not */
  bool unparked;         /* never parked by the memory caps: monitoring goes on when full */
  bool resend;           /* the client re-sends it after a timeout (applying it twice is
                          * harmless, or a PUSH's sequence number makes it apply once) */
  bool resend_replicated; /* re-sent when the shards are replicated, even if not above */
  unsigned req_bulk;     /* PS_OP_BULK_* frames of a request */
  unsigned reply_bulk;   /* PS_OP_BULK_* frames of a successful reply */
} ps_op_info;

/* The row of an op number; an unknown number gets a row named "?" / "unknown" of kind
 * PS_OP_INVALID with every property false, so callers need no NULL check. */
const ps_op_info *ps_op_info_of(int op);

/* One past the largest op number the table has a row for. */
int ps_op_limit(void);

#endif

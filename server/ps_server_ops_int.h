/* ps_server_ops_int.h: the op handlers (ps_server_ops.c) -- where a decoded request is
 * validated and handled by its op, and where the reply of its store work is built. Private to
 * server/; main thread only. */
#ifndef PS_SERVER_OPS_INT_H
#define PS_SERVER_OPS_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "ps_server.h"
#include "ps_wire.h"

typedef struct srv_req srv_req;

/* Takes ownership of a decoded request and handles it by op. */
void srv_handle(ps_server *s, srv_req *r);
/* Runs a checkpoint or restore (no store work in flight) and replies. */
void srv_run_exclusive(ps_server *s, srv_req *r);
/* r's store work is over (srv_finish): its reply -- rows, a prefetch's ack, a push's ack, or
 * the store's failure. */
void srv_reply_store_work(ps_server *s, srv_req *r);

#endif

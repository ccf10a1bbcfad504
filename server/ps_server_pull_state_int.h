/* ps_server_pull_state.c: a PULL with_state (docs/PROTOCOL.md, "Rows with their optimizer
 * state"). Called by the pull's intake (ps_server_ops.c) and the partition threads' store
 * work; the reply's width, which the memory charge needs too, is srv_pull_row_floats
 * (ps_server_mem_int.h: kept there so that the memory bounds call nothing above them). */
#ifndef PS_SERVER_PULL_STATE_INT_H
#define PS_SERVER_PULL_STATE_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "ps_server_int.h"

/* Replies an error and returns true when r's with_state cannot be served. */
bool srv_pull_state_refused(ps_server *s, srv_req *r);
/* A partition thread's share (first, stride) of the rows of a PULL with_state. */
ps_status srv_pull_state_run(ps_server *s, srv_req *r, uint32_t first, uint32_t stride);

#endif

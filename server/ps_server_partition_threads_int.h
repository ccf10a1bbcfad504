/* ps_server_partition_threads_int.h: the partition threads (ps_server_partition_threads.c) --
 * the pool that runs a request's store work, one task per thread over its own store partitions,
 * and the hand-off back to the main thread. Private to server/. */
#ifndef PS_SERVER_PARTITION_THREADS_INT_H
#define PS_SERVER_PARTITION_THREADS_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "ps_server.h"
#include "ps_wire.h"

typedef struct srv_req srv_req;

ps_status srv_parts_start(ps_server *s);
void srv_parts_stop(ps_server *s);
/* Hands r to every partition thread (or runs it inline, finishing it before returning). */
void srv_dispatch(ps_server *s, srv_req *r, int kind);
/* Takes up the finished tasks the threads sent back. */
void srv_parts_drain_done(ps_server *s);
/* Drops every buffered sync push (restore); only while no store work is in flight. */
void srv_drop_sync_all(ps_server *s);

#endif

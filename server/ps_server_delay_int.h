/* ps_server_delay_int.h: ps-server --inject-delay-us, replies held for a fixed delay
 * (ps_server_delay.c). Private to server/. The main loop polls srv_delay_fd and calls
 * srv_release_delayed; srv_reply offers every reply to srv_delay_hold. Without the flag nothing
 * is allocated and every call is a no-op. Main thread only. */
#ifndef PS_SERVER_DELAY_INT_H
#define PS_SERVER_DELAY_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <zmq.h>

#include "ps_server.h"
#include "ps_wire.h"

typedef struct srv_req srv_req;
typedef struct srv_delay srv_delay;

/* Holds r's reply instead of sending it (true), or lets srv_reply send it now (false). */
bool srv_delay_hold(ps_server *s, srv_req *r, const Ember__Header *rh, zmq_msg_t *keys,
                    zmq_msg_t *values);
/* Sends the replies whose injected delay is over (all when stopping); ns until the next.
 * *sent: some left (a checkpoint may have waited for them: srv_try_exclusive). */
uint64_t srv_release_delayed(ps_server *s, bool *sent);
/* The timerfd the main loop polls to wake when the next reply is due (-1: none). */
int srv_delay_fd(const ps_server *s);
/* Closes the timerfd and frees the held list (empty by then: shutdown released it). */
void srv_delay_close(ps_server *s);

#endif

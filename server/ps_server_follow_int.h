/* ps_server_follow_int.h: ps-server --serve DIR --follow (ps_server_follow.c) -- the watcher of
 * DIR/latest and the versions of the served snapshot that requests hold while their store work
 * runs. Private to server/. */
#ifndef PS_SERVER_FOLLOW_INT_H
#define PS_SERVER_FOLLOW_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "ps_server.h"
#include "ps_wire.h"

typedef struct srv_req srv_req;

/* After srv_serve_open and the signal pipe: the served snapshot becomes version 1 and the
 * watcher thread starts. */
ps_status srv_follow_start(ps_server *s, ps_error *err);
/* Main loop, every turn: switches to a version the watcher opened, if there is one. */
bool srv_follow_tick(ps_server *s);
/* srv_dispatch: r's store work uses the current version (r->store), held until release. */
void srv_follow_acquire(ps_server *s, srv_req *r);
/* r's store work is over: lets go of its version (closed by the watcher once unused). */
void srv_follow_release(ps_server *s, srv_req *r);
/* Destroy, after the partition threads stopped: the watcher stops, every version is closed
 * (s->store too). */
void srv_follow_stop(ps_server *s);

#endif

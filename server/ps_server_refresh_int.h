/* ps_server_refresh_int.h: REFRESH on sync tables (ps_server_refresh.c). Private to server/;
 * main thread only. */
#ifndef PS_SERVER_REFRESH_INT_H
#define PS_SERVER_REFRESH_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "ps_server.h"
#include "ps_wire.h"

typedef struct srv_req srv_req;
typedef struct srv_table srv_table;
typedef struct srv_changed srv_changed;

/* ps_server_refresh.c: sync tables note the keys of every push by step (changed_note, before
 * its store work); a REFRESH whose step may be read keeps only the keys a step of [since, step)
 * changed, their positions in r->refresh_pos (all of them when that is not known). reset: the
 * rows changed otherwise (a restore): the record starts again. */
void srv_changed_note(srv_table *t, uint64_t step, const uint64_t *keys, size_t n);
void srv_changed_reset(srv_table *t);
void srv_changed_free(srv_changed *c);
ps_status srv_refresh_select(srv_req *r);

#endif

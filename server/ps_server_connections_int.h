/* ps_server_connections_int.h: the ROUTER's connections as its monitor reports them
 * (ps_server_connections.c). Private to server/; main thread only. */
#ifndef PS_SERVER_CONNECTIONS_INT_H
#define PS_SERVER_CONNECTIONS_INT_H

#include "ps_server.h"

/* Reads the monitor's events: accepted and refused connections, and closed ones, which every
 * mechanism that keeps per-connection state is told of (their requests are dropped later, by
 * the main loop: srv_drop_gone_peers). No monitor (in-process, shard without a socket): no-op. */
void srv_peers_poll(ps_server *s);

#endif

/* ps_server_connections: the connections of the ROUTER socket as a ZeroMQ monitor reports
 * them -- accepted (CURVE's young connections, ps_server_mem.c), not accepted (out of file
 * descriptors, logged), and closed: a closed connection's ranks are lost
 * (ps_server_request_schedule.c), its coordinator ranks and waits freed (ps_coord.c), its
 * training and staging forgotten (ps_server_permissions.c), and its waiting requests noted for
 * the main loop to drop (srv_drop_gone_peers).
 *
 * The monitor is read by the main loop and before each coordinator op, so that a rank freed a
 * moment ago is free for the JOIN that follows (and, on every shard, by the restore guard).
 * It sits above the mechanisms it tells, so none of them calls back up into it. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "ps_log.h"
#include "ps_server_connections_int.h"
#include "ps_server_int.h"
#include "ps_server_mem_int.h"
#include "ps_server_permissions_int.h"
#include "ps_server_request_schedule_int.h"
#include "ps_zmq.h"

/* ZeroMQ could not accept a connection (errno err): it retries by itself and says nothing,
 * so that a client waits out its bound and the shard's log was silent. Out of file
 * descriptors is the common case: named with the limit. */
static void accept_failed(const ps_server *s, int err) {
  struct rlimit rl;
  if ((err == EMFILE || err == ENFILE) && getrlimit(RLIMIT_NOFILE, &rl) == 0)
    PS_ERROR_RL("cannot accept a connection on %s: %s (the open-file limit, ulimit -n, is %llu: "
                "raise it, e.g. LimitNOFILE= in systemd, or run fewer clients)", s->endpoint,
                strerror(err), (unsigned long long)rl.rlim_cur);
  else
    PS_ERROR_RL("cannot accept a connection on %s: %s", s->endpoint, strerror(err));
}

void srv_peers_poll(ps_server *s) {
  if (!s->mon) return;
  uint16_t event;
  uint32_t value;
  while (ps_zmq_monitor_next(s->mon, &event, &value, NULL, 0)) {
    if (event == ZMQ_EVENT_ACCEPT_FAILED) accept_failed(s, (int)value);
    if (event == ZMQ_EVENT_ACCEPTED) srv_mem_hs_accepted(s, (int)value);
    if (event != ZMQ_EVENT_DISCONNECTED) continue;
    srv_ranks_gone(s, (int)value);
    srv_mem_hs_gone(s, (int)value);
    if (s->coord) srv_coord_peer_gone(s->coord, (int)value);
    srv_permit_peer_gone(s, (int)value);
    /* Its waiting requests go later, from the main loop (srv_drop_gone_peers): this may run
     * inside a handler. Without memory to note it they stay until answered as usual. */
    if (srv_grow((void **)&s->gone, &s->gone_cap, s->ngone + 1, sizeof *s->gone, 16))
      s->gone[s->ngone++] = (int)value;
  }
}

/* ps_server_replication_setup: the setup of a replicated shard -- --peers parsed and checked
 * against --listen, a DEALER socket to each peer, the teardown, and the STATS fields (the rest of
 * replication: ps_server_replication.c, ps_server_replication_catchup.c).
 *
 * Design decisions:
 * - One DEALER per peer, opened at start whatever the role: the primary forwards and beats on
 *   them, a starting replica asks on them whether a primary lives, a stale one asks for its
 *   catch-up; ZeroMQ connects and reconnects by itself (100 ms, at most 500 ms), so a peer that
 *   starts later or restarts is found again without any code here.
 * - A dropped peer's socket is closed and opened afresh (linger 0): what was queued for it is
 *   never delivered late, after a catch-up that already covers it.
 * - --peers must name this replica's own --listen at index --replica, the same string the
 *   clients get: a typo there would otherwise make a replica forward to itself or to nobody. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_cli.h"
#include "ps_log.h"
#include "ps_curve.h"
#include "ps_server_replication_int.h"
#include "ps_time.h"
#include "ps_zmq.h"

const char *srv_repl_role_name(int role) {
  static const char *n[] = {"probing", "primary", "backup", "stale", "catching"};
  return role >= 0 && role < 5 ? n[role] : "?";
}

void srv_repl_open_peer(ps_server *s, repl_peer *p) {
  p->sock = ps_zmq_dealer(s->ctx, 500);
  if (!p->sock) return;
  /* With CURVE every replica of the shard holds its server key pair: a peer is reached with it
   * (its ZAP handler accepts that key, ps_curve_auth.c). Without keys each refused the other
   * and the primary ran unreplicated. */
  ps_error err;
  if ((s->repl->curve_pub[0] &&
       ps_curve_setup_client(p->sock, s->opt.curve_secret, s->repl->curve_pub, &err) != PS_OK) ||
      zmq_connect(p->sock, p->url) != 0) {
    zmq_close(p->sock);
    p->sock = NULL;
  }
}

ps_status srv_repl_start(ps_server *s, const char *listen, ps_error *err) {
  const ps_server_options *o = &s->opt;
  if (o->replicas <= 1) return PS_OK;
  if (o->replicas > SRV_REPL_MAX || o->replica >= o->replicas || !o->peers)
    return ps_error_set(err, PS_ERR_INVALID,
                        "--replicas %u --replica %u: need replica < replicas <= %d and --peers",
                        o->replicas, o->replica, SRV_REPL_MAX);
  char *items[SRV_REPL_MAX + 1];
  int n = ps_split_list(o->peers, '|', items, SRV_REPL_MAX + 1);
  if (n != (int)o->replicas) {
    if (n > 0) free(items[0]);
    return ps_error_set(err, PS_ERR_INVALID, "--peers '%s' must list exactly %u URLs (one per "
                        "replica, separated by |)", o->peers, o->replicas);
  }
  srv_repl *x = calloc(1, sizeof *x);
  if (!x) {
    free(items[0]);
    return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  }
  x->self = o->replica;
  x->n = o->replicas;
  x->primary = x->n;
  x->failover_ns = (uint64_t)(o->failover_ms ? o->failover_ms : 1000) * 1000000ull;
  x->beat_ns = x->failover_ns / 4;
  x->started = ps_now_ns();
  x->probe_end = x->started + x->failover_ns;
  s->repl = x;
  ps_status st = PS_OK;
  if (o->curve_secret) {
    if ((st = ps_curve_public(o->curve_secret, x->curve_pub, err)) != PS_OK) {
      free(items[0]);
      return st;
    }
    ps_curve_auth_allow_peer(s->auth, x->curve_pub);
  }
  for (uint32_t i = 0; i < x->n && st == PS_OK; i++) {
    repl_peer *p = &x->peer[i];
    snprintf(p->url, sizeof p->url, "%s", items[i]);
    if (i == x->self) {
      if (strcmp(items[i], listen ? listen : "") != 0)
        st = ps_error_set(err, PS_ERR_INVALID, "--peers '%s': entry %u is '%s', not this "
                          "replica's --listen '%s'", o->peers, i, items[i], listen ? listen : "");
      continue;
    }
    srv_repl_open_peer(s, p);
    if (!p->sock) st = ps_error_set(err, PS_ERR_INVALID, "--peers: cannot connect to '%s': %s",
                                    p->url, zmq_strerror(errno));
  }
  free(items[0]);
  if (st == PS_OK)
    PS_INFO("replica %u of %u of shard %u: asking %u peer(s) for a primary (failover %" PRIu64
            " ms)", x->self, x->n, o->shard, x->n - 1, x->failover_ns / 1000000);
  return st;
}

void srv_repl_stop(ps_server *s) {
  srv_repl *x = s->repl;
  if (!x) return;
  for (uint32_t i = 0; i < x->n; i++) {
    if (x->peer[i].sock) zmq_close(x->peer[i].sock);
    srv_repl_sync_stop(&x->peer[i]);
  }
  srv_repl_log_free(x);
  free(x);
  s->repl = NULL;
}

bool srv_repl_records_complete(const ps_server *s) { return s->repl && s->repl->complete; }

void srv_repl_stats(const ps_server *s, ps_server_stats *out) {
  const srv_repl *x = s->repl;
  if (!x) return;
  out->replicas = x->n;
  out->replica = x->self;
  out->repl_role = srv_repl_role_name(x->role);
  out->repl_primary = x->primary;
  out->repl_epoch = x->epoch;
  out->repl_live = x->role == SRV_REPL_PRIMARY ? srv_repl_live_mask(x) : x->live_mask;
  out->repl_forwarded = x->forwarded;
  out->repl_dropped = x->dropped;
  out->repl_promotions = x->promotions;
  out->repl_refused = x->refused;
  out->repl_catchups = x->catchups;
}

/* ps_server: the main loop of a shard -- its sockets, the intake of messages, and its life
 * from create to a graceful shutdown.
 *
 * The main thread is the only one that touches the ROUTER socket and the server's bookkeeping,
 * so none of it needs a lock; store work goes to the partition threads
 * (ps_server_partition_threads.c) and comes back as completions on an inproc socket polled beside the ROUTER. Each wakeup takes a
 * bounded batch of messages so completions are not starved, and after every message and every
 * batch of completions the loop drains the ready queue (requests held by a checkpoint), so a
 * held request is handled before any message that arrived after it. Every decoded request
 * passes the memory bounds first (ps_server_mem.c: refused when too large, parked while the
 * bytes in flight are over their caps), and the loop starts parked requests once ZeroMQ gave
 * bytes back (its free callback writes to the signal pipe). Shutdown refuses new work,
 * answers every waiter with PS_ERR_UNAVAILABLE and lets what is in flight finish (10 s at most)
 * before the store is flushed and the data dir marked clean. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps_fs.h"
#include "ps_log.h"
#include "ps_curve.h"
#include "ps_server_checkpoint_int.h"
#include "ps_server_connections_int.h"
#include "ps_server_delay_int.h"
#include "ps_server_exactly_once_int.h"
#include "ps_server_follow_int.h"
#include "ps_server_int.h"
#include "ps_server_mem_int.h"
#include "ps_server_ops_int.h"
#include "ps_server_partition_threads_int.h"
#include "ps_server_permissions_int.h"
#include "ps_server_replication_int.h"
#include "ps_server_request_schedule_int.h"
#include "ps_server_serve_int.h"
#include "ps_server_stats_int.h"
#include "ps_time.h"

/* ---------------------------------------------------------------- message intake */

/* Decodes r's frames (the first of `sent`: more than any message has cannot decode); on failure
 * answers when the header parses (it names the request id) or drops. */
/* The memory bounds resume parked requests through the handlers (ps_server_mem_int.h). */
static void unpark_pull(ps_server *s, srv_req *r) { srv_dispatch(s, r, TK_PULL); }
static const srv_unpark_to unpark_to = {
    .stop = srv_exclusive_active, .handle = srv_handle, .pull = unpark_pull};

static void handle_frames(ps_server *s, srv_req *r, size_t sent) {
  ps_frame f[PS_WIRE_MAX_FRAMES];
  for (size_t i = 0; i < r->nfr; i++) {
    f[i].data = zmq_msg_data(&r->fr[i]);
    f[i].size = zmq_msg_size(&r->fr[i]);
    s->traffic.bytes_in += f[i].size;
  }
  ps_error err;
  ps_status st;
  if (sent > PS_WIRE_MAX_FRAMES)
    st = ps_error_set(&err, PS_ERR_PROTO, "a message of %zu frames (at most %u)", sent,
                      PS_WIRE_MAX_FRAMES);
  else
    st = ps_wire_decode(f, r->nfr, &r->msg, &err);
  if (st == PS_OK && r->msg.hdr->is_reply) {
    st = ps_error_set(&err, PS_ERR_PROTO, "a reply sent to a server");
    ps_msg_clear(&r->msg);
  }
  if (st != PS_OK) {
    s->traffic.malformed++;
    Ember__Header *h = r->nfr ? ember__header__unpack(NULL, f[0].size, f[0].data) : NULL;
    if (!h || h->is_reply) {
      if (h) ember__header__free_unpacked(h, NULL);
      srv_req_free(s, r);
      return;
    }
    r->msg.hdr = h; /* for the request id; freed with the request */
    r->h = h;
    srv_reply_error(s, r, st, "%s", err.msg);
    return;
  }
  r->h = r->msg.hdr;
  if (srv_mem_too_large(s, r) || !srv_mem_intake(s, r)) return;
  srv_handle(s, r);
}

static bool recv_one(ps_server *s) {
  srv_req *r = srv_req_new(s, REQ_CLIENT);
  if (!r) return false;
  zmq_msg_init(&r->ident);
  if (zmq_msg_recv(&r->ident, s->router, ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&r->ident);
    srv_req_free(s, r);
    return false;
  }
  r->has_ident = true;
  r->slot = srv_conn_slot(&r->ident);
  int more = zmq_msg_more(&r->ident);
  size_t sent = 0;
  while (more) {
    zmq_msg_t *m, scratch;
    if (r->nfr < PS_WIRE_MAX_FRAMES) m = &r->fr[r->nfr];
    else m = &scratch;
    zmq_msg_init(m);
    if (zmq_msg_recv(m, s->router, 0) < 0) {
      zmq_msg_close(m);
      break;
    }
    sent++;
    more = zmq_msg_more(m);
    if (m == &scratch) zmq_msg_close(m);
    else r->nfr++;
  }
  if (r->nfr == 0) {
    /* No header: nothing to answer. */
    s->traffic.malformed++;
    srv_req_free(s, r);
    return true;
  }
  r->fd = zmq_msg_get(&r->fr[0], ZMQ_SRCFD); /* its disconnect drops it if it still waits */
  if (srv_mem_hs_young(s)) srv_mem_hs_seen(s, r->fd); /* authenticated */
  handle_frames(s, r, sent);
  return true;
}

/* ---------------------------------------------------------------- lifecycle */

/* The coordinator holds ranks per connection, the restore guard remembers who trains, the
 * requests waiting for a connection must go with it: all need to hear when one closes. With
 * CURVE, the connections accepted are watched until they deliver a message (ps_server_mem.c).
 * A connection ZeroMQ could not accept (the open-file limit) is heard too, to be logged:
 * ZeroMQ retries silently, and clients just time out. */
static ps_status monitor_start(ps_server *s, ps_error *err) {
  char ep[64];
  snprintf(ep, sizeof ep, "inproc://ember-server-monitor-%p", (void *)s);
  const int events = ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_ACCEPT_FAILED | (s->auth ? ZMQ_EVENT_ACCEPTED : 0);
  if (zmq_socket_monitor(s->router, ep, events) != 0 ||
      !(s->mon = zmq_socket(s->ctx, ZMQ_PAIR)) || zmq_connect(s->mon, ep) != 0) {
    return ps_error_set(err, PS_ERR_INTERNAL, "cannot monitor the connections of %s: %s",
                        s->endpoint, zmq_strerror(errno));
  }
  int zero = 0;
  zmq_setsockopt(s->mon, ZMQ_LINGER, &zero, sizeof zero);
  return PS_OK;
}

/* CURVE on the ROUTER, its ZAP handler first (common/ps_curve_auth.c); without a key, one WARN. */
static ps_status auth_setup(ps_server *s, const ps_server_options *o, ps_error *err) {
  if (!o->curve_secret) {
    PS_WARN("unauthenticated: no --curve-secret/--curve-clients, so anyone who can reach %s "
            "can %s every table (docs/OPERATIONS.md, Authentication)", o->listen,
            o->serve_dir ? "read (not change: --serve is read-only)" : "read and change");
    return PS_OK;
  }
  if (!o->curve_clients)
    return ps_error_set(err, PS_ERR_INVALID, "a CURVE secret key without client keys");
  ps_status st = ps_curve_auth_start(s->ctx, o->curve_clients, &s->auth, err);
  if (st == PS_OK) st = ps_curve_setup_server(s->router, o->curve_secret, err);
  /* A peer without a key may fill a handshake command up to R: it holds it this long at most
   * (libzmq's default is 30 s), and only SRV_HS_HEAVY such at once (srv_mem_hs_check). */
  int ivl = SRV_HS_IVL_MS;
  if (st == PS_OK) zmq_setsockopt(s->router, ZMQ_HANDSHAKE_IVL, &ivl, sizeof ivl);
  if (st == PS_OK)
    PS_INFO("CURVE: encrypted; serving only the %zu client key(s) in --curve-clients",
            ps_curve_keyset_size(o->curve_clients));
  return st;
}

/* A training shard's state: the store under the data dir, its metadata, and the recovery of
 * the last checkpoint after an unclean stop. */
static ps_status open_data_dir(ps_server *s, ps_error *err) {
  const ps_server_options *opt = &s->opt;
  ps_status st;
  if ((st = ps_mkdir_p(s->data_dir)) != PS_OK) {
    ps_error_set(err, st, "cannot create data dir %s: %s", s->data_dir, strerror(errno));
    return st;
  }
  char dbdir[2100];
  snprintf(dbdir, sizeof dbdir, "%s/store", s->data_dir);
  ps_store_options so = {.path = dbdir,
                         .cache_bytes = opt->cache_bytes,
                         .partitions = s->nthreads ? s->nthreads : 1,
                         .durability = PS_DURABILITY_NONE};
  if ((st = ps_store_open(&so, &s->store, err)) != PS_OK) {
    ps_error_prefix(err, "cannot open the store in %s: ", dbdir);
    return st;
  }
  bool clean = true;
  if ((st = srv_meta_load(s, &clean, err)) != PS_OK) return st;
  if ((st = srv_identity_check(s, err)) != PS_OK) return st;
  ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  /* Nobody can commit a prepare made before this start: its staging is garbage, clean or not. */
  srv_ckpt_discard_staged(s);
  if ((st = srv_tables_adopt_store(s)) != PS_OK) return st;
  if (!clean && s->last.have) {
    /* The last run died without a flush: the database holds an arbitrary mix of flushed
     * rows. The last committed checkpoint is the consistent state to come back to: every
     * shard has it (two-phase commit, ps_server_checkpoint.c). */
    uint64_t step = 0;
    PS_WARN("previous run did not shut down cleanly: restoring checkpoint %s (step %" PRIu64 ")",
            s->last.path, s->last.step);
    if ((st = srv_restore(s, s->last.path, s->last.step, &step, err)) == PS_OK)
      srv_drop_sync_all(s); /* none at start; as after every restore */
    if (st != PS_OK) {
      char why[PS_ERROR_MSG_MAX];
      snprintf(why, sizeof why, "%s", err->msg);
      ps_error_set(err, st,
                   "restoring the last checkpoint failed: %s; the data dir %s stays marked "
                   "unclean, so every start tries again",
                   why, s->data_dir);
      return st;
    }
  } else if (!clean) {
    PS_WARN("previous run did not shut down cleanly and there is no checkpoint: serving what "
            "the database holds");
  }
  /* Only now may a shutdown mark the data dir clean: a start that failed before (a recovery
   * that did not restore) must leave it as it found it. */
  s->meta_ok = true;
  srv_log_existing_state(s);
  if ((st = srv_meta_save(s, false)) != PS_OK) {
    ps_error_set(err, st, "cannot write the metadata of %s", s->data_dir);
    return st;
  }
  return PS_OK;
}

ps_status ps_server_create(const ps_server_options *opt, ps_server **out, ps_error *err_out) {
  *out = NULL;
  if (!opt || opt->shards == 0 || opt->shard >= opt->shards ||
      (!opt->serve_dir && (!opt->data_dir || !opt->data_dir[0])) ||
      (opt->follow && !opt->serve_dir) ||
      (opt->data_dir && strlen(opt->data_dir) > 1900) || opt->threads > 256)
    return ps_error_set(err_out, PS_ERR_INVALID,
                        "bad server options (need shard < shards, a data dir of at most 1900 "
                        "bytes or a checkpoint to serve, at most 256 threads)");
  /* The steps below fill a local error; err_out gets it only on failure (the convention). */
  ps_error local, *err = &local;
  ps_server *s = calloc(1, sizeof *s);
  if (!s) return ps_error_set(err_out, PS_ERR_NOMEM, "out of memory");
  s->opt = *opt;
  s->sigpipe[0] = s->sigpipe[1] = -1;
  s->started_ns = ps_now_ns();
  s->nthreads = opt->threads;
  snprintf(s->data_dir, sizeof s->data_dir, "%s", opt->data_dir ? opt->data_dir : "");
  s->opt.data_dir = s->data_dir;
  s->opt.listen = NULL;
  ps_status st = PS_ERR_NOMEM;
  ps_error_set(err, st, "out of memory"); /* until a step below says otherwise */
  s->tables = calloc(PS_WIRE_MAX_TABLE + 1, sizeof *s->tables);
  if (!s->tables || srv_stats_init(s) != PS_OK) goto fail;
  for (int i = 0; i < SRV_NOPS; i++) {
    srv_opstat *o = &s->ops[i];
    if (!(o->lat = ps_hist_create()) || !(o->queue = ps_hist_create()) ||
        !(o->svc = ps_hist_create()))
      goto fail;
  }
  s->inline_part.s = s;
  s->finish = srv_finish;
  if (srv_mem_init(s) != PS_OK || srv_once_init(s) != PS_OK || srv_permit_init(s) != PS_OK ||
      srv_sched_init(s) != PS_OK)
    goto fail;
  if (opt->serve_dir) st = srv_serve_open(s, err);
  else st = open_data_dir(s, err);
  if (st != PS_OK) goto fail;
  srv_coord_reply io = srv_coord_io(s);
  if (opt->shard == 0 && !(s->coord = srv_coord_create(&io))) {
    st = PS_ERR_NOMEM;
    goto fail;
  }
  s->ctx = zmq_ctx_new();
  if (!s->ctx) {
    st = ps_error_set(err, PS_ERR_INTERNAL, "cannot create a ZeroMQ context: %s",
                      zmq_strerror(errno));
    goto fail;
  }
  if (s->nthreads && (st = srv_parts_start(s)) != PS_OK) {
    ps_error_set(err, st, "cannot start %u partition threads", s->nthreads);
    goto fail;
  }
  if (pipe(s->sigpipe) != 0) {
    st = ps_error_set(err, PS_ERR_IO, "pipe: %s", strerror(errno));
    goto fail;
  }
  fcntl(s->sigpipe[0], F_SETFL, O_NONBLOCK);
  fcntl(s->sigpipe[1], F_SETFL, O_NONBLOCK);
  if (s->opt.follow && (st = srv_follow_start(s, err)) != PS_OK) goto fail;
  if (opt->listen) {
    s->router = zmq_socket(s->ctx, ZMQ_ROUTER);
    int hwm = SRV_PEER_HWM, linger = 2000; /* a non-reader's queue, bounded */
    int64_t maxmsg = (int64_t)srv_mem_request_cap(s); /* a larger frame: disconnected, nothing buffered */
    zmq_setsockopt(s->router, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s->router, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s->router, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s->router, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    if ((st = auth_setup(s, opt, err)) != PS_OK) goto fail;
    if (zmq_bind(s->router, opt->listen) != 0) {
      st = ps_error_set(err, PS_ERR_UNAVAILABLE, "cannot listen on %s: %s", opt->listen,
                        zmq_strerror(errno));
      goto fail;
    }
    size_t len = sizeof s->endpoint;
    zmq_getsockopt(s->router, ZMQ_LAST_ENDPOINT, s->endpoint, &len);
    if ((st = monitor_start(s, err)) != PS_OK) goto fail;
    if ((st = srv_repl_start(s, opt->listen, err)) != PS_OK) goto fail;
  }
  PS_INFO("shard %u of %u: %s %s, %u partition threads, request cap %zu MiB%s%s",
          opt->shard, opt->shards, s->serving ? "serving" : "data dir",
          s->serving ? s->last.path : s->data_dir, s->nthreads, srv_mem_request_cap(s) >> 20,
          s->router ? ", listening on " : "", s->endpoint);
  srv_stats_publish(s); /* so that ps_server_stats_read always has a snapshot */
  *out = s;
  return PS_OK;
fail:
  ps_server_destroy(&s);
  if (err_out) *err_out = *err;
  return st;
}

static void drain_waiters(ps_server *s) {
  for (uint32_t id = 1; id <= s->max_table; id++) {
    srv_table *t = s->tables[id];
    if (!t) continue;
    srv_reply_unavailable_all(s, &t->wait_head, &t->wait_tail);
  }
  s->deferred_now = 0;
  srv_mem_drop_parked(s, true);
  if (s->coord) srv_coord_drain(s->coord);
  srv_repl_drain(s);
  /* Exclusive ops not started yet and held requests are refused too. */
  srv_exclusive_refuse_queued(s);
}

static void drain_done(ps_server *s) {
  srv_parts_drain_done(s);
  srv_run_ready(s);
}

ps_status ps_server_run(ps_server *s) {
  if (!s->router) return PS_ERR_INVALID;
  bool stopping = false;
  uint64_t stop_deadline = 0;
  for (;;) {
    uint64_t now = ps_now_ns();
    if (srv_stats_due(s, now)) srv_stats_publish(s);
    long timeout_ms = 100;
    /* Rounded up (the loop never spins; the delay's timerfd wakes it on time); a long delay
     * must not stretch the 100 ms tick. */
    bool sent;
    uint64_t due_ms = (srv_release_delayed(s, &sent) + 999999) / 1000000;
    if (sent && srv_exclusive_pending(s)) srv_try_exclusive(s); /* it waited for what was held */
    if (due_ms && due_ms < (uint64_t)timeout_ms) timeout_ms = (long)due_ms;
    uint64_t next = s->coord ? srv_coord_expire(s->coord, now) : 0;
    if (next) {
      long ms = next > now ? (long)((next - now) / 1000000 + 1) : 0;
      if (ms < timeout_ms) timeout_ms = ms;
    }
    long repl_ms = srv_repl_tick(s); /* heartbeats, failover (ps_server_replication.c) */
    if (s->repl) srv_run_ready(s); /* what the tick released (a promotion, acks) */
    if (repl_ms < timeout_ms) timeout_ms = repl_ms;
    /* what waits for a worker lost a while ago fails (ps_server_request_schedule.c) */
    srv_ranks_tick(s);
    if (srv_mem_hs_young(s)) { /* CURVE: connections not authenticated yet, looked at every 10 ms */
      long hs_ms = srv_mem_hs_check(s);
      if (hs_ms < timeout_ms) timeout_ms = hs_ms;
    }
    if (!stopping && atomic_load(&s->stop)) {
      stopping = true;
      s->stopping = true;
      stop_deadline = now + 10000000000ull;
      PS_INFO("shutting down: finishing %" PRIu64 " requests in flight", s->inflight);
      drain_waiters(s);
    }
    if (stopping) {
      if (s->done) srv_parts_drain_done(s);
      srv_try_exclusive(s);
      srv_run_ready(s);
      if ((s->inflight == 0 && !srv_exclusive_pending(s)) || now > stop_deadline) break;
    }
    zmq_pollitem_t items[5 + SRV_REPL_MAX] = {
        {.socket = s->router, .events = stopping ? 0 : ZMQ_POLLIN},
        {.socket = s->done, .events = ZMQ_POLLIN},
        {.fd = s->sigpipe[0], .events = ZMQ_POLLIN},
        {.socket = s->mon, .events = ZMQ_POLLIN},
    };
    int ni = 3;
    if (!s->done) {
      items[1] = items[2];
      ni = 2;
    }
    if (s->mon) items[ni++] = items[3];
    int nr = srv_repl_poll_items(s, items + ni);
    int nd = 0; /* --inject-delay-us: woken when the next held reply is due, to the us */
    if (srv_delay_fd(s) >= 0)
      items[ni + nr + nd++] = (zmq_pollitem_t){.fd = srv_delay_fd(s), .events = ZMQ_POLLIN};
    int rc = zmq_poll(items, ni + nr + nd, stopping ? 10 : timeout_ms);
    if (rc < 0) {
      if (errno == EINTR) continue;
      if (errno == ETERM) break;
      PS_ERROR_RL("poll: %s", zmq_strerror(errno));
      break;
    }
    if (s->mon && (items[ni - 1].revents & ZMQ_POLLIN)) srv_peers_poll(s);
    srv_drop_gone_peers(s); /* closed connections, also those a handler's poll saw */
    srv_repl_poll(s, items + ni, nr);
    if (s->repl) srv_run_ready(s); /* requests its peers' acks released */
    if (items[ni - (s->mon ? 2 : 1)].revents & ZMQ_POLLIN) {
      char buf[16];
      while (read(s->sigpipe[0], buf, sizeof buf) > 0) {
      }
    }
    if (s->done && (items[1].revents & ZMQ_POLLIN)) drain_done(s);
    /* A new version, opened by the watcher: STATS and /metrics show the step served at once. */
    if (s->follow && srv_follow_tick(s)) srv_stats_publish(s);
    srv_mem_unpark(s, &unpark_to); /* replies released meanwhile (woken by the pipe, or the tick) */
    if (!stopping && (items[0].revents & ZMQ_POLLIN)) {
      /* A bounded batch per wakeup, so completions are not starved by a flood of requests. */
      for (int i = 0; i < 256 && recv_one(s); i++) {
        srv_run_ready(s);
        if (s->done && (i & 15) == 15) drain_done(s);
      }
    }
  }
  if (s->inflight) PS_WARN("%" PRIu64 " requests still in flight at shutdown", s->inflight);
  return PS_OK;
}

void ps_server_request_stop(ps_server *s) {
  if (!s) return;
  atomic_store(&s->stop, 1);
  if (s->sigpipe[1] >= 0) {
    char c = 1;
    ssize_t w = write(s->sigpipe[1], &c, 1);
    (void)w;
  }
}

const char *ps_server_endpoint(const ps_server *s) { return s->endpoint; }

ps_status ps_server_feed(ps_server *s, const void *const *frames, const size_t *sizes,
                         size_t nframes, ps_server_sink sink, void *ctx) {
  if (s->router || s->nthreads) return PS_ERR_INVALID;
  s->sink = sink;
  s->sink_ctx = ctx;
  srv_req *r = srv_req_new(s, REQ_CLIENT);
  if (!r) return PS_ERR_NOMEM;
  if (nframes == 0) {
    s->traffic.malformed++;
    srv_req_free(s, r);
    return PS_OK;
  }
  for (size_t i = 0; i < nframes && i < PS_WIRE_MAX_FRAMES; i++) {
    zmq_msg_init_size(&r->fr[i], sizes[i]);
    if (sizes[i]) memcpy(zmq_msg_data(&r->fr[i]), frames[i], sizes[i]);
    r->nfr++;
  }
  handle_frames(s, r, nframes);
  srv_run_ready(s);
  srv_mem_unpark(s, &unpark_to);
  uint64_t now = ps_now_ns();
  if (s->coord) srv_coord_expire(s->coord, now);
  srv_try_exclusive(s);
  srv_run_ready(s);
  return PS_OK;
}

void ps_server_destroy(ps_server **sp) {
  if (!sp || !*sp) return;
  ps_server *s = *sp;
  *sp = NULL;
  s->stopping = true;
  if (s->done) drain_done(s); /* what a finished checkpoint released is refused, as stopping */
  drain_waiters(s);
  bool sent;
  srv_release_delayed(s, &sent); /* held replies leave now */
  if (sent && srv_exclusive_pending(s)) srv_try_exclusive(s);
  if (s->mon) {
    zmq_socket_monitor(s->router, NULL, 0);
    zmq_close(s->mon);
    s->mon = NULL;
  }
  if (s->router) {
    zmq_close(s->router);
    s->router = NULL;
  }
  ps_curve_auth_stop(&s->auth);
  srv_repl_stop(s);
  srv_parts_stop(s);
  srv_follow_stop(s); /* closes every version, s->store too */
  /* Requests still parked (held, ready, or an exclusive op that never ran) are freed
   * unanswered. */
  srv_sched_free(s);
  if (s->serving || s->export) {
    ps_store_close(&s->store); /* read-only: nothing to flush, no data dir to mark */
    srv_serve_close(s);
  } else if (s->store) {
    ps_error err;
    ps_status st = ps_store_flush(s->store, &err);
    if (st != PS_OK) PS_ERROR("flush at shutdown failed: %s", err.msg);
    ps_store_close(&s->store);
    if (st == PS_OK && s->meta_ok && srv_meta_save(s, true) != PS_OK)
      PS_WARN("could not mark the data dir clean");
  }
  if (s->coord) srv_coord_destroy(&s->coord);
  srv_permit_free(s);
  srv_once_free(s);
  if (s->tables) {
    for (uint32_t i = 0; i <= PS_WIRE_MAX_TABLE; i++) srv_table_free(s->tables[i]);
    free(s->tables);
  }
  srv_req_destroy_pool(s);
  for (int i = 0; i < SRV_NOPS; i++) {
    ps_hist_destroy(&s->ops[i].lat);
    ps_hist_destroy(&s->ops[i].queue);
    ps_hist_destroy(&s->ops[i].svc);
  }
  if (s->ctx) zmq_ctx_term(s->ctx);
  srv_mem_free(s); /* after ZeroMQ released the last reply */
  if (s->sigpipe[0] >= 0) close(s->sigpipe[0]);
  if (s->sigpipe[1] >= 0) close(s->sigpipe[1]);
  srv_delay_close(s);
  srv_stats_free(s);
  free(s);
}

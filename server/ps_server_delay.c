/* ps_server_delay: ps-server --inject-delay-us D, a stand-in for a network hop and a queue in
 * benchmarks and tests. Every reply but PING's and STATS' leaves D microseconds after it was
 * ready.
 *
 * Design decisions:
 * - Held at the one place replies are sent (srv_reply), so pulls, pushes, STEP, prefetches, the
 *   coordinator's answers and errors all pay the same hop, as on a real network. The probes do
 *   not: PING (readiness checks with short timeouts: ember-local, the tests' pt_start) and
 *   STATS (an operator or a test looks at a shard while its replies are held).
 * - No thread waits: the request (its header packed, its values moved in) waits in a FIFO that
 *   the main loop drains, so the shard keeps taking and answering other requests meanwhile. D
 *   is fixed, so the FIFO is in due order. The loop is woken at the head's due time by a
 *   timerfd among its poll items (CLOCK_MONOTONIC, as ps_now_ns): zmq_poll's timeout counts
 *   whole milliseconds, which made a 1000 us hop 1-2 ms.
 * - The request stays alive and counted in flight while held: an exactly-once push is settled
 *   only when its reply leaves, so a copy that arrives meanwhile waits for the original's reply,
 *   a checkpoint or restore starts only once no reply is held (as before any store work in
 *   flight), and a graceful shutdown sends what is held before it stops (all of it at once).
 * - Only replies over the socket are held (the in-process sink of ps_server_feed has no loop). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "ps_log.h"
#include "ps_server_delay_int.h"
#include "ps_server_int.h"
#include "ps_time.h"

/* The held replies of a shard with --inject-delay-us (made at the first held reply). */
struct srv_delay {
  srv_req *head, *tail; /* not yet due, FIFO (the delay is fixed, so in due order) */
  int fd;               /* a timerfd armed at the head's due time (-1: none yet) */
  bool armed;
};

bool srv_delay_hold(ps_server *s, srv_req *r, const Ember__Header *rh, zmq_msg_t *keys,
                    zmq_msg_t *values) {
  if (!s->opt.inject_delay_us || r->delay_sent || !s->router || s->stopping ||
      rh->op == EMBER__OP__OP_STATS || rh->op == EMBER__OP__OP_PING)
    return false;
  if (!s->delay) {
    if (!(s->delay = calloc(1, sizeof *s->delay))) return false; /* out of memory: no delay */
    s->delay->fd = -1;
  }
  size_t hs = ember__header__get_packed_size(rh);
  if (zmq_msg_init_size(&r->delay_hdr, hs) != 0) return false; /* out of memory: no delay */
  ember__header__pack(rh, zmq_msg_data(&r->delay_hdr));
  r->delay_values = values != NULL;
  r->delay_keys = keys != NULL; /* a REFRESH reply's positions frame */
  if (keys) {
    zmq_msg_init(&r->delay_keys_msg);
    zmq_msg_move(&r->delay_keys_msg, keys);
  }
  if (values) {
    if (r->has_out) zmq_msg_close(&r->out);
    zmq_msg_init(&r->out);
    zmq_msg_move(&r->out, values);
    r->has_out = true;
  }
  r->delay_sent = true;
  r->delay_due = ps_now_ns() + s->opt.inject_delay_us * 1000u;
  s->inflight++;
  srv_list_push(&s->delay->head, &s->delay->tail, r);
  return true;
}

/* Sends r's held reply: its header unpacked again, so srv_reply does exactly what it would
 * have done D ago (the exactly-once settling, the latency split, the send). */
static void release(ps_server *s, srv_req *r) {
  zmq_msg_t *hm = &r->delay_hdr;
  Ember__Header *rh = ember__header__unpack(NULL, zmq_msg_size(hm), zmq_msg_data(hm));
  zmq_msg_close(hm);
  if (!rh) { /* cannot happen (we packed it) short of memory: the reply is lost */
    PS_ERROR_RL("a held reply could not be unpacked: dropped");
    srv_req_free(s, r);
    return;
  }
  zmq_msg_t out;
  zmq_msg_init(&out);
  if (r->delay_values) {
    zmq_msg_move(&out, &r->out);
    zmq_msg_close(&r->out);
    r->has_out = false;
  }
  srv_reply_keys(s, r, rh, r->delay_keys ? &r->delay_keys_msg : NULL,
                 r->delay_values ? &out : NULL);
  if (r->delay_keys) zmq_msg_close(&r->delay_keys_msg);
  r->delay_keys = false;
  zmq_msg_close(&out);
  ember__header__free_unpacked(rh, NULL);
}

/* Wakes the loop at `due` (ns, ps_now_ns's clock; 0: disarmed). The timerfd is made on first
 * use; without one (it failed) the poll timeout still releases, to the millisecond. */
static void arm(srv_delay *d, uint64_t due) {
  if (d->fd < 0 && due) {
    d->fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (d->fd < 0) PS_WARN_RL("--inject-delay-us: no timerfd (%s)", strerror(errno));
  }
  if (d->fd < 0) return;
  uint64_t n;
  while (read(d->fd, &n, sizeof n) > 0) { /* clear an expiry already seen */
  }
  struct itimerspec t;
  memset(&t, 0, sizeof t);
  t.it_value.tv_sec = (time_t)(due / 1000000000u);
  t.it_value.tv_nsec = (long)(due % 1000000000u);
  timerfd_settime(d->fd, TFD_TIMER_ABSTIME, &t, NULL);
}

int srv_delay_fd(const ps_server *s) { return s->delay ? s->delay->fd : -1; }

void srv_delay_close(ps_server *s) {
  if (!s->delay) return;
  if (s->delay->fd >= 0) close(s->delay->fd);
  free(s->delay);
  s->delay = NULL;
}

uint64_t srv_release_delayed(ps_server *s, bool *sent_out) {
  srv_delay *d = s->delay;
  *sent_out = false;
  if (!d) return 0;
  uint64_t now = ps_now_ns(), next = 0;
  bool sent = false;
  while (d->head) {
    srv_req *r = d->head;
    if (!s->stopping && r->delay_due > now) {
      next = r->delay_due - now;
      break;
    }
    d->head = r->next;
    if (!d->head) d->tail = NULL;
    r->next = NULL;
    s->inflight--;
    release(s, r);
    sent = true;
  }
  if (sent || (next && !d->armed)) arm(d, next ? now + next : 0);
  d->armed = next != 0;
  *sent_out = sent;
  return next;
}

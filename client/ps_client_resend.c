/* ps_client_resend: re-sending what a lost connection or a left replica dropped, and failing
 * over between a shard's replicas (see ps_client_int.h and ps_client_io.c, which owns the
 * in-flight table these walk).
 *
 * Lost sub-requests go again in the order they were first sent (request ids grow), so a push
 * is never overtaken by the STEP that followed it: a new primary must not apply the step first.
 * A re-sent push says so (retry) and carries the shard's floor as it is now, so the shard
 * answers it from its exactly-once records instead of applying it twice. Leaving a replica
 * re-sends every request outstanding there, not only the one that was refused: zmq_disconnect
 * drops the other answers too, and they would otherwise wait out their whole bound. */
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "ps_client_int.h"
#include "ps_log.h"
#include "ps_time.h"

/* A push about to be re-sent says so (retry) and carries the shard's floor as it is now. */
static void mark_retry(ps_client *c, cl_sub *s) {
  Ember__Header *h =
      ember__header__unpack(NULL, zmq_msg_size(&s->part[0]), zmq_msg_data(&s->part[0]));
  if (!h) return;
  h->retry = true;
  h->seq_floor = c->srv[s->srv].seq_floor;
  zmq_msg_t m;
  if (zmq_msg_init_size(&m, ember__header__get_packed_size(h)) == 0) {
    ember__header__pack(h, zmq_msg_data(&m));
    zmq_msg_move(&s->part[0], &m); /* releases the header sent before */
    zmq_msg_close(&m);
  }
  ember__header__free_unpacked(h, NULL);
}

static int by_rid(const void *a, const void *b) {
  uint64_t x = (*(cl_sub *const *)a)->rid, y = (*(cl_sub *const *)b)->rid;
  return x < y ? -1 : x > y;
}

/* Re-sends the sub-requests of shard srv whose connection was lost (pushes marked retry), in
 * the order they were first sent (request ids grow): a push goes again before the STEP that
 * followed it, which a new primary must not apply first. */
void cl_resend_lost(ps_client *c, uint32_t srv) {
  size_t n = 0;
  for (size_t i = 0; i < c->npend; i++) n += c->pend[i]->srv == srv && c->pend[i]->lost;
  cl_sub **lost = n ? malloc(n * sizeof *lost) : NULL;
  size_t k = 0;
  for (size_t i = 0; lost && i < c->npend; i++)
    if (c->pend[i]->srv == srv && c->pend[i]->lost) lost[k++] = c->pend[i];
  if (lost) qsort(lost, k, sizeof *lost, by_rid); /* without memory: the table's order */
  for (size_t i = 0; i < (lost ? k : c->npend); i++) {
    cl_sub *s = lost ? lost[i] : c->pend[i];
    if (s->srv != srv || !s->lost) continue;
    s->lost = false;
    c->resent++;
    if (s->seq) mark_retry(c, s);
    cl_sub_send(c, s, true);
  }
  free(lost);
}

void cl_failover(ps_client *c, uint32_t srv, uint32_t to, const char *why) {
  cl_server *S = &c->srv[srv];
  if (!S->lost_ns) {
    S->lost_ns = ps_now_ns();
    S->lost_from = S->cur;
  }
  PS_WARN("shard %u: leaving %s (replica %u): %s; trying %s (replica %u)", srv, S->url, S->cur,
          why, S->rep[to], to);
  zmq_disconnect(S->sock, S->url); /* drops what was queued for it: re-sent below */
  /* Every request outstanding there goes again (frames kept: cl_req_get), not only the refused
   * one: the disconnect drops the others' answers too, and they would wait out their bound. */
  for (size_t k = 0; k < c->npend; k++)
    if (c->pend[k]->srv == srv && c->pend[k]->req->keep) c->pend[k]->lost = true;
  S->cur = to;
  S->moved_ns = ps_now_ns();
  memcpy(S->url, S->rep[to], sizeof S->url);
  zmq_connect(S->sock, S->url);
  S->down = false;
  /* Re-sent at once, so that they go before any request started from now on (a push before
   * the STEP that follows it). */
  cl_resend_lost(c, srv);
}

void cl_failover_check(ps_client *c) {
  if (!c->replicated) return;
  const uint64_t now = ps_now_ns(), bound = (uint64_t)c->opt.failover_ms * 1000000ull;
  for (uint32_t i = 0; i < c->nsrv; i++) {
    cl_server *S = &c->srv[i];
    if (!S->moved_ns || now - S->moved_ns < bound) continue;
    cl_failover(c, i, (S->cur + 1) % S->nrep, "no connection within --failover-ms");
  }
}


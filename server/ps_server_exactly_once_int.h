/* ps_server_exactly_once_int.h: the exactly-once table of a shard -- which pushes of which
 * client it has taken, so that a re-sent push is answered without being applied twice. Private
 * to server/ (and its unit test); the server's use of it is the last section, srv_once_intake
 * and srv_once_replied above all.
 *
 * A client numbers its pushes to each shard 1, 2, 3, ... (seq) and sends with each the lowest
 * seq it still waits for (its floor): every seq below the floor is settled for the client, it
 * will never send it again. Per client the table keeps `base` (every seq below it is settled),
 * a bitmap of the seqs taken in [base, base + 64 * words) and of those that failed, and the
 * taken pushes whose reply has not left yet (their request, so that a copy arriving meanwhile
 * is answered with the original's reply). This is RAMCloud's RIFL scheme (client id, sequence
 * number, acknowledged floor) without its durable completion records.
 *
 * Design decisions:
 * - Bounded memory. A floor moves `base` up, so a client's bitmap covers only the pushes it has
 *   in flight: one 64-bit word for the usual handful. A seq at or past base + SRV_ONCE_WINDOW is
 *   refused (the client keeps under that bound itself). A client with nothing in flight that
 *   has been silent for SRV_ONCE_IDLE_NS is forgotten (no push is re-sent later than its
 *   client's request bound, 30 s by default), and at most SRV_ONCE_MAX_CLIENTS are kept (the
 *   least recently heard of is forgotten first).
 * - `first`: the first seq this table saw of a client. Anything the client sent before it went
 *   to an earlier life of the shard (a restart) or arrived before the client was forgotten, so
 *   a re-send below it, or a re-send from a client the table does not know, cannot be told
 *   apart from a push that was applied: SRV_ONCE_UNKNOWN, which the server refuses as "may or
 *   may not have been applied" (the honest answer of a shard without the record).
 * - Nothing here is persisted: exactly-once holds within one life of a shard (docs/DESIGN.md,
 *   "Exactly-once pushes"). A restore forgets everything (srv_once_clear), since the rows the
 *   records speak of were rolled back. */
#ifndef PS_SERVER_EXACTLY_ONCE_INT_H
#define PS_SERVER_EXACTLY_ONCE_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "ps_server.h"
#include "ps_wire.h"

#define SRV_ONCE_WINDOW PS_WIRE_SEQ_WINDOW          /* seqs unsettled per client and shard */
#define SRV_ONCE_IDLE_NS (600ull * 1000000000ull)   /* a silent client is forgotten after it */
#define SRV_ONCE_MAX_CLIENTS 65536u

typedef struct srv_once srv_once;

typedef enum srv_once_verdict {
  SRV_ONCE_APPLY,    /* new: apply it; in flight (with its request) until srv_once_settle */
  SRV_ONCE_DONE,     /* taken before, and its reply has left: answer OK, apply nothing */
  SRV_ONCE_FAILED,   /* taken before and it failed: answer so, apply nothing */
  SRV_ONCE_INFLIGHT, /* taken before, its reply not yet sent: *orig is that request */
  SRV_ONCE_UNKNOWN,  /* a re-send the table has no record of (see `first` above) */
  SRV_ONCE_TOO_MANY, /* seq at or past base + SRV_ONCE_WINDOW */
  SRV_ONCE_NOMEM
} srv_once_verdict;

srv_once *srv_once_create(void);
void srv_once_destroy(srv_once **x);
/* The push (client, seq) with the client's floor; retry: the client re-sends it. req is what
 * SRV_ONCE_INFLIGHT later returns in *orig for a copy. now_ns: the clock of the idle bound. */
srv_once_verdict srv_once_check(srv_once *x, uint64_t client, uint64_t seq, uint64_t floor,
                              bool retry, uint64_t now_ns, void *req, void **orig);
/* The push taken with SRV_ONCE_APPLY was answered: ok or failed. */
void srv_once_settle(srv_once *x, uint64_t client, uint64_t seq, bool ok);
/* Forgets every client (a restore rolled the rows back). */
void srv_once_clear(srv_once *x);
/* Clients known; copies answered without applying (DONE, FAILED, INFLIGHT); re-sends refused
 * as UNKNOWN. */
void srv_once_counts(const srv_once *x, uint64_t *clients, uint64_t *duplicates,
                    uint64_t *unknown);

/* ---- the server's side: a shard's records (s->once) and its requests */
typedef struct srv_exactly_once srv_exactly_once;
typedef struct srv_req srv_req;

/* Creates the records (and reads EMBER_TEST_DROP_REPLY); PS_ERR_NOMEM without memory. */
ps_status srv_once_init(ps_server *s);
void srv_once_free(ps_server *s);
/* Forgets every client (a restore, a catch-up's base: the rows the records speak of changed). */
void srv_once_forget(ps_server *s);
/* The STATS counts (srv_once_counts); left as they are when there are no records. */
void srv_once_stats(const ps_server *s, uint64_t *clients, uint64_t *duplicates,
                    uint64_t *unknown);
/* A push that passed its content checks: true when r was answered (a copy: with the original's
 * outcome, now or when the original's reply leaves) and must not be applied; false: apply it
 * (a push without a client id, or a new one, now recorded). complete: this replica saw every
 * push its shard ever took (srv_repl_records_complete), so a re-send it has no record of is
 * new, not unknown. */
bool srv_once_intake(ps_server *s, srv_req *r, bool complete);
/* r's reply rh is being sent (or r is dropped): settles r's record and answers its copies. */
void srv_once_replied(ps_server *s, srv_req *r, const Ember__Header *rh);

#endif

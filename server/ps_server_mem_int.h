/* ps_server_mem_int.h: the memory bounds of a shard (ps_server_mem.c) -- the request cap, the
 * bytes that requests and unreleased replies hold per connection and in all, requests parked
 * until bytes come back, sync pushes charged until their step is applied, and CURVE peers that
 * fill a handshake. Private to server/. Main thread unless it says otherwise. */
#ifndef PS_SERVER_MEM_INT_H
#define PS_SERVER_MEM_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "ps_server.h"
#include "ps_wire.h"

/* Connections are told apart for the bytes-in-flight cap by a hash of their routing id. */
#define SRV_CONN_SLOTS 4096u
/* At most this many requests wait for bytes in flight to come back. */
#define SRV_PARK_MAX 1024u
/* A released pull reply buffer this large is kept for the next pull. */
#define SRV_SPARE_MIN ((size_t)1 << 20)
#define SRV_SPARE_MAX ((size_t)64 << 20)
/* CURVE: a peer is given this long to authenticate (ZMQ_HANDSHAKE_IVL), and at most
 * SRV_HS_HEAVY connections may have received over SRV_HS_BYTES without delivering a message
 * (a handshake is < 1 KB: the rest is a frame, possibly a peer with no key filling a handshake
 * command up to R); newer ones are closed. */
#define SRV_HS_IVL_MS 5000
#define SRV_HS_HEAVY 2u
#define SRV_HS_BYTES ((uint64_t)64 << 10)
/* What a request costs besides its frames (its srv_req and ZeroMQ's message structures). */
#define SRV_REQ_COST ((size_t)1024)
enum { PARK_HANDLE = 100 };
/* Buffers of applied sync steps kept for the next steps, in all (ps_server_partition_threads.c):
 * reused, they spare a large push its page faults; beyond this they are freed. */
#define SRV_SYNC_KEEP ((size_t)16 << 20)

typedef struct srv_req srv_req;
typedef struct srv_mem srv_mem;
typedef struct srv_table srv_table;

ps_status srv_mem_init(ps_server *s);
/* Also frees the list of closed connections (s->gone). */
void srv_mem_free(ps_server *s);
/* R, the request cap (--max-request-mb, else from the cache size). */
size_t srv_mem_request_cap(const ps_server *s);
/* CURVE: some connection has not delivered a message yet (srv_mem_hs_seen, srv_mem_hs_check). */
bool srv_mem_hs_young(const ps_server *s);
/* The STATS fields of the bounds (parked, bytes_in_flight). */
void srv_mem_stats(const ps_server *s, ps_server_stats *out);
/* Partition threads: b bytes of an applied step's sync buffers may be kept for reuse (true:
 * counted), or must be freed (false: past SRV_SYNC_KEEP); unkeep: kept bytes in use again. */
bool srv_mem_keep_sync(ps_server *s, uint64_t b);
void srv_mem_unkeep_sync(ps_server *s, uint64_t b);
uint32_t srv_conn_slot(zmq_msg_t *ident);
/* At intake: refuses (replies, frees r and returns true) a pull whose reply is over the cap. */
bool srv_mem_too_large(ps_server *s, srv_req *r);
/* At intake, after srv_mem_too_large: charges r's frames (and the reply of a pull that can
 * run now). true = handle it; false = r was parked (srv_mem_unpark handles it once its bytes
 * fit, after the earlier requests of its connection) or refused. */
bool srv_mem_intake(ps_server *s, srv_req *r);
/* Before a pull's store work (srv_dispatch): allocates its reply into r->out out of its
 * reservation, or charges it now; false = parked or refused. Other work: true. */
bool srv_mem_admit(ps_server *s, srv_req *r, int kind);
/* Where srv_mem_unpark sends the requests it resumes (the caller's, so that the bounds know
 * nothing of the handlers above them). */
typedef struct srv_unpark_to {
  bool (*stop)(const ps_server *s);         /* before each: true ends the walk (a checkpoint) */
  void (*handle)(ps_server *s, srv_req *r); /* parked at intake: handled from the start */
  void (*pull)(ps_server *s, srv_req *r);   /* a pull parked for its reply's bytes: dispatched */
} srv_unpark_to;
/* Resumes the parked requests that fit now, in order per connection. */
void srv_mem_unpark(ps_server *s, const srv_unpark_to *to);
/* Empties the parked list: answered with PS_ERR_UNAVAILABLE (answer) or freed. */
void srv_mem_drop_parked(ps_server *s, bool answer);
/* A reply frame of n bytes for r, charged to r's connection until ZeroMQ lets go of it (large
 * replies other than pulls: STATS); false without memory. */
bool srv_mem_msg(ps_server *s, const srv_req *r, zmq_msg_t *m, size_t n);
/* Header replies up to this size are not charged (acks, short errors): a connection's send
 * queue holds at most SRV_PEER_HWM messages, so one that never reads holds at most ~4 MB of
 * them (~1 MB of acks and PINGs, which fit in ZeroMQ's message structures). Larger ones
 * (STATS, KV values, long errors) are charged like a pull's rows. */
#define SRV_SMALL_REPLY ((size_t)256)
/* CURVE: the connection on fd was accepted / delivered a message / closed. */
void srv_mem_hs_accepted(ps_server *s, int fd);
void srv_mem_hs_seen(ps_server *s, int fd);
void srv_mem_hs_gone(ps_server *s, int fd);
/* Closes the connections past SRV_HS_HEAVY that hold a frame but delivered no message; the
 * poll timeout (ms) until the next look (100 when none is young). */
long srv_mem_hs_check(ps_server *s);
/* The connection on fd closed: its parked requests are dropped (srv_drop_gone_peers). */
void srv_mem_peer_gone(ps_server *s, int fd);
/* r is freed: gives back its charged frame bytes. */
void srv_mem_done(ps_server *s, srv_req *r);
/* A sync push about to be buffered for its step: charges its gradients (as f32, with their
 * keys) until the step is applied; refuses it (replies, frees r, false) past the sync cap. */
bool srv_mem_sync_take(ps_server *s, srv_req *r);
/* Step `step` of table t was applied: its buffered pushes are gone. */
void srv_mem_sync_release(ps_server *s, srv_table *t, uint64_t step);
/* Every buffered sync push was dropped (srv_drop_sync_all). */
void srv_mem_sync_reset(ps_server *s);

/* The floats a pull's reply of table t carries per key: the table's dim, or, for a PULL
 * with_state (ps_server_pull_state.c), dim + its optimizer state (what the charge counts). */
uint32_t srv_pull_row_floats(const srv_req *r, const srv_table *t);

#endif

/* ps_server_request_schedule_int.h: scheduling and consistency (ps_server_request_schedule.c)
 * -- when a request may run and when its reply may leave: step bookkeeping, deferred pulls,
 * sync apply, the ranks' connections, exclusive operations (checkpoint, restore) and the
 * requests held meanwhile. Private to server/; main thread only. */
#ifndef PS_SERVER_REQUEST_SCHEDULE_INT_H
#define PS_SERVER_REQUEST_SCHEDULE_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "ps_server.h"
#include "ps_wire.h"

typedef struct srv_req srv_req;
typedef struct srv_sched srv_sched;
typedef struct srv_table srv_table;

ps_status srv_sched_init(ps_server *s);
/* Shutdown: the requests still held, ready or queued exclusive are freed unanswered. */
void srv_sched_free(ps_server *s);
/* A checkpoint or restore runs now / is queued or running. */
bool srv_exclusive_active(const ps_server *s);
bool srv_exclusive_pending(const ps_server *s);
/* Shutdown: the exclusive operations not started yet are answered PS_ERR_UNAVAILABLE. */
void srv_exclusive_refuse_queued(ps_server *s);
/* While an exclusive operation runs, a store op r is held (true) until it is over. */
bool srv_hold_if_exclusive(ps_server *s, srv_req *r);
/* Store work of r is over: apply bookkeeping, or its reply. */
void srv_finish(ps_server *s, srv_req *r);
void srv_adopt_step(srv_table *t, uint64_t step);
void srv_start_pull(ps_server *s, srv_req *r);
/* Re-checks t's deferred pulls. */
void srv_release_waiters(ps_server *s, srv_table *t);
/* The STEP r of rank `worker` in table `id` (0: every table): its connection is the rank's
 * from now on, and not lost. */
void srv_rank_note(ps_server *s, const srv_req *r, uint32_t id, uint32_t worker);
/* The connection on fd closed: the ranks that stepped on it are lost. */
void srv_ranks_gone(ps_server *s, int fd);
/* Ranks lost for their grace period are gone: the deferred pulls and the checkpoint that wait
 * for their steps fail naming them (the main loop calls it at least every 100 ms). */
void srv_ranks_tick(ps_server *s);
/* Answers r (a pull of `step`) with an error naming a gone rank it would wait for forever;
 * false when none holds it back. A pull of a lost rank means it is back. */
bool srv_pull_fail_lost(ps_server *s, srv_req *r, uint64_t step);
/* Forgets the lost ranks (a restore rolled every clock back: a new job). */
void srv_ranks_reset(ps_server *s);
/* Records that `worker` finished `step` in table t. */
ps_status srv_table_step(ps_server *s, srv_table *t, uint32_t worker, uint64_t step,
                         ps_error *err);
/* Queues a checkpoint or restore and runs what can run. */
void srv_exclusive_add(ps_server *s, srv_req *r);
/* Runs the head exclusive operation once it can; the requests held meanwhile go to the ready
 * queue. */
void srv_try_exclusive(ps_server *s);
/* Handles the ready queue's requests again, in order. */
void srv_run_ready(ps_server *s);
/* The connections srv_peers_poll saw close: every request of theirs still waiting --
 * deferred pulls, parked and held requests, queued checkpoints -- is dropped, with the bytes
 * it holds. Main loop only: srv_peers_poll also runs inside handlers (coordinator ops,
 * checkpoints) that may be walking these very lists (srv_mem_unpark). */
void srv_drop_gone_peers(ps_server *s);

#endif

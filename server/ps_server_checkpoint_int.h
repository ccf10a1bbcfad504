/* ps_server_checkpoint_int.h: the data dir's metadata and the shard's checkpoints
 * (ps_server_checkpoint.c): tables kept across restarts, the shard identity, checkpoint phases and
 * restores. Private to server/; main thread only (with no store work in flight where it says
 * so). */
#ifndef PS_SERVER_CHECKPOINT_INT_H
#define PS_SERVER_CHECKPOINT_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "ps_server.h"
#include "ps_wire.h"

typedef struct srv_req srv_req;
typedef struct srv_table srv_table;

ps_status srv_meta_load(ps_server *s, bool *clean, ps_error *err);
ps_status srv_meta_save(ps_server *s, bool clean);
srv_table *srv_table_new(const ps_table_spec *spec);
void srv_table_free(srv_table *t);
/* Serves the tables the store knows but the server does not (metadata lost or an older
 * snapshot): the first declaration of each sets its consistency mode. */
ps_status srv_tables_adopt_store(ps_server *s);
/* One phase (Ember__CkptPhase) of a checkpoint / a restore of this shard (called with no store
 * work in flight). A prepare writes a delta when base (the sender's previous checkpoint) is
 * this shard's last one and the chain since its last full one is shorter than full_every - 1
 * (ps_store_checkpoint), else a full snapshot. */
ps_status srv_checkpoint(ps_server *s, int phase, uint64_t step, const char *path,
                         const char *base, uint32_t full_every, char *dir_out, size_t dir_len,
                         ps_error *err);
/* Restores a committed checkpoint (path as for srv_ckpt_root; empty = the last one). Its step
 * is the one its own metadata records; expect_step (SRV_ANY_STEP = no expectation) and a
 * directory named step-N must agree with it, else PS_ERR_CORRUPT and nothing is restored. */
#define SRV_ANY_STEP UINT64_MAX
ps_status srv_restore(ps_server *s, const char *path, uint64_t expect_step, uint64_t *step,
                      ps_error *err);
/* The shard identity kept inside the store directory (DIR/store/EMBER-SHARD), which survives a
 * lost ember-server.json: a mismatch with this shard is refused, as is a store with tables but
 * neither file (whose shard cannot be known); otherwise (re)written. */
ps_status srv_identity_check(ps_server *s, ps_error *err);
/* At start: says, once, that the shard continues from the rows and checkpoint it found. */
void srv_log_existing_state(ps_server *s);
/* Resolves a client path (relative = under the data dir; empty = the default for a step). */
void srv_ckpt_root(ps_server *s, const char *path, uint64_t step, char *out, size_t len);
void srv_tables_reset_steps(ps_server *s, uint64_t step);
/* At start: deletes what an uncommitted prepare left (before the last checkpoint is restored). */
void srv_ckpt_discard_staged(ps_server *s);
/* {"step", "path"}: how metadata and STATS show a checkpoint. */
struct json_t *srv_ckpt_json(const ps_server_ckpt *c);

#endif

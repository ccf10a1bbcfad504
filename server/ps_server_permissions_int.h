/* ps_server_permissions_int.h: what a request may do to the shard beyond its own checks
 * (ps_server_permissions.c): checkpoint paths confined to the data dir and the checkpoint root,
 * restores that would roll back another connection's training refused, one stager per prepared
 * checkpoint, and the provisional declarations of tables nobody used yet. Private to server/;
 * main thread only. */
#ifndef PS_SERVER_PERMISSIONS_INT_H
#define PS_SERVER_PERMISSIONS_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "ps_server.h"
#include "ps_wire.h"

typedef struct srv_req srv_req;
typedef struct srv_permit srv_permit;

/* Before anything else of it: the state, empty (PS_ERR_NOMEM without memory). */
ps_status srv_permit_init(ps_server *s);
/* The data dir as resolved at start (canonical), or as given until then. */
const char *srv_permit_data_dir(const ps_server *s);
/* At start, after the metadata: the canonical data dir and checkpoint root (--checkpoint-root,
 * else `pinned` from the metadata, else the root of a last checkpoint outside the data dir). */
ps_status srv_permit_load(ps_server *s, const char *pinned, ps_error *err);
/* The root a checkpoint pinned (for the metadata), or NULL. */
const char *srv_permit_pinned_root(const ps_server *s);
/* Whether root (what srv_ckpt_root made of the client's path) may be used: inside the data dir
 * or the checkpoint root, resolved; may_pin lets a first checkpoint or restore outside the
 * data dir pin the root (ps-worker's layout only). PS_ERR_INVALID with the reason otherwise. */
ps_status srv_permit_path(ps_server *s, const char *path, const char *root, bool may_pin,
                         ps_error *err);
/* A KV_SET of SRV_COORD_CKPT_KEY: its {"step", "path"} must be this shard's last checkpoint. */
ps_status srv_permit_ckpt_record(ps_server *s, const Ember__Header *h, ps_error *err);
/* DECLARE of a table the store does not have: provisional (not in the store until its first
 * use), its spec the latest declared; r's declaration is remembered. PS_OK: reply success. */
ps_status srv_permit_declare(ps_server *s, srv_req *r, const ps_table_spec *spec, ps_error *err);
/* The first PULL, PUSH or STEP of provisional table `id` (r): the spec r's connection declared
 * (else the latest) goes into the store; connections that declared another one become stale. */
ps_status srv_permit_bind(ps_server *s, srv_req *r, uint32_t id, ps_error *err);
/* PS_ERR_CONFLICT when r's connection is stale for table id (only when some connection is). */
ps_status srv_permit_decl_check(ps_server *s, srv_req *r, uint32_t id, ps_error *err);
/* r declared table id with its spec: not stale any more. */
void srv_permit_decl_clear(ps_server *s, srv_req *r, uint32_t id);
/* PS_ERR_CONFLICT when r, a CHECKPOINT, comes from another connection than the one whose
 * prepared checkpoint awaits its commit or abort, while that one is open. */
ps_status srv_permit_checkpoint(ps_server *s, const srv_req *r, ps_error *err);
/* r prepared the shard's staged checkpoint. */
void srv_permit_note_stager(ps_server *s, const srv_req *r);
/* r (a PUSH or STEP that passed its checks) trained on this shard. */
void srv_permit_note_trainer(ps_server *s, const srv_req *r);
/* The connection on fd closed. */
void srv_permit_peer_gone(ps_server *s, int fd);
/* PS_ERR_CONFLICT when a connection other than r's trained here and is still open. */
ps_status srv_permit_restore(ps_server *s, const srv_req *r, ps_error *err);
void srv_permit_free(ps_server *s);

#endif

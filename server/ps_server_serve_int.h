/* ps_server_serve_int.h: a serving shard (ps-server --serve DIR: a committed checkpoint opened
 * read-only, or an export's rows held in memory) and what it refuses (ps_server_serve.c). Private
 * to server/. */
#ifndef PS_SERVER_SERVE_INT_H
#define PS_SERVER_SERVE_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "ps_server.h"
#include "ps_wire.h"

typedef struct srv_req srv_req;
typedef struct srv_export srv_export;
typedef struct ps_store ps_store;

/* Opens shard opt.shard's snapshot of the checkpoint read-only and adopts its tables (as async):
 * PS_ERR_INVALID when serve_dir is no checkpoint or has another shard count. */
ps_status srv_serve_open(ps_server *s, ps_error *err);
/* --serve EXPORT: the rows of r's keys (those at first, first + stride, ...) into r->outp, f32
 * or f16 as r asks, from the export's rows (ps_rowset.h), initial rows for keys it has none of.
 * Read-only: any partition thread. */
void srv_serve_pull_export(const ps_server *s, srv_req *r, uint32_t first, uint32_t stride);
/* Frees the export's rows and removes the private store's directory (after the store closed). */
void srv_serve_close(ps_server *s);
/* A serving shard: replies with the refusal and returns true for an op that would change the
 * shard (push, step, checkpoint, restore). */
bool srv_serve_refuse(ps_server *s, srv_req *r, int op);
/* A serving shard's DECLARE: PS_OK when spec's rows are the served table's. */
ps_status srv_serve_declare(ps_server *s, const ps_table_spec *spec, ps_error *err);
/* A DECLARE whose spec has dim 0 (any shard, serving or not): a lookup of the table named by
 * the spec's name, answered with its spec; changes nothing (docs/PROTOCOL.md, "Tables"). */
void srv_table_lookup(ps_server *s, srv_req *r);
/* Opens this shard's snapshot of the committed checkpoint `dir` (one step-N) read-only, after
 * checking its shard count against the cluster's; its step into *step. Any thread (reads only
 * s->opt). PS_ERR_INVALID for another shard count, else the store's or the file's failure. */
ps_status srv_serve_open_step(const ps_server *s, const char *dir, ps_store **store,
                              uint64_t *step, ps_error *err);

#endif

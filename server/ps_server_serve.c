/* ps_server_serve: a serving shard (ps-server --serve DIR). It opens its own shard's snapshot of
 * a committed ps-worker checkpoint read-only and answers pulls; everything that would change a
 * row or the shard's state is refused with one line. The layout read (docs/CHECKPOINTS.md):
 *   DIR/latest                   "step-N" (or DIR is one step-N directory itself)
 *   DIR/step-N/shards/shard-I/   shard I's store snapshot; shard-I.json its step and shard count
 *
 * Design decisions:
 * - No data dir: the snapshot is the whole state, nothing is written into it (no metadata, no
 *   flush at shutdown, no recovery; a delta chain is composed by the store's read-only open in a
 *   private $TMPDIR directory, removed at close), so any number of replicas can serve one checkpoint. RocksDB's
 *   read-only open takes no LOCK file and writes nothing, so read-only opens of one snapshot
 *   never conflict with each other (nor with ps-predict's).
 * - The shard count of the cluster must be the checkpoint's: a key's shard is its hash modulo
 *   the count, so a snapshot served under another count would answer keys it does not hold
 *   with initial rows. A mismatch is refused at start (PS_ERR_INVALID: a bad argument).
 * - The checkpoint's tables are served as async (a serving shard has no steps: a pull is never
 *   deferred), and a DECLARE succeeds only for the spec the snapshot holds (its rows: id, name,
 *   dim, initialisation, optimizer), whatever stepping it asks for, so a client that declares
 *   before it pulls works unchanged and a client of another model is told at once.
 * - A key no row is stored for gets the store's deterministic initial row, exactly what
 *   ps-predict's offline lookup returns (the scores are the same).
 * - --follow (ps_server_follow.c) opens each later checkpoint with the same srv_serve_open_step
 *   (shard count checked, read-only), so a checkpoint served at start and one followed to are
 *   opened alike; --follow needs DIR/latest (a step-N directory never changes). */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_ckpt_layout.h"
#include "ps_fs.h"
#include "ps_log.h"
#include "ps_server_int.h"

/* The step shard-I.json records, after checking its shard count against the cluster's. */
static ps_status shard_step(const ps_server *s, const char *dir, uint64_t *step, ps_error *err) {
  uint32_t n = ps_ckpt_count_shards(dir, 65536);
  char p[4400];
  if (n != s->opt.shards)
    return ps_error_set(err, PS_ERR_INVALID,
                        "--serve %s: the checkpoint has %u shard(s), this server was started "
                        "with --shards %u (they must match)",
                        dir, n, s->opt.shards);
  ps_ckpt_step_shard_path(p, sizeof p, dir, s->opt.shard, PS_CKPT_SHARD_META);
  json_error_t je;
  json_t *j = json_load_file(p, 0, &je);
  json_int_t st = -1, shards = n;
  const char *why = !j ? je.text : NULL;
  if (j && json_unpack(j, "{s:I, s?I}", "step", &st, "shards", &shards) != 0) why = "no step";
  json_decref(j);
  if (why) return ps_error_set(err, PS_ERR_CORRUPT, "%s: unreadable (%s)", p, why);
  if (shards != (json_int_t)n || st < 0)
    return ps_error_set(err, PS_ERR_CORRUPT, "%s: written by one of %lld shards, the checkpoint "
                        "holds %u", p, (long long)shards, n);
  *step = (uint64_t)st;
  return PS_OK;
}

ps_status srv_serve_open_step(const ps_server *s, const char *dir, ps_store **store,
                              uint64_t *step, ps_error *err) {
  char db[4400];
  ps_status st = shard_step(s, dir, step, err);
  if (st != PS_OK) return st;
  ps_ckpt_step_shard_path(db, sizeof db, dir, s->opt.shard, PS_CKPT_SHARD_DIR);
  ps_store_options so = {.path = db,
                         .cache_bytes = s->opt.cache_bytes,
                         .partitions = s->nthreads ? s->nthreads : 1,
                         .read_only = true};
  if ((st = ps_store_open(&so, store, err)) != PS_OK)
    return ps_error_prefix(err, "cannot open the snapshot %s: ", db);
  return PS_OK;
}

/* A ps-export directory (its manifest.json) is not a checkpoint: said in one line, with its row
 * type, rather than "no latest". Serving shards hold a checkpoint's f32 rows in the store; an
 * int8 export is scored by ps-predict --export (docs/CHECKPOINTS.md). */
static ps_status refuse_export(const char *dir, ps_error *err) {
  char p[4200];
  snprintf(p, sizeof p, "%s/manifest.json", dir);
  json_t *m = json_load_file(p, 0, NULL), *t = m ? json_array_get(json_object_get(m, "tables"), 0) : NULL;
  const char *fmt = json_string_value(json_object_get(m, "format"));
  const char *rt = json_string_value(json_object_get(t, "row_type"));
  ps_status st = PS_OK;
  if (fmt && !strcmp(fmt, "ember-export"))
    st = ps_error_set(err, PS_ERR_INVALID, "--serve %s: a ps-export directory (row_type %s), "
                      "not a checkpoint: serve the checkpoint it was exported from, or score the "
                      "export with ps-predict --export", dir, rt ? rt : "f32");
  json_decref(m);
  return st;
}

ps_status srv_serve_open(ps_server *s, ps_error *err) {
  char dir[4096], latest[4200];
  uint64_t step = 0;
  if (refuse_export(s->opt.serve_dir, err) != PS_OK) return PS_ERR_INVALID;
  ps_ckpt_latest_path(latest, sizeof latest, s->opt.serve_dir);
  if (s->opt.follow && access(latest, F_OK) != 0)
    return ps_error_set(err, PS_ERR_INVALID,
                        "--follow watches DIR/latest, and %s has none: give the checkpoint "
                        "directory that ps-worker --checkpoint-dir writes, not one step-N in it",
                        s->opt.serve_dir);
  ps_status st = ps_ckpt_resolve(s->opt.serve_dir, PS_CKPT_SHARDS, dir, sizeof dir, err);
  if (st != PS_OK) return ps_error_prefix(err, "--serve: ");
  if ((st = srv_serve_open_step(s, dir, &s->store, &step, err)) != PS_OK) return st;
  if ((st = srv_tables_adopt_store(s)) != PS_OK)
    return ps_error_set(err, st, "out of memory adopting the snapshot's tables");
  for (uint32_t id = 1; id <= s->max_table; id++) {
    srv_table *t = s->tables[id];
    if (!t) continue;
    t->meta_unknown = false;
    t->spec.consistency = PS_CONS_ASYNC;
    t->spec.staleness = 0;
  }
  s->serving = true;
  s->last.have = true;
  s->last.step = step;
  snprintf(s->last.path, sizeof s->last.path, "%s", dir);
  PS_INFO("serving %s (step %" PRIu64 ") read-only: shard %u of %u", dir, step, s->opt.shard,
          s->opt.shards);
  return PS_OK;
}

bool srv_serve_refuse(ps_server *s, srv_req *r, int op) {
  if (op != EMBER__OP__OP_PUSH && op != EMBER__OP__OP_STEP && op != EMBER__OP__OP_CHECKPOINT &&
      op != EMBER__OP__OP_RESTORE)
    return false;
  srv_reply_error(s, r, PS_ERR_UNSUPPORTED,
                  "shard %u serves the checkpoint %s read-only (ps-server --serve): %s refused",
                  s->opt.shard, s->last.path, ps_server_op_name(op));
  return true;
}

ps_status srv_serve_declare(ps_server *s, const ps_table_spec *spec, ps_error *err) {
  const srv_table *t = spec->id <= PS_WIRE_MAX_TABLE ? s->tables[spec->id] : NULL;
  if (!t)
    return ps_error_set(err, PS_ERR_UNKNOWN_TABLE,
                        "table %u '%s' is not in the checkpoint %s this shard serves read-only",
                        spec->id, spec->name, s->last.path);
  char diff[160];
  if (!ps_table_spec_rows_equal(&t->spec, spec))
    return ps_error_set(err, PS_ERR_CONFLICT,
                        "table %u '%s' is not the checkpoint's table that this shard serves "
                        "read-only: declared vs served %s (attach by name to read it as served)",
                        spec->id, spec->name,
                        ps_table_spec_diff(spec, &t->spec, diff, sizeof diff));
  return PS_OK;
}

/* Attach by name: a client that only reads a table (Client.table(name), ps-bench --table) need
 * not know the spec it was trained with; it asks any shard for it. Lives here because serving
 * is its main use, but a training shard answers it the same way. A provisional table (declared,
 * never used) is not in the store yet and may still change: not found. */
void srv_table_lookup(ps_server *s, srv_req *r) {
  const char *name = r->h->table->name ? r->h->table->name : "";
  const srv_table *t = NULL;
  for (uint32_t id = 1; id <= s->max_table && !t; id++)
    if (s->tables[id] && !s->tables[id]->provisional &&
        strncmp(s->tables[id]->spec.name, name, sizeof s->tables[id]->spec.name) == 0)
      t = s->tables[id];
  if (!t) {
    srv_reply_error(s, r, PS_ERR_UNKNOWN_TABLE, "no table named '%s' on shard %u", name,
                    s->opt.shard);
    return;
  }
  Ember__TableSpec sp;
  ps_wire_spec_to_pb(&t->spec, &sp);
  Ember__Header rh;
  ps_wire_header_init(&rh, EMBER__OP__OP_DECLARE);
  rh.table_id = t->spec.id;
  rh.table = &sp;
  srv_reply(s, r, &rh, NULL);
}

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
 * - DIR may be a ps-export directory instead (its manifest.json; ps-export --quantize int8 for
 *   int8 rows): the shard loads its own keys' rows of the export into memory as exported, int8
 *   rows as dim + 8 bytes (ps_rowset.h, ps_export_rows.h, which refuse a truncated or
 *   mislabelled export in one line), and answers pulls from them (dequantized, f32 or f16 on the
 *   wire), a key with no row getting the table's initial row; the rows are filtered by this
 *   server's --shard/--shards, so an export serves on any shard count. An empty store in a
 *   private $TMPDIR directory carries the table's spec (the manifest has no learning rate: a
 *   client attaches by name). Not with --follow.
 * - --follow (ps_server_follow.c) opens each later checkpoint with the same srv_serve_open_step
 *   (shard count checked, read-only), so a checkpoint served at start and one followed to are
 *   opened alike; --follow needs DIR/latest (a step-N directory never changes). */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_ckpt_layout.h"
#include "ps_export_rows.h"
#include "ps_fs.h"
#include "ps_log.h"
#include "ps_server_checkpoint_int.h"
#include "ps_server_int.h"
#include "ps_server_serve_int.h"
#include "ps_wire_half.h"

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

/* --serve EXPORT: this shard's rows of the export and the private store's directory. */
struct srv_export {
  ps_export_rows rows;
  char tmp[4200]; /* empty: not made (yet) */
};

/* --serve EXPORT (a ps-export directory): this shard's rows of the export held as exported,
 * int8 rows as int8 (ps_rowset.h), answered by srv_serve_pull_export. The rest of the server
 * (tables, STATS, DECLARE, attach by name, the memory bound's bookkeeping) runs over an empty
 * store in a private directory under $TMPDIR, removed at close: it holds the table's spec
 * only, never a row. */
static ps_status serve_export(ps_server *s, ps_error *err) {
  if (s->opt.follow)
    return ps_error_set(err, PS_ERR_INVALID, "--serve %s --follow: an export never changes; "
                        "--follow watches a checkpoint directory", s->opt.serve_dir);
  srv_export *e = calloc(1, sizeof *e);
  if (!e) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  s->export = e;
  ps_export_rows *x = &e->rows;
  ps_status st = ps_export_rows_load(s->opt.serve_dir, s->opt.shard, s->opt.shards, x, err);
  if (st != PS_OK) return ps_error_prefix(err, "--serve %s: ", s->opt.serve_dir);
  const char *tmp = getenv("TMPDIR");
  snprintf(e->tmp, sizeof e->tmp, "%s/ember-serve-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(e->tmp)) {
    st = ps_error_set(err, PS_ERR_IO, "cannot create %s: %s", e->tmp, strerror(errno));
    e->tmp[0] = '\0';
    return st;
  }
  ps_table_spec spec;
  ps_table_spec_default(&spec, x->spec.id, x->spec.name, x->spec.dim);
  spec.init = x->spec.init;
  spec.init_a = x->spec.init_a;
  spec.init_b = x->spec.init_b;
  spec.seed = x->spec.seed;
  spec.optimizer = x->spec.optimizer;
  ps_store_options so = {.path = e->tmp,
                         .cache_bytes = (size_t)1 << 20,
                         .partitions = s->nthreads ? s->nthreads : 1,
                         .durability = PS_DURABILITY_NONE};
  if ((st = ps_store_open(&so, &s->store, err)) != PS_OK ||
      (st = ps_store_declare(s->store, &spec, err)) != PS_OK)
    return ps_error_prefix(err, "--serve %s: the table's spec: ", s->opt.serve_dir);
  s->last.step = x->step;
  PS_INFO("serving the export %s (step %" PRIu64 ", %s rows) read-only: shard %u of %u, %" PRIu64
          " rows of %zu bytes, %.1f MB held", s->opt.serve_dir, x->step, x->row_type,
          s->opt.shard, s->opt.shards, ps_rowset_rows(x->rows), ps_rowset_row_bytes(x->rows),
          ps_rowset_bytes(x->rows) / 1e6);
  return PS_OK;
}

void srv_serve_close(ps_server *s) {
  srv_export *e = s->export;
  if (!e) return;
  ps_export_rows_free(&e->rows);
  if (e->tmp[0]) ps_rm_rf(e->tmp); /* the store is closed first */
  free(e);
  s->export = NULL;
}

void srv_serve_pull_export(const ps_server *s, srv_req *r, uint32_t first, uint32_t stride) {
  const ps_export_rows *x = &s->export->rows;
  const uint32_t dim = x->spec.dim;
  float tmp[PS_TABLE_MAX_DIM];
  for (size_t j = first; j < r->msg.nkeys; j += stride) {
    uint64_t key = r->msg.keys[j];
    float *row = r->f16 ? tmp : r->outp + j * dim;
    if (!ps_rowset_get(x->rows, key, row)) ps_store_init_row(&x->spec, key, row);
    if (r->f16) ps_wire_f32_to_f16(tmp, (uint16_t *)r->outp + j * dim, dim);
  }
}

ps_status srv_serve_open(ps_server *s, ps_error *err) {
  char dir[4096], latest[4200];
  uint64_t step = 0;
  bool export = ps_export_rows_is_export(s->opt.serve_dir);
  ps_ckpt_latest_path(latest, sizeof latest, s->opt.serve_dir);
  if (!export && s->opt.follow && access(latest, F_OK) != 0)
    return ps_error_set(err, PS_ERR_INVALID,
                        "--follow watches DIR/latest, and %s has none: give the checkpoint "
                        "directory that ps-worker --checkpoint-dir writes, not one step-N in it",
                        s->opt.serve_dir);
  ps_status st = PS_OK;
  if (export) {
    if ((st = serve_export(s, err)) != PS_OK) return st;
    step = s->last.step;
    snprintf(dir, sizeof dir, "%s", s->opt.serve_dir);
  } else if ((st = ps_ckpt_resolve(s->opt.serve_dir, PS_CKPT_SHARDS, dir, sizeof dir, err)) !=
             PS_OK) {
    return ps_error_prefix(err, "--serve: ");
  } else if ((st = srv_serve_open_step(s, dir, &s->store, &step, err)) != PS_OK) {
    return st;
  }
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
  if (!export)
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

/* ps_server_checkpoint: what a shard keeps in its data dir besides the store, and its checkpoints.
 *
 *   DIR/store/                  the store (RocksDB)
 *   DIR/store/EMBER-SHARD       {"shard", "shards"}: the store's own record of its shard, so
 *                               that losing ember-server.json cannot let the rows start as
 *                               another shard (RocksDB leaves foreign files alone; a restore
 *                               swaps the directory, so it is written again after one)
 *   DIR/ember-server.json       shard, shards, per-table consistency metadata, the last
 *                               checkpoint, and `clean` (false while running)
 *   ROOT/shard-I/               ps_store_checkpoint of shard I (ROOT is the checkpoint path):
 *                               full, or a delta against the shard's last checkpoint when the
 *                               prepare names that one as its base (ckpt_base)
 *   ROOT/shard-I.json           the step and table metadata of that snapshot
 *   ROOT/shard-I.staging[.json] the same, prepared and not yet committed
 *
 * `clean` is what makes crash recovery exact: the store runs without a WAL, so after a kill
 * the database holds whatever happened to be flushed; a restart that finds clean == false
 * restores the last checkpoint instead. The file is replaced atomically (write, fsync,
 * rename).
 *
 * A global checkpoint is a two-phase commit driven by the client: every shard prepares
 * (snapshots into staging), and only once all of them have, each commits (renames staging to
 * final, then records it as its last checkpoint). So the last checkpoint of any shard is one
 * that every shard has a complete snapshot of, and a crash between the phases leaves the
 * previous one in place on every shard. The staging is recorded in the metadata before it is
 * written, so a restart knows exactly what to delete. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps_ckpt_layout.h"
#include "ps_fs.h"
#include "ps_log.h"
#include "ps_server_checkpoint_int.h"
#include "ps_server_int.h"
#include "ps_server_partition_threads_int.h"
#include "ps_server_permissions_int.h"
#include "ps_server_refresh_int.h"

/* The server's table: spec's stepping fields say how workers step it (num_workers 0 = 1). */
srv_table *srv_table_new(const ps_table_spec *spec) {
  srv_table *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->spec = *spec;
  if (t->spec.num_workers == 0) t->spec.num_workers = 1;
  t->clock = calloc(t->spec.num_workers, sizeof *t->clock);
  if (!t->clock) {
    free(t);
    return NULL;
  }
  return t;
}

void srv_table_free(srv_table *t) {
  if (!t) return;
  free(t->decls);
  free(t->clock);
  srv_changed_free(t->chg);
  free(t);
}

ps_status srv_tables_adopt_store(ps_server *s) {
  uint32_t ids[PS_STORE_MAX_TABLES];
  size_t nt = ps_store_tables(s->store, ids, PS_STORE_MAX_TABLES);
  ps_status st = PS_OK;
  for (size_t i = 0; i < nt; i++) {
    if (ids[i] == 0 || ids[i] > PS_WIRE_MAX_TABLE) continue;
    srv_table *old = s->tables[ids[i]];
    if (old && !old->provisional) continue; /* a provisional one is not in the store */
    ps_table_spec sp;
    if (ps_store_get_spec(s->store, ids[i], &sp) != PS_OK) continue;
    srv_table *t = srv_table_new(&sp);
    if (!t) {
      st = PS_ERR_NOMEM;
      continue;
    }
    t->meta_unknown = true;
    srv_table_free(old);
    s->tables[ids[i]] = t;
    if (ids[i] > s->max_table) s->max_table = ids[i];
  }
  return st;
}

static json_t *tables_json(ps_server *s) {
  json_t *a = json_array();
  for (uint32_t id = 1; id <= s->max_table; id++) {
    srv_table *t = s->tables[id];
    if (!t || t->meta_unknown || t->provisional) continue;
    json_array_append_new(a, json_pack("{s:I, s:s, s:i, s:I, s:I}", "id", (json_int_t)id, "name",
                                       t->spec.name, "consistency", (int)t->spec.consistency,
                                       "staleness", (json_int_t)t->spec.staleness,
                                       "num_workers", (json_int_t)t->spec.num_workers));
  }
  return a;
}

static ps_status write_json_atomic(const char *path, json_t *j) {
  char *text = json_dumps(j, JSON_INDENT(1) | JSON_SORT_KEYS);
  if (!text) return PS_ERR_NOMEM;
  size_t n = strlen(text);
  char *line = realloc(text, n + 2);
  if (!line) {
    free(text);
    return PS_ERR_NOMEM;
  }
  line[n] = '\n';
  line[n + 1] = '\0';
  ps_status st = ps_write_atomic(path, line, n + 1, 0644, false, NULL);
  free(line);
  return st;
}

json_t *srv_ckpt_json(const ps_server_ckpt *c) {
  return json_pack("{s:I, s:s}", "step", (json_int_t)c->step, "path", c->path);
}

static void ckpt_set(ps_server_ckpt *c, uint64_t step, const char *root) {
  c->have = true;
  c->step = step;
  snprintf(c->path, sizeof c->path, "%s", root);
}

/* A {"step", "path"} entry of the metadata into c (c->have false when absent or malformed). */
static void ckpt_from_json(json_t *e, ps_server_ckpt *c) {
  json_int_t st = 0;
  const char *p = NULL;
  c->have = false;
  if (!e || json_unpack(e, "{s:I, s:s}", "step", &st, "path", &p) != 0 || !p || st < 0 ||
      strlen(p) >= sizeof c->path)
    return;
  ckpt_set(c, (uint64_t)st, p);
}

ps_status srv_meta_save(ps_server *s, bool clean) {
  char path[2100];
  snprintf(path, sizeof path, "%s/ember-server.json", s->data_dir);
  json_t *j = json_pack("{s:i, s:I, s:I, s:b, s:o}", "format", 1, "shard",
                        (json_int_t)s->opt.shard, "shards", (json_int_t)s->opt.shards, "clean",
                        clean, "tables", tables_json(s));
  if (!j) return PS_ERR_NOMEM;
  if (s->last.have) json_object_set_new(j, "last_checkpoint", srv_ckpt_json(&s->last));
  if (s->staged.have) json_object_set_new(j, "prepared_checkpoint", srv_ckpt_json(&s->staged));
  const char *root = srv_permit_pinned_root(s);
  if (root) json_object_set_new(j, "checkpoint_root", json_string(root));
  ps_status st = write_json_atomic(path, j);
  json_decref(j);
  return st;
}

/* Applies per-table metadata entries to tables the store knows. */
static void apply_tables_meta(ps_server *s, json_t *arr) {
  size_t i;
  json_t *e;
  json_array_foreach(arr, i, e) {
    json_int_t id = 0, cons = 0, stal = 0, nw = 1;
    if (json_unpack(e, "{s:I, s:I, s:I, s:I}", "id", &id, "consistency", &cons, "staleness",
                    &stal, "num_workers", &nw) != 0 ||
        id <= 0 || id > PS_WIRE_MAX_TABLE || cons < 0 || cons > 2 || nw < 1 ||
        nw > SRV_MAX_WORKERS || stal < 0)
      continue;
    ps_table_spec spec;
    if (ps_store_get_spec(s->store, (uint32_t)id, &spec) != PS_OK) {
      PS_WARN("metadata names table %" PRId64 " that the store does not have", (int64_t)id);
      continue;
    }
    srv_table *old = s->tables[id];
    spec.consistency = (ps_consistency)cons;
    spec.staleness = (uint32_t)stal;
    spec.num_workers = (uint32_t)nw;
    if (old && !old->meta_unknown && !old->provisional &&
        ps_table_spec_stepping_equal(&old->spec, &spec)) {
      old->spec = spec;
      continue;
    }
    srv_table *t = srv_table_new(&spec);
    if (!t) continue;
    if (old) {
      /* Deferred pulls move to the new table object. */
      t->wait_head = old->wait_head;
      t->wait_tail = old->wait_tail;
      for (srv_req *r = t->wait_head; r; r = r->next) r->tab = t;
      srv_table_free(old);
    }
    s->tables[id] = t;
    if ((uint32_t)id > s->max_table) s->max_table = (uint32_t)id;
  }
}

static ps_status meta_load(ps_server *s, bool *clean, char *root, ps_error *err) {
  *clean = true;
  char path[2100];
  snprintf(path, sizeof path, "%s/ember-server.json", s->data_dir);
  json_error_t jerr;
  json_t *j = json_load_file(path, 0, &jerr);
  if (!j) {
    if (access(path, F_OK) == 0) {
      return ps_error_set(err, PS_ERR_CORRUPT, "%s does not parse: %s (line %d)", path,
                          jerr.text, jerr.line);
    }
    return PS_OK; /* a fresh data dir */
  }
  json_int_t shard = -1, shards = -1;
  int cl = 0;
  json_t *tables = NULL;
  ps_status st = PS_OK;
  if (json_unpack(j, "{s:I, s:I, s:b, s:o}", "shard", &shard, "shards", &shards, "clean", &cl,
                  "tables", &tables) != 0 ||
      !json_is_array(tables)) {
    st = ps_error_set(err, PS_ERR_CORRUPT, "%s lacks shard/shards/clean/tables", path);
    goto out;
  }
  if (shard != s->opt.shard || shards != s->opt.shards) {
    st = ps_error_set(err, PS_ERR_CONFLICT,
                      "data dir %s belongs to shard %" PRId64 " of %" PRId64
                      "; refusing to serve it as shard %u of %u (keys would be misplaced)",
                      s->data_dir, (int64_t)shard, (int64_t)shards, s->opt.shard, s->opt.shards);
    goto out;
  }
  *clean = cl != 0;
  apply_tables_meta(s, tables);
  ckpt_from_json(json_object_get(j, "last_checkpoint"), &s->last);
  ckpt_from_json(json_object_get(j, "prepared_checkpoint"), &s->staged);
  const char *r = json_string_value(json_object_get(j, "checkpoint_root"));
  if (r && strlen(r) < PATH_MAX) snprintf(root, PATH_MAX, "%s", r);
out:
  json_decref(j);
  return st;
}

ps_status srv_meta_load(ps_server *s, bool *clean, ps_error *err) {
  char root[PATH_MAX] = "";
  ps_status st = meta_load(s, clean, root, err);
  return st == PS_OK ? srv_permit_load(s, root, err) : st;
}

void srv_ckpt_root(ps_server *s, const char *path, uint64_t step, char *out, size_t len) {
  /* Absolute (the data dir resolved at start): the root is recorded as the last checkpoint and
   * restored from by the next start, and a relative one went through here again then -- with
   * a relative --data-dir, DIR/DIR/checkpoints/..., so a kill -9 left a shard that never
   * started again. */
  const char *dd = srv_permit_data_dir(s);
  int n = 0;
  if (!path || !path[0]) ps_ckpt_server_root(out, len, dd, step); /* too long: "" */
  else if (path[0] == '/') n = snprintf(out, len, "%s", path);
  else n = snprintf(out, len, "%s/%s", dd, path);
  if (n < 0 || (size_t)n >= len) out[0] = '\0'; /* too long: no root (refused as such) */
}

/* This shard's snapshot directory and metadata file under root: committed or staging. */
static void ckpt_files(ps_server *s, const char *root, bool staging, char *dir, char *meta,
                       size_t len) {
  ps_ckpt_shard_path(dir, len, root, s->opt.shard,
                     staging ? PS_CKPT_SHARD_STAGING : PS_CKPT_SHARD_DIR);
  ps_ckpt_shard_path(meta, len, root, s->opt.shard,
                     staging ? PS_CKPT_SHARD_STAGING_META : PS_CKPT_SHARD_META);
}

/* Deletes this shard's checkpoint files under root (committed or staging). */
static ps_status ckpt_remove(ps_server *s, const char *root, bool staging, ps_error *err) {
  char dir[4200], meta[4200];
  ckpt_files(s, root, staging, dir, meta, sizeof dir);
  ps_status st = ps_store_snapshot_remove(dir, err);
  if (unlink(meta) != 0 && errno != ENOENT)
    st = ps_error_set(err, PS_ERR_IO, "removing %s: %s", meta, strerror(errno));
  return st;
}

/* Forgets the prepared checkpoint: staging first, then the record, so that a failure in
 * between leaves a record that the next start deletes again. */
static ps_status staged_drop(ps_server *s, ps_error *err) {
  if (!s->staged.have) return PS_OK;
  ps_error local;
  if (!err) err = &local;
  ps_store_checkpoint_abort(s->store); /* its changes go into the next checkpoint */
  ps_status st = ckpt_remove(s, s->staged.path, true, err);
  if (st != PS_OK) PS_WARN("could not delete the staging of step %" PRIu64 " in %s: %s",
                           s->staged.step, s->staged.path, err->msg);
  s->staged.have = false;
  if (srv_meta_save(s, false) != PS_OK) PS_WARN("could not record the dropped staging");
  return st;
}

void srv_ckpt_discard_staged(ps_server *s) {
  if (!s->staged.have) return;
  /* A commit that renamed the files and died before recording them was never acknowledged,
   * so no driver counts it as committed: its final files go too. They are this prepare's,
   * since a prepare refuses a root where this shard already has a checkpoint. */
  char dir[4200], meta[4200];
  ckpt_files(s, s->staged.path, false, dir, meta, sizeof dir);
  bool renamed = access(dir, F_OK) == 0 &&
                 !(s->last.have && strcmp(s->last.path, s->staged.path) == 0);
  PS_WARN("deleting checkpoint of step %" PRIu64 " in %s: prepared, never committed",
          s->staged.step, s->staged.path);
  ps_error err;
  if (renamed && ckpt_remove(s, s->staged.path, false, &err) != PS_OK)
    PS_WARN("could not delete %s: %s", dir, err.msg);
  staged_drop(s, NULL);
}

/* Phase 1: snapshot into staging. Not this shard's last checkpoint until committed. */
static ps_status ckpt_prepare(ps_server *s, uint64_t step, const char *root, uint32_t max_depth,
                              ps_error *err) {
  char dir[4200], meta[4200];
  ckpt_files(s, root, false, dir, meta, sizeof dir);
  if (access(dir, F_OK) == 0) {
    return ps_error_set(err, PS_ERR_CONFLICT, "checkpoint %s already exists", dir);
  }
  /* One prepared checkpoint at a time: a new prepare means the driver gave up on the old one. */
  staged_drop(s, NULL);
  ckpt_files(s, root, true, dir, meta, sizeof dir);
  if (access(dir, F_OK) == 0) {
    return ps_error_set(err, PS_ERR_CONFLICT, "%s exists and is not a prepare of this shard", dir);
  }
  if (ps_mkdir_p(root) != PS_OK) {
    return ps_error_set(err, PS_ERR_IO, "cannot create checkpoint dir %s: %s", root,
                        strerror(errno));
  }
  ckpt_set(&s->staged, step, root);
  ps_status st = srv_meta_save(s, false);
  if (st != PS_OK) {
    s->staged.have = false;
    return ps_error_set(err, st, "cannot record the staging in %s", s->data_dir);
  }
  ps_store_ckpt_info info;
  st = ps_store_checkpoint(s->store, dir, step, max_depth, &info, err);
  if (st != PS_OK) {
    ps_error_prefix(err, "snapshot into %s failed: ", dir);
    staged_drop(s, NULL);
    return st;
  }
  json_t *j = json_pack("{s:i, s:I, s:I, s:I, s:o, s:b}", "format", 1, "step", (json_int_t)step,
                        "shard", (json_int_t)s->opt.shard, "shards", (json_int_t)s->opt.shards,
                        "tables", tables_json(s), "delta", info.delta);
  st = j ? write_json_atomic(meta, j) : PS_ERR_NOMEM;
  json_decref(j);
  if (st != PS_OK) {
    ps_error_set(err, st, "cannot write %s", meta);
    staged_drop(s, NULL);
    return st;
  }
  if (info.delta)
    PS_INFO("checkpoint at step %" PRIu64 " prepared in %s (delta: %" PRIu64 " rows, %" PRIu64
            " tombstones)", step, dir, info.rows, info.tombstones);
  else
    PS_INFO("checkpoint at step %" PRIu64 " prepared in %s (full: about %" PRIu64 " rows)", step,
            dir, info.rows);
  return PS_OK;
}

/* Renames this shard's snapshot and metadata under root from staging to final names or
 * back: both or (as far as the file system lets us) neither. */
static ps_status ckpt_move(ps_server *s, const char *root, bool to_final) {
  char sdir[4200], smeta[4200], dir[4200], meta[4200];
  ckpt_files(s, root, true, sdir, smeta, sizeof sdir);
  ckpt_files(s, root, false, dir, meta, sizeof dir);
  const char *fd = to_final ? sdir : dir, *td = to_final ? dir : sdir;
  const char *fm = to_final ? smeta : meta, *tm = to_final ? meta : smeta;
  if (rename(fd, td) != 0) return PS_ERR_IO;
  if (rename(fm, tm) != 0 || ps_fsync_dir(root) != PS_OK) {
    rename(tm, fm);
    rename(td, fd);
    return PS_ERR_IO;
  }
  return PS_OK;
}

/* Phase 2: staging -> final, and only then the record that makes it the last checkpoint. */
static ps_status ckpt_commit(ps_server *s, uint64_t step, const char *root, ps_error *err) {
  if (!s->staged.have || s->staged.step != step || strcmp(s->staged.path, root) != 0) {
    /* A repeated commit (the first one's reply was lost) finds its work done. */
    if (s->last.have && s->last.step == step && strcmp(s->last.path, root) == 0) return PS_OK;
    return ps_error_set(err, PS_ERR_NOT_FOUND,
                        "shard %u has no prepared checkpoint of step %" PRIu64 " in %s (aborted, "
                        "superseded by another prepare, or the shard restarted since)",
                        s->opt.shard, step, root);
  }
  if (ckpt_move(s, root, true) != PS_OK) {
    return ps_error_set(err, PS_ERR_IO, "cannot rename the staging of shard %u in %s",
                        s->opt.shard, root);
  }
  ps_server_ckpt prev = s->last;
  s->staged.have = false;
  ckpt_set(&s->last, step, root);
  ps_status st = srv_meta_save(s, false);
  if (st != PS_OK) {
    /* Not recorded, so not committed: back to prepared, which an abort or the next start
     * cleans up, and the previous checkpoint stays the one a restart restores. */
    s->staged.have = true;
    s->last = prev;
    if (ckpt_move(s, root, false) != PS_OK)
      PS_WARN("could not move the checkpoint in %s back to staging", root);
    return ps_error_set(err, st, "cannot record the checkpoint in %s", s->data_dir);
  }
  char dir[4200], meta[4200];
  ckpt_files(s, root, false, dir, meta, sizeof dir);
  ps_error cerr; /* the next delta's base; failing that, its changes go into the next one */
  if (ps_store_checkpoint_commit(s->store, dir, &cerr) != PS_OK) {
    PS_WARN("%s", cerr.msg);
    ps_store_checkpoint_abort(s->store);
  }
  PS_INFO("checkpoint at step %" PRIu64 " committed in %s", step, root);
  return PS_OK;
}

ps_status srv_checkpoint(ps_server *s, int phase, uint64_t step, const char *path,
                         const char *base, uint32_t full_every, char *dir_out, size_t dir_len,
                         ps_error *err) {
  char root[4096], broot[4096];
  if ((path && strlen(path) > 1800) || (base && strlen(base) > 1800))
    return ps_error_set(err, PS_ERR_INVALID, "checkpoint path too long");
  srv_ckpt_root(s, path, step, root, sizeof root);
  if (!root[0]) return ps_error_set(err, PS_ERR_INVALID, "checkpoint path too long");
  /* A delta only against the checkpoint the sender names, when it is this shard's last. */
  srv_ckpt_root(s, base, 0, broot, sizeof broot);
  uint32_t max_depth = base && base[0] && full_every > 1 && s->last.have &&
                       strcmp(s->last.path, broot) == 0 ? full_every - 1 : 0;
  snprintf(dir_out, dir_len, "%s", root);
  ps_status st = PS_OK;
  switch (phase) {
    case EMBER__CKPT_PHASE__CKPT_PREPARE: return ckpt_prepare(s, step, root, max_depth, err);
    case EMBER__CKPT_PHASE__CKPT_COMMIT: return ckpt_commit(s, step, root, err);
    case EMBER__CKPT_PHASE__CKPT_ABORT:
      /* Nothing prepared there is fine: an abort goes to every shard, prepared or not. */
      if (s->staged.have && s->staged.step == step && strcmp(s->staged.path, root) == 0) {
        PS_INFO("checkpoint at step %" PRIu64 " in %s aborted", step, root);
        st = staged_drop(s, err);
        if (st != PS_OK) ps_error_prefix(err, "could not delete the staging in %s: ", root);
      }
      return st;
    default:
      /* A sender without phases: both at once, as before; no cross-shard guarantee. */
      if ((st = ckpt_prepare(s, step, root, max_depth, err)) != PS_OK) return st;
      return ckpt_commit(s, step, root, err);
  }
}

void srv_tables_reset_steps(ps_server *s, uint64_t step) {
  for (uint32_t id = 1; id <= s->max_table; id++) {
    srv_table *t = s->tables[id];
    if (!t) continue;
    t->step_init = true;
    t->applied = t->apply_issued = step;
    for (uint32_t w = 0; w < t->spec.num_workers; w++) t->clock[w] = step;
  }
}

static void identity_path(const ps_server *s, char *out, size_t len) {
  snprintf(out, len, "%s/store/EMBER-SHARD", s->data_dir);
}

static ps_status identity_write(ps_server *s) {
  char path[2100];
  identity_path(s, path, sizeof path);
  json_t *j = json_pack("{s:I, s:I}", "shard", (json_int_t)s->opt.shard, "shards",
                        (json_int_t)s->opt.shards);
  ps_status st = j ? write_json_atomic(path, j) : PS_ERR_NOMEM;
  json_decref(j);
  if (st != PS_OK) PS_WARN("could not write %s", path);
  return st;
}

ps_status srv_identity_check(ps_server *s, ps_error *err) {
  char path[2100], meta[2100];
  identity_path(s, path, sizeof path);
  snprintf(meta, sizeof meta, "%s/ember-server.json", s->data_dir);
  json_error_t jerr;
  json_t *j = json_load_file(path, 0, &jerr);
  if (j) {
    json_int_t shard = -1, shards = -1;
    int rc = json_unpack(j, "{s:I, s:I}", "shard", &shard, "shards", &shards);
    json_decref(j);
    if (rc != 0) {
      return ps_error_set(err, PS_ERR_CORRUPT, "%s lacks shard/shards", path);
    }
    if (shard != s->opt.shard || shards != s->opt.shards) {
      return ps_error_set(err, PS_ERR_CONFLICT,
                          "data dir %s holds the store of shard %" PRId64 " of %" PRId64
                          " (%s); refusing to serve it as shard %u of %u (keys would be "
                          "misplaced)",
                          s->data_dir, (int64_t)shard, (int64_t)shards, path, s->opt.shard,
                          s->opt.shards);
    }
    return PS_OK;
  }
  if (access(path, F_OK) == 0) {
    return ps_error_set(err, PS_ERR_CORRUPT, "%s does not parse: %s", path, jerr.text);
  }
  uint32_t id;
  if (access(meta, F_OK) != 0 && ps_store_tables(s->store, &id, 1) > 0) {
    return ps_error_set(err, PS_ERR_CONFLICT,
                        "data dir %s has a store with tables but neither %s nor %s: its shard "
                        "cannot be known; refusing to serve it (restore one of them, or move the "
                        "data dir away)",
                        s->data_dir, meta, path);
  }
  /* A fresh store, or one from before the identity file (ember-server.json vouched for it). */
  ps_status st = identity_write(s);
  if (st != PS_OK)
    ps_error_set(err, st, "cannot record the shard in %s: %s", path, ps_status_str(st));
  return st;
}

void srv_log_existing_state(ps_server *s) {
  uint32_t ntables = 0;
  for (uint32_t id = 1; id <= s->max_table; id++) ntables += s->tables[id] != NULL;
  if (!ntables && !s->last.have) return;
  ps_store_stats st;
  ps_store_get_stats(s->store, &st);
  char ck[4200] = "no checkpoint";
  if (s->last.have)
    snprintf(ck, sizeof ck, "last checkpoint at step %" PRIu64 " in %s", s->last.step,
             s->last.path);
  PS_WARN("continuing from the existing state in %s: %u tables, about %" PRIu64 " rows, %s "
          "(an empty --data-dir starts a fresh model)",
          s->data_dir, ntables, st.rows_hot + st.rows_cold, ck);
}

/* N when root is ROOT/step-N or ROOT/step-N/shards (ps-worker's layout); -1 otherwise. */
static int64_t dir_step(const char *root) {
  uint64_t step;
  return ps_ckpt_path_split(root, NULL, 0, &step) ? (int64_t)step : -1;
}

ps_status srv_restore(ps_server *s, const char *path, uint64_t expect_step, uint64_t *step,
                      ps_error *err) {
  char root[4096], dir[4200], meta[4200];
  if (path && strlen(path) > 1800)
    return ps_error_set(err, PS_ERR_INVALID, "checkpoint path too long");
  if ((!path || !path[0]) && !s->last.have)
    return ps_error_set(err, PS_ERR_NOT_FOUND,
                        "RESTORE without a path, and shard %u has no checkpoint", s->opt.shard);
  /* The last checkpoint's recorded root is resolved already (a data dir written before roots
   * were absolute records one relative to the server's working directory). */
  if (!path || !path[0] || path == s->last.path) snprintf(root, sizeof root, "%s", s->last.path);
  else srv_ckpt_root(s, path, 0, root, sizeof root);
  if (!root[0]) return ps_error_set(err, PS_ERR_INVALID, "checkpoint path too long");
  ckpt_files(s, root, false, dir, meta, sizeof dir);
  json_error_t jerr;
  json_t *j = json_load_file(meta, 0, &jerr);
  if (!j) return ps_error_set(err, PS_ERR_NOT_FOUND, "checkpoint metadata %s: %s", meta, jerr.text);
  json_int_t st_step = 0, shards = 0;
  json_t *tables = NULL;
  if (json_unpack(j, "{s:I, s:I, s:o}", "step", &st_step, "shards", &shards, "tables", &tables) !=
          0 ||
      st_step < 0) {
    json_decref(j);
    return ps_error_set(err, PS_ERR_CORRUPT, "checkpoint metadata %s lacks step/shards/tables",
                        meta);
  }
  if (shards != s->opt.shards) {
    json_decref(j);
    return ps_error_set(err, PS_ERR_CONFLICT,
                        "checkpoint %s was taken with %" PRId64 " shards, this cluster has %u",
                        root, (int64_t)shards, s->opt.shards);
  }
  int64_t named = dir_step(root);
  if ((expect_step != SRV_ANY_STEP && (uint64_t)st_step != expect_step) ||
      (named >= 0 && named != st_step)) {
    json_decref(j);
    char why[128];
    if (expect_step != SRV_ANY_STEP && (uint64_t)st_step != expect_step)
      snprintf(why, sizeof why, "the data dir's metadata names step %" PRIu64, expect_step);
    else
      snprintf(why, sizeof why, "its directory is named step-%" PRId64, named);
    return ps_error_set(err, PS_ERR_CORRUPT,
                        "checkpoint %s records step %" PRId64 " (%s), but %s: refusing to "
                        "restore it",
                        root, (int64_t)st_step, meta, why);
  }
  /* A table declared here (provisional ones too: its first user's spec) with another row type
   * than the checkpoint's would be replaced by the checkpoint's silently: refused first. */
  for (uint32_t id = 1; id <= s->max_table; id++) {
    ps_table_spec cs;
    const srv_table *t = s->tables[id];
    if (!t || t->meta_unknown || ps_store_checkpoint_spec(dir, id, &cs, NULL) != PS_OK ||
        cs.row_type == t->spec.row_type)
      continue;
    json_decref(j);
    return ps_error_set(err, PS_ERR_CONFLICT,
                        "table %u '%s' is declared with another row type than checkpoint %s "
                        "holds: row_type %s vs %s (declared vs checkpoint)",
                        id, t->spec.name, root, ps_row_type_name(t->spec.row_type),
                        ps_row_type_name(cs.row_type));
  }
  ps_status st = ps_store_restore(s->store, dir, err);
  if (st != PS_OK) {
    json_decref(j);
    ps_error_prefix(err, "restoring %s failed: ", dir);
    return st;
  }
  identity_write(s); /* the restore swapped the store directory */
  /* Tables of the snapshot that we did not know (as many as memory allows), then their
   * consistency metadata. */
  srv_tables_adopt_store(s);
  if (json_is_array(tables)) apply_tables_meta(s, tables);
  json_decref(j);
  *step = (uint64_t)st_step;
  srv_tables_reset_steps(s, *step);
  ckpt_set(&s->last, *step, root);
  /* A prepare taken before the roll-back snapshots a state that no longer exists. */
  ps_error rerr;
  if (s->staged.have && ckpt_remove(s, s->staged.path, true, &rerr) != PS_OK)
    PS_WARN("could not delete the staging in %s: %s", s->staged.path, rerr.msg);
  s->staged.have = false;
  if (srv_meta_save(s, false) != PS_OK) PS_WARN("could not record the restore in the data dir");
  PS_INFO("restored %s (step %" PRIu64 ")", dir, *step);
  return PS_OK;
}

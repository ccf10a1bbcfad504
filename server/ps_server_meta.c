/* ps_server_meta: what a shard keeps in its data dir besides the store, and its checkpoints.
 *
 *   DIR/store/                  the store (RocksDB)
 *   DIR/ember-server.json       shard, shards, per-table consistency metadata, the last
 *                               checkpoint, and `clean` (false while running)
 *   ROOT/shard-I/               ps_store_snapshot of shard I (ROOT is the checkpoint path)
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps_fs.h"
#include "ps_log.h"
#include "ps_server_int.h"

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
  free(t->clock);
  free(t);
}

static json_t *tables_json(ps_server *s) {
  json_t *a = json_array();
  for (uint32_t id = 1; id <= s->max_table; id++) {
    srv_table *t = s->tables[id];
    if (!t || t->meta_unknown) continue;
    json_array_append_new(a, json_pack("{s:I, s:s, s:i, s:I, s:I}", "id", (json_int_t)id, "name",
                                       t->spec.name, "consistency", (int)t->spec.consistency, "staleness",
                                       (json_int_t)t->spec.staleness, "num_workers",
                                       (json_int_t)t->spec.num_workers));
  }
  return a;
}

static ps_status write_json_atomic(const char *path, json_t *j) {
  char tmp[4300];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return PS_ERR_IO;
  int rc = json_dumpf(j, f, JSON_INDENT(1) | JSON_SORT_KEYS);
  fputc('\n', f);
  if (fflush(f) != 0 || fsync(fileno(f)) != 0) rc = -1;
  if (fclose(f) != 0) rc = -1;
  if (rc != 0 || rename(tmp, path) != 0) {
    unlink(tmp);
    return PS_ERR_IO;
  }
  return PS_OK;
}

json_t *srv_ckpt_json(uint64_t step, const char *path) {
  return json_pack("{s:I, s:s}", "step", (json_int_t)step, "path", path);
}

/* A {"step", "path"} entry of the metadata; false when absent or malformed. */
static bool ckpt_from_json(json_t *e, uint64_t *step, char *path, size_t len) {
  json_int_t st = 0;
  const char *p = NULL;
  if (!e || json_unpack(e, "{s:I, s:s}", "step", &st, "path", &p) != 0 || !p || st < 0 ||
      strlen(p) >= len)
    return false;
  *step = (uint64_t)st;
  snprintf(path, len, "%s", p);
  return true;
}

ps_status srv_meta_save(ps_server *s, bool clean) {
  char path[2100];
  snprintf(path, sizeof path, "%s/ember-server.json", s->data_dir);
  json_t *j = json_pack("{s:i, s:I, s:I, s:b, s:o}", "format", 1, "shard",
                        (json_int_t)s->opt.shard, "shards", (json_int_t)s->opt.shards, "clean",
                        clean, "tables", tables_json(s));
  if (!j) return PS_ERR_NOMEM;
  if (s->have_ckpt)
    json_object_set_new(j, "last_checkpoint", srv_ckpt_json(s->ckpt_step, s->ckpt_path));
  if (s->have_staged)
    json_object_set_new(j, "prepared_checkpoint", srv_ckpt_json(s->staged_step, s->staged_path));
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
    if (old && !old->meta_unknown && ps_table_spec_stepping_equal(&old->spec, &spec)) {
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

ps_status srv_meta_load(ps_server *s, bool *clean) {
  *clean = true;
  char path[2100];
  snprintf(path, sizeof path, "%s/ember-server.json", s->data_dir);
  json_error_t jerr;
  json_t *j = json_load_file(path, 0, &jerr);
  if (!j) {
    if (access(path, F_OK) == 0) {
      PS_ERROR("%s does not parse: %s (line %d)", path, jerr.text, jerr.line);
      return PS_ERR_CORRUPT;
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
    PS_ERROR("%s lacks shard/shards/clean/tables", path);
    st = PS_ERR_CORRUPT;
    goto out;
  }
  if (shard != s->opt.shard || shards != s->opt.shards) {
    PS_ERROR("data dir %s belongs to shard %" PRId64 " of %" PRId64
             "; refusing to serve it as shard %u of %u (keys would be misplaced)",
             s->data_dir, (int64_t)shard, (int64_t)shards, s->opt.shard, s->opt.shards);
    st = PS_ERR_CONFLICT;
    goto out;
  }
  *clean = cl != 0;
  apply_tables_meta(s, tables);
  s->have_ckpt = ckpt_from_json(json_object_get(j, "last_checkpoint"), &s->ckpt_step,
                                s->ckpt_path, sizeof s->ckpt_path);
  s->have_staged = ckpt_from_json(json_object_get(j, "prepared_checkpoint"), &s->staged_step,
                                  s->staged_path, sizeof s->staged_path);
out:
  json_decref(j);
  return st;
}

void srv_ckpt_root(ps_server *s, const char *path, uint64_t step, char *out, size_t len) {
  if (!path || !path[0]) snprintf(out, len, "%s/checkpoints/step-%" PRIu64, s->data_dir, step);
  else if (path[0] == '/') snprintf(out, len, "%s", path);
  else snprintf(out, len, "%s/%s", s->data_dir, path);
}

/* This shard's snapshot directory and metadata file under root: committed or staging. */
static void ckpt_files(ps_server *s, const char *root, bool staging, char *dir, char *meta,
                       size_t len) {
  const char *sfx = staging ? ".staging" : "";
  snprintf(dir, len, "%s/shard-%u%s", root, s->opt.shard, sfx);
  snprintf(meta, len, "%s/shard-%u%s.json", root, s->opt.shard, sfx);
}

/* Deletes this shard's checkpoint files under root (committed or staging). */
static ps_status ckpt_remove(ps_server *s, const char *root, bool staging) {
  char dir[4200], meta[4200];
  ckpt_files(s, root, staging, dir, meta, sizeof dir);
  ps_status st = ps_store_snapshot_remove(dir);
  if (unlink(meta) != 0 && errno != ENOENT) st = PS_ERR_IO;
  return st;
}

/* Forgets the prepared checkpoint: staging first, then the record, so that a failure in
 * between leaves a record that the next start deletes again. */
static ps_status staged_drop(ps_server *s) {
  if (!s->have_staged) return PS_OK;
  ps_status st = ckpt_remove(s, s->staged_path, true);
  if (st != PS_OK) PS_WARN("could not delete the staging of step %" PRIu64 " in %s",
                           s->staged_step, s->staged_path);
  s->have_staged = false;
  if (srv_meta_save(s, false) != PS_OK) PS_WARN("could not record the dropped staging");
  return st;
}

void srv_ckpt_discard_staged(ps_server *s) {
  if (!s->have_staged) return;
  /* A commit that renamed the files and died before recording them was never acknowledged,
   * so no driver counts it as committed: its final files go too. They are this prepare's,
   * since a prepare refuses a root where this shard already has a checkpoint. */
  char dir[4200], meta[4200];
  ckpt_files(s, s->staged_path, false, dir, meta, sizeof dir);
  bool renamed = access(dir, F_OK) == 0 &&
                 !(s->have_ckpt && strcmp(s->ckpt_path, s->staged_path) == 0);
  PS_WARN("deleting checkpoint of step %" PRIu64 " in %s: prepared, never committed",
          s->staged_step, s->staged_path);
  if (renamed && ckpt_remove(s, s->staged_path, false) != PS_OK)
    PS_WARN("could not delete %s", dir);
  staged_drop(s);
}

/* Phase 1: snapshot into staging. Not this shard's last checkpoint until committed. */
static ps_status ckpt_prepare(ps_server *s, uint64_t step, const char *root, char *err,
                              size_t errlen) {
  char dir[4200], meta[4200];
  ckpt_files(s, root, false, dir, meta, sizeof dir);
  if (access(dir, F_OK) == 0) {
    snprintf(err, errlen, "checkpoint %s already exists", dir);
    return PS_ERR_CONFLICT;
  }
  /* One prepared checkpoint at a time: a new prepare means the driver gave up on the old one. */
  staged_drop(s);
  ckpt_files(s, root, true, dir, meta, sizeof dir);
  if (access(dir, F_OK) == 0) {
    snprintf(err, errlen, "%s exists and is not a prepare of this shard", dir);
    return PS_ERR_CONFLICT;
  }
  if (ps_mkdir_p(root) != PS_OK) {
    snprintf(err, errlen, "cannot create checkpoint dir %s: %s", root, strerror(errno));
    return PS_ERR_IO;
  }
  s->have_staged = true;
  s->staged_step = step;
  snprintf(s->staged_path, sizeof s->staged_path, "%s", root);
  ps_status st = srv_meta_save(s, false);
  if (st != PS_OK) {
    s->have_staged = false;
    snprintf(err, errlen, "cannot record the staging in %s", s->data_dir);
    return st;
  }
  st = ps_store_snapshot(s->store, dir);
  if (st != PS_OK) {
    snprintf(err, errlen, "snapshot into %s failed: %s", dir, ps_status_str(st));
    staged_drop(s);
    return st;
  }
  json_t *j = json_pack("{s:i, s:I, s:I, s:I, s:o}", "format", 1, "step", (json_int_t)step,
                        "shard", (json_int_t)s->opt.shard, "shards", (json_int_t)s->opt.shards,
                        "tables", tables_json(s));
  st = j ? write_json_atomic(meta, j) : PS_ERR_NOMEM;
  json_decref(j);
  if (st != PS_OK) {
    snprintf(err, errlen, "cannot write %s", meta);
    staged_drop(s);
    return st;
  }
  PS_INFO("checkpoint at step %" PRIu64 " prepared in %s", step, dir);
  return PS_OK;
}

static ps_status fsync_dir(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return PS_ERR_IO;
  int rc = fsync(fd);
  close(fd);
  return rc == 0 ? PS_OK : PS_ERR_IO;
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
  if (rename(fm, tm) != 0 || fsync_dir(root) != PS_OK) {
    rename(tm, fm);
    rename(td, fd);
    return PS_ERR_IO;
  }
  return PS_OK;
}

/* Phase 2: staging -> final, and only then the record that makes it the last checkpoint. */
static ps_status ckpt_commit(ps_server *s, uint64_t step, const char *root, char *err,
                             size_t errlen) {
  if (!s->have_staged || s->staged_step != step || strcmp(s->staged_path, root) != 0) {
    /* A repeated commit (the first one's reply was lost) finds its work done. */
    if (s->have_ckpt && s->ckpt_step == step && strcmp(s->ckpt_path, root) == 0) return PS_OK;
    snprintf(err, errlen,
             "shard %u has no prepared checkpoint of step %" PRIu64 " in %s (aborted, "
             "superseded by another prepare, or the shard restarted since)",
             s->opt.shard, step, root);
    return PS_ERR_NOT_FOUND;
  }
  if (ckpt_move(s, root, true) != PS_OK) {
    snprintf(err, errlen, "cannot rename the staging of shard %u in %s", s->opt.shard, root);
    return PS_ERR_IO;
  }
  bool had = s->have_ckpt;
  uint64_t prev_step = s->ckpt_step;
  char prev[sizeof s->ckpt_path];
  memcpy(prev, s->ckpt_path, sizeof prev);
  s->have_staged = false;
  s->have_ckpt = true;
  s->ckpt_step = step;
  snprintf(s->ckpt_path, sizeof s->ckpt_path, "%s", root);
  ps_status st = srv_meta_save(s, false);
  if (st != PS_OK) {
    /* Not recorded, so not committed: back to prepared, which an abort or the next start
     * cleans up, and the previous checkpoint stays the one a restart restores. */
    s->have_staged = true;
    s->have_ckpt = had;
    s->ckpt_step = prev_step;
    memcpy(s->ckpt_path, prev, sizeof prev);
    if (ckpt_move(s, root, false) != PS_OK)
      PS_WARN("could not move the checkpoint in %s back to staging", root);
    snprintf(err, errlen, "cannot record the checkpoint in %s", s->data_dir);
    return st;
  }
  PS_INFO("checkpoint at step %" PRIu64 " committed in %s", step, root);
  return PS_OK;
}

ps_status srv_checkpoint(ps_server *s, int phase, uint64_t step, const char *path, char *err,
                         size_t errlen, char *dir_out, size_t dir_len) {
  char root[4096];
  if (path && strlen(path) > 1800) {
    snprintf(err, errlen, "checkpoint path too long");
    return PS_ERR_INVALID;
  }
  srv_ckpt_root(s, path, step, root, sizeof root);
  snprintf(dir_out, dir_len, "%s", root);
  ps_status st = PS_OK;
  switch (phase) {
    case EMBER__CKPT_PHASE__CKPT_PREPARE: return ckpt_prepare(s, step, root, err, errlen);
    case EMBER__CKPT_PHASE__CKPT_COMMIT: return ckpt_commit(s, step, root, err, errlen);
    case EMBER__CKPT_PHASE__CKPT_ABORT:
      /* Nothing prepared there is fine: an abort goes to every shard, prepared or not. */
      if (s->have_staged && s->staged_step == step && strcmp(s->staged_path, root) == 0) {
        PS_INFO("checkpoint at step %" PRIu64 " in %s aborted", step, root);
        st = staged_drop(s);
        if (st != PS_OK) snprintf(err, errlen, "could not delete the staging in %s", root);
      }
      return st;
    default:
      /* A sender without phases: both at once, as before; no cross-shard guarantee. */
      if ((st = ckpt_prepare(s, step, root, err, errlen)) != PS_OK) return st;
      return ckpt_commit(s, step, root, err, errlen);
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

ps_status srv_restore(ps_server *s, const char *path, uint64_t *step, char *err, size_t errlen) {
  char root[4096], dir[4200], meta[4200];
  if (path && strlen(path) > 1800) {
    snprintf(err, errlen, "checkpoint path too long");
    return PS_ERR_INVALID;
  }
  if ((!path || !path[0]) && !s->have_ckpt) {
    snprintf(err, errlen, "RESTORE without a path, and shard %u has no checkpoint", s->opt.shard);
    return PS_ERR_NOT_FOUND;
  }
  if (!path || !path[0]) snprintf(root, sizeof root, "%s", s->ckpt_path);
  else srv_ckpt_root(s, path, 0, root, sizeof root);
  ckpt_files(s, root, false, dir, meta, sizeof dir);
  json_error_t jerr;
  json_t *j = json_load_file(meta, 0, &jerr);
  if (!j) {
    snprintf(err, errlen, "checkpoint metadata %s: %s", meta, jerr.text);
    return PS_ERR_NOT_FOUND;
  }
  json_int_t st_step = 0, shards = 0;
  json_t *tables = NULL;
  if (json_unpack(j, "{s:I, s:I, s:o}", "step", &st_step, "shards", &shards, "tables", &tables) !=
          0 ||
      st_step < 0) {
    json_decref(j);
    snprintf(err, errlen, "checkpoint metadata %s lacks step/shards/tables", meta);
    return PS_ERR_CORRUPT;
  }
  if (shards != s->opt.shards) {
    json_decref(j);
    snprintf(err, errlen, "checkpoint %s was taken with %" PRId64 " shards, this cluster has %u",
             root, (int64_t)shards, s->opt.shards);
    return PS_ERR_CONFLICT;
  }
  ps_status st = ps_store_restore(s->store, dir);
  if (st != PS_OK) {
    json_decref(j);
    snprintf(err, errlen, "restoring %s failed: %s", dir, ps_status_str(st));
    return st;
  }
  /* Tables of the snapshot that we did not know, then their consistency metadata. */
  uint32_t ids[PS_STORE_MAX_TABLES];
  size_t nt = ps_store_tables(s->store, ids, PS_STORE_MAX_TABLES);
  for (size_t i = 0; i < nt; i++) {
    if (ids[i] == 0 || ids[i] > PS_WIRE_MAX_TABLE || s->tables[ids[i]]) continue;
    ps_table_spec sp;
    if (ps_store_get_spec(s->store, ids[i], &sp) != PS_OK) continue;
    srv_table *t = srv_table_new(&sp);
    if (!t) continue;
    t->meta_unknown = true;
    s->tables[ids[i]] = t;
    if (ids[i] > s->max_table) s->max_table = ids[i];
  }
  if (json_is_array(tables)) apply_tables_meta(s, tables);
  json_decref(j);
  *step = (uint64_t)st_step;
  srv_drop_sync_all(s);
  srv_tables_reset_steps(s, *step);
  s->have_ckpt = true;
  s->ckpt_step = *step;
  snprintf(s->ckpt_path, sizeof s->ckpt_path, "%s", root);
  /* A prepare taken before the roll-back snapshots a state that no longer exists. */
  if (s->have_staged && ckpt_remove(s, s->staged_path, true) != PS_OK)
    PS_WARN("could not delete the staging in %s", s->staged_path);
  s->have_staged = false;
  if (srv_meta_save(s, false) != PS_OK) PS_WARN("could not record the restore in the data dir");
  PS_INFO("restored %s (step %" PRIu64 ")", dir, *step);
  return PS_OK;
}

/* ps_train_ckpt: ps-worker's checkpoints and --resume. A checkpoint is a directory
 * <checkpoint-dir>/step-S holding every shard's snapshot (shards/, written by the servers), the
 * dense state (dense.bin, written by rank 0) and the flags that fix what a key and a row mean
 * and which model the dense state is (config: --interaction too; a config without it was
 * written for a dot model); <checkpoint-dir>/latest names the newest.
 *
 * Two-phase across shards: every shard prepares its snapshot at step S, then all commit, and
 * only then is `latest` replaced (write + rename), so a crash at any point leaves the previous
 * checkpoint whole. Resume rolls every shard back to the same step before any rank trains.
 *
 * Incremental: each checkpoint names the previous one (of this run, or the one it resumed from)
 * as its base, so a shard whose last checkpoint that is writes only the rows changed since;
 * every --checkpoint-full-every K-th is full (the shards count, docs/CHECKPOINTS.md).
 *
 * Trust: dense.bin ends in an XXH3 checksum of everything before it, and config is compared
 * with the run's flags before anything connects; a mismatch or a bad checksum refuses the
 * resume. Checkpoints written before either existed resume with a warning. */
#include <errno.h>
#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_ckpt_layout.h"
#include "ps_dense_file.h"
#include "ps_fs.h"
#include "ps_hash.h"
#include "ps_kvfile.h"
#include "ps_train_int.h"

#define TRY PS_TRAIN_TRY
#define CKPT_MAGIC_V1 PS_DENSE_MAGIC_V1
#define CKPT_MAGIC PS_DENSE_MAGIC

/* Dense state of a checkpoint, written by rank 0 beside the shards' snapshots: dense.bin,
 * whose format (and checksum, ps_dense_sum) ps_dense_file.h defines. */
#define dense_sum ps_dense_sum
static ps_status save_dense(ps_trainer *t, const char *dir) {
  char path[4096];
  TRY(ps_ckpt_file_path(path, sizeof path, dir, PS_CKPT_DENSE));
  size_t np = t->nparams, ns = ps_dlrm_opt_state_len(t->model);
  float *state = ns ? malloc(ns * sizeof(float)) : NULL;
  if (ns && !state) return PS_ERR_NOMEM;
  int kind = -1;
  int64_t ostep = 0;
  ps_status st = ps_dlrm_get_params(t->model, t->host_grads, np);
  if (st == PS_OK) st = ps_dlrm_get_opt_state(t->model, &kind, &ostep, state, ns);
  FILE *f = st == PS_OK ? fopen(path, "wb") : NULL;
  if (st == PS_OK && !f) st = PS_ERR_IO;
  if (f) {
    uint64_t h[3] = {CKPT_MAGIC, t->step, np};
    int64_t o[2] = {kind, ostep};
    uint64_t nsu = ns, sum = dense_sum(h, t->host_grads, o, nsu, state);
    int ok = fwrite(h, sizeof h, 1, f) == 1 && fwrite(t->host_grads, sizeof(float), np, f) == np &&
             fwrite(o, sizeof o, 1, f) == 1 && fwrite(&nsu, sizeof nsu, 1, f) == 1 &&
             (ns == 0 || fwrite(state, sizeof(float), ns, f) == ns) &&
             fwrite(&sum, sizeof sum, 1, f) == 1;
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) ok = 0;
    if (fclose(f) != 0 || !ok) st = PS_ERR_IO;
  }
  free(state);
  if (st != PS_OK) PS_ERROR("writing %s: %s", path, ps_status_str(st));
  return st;
}

static ps_status load_dense(ps_trainer *t, const char *dir, uint64_t *step) {
  char path[4096];
  TRY(ps_ckpt_file_path(path, sizeof path, dir, PS_CKPT_DENSE));
  FILE *f = fopen(path, "rb");
  if (!f) {
    PS_ERROR("cannot open %s: %s", path, strerror(errno));
    return PS_ERR_NOT_FOUND;
  }
  ps_status st = PS_ERR_CORRUPT;
  uint64_t h[3];
  int64_t o[2];
  uint64_t ns = 0;
  float *state = NULL;
  size_t np = t->nparams;
  uint64_t sum = 0;
  bool damaged = false;
  if (fread(h, sizeof h, 1, f) != 1 || (h[0] != CKPT_MAGIC && h[0] != CKPT_MAGIC_V1) ||
      h[2] != np)
    goto out;
  if (fread(t->host_grads, sizeof(float), np, f) != np) goto out;
  if (fread(o, sizeof o, 1, f) != 1 || fread(&ns, sizeof ns, 1, f) != 1 || ns > 2 * np) goto out;
  state = ns ? malloc(ns * sizeof(float)) : NULL;
  if (ns && (!state || fread(state, sizeof(float), ns, f) != ns)) goto out;
  if (h[0] == CKPT_MAGIC_V1) {
    if (t->rank == 0)
      PS_WARN("%s has no checksum (written by an older ps-worker): not verified", path);
  } else if (fread(&sum, sizeof sum, 1, f) != 1 || fgetc(f) != EOF ||
             sum != dense_sum(h, t->host_grads, o, ns, state)) {
    damaged = true;
    goto out;
  }
  st = ps_dlrm_set_params(t->model, t->host_grads, np);
  if (st == PS_OK) st = ps_dlrm_set_opt_state(t->model, (int)o[0], o[1], state, ns);
  *step = h[1];
out:
  free(state);
  fclose(f);
  if (damaged)
    PS_ERROR("%s: checksum mismatch: the file is damaged; resume from another checkpoint "
             "(edit %s/latest)", path, t->cfg->checkpoint_dir);
  else if (st != PS_OK)
    PS_ERROR("%s: not a checkpoint of this model (%s)", path, ps_status_str(st));
  return st;
}

/* The flags that fix what a key and a row mean (a key's hashing, a row's width and optimizer
 * state, the model the dense state belongs to), as a checkpoint's config records them. */
#define CKPT_NFLAGS 7
typedef struct ckpt_flag {
  const char *name;
  char value[256];
  const char *absent; /* its value in a config written before the flag existed (NULL: none) */
  const char *why;    /* what a change would break */
} ckpt_flag;

static void ckpt_flags(const ps_train_config *c, const ps_train_plan *p,
                       ckpt_flag f[CKPT_NFLAGS]) {
  f[0].name = "hash-buckets";
  snprintf(f[0].value, sizeof f[0].value, "%" PRId64, c->hash_buckets);
  f[1].name = "emb-dim";
  snprintf(f[1].value, sizeof f[1].value, "%d", c->emb_dim);
  f[2].name = "mlp-bot";
  snprintf(f[2].value, sizeof f[2].value, "%s", p->mlp_bot_text);
  f[3].name = "mlp-top";
  snprintf(f[3].value, sizeof f[3].value, "%s", c->mlp_top);
  f[4].name = "sparse-opt";
  snprintf(f[4].value, sizeof f[4].value, "%s", c->sparse_opt);
  f[5].name = "schema"; /* what the columns mean (ps_schema_signature); older configs lack it */
  ps_schema_signature(p->schema, f[5].value, sizeof f[5].value);
  /* the model the dense state belongs to: a dot model's parameters are not a DCN model's */
  f[6].name = "interaction";
  if (p->interaction == PS_DLRM_DCN)
    snprintf(f[6].value, sizeof f[6].value, "dcn --dcn-layers %d --dcn-rank %d", c->dcn_layers,
             p->dcn_rank);
  else
    snprintf(f[6].value, sizeof f[6].value, "dot");
  for (int i = 0; i < CKPT_NFLAGS; i++) {
    f[i].absent = NULL; /* schema: a config without it predates schemas, not compared */
    f[i].why = "it changes what a key or a row means";
  }
  f[6].absent = "dot"; /* every model before --interaction */
  f[6].why = "its dense state is another model's";
}

/* A JSON schema file copied into the checkpoint as schema.json, so ps-predict and ps-export
 * read the columns the model was trained on without the original file. */
static int copy_schema(const char *from, const char *dir) {
  char path[4200];
  return ps_ckpt_file_path(path, sizeof path, dir, PS_CKPT_SCHEMA) == PS_OK &&
         ps_copy_file(from, path) == PS_OK;
}

static ps_status save_config(ps_trainer *t, const char *dir) {
  char path[4200];
  TRY(ps_ckpt_file_path(path, sizeof path, dir, PS_CKPT_CONFIG));
  ckpt_flag fl[CKPT_NFLAGS];
  ckpt_flags(t->cfg, t->plan, fl);
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  if (!m) return PS_ERR_NOMEM;
  fprintf(m, "# ps-worker: the flags that fix what a key and a row mean; --resume compares\n");
  for (int i = 0; i < CKPT_NFLAGS; i++) fprintf(m, "%s=%s\n", fl[i].name, fl[i].value);
  /* What ps-predict and ps-export need beyond the compared flags (older configs lack these
   * lines; docs/CHECKPOINTS.md): the schema (built in, or the copy beside this file), the
   * embedding table's id in the shards (the interaction is a compared flag above). Last, the checksum
   * of everything before it (ps_kvfile.h). */
  bool builtin = ps_schema_is_criteo(t->plan->schema);
  char table[PS_TABLE_NAME_MAX];
  ps_train_table_name(t->cfg, t->plan, table, sizeof table);
  fprintf(m, "schema-file=%s\ntable-id=%u\ntable-name=%s\n",
          builtin ? "criteo" : ps_ckpt_file_name(PS_CKPT_SCHEMA), PS_TRAIN_TABLE_ID, table);
  if (fclose(m) != 0) {
    free(text);
    return PS_ERR_NOMEM;
  }
  ps_error werr;
  ps_status st = PS_OK;
  if (!builtin && !copy_schema(t->cfg->schema, dir))
    st = ps_error_set(&werr, PS_ERR_IO, "copying %s into %s: %s", t->cfg->schema, dir,
                      strerror(errno));
  if (st == PS_OK) st = ps_kvfile_write(path, text, len, &werr);
  free(text);
  if (st != PS_OK) {
    PS_ERROR("writing %s: %s", path, werr.msg);
    return PS_ERR_IO;
  }
  return PS_OK;
}

/* The input position the checkpoint trained up to (the `input` file): the data lines and, for
 * text, the bytes of --train read through the last trained batch's round. Written only when
 * batches carry an exact position (file order); a resume on the same plain file starts there
 * instead of re-reading and dropping the trained batches, and a stream's wrapper (deploy/
 * kafka-train) commits its offsets from it. "stream" says whether the lines were a stream's
 * (counted from that stream's start) or a file's (from its first data line). */
static ps_status save_input(ps_trainer *t, const char *dir) {
  if (!t->strm.have_pos) return PS_OK;
  char path[4200], text[9000], abs[4096];
  TRY(ps_ckpt_file_path(path, sizeof path, dir, PS_CKPT_INPUT));
  const char *train = t->plan->train_stream || !realpath(t->cfg->train, abs) ? t->cfg->train : abs;
  int len = snprintf(text, sizeof text, "# ps-worker: how far into --train this checkpoint "
                     "trained\ntrain=%s\nstream=%d\nlines=%" PRIu64 "\nbytes=%" PRIu64 "\n",
                     train, t->plan->train_stream, t->strm.in_line, t->strm.in_byte);
  ps_error werr;
  if (len < 0 || (size_t)len >= sizeof text ||
      ps_kvfile_write(path, text, (size_t)len, &werr) != PS_OK) {
    PS_ERROR("writing %s: %s", path, len < 0 || (size_t)len >= sizeof text ? "too long" : werr.msg);
    return PS_ERR_IO;
  }
  return PS_OK;
}

/* The position of save_input, into t->strm (have_pos); none (an older checkpoint, a run with
 * a shuffle buffer) leaves have_pos false. A damaged file is refused. */
static ps_status load_input(ps_trainer *t, const char *dir) {
  char path[4800];
  TRY(ps_ckpt_file_path(path, sizeof path, dir, PS_CKPT_INPUT));
  ps_kvfile *kv = NULL;
  ps_error err;
  ps_status st = ps_kvfile_read(path, &kv, &err);
  if (st == PS_ERR_NOT_FOUND) return PS_OK;
  if (st != PS_OK) {
    PS_ERROR("--resume: %s", err.msg);
    return st;
  }
  const char *l = ps_kvfile_get(kv, "lines"), *b = ps_kvfile_get(kv, "bytes");
  const char *f = ps_kvfile_get(kv, "train");
  snprintf(t->strm.in_train, sizeof t->strm.in_train, "%s", f ? f : "");
  if (l && b) {
    t->strm.in_line = strtoull(l, NULL, 10);
    t->strm.in_byte = strtoull(b, NULL, 10);
    t->strm.have_pos = true;
  }
  ps_kvfile_free(&kv);
  return PS_OK;
}

/* The directory `latest` names, into dir; PS_ERR_NOT_FOUND when there is none. */
static ps_status latest_dir(const char *base, char *dir, size_t n) {
  return ps_ckpt_latest_dir(base, dir, n, NULL) == PS_OK ? PS_OK : PS_ERR_NOT_FOUND;
}

void ps_train_table_name(const ps_train_config *c, const ps_train_plan *p, char *out,
                         size_t n) {
  snprintf(out, n, "%s", c->resume ? PS_TRAIN_TABLE_NAME : ps_schema_table(p->schema));
  char dir[4600], path[4700];
  ps_kvfile *kv = NULL;
  if (!c->resume || latest_dir(c->checkpoint_dir, dir, sizeof dir) != PS_OK ||
      ps_ckpt_file_path(path, sizeof path, dir, PS_CKPT_CONFIG) != PS_OK ||
      ps_kvfile_read(path, &kv, NULL) != PS_OK)
    return; /* a damaged config: --resume's check of the flags says so */
  const char *v = ps_kvfile_get(kv, "table-name");
  if (v) snprintf(out, n, "%s", v);
  ps_kvfile_free(&kv);
}

static ps_status ckpt_mismatch(const ckpt_flag *fl, const char *dir, const char *was,
                               ps_error *err) {
  return ps_error_set(err, PS_ERR_INVALID, "--resume: --%s is %s but the checkpoint %s was "
                      "trained with %s (%s)", fl->name, fl->value, dir, was, fl->why);
}

/* A checkpoint's shard count (its shards/shard-I directories) against --servers': the rows
 * are placed by ps_shard_of over the count, so another count is refused before anything
 * connects, with the ps-reshard command that rewrites the checkpoint for it. Not resharded
 * here: ps-worker does not link the store, the move is offline work the other ranks would
 * wait on, and a directory beside the checkpoint is not one a fresh server pins as its root
 * (docs/CHECKPOINTS.md, "Resharding"). */
static ps_status check_shard_count(const ps_train_config *c, const char *dir, ps_error *err) {
  uint32_t have = ps_ckpt_count_shards(dir, UINT32_MAX), want = 1;
  for (const char *p = c->servers; p && *p; p++) want += *p == ',';
  if (have == 0 || have == want) return PS_OK; /* none: the restore says what is missing */
  char abs[4096];
  const char *d = realpath(c->checkpoint_dir, abs) ? abs : c->checkpoint_dir;
  return ps_error_set(err, PS_ERR_INVALID, "--resume: the checkpoint %s was taken on %u shards "
                      "and --servers names %u: rewrite it first with `ps-reshard --checkpoint "
                      "%s --shards %u --out %s-%ushards`, then resume with --checkpoint-dir "
                      "%s-%ushards", dir, have, want, d, want, d, want, d, want);
}

ps_status ps_train_ckpt_check_flags(const ps_train_config *c, const ps_train_plan *p,
                                    ps_error *err) {
  char dir[4600], path[4700];
  if (latest_dir(c->checkpoint_dir, dir, sizeof dir) != PS_OK)
    return ps_error_set(err, PS_ERR_INVALID, "--resume: --checkpoint-dir %s has no checkpoint "
                        "(no %s/latest)", c->checkpoint_dir, c->checkpoint_dir);
  TRY(ps_ckpt_file_path(path, sizeof path, dir, PS_CKPT_CONFIG));
  /* a damaged config is refused; one without a checksum (older) is read as is */
  ps_kvfile *kv = NULL;
  ps_status vs = ps_kvfile_read(path, &kv, err);
  if (vs == PS_ERR_NOT_FOUND) {
    PS_WARN("%s: no config (written by an older ps-worker): --hash-buckets, --emb-dim, "
            "--mlp-bot, --mlp-top, --sparse-opt and --interaction are not compared with the "
            "checkpoint's", dir);
    return check_shard_count(c, dir, err);
  }
  if (vs != PS_OK) return ps_error_prefix(err, "--resume: ");
  ckpt_flag fl[CKPT_NFLAGS];
  ckpt_flags(c, p, fl);
  bool seen[CKPT_NFLAGS] = {false};
  ps_status st = PS_OK;
  for (size_t l = 0; st == PS_OK && l < ps_kvfile_count(kv); l++) {
    const char *name = ps_kvfile_name(kv, l), *value = ps_kvfile_value(kv, l);
    for (int i = 0; i < CKPT_NFLAGS; i++) {
      if (strcmp(name, fl[i].name) != 0) continue;
      seen[i] = true;
      if (strcmp(value, fl[i].value) != 0) st = ckpt_mismatch(&fl[i], dir, value, err);
    }
  }
  ps_kvfile_free(&kv);
  for (int i = 0; i < CKPT_NFLAGS && st == PS_OK; i++)
    if (!seen[i] && fl[i].absent && strcmp(fl[i].absent, fl[i].value) != 0)
      st = ckpt_mismatch(&fl[i], dir, fl[i].absent, err);
  return st == PS_OK ? check_shard_count(c, dir, err) : st;
}

/* At the boundary before step S (every rank's STEP(S-1) sent, rank 0's STEP(S) not yet):
 * every shard snapshots at S (prepared on all, then committed on all), rank 0 writes the
 * dense state, then `latest` is replaced atomically (rename), so a crash leaves the previous
 * checkpoint intact. */
ps_status ps_train_checkpoint(ps_trainer *t) {
  t->ckpt_step = t->step; /* every rank: the end of the run writes no second one */
  t->have_ckpt = true;
  t->strm.t_ckpt = ps_now_ns(); /* --checkpoint-every-s counts from here */
  if (t->rank != 0) return PS_OK;
  char dir[4096];
  char abs_base[4096];
  if (!realpath(t->cfg->checkpoint_dir, abs_base)) {
    PS_ERROR("--checkpoint-dir %s: %s", t->cfg->checkpoint_dir, strerror(errno));
    return PS_ERR_IO;
  }
  TRY(ps_ckpt_step_path(dir, sizeof dir, abs_base, t->step));
  /* A step-S directory that `latest` does not name was left by a checkpoint the worker never
   * recorded (the shards committed it, then a crash came before `latest` moved). This run
   * re-executed those steps from an earlier checkpoint, so its checkpoint replaces that one
   * instead of failing on "already exists". */
  char named[4200];
  struct stat sb;
  if (stat(dir, &sb) == 0 &&
      (latest_dir(abs_base, named, sizeof named) != PS_OK || strcmp(named, dir) != 0)) {
    PS_WARN("%s was left by an interrupted checkpoint (%s/latest does not name it): replacing it",
            dir, abs_base);
    if (ps_rm_rf(dir) != PS_OK) {
      PS_ERROR("removing %s: %s", dir, strerror(errno));
      return PS_ERR_IO;
    }
  }
  TRY(ps_mkdir_p(dir));
  char shards[4200];
  TRY(ps_ckpt_file_path(shards, sizeof shards, dir, PS_CKPT_SHARDS));
  uint64_t t0 = ps_now_ns();
  /* A delta against the previous checkpoint of this run (or the one it resumed from); each
   * shard writes a full one instead when it cannot (docs/CHECKPOINTS.md). */
  ps_status st = ps_client_checkpoint_delta(t->cl, t->step, shards,
                                            t->ckpt_base[0] ? t->ckpt_base : NULL,
                                            (uint32_t)t->cfg->checkpoint_full_every, &t->cerr);
  if (st != PS_OK) return ps_train_client_fail(t, "checkpoint", st);
  snprintf(t->ckpt_base, sizeof t->ckpt_base, "%s", shards);
  TRY(save_dense(t, dir));
  TRY(save_config(t, dir));
  TRY(save_input(t, dir));
  ps_error werr;
  if (ps_ckpt_latest_write(abs_base, t->step, &werr) != PS_OK) {
    PS_ERROR("%s", werr.msg);
    return PS_ERR_IO;
  }
  PS_INFO("checkpoint at step %" PRIu64 " in %s (%.2f s)", t->step, dir, ps_train_since(t0));
  return PS_OK;
}

/* --resume: every rank loads the dense state of `latest`; rank 0 rolls every shard back to
 * the same checkpoint first, and the others wait for that at a barrier. */
ps_status ps_train_resume(ps_trainer *t, uint64_t *step) {
  char abs_base[4096], dir[4600], shards[4700];
  if (!realpath(t->cfg->checkpoint_dir, abs_base)) {
    PS_ERROR("--resume: no checkpoint directory %s", t->cfg->checkpoint_dir);
    return PS_ERR_NOT_FOUND;
  }
  if (latest_dir(abs_base, dir, sizeof dir) != PS_OK) {
    PS_ERROR("--resume: %s has no checkpoint (no %s/latest)", abs_base, abs_base);
    return PS_ERR_NOT_FOUND;
  }
  TRY(ps_ckpt_file_path(shards, sizeof shards, dir, PS_CKPT_SHARDS));
  TRY(load_dense(t, dir, step));
  TRY(load_input(t, dir));
  if (t->rank == 0) {
    uint64_t sstep = 0;
    ps_status st = ps_client_restore(t->cl, shards, &sstep, &t->cerr);
    if (st != PS_OK) return ps_train_client_fail(t, "restoring the shards", st);
    if (sstep != *step) {
      PS_ERROR("checkpoint %s: shards are at step %" PRIu64 ", dense state at %" PRIu64, dir,
               sstep, *step);
      return PS_ERR_CORRUPT;
    }
    snprintf(t->ckpt_base, sizeof t->ckpt_base, "%s", shards);
  }
  if (t->world > 1) {
    ps_status st = ps_client_barrier(t->cl, "ember/train/restored", (uint32_t)t->world,
                                     600000u, &t->cerr);
    if (st != PS_OK) return ps_train_client_fail(t, "restore barrier", st);
  }
  PS_INFO("resumed from %s at step %" PRIu64, dir, *step);
  return PS_OK;
}

/* ps_train_ckpt: ps-worker's checkpoints and --resume. A checkpoint is a directory
 * <checkpoint-dir>/step-S holding every shard's snapshot (shards/, written by the servers) and
 * the dense state (dense.bin, written by rank 0); <checkpoint-dir>/latest names the newest.
 *
 * Two-phase across shards: every shard prepares its snapshot at step S, then all commit, and
 * only then is `latest` replaced (write + rename), so a crash at any point leaves the previous
 * checkpoint whole. Resume rolls every shard back to the same step before any rank trains. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps_fs.h"
#include "ps_train_int.h"

#define TRY PS_TRAIN_TRY
#define CKPT_MAGIC 0x454d424552434b31ull /* "EMBERCK1" */

/* snprintf into a path buffer; PS_ERR_INVALID when the path does not fit. */
static ps_status pathf(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static ps_status pathf(char *out, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int r = vsnprintf(out, n, fmt, ap);
  va_end(ap);
  return r < 0 || (size_t)r >= n ? PS_ERR_INVALID : PS_OK;
}

/* Dense state of a checkpoint, written by rank 0 beside the shards' snapshots:
 *   u64 magic, u64 step, u64 nparams, f32 params[nparams],
 *   i64 opt kind, i64 opt step, u64 nstate, f32 state[nstate]. */
static ps_status save_dense(ps_trainer *t, const char *dir) {
  char path[4096];
  TRY(pathf(path, sizeof path, "%s/dense.bin", dir));
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
    uint64_t nsu = ns;
    int ok = fwrite(h, sizeof h, 1, f) == 1 && fwrite(t->host_grads, sizeof(float), np, f) == np &&
             fwrite(o, sizeof o, 1, f) == 1 && fwrite(&nsu, sizeof nsu, 1, f) == 1 &&
             (ns == 0 || fwrite(state, sizeof(float), ns, f) == ns);
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) ok = 0;
    if (fclose(f) != 0 || !ok) st = PS_ERR_IO;
  }
  free(state);
  if (st != PS_OK) PS_ERROR("writing %s: %s", path, ps_status_str(st));
  return st;
}

static ps_status load_dense(ps_trainer *t, const char *dir, uint64_t *step) {
  char path[4096];
  TRY(pathf(path, sizeof path, "%s/dense.bin", dir));
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
  if (fread(h, sizeof h, 1, f) != 1 || h[0] != CKPT_MAGIC || h[2] != np) goto out;
  if (fread(t->host_grads, sizeof(float), np, f) != np) goto out;
  if (fread(o, sizeof o, 1, f) != 1 || fread(&ns, sizeof ns, 1, f) != 1 || ns > 2 * np) goto out;
  state = ns ? malloc(ns * sizeof(float)) : NULL;
  if (ns && (!state || fread(state, sizeof(float), ns, f) != ns)) goto out;
  st = ps_dlrm_set_params(t->model, t->host_grads, np);
  if (st == PS_OK) st = ps_dlrm_set_opt_state(t->model, (int)o[0], o[1], state, ns);
  *step = h[1];
out:
  free(state);
  fclose(f);
  if (st != PS_OK) PS_ERROR("%s: not a checkpoint of this model (%s)", path, ps_status_str(st));
  return st;
}

/* At the boundary before step S (every rank's STEP(S-1) sent, rank 0's STEP(S) not yet):
 * every shard snapshots at S (prepared on all, then committed on all), rank 0 writes the
 * dense state, then `latest` is replaced atomically (rename), so a crash leaves the previous
 * checkpoint intact. */
ps_status ps_train_checkpoint(ps_trainer *t) {
  if (t->rank != 0) return PS_OK;
  char dir[4096], tmp[4200], latest[4200];
  char abs_base[4096];
  if (!realpath(t->cfg->checkpoint_dir, abs_base)) return PS_ERR_IO;
  TRY(pathf(dir, sizeof dir, "%s/step-%" PRIu64, abs_base, t->step));
  TRY(ps_mkdir_p(dir));
  char shards[4200];
  TRY(pathf(shards, sizeof shards, "%s/shards", dir));
  uint64_t t0 = ps_now_ns();
  ps_status st = ps_client_checkpoint(t->cl, t->step, shards);
  if (st != PS_OK) return ps_train_client_fail(t, "checkpoint", st);
  TRY(save_dense(t, dir));
  TRY(pathf(tmp, sizeof tmp, "%s/latest.tmp", abs_base));
  TRY(pathf(latest, sizeof latest, "%s/latest", abs_base));
  FILE *f = fopen(tmp, "w");
  if (!f) return PS_ERR_IO;
  fprintf(f, "step-%" PRIu64 "\n", t->step);
  if (fclose(f) != 0 || rename(tmp, latest) != 0) return PS_ERR_IO;
  PS_INFO("checkpoint at step %" PRIu64 " in %s (%.2f s)", t->step, dir, ps_train_since(t0));
  return PS_OK;
}

/* --resume: every rank loads the dense state of `latest`; rank 0 rolls every shard back to
 * the same checkpoint first, and the others wait for that at a barrier. */
ps_status ps_train_resume(ps_trainer *t, uint64_t *step) {
  char abs_base[4096], latest[4200], name[256] = "", dir[4600], shards[4700];
  if (!realpath(t->cfg->checkpoint_dir, abs_base)) {
    PS_ERROR("--resume: no checkpoint directory %s", t->cfg->checkpoint_dir);
    return PS_ERR_NOT_FOUND;
  }
  TRY(pathf(latest, sizeof latest, "%s/latest", abs_base));
  FILE *f = fopen(latest, "r");
  if (!f || !fgets(name, sizeof name, f)) {
    if (f) fclose(f);
    PS_ERROR("--resume: %s has no checkpoint (no %s)", abs_base, latest);
    return PS_ERR_NOT_FOUND;
  }
  fclose(f);
  name[strcspn(name, "\r\n")] = '\0';
  TRY(pathf(dir, sizeof dir, "%s/%s", abs_base, name));
  TRY(pathf(shards, sizeof shards, "%s/shards", dir));
  TRY(load_dense(t, dir, step));
  if (t->rank == 0) {
    uint64_t sstep = 0;
    ps_status st = ps_client_restore(t->cl, shards, &sstep);
    if (st != PS_OK) return ps_train_client_fail(t, "restoring the shards", st);
    if (sstep != *step) {
      PS_ERROR("checkpoint %s: shards are at step %" PRIu64 ", dense state at %" PRIu64, dir,
               sstep, *step);
      return PS_ERR_CORRUPT;
    }
  }
  if (t->world > 1) {
    ps_status st = ps_client_barrier(t->cl, "ember/train/restored", (uint32_t)t->world,
                                     600000u);
    if (st != PS_OK) return ps_train_client_fail(t, "restore barrier", st);
  }
  PS_INFO("resumed from %s at step %" PRIu64, dir, *step);
  return PS_OK;
}

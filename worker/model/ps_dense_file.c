/* ps_dense_file: reading dense.bin (format in ps_dense_file.h). The writer stays with ps-worker's
 * checkpoints (worker/ps_train_ckpt.c), which share the checksum from here, so the format has
 * one definition of what is summed. */
#include "ps_dense_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_hash.h"

uint64_t ps_dense_sum(const uint64_t h[3], const float *params, const int64_t o[2], uint64_t ns,
                      const float *state) {
  uint64_t x = ps_hash64(h, 3 * sizeof *h, 0);
  x = ps_hash64(params, h[2] * sizeof(float), x);
  x = ps_hash64(o, 2 * sizeof *o, x);
  x = ps_hash64(&ns, sizeof ns, x);
  return ns ? ps_hash64(state, ns * sizeof(float), x) : x;
}

void ps_dense_file_free(ps_dense_file *d) {
  if (!d) return;
  free(d->params);
  free(d->state);
  memset(d, 0, sizeof *d);
}

ps_status ps_dense_file_read(const char *path, ps_dense_file *out, ps_error *err) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen(path, "rb");
  if (!f) return ps_error_set(err, PS_ERR_NOT_FOUND, "cannot open %s: %s", path, strerror(errno));
  uint64_t h[3], sum = 0;
  int64_t o[2];
  const char *why = NULL;
  if (fread(h, sizeof h, 1, f) != 1 || (h[0] != PS_DENSE_MAGIC && h[0] != PS_DENSE_MAGIC_V1))
    why = "not a dense.bin (bad magic)";
  else if (h[2] == 0 || h[2] > ((uint64_t)1 << 36))
    why = "implausible parameter count";
  if (!why && !(out->params = malloc(h[2] * sizeof(float)))) {
    fclose(f);
    return ps_error_set(err, PS_ERR_NOMEM, "%s: no memory for %llu parameters", path,
                        (unsigned long long)h[2]);
  }
  if (!why && (fread(out->params, sizeof(float), h[2], f) != h[2] ||
               fread(o, sizeof o, 1, f) != 1 || fread(&out->nstate, 8, 1, f) != 1 ||
               out->nstate > 2 * h[2]))
    why = "truncated";
  if (!why && out->nstate && (!(out->state = malloc(out->nstate * sizeof(float))) ||
                              fread(out->state, sizeof(float), out->nstate, f) != out->nstate))
    why = "truncated";
  if (!why && h[0] == PS_DENSE_MAGIC) {
    if (fread(&sum, sizeof sum, 1, f) != 1 || fgetc(f) != EOF ||
        sum != ps_dense_sum(h, out->params, o, out->nstate, out->state))
      why = "checksum mismatch: the file is damaged";
  }
  fclose(f);
  if (why) {
    ps_dense_file_free(out);
    return ps_error_set(err, PS_ERR_CORRUPT, "%s: %s", path, why);
  }
  out->step = h[1];
  out->nparams = h[2];
  out->opt_kind = o[0];
  out->opt_step = o[1];
  out->checksummed = h[0] == PS_DENSE_MAGIC;
  return PS_OK;
}

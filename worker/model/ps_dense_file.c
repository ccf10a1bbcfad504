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

uint64_t ps_ckpt_text_sum(const char *text, size_t len) { return ps_hash64(text, len, 0); }

ps_status ps_ckpt_text_verify(const char *path, int *had_sum, ps_error *err) {
  *had_sum = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return ps_error_set(err, PS_ERR_NOT_FOUND, "cannot open %s: %s", path, strerror(errno));
  char *buf = NULL;
  size_t len = 0, cap = 0, n;
  char chunk[4096];
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (len + n + 1 > cap) {
      char *b = realloc(buf, cap = 2 * (len + n + 1));
      if (!b) {
        free(buf);
        fclose(f);
        return ps_error_set(err, PS_ERR_NOMEM, "%s: out of memory", path);
      }
      buf = b;
    }
    memcpy(buf + len, chunk, n);
    len += n;
  }
  fclose(f);
  ps_status st = PS_OK;
  const char *key = "checksum=";
  char *at = NULL; /* the line that starts with "checksum=" */
  for (size_t i = 0; i < len && !at; i++)
    if ((i == 0 || buf[i - 1] == '\n') && len - i >= 9 && memcmp(buf + i, key, 9) == 0) at = buf + i;
  if (at) {
    char hex[17] = "";
    size_t rest = (size_t)(buf + len - at);
    unsigned long long want = 0;
    int ok = rest == 9 + 16 + 1 && at[25] == '\n';
    if (ok) {
      memcpy(hex, at + 9, 16);
      char *end;
      want = strtoull(hex, &end, 16);
      ok = *end == '\0';
    }
    if (!ok) st = ps_error_set(err, PS_ERR_CORRUPT, "%s: a bad checksum line", path);
    else if (want != ps_ckpt_text_sum(buf, (size_t)(at - buf)))
      st = ps_error_set(err, PS_ERR_CORRUPT, "%s: checksum mismatch: the file is damaged", path);
    *had_sum = 1;
  }
  free(buf);
  return st;
}

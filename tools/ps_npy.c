/* ps_npy: the .npy writer (format and the fixed 128-byte header in ps_npy.h). */
#include "ps_npy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADER 128

struct ps_npy {
  FILE *f;
  char path[4096], descr[8];
  uint64_t rows, cols;
  size_t item;
  int failed;
};

static ps_status put_header(ps_npy *n, ps_error *err) {
  char h[HEADER], dict[HEADER];
  int len = n->cols ? snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, "
                               "'shape': (%llu, %llu), }", n->descr, (unsigned long long)n->rows,
                               (unsigned long long)n->cols)
                    : snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, "
                               "'shape': (%llu,), }", n->descr, (unsigned long long)n->rows);
  const int room = HEADER - 10;
  if (len < 0 || len >= room) return ps_error_set(err, PS_ERR_INTERNAL, "%s: shape too long", n->path);
  memcpy(h, "\x93NUMPY\x01\x00", 8);
  h[8] = (char)(room & 0xff);
  h[9] = (char)(room >> 8);
  memcpy(h + 10, dict, (size_t)len);
  memset(h + 10 + len, ' ', (size_t)(room - len - 1));
  h[HEADER - 1] = '\n';
  if (fseek(n->f, 0, SEEK_SET) != 0 || fwrite(h, 1, HEADER, n->f) != HEADER)
    return ps_error_set(err, PS_ERR_IO, "writing %s: %s", n->path, strerror(errno));
  return PS_OK;
}

ps_status ps_npy_create(const char *path, const char *descr, uint64_t cols, ps_npy **out,
                        ps_error *err) {
  *out = NULL;
  ps_npy *n = calloc(1, sizeof *n);
  if (!n) return ps_error_set(err, PS_ERR_NOMEM, "out of memory");
  snprintf(n->path, sizeof n->path, "%s", path);
  snprintf(n->descr, sizeof n->descr, "%s", descr);
  n->cols = cols;
  n->item = (size_t)(descr[2] - '0'); /* "<f4", "<u8", "<f2", "<u2": the size is the digit */
  if (!(n->f = fopen(path, "wb"))) {
    ps_status st = ps_error_set(err, PS_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    free(n);
    return st;
  }
  ps_status st = put_header(n, err);
  if (st != PS_OK) {
    fclose(n->f);
    free(n);
    return st;
  }
  *out = n;
  return PS_OK;
}

ps_status ps_npy_write(ps_npy *n, const void *data, uint64_t rows, ps_error *err) {
  size_t per = n->item * (n->cols ? n->cols : 1);
  if (rows && fwrite(data, per, rows, n->f) != rows) {
    n->failed = 1;
    return ps_error_set(err, PS_ERR_IO, "writing %s: %s", n->path, strerror(errno));
  }
  n->rows += rows;
  return PS_OK;
}

ps_status ps_npy_close(ps_npy **np, ps_error *err) {
  ps_npy *n = *np;
  *np = NULL;
  if (!n) return PS_OK;
  ps_status st = n->failed ? ps_error_set(err, PS_ERR_IO, "writing %s failed", n->path)
                           : put_header(n, err);
  if (fclose(n->f) != 0 && st == PS_OK)
    st = ps_error_set(err, PS_ERR_IO, "writing %s: %s", n->path, strerror(errno));
  free(n);
  return st;
}

ps_status ps_npy_save(const char *path, const char *descr, uint64_t rows, uint64_t cols,
                      const void *data, ps_error *err) {
  ps_npy *n;
  ps_status st = ps_npy_create(path, descr, cols, &n, err);
  if (st != PS_OK) return st;
  st = ps_npy_write(n, data, rows, err);
  ps_status st2 = ps_npy_close(&n, err);
  return st != PS_OK ? st : st2;
}

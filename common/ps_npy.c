/* ps_npy: the .npy writer and reader (format and the fixed 128-byte header in ps_npy.h). */
#include "ps_npy.h"

#include <errno.h>
#include <inttypes.h>
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

/* "<f4", "<u8", "|u1": the item size is the digit. */
static size_t descr_item(const char *descr) { return (size_t)(descr[2] - '0'); }

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
  n->item = descr_item(descr);
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

/* The header dict's descr, fortran_order and shape; PS_ERR_CORRUPT unless it is a dict of those. */
static ps_status parse_dict(const char *path, const char *d, char *descr, size_t cap,
                            uint64_t shape[2], int *ndim, ps_error *err) {
  const char *p = strstr(d, "'descr':"), *f = strstr(d, "'fortran_order':"), *s = strstr(d, "'shape':");
  if (!p || !f || !s) return ps_error_set(err, PS_ERR_CORRUPT, "%s: not a .npy header", path);
  p = strchr(p + 8, '\'');
  const char *q = p ? strchr(p + 1, '\'') : NULL;
  if (!q || (size_t)(q - p - 1) >= cap) return ps_error_set(err, PS_ERR_CORRUPT, "%s: bad descr", path);
  memcpy(descr, p + 1, (size_t)(q - p - 1));
  descr[q - p - 1] = '\0';
  f += 16;
  while (*f == ' ') f++;
  if (strncmp(f, "False", 5) != 0)
    return ps_error_set(err, PS_ERR_CORRUPT, "%s: Fortran order, not C order", path);
  s = strchr(s, '(');
  if (!s) return ps_error_set(err, PS_ERR_CORRUPT, "%s: bad shape", path);
  *ndim = 0;
  for (s++;;) {
    while (*s == ' ' || *s == ',') s++;
    if (*s == ')') break;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno || *ndim == 2)
      return ps_error_set(err, PS_ERR_CORRUPT, "%s: bad shape (one or two dims expected)", path);
    shape[(*ndim)++] = v;
    s = end;
  }
  return PS_OK;
}

ps_status ps_npy_load(const char *path, const char *descr, uint64_t want_cols, uint64_t *rows,
                      void **data, ps_error *err) {
  *data = NULL;
  *rows = 0;
  FILE *f = fopen(path, "rb");
  if (!f)
    return ps_error_set(err, errno == ENOENT ? PS_ERR_NOT_FOUND : PS_ERR_IO, "cannot open %s: %s",
                        path, strerror(errno));
  unsigned char pre[12];
  char *dict = NULL, got[16];
  uint64_t shape[2] = {0, 0};
  int ndim = 0;
  size_t hlen = 0, pre_len = 10;
  ps_status st = PS_OK;
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0 || pre[6] < 1 || pre[6] > 3)
    st = ps_error_set(err, PS_ERR_CORRUPT, "%s: not a .npy file", path);
  else if (pre[6] == 1) hlen = pre[8] | (size_t)pre[9] << 8;
  else if (fread(pre + 10, 1, 2, f) != 2) st = ps_error_set(err, PS_ERR_CORRUPT, "%s: truncated header", path);
  else {
    pre_len = 12; /* versions 2 and 3: a u32 length */
    hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
  }
  if (st == PS_OK && (hlen > (1u << 20) || !(dict = malloc(hlen + 1))))
    st = ps_error_set(err, PS_ERR_CORRUPT, "%s: header of %zu bytes", path, hlen);
  if (st == PS_OK && fread(dict, 1, hlen, f) != hlen)
    st = ps_error_set(err, PS_ERR_CORRUPT, "%s: truncated header", path);
  if (st == PS_OK) {
    dict[hlen] = '\0';
    st = parse_dict(path, dict, got, sizeof got, shape, &ndim, err);
  }
  free(dict);
  uint64_t cols = ndim == 2 ? shape[1] : 0;
  if (st == PS_OK && (strcmp(got, descr) != 0 || ndim != (want_cols ? 2 : 1) || cols != want_cols)) {
    char want[48], have[48];
    snprintf(want, sizeof want, want_cols ? "%s [N, %" PRIu64 "]" : "%s [N]", descr, want_cols);
    if (ndim == 2) snprintf(have, sizeof have, "%s [%" PRIu64 ", %" PRIu64 "]", got, shape[0], shape[1]);
    else snprintf(have, sizeof have, ndim ? "%s [%" PRIu64 "]" : "%s []", got, shape[0]);
    st = ps_error_set(err, PS_ERR_INVALID, "%s holds %s, expected %s", path, have, want);
  }
  size_t item = descr_item(descr), per = item * (want_cols ? want_cols : 1);
  long at = (long)(pre_len + hlen);
  if (st == PS_OK && fseek(f, 0, SEEK_END) != 0) st = ps_error_set(err, PS_ERR_IO, "%s: %s", path, strerror(errno));
  long end = st == PS_OK ? ftell(f) : -1;
  if (st == PS_OK && (shape[0] > (uint64_t)INT64_MAX / per || end < at ||
                      (uint64_t)(end - at) != shape[0] * per))
    st = ps_error_set(err, PS_ERR_CORRUPT, "%s: %ld bytes of data, its header's shape needs %" PRIu64
                      " (truncated or damaged)", path, end - at, shape[0] * per);
  if (st == PS_OK && shape[0] && !(*data = malloc(shape[0] * per)))
    st = ps_error_set(err, PS_ERR_NOMEM, "%s: out of memory for %" PRIu64 " bytes", path, shape[0] * per);
  if (st == PS_OK && shape[0] &&
      (fseek(f, at, SEEK_SET) != 0 || fread(*data, per, shape[0], f) != shape[0]))
    st = ps_error_set(err, PS_ERR_IO, "reading %s: %s", path, strerror(errno));
  fclose(f);
  if (st != PS_OK) {
    free(*data);
    *data = NULL;
  } else *rows = shape[0];
  return st;
}

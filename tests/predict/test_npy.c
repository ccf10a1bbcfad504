/* ps_npy_load (the reader behind ps-predict --export and ps-server --serve EXPORT): what
 * ps_npy writes reads back (vector and matrix, <f4, <u8, |u1, zero rows), a version 2.0 header
 * too; and every damaged or unexpected file is refused with its code and nothing returned: no
 * file (NOT_FOUND), bad magic, Fortran order, three dims, a header cut short, data one byte short
 * or long (CORRUPT), another dtype or width than asked (INVALID, the message naming both). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "ps_test_main.h"
#include "ps_test_tmpdir.h"

#include "ps_fs.h"
#include "ps_npy.h"

PS_TEST_TMPDIR("npy", "a.npy")

/* A .npy of the given header dict (version 1 or 2) and `data` bytes of payload. */
static void put(int version, const char *dict, size_t data) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  size_t pre = version == 1 ? 10 : 12, len = strlen(dict) + 1, pad = (64 - (pre + len) % 64) % 64;
  size_t h = len + pad;
  fwrite("\x93NUMPY", 1, 6, f);
  fputc(version, f);
  fputc(0, f);
  for (size_t i = 0; i < pre - 8; i++) fputc((int)((h >> (8 * i)) & 0xff), f);
  fputs(dict, f);
  for (size_t i = 0; i < pad; i++) fputc(' ', f);
  fputc('\n', f);
  for (size_t i = 0; i < data; i++) fputc((int)(i & 0xff), f);
  fclose(f);
}

static ps_status load(const char *descr, uint64_t cols, uint64_t *rows, void **data,
                      ps_error *err) {
  *rows = 77;
  *data = (void *)1;
  return ps_npy_load(path, descr, cols, rows, data, err);
}

/* ps_npy_save then ps_npy_load of `rows` rows of `cols` (0: a vector): the same bytes back. */
static void round_trip(const char *descr, uint64_t rows, uint64_t cols, const void *data,
                       size_t bytes) {
  uint64_t n;
  void *got;
  ps_error err;
  assert_int_equal(ps_npy_save(path, descr, rows, cols, data, &err), PS_OK);
  assert_int_equal(load(descr, cols, &n, &got, &err), PS_OK);
  assert_int_equal(n, rows);
  if (bytes) assert_memory_equal(got, data, bytes);
  else assert_null(got);
  free(got);
}

static void test_round_trip(void **st) {
  (void)st;
  float m[6] = {1, 2, 3, 4, 5, 6};
  uint64_t k[3] = {1, UINT64_MAX, 7}, rows;
  uint8_t b[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  void *got;
  ps_error err;
  round_trip("<f4", 3, 2, m, sizeof m);
  round_trip("<u8", 3, 0, k, sizeof k);
  round_trip("|u1", 2, 5, b, sizeof b);
  round_trip("|u1", 0, 5, b, 0);
  put(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24);
  assert_int_equal(load("<f4", 3, &rows, &got, &err), PS_OK);
  assert_true(rows == 2);
  free(got);
}

static void refused(ps_status want, const char *descr, uint64_t cols, const char *text) {
  uint64_t rows;
  void *got;
  ps_error err;
  assert_int_equal(load(descr, cols, &rows, &got, &err), want);
  assert_true(rows == 0 && got == NULL);
  if (!strstr(err.msg, text)) fail_msg("'%s' lacks '%s'", err.msg, text);
}

static void test_refusals(void **st) {
  (void)st;
  unlink(path);
  refused(PS_ERR_NOT_FOUND, "<f4", 2, "cannot open");
  FILE *f = fopen(path, "wb");
  fputs("not a numpy file at all", f);
  fclose(f);
  refused(PS_ERR_CORRUPT, "<f4", 2, "not a .npy");
  put(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24);
  refused(PS_ERR_CORRUPT, "<f4", 3, "Fortran");
  put(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4), }", 96);
  refused(PS_ERR_CORRUPT, "<f4", 3, "bad shape");
  put(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 23);
  refused(PS_ERR_CORRUPT, "<f4", 3, "truncated");
  put(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 25);
  refused(PS_ERR_CORRUPT, "<f4", 3, "needs 24");
  put(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24);
  refused(PS_ERR_INVALID, "|u1", 3, "holds <f4 [2, 3], expected |u1 [N, 3]");
  refused(PS_ERR_INVALID, "<f4", 4, "expected <f4 [N, 4]");
  refused(PS_ERR_INVALID, "<f4", 0, "expected <f4 [N]");
  f = fopen(path, "wb"); /* a header that promises more than the file holds */
  fwrite("\x93NUMPY\x01\x00\x00\x01{'descr'", 1, 18, f);
  fclose(f);
  refused(PS_ERR_CORRUPT, "<f4", 3, "truncated header");
}

PS_TEST_MAIN("npy", setup, teardown, cmocka_unit_test(test_round_trip),
             cmocka_unit_test(test_refusals))

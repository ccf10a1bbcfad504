/* test_criteo_real: the first 10,000 lines of Criteo Kaggle's train.txt
 * (../shared/data/criteo_real.tsv, see SOURCE.md there) parse with 0 bad lines, with the
 * label count and per-column empty counts that SOURCE.md's independent verification lists,
 * and the binary conversion reads back identically. SKIPPED (77) where the file is absent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ps_criteo_bin.h"
#include "ps_reader.h"

static char g_path[1024];

typedef struct stats {
  uint64_t rows, pos, dense_empty[13], cat_empty[26];
  uint64_t key_sum;
  double dense_sum;
} stats;

static void read_stats(const char *path, int world, stats *s, uint64_t *bad) {
  memset(s, 0, sizeof *s);
  *bad = 0;
  for (int r = 0; r < world; r++) {
    ps_reader_opts o;
    ps_reader_opts_default(&o);
    o.batch = 1000, o.world = world, o.rank = r, o.bad_lines = PS_BAD_LINES_FAIL;
    o.keep_rows = 1;
    ps_reader *rd;
    ps_error err;
    assert_int_equal(ps_reader_create(path, &o, &rd, &err), PS_OK);
    ps_batch *b;
    ps_status st;
    while ((st = ps_reader_next(rd, &b, &err)) == PS_OK && b) {
      for (size_t i = 0; i < b->n; i++) {
        const ps_criteo_row *row = &b->rows[i];
        s->rows++;
        s->pos += row->label;
        for (int k = 0; k < 13; k++) s->dense_empty[k] += (row->dense_missing >> k) & 1;
        for (int k = 0; k < 26; k++) s->cat_empty[k] += (row->cat_missing >> k) & 1;
        for (int k = 0; k < 13; k++) s->dense_sum += b->dense[i * 13 + k];
        for (int k = 0; k < 26; k++) s->key_sum += b->keys[i * 26 + k];
      }
      ps_reader_release(rd, b);
    }
    if (st) fprintf(stderr, "%s\n", ps_error_str(&err));
    assert_int_equal(st, PS_OK);
    *bad += ps_reader_bad_lines(rd);
    ps_reader_destroy(&rd);
  }
}

static void test_real_file(void **state) {
  (void)state;
  stats s;
  uint64_t bad;
  read_stats(g_path, 1, &s, &bad);
  assert_int_equal(bad, 0);
  assert_int_equal(s.rows, 10000);
  assert_int_equal(s.pos, 2182); /* SOURCE.md: 7818 zeros, 2182 ones */
  /* SOURCE.md's empty fractions x 10000 */
  static const int dense_empty[13] = {4481, 0, 2037, 1978, 494, 2511, 492, 10, 492, 4481, 492, 7735, 1978};
  for (int k = 0; k < 13; k++) assert_int_equal(s.dense_empty[k], dense_empty[k]);
  static const int cat_empty[26] = {0, 0, 357, 357, 0, 1332, 0, 0, 0, 0, 0, 357, 0,
                                    0, 0, 357, 0, 0, 4496, 4496, 357, 8182, 0, 357, 4496, 4496};
  for (int k = 0; k < 26; k++) assert_int_equal(s.cat_empty[k], cat_empty[k]);

  /* binary conversion, read back (also sharded over 2 ranks): identical content */
  char bin[] = "/tmp/ember-real-XXXXXX";
  int fd = mkstemp(bin);
  assert_true(fd >= 0);
  close(fd);
  ps_criteo_bin_writer *w;
  assert_int_equal(ps_criteo_bin_writer_create(bin, &w), PS_OK);
  ps_reader_opts o;
  ps_reader_opts_default(&o);
  o.keep_rows = 1;
  ps_reader *rd;
  ps_error err;
  assert_int_equal(ps_reader_create(g_path, &o, &rd, &err), PS_OK);
  ps_batch *b;
  while (ps_reader_next(rd, &b, NULL) == PS_OK && b) {
    for (size_t i = 0; i < b->n; i++) assert_int_equal(ps_criteo_bin_write(w, &b->rows[i]), PS_OK);
    ps_reader_release(rd, b);
  }
  ps_reader_destroy(&rd);
  assert_int_equal(ps_criteo_bin_writer_close(&w, 0), PS_OK);
  stats sb, s2;
  read_stats(bin, 1, &sb, &bad);
  assert_memory_equal(&s, &sb, sizeof s);
  read_stats(bin, 2, &s2, &bad);
  assert_int_equal(s2.rows, 10000);
  assert_int_equal(s2.key_sum, s.key_sum);
  assert_memory_equal(s2.cat_empty, s.cat_empty, sizeof s.cat_empty);
  unlink(bin);
}

int main(void) {
  const char *sh = getenv("EMBER_SHARED");
  if (sh && *sh) snprintf(g_path, sizeof g_path, "%s/data/criteo_real.tsv", sh);
  else snprintf(g_path, sizeof g_path, "%s/../shared/data/criteo_real.tsv",
                getenv("EMBER_SRC") ? getenv("EMBER_SRC") : "..");
  if (access(g_path, R_OK) != 0) {
    printf("SKIPPED: %s not found (outside this team)\n", g_path);
    return 77;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_real_file)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}

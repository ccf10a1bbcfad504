/* ps_store_import_rows, the store's side of ps-reshard: records exported from one store
 * (ps_store_export_row: values, Adagrad sums, metadata) become another store's rows bit for
 * bit, replacing what it had for those keys (a dirty hot copy included, which would otherwise
 * shadow the import); they survive a close and reopen; the imported rows then train on as the
 * originals do (the same push on both stores gives the same records again: the optimizer state
 * moved). A record of another table's layout, a read-only store and an unknown table are
 * refused and write nothing. */
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

#include "ps_store.h"

enum { DIM = 4, NKEYS = 200 };

static ps_store *open_store(const char *path, bool read_only) {
  ps_store_options o = {.path = path, .cache_bytes = 8u << 20, .partitions = 2,
                        .read_only = read_only};
  ps_store *s = NULL;
  ps_error e;
  assert_int_equal(ps_store_open(&o, &s, &e), PS_OK);
  return s;
}

static void spec_of(ps_table_spec *sp, uint32_t dim) {
  ps_table_spec_default(sp, 3, "t", dim);
  sp->seed = 5;
  sp->optimizer = PS_OPT_ADAGRAD;
  sp->lr = 0.2f;
}

/* Records of keys 1..NKEYS of table 3 into buf (rec bytes each). */
static void export_all(ps_store *s, char *buf, size_t rec) {
  for (uint64_t k = 1; k <= NKEYS; k++) {
    size_t len = 0;
    assert_int_equal(ps_store_export_row(s, 3, k, buf + (k - 1) * rec, rec, &len, NULL), PS_OK);
    assert_int_equal(len, rec);
  }
}

static void push_all(ps_store *s, float scale) {
  uint64_t keys[NKEYS];
  float g[NKEYS * DIM];
  for (int i = 0; i < NKEYS; i++) {
    keys[i] = (uint64_t)i + 1;
    for (int j = 0; j < DIM; j++) g[i * DIM + j] = scale * (float)((i * 7 + j * 3) % 11 - 5);
  }
  ps_store_set_step(s, 17);
  assert_int_equal(ps_store_push(s, 3, keys, NKEYS, g), PS_OK);
}

static void test_import_bit_for_bit(void **st) {
  (void)st;
  char a[128], b[128];
  snprintf(a, sizeof a, "/tmp/ember-test-import-a-%d", (int)getpid());
  snprintf(b, sizeof b, "/tmp/ember-test-import-b-%d", (int)getpid());
  ps_table_spec sp;
  spec_of(&sp, DIM);
  const size_t rec = ps_store_record_bytes(&sp);
  ps_error e;
  ps_store *sa = open_store(a, false), *sb = open_store(b, false);
  assert_int_equal(ps_store_declare(sa, &sp, &e), PS_OK);
  assert_int_equal(ps_store_declare(sb, &sp, &e), PS_OK);
  push_all(sa, 1.0f);
  push_all(sa, 0.5f); /* Adagrad sums differ from the values' history alone */
  push_all(sb, -3.0f); /* b's own (dirty, hot) rows of the same keys: replaced */
  char *want = malloc(NKEYS * rec), *got = malloc(NKEYS * rec);
  export_all(sa, want, rec);
  uint64_t keys[NKEYS];
  for (int i = 0; i < NKEYS; i++) keys[i] = (uint64_t)i + 1;
  assert_int_equal(ps_store_import_rows(sb, 3, keys, want, NKEYS, &e), PS_OK);
  export_all(sb, got, rec);
  assert_memory_equal(got, want, NKEYS * rec);
  /* Pulled too (not only exported): the import dropped b's hot copies, so these rows come
   * from RocksDB -- a table that had written nothing there before must look now (issue 22's
   * skipped MultiGet for a table with nothing on disk). */
  float *pa = malloc(NKEYS * DIM * sizeof(float)), *pb = malloc(NKEYS * DIM * sizeof(float));
  assert_int_equal(ps_store_pull(sa, 3, keys, NKEYS, pa), PS_OK);
  assert_int_equal(ps_store_pull(sb, 3, keys, NKEYS, pb), PS_OK);
  assert_memory_equal(pb, pa, NKEYS * DIM * sizeof(float));
  free(pa);
  free(pb);

  /* Refusals write nothing: a record of a dim-8 table (its header), not a record at all, an
   * unknown table; one bad record among good ones stops them all. */
  char *bad = malloc(2 * rec);
  memcpy(bad, want + rec, 2 * rec); /* keys 2 and 3's records */
  const uint32_t dim8 = 8;
  memcpy(bad + rec + 4, &dim8, 4); /* the header's u32 dim (docs/CHECKPOINTS.md) */
  uint64_t k12[2] = {1, 2};
  assert_int_equal(ps_store_import_rows(sb, 3, k12, bad, 2, &e), PS_ERR_INVALID);
  assert_non_null(strstr(e.msg, "header"));
  memset(bad, 0, 8);
  assert_int_equal(ps_store_import_rows(sb, 3, k12, bad, 1, &e), PS_ERR_INVALID);
  assert_int_equal(ps_store_import_rows(sb, 9, k12, want, 1, &e), PS_ERR_UNKNOWN_TABLE);
  free(bad);
  export_all(sb, got, rec);
  assert_memory_equal(got, want, NKEYS * rec);

  /* Persisted: after a reopen the records are the same; then both train on alike. */
  ps_store_close(&sb);
  sb = open_store(b, false);
  export_all(sb, got, rec);
  assert_memory_equal(got, want, NKEYS * rec);
  push_all(sa, 2.0f);
  push_all(sb, 2.0f);
  export_all(sa, want, rec);
  export_all(sb, got, rec);
  assert_memory_equal(got, want, NKEYS * rec);
  ps_store_close(&sb);

  /* A read-only store refuses. */
  sb = open_store(b, true);
  assert_int_equal(ps_store_import_rows(sb, 3, keys, want, NKEYS, &e), PS_ERR_INVALID);
  ps_store_close(&sb);
  ps_store_close(&sa);
  free(want);
  free(got);
  assert_int_equal(ps_store_snapshot_remove(a, NULL), PS_OK);
  assert_int_equal(ps_store_snapshot_remove(b, NULL), PS_OK);
}

PS_TEST_MAIN("store_import", NULL, NULL, cmocka_unit_test(test_import_bit_for_bit))

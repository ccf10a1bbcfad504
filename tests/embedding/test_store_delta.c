/* Incremental checkpoints of the store (ps_store_checkpoint, ps_store_delta.c / _chain.c):
 * a chain full + deltas, composed by a read-only open and by ps_store_restore, equals a full
 * snapshot of the same moment bit for bit — every stored record (values, optimizer state,
 * metadata) of every table, a table declared after the base, rows removed by TTL expiry
 * (tombstones), key 0, rows evicted to RocksDB (a small hot tier) — and an aborted delta's
 * changes reach the next one. Deltas hold only the changed rows. A broken chain (a damaged
 * SST file or manifest, a missing base, a base of another id) is refused with a reason; a store
 * without a base, or at the depth limit, writes a full checkpoint; a restored delta is the
 * next delta's base. The reference is the store's own full snapshot, which
 * test_store_readonly checks against the live rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_test_main.h"

#include "ps_fs.h"
#include "ps_store.h"

enum { UNIVERSE = 700 };
static char root[128];

static void pathf(char *out, const char *name) { snprintf(out, 256, "%s/%s", root, name); }

static void push_range(ps_store *s, uint32_t table, uint64_t lo, uint64_t hi, uint32_t dim,
                       float scale) {
  size_t n = (size_t)(hi - lo);
  uint64_t *k = malloc(n * sizeof *k);
  float *g = malloc(n * dim * sizeof *g);
  for (size_t i = 0; i < n; i++) {
    k[i] = lo + i;
    for (uint32_t j = 0; j < dim; j++) g[i * dim + j] = scale * (float)((k[i] * 7 + j) % 13) - 0.3f;
  }
  assert_int_equal(ps_store_push(s, table, k, n, g), PS_OK);
  free(k);
  free(g);
}

/* Every key of the universe has the same record (or none) in a and b, in every table. */
static void assert_same_rows(ps_store *a, ps_store *b, const uint32_t *tables, int nt) {
  char ra[4096], rb[4096];
  for (int t = 0; t < nt; t++)
    for (uint64_t k = 0; k < UNIVERSE; k++) {
      size_t la = 0, lb = 0;
      ps_status sa = ps_store_export_row(a, tables[t], k, ra, sizeof ra, &la, NULL);
      ps_status sb = ps_store_export_row(b, tables[t], k, rb, sizeof rb, &lb, NULL);
      if (sa != sb) fail_msg("table %u key %llu: %d vs %d", tables[t], (unsigned long long)k, sa, sb);
      if (sa == PS_OK) {
        assert_int_equal(la, lb);
        if (memcmp(ra, rb, la) != 0) fail_msg("table %u key %llu differs", tables[t], (unsigned long long)k);
      }
    }
}

static ps_status count_row(void *ctx, uint64_t key, const float *v) {
  (void)key;
  (void)v;
  ++*(size_t *)ctx;
  return PS_OK;
}

static size_t rows_of(ps_store *s, uint32_t table) {
  size_t n = 0;
  assert_int_equal(ps_store_scan(s, table, count_row, &n, NULL), PS_OK);
  return n;
}

static ps_store *open_ro(const char *path, ps_error *e) {
  ps_store_options o = {.path = path, .partitions = 2, .read_only = true};
  ps_store *s = NULL;
  return ps_store_open(&o, &s, e) == PS_OK ? s : NULL;
}

static void ckpt(ps_store *s, const char *name, uint64_t step, uint32_t depth, bool want_delta,
                 ps_store_ckpt_info *info) {
  char d[256];
  pathf(d, name);
  ps_error e;
  if (ps_store_checkpoint(s, d, step, depth, info, &e) != PS_OK) fail_msg("%s", e.msg);
  assert_int_equal(info->delta, want_delta);
  assert_int_equal(ps_store_checkpoint_commit(s, d, &e), PS_OK);
  assert_int_equal(ps_store_is_delta(d), want_delta);
}

/* A read-only open of dir is refused: PS_ERR_CORRUPT, the message naming why. */
static void assert_refused(const char *dir, const char *why) {
  ps_error e;
  ps_store_options o = {.path = dir, .partitions = 2, .read_only = true};
  ps_store *s = NULL;
  assert_int_equal(ps_store_open(&o, &s, &e), PS_ERR_CORRUPT);
  assert_null(s);
  if (!strstr(e.msg, why)) fail_msg("%s: no '%s' in: %s", dir, why, e.msg);
}

static void flip_byte(const char *path, long off) {
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  fseek(f, off, SEEK_SET);
  int c = fgetc(f);
  fseek(f, off, SEEK_SET);
  fputc(c ^ 0x20, f);
  fclose(f);
}

static void test_delta_chain(void **st) {
  (void)st;
  snprintf(root, sizeof root, "/tmp/ember-test-delta-%d", (int)getpid());
  ps_rm_rf(root);
  assert_int_equal(ps_mkdir_p(root), PS_OK);
  char live[256], p[256], q[256];
  pathf(live, "live");
  /* A small hot tier: most rows live in RocksDB only, so deltas read both tiers. */
  ps_store_options o = {.path = live, .cache_bytes = 48u << 10, .partitions = 4};
  ps_store *s = NULL;
  ps_error e;
  assert_int_equal(ps_store_open(&o, &s, &e), PS_OK);
  ps_table_spec a, b, c;
  ps_table_spec_default(&a, 1, "ada", 4);
  a.optimizer = PS_OPT_ADAGRAD;
  a.lr = 0.2f;
  ps_table_spec_default(&b, 2, "adam", 3);
  b.optimizer = PS_OPT_ADAM;
  b.ttl_steps = 2;
  ps_table_spec_default(&c, 3, "late", 2);
  c.optimizer = PS_OPT_FTRL;
  assert_int_equal(ps_store_declare(s, &a, &e), PS_OK);
  assert_int_equal(ps_store_declare(s, &b, &e), PS_OK);
  ps_store_ckpt_info info;

  /* step 1: 500 rows per table, a full checkpoint even when a delta is asked for (no base) */
  ps_store_set_step(s, 1);
  push_range(s, 1, 0, 500, 4, 0.1f);
  push_range(s, 2, 0, 500, 3, 0.2f);
  ckpt(s, "c1", 1, 8, false, &info);
  /* Its rows (issue 36, friction 9: a full checkpoint said 0): RocksDB's estimate, exact for
   * rows written once. */
  assert_int_equal(info.rows, 1000);
  /* step 2: 50 rows change, a table is declared: a delta of exactly those rows */
  ps_store_set_step(s, 2);
  push_range(s, 1, 0, 50, 4, 0.05f);
  assert_int_equal(ps_store_declare(s, &c, &e), PS_OK);
  push_range(s, 3, 600, 610, 2, 0.3f);
  ckpt(s, "c2", 2, 8, true, &info);
  assert_int_equal(info.rows, 60);
  assert_int_equal(info.tombstones, 0);
  assert_int_equal(info.depth, 1);
  assert_int_equal(info.base_step, 1);
  /* step 5: table 2's rows of step 1 expire (ttl 2) except the 21 pushed now: tombstones */
  ps_store_set_step(s, 5);
  push_range(s, 2, 400, 421, 3, 0.1f);
  assert_int_equal(ps_store_expire(s), 479);
  ckpt(s, "c3", 5, 8, true, &info);
  assert_int_equal(info.rows, 21);
  assert_int_equal(info.tombstones, 479);
  /* an aborted delta: its changes (keys 60..70) are in the next one */
  ps_store_set_step(s, 6);
  push_range(s, 1, 60, 71, 4, 0.4f);
  pathf(p, "c4");
  assert_int_equal(ps_store_checkpoint(s, p, 6, 8, &info, &e), PS_OK);
  pathf(q, "c4b"); /* one pending checkpoint at a time */
  assert_int_equal(ps_store_checkpoint(s, q, 6, 8, &info, &e), PS_ERR_CONFLICT);
  assert_int_not_equal(access(q, F_OK), 0);
  ps_store_checkpoint_abort(s);
  assert_int_equal(ps_rm_rf(p), PS_OK);
  push_range(s, 1, 80, 86, 4, 0.4f);
  ckpt(s, "c4", 6, 8, true, &info);
  assert_int_equal(info.rows, 17);
  assert_int_equal(info.depth, 3);
  pathf(p, "full4");
  assert_int_equal(ps_store_snapshot(s, p, &e), PS_OK);

  const uint32_t tables[] = {1, 2, 3};
  ps_store *full = open_ro(p, &e);
  assert_non_null(full);
  /* the read-only open composes the chain */
  pathf(q, "c4");
  ps_store *comp = open_ro(q, &e);
  if (!comp) fail_msg("%s", e.msg);
  assert_same_rows(full, comp, tables, 3);
  for (int t = 0; t < 3; t++) assert_int_equal(rows_of(full, tables[t]), rows_of(comp, tables[t]));
  assert_int_equal(rows_of(comp, 2), 21);
  ps_store_close(&comp);
  /* restore composes it too, and the live store had the same rows */
  assert_same_rows(full, s, tables, 3);
  char other[256];
  pathf(other, "other");
  ps_store_options oo = {.path = other, .cache_bytes = 1u << 20, .partitions = 3};
  ps_store *r = NULL;
  assert_int_equal(ps_store_open(&oo, &r, &e), PS_OK);
  if (ps_store_restore(r, q, &e) != PS_OK) fail_msg("%s", e.msg);
  assert_same_rows(full, r, tables, 3);
  /* the restored delta is the base of the next delta; at the depth limit, a full one */
  ps_store_set_step(r, 7);
  push_range(r, 1, 100, 103, 4, 0.1f);
  ckpt(r, "c5", 7, 8, true, &info);
  assert_int_equal(info.base_step, 6);
  assert_int_equal(info.rows, 3);
  ckpt(r, "c6", 8, 4, false, &info);
  ps_store_close(&r);
  /* a fresh open has no base: full */
  ps_store_close(&s);
  assert_int_equal(ps_store_open(&o, &s, &e), PS_OK);
  ckpt(s, "c7", 9, 8, false, &info);
  ps_store_close(&s);

  /* broken chains: refused, with the reason */
  char f[300];
  snprintf(f, sizeof f, "%s/c3/t2.sst", root);
  flip_byte(f, 100);
  assert_refused(q, "checksum mismatch");
  flip_byte(f, 100);
  snprintf(f, sizeof f, "%s/c3/EMBER-SNAPSHOT", root);
  flip_byte(f, 60);
  assert_refused(q, "checksum mismatch");
  flip_byte(f, 60);
  pathf(p, "c2");
  char moved[256];
  pathf(moved, "c2-moved");
  assert_int_equal(rename(p, moved), 0);
  assert_refused(q, "is missing");
  assert_int_equal(rename(moved, p), 0);
  /* c1 replaced by another checkpoint of step 1 (another id) */
  pathf(p, "c1");
  assert_int_equal(ps_rm_rf(p), PS_OK);
  char c7[256];
  pathf(c7, "c7");
  assert_int_equal(rename(c7, p), 0);
  assert_refused(q, "broken checkpoint chain");
  assert_int_equal(ps_store_open(&oo, &r, &e), PS_OK);
  char rec[256];
  size_t len = 0;
  assert_int_equal(ps_store_restore(r, q, &e), PS_ERR_CORRUPT);
  /* a refused restore changed nothing: c6's row 100 is still there */
  assert_int_equal(ps_store_export_row(r, 1, 100, rec, sizeof rec, &len, NULL), PS_OK);
  ps_store_close(&r);
  ps_store_close(&full);
  assert_int_equal(ps_rm_rf(root), PS_OK);
}

PS_TEST_MAIN("store_delta", NULL, NULL, cmocka_unit_test(test_delta_chain))

/* repl_rows_cmp DIR_A DIR_B: compares every stored row of two ps-server data dirs (each
 * DIR/store, opened read-only after its server stopped cleanly): the same tables, the same keys,
 * and every row's full record (values, optimizer state, metadata: ps_store_export_row) equal
 * byte for byte. Prints "rows N identical" and exits 0, or names the first difference and exits
 * 1 (2 for bad arguments). For the replication tests (test_replica_kill.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_store.h"

static ps_status open_ro(const char *dir, ps_store **out) {
  char path[4200];
  snprintf(path, sizeof path, "%s/store", dir);
  ps_store_options o = {.path = path, .cache_bytes = 64 << 20, .partitions = 1,
                        .read_only = true};
  ps_error e;
  ps_status st = ps_store_open(&o, out, &e);
  if (st != PS_OK) fprintf(stderr, "repl_rows_cmp: %s: %s\n", path, e.msg);
  return st;
}

/* One table of `a` scanned: each row's full record must be `b`'s, byte for byte. */
typedef struct rec_ctx {
  ps_store *a, *b;
  uint32_t table;
  size_t bytes, rows;
  unsigned char *ra, *rb;
} rec_ctx;

static ps_status rec(void *vctx, uint64_t key, const float *values) {
  (void)values;
  rec_ctx *c = vctx;
  size_t la = 0, lb = 0;
  ps_error e;
  c->rows++;
  if (ps_store_export_row(c->a, c->table, key, c->ra, c->bytes, &la, &e) != PS_OK ||
      ps_store_export_row(c->b, c->table, key, c->rb, c->bytes, &lb, &e) != PS_OK || la != lb ||
      memcmp(c->ra, c->rb, la) != 0) {
    fprintf(stderr, "table %u key %llu: the records differ (or one is missing)\n", c->table,
            (unsigned long long)key);
    return PS_ERR_CONFLICT;
  }
  return PS_OK;
}

/* Every row of table t in a is b's; the rows counted into *rows. 0 = equal. */
static int compare(ps_store *a, ps_store *b, uint32_t t, size_t *rows) {
  ps_table_spec sp;
  if (ps_store_get_spec(b, t, &sp) != PS_OK) {
    fprintf(stderr, "table %u: missing in the other store\n", t);
    return 1;
  }
  rec_ctx c = {.a = a, .b = b, .table = t, .bytes = ps_store_record_bytes(&sp)};
  c.ra = malloc(c.bytes);
  c.rb = malloc(c.bytes);
  ps_error e;
  ps_status st = c.ra && c.rb ? ps_store_scan(a, t, rec, &c, &e) : PS_ERR_NOMEM;
  free(c.ra);
  free(c.rb);
  *rows = c.rows;
  return st != PS_OK;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: repl_rows_cmp DIR_A DIR_B\n");
    return 2;
  }
  ps_store *a = NULL, *b = NULL;
  if (open_ro(argv[1], &a) != PS_OK || open_ro(argv[2], &b) != PS_OK) return 1;
  uint32_t ta[64], tb[64];
  size_t na = ps_store_tables(a, ta, 64), nb = ps_store_tables(b, tb, 64);
  int bad = na != nb;
  if (bad) fprintf(stderr, "%zu tables against %zu\n", na, nb);
  size_t total = 0;
  for (size_t i = 0; i < na && !bad; i++) {
    size_t ra = 0, rb = 0; /* both ways: the same keys, each with the same record */
    bad = compare(a, b, ta[i], &ra) || compare(b, a, ta[i], &rb);
    total += ra;
  }
  ps_store_close(&a);
  ps_store_close(&b);
  if (bad) return 1;
  printf("rows %zu identical in %zu tables\n", total, na);
  return 0;
}

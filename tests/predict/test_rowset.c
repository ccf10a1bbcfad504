/* ps_rowset: rows held as exported and found by key. f32 rows come back as stored, f16 and bf16
 * rows widened (the f32 value of each 16-bit one, ps_row_widen: exact) and int8 rows as
 * ps_quant_int8_decode gives them; a key with no row is not found (out untouched);
 * shards of a set keep exactly the keys ps_shard_of routes to them, together every key once;
 * a shard with none of the keys holds nothing; a key with two rows is refused (CORRUPT); the
 * bytes held count the layout (dim + 8 a row for int8, 2 dim for f16 and bf16: not widened in
 * memory). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_hash.h"
#include "ps_quant.h"
#include "ps_rowset.h"
#include "ps_table.h"

#define N 5000
#define DIM 8

static float value(uint64_t i, int d) { return (float)((int)(i % 97) - 48) * 0.01f + (float)d; }

/* The 16-bit row type of a form (PS_ROW_F32 for f32 and int8). */
static ps_row_type narrow_of(ps_rowset_form f) {
  return f == PS_ROWSET_F16 ? PS_ROW_F16 : f == PS_ROWSET_BF16 ? PS_ROW_BF16 : PS_ROW_F32;
}

/* keys 3i + 1 (small integers, as hashed buckets give), their rows in form f, malloc'd. */
static void make(ps_rowset_form f, uint64_t **keys, void **values) {
  const bool int8 = f == PS_ROWSET_INT8;
  size_t rb = ps_rowset_form_bytes(f, DIM);
  *keys = malloc(N * sizeof **keys);
  *values = malloc(N * rb);
  assert_true(*keys && *values);
  for (uint64_t i = 0; i < N; i++) {
    float row[DIM];
    for (int d = 0; d < DIM; d++) row[d] = value(i, d);
    (*keys)[i] = 3 * i + 1;
    if (int8) assert_int_equal(ps_quant_int8_encode(row, DIM, (uint8_t *)*values + i * rb), PS_OK);
    else ps_row_narrow(narrow_of(f), row, (char *)*values + i * rb, DIM);
  }
}

static void test_get(void **st) {
  (void)st;
  static const size_t held[] = {4 * DIM, 2 * DIM, 2 * DIM, DIM + 8}; /* by form */
  for (int f = PS_ROWSET_F32; f <= PS_ROWSET_INT8; f++) {
    const bool int8 = f == PS_ROWSET_INT8;
    uint64_t *k;
    void *v;
    make(f, &k, &v);
    uint8_t q[DIM + 8];
    ps_rowset *r = NULL;
    ps_error err;
    assert_int_equal(ps_rowset_create(k, v, N, DIM, f, 0, 1, &r, &err), PS_OK);
    assert_int_equal(ps_rowset_rows(r), N);
    assert_int_equal(ps_rowset_row_bytes(r), held[f]);
    /* keys, rows, and an index of 4-byte slots at most half full */
    assert_true(ps_rowset_bytes(r) >= N * (8 + held[f]));
    assert_true(ps_rowset_bytes(r) <= N * (8 + held[f] + 16));
    for (uint64_t i = 0; i < N; i++) {
      float row[DIM], want[DIM];
      for (int d = 0; d < DIM; d++) want[d] = value(i, d);
      if (int8) {
        ps_quant_int8_encode(want, DIM, q);
        ps_quant_int8_decode(q, DIM, want);
      } else if (f != PS_ROWSET_F32) { /* the value rounded once to the row type */
        uint16_t h[DIM];
        ps_row_narrow(narrow_of(f), want, h, DIM);
        ps_row_widen(narrow_of(f), h, want, DIM);
      }
      assert_true(ps_rowset_get(r, 3 * i + 1, row));
      assert_memory_equal(row, want, sizeof row);
      float keep[DIM] = {42};
      memcpy(row, keep, sizeof row);
      assert_false(ps_rowset_get(r, 3 * i + 2, row)); /* no such key */
      assert_memory_equal(row, keep, sizeof row);
    }
    ps_rowset_destroy(&r);
    assert_null(r);
  }
}

static void test_shards(void **st) {
  (void)st;
  const uint32_t S = 3;
  uint64_t seen = 0;
  for (uint32_t s = 0; s < S; s++) {
    uint64_t *k;
    void *v;
    make(PS_ROWSET_INT8, &k, &v);
    ps_rowset *r = NULL;
    ps_error err;
    assert_int_equal(ps_rowset_create(k, v, N, DIM, PS_ROWSET_INT8, s, S, &r, &err), PS_OK);
    float row[DIM];
    uint64_t mine = 0;
    for (uint64_t i = 0; i < N; i++) {
      bool here = ps_shard_of(3 * i + 1, S) == s;
      assert_int_equal(ps_rowset_get(r, 3 * i + 1, row), here);
      mine += here;
    }
    assert_int_equal(ps_rowset_rows(r), mine);
    seen += mine;
    ps_rowset_destroy(&r);
  }
  assert_int_equal(seen, N);
  /* one key, on one shard: the others hold nothing */
  for (uint32_t s = 0; s < S; s++) {
    uint64_t *k = malloc(sizeof *k);
    float *v = calloc(DIM, sizeof *v);
    *k = 12345;
    ps_rowset *r = NULL;
    ps_error err;
    assert_int_equal(ps_rowset_create(k, v, 1, DIM, PS_ROWSET_F32, s, S, &r, &err), PS_OK);
    assert_int_equal(ps_rowset_rows(r), ps_shard_of(12345, S) == s);
    ps_rowset_destroy(&r);
  }
}

static void test_duplicate_refused(void **st) {
  (void)st;
  uint64_t *k;
  void *v;
  make(PS_ROWSET_F32, &k, &v);
  k[N - 1] = k[7];
  ps_rowset *r = NULL;
  ps_error err;
  assert_int_equal(ps_rowset_create(k, v, N, DIM, PS_ROWSET_F32, 0, 1, &r, &err), PS_ERR_CORRUPT);
  assert_null(r);
  assert_non_null(strstr(err.msg, "has two rows"));
}

PS_TEST_MAIN("rowset", NULL, NULL, cmocka_unit_test(test_get), cmocka_unit_test(test_shards),
             cmocka_unit_test(test_duplicate_refused))

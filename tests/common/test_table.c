/* The table vocabulary (ps_table.h) and the error convention (ps_error in ps_status.h):
 * defaults, each validation rule with its message, names both ways, row vs stepping
 * equality, and error messages that are set, prefixed and truncated as documented. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_status.h"
#include "ps_table.h"

static void test_default_is_valid(void **st) {
  (void)st;
  ps_table_spec t;
  ps_table_spec_default(&t, 7, "emb", 16);
  assert_int_equal(t.id, 7);
  assert_string_equal(t.name, "emb");
  assert_int_equal(t.optimizer, PS_OPT_SGD);
  assert_true(t.lr == 0.01f && t.init_a == -0.05f && t.init_b == 0.05f);
  assert_int_equal(t.consistency, PS_CONS_ASYNC);
  assert_int_equal(t.num_workers, 1);
  assert_int_equal(ps_table_spec_validate(&t, NULL), PS_OK);
}

/* Each bad field is refused with PS_ERR_INVALID and a message that names it. */
static void test_validate_rules(void **st) {
  (void)st;
  ps_table_spec t;
  ps_error e;
#define BAD(stmt, needle)                                            \
  do {                                                               \
    ps_table_spec_default(&t, 3, "tab", 8);                          \
    stmt;                                                            \
    ps_error_clear(&e);                                              \
    assert_int_equal(ps_table_spec_validate(&t, &e), PS_ERR_INVALID); \
    assert_int_equal(e.code, PS_ERR_INVALID);                        \
    assert_non_null(strstr(e.msg, needle));                          \
  } while (0)
  BAD(t.id = 0, "table id 0");
  BAD(t.id = PS_TABLE_MAX_ID + 1, "not in 1..65535");
  BAD(t.name[0] = 0, "name must have");
  BAD(memset(t.name, 'x', sizeof(t.name)), "name must have");
  BAD(t.dim = 0, "dim 0");
  BAD(t.dim = PS_TABLE_MAX_DIM + 1, "dim 4097");
  BAD(t.optimizer = (ps_optimizer)5, "unknown optimizer 5");
  BAD(t.init = (ps_init)3, "unknown init 3");
  BAD(t.consistency = (ps_consistency)3, "unknown consistency 3");
  BAD(t.num_workers = 0, "0 workers");
  BAD(t.lr = NAN, "not finite");
  BAD(t.init_b = INFINITY, "not finite");
  BAD((t.optimizer = PS_OPT_FTRL, t.lr = 0), "FTRL needs lr > 0");
  BAD((t.optimizer = PS_OPT_ADAM, t.beta2 = 1.0f), "Adam needs betas");
  BAD(t.initial_accumulator = -1, "initial_accumulator");
#undef BAD
  /* The boundaries themselves are fine. */
  ps_table_spec_default(&t, PS_TABLE_MAX_ID, "x", PS_TABLE_MAX_DIM);
  t.num_workers = PS_TABLE_MAX_WORKERS;
  assert_int_equal(ps_table_spec_validate(&t, NULL), PS_OK);
}

/* Every value of an enum: its name parses back to it. */
#define NAMES_BOTH_WAYS(type, count, name_fn, parse_fn)                      \
  for (unsigned i = 0; i < (count); i++) {                                   \
    type v;                                                                  \
    assert_int_equal(parse_fn(name_fn((type)i), &v, NULL), PS_OK);           \
    assert_int_equal(v, i);                                                  \
  }

static void test_names_both_ways(void **st) {
  (void)st;
  NAMES_BOTH_WAYS(ps_optimizer, PS_OPT_COUNT_, ps_optimizer_name, ps_optimizer_parse);
  NAMES_BOTH_WAYS(ps_init, PS_INIT_COUNT_, ps_init_name, ps_init_parse);
  NAMES_BOTH_WAYS(ps_consistency, PS_CONS_COUNT_, ps_consistency_name, ps_consistency_parse);
  assert_string_equal(ps_optimizer_name(PS_OPT_ROWWISE_ADAGRAD), "rowwise_adagrad");
  assert_string_equal(ps_consistency_name((ps_consistency)9), "?");
  ps_optimizer o = PS_OPT_ADAM;
  ps_error e;
  assert_int_equal(ps_optimizer_parse("adamw", &o, &e), PS_ERR_INVALID);
  assert_int_equal(o, PS_OPT_ADAM); /* untouched on failure */
  assert_string_equal(e.msg, "unknown optimizer 'adamw' (known: sgd, adagrad, rowwise_adagrad, "
                             "adam, ftrl)");
}

static void test_equality_parts(void **st) {
  (void)st;
  ps_table_spec a, b;
  ps_table_spec_default(&a, 1, "t", 4);
  b = a;
  b.consistency = PS_CONS_SYNC;
  b.num_workers = 4;
  assert_true(ps_table_spec_rows_equal(&a, &b));   /* stepping does not define rows */
  assert_false(ps_table_spec_stepping_equal(&a, &b));
  b = a;
  b.lr = 0.02f;
  assert_false(ps_table_spec_rows_equal(&a, &b));
  assert_true(ps_table_spec_stepping_equal(&a, &b));
  b = a;
  b.ttl_steps = 9;
  assert_false(ps_table_spec_rows_equal(&a, &b));
}

/* A refusal names the field that differs, not two identical-looking name/dim pairs. */
static void test_diff_names_the_field(void **st) {
  (void)st;
  ps_table_spec a, b;
  char buf[128];
  ps_table_spec_default(&a, 1, "criteo_emb", 16);
  b = a;
  assert_string_equal(ps_table_spec_diff(&a, &b, buf, sizeof buf), "");
  b.lr = 0.05f;
  assert_string_equal(ps_table_spec_diff(&a, &b, buf, sizeof buf), "lr 0.01 vs 0.05");
  b = a;
  b.optimizer = PS_OPT_ADAGRAD;
  b.seed = 7; /* the first difference in struct order is named */
  assert_string_equal(ps_table_spec_diff(&a, &b, buf, sizeof buf), "optimizer sgd vs adagrad");
  b = a;
  b.init_b = nextafterf(a.init_b, 1.0f); /* one ulp apart still print apart */
  assert_string_equal(ps_table_spec_diff(&a, &b, buf, sizeof buf), "init_b 0.05 vs 0.050000004");
  b = a;
  b.seed = 7;
  assert_string_equal(ps_table_spec_diff(&a, &b, buf, sizeof buf), "seed 0 vs 7");
  b = a;
  b.consistency = PS_CONS_SYNC;
  assert_string_equal(ps_table_spec_diff(&a, &b, buf, sizeof buf), "consistency async vs sync");
  b = a;
  snprintf(b.name, sizeof b.name, "other");
  assert_string_equal(ps_table_spec_diff(&a, &b, buf, sizeof buf), "name 'criteo_emb' vs 'other'");
  char small[8];
  b = a;
  b.dim = 32;
  assert_string_equal(ps_table_spec_diff(&a, &b, small, sizeof small), "dim 16 "); /* truncated */
}

/* Row types (issue 33): names, sizes, and the bf16 rounding against hand-made bit patterns
 * (round to nearest even on the top 16 bits; the f16 path is test_half's). */
static void test_row_types(void **st) {
  (void)st;
  NAMES_BOTH_WAYS(ps_row_type, PS_ROW_TYPE_COUNT_, ps_row_type_name, ps_row_type_parse);
  assert_int_equal(ps_row_type_size(PS_ROW_F32), 4);
  assert_int_equal(ps_row_type_size(PS_ROW_F16), 2);
  assert_int_equal(ps_row_type_size(PS_ROW_BF16), 2);
  ps_table_spec a, b;
  char buf[64];
  ps_table_spec_default(&a, 1, "t", 8);
  assert_int_equal(a.row_type, PS_ROW_F32);
  b = a;
  b.row_type = PS_ROW_BF16;
  assert_false(ps_table_spec_rows_equal(&a, &b));
  assert_string_equal(ps_table_spec_diff(&a, &b, buf, sizeof buf), "row_type f32 vs bf16");
  b.row_type = (ps_row_type)3;
  assert_int_equal(ps_table_spec_validate(&b, NULL), PS_ERR_INVALID);
  /* f32 bits -> bf16 bits: exact, below half (down), above half (up), ties to even both ways,
   * a carry into the exponent, the largest finite to inf, a negative, NaN kept quiet. */
  const uint32_t in[] = {0x3f800000u, 0x3f807fffu, 0x3f808001u, 0x3f808000u, 0x3f818000u,
                         0x3fffff00u, 0x7f7fffffu, 0xbf808001u, 0x7f800001u};
  const uint16_t want[] = {0x3f80, 0x3f80, 0x3f81, 0x3f80, 0x3f82, 0x4000, 0x7f80, 0xbf81, 0x7fc0};
  enum { N = sizeof in / sizeof in[0] };
  float f[N], back[N];
  uint16_t got[N];
  memcpy(f, in, sizeof f);
  ps_row_narrow(PS_ROW_BF16, f, got, N);
  for (int i = 0; i < N; i++) assert_int_equal(got[i], want[i]);
  ps_row_widen(PS_ROW_BF16, got, back, N);
  for (int i = 0; i < N - 1; i++) {
    uint32_t x;
    memcpy(&x, &back[i], 4);
    assert_int_equal(x, (uint32_t)want[i] << 16); /* widening is exact */
  }
  assert_true(isnan(back[N - 1]));
}

static void test_error_convention(void **st) {
  (void)st;
  assert_int_equal(ps_error_set(NULL, PS_ERR_IO, "x %d", 1), PS_ERR_IO); /* NULL is fine */
  assert_string_equal(ps_error_str(NULL), "ok");
  ps_error e;
  ps_error_clear(&e);
  assert_int_equal(e.code, PS_OK);
  assert_string_equal(ps_error_str(&e), "ok");
  assert_int_equal(ps_error_set(&e, PS_ERR_NOT_FOUND, "file %s", "a.tsv"), PS_ERR_NOT_FOUND);
  assert_string_equal(e.msg, "file a.tsv");
  assert_int_equal(ps_error_prefix(&e, "shard %d: ", 2), PS_ERR_NOT_FOUND);
  assert_string_equal(ps_error_str(&e), "shard 2: file a.tsv");
  /* An empty message reads as its code's text, also under a prefix. */
  e.code = PS_ERR_TIMEOUT;
  e.msg[0] = 0;
  assert_string_equal(ps_error_str(&e), "timed out");
  ps_error_prefix(&e, "pull: ");
  assert_string_equal(e.msg, "pull: timed out");
  /* Long messages are truncated, never overflow. */
  char big[2 * PS_ERROR_MSG_MAX];
  memset(big, 'y', sizeof big - 1);
  big[sizeof big - 1] = 0;
  ps_error_set(&e, PS_ERR_IO, "%s", big);
  assert_int_equal(strlen(e.msg), PS_ERROR_MSG_MAX - 1);
  ps_error_prefix(&e, "%s", big);
  assert_int_equal(strlen(e.msg), PS_ERROR_MSG_MAX - 1);
}

PS_TEST_MAIN("table", NULL, NULL,
    cmocka_unit_test(test_default_is_valid), cmocka_unit_test(test_validate_rules),
    cmocka_unit_test(test_names_both_ways), cmocka_unit_test(test_equality_parts),
    cmocka_unit_test(test_diff_names_the_field), cmocka_unit_test(test_row_types),
    cmocka_unit_test(test_error_convention))

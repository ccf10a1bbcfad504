/* A restore that cannot move the live store aside keeps it: the first rename of
 * ps_store_restore fails (injected through the linker's --wrap=rename), the call returns
 * PS_ERR_IO with a message naming the step, and every row pushed before is still there, in
 * memory and after a reopen. (Before, the failure path removed the live directory.) */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_store.h"

int __real_rename(const char *from, const char *to);
static const char *fail_from; /* a rename from this path fails with EXDEV */
int __wrap_rename(const char *from, const char *to) {
  if (fail_from && strcmp(from, fail_from) == 0) {
    errno = EXDEV;
    return -1;
  }
  return __real_rename(from, to);
}

static void test_failed_swap_keeps_live_store(void **st) {
  (void)st;
  char dir[128], snap[160];
  snprintf(dir, sizeof dir, "/tmp/ember-test-restore-fail-%d", (int)getpid());
  snprintf(snap, sizeof snap, "%s.snap", dir);
  ps_store_snapshot_remove(dir, NULL);
  ps_store_snapshot_remove(snap, NULL);
  ps_store_options o = {.path = dir, .cache_bytes = 8u << 20, .partitions = 2};
  ps_store *s = NULL;
  assert_int_equal(ps_store_open(&o, &s, NULL), PS_OK);
  ps_table_spec t;
  ps_table_spec_default(&t, 1, "t", 4);
  t.init = PS_INIT_ZERO;
  t.lr = 1.0f;
  assert_int_equal(ps_store_declare(s, &t, NULL), PS_OK);
  uint64_t k[3] = {11, 22, 33};
  float g[12], row[12];
  for (int i = 0; i < 12; i++) g[i] = -(float)(i + 1);
  assert_int_equal(ps_store_push(s, 1, k, 3, g), PS_OK);
  assert_int_equal(ps_store_snapshot(s, snap, NULL), PS_OK);
  assert_int_equal(ps_store_push(s, 1, k, 3, g), PS_OK); /* rows now 2x, the snapshot 1x */
  fail_from = dir;
  ps_error e;
  assert_int_equal(ps_store_restore(s, snap, &e), PS_ERR_IO);
  assert_non_null(strstr(e.msg, "moving"));
  fail_from = NULL;
  assert_int_equal(ps_store_pull(s, 1, k, 3, row), PS_OK);
  for (int i = 0; i < 12; i++) assert_true(row[i] == 2.0f * (float)(i + 1));
  ps_store_close(&s);
  assert_int_equal(ps_store_open(&o, &s, NULL), PS_OK);
  assert_int_equal(ps_store_pull(s, 1, k, 3, row), PS_OK);
  for (int i = 0; i < 12; i++) assert_true(row[i] == 2.0f * (float)(i + 1));
  ps_store_close(&s);
  ps_store_snapshot_remove(dir, NULL);
  ps_store_snapshot_remove(snap, NULL);
}

PS_TEST_MAIN("store_restore_fail", NULL, NULL,
    cmocka_unit_test(test_failed_swap_keeps_live_store))

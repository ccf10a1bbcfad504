/* ps_ckpt_layout: step-N built and parsed back (0, large, INT64_MAX) and malformed names
 * refused (no digits, a sign, a space, a leading zero, too large, another prefix); a path of
 * the layout split into its root and step (ROOT/step-N, ROOT/step-N/shards, trailing slashes)
 * and others not; the paths of a step directory and a shard; latest written and read back,
 * resolved to its step directory, a damaged latest refused, and a step directory given
 * itself accepted by its marker. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_ckpt_layout.h"
#include "ps_fs.h"

static void test_step_names(void **st) {
  (void)st;
  char name[32];
  uint64_t step = 1;
  const uint64_t good[] = {0, 7, 1234567890123ull, (uint64_t)INT64_MAX};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    assert_int_equal(ps_ckpt_step_name(name, sizeof name, good[i]), PS_OK);
    assert_true(ps_ckpt_step_parse(name, &step));
    assert_true(step == good[i]);
  }
  assert_string_equal((ps_ckpt_step_name(name, sizeof name, 20), name), "step-20");
  const char *bad[] = {"step-", "step--1", "step-+1", "step- 1", "step-1 ", "step-007",
                       "step-9223372036854775808", "step-12345678901234567890", "Step-1",
                       "steps-1", "step-1a", "latest", ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    step = 99;
    assert_false(ps_ckpt_step_parse(bad[i], &step));
    assert_true(step == 99);
  }
  assert_int_equal(ps_ckpt_step_name(name, 6, 20), PS_ERR_INVALID);
  assert_string_equal(name, "");
}

static void test_path_split(void **st) {
  (void)st;
  char root[64];
  uint64_t step = 0;
  assert_true(ps_ckpt_path_split("/ck/step-20", root, sizeof root, &step));
  assert_string_equal(root, "/ck");
  assert_true(step == 20);
  assert_true(ps_ckpt_path_split("/a/ck/step-3/shards/", root, sizeof root, &step));
  assert_string_equal(root, "/a/ck");
  assert_true(step == 3);
  assert_true(ps_ckpt_path_split("/step-4", root, sizeof root, NULL));
  assert_string_equal(root, "/");
  assert_true(ps_ckpt_path_split("ck/step-5//", NULL, 0, &step));
  assert_true(step == 5);
  assert_false(ps_ckpt_path_split("step-5", root, sizeof root, &step));
  assert_false(ps_ckpt_path_split("/ck/step-5/shards/shard-0", root, sizeof root, &step));
  assert_false(ps_ckpt_path_split("/ck/step-x/shards", root, sizeof root, &step));
  assert_false(ps_ckpt_path_split("/ck/shards", root, sizeof root, &step));
  assert_false(ps_ckpt_path_split("/data/checkpoints", root, sizeof root, &step));
  assert_false(ps_ckpt_path_split("/a/ck/step-3", root, 4, &step)); /* root does not fit */
}

static void test_paths(void **st) {
  (void)st;
  char p[128];
  assert_int_equal(ps_ckpt_step_path(p, sizeof p, "/ck", 9), PS_OK);
  assert_string_equal(p, "/ck/step-9");
  ps_ckpt_file_path(p, sizeof p, "/ck/step-9", PS_CKPT_CONFIG);
  assert_string_equal(p, "/ck/step-9/config");
  ps_ckpt_file_path(p, sizeof p, "/ck/step-9", PS_CKPT_DENSE);
  assert_string_equal(p, "/ck/step-9/dense.bin");
  ps_ckpt_file_path(p, sizeof p, "/ck/step-9", PS_CKPT_SCHEMA);
  assert_string_equal(p, "/ck/step-9/schema.json");
  ps_ckpt_step_shard_path(p, sizeof p, "/ck/step-9", 2, PS_CKPT_SHARD_DIR);
  assert_string_equal(p, "/ck/step-9/shards/shard-2");
  ps_ckpt_step_shard_path(p, sizeof p, "/ck/step-9", 2, PS_CKPT_SHARD_META);
  assert_string_equal(p, "/ck/step-9/shards/shard-2.json");
  ps_ckpt_shard_path(p, sizeof p, "/r", 1, PS_CKPT_SHARD_STAGING);
  assert_string_equal(p, "/r/shard-1.staging");
  ps_ckpt_shard_path(p, sizeof p, "/r", 1, PS_CKPT_SHARD_STAGING_META);
  assert_string_equal(p, "/r/shard-1.staging.json");
  ps_ckpt_shard_path(p, sizeof p, "/r", 1, PS_CKPT_SHARD_BUILD);
  assert_string_equal(p, "/r/shard-1.build");
  ps_ckpt_server_root(p, sizeof p, "/data", 30);
  assert_string_equal(p, "/data/checkpoints/step-30");
  ps_ckpt_latest_path(p, sizeof p, "/ck");
  assert_string_equal(p, "/ck/latest");
  assert_int_equal(ps_ckpt_file_path(p, 8, "/ck/step-9", PS_CKPT_CONFIG), PS_ERR_INVALID);
}

static void put(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void test_latest(void **st) {
  (void)st;
  char dir[64], p[160], out[160], name[32];
  snprintf(dir, sizeof dir, "/tmp/ember-test-layout-%d", (int)getpid());
  ps_rm_rf(dir);
  assert_int_equal(ps_mkdir_p(dir), PS_OK);
  ps_error err;
  assert_int_equal(ps_ckpt_latest_read(dir, name, sizeof name, &err), PS_ERR_NOT_FOUND);
  assert_int_equal(ps_ckpt_resolve(dir, PS_CKPT_DENSE, out, sizeof out, &err), PS_ERR_INVALID);
  assert_int_equal(ps_ckpt_latest_write(dir, 42, &err), PS_OK);
  assert_int_equal(ps_ckpt_latest_read(dir, name, sizeof name, &err), PS_OK);
  assert_string_equal(name, "step-42");
  ps_ckpt_latest_path(p, sizeof p, dir);
  FILE *f = fopen(p, "r");
  char line[32] = "";
  assert_non_null(fgets(line, sizeof line, f));
  fclose(f);
  assert_string_equal(line, "step-42\n"); /* the format ps-worker always wrote */
  assert_int_equal(ps_ckpt_resolve(dir, PS_CKPT_DENSE, out, sizeof out, &err), PS_OK);
  snprintf(p, sizeof p, "%s/step-42", dir);
  assert_string_equal(out, p);
  /* a step directory given itself: accepted by its marker */
  assert_int_equal(ps_mkdir_p(p), PS_OK);
  char dense[200];
  ps_ckpt_file_path(dense, sizeof dense, p, PS_CKPT_DENSE);
  put(dense, "x");
  assert_int_equal(ps_ckpt_resolve(p, PS_CKPT_DENSE, out, sizeof out, &err), PS_OK);
  assert_string_equal(out, p);
  assert_int_equal(ps_ckpt_resolve(p, PS_CKPT_SHARDS, out, sizeof out, &err), PS_ERR_INVALID);
  assert_int_equal(ps_ckpt_count_shards(p, 100), 0);
  char shard[200];
  ps_ckpt_step_shard_path(shard, sizeof shard, p, 0, PS_CKPT_SHARD_DIR);
  assert_int_equal(ps_mkdir_p(shard), PS_OK);
  ps_ckpt_step_shard_path(shard, sizeof shard, p, 1, PS_CKPT_SHARD_DIR);
  assert_int_equal(ps_mkdir_p(shard), PS_OK);
  assert_int_equal(ps_ckpt_count_shards(p, 100), 2);
  assert_int_equal(ps_ckpt_count_shards(p, 1), 1);
  /* damaged: names no step directory */
  ps_ckpt_latest_path(p, sizeof p, dir);
  const char *bad[] = {"", "\n", "../elsewhere\n", "a/b\n", "..\n", ".\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    put(p, bad[i]);
    assert_int_equal(ps_ckpt_latest_read(dir, name, sizeof name, &err), PS_ERR_CORRUPT);
    assert_int_equal(ps_ckpt_resolve(dir, PS_CKPT_DENSE, out, sizeof out, &err), PS_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "does not name a checkpoint"));
  }
  put(p, "step-7\r\n"); /* edited by hand on another system: still read */
  assert_int_equal(ps_ckpt_latest_dir(dir, out, sizeof out, &err), PS_OK);
  snprintf(p, sizeof p, "%s/step-7", dir);
  assert_string_equal(out, p);
  assert_int_equal(ps_rm_rf(dir), PS_OK);
}

PS_TEST_MAIN("ckpt_layout", NULL, NULL,
    cmocka_unit_test(test_step_names),
    cmocka_unit_test(test_path_split),
    cmocka_unit_test(test_paths),
    cmocka_unit_test(test_latest))

/* ps_rm_rf: removes a tree with files, sub-directories and a link, never following the link
 * (its target survives); a missing path is PS_OK; a path under a file is an I/O error.
 * ps_path_canonical / ps_path_within: a path whose tail does not exist yet resolves through
 * its existing prefix (a symlink there followed), '.' and repeated slashes vanish, '..' is
 * refused wherever it is; "within" is by whole components. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "ps_test_main.h"

#include "ps_fs.h"

static void touch(const char *p) {
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs("x", f);
  fclose(f);
}

static void test_rm_rf(void **st) {
  (void)st;
  char root[64], p[256], keep[128];
  snprintf(root, sizeof root, "/tmp/ember-test-rmrf-%d", (int)getpid());
  snprintf(keep, sizeof keep, "%s.keep", root);
  snprintf(p, sizeof p, "%s/a/b/c", root);
  assert_int_equal(ps_mkdir_p(p), PS_OK);
  assert_int_equal(ps_mkdir_p(keep), PS_OK);
  snprintf(p, sizeof p, "%s/a/b/c/f", root);
  touch(p);
  snprintf(p, sizeof p, "%s/a/g", root);
  touch(p);
  char target[160];
  snprintf(target, sizeof target, "%s/precious", keep);
  touch(target);
  snprintf(p, sizeof p, "%s/a/link", root);
  assert_int_equal(symlink(keep, p), 0);
  assert_int_equal(ps_rm_rf(root), PS_OK);
  struct stat sb;
  assert_int_equal(lstat(root, &sb), -1);
  assert_int_equal(errno, ENOENT);
  assert_int_equal(stat(target, &sb), 0); /* the link was removed, not followed */
  assert_int_equal(ps_rm_rf(root), PS_OK); /* already gone */
  snprintf(p, sizeof p, "%s/under-a-file", target);
  assert_int_equal(ps_rm_rf(p), PS_ERR_IO);
  assert_int_equal(errno, ENOTDIR);
  assert_int_equal(ps_rm_rf(keep), PS_OK);
}

static void canon(const char *in, const char *want) {
  char out[4096];
  ps_error e;
  ps_status st = ps_path_canonical(in, out, sizeof out, &e);
  if (st != PS_OK) fail_msg("%s: %s", in, e.msg);
  if (strcmp(out, want) != 0) fail_msg("%s -> %s, want %s", in, out, want);
}

static void test_path_canonical(void **st) {
  (void)st;
  char root[64], real[4096], p[256], want[4352];
  snprintf(root, sizeof root, "/tmp/ember-test-canon-%d", (int)getpid());
  snprintf(p, sizeof p, "%s/a/b", root);
  assert_int_equal(ps_mkdir_p(p), PS_OK);
  assert_non_null(realpath(root, real));
  snprintf(p, sizeof p, "%s/a/b/new/x", root); /* "new" does not exist */
  snprintf(want, sizeof want, "%s/a/b/new/x", real);
  canon(p, want);
  snprintf(p, sizeof p, "%s//a/./b/new/./x/", root);
  canon(p, want);
  char link[160];
  snprintf(link, sizeof link, "%s/link", root);
  assert_int_equal(symlink("/tmp", link), 0);
  char tmp[4096];
  assert_non_null(realpath("/tmp", tmp));
  snprintf(p, sizeof p, "%s/link/ckpt", root);
  snprintf(want, sizeof want, "%s/ckpt", tmp);
  canon(p, want);
  canon("/", "/");
  ps_error e;
  char out[4096];
  const char *bad[] = {"..", "../x", "/a/../b", "a/..", "ck/../../escape"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    assert_int_equal(ps_path_canonical(bad[i], out, sizeof out, &e), PS_ERR_INVALID);
    assert_non_null(strstr(e.msg, "'..' is not allowed"));
  }
  assert_int_equal(ps_path_canonical("", out, sizeof out, &e), PS_ERR_INVALID);
  snprintf(want, sizeof want, "%s/..x/y", tmp); /* "..x" is a name, not ".." */
  canon("/tmp/..x/y", want);
  assert_true(ps_path_within("/a/b", "/a"));
  assert_true(ps_path_within("/a", "/a"));
  assert_false(ps_path_within("/ab", "/a"));
  assert_false(ps_path_within("/a", "/a/b"));
  assert_true(ps_path_within("/x", "/"));
  assert_int_equal(ps_rm_rf(root), PS_OK);
}

/* ps_write_atomic: the content replaced whole, the mode set, no temporary left; exclusive
 * refuses an existing file (PS_ERR_CONFLICT) and leaves it as it was; a missing directory is
 * an I/O error with err filled. */
static void test_write_atomic(void **st) {
  (void)st;
  char root[64], p[128], buf[32] = "";
  snprintf(root, sizeof root, "/tmp/ember-test-atomic-%d", (int)getpid());
  assert_int_equal(ps_mkdir_p(root), PS_OK);
  snprintf(p, sizeof p, "%s/f", root);
  assert_int_equal(ps_write_atomic(p, "one\n", 4, 0644, false, NULL), PS_OK);
  assert_int_equal(ps_write_atomic(p, "two\n", 4, 0600, false, NULL), PS_OK);
  FILE *f = fopen(p, "r");
  assert_non_null(f);
  assert_non_null(fgets(buf, sizeof buf, f));
  fclose(f);
  assert_string_equal(buf, "two\n");
  struct stat sb;
  assert_int_equal(stat(p, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0600);
  ps_error err;
  assert_int_equal(ps_write_atomic(p, "three\n", 6, 0644, true, &err), PS_ERR_CONFLICT);
  assert_int_equal(stat(p, &sb), 0);
  assert_int_equal(sb.st_size, 4);
  char tmp[160];
  snprintf(tmp, sizeof tmp, "%s.tmp%d", p, (int)getpid());
  assert_int_not_equal(stat(tmp, &sb), 0);
  snprintf(p, sizeof p, "%s/no/such/f", root);
  assert_int_equal(ps_write_atomic(p, "x", 1, 0644, false, &err), PS_ERR_IO);
  assert_non_null(strstr(err.msg, "no/such"));
  assert_int_equal(ps_fsync_dir(root), PS_OK);
  assert_int_equal(ps_rm_rf(root), PS_OK);
}

PS_TEST_MAIN("fs", NULL, NULL,
    cmocka_unit_test(test_write_atomic),
    cmocka_unit_test(test_rm_rf),
    cmocka_unit_test(test_path_canonical))

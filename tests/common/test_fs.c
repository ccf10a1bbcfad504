/* ps_rm_rf: removes a tree with files, sub-directories and a link, never following the link
 * (its target survives); a missing path is PS_OK; a path under a file is an I/O error. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
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

PS_TEST_MAIN("fs", NULL, NULL,
    cmocka_unit_test(test_rm_rf))

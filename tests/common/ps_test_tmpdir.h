/* ps_test_tmpdir: a group fixture for a test file whose tests share one scratch directory
 * and one file in it. PS_TEST_TMPDIR(tag, file) defines `dir` (/tmp/ember-test-TAG-PID),
 * `path` (dir/FILE) and the group's `setup` (makes dir) and `teardown` (removes it) for
 * PS_TEST_MAIN. Needs ps_fs.h (ps_mkdir_p, ps_rm_rf). Written once: the files that had it
 * wrote the same nine lines. (tests/data has its own scratch helpers: ps_test_scratch.h.) */
#ifndef PS_TEST_TMPDIR_H
#define PS_TEST_TMPDIR_H

#include <stdio.h>
#include <unistd.h>

#include "ps_fs.h"

#define PS_TEST_TMPDIR(tag, file)                                           \
  static char dir[64], path[128];                                            \
  static int setup(void **st) {                                              \
    (void)st;                                                                \
    snprintf(dir, sizeof dir, "/tmp/ember-test-%s-%d", tag, (int)getpid());  \
    snprintf(path, sizeof path, "%s/%s", dir, file);                         \
    return ps_mkdir_p(dir) == PS_OK ? 0 : -1;                                \
  }                                                                          \
  static int teardown(void **st) {                                           \
    (void)st;                                                                \
    return ps_rm_rf(dir) == PS_OK ? 0 : -1;                                  \
  }

#endif

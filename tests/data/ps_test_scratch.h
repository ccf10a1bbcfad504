/* ps_test_scratch: a scratch directory for a data test file — made by the group setup, removed
 * by its teardown — and the two helpers every such file used to write out: a path inside it
 * and a file written from a string. Header-only (static inline), for tests/data only. */
#ifndef PS_TEST_SCRATCH_H
#define PS_TEST_SCRATCH_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

static char g_dir[256];

/* DIR/name; the last 8 results stay valid. */
static inline const char *tmp_path(const char *name) {
  static char p[8][512];
  static int k = 0;
  k = (k + 1) % 8;
  snprintf(p[k], sizeof p[k], "%s/%s", g_dir, name);
  return p[k];
}

static inline void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* Group setup / teardown: /tmp/ember-test-NAME-XXXXXX. */
static inline int ps_scratch_setup(const char *name) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ember-test-%s-XXXXXX", name);
  return mkdtemp(g_dir) ? 0 : -1;
}

static inline int ps_scratch_teardown(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  return system(cmd) == 0 ? 0 : -1;
}

/* static int setup(void **) / teardown(void **): the group fixtures of a file's scratch dir. */
#define PS_SCRATCH_FIXTURES(name)                                       \
  static int setup(void **st) {                                         \
    (void)st;                                                           \
    return ps_scratch_setup(name);                                      \
  }                                                                     \
  static int teardown(void **st) {                                      \
    (void)st;                                                           \
    return ps_scratch_teardown();                                       \
  }

#endif

/* ps_test_main: the main a cmocka test file ends with, written once.
 *
 * Most test files' main did nothing but list their tests and run them as one group; this
 * macro is that main, so a file ends with its list of tests and nothing else to read. A main
 * that does more (skips without a GPU, makes a scratch directory) stays written out. */
#ifndef PS_TEST_MAIN_H
#define PS_TEST_MAIN_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

/* int main(void) running the cmocka tests given after setup and teardown (group fixtures,
 * NULL for none) as the group named `group`. */
#define PS_TEST_MAIN(group, setup, teardown, ...)                      \
  int main(void) {                                                     \
    const struct CMUnitTest tests[] = {__VA_ARGS__};                   \
    return cmocka_run_group_tests_name(group, tests, setup, teardown); \
  }

#endif

/* ps_test_kern: the group fixture of a test file that runs on one CPU kernel backend.
 *
 * The files that compare kernels or models against references make one ps_kern for the whole
 * group and destroy it at the end; this macro defines that setup and teardown once. */
#ifndef PS_TEST_KERN_H
#define PS_TEST_KERN_H

#include "ps_kernels.h"

/* static setup/teardown (cmocka group fixtures) creating *k as a CPU backend of `threads`
 * threads and destroying it. */
#define PS_TEST_KERN_FIXTURE(k, threads)                                 \
  static int setup(void **st) {                                        \
    (void)st;                                                          \
    return ps_kern_cpu_create((threads), &(k)) == PS_OK ? 0 : -1;      \
  }                                                                    \
  static int teardown(void **st) {                                     \
    (void)st;                                                          \
    ps_kern_destroy(&(k));                                             \
    return 0;                                                          \
  }

#endif

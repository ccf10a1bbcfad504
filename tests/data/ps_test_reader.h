/* ps_test_reader: every batch a reader gives, handed to a callback (the reader tests of
 * tests/data collect or check what they read; the create/next/release/destroy loop around that
 * is the same in each, so it is written here once). Every step must succeed (cmocka asserts).
 * Header-only (static inline), for tests/data only. */
#ifndef PS_TEST_READER_H
#define PS_TEST_READER_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ps_reader.h"

/* Reads path with o to its end, calling fn(batch, ctx) on each batch before releasing it. */
static inline void ps_test_each_batch(const char *path, const ps_reader_opts *o,
                                      void (*fn)(const ps_batch *b, void *ctx), void *ctx) {
  ps_reader *r = NULL;
  ps_error err;
  assert_int_equal(ps_reader_create(path, o, &r, &err), PS_OK);
  for (;;) {
    ps_batch *b = NULL;
    assert_int_equal(ps_reader_next(r, &b, &err), PS_OK);
    if (!b) break;
    fn(b, ctx);
    ps_reader_release(r, b);
  }
  ps_reader_destroy(&r);
}

#endif

/* test_floor_stride: ps-net-bench's memory floor sizes its rows as the store does. The store
 * counts a row at jemalloc's size class (nallocx); the floor cannot ask jemalloc (linking it
 * would replace ps-net-bench's malloc), so it computes the class, and this holds the two equal
 * for every dim up to 1024 (rows of 8 bytes to 8 KB). */
#include <jemalloc/jemalloc.h>

#include "ps_net_floor.h"
#include "ps_test_main.h"

static void test_stride_is_jemalloc_class(void **st) {
  (void)st;
  for (int dim = 1; dim <= 1024; dim++) {
    const size_t want = nallocx((size_t)dim * 8, 0);
    if (ps_floor_row_stride(dim) != want)
      fail_msg("dim %d: %zu, jemalloc %zu", dim, ps_floor_row_stride(dim), want);
  }
}

PS_TEST_MAIN("floor_stride", NULL, NULL, cmocka_unit_test(test_stride_is_jemalloc_class))

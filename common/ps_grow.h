/* ps_grow: room for one more element in a growing array.
 *
 * Every module keeps arrays that grow by doubling (staged rows, quotas, requests in flight,
 * rank lists...); the realloc-and-swap was written out at each of them. One inline function
 * keeps the rule in one place: on failure the array and its capacity are left as they were,
 * so the caller's error path owns nothing new. */
#ifndef PS_GROW_H
#define PS_GROW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

/* Room for `need` elements of `elem` bytes in *p of capacity *cap (doubling from `first`).
 * false without memory, *p and *cap unchanged. */
static inline bool ps_grow(void **p, size_t *cap, size_t need, size_t elem, size_t first) {
  if (need <= *cap) return true;
  size_t nc = *cap ? *cap : first;
  while (nc < need) nc *= 2;
  void *q = realloc(*p, nc * elem);
  if (!q) return false;
  *p = q;
  *cap = nc;
  return true;
}

#endif

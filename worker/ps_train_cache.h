/* ps_train_cache.h: ps-worker's row cache (--row-cache-mb): host memory holding embedding
 * rows by key, each with the version it reflects, bounded in bytes. Private to worker/.
 *
 * A version v is the step label of the pull (or refresh) that brought the row: in sync, the
 * row with every step below v applied and step v not. The cache itself knows nothing of
 * consistency: the trainer (ps_train_cache.c) decides which versions a step may use and how
 * they are made exact (docs/DESIGN.md, "The worker's row cache"). */
#ifndef PS_TRAIN_CACHE_H
#define PS_TRAIN_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ps_status.h"

typedef struct ps_rowcache ps_rowcache;

/* Room for as many rows of `dim` floats as `mb` MiB hold (the keys and versions counted);
 * PS_ERR_NOMEM when that is none or the memory cannot be had. */
ps_status ps_rowcache_create(size_t mb, int dim, ps_rowcache **out);
void ps_rowcache_destroy(ps_rowcache **c);
/* The row of `key` when cached with a version >= min_version: copied into row, its version
 * into *version. */
bool ps_rowcache_get(const ps_rowcache *c, uint64_t key, uint64_t min_version, float *row,
                     uint64_t *version);
/* Stores (or replaces) key's row at `version`; a full set evicts its oldest version. */
void ps_rowcache_put(ps_rowcache *c, uint64_t key, const float *row, uint64_t version);
/* Rows the cache has room for. */
size_t ps_rowcache_capacity(const ps_rowcache *c);

#endif

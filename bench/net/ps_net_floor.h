/* ps_net_floor: the memory floor of ps-net-bench (issue 22). The work any parameter server must
 * do per key on top of the transport: read the row from a table-sized array (pull) or
 * read-modify-write it with Adagrad (push). No hashing, no dedup: key -> row is key % rows. */
#ifndef PS_NET_FLOOR_H
#define PS_NET_FLOOR_H

#include <stddef.h>
#include <stdint.h>

typedef struct ps_floor ps_floor;

/* Bytes one row of dim floats occupies in Ember's store with Adagrad: values + state (the
 * row's metadata is in the store's index entry), rounded up to jemalloc's size class. Computed
 * here, not asked of jemalloc: linking jemalloc would make it this process's malloc too, and
 * the client's replies would then pay jemalloc's purging (bench/RESULTS-pslat.md). tests/net's
 * test_floor_stride holds it to nallocx for every dim up to 1024, so it cannot drift. */
size_t ps_floor_row_stride(int dim);
/* A table of rows rows of dim floats; row r's value j starts as ps_floor_init_value(r, j). */
ps_floor *ps_floor_create(int64_t rows, int dim);
int ps_floor_dim(const ps_floor *f);
float ps_floor_init_value(uint64_t row, int j);
/* Gathers the n keys' rows into out (n * dim floats), prefetching D keys ahead. */
void ps_floor_pull(const ps_floor *f, const uint64_t *keys, size_t n, float *out);
/* Adagrad on the n keys' rows with gradients g (n * dim floats). */
void ps_floor_push(ps_floor *f, const uint64_t *keys, size_t n, const float *g);
/* --mem-only: single-core gathers of 4096 random rows (64 and 256 bytes) from a 42 MB and a
 * 170 MB array, with and without prefetch; prints ns per key. */
void ps_floor_gather_bench(void);

#endif

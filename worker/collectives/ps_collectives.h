/* ps_collectives: dense-gradient collectives across workers, behind one C interface
 * (the collectives of docs/DESIGN.md). Two implementations: Gloo on CPU buffers (through a small C++
 * shim, collectives_gloo.cc) and NCCL on GPU buffers (collectives_nccl.c). Neither
 * hand-writes a collective algorithm.
 *
 * Both bootstrap through a rendezvous key-value store supplied by the caller (ps-worker
 * passes the coordinator in shard 0; tests may pass an in-process or file store), so workers
 * on one or several machines find each other with no extra address. */
#ifndef PS_COLLECTIVES_H
#define PS_COLLECTIVES_H

#include <stddef.h>
#include <stdint.h>

#include "ps_status.h"

/* A rendezvous store. set publishes a value under a key; get waits up to timeout_ms for the
 * key to exist and returns a malloc'ed copy (*val, freed by the caller). Keys are namespaced
 * by the caller ("gloo/...", "nccl/..."). */
typedef struct ps_rendezvous {
  void *ctx;
  ps_status (*set)(void *ctx, const char *key, const void *val, size_t len);
  ps_status (*get)(void *ctx, const char *key, void **val, size_t *len, uint32_t timeout_ms);
} ps_rendezvous;

typedef enum ps_coll_kind { PS_COLL_GLOO = 0, PS_COLL_NCCL = 1 } ps_coll_kind;

typedef struct ps_coll ps_coll;

/* The operations an implementation provides (vtable). */
typedef struct ps_coll_ops {
  ps_status (*allreduce_sum_f32)(ps_coll *c, float *buf, size_t n);
  ps_status (*broadcast)(ps_coll *c, void *buf, size_t bytes, int root);
  ps_status (*barrier)(ps_coll *c);
  void (*destroy)(ps_coll *c);
} ps_coll_ops;

struct ps_coll {
  const ps_coll_ops *ops;
  ps_coll_kind kind;
  int rank, world;
  void *impl;
};

/* Both creators fill err (may be NULL) with the reason of a failure; they do not log it. */
/* Gloo over TCP on `host` (the address this worker's peers reach it at, e.g. "127.0.0.1"). */
ps_status ps_coll_create_gloo(const ps_rendezvous *rdv, const char *prefix, int rank, int world,
                              const char *host, ps_coll **out, ps_error *err);
/* NCCL on CUDA device `device`, ops enqueued on `cuda_stream` (a cudaStream_t, NULL = the
 * default stream). PS_ERR_UNSUPPORTED where CUDA was not built or no GPU is present. */
ps_status ps_coll_create_nccl(const ps_rendezvous *rdv, const char *prefix, int rank, int world,
                              int device, void *cuda_stream, ps_coll **out, ps_error *err);

/* In place: buf (host memory for Gloo, device memory for NCCL) becomes the sum over ranks. */
static inline ps_status ps_coll_allreduce_sum(ps_coll *c, float *buf, size_t n) {
  return c->ops->allreduce_sum_f32(c, buf, n);
}
static inline ps_status ps_coll_broadcast(ps_coll *c, void *buf, size_t bytes, int root) {
  return c->ops->broadcast(c, buf, bytes, root);
}
static inline ps_status ps_coll_barrier(ps_coll *c) { return c->ops->barrier(c); }
void ps_coll_destroy(ps_coll **c);

#endif

/* collectives_nccl: ps_collectives over NCCL, for dense gradients that live on a GPU.
 *
 * Bootstrap: rank 0 makes an ncclUniqueId and publishes it through the caller's rendezvous
 * store under "<prefix>/nccl-id" (ps-worker's rendezvous is the coordinator on shard 0, so the
 * id travels over ZeroMQ and workers on several machines share one communicator); every other
 * rank waits for it there. Then each rank calls ncclCommInitRank on its own device.
 *
 * Ordering: allreduce and broadcast are enqueued on the caller's CUDA stream and return
 * without waiting, so the model's backward, the allreduce and the optimizer run in stream
 * order with no host synchronisation in a step. barrier() is the one call that blocks: it
 * allreduces a one-element scratch buffer and synchronises the stream.
 * With cuda_stream NULL (the legacy default stream) allreduce and broadcast also wait for
 * completion: the CUDA backend's stream is non-blocking, so its next copy or kernel would
 * NOT wait for work on the default stream, and the caller could read a half-reduced buffer.
 * Pass the backend's stream (ps_kern_stream) to keep the allreduce asynchronous; ps-worker does.
 *
 * Every CUDA and NCCL call is checked; a failure is returned as a ps_status, never an abort,
 * its reason in create's err or, in the ops, logged with file and line. No GPU (cudaGetDeviceCount fails or reports 0) gives
 * PS_ERR_UNSUPPORTED, which callers and tests treat as "skip". */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_collectives.h"
#include "ps_collectives_int.h"
#include "ps_log.h"

/* How long a non-zero rank waits for rank 0's unique id. Workers start within seconds of
 * each other under ember-local or a Job; two minutes covers a slow container start. */
#define NCCL_ID_TIMEOUT_MS 120000u

typedef struct nccl_impl {
  ncclComm_t comm;
  cudaStream_t stream;
  int device;
  float *scratch; /* one float on the device, for barrier() */
} nccl_impl;

/* err NULL (the ops, which take none; a create called without err): the reason goes to the
 * log; otherwise into err, unlogged. */
static ps_status cuda_fail(cudaError_t e, const char *what, const char *file, int line,
                           ps_error *err) {
  ps_status st = e == cudaErrorMemoryAllocation ? PS_ERR_NOMEM : PS_ERR_INTERNAL;
  if (err) return ps_error_set(err, st, "%s: CUDA error %d (%s)", what, (int)e, cudaGetErrorString(e));
  ps_log_write(PS_LOG_ERROR, file, line, "%s: CUDA error %d (%s)", what, (int)e,
               cudaGetErrorString(e));
  return st;
}

static ps_status nccl_status(ncclResult_t r) {
  switch (r) {
    case ncclInvalidArgument:
    case ncclInvalidUsage: return PS_ERR_INVALID;
    case ncclRemoteError:
    case ncclSystemError: return PS_ERR_UNAVAILABLE;
    default: return PS_ERR_INTERNAL;
  }
}

static ps_status nccl_fail(ncclResult_t r, ncclComm_t comm, const char *what, const char *file,
                           int line, ps_error *err) {
  const char *last = ncclGetLastError(comm);
  if (err)
    return ps_error_set(err, nccl_status(r), "%s: NCCL error %d (%s)%s%s", what, (int)r,
                        ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
  ps_log_write(PS_LOG_ERROR, file, line, "%s: NCCL error %d (%s)%s%s", what, (int)r,
               ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
  return nccl_status(r);
}

/* The _E forms fill err (create's path); the plain ones log (the ops'). */
#define CUDA_TRY_E(err, call)                                                      \
  do {                                                                             \
    cudaError_t e_ = (call);                                                       \
    if (e_ != cudaSuccess) return cuda_fail(e_, #call, __FILE__, __LINE__, (err)); \
  } while (0)
#define CUDA_TRY(call) CUDA_TRY_E(NULL, call)

#define NCCL_TRY_E(err, comm, call)                                                        \
  do {                                                                                     \
    ncclResult_t r_ = (call);                                                              \
    if (r_ != ncclSuccess) return nccl_fail(r_, (comm), #call, __FILE__, __LINE__, (err)); \
  } while (0)
#define NCCL_TRY(comm, call) NCCL_TRY_E(NULL, comm, call)

static ps_status nccl_allreduce(ps_coll *c, float *buf, size_t n) {
  nccl_impl *im = c->impl;
  if (n == 0) return PS_OK;
  if (!buf) return PS_ERR_INVALID;
  NCCL_TRY(im->comm, ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, im->comm, im->stream));
  if (!im->stream) CUDA_TRY(cudaStreamSynchronize(NULL));
  return PS_OK;
}

static ps_status nccl_broadcast(ps_coll *c, void *buf, size_t bytes, int root) {
  nccl_impl *im = c->impl;
  if (root < 0 || root >= c->world) return PS_ERR_INVALID;
  if (bytes == 0) return PS_OK;
  if (!buf) return PS_ERR_INVALID;
  NCCL_TRY(im->comm, ncclBroadcast(buf, buf, bytes, ncclUint8, root, im->comm, im->stream));
  if (!im->stream) CUDA_TRY(cudaStreamSynchronize(NULL));
  return PS_OK;
}

static ps_status nccl_barrier(ps_coll *c) {
  nccl_impl *im = c->impl;
  CUDA_TRY(cudaSetDevice(im->device));
  NCCL_TRY(im->comm,
           ncclAllReduce(im->scratch, im->scratch, 1, ncclFloat32, ncclSum, im->comm, im->stream));
  CUDA_TRY(cudaStreamSynchronize(im->stream));
  return PS_OK;
}

static void nccl_destroy(ps_coll *c) {
  nccl_impl *im = c->impl;
  if (im) {
    if (cudaSetDevice(im->device) == cudaSuccess && im->stream)
      (void)cudaStreamSynchronize(im->stream);
    if (im->comm) {
      ncclResult_t r = ncclCommDestroy(im->comm);
      if (r != ncclSuccess) PS_WARN("ncclCommDestroy: %s", ncclGetErrorString(r));
    }
    if (im->scratch) (void)cudaFree(im->scratch);
    free(im);
  }
  free(c);
}

static const ps_coll_ops nccl_ops = {
    .allreduce_sum_f32 = nccl_allreduce,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .destroy = nccl_destroy,
};

/* Rank 0 makes and publishes the id; the others fetch it. */
static ps_status exchange_id(const ps_rendezvous *rdv, const char *prefix, int rank,
                             ncclUniqueId *id, ps_error *err) {
  char key[256];
  int kn = snprintf(key, sizeof key, "%s/nccl-id", prefix ? prefix : "");
  if (kn < 0 || (size_t)kn >= sizeof key) return ps_error_set(err, PS_ERR_INVALID, "nccl: prefix too long");
  if (rank == 0) {
    NCCL_TRY_E(err, NULL, ncclGetUniqueId(id));
    ps_status st = rdv->set(rdv->ctx, key, id, sizeof *id);
    if (st != PS_OK)
      return ps_error_set(err, st, "nccl: cannot publish the unique id under '%s': %s", key,
                          ps_status_str(st));
    return PS_OK;
  }
  void *val = NULL;
  size_t len = 0;
  ps_status st = rdv->get(rdv->ctx, key, &val, &len, NCCL_ID_TIMEOUT_MS);
  if (st != PS_OK) {
    free(val);
    return ps_error_set(err, st, "nccl: rank %d got no unique id under '%s': %s", rank, key,
                        ps_status_str(st));
  }
  if (len != sizeof *id) {
    free(val);
    return ps_error_set(err, PS_ERR_CORRUPT, "nccl: unique id under '%s' has %zu bytes, expected %zu",
                        key, len, sizeof *id);
  }
  memcpy(id, val, sizeof *id);
  free(val);
  return PS_OK;
}

static ps_status init_comm(nccl_impl *im, int rank, int world, const ncclUniqueId *id,
                           ps_error *err) {
  CUDA_TRY_E(err, cudaSetDevice(im->device));
  CUDA_TRY_E(err, cudaMalloc((void **)&im->scratch, sizeof(float)));
  CUDA_TRY_E(err, cudaMemset(im->scratch, 0, sizeof(float)));
  NCCL_TRY_E(err, NULL, ncclCommInitRank(&im->comm, world, *id, rank));
  return PS_OK;
}

ps_status ps_coll_create_nccl(const ps_rendezvous *rdv, const char *prefix, int rank, int world,
                              int device, void *cuda_stream, ps_coll **out, ps_error *err) {
  ps_status st = ps_coll_check_create(rdv, rank, world, out, err);
  if (st != PS_OK) return st;
  if (device < 0) return ps_error_set(err, PS_ERR_INVALID, "nccl: device %d", device);

  int ndev = 0;
  cudaError_t ce = cudaGetDeviceCount(&ndev);
  if (ce != cudaSuccess || ndev == 0) {
    const char *why = ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices";
    (void)cudaGetLastError(); /* clear the sticky "no device" error for later callers */
    return ps_error_set(err, PS_ERR_UNSUPPORTED, "nccl: no usable GPU (%s)", why);
  }
  if (device >= ndev)
    return ps_error_set(err, PS_ERR_INVALID, "nccl: device %d requested, %d present", device, ndev);

  nccl_impl *im = calloc(1, sizeof *im);
  ps_coll *c = im ? ps_coll_new(&nccl_ops, PS_COLL_NCCL, rank, world, im) : NULL;
  if (!c) {
    free(im);
    return ps_error_set(err, PS_ERR_NOMEM, "nccl: out of memory");
  }
  im->device = device;
  im->stream = (cudaStream_t)cuda_stream;

  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  st = exchange_id(rdv, prefix, rank, &id, err);
  if (st == PS_OK) st = init_comm(im, rank, world, &id, err);
  if (st != PS_OK) {
    nccl_destroy(c);
    return st;
  }
  PS_INFO("nccl: rank %d/%d on device %d ready", rank, world, device);
  *out = c;
  return PS_OK;
}

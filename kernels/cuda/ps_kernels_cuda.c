/* ps_kernels_cuda: the CUDA backend of ps_kernels.h (cuBLAS GEMMs + the .cu kernels of
 * ps_cuda_kernels.cu).
 *
 * Design decisions:
 * - One non-blocking stream per backend instance; every operation is enqueued on it, in call
 *   order, and returns without waiting. Only ps_kern_to_host and ps_kern_sync wait (the
 *   interface says so), and they are where asynchronous errors surface.
 * - No allocation and no synchronisation inside a step. Everything a step needs beyond the
 *   caller's buffers (cuBLAS workspace, reduction partials, the loss ticket counter, the
 *   device error flag) is allocated at creation. The one exception is growth: the reduction
 *   scratch and the pinned staging buffers grow the first time a larger size is seen (the
 *   first step), then stay.
 * - Host -> device copies go through one pinned staging ring: the host data is memcpy'd into
 *   the next free region and an asynchronous copy is enqueued, so ps_kern_to_device returns
 *   as soon as the caller may reuse its buffer (the interface's contract) while the GPU is
 *   still busy with earlier work; the PS client's next pull thus overlaps compute. Each
 *   region carries an event; a region is rewritten only after its copy finished. The ring
 *   (64 MiB at first) grows to twice the largest single copy seen; a step whose copies do
 *   not fit wraps and waits for the oldest copies, which bounds the host to ~1 step ahead.
 *   Memory from ps_kern_host_alloc (page-locked) skips the ring with ps_kern_to_device_pinned:
 *   ps-worker's pulled rows are uploaded by DMA with no host copy in the step.
 * - GEMMs are cublasSgemm with the row-major <-> column-major swap (C^T = op(B)^T op(A)^T), in
 *   plain FP32 unless TF32 is asked for (see ps_kernels_cuda.h). bf16 GEMMs (ps_kern_gemm
 *   with PS_KERN_BF16, sm_80+) round both operands into a bf16 buffer of the backend's (one
 *   kernel each, same orientation, compact) and call cublasGemmEx with CUDA_R_16BF inputs,
 *   an FP32 C and CUBLAS_COMPUTE_32F: tensor cores with FP32 accumulation.
 * - Every CUDA and cuBLAS call is checked (ps_cuda_check.h) and reported with file and line. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "ps_cuda_check.h"
#include "ps_cuda_kernels.h"
#include "ps_kernels.h"
#include "ps_kernels_cuda.h"
#include "ps_log.h"

#define RING_INIT_BYTES ((size_t)64 << 20)
#define RING_RECS 64 /* copies in flight through the ring */
#define RING_ALIGN 256
#define CUBLAS_WS_BYTES ((size_t)32 << 20)
#define SCRATCH_INIT_FLOATS ((size_t)1 << 17) /* 128 chunks x 1024 columns */
#define TIMING_EVENTS 8192                    /* 4096 bracketed GEMMs between reads */

/* A region of the staging ring still used by an enqueued copy. */
typedef struct ring_rec {
  size_t beg, end;
  cudaEvent_t done;
} ring_rec;

typedef struct staging_ring {
  unsigned char *base; /* pinned */
  size_t cap, head;
  ring_rec rec[RING_RECS]; /* FIFO: rec[(first + i) % RING_RECS], i < count */
  int first, count;
} staging_ring;

typedef struct cuda_ctx {
  int device;
  cudaStream_t stream;
  cublasHandle_t blas;
  void *blas_ws;
  float *scratch; /* reduction partials (bias gradients, loss) */
  size_t scratch_floats;
  uint16_t *bf16;   /* the bf16 GEMM's rounded operands, grown on demand */
  size_t bf16_elems;
  unsigned int *bce_counter; /* device, zero between launches */
  int *err_dev;              /* device error flag (PS_CU_ERR_*) */
  int *err_host;             /* pinned copy of it, read at sync points */
  staging_ring ring;
  bool timing;
  cudaEvent_t ev[TIMING_EVENTS];
  int nev;
  long lost_timings; /* GEMMs not bracketed because the event pool was full */
} cuda_ctx;

static const ps_kern_i cuda_iface;

static cuda_ctx *ctx_of(ps_kern *k) { return (cuda_ctx *)k->ctx; }

/* Make the backend's device current in the calling thread (a PS-client or prefetch thread
 * may be the one calling to_device); cheap when it already is. */
#define ENTER(c) PS_CUDA_TRY(cudaSetDevice((c)->device))

/* Host copies into and out of the staging ring. A batch of the Kaggle shape at batch 65536
 * stages ~120 MB per step; one core copies ~10 GB/s, so large copies are split over up to 8
 * OpenMP threads (the GPU machine has 16 cores) to keep the host ahead of the GPU. */
#define PAR_COPY_MIN ((size_t)4 << 20)
#define PAR_COPY_CHUNK ((size_t)1 << 20)

static void host_copy(void *dst, const void *src, size_t bytes) {
  if (bytes < PAR_COPY_MIN) {
    memcpy(dst, src, bytes);
    return;
  }
  long chunks = (long)((bytes + PAR_COPY_CHUNK - 1) / PAR_COPY_CHUNK);
  int nt = omp_get_max_threads();
  nt = nt > 8 ? 8 : (nt < 1 ? 1 : nt);
#pragma omp parallel for schedule(static) num_threads(nt)
  for (long i = 0; i < chunks; i++) {
    size_t off = (size_t)i * PAR_COPY_CHUNK;
    size_t n = bytes - off < PAR_COPY_CHUNK ? bytes - off : PAR_COPY_CHUNK;
    memcpy((char *)dst + off, (const char *)src + off, n);
  }
}

/* ---- scratch and staging ----------------------------------------------------------------- */

/* Device buffer *buf of *have elements of `size` bytes grown to at least `want` (twice the
 * old size when that is more). The old buffer may still be read by enqueued kernels: wait
 * before freeing it. Happens only when a shape larger than any before is first seen. */
static ps_status dev_reserve(cuda_ctx *c, void **buf, size_t *have, size_t want, size_t size) {
  if (want <= *have) return PS_OK;
  if (*have * 2 > want) want = *have * 2;
  PS_CUDA_TRY(cudaStreamSynchronize(c->stream));
  PS_CUDA_TRY(cudaFree(*buf));
  *buf = NULL;
  *have = 0;
  PS_CUDA_TRY(cudaMalloc(buf, want * size));
  *have = want;
  PS_DEBUG("cuda: a work buffer grown to %zu elements of %zu bytes", want, size);
  return PS_OK;
}
/* The reduction scratch, at least `floats`; the bf16 GEMM's operand buffer, `elems`. */
static ps_status scratch_reserve(cuda_ctx *c, size_t floats) {
  return dev_reserve(c, (void **)&c->scratch, &c->scratch_floats, floats, sizeof(float));
}
static ps_status bf16_reserve(cuda_ctx *c, size_t elems) {
  return dev_reserve(c, (void **)&c->bf16, &c->bf16_elems, elems, sizeof(uint16_t));
}

static ps_status ring_pop_oldest(staging_ring *r) {
  PS_CUDA_TRY(cudaEventSynchronize(r->rec[r->first].done));
  r->first = (r->first + 1) % RING_RECS;
  r->count--;
  return PS_OK;
}

/* After a stream synchronisation every copy is done: the whole ring is free. */
static void ring_reset(staging_ring *r) {
  r->first = r->count = 0;
  r->head = 0;
}

/* Reserves `bytes` of the ring for one copy: *out is free for writing. Call ring_commit
 * after enqueueing the copy that reads or writes it. */
static ps_status ring_take(cuda_ctx *c, size_t bytes, void **out) {
  staging_ring *r = &c->ring;
  if (bytes > r->cap) { /* grow: only when a copy larger than any before appears */
    size_t want = 2 * bytes > RING_INIT_BYTES ? 2 * bytes : RING_INIT_BYTES;
    PS_CUDA_TRY(cudaStreamSynchronize(c->stream));
    ring_reset(r);
    PS_CUDA_TRY(cudaFreeHost(r->base));
    r->base = NULL;
    r->cap = 0;
    PS_CUDA_TRY(cudaHostAlloc((void **)&r->base, want, cudaHostAllocDefault));
    r->cap = want;
    PS_DEBUG("cuda: staging ring grown to %zu bytes", want);
  }
  size_t beg = r->head + bytes <= r->cap ? r->head : 0, end = beg + bytes;
  for (;;) {
    bool clash = r->count == RING_RECS;
    for (int i = 0; i < r->count && !clash; i++) {
      const ring_rec *q = &r->rec[(r->first + i) % RING_RECS];
      clash = q->beg < end && beg < q->end;
    }
    if (!clash) break;
    ps_status st = ring_pop_oldest(r); /* FIFO: the oldest copy finishes first */
    if (st != PS_OK) return st;
  }
  *out = r->base + beg;
  r->head = (end + RING_ALIGN - 1) / RING_ALIGN * RING_ALIGN;
  ring_rec *q = &r->rec[(r->first + r->count) % RING_RECS];
  q->beg = beg;
  q->end = end;
  return PS_OK;
}

static ps_status ring_commit(cuda_ctx *c) {
  staging_ring *r = &c->ring;
  PS_CUDA_TRY(cudaEventRecord(r->rec[(r->first + r->count) % RING_RECS].done, c->stream));
  r->count++;
  return PS_OK;
}

/* Reads and clears the device error flag; call only right after a stream synchronisation. */
static ps_status check_err_flag(cuda_ctx *c) {
  PS_CUDA_TRY(
      cudaMemcpyAsync(c->err_host, c->err_dev, sizeof(int), cudaMemcpyDeviceToHost, c->stream));
  PS_CUDA_TRY(cudaStreamSynchronize(c->stream));
  if (*c->err_host == 0) return PS_OK;
  int flags = *c->err_host;
  *c->err_host = 0;
  PS_CUDA_TRY(cudaMemsetAsync(c->err_dev, 0, sizeof(int), c->stream));
  if (flags & PS_CU_ERR_INDEX)
    PS_ERROR("cuda: a pooling call got out-of-range offsets or row indices (entries skipped)");
  return PS_ERR_INVALID;
}

/* ---- memory ------------------------------------------------------------------------------ */

static ps_status cu_alloc(ps_kern *k, size_t bytes, void **out) {
  cuda_ctx *c = ctx_of(k);
  ENTER(c);
  PS_CUDA_TRY(cudaMalloc(out, bytes)); /* 256-byte aligned */
  return PS_OK;
}

static void cu_free(ps_kern *k, void *ptr) {
  cuda_ctx *c = ctx_of(k);
  PS_CUDA_WARN(cudaSetDevice(c->device));
  PS_CUDA_WARN(cudaFree(ptr)); /* waits for work that may use ptr */
}

/* Page-locked host memory: cu_to_host copies straight into it (is_pinned), with no staging. */
static ps_status cu_host_alloc(ps_kern *k, size_t bytes, void **out) {
  cuda_ctx *c = ctx_of(k);
  ENTER(c);
  PS_CUDA_TRY(cudaHostAlloc(out, bytes, cudaHostAllocDefault));
  return PS_OK;
}

static void cu_host_free(ps_kern *k, void *ptr) {
  cuda_ctx *c = ctx_of(k);
  PS_CUDA_WARN(cudaSetDevice(c->device));
  PS_CUDA_WARN(cudaFreeHost(ptr)); /* synchronises the device: only at teardown or growth */
}

static ps_status cu_memset0(ps_kern *k, void *dst, size_t bytes) {
  cuda_ctx *c = ctx_of(k);
  ENTER(c);
  PS_CUDA_TRY(cudaMemsetAsync(dst, 0, bytes, c->stream));
  return PS_OK;
}

static ps_status cu_to_device(ps_kern *k, void *dst, const void *src, size_t bytes) {
  cuda_ctx *c = ctx_of(k);
  ENTER(c);
  void *stage = NULL;
  ps_status st = ring_take(c, bytes, &stage);
  if (st != PS_OK) return st;
  host_copy(stage, src, bytes);
  PS_CUDA_TRY(cudaMemcpyAsync(dst, stage, bytes, cudaMemcpyHostToDevice, c->stream));
  return ring_commit(c);
}

static bool is_pinned(const void *p) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeHost;
}

/* Straight from page-locked memory (the caller keeps it unchanged until the next to_host or
 * sync); memory that is not page-locked goes through the ring as cu_to_device. */
static ps_status cu_to_device_pinned(ps_kern *k, void *dst, const void *src, size_t bytes) {
  if (!is_pinned(src)) return cu_to_device(k, dst, src, bytes);
  cuda_ctx *c = ctx_of(k);
  ENTER(c);
  PS_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
  return PS_OK;
}

static ps_status cu_to_host(ps_kern *k, void *dst, const void *src, size_t bytes) {
  cuda_ctx *c = ctx_of(k);
  ENTER(c);
  if (is_pinned(dst)) {
    PS_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    ps_status st = check_err_flag(c); /* synchronises the stream */
    ring_reset(&c->ring);
    return st;
  }
  void *stage = NULL;
  ps_status st = ring_take(c, bytes, &stage);
  if (st != PS_OK) return st;
  PS_CUDA_TRY(cudaMemcpyAsync(stage, src, bytes, cudaMemcpyDeviceToHost, c->stream));
  st = check_err_flag(c); /* synchronises the stream: every staged copy is done */
  ring_reset(&c->ring);
  host_copy(dst, stage, bytes);
  return st;
}

static ps_status cu_copy(ps_kern *k, void *dst, const void *src, size_t bytes) {
  cuda_ctx *c = ctx_of(k);
  ENTER(c);
  PS_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
  return PS_OK;
}

static ps_status cu_sync(ps_kern *k) {
  cuda_ctx *c = ctx_of(k);
  ENTER(c);
  PS_CUDA_TRY(cudaGetLastError());
  ps_status st = check_err_flag(c); /* synchronises the stream */
  ring_reset(&c->ring);
  return st;
}

/* ---- compute ----------------------------------------------------------------------------- */

/* A kernel launch returns a cudaError_t like any runtime call. */
#define LAUNCH(call) PS_CUDA_TRY(call)

/* The whole body of a wrapper whose only work is one kernel launch: on k's device, `call`
 * (which names the context as c, for c->stream and c->err_dev) is launched and checked. */
#define ONLY_LAUNCH(k, call) \
  do {                       \
    cuda_ctx *c = ctx_of(k); \
    ENTER(c);                \
    LAUNCH(call);            \
    return PS_OK;            \
  } while (0)

static ps_status cu_sgemm(ps_kern *k, bool ta, bool tb, int m, int n, int kk, float alpha,
                          const float *a, int lda, const float *b, int ldb, float beta, float *cm,
                          int ldc) {
  cuda_ctx *c = ctx_of(k);
  ENTER(c);
  bool timed = c->timing && c->nev + 2 <= TIMING_EVENTS;
  if (c->timing && !timed) c->lost_timings++;
  if (timed) PS_CUDA_TRY(cudaEventRecord(c->ev[c->nev], c->stream));
  /* Row-major C[m,n] is column-major C^T[n,m]; C^T = op(B)^T op(A)^T, and a row-major
   * matrix read column-major is already its transpose, so the flags carry over as they are. */
  PS_CUBLAS_TRY(cublasSgemm(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                            n, m, kk, &alpha, b, ldb, a, lda, &beta, cm, ldc));
  if (timed) {
    PS_CUDA_TRY(cudaEventRecord(c->ev[c->nev + 1], c->stream));
    c->nev += 2;
  }
  return PS_OK;
}

/* sgemm's contract with both operands rounded to bf16 first (ps_kern_gemm). */
static ps_status cu_gemm_bf16(ps_kern *k, bool ta, bool tb, int m, int n, int kk, float alpha,
                              const float *a, int lda, const float *b, int ldb, float beta,
                              float *cm, int ldc) {
  cuda_ctx *c = ctx_of(k);
  ENTER(c);
  int ar = ta ? kk : m, ac = ta ? m : kk, br = tb ? n : kk, bc = tb ? kk : n;
  size_t an = (size_t)ar * ac, aoff = (an + 127) & ~(size_t)127; /* b16 256-byte aligned */
  ps_status st = bf16_reserve(c, aoff + (size_t)br * bc + 1);
  if (st != PS_OK) return st;
  uint16_t *a16 = c->bf16, *b16 = c->bf16 + aoff;
  if (ar > 0 && ac > 0) LAUNCH(ps_cu_to_bf16(c->stream, ar, ac, a, lda, a16));
  if (br > 0 && bc > 0) LAUNCH(ps_cu_to_bf16(c->stream, br, bc, b, ldb, b16));
  bool timed = c->timing && c->nev + 2 <= TIMING_EVENTS;
  if (c->timing && !timed) c->lost_timings++;
  if (timed) PS_CUDA_TRY(cudaEventRecord(c->ev[c->nev], c->stream));
  /* the row-major swap of cu_sgemm, over the compact copies (leading dimension = width) */
  PS_CUBLAS_TRY(cublasGemmEx(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                             n, m, kk, &alpha, b16, CUDA_R_16BF, bc > 1 ? bc : 1, a16,
                             CUDA_R_16BF, ac > 1 ? ac : 1, &beta, cm, CUDA_R_32F, ldc,
                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (timed) {
    PS_CUDA_TRY(cudaEventRecord(c->ev[c->nev + 1], c->stream));
    c->nev += 2;
  }
  return PS_OK;
}

static ps_status cu_bias_act_fwd(ps_kern *k, ps_kern_act act, int m, int n, const float *x,
                                 const float *bias, float *y) {
  ONLY_LAUNCH(k, ps_cu_bias_act_fwd(c->stream, (int)act, m, n, x, bias, y));
}

static ps_status cu_bias_act_bwd(ps_kern *k, ps_kern_act act, int m, int n, const float *y,
                                 const float *dy, float *dx, float *dbias) {
  cuda_ctx *c = ctx_of(k);
  ENTER(c);
  ps_status st = scratch_reserve(c, ps_cu_colsum_ws_floats(m, n));
  if (st != PS_OK) return st;
  LAUNCH(ps_cu_bias_act_bwd(c->stream, (int)act, m, n, y, dy, dx, dbias, c->scratch));
  return PS_OK;
}

static ps_status cu_interact_fwd(ps_kern *k, int batch, int num_sparse, int dim,
                                 const float *bottom, const float *emb, float *out) {
  ONLY_LAUNCH(k, ps_cu_interact_fwd(c->stream, batch, num_sparse, dim, bottom, emb, out));
}

static ps_status cu_interact_bwd(ps_kern *k, int batch, int num_sparse, int dim,
                                 const float *bottom, const float *emb, const float *dout,
                                 float *dbottom, float *demb) {
  ONLY_LAUNCH(k, ps_cu_interact_bwd(c->stream, batch, num_sparse, dim, bottom, emb, dout, dbottom,
                                    demb));
}

/* Strided copies are cudaMemcpy2DAsync's (pitches in bytes). */
static ps_status cu_copy2d(ps_kern *k, int rows, int cols, const float *src, int lds, float *dst,
                           int ldd) {
  cuda_ctx *c = ctx_of(k);
  ENTER(c);
  PS_CUDA_TRY(cudaMemcpy2DAsync(dst, (size_t)ldd * sizeof(float), src, (size_t)lds * sizeof(float),
                                (size_t)cols * sizeof(float), (size_t)rows,
                                cudaMemcpyDeviceToDevice, c->stream));
  return PS_OK;
}

static ps_status cu_cross_fwd(ps_kern *k, int m, int n, const float *x0, const float *z,
                              const float *bias, const float *xl, float *zb, float *y) {
  ONLY_LAUNCH(k, ps_cu_cross_fwd(c->stream, m, n, x0, z, bias, xl, zb, y));
}

static ps_status cu_cross_bwd(ps_kern *k, int m, int n, const float *x0, const float *zb,
                              const float *dy, float resid, float *dz, float *dx0) {
  ONLY_LAUNCH(k, ps_cu_cross_bwd(c->stream, m, n, x0, zb, dy, resid, dz, dx0));
}

static ps_status cu_pool_fwd(ps_kern *k, ps_kern_pool mode, int nbags, int dim, int nrows,
                             const float *rows, int nnz, const int32_t *idx, const int32_t *offsets,
                             float *out) {
  ONLY_LAUNCH(k, ps_cu_pool_fwd(c->stream, mode.mean, mode.period, nbags, dim, nrows, rows, nnz,
                                idx, offsets, out, c->err_dev));
}

static ps_status cu_pool_bwd(ps_kern *k, ps_kern_pool mode, int nbags, int dim, int nrows, int nnz,
                             const int32_t *idx, const int32_t *offsets, const float *dout,
                             float *drows) {
  ONLY_LAUNCH(k, ps_cu_pool_bwd(c->stream, mode.mean, mode.period, nbags, dim, nrows, nnz, idx,
                                offsets, dout, drows, c->err_dev));
}

static ps_status cu_bce_fwd(ps_kern *k, int n, const float *logits, const float *labels,
                            float *probs, float *loss) {
  cuda_ctx *c = ctx_of(k);
  ENTER(c);
  if (!labels && !probs) return PS_OK;
  ps_status st = scratch_reserve(c, ps_cu_bce_ws_floats(n));
  if (st != PS_OK) return st;
  LAUNCH(ps_cu_bce_fwd(c->stream, n, logits, labels, probs, loss, c->scratch, c->bce_counter));
  return PS_OK;
}

static ps_status cu_bce_bwd(ps_kern *k, int n, const float *logits, const float *labels,
                            float scale, float *dlogits) {
  cuda_ctx *c = ctx_of(k);
  ENTER(c);
  if (!logits || !labels || !dlogits) return PS_ERR_INVALID;
  LAUNCH(ps_cu_bce_bwd(c->stream, n, logits, labels, scale, dlogits));
  return PS_OK;
}

static ps_status cu_scale(ps_kern *k, size_t n, float alpha, float *x) {
  ONLY_LAUNCH(k, ps_cu_scale(c->stream, n, alpha, x));
}

static ps_status cu_sgd(ps_kern *k, size_t n, float *w, const float *g, float lr, float wd) {
  ONLY_LAUNCH(k, ps_cu_sgd(c->stream, n, w, g, lr, wd));
}

static ps_status cu_adagrad(ps_kern *k, size_t n, float *w, const float *g, float *sum, float clr,
                            float eps, float wd) {
  ONLY_LAUNCH(k, ps_cu_adagrad(c->stream, n, w, g, sum, clr, eps, wd));
}

static ps_status cu_adam(ps_kern *k, size_t n, float *w, const float *g, float *m, float *v,
                         float lr, float beta1, float beta2, float eps, float wd, int64_t step) {
  cuda_ctx *c = ctx_of(k);
  ENTER(c);
  /* Bias corrections in double on the host, as torch computes them in Python floats. */
  double bc1 = 1.0 - pow((double)beta1, (double)step);
  double bc2 = 1.0 - pow((double)beta2, (double)step);
  float step_size = (float)((double)lr / bc1);
  float bc2_sqrt = (float)sqrt(bc2);
  LAUNCH(ps_cu_adam(c->stream, n, w, g, m, v, beta1, beta2, eps, wd, step_size, bc2_sqrt));
  return PS_OK;
}

/* ---- lifetime ---------------------------------------------------------------------------- */

static void ctx_free(cuda_ctx *c) {
  if (!c) return;
  if (cudaSetDevice(c->device) == cudaSuccess) {
    if (c->stream) PS_CUDA_WARN(cudaStreamSynchronize(c->stream));
    if (c->ring.base) PS_CUDA_WARN(cudaFreeHost(c->ring.base));
    for (int i = 0; i < RING_RECS; i++)
      if (c->ring.rec[i].done) PS_CUDA_WARN(cudaEventDestroy(c->ring.rec[i].done));
    for (int i = 0; i < TIMING_EVENTS; i++)
      if (c->ev[i]) PS_CUDA_WARN(cudaEventDestroy(c->ev[i]));
    if (c->blas) {
      cublasStatus_t s = cublasDestroy(c->blas);
      if (s != CUBLAS_STATUS_SUCCESS) (void)ps_cublas_fail(s, "cublasDestroy", __FILE__, __LINE__);
    }
    if (c->blas_ws) PS_CUDA_WARN(cudaFree(c->blas_ws));
    if (c->scratch) PS_CUDA_WARN(cudaFree(c->scratch));
    if (c->bf16) PS_CUDA_WARN(cudaFree(c->bf16));
    if (c->bce_counter) PS_CUDA_WARN(cudaFree(c->bce_counter));
    if (c->err_dev) PS_CUDA_WARN(cudaFree(c->err_dev));
    if (c->err_host) PS_CUDA_WARN(cudaFreeHost(c->err_host));
    if (c->stream) PS_CUDA_WARN(cudaStreamDestroy(c->stream));
  }
  free(c);
}

static void cu_destroy(ps_kern *k) {
  ctx_free(ctx_of(k));
  free(k);
}

static ps_status set_math(cuda_ctx *c, bool tf32) {
  PS_CUBLAS_TRY(
      cublasSetMathMode(c->blas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  return PS_OK;
}

static ps_status ctx_init(cuda_ctx *c) {
  ENTER(c);
  PS_CUDA_TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  PS_CUBLAS_TRY(cublasCreate(&c->blas));
  PS_CUBLAS_TRY(cublasSetStream(c->blas, c->stream));
  /* An explicit workspace: cuBLAS then never allocates inside a step. */
  PS_CUDA_TRY(cudaMalloc(&c->blas_ws, CUBLAS_WS_BYTES));
  PS_CUBLAS_TRY(cublasSetWorkspace(c->blas, c->blas_ws, CUBLAS_WS_BYTES));
  PS_CUBLAS_TRY(cublasSetPointerMode(c->blas, CUBLAS_POINTER_MODE_HOST));
  const char *tf = getenv("EMBER_CUDA_TF32");
  ps_status st = set_math(c, tf && strcmp(tf, "1") == 0);
  if (st != PS_OK) return st;
  PS_CUDA_TRY(cudaMalloc((void **)&c->scratch, SCRATCH_INIT_FLOATS * sizeof(float)));
  c->scratch_floats = SCRATCH_INIT_FLOATS;
  PS_CUDA_TRY(cudaMalloc((void **)&c->bce_counter, sizeof(unsigned int)));
  PS_CUDA_TRY(cudaMemset(c->bce_counter, 0, sizeof(unsigned int)));
  PS_CUDA_TRY(cudaMalloc((void **)&c->err_dev, sizeof(int)));
  PS_CUDA_TRY(cudaMemset(c->err_dev, 0, sizeof(int)));
  PS_CUDA_TRY(cudaHostAlloc((void **)&c->err_host, sizeof(int), cudaHostAllocDefault));
  *c->err_host = 0;
  for (int i = 0; i < RING_RECS; i++)
    PS_CUDA_TRY(cudaEventCreateWithFlags(&c->ring.rec[i].done, cudaEventDisableTiming));
  PS_CUDA_TRY(cudaHostAlloc((void **)&c->ring.base, RING_INIT_BYTES, cudaHostAllocDefault));
  c->ring.cap = RING_INIT_BYTES;
  PS_CUDA_TRY(cudaDeviceSynchronize());
  return PS_OK;
}

ps_status ps_kern_cuda_create(int device, ps_kern **out, ps_error *err) {
  if (!out) return ps_error_set(err, PS_ERR_INVALID, "%s", ps_status_str(PS_ERR_INVALID));
  *out = NULL;
  int ndev = ps_cuda_device_count();
  if (ndev == 0)
    return ps_error_set(err, PS_ERR_UNSUPPORTED, "not available (CUDA not built, or no GPU)");
  if (device < 0 || device >= ndev)
    return ps_error_set(err, PS_ERR_INVALID, "cuda: device %d requested, %d present", device, ndev);
  cuda_ctx *c = calloc(1, sizeof *c);
  ps_kern *k = calloc(1, sizeof *k);
  if (!c || !k) {
    free(c);
    free(k);
    return ps_error_set(err, PS_ERR_NOMEM, "cuda: out of memory");
  }
  c->device = device;
  ps_status st = ctx_init(c);
  if (st != PS_OK) {
    ctx_free(c);
    free(k);
    return ps_error_set(err, st, "cuda: device %d: %s", device, ps_status_str(st));
  }
  k->iface = &cuda_iface;
  k->ctx = c;
  k->name = "cuda";
  k->host_memory = false;
  struct cudaDeviceProp prop;
  k->bf16 = cudaGetDeviceProperties(&prop, device) == cudaSuccess && prop.major >= 8;
  char desc[160];
  if (ps_cuda_device_describe(device, desc, sizeof desc) == PS_OK)
    PS_INFO("cuda: backend on %s", desc);
  *out = k;
  return PS_OK;
}

/* ---- CUDA-only extras (ps_kernels_cuda.h) ---------------------------------------------- */

/* True if k is a backend made by ps_kern_cuda_create. */
static bool kern_is_cuda(const ps_kern *k) { return k && k->iface == &cuda_iface; }

void *ps_kern_cuda_stream(ps_kern *k) {
  return kern_is_cuda(k) ? (void *)ctx_of(k)->stream : NULL;
}

int ps_kern_cuda_device(const ps_kern *k) {
  return kern_is_cuda(k) ? ((const cuda_ctx *)k->ctx)->device : -1;
}

ps_status ps_kern_cuda_set_tf32(ps_kern *k, bool on) {
  if (!kern_is_cuda(k)) return PS_ERR_INVALID;
  return set_math(ctx_of(k), on);
}

ps_status ps_kern_cuda_gemm_timing(ps_kern *k, bool on) {
  if (!kern_is_cuda(k)) return PS_ERR_INVALID;
  cuda_ctx *c = ctx_of(k);
  ENTER(c);
  if (on && !c->ev[0]) {
    for (int i = 0; i < TIMING_EVENTS; i++) PS_CUDA_TRY(cudaEventCreate(&c->ev[i]));
  }
  c->timing = on;
  c->nev = 0;
  c->lost_timings = 0;
  return PS_OK;
}

ps_status ps_kern_cuda_gemm_time(ps_kern *k, double *ms, long *calls) {
  if (!kern_is_cuda(k) || !ms) return PS_ERR_INVALID;
  cuda_ctx *c = ctx_of(k);
  ENTER(c);
  PS_CUDA_TRY(cudaStreamSynchronize(c->stream));
  double total = 0.0;
  for (int i = 0; i + 1 < c->nev; i += 2) {
    float t = 0.0f;
    PS_CUDA_TRY(cudaEventElapsedTime(&t, c->ev[i], c->ev[i + 1]));
    total += t;
  }
  if (c->lost_timings) PS_WARN("cuda: %ld GEMMs were not timed (event pool full)", c->lost_timings);
  *ms = total;
  if (calls) *calls = c->nev / 2;
  c->nev = 0;
  c->lost_timings = 0;
  return PS_OK;
}

static const ps_kern_i cuda_iface = {
    .alloc = cu_alloc,
    .free = cu_free,
    .memset0 = cu_memset0,
    .to_device = cu_to_device,
    .to_host = cu_to_host,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .to_device_pinned = cu_to_device_pinned,
    .copy = cu_copy,
    .sync = cu_sync,
    .stream = ps_kern_cuda_stream,
    .destroy = cu_destroy,
    .sgemm = cu_sgemm,
    .gemm_bf16 = cu_gemm_bf16,
    .bias_act_fwd = cu_bias_act_fwd,
    .bias_act_bwd = cu_bias_act_bwd,
    .interact_fwd = cu_interact_fwd,
    .interact_bwd = cu_interact_bwd,
    .pool_fwd = cu_pool_fwd,
    .pool_bwd = cu_pool_bwd,
    .bce_fwd = cu_bce_fwd,
    .bce_bwd = cu_bce_bwd,
    .scale = cu_scale,
    .sgd = cu_sgd,
    .adagrad = cu_adagrad,
    .adam = cu_adam,
    .copy2d = cu_copy2d,
    .cross_fwd = cu_cross_fwd,
    .cross_bwd = cu_cross_bwd,
};

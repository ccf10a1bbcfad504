/* fake_cudart: the CUDA runtime and cuBLAS calls of kernels/cuda, over host memory, so the
 * CUDA backend's host code (staging ring, error flag, GEMM mapping, timing, lifetime) runs
 * and is tested on machines without a GPU (see ps_cuda_emu.h).
 *
 * Not a simulator of timing or asynchrony: every call completes before it returns. What it
 * does check is what host code gets wrong: every "device" and pinned allocation is tracked,
 * and copies, memsets and GEMM operands must lie inside one allocation of the right kind
 * (a device pointer where cudaMemcpyHostToDevice writes, and so on); cublasSgemm validates
 * its leading dimensions as cuBLAS does. A violation prints a message and returns an error. */
#include <cblas.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cublas_v2.h"
#include "ps_cuda_emu.h"

cudaError_t ps_emu_last_error = cudaSuccess;
const void *ps_emu_last_h2d_src;

typedef struct alloc {
  unsigned char *p;
  size_t n;
  int pinned;
  struct alloc *next;
} alloc;

static alloc *allocs;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static const alloc *find(const void *p, size_t n) {
  const unsigned char *q = p;
  for (const alloc *a = allocs; a; a = a->next)
    if (q >= a->p && q <= a->p + a->n && n <= (size_t)(a->p + a->n - q)) return a;
  return NULL;
}

/* 1 if [p, p+n) lies inside a tracked device (pinned=0) or pinned (1) allocation. */
static int inside(const void *p, size_t n, int pinned) {
  pthread_mutex_lock(&mu);
  const alloc *a = find(p, n);
  int ok = a && a->pinned == pinned;
  pthread_mutex_unlock(&mu);
  return ok;
}

static cudaError_t bad(const char *what, const void *p, size_t n) {
  fprintf(stderr, "fake_cudart: %s: %p + %zu bytes is not inside a suitable allocation\n", what, p,
          n);
  return cudaErrorInvalidValue;
}

static cudaError_t track(void **p, size_t n, int pinned) {
  alloc *a = malloc(sizeof *a);
  void *mem = aligned_alloc(256, (n + 255) / 256 * 256 + 256);
  if (!a || !mem) {
    free(a);
    free(mem);
    return cudaErrorMemoryAllocation;
  }
  memset(mem, 0xA5, n); /* uninitialised, visibly */
  *a = (alloc){mem, n, pinned, NULL};
  pthread_mutex_lock(&mu);
  a->next = allocs;
  allocs = a;
  pthread_mutex_unlock(&mu);
  *p = mem;
  return cudaSuccess;
}

static cudaError_t untrack(void *p, int pinned) {
  if (!p) return cudaSuccess;
  pthread_mutex_lock(&mu);
  for (alloc **pp = &allocs; *pp; pp = &(*pp)->next)
    if ((*pp)->p == p && (*pp)->pinned == pinned) {
      alloc *a = *pp;
      *pp = a->next;
      pthread_mutex_unlock(&mu);
      free(a->p);
      free(a);
      return cudaSuccess;
    }
  pthread_mutex_unlock(&mu);
  return bad(pinned ? "cudaFreeHost" : "cudaFree", p, 0);
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = ps_emu_last_error;
  ps_emu_last_error = cudaSuccess;
  return e;
}
const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaErrorUnknown";
  }
}
const char *cudaGetErrorString(cudaError_t e) { return cudaGetErrorName(e); }
cudaError_t cudaGetDeviceCount(int *n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
  if (d != 0) return cudaErrorInvalidValue;
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "emulated GPU (CPU threads)");
  p->major = 9, p->multiProcessorCount = 1, p->totalGlobalMem = (size_t)1 << 30;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *v) {
  *v = 13000;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int *v) {
  *v = 13000;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaMalloc(void **p, size_t n) { return track(p, n, 0); }
cudaError_t cudaFree(void *p) { return untrack(p, 0); }
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags) {
  (void)flags;
  return track(p, n, 1);
}
cudaError_t cudaFreeHost(void *p) { return untrack(p, 1); }
cudaError_t cudaMemset(void *p, int v, size_t n) { return cudaMemsetAsync(p, v, n, NULL); }
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
  (void)s;
  if (!inside(p, n, 0)) return bad("cudaMemsetAsync", p, n);
  memset(p, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k,
                            cudaStream_t s) {
  (void)s;
  int dst_dev = k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice;
  int src_dev = k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice;
  if (dst_dev && !inside(dst, n, 0)) return bad("cudaMemcpyAsync dst", dst, n);
  if (src_dev && !inside(src, n, 0)) return bad("cudaMemcpyAsync src", src, n);
  if (!dst_dev && inside(dst, n, 0))
    return bad("cudaMemcpyAsync dst (device, kind says host)", dst, n);
  if (!src_dev && inside(src, n, 0))
    return bad("cudaMemcpyAsync src (device, kind says host)", src, n);
  if (k == cudaMemcpyHostToDevice) ps_emu_last_h2d_src = src; /* staged, or straight */
  memmove(dst, src, n);
  return cudaSuccess;
}
/* Row by row through cudaMemcpyAsync, so every row is checked against its allocation. */
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind k, cudaStream_t s) {
  if (width > dpitch || width > spitch) return bad("cudaMemcpy2DAsync pitch", dst, width);
  for (size_t r = 0; r < height; r++) {
    cudaError_t e = cudaMemcpyAsync((char *)dst + r * dpitch, (const char *)src + r * spitch,
                                    width, k, s);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
  memset(a, 0, sizeof *a);
  pthread_mutex_lock(&mu);
  const alloc *x = find(p, 0);
  a->type =
      !x ? cudaMemoryTypeUnregistered : (x->pinned ? cudaMemoryTypeHost : cudaMemoryTypeDevice);
  pthread_mutex_unlock(&mu);
  return cudaSuccess;
}
static int stream_token, event_token;
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
  (void)flags;
  *s = &stream_token;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  return s == &stream_token ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  return s == &stream_token || !s ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
  (void)flags;
  *e = &event_token;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) { return e ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  return e && (s == &stream_token || !s) ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return e ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  if (!a || !b) return cudaErrorInvalidValue;
  *ms = 0.001f; /* a marker, not a measurement */
  return cudaSuccess;
}

/* ---- cuBLAS ---------------------------------------------------------------------------- */

struct ps_fake_cublas {
  int live;
};

cublasStatus_t cublasCreate(cublasHandle_t *h) {
  *h = calloc(1, sizeof **h);
  if (!*h) return CUBLAS_STATUS_ALLOC_FAILED;
  (*h)->live = 1;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
  free(h);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  return h && s == &stream_token ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes) {
  return h && inside(ws, bytes, 0) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasSetPointerMode(cublasHandle_t h, cublasPointerMode_t m) {
  return h && m == CUBLAS_POINTER_MODE_HOST ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
  (void)m;
  return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

static int imax(int a, int b) { return a > b ? a : b; }

/* Column-major C[m, n] = alpha op(A)[m, k] op(B)[k, n] + beta C, with cuBLAS's checks. */
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float *alpha, const float *a, int lda,
                           const float *b, int ldb, const float *beta, float *c, int ldc) {
  if (!h || m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
  int arows = ta == CUBLAS_OP_N ? m : k, acols = ta == CUBLAS_OP_N ? k : m;
  int brows = tb == CUBLAS_OP_N ? k : n, bcols = tb == CUBLAS_OP_N ? n : k;
  if (lda < imax(1, arows) || ldb < imax(1, brows) || ldc < imax(1, m)) {
    fprintf(stderr,
            "fake cublasSgemm: bad leading dimension (m %d n %d k %d lda %d ldb %d ldc %d)\n", m, n,
            k, lda, ldb, ldc);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  /* operands must be device memory, spanning (cols - 1) * ld + rows floats */
  size_t asz = acols ? ((size_t)(acols - 1) * lda + arows) * sizeof(float) : 0;
  size_t bsz = bcols ? ((size_t)(bcols - 1) * ldb + brows) * sizeof(float) : 0;
  size_t csz = ((size_t)(n - 1) * ldc + m) * sizeof(float);
  if ((asz && !inside(a, asz, 0)) || (bsz && !inside(b, bsz, 0)) || !inside(c, csz, 0)) {
    fprintf(stderr, "fake cublasSgemm: an operand is outside its device allocation\n");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (k == 0) { /* C = beta C; C not read when beta == 0 */
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++)
        c[(size_t)j * ldc + i] = *beta == 0.0f ? 0.0f : *beta * c[(size_t)j * ldc + i];
    return CUBLAS_STATUS_SUCCESS;
  }
  cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
              tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, *alpha, a, lda, b, ldb, *beta,
              c, ldc);
  return CUBLAS_STATUS_SUCCESS;
}

/* cublasGemmEx for bf16 operands: each widened to FP32 exactly (a bf16 value is the top half
 * of a float's bits), then cublasSgemm's checks and OpenBLAS: products of bf16 values are
 * exact in FP32 and summed in FP32, what cuBLAS's CUBLAS_COMPUTE_32F computes up to order. */
static float *bf16_widen(const void *src, int rows, int cols, int ld) {
  size_t n = cols ? (size_t)(cols - 1) * ld + rows : 0;
  if (n && !inside(src, n * sizeof(uint16_t), 0)) return NULL;
  float *f = NULL; /* "device" memory, as cublasSgemm's operands must be */
  if (cudaMalloc((void **)&f, (n ? n : 1) * sizeof(float)) != cudaSuccess) return NULL;
  const uint16_t *h = src;
  for (size_t i = 0; i < n; i++) {
    uint32_t u = (uint32_t)h[i] << 16;
    memcpy(&f[i], &u, sizeof u);
  }
  return f;
}
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *a, cudaDataType at,
                            int lda, const void *b, cudaDataType bt, int ldb, const void *beta,
                            void *c, cudaDataType ct, int ldc, cublasComputeType_t comp,
                            cublasGemmAlgo_t algo) {
  if (!h || at != CUDA_R_16BF || bt != CUDA_R_16BF || ct != CUDA_R_32F ||
      comp != CUBLAS_COMPUTE_32F || algo != CUBLAS_GEMM_DEFAULT || m < 0 || n < 0 || k < 0 ||
      lda < imax(1, ta == CUBLAS_OP_N ? m : k) || ldb < imax(1, tb == CUBLAS_OP_N ? k : n)) {
    fprintf(stderr, "fake cublasGemmEx: unsupported types or bad arguments\n");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  float *af = bf16_widen(a, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda);
  float *bf = bf16_widen(b, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb);
  cublasStatus_t st = CUBLAS_STATUS_INVALID_VALUE;
  if (af && bf)
    st = cublasSgemm(h, ta, tb, m, n, k, alpha, af, lda, bf, ldb, beta, c, ldc);
  else
    fprintf(stderr, "fake cublasGemmEx: an operand is outside its device allocation\n");
  if (af) cudaFree(af);
  if (bf) cudaFree(bf);
  return st;
}

/* ps_cuda_check: error checks for every CUDA runtime and cuBLAS call in kernels/cuda/.
 *
 * A failing call is logged once with the expression, file and line, and turned into a
 * ps_status that the calling function returns; nothing aborts. Asynchronous kernel faults
 * surface at the next checked call, which the ps_kernels.h contract allows ("an error raised
 * by an asynchronous operation may be reported by a later call"). */
#ifndef PS_CUDA_CHECK_H
#define PS_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "ps_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Log a failure and map it to a status (NOMEM for allocation failures, UNSUPPORTED for "no
 * device / driver too old", INTERNAL otherwise). */
ps_status ps_cuda_fail(cudaError_t e, const char *expr, const char *file, int line);
ps_status ps_cublas_fail(cublasStatus_t s, const char *expr, const char *file, int line);

#ifdef __cplusplus
}
#endif

#define PS_CUDA_TRY(call)                                                            \
  do {                                                                               \
    cudaError_t ps_e_ = (call);                                                      \
    if (ps_e_ != cudaSuccess) return ps_cuda_fail(ps_e_, #call, __FILE__, __LINE__); \
  } while (0)

#define PS_CUBLAS_TRY(call)                                                                      \
  do {                                                                                           \
    cublasStatus_t ps_s_ = (call);                                                               \
    if (ps_s_ != CUBLAS_STATUS_SUCCESS) return ps_cublas_fail(ps_s_, #call, __FILE__, __LINE__); \
  } while (0)

/* For cleanup paths that cannot return: log and go on. */
#define PS_CUDA_WARN(call)                                                          \
  do {                                                                              \
    cudaError_t ps_e_ = (call);                                                     \
    if (ps_e_ != cudaSuccess) (void)ps_cuda_fail(ps_e_, #call, __FILE__, __LINE__); \
  } while (0)

#endif

/* ps_cuda_util: device query and the error reporting behind ps_cuda_check.h.
 *
 * "No GPU" is an ordinary outcome here, not an error: on a machine without a driver (or with
 * one too old for this CUDA), cudaGetDeviceCount fails, and that counts as zero devices so
 * that tests can exit 77 (SKIPPED) and ps-worker can say "--device cuda: no GPU". */
#include <stdio.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "ps_cuda_check.h"
#include "ps_kernels_cuda.h"
#include "ps_log.h"

ps_status ps_cuda_fail(cudaError_t e, const char *expr, const char *file, int line) {
  ps_log_write(PS_LOG_ERROR, file, line, "%s: CUDA error %d %s (%s)", expr, (int)e,
               cudaGetErrorName(e), cudaGetErrorString(e));
  switch (e) {
    case cudaErrorMemoryAllocation: return PS_ERR_NOMEM;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver: return PS_ERR_UNSUPPORTED;
    case cudaErrorInvalidValue: return PS_ERR_INVALID;
    default: return PS_ERR_INTERNAL;
  }
}

static const char *cublas_status_str(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

ps_status ps_cublas_fail(cublasStatus_t s, const char *expr, const char *file, int line) {
  ps_log_write(PS_LOG_ERROR, file, line, "%s: cuBLAS error %d (%s)", expr, (int)s,
               cublas_status_str(s));
  switch (s) {
    case CUBLAS_STATUS_ALLOC_FAILED: return PS_ERR_NOMEM;
    case CUBLAS_STATUS_INVALID_VALUE: return PS_ERR_INVALID;
    case CUBLAS_STATUS_ARCH_MISMATCH:
    case CUBLAS_STATUS_NOT_SUPPORTED: return PS_ERR_UNSUPPORTED;
    default: return PS_ERR_INTERNAL;
  }
}

int ps_cuda_device_count(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    PS_DEBUG("cuda: cudaGetDeviceCount: %s (treated as no GPU)", cudaGetErrorString(e));
    (void)cudaGetLastError(); /* do not leave the error for the next checked call */
    return 0;
  }
  return n;
}

ps_status ps_cuda_device_describe(int device, char *buf, size_t len) {
  if (!buf || len == 0) return PS_ERR_INVALID;
  buf[0] = '\0';
  if (device < 0 || device >= ps_cuda_device_count()) return PS_ERR_UNSUPPORTED;
  struct cudaDeviceProp p;
  PS_CUDA_TRY(cudaGetDeviceProperties(&p, device));
  int drv = 0, rt = 0;
  (void)cudaDriverGetVersion(&drv);
  (void)cudaRuntimeGetVersion(&rt);
  snprintf(buf, len, "%s (sm_%d%d, %d SMs, %.0f GiB, driver %d.%d, runtime %d.%d)", p.name, p.major,
           p.minor, p.multiProcessorCount, (double)p.totalGlobalMem / (1u << 30), drv / 1000,
           (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10);
  return PS_OK;
}

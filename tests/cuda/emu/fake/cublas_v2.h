/* Stand-in for cuBLAS (cublas_v2.h) in the emulated build: the calls kernels/cuda makes, with
 * cuBLAS's column-major semantics and argument checks, computed by OpenBLAS (fake_cudart.c). */
#ifndef PS_FAKE_CUBLAS_V2_H
#define PS_FAKE_CUBLAS_V2_H
#include "ps_cuda_emu.h"
#ifdef __cplusplus
extern "C" {
#endif
typedef struct ps_fake_cublas *cublasHandle_t;
typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TF32_TENSOR_OP_MATH = 3 } cublasMath_t;
typedef enum { CUBLAS_POINTER_MODE_HOST = 0, CUBLAS_POINTER_MODE_DEVICE = 1 } cublasPointerMode_t;
/* library_types.h / cublas_api.h values, for the bf16 GEMM */
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes);
cublasStatus_t cublasSetPointerMode(cublasHandle_t h, cublasPointerMode_t m);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m);
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float *alpha, const float *a, int lda,
                           const float *b, int ldb, const float *beta, float *c, int ldc);
/* Only what the backend's bf16 GEMM asks: A, B CUDA_R_16BF, C CUDA_R_32F, COMPUTE_32F. */
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *a, cudaDataType at,
                            int lda, const void *b, cudaDataType bt, int ldb, const void *beta,
                            void *c, cudaDataType ct, int ldc, cublasComputeType_t comp,
                            cublasGemmAlgo_t algo);
#ifdef __cplusplus
}
#endif
#endif

/* ps_kernels_cuda: what the CUDA backend offers beyond the portable ps_kernels.h interface.
 *
 * The backend itself is created with ps_kern_cuda_create (declared in ps_kernels.h). This
 * header adds the device query that tests and binaries use to decide "no GPU -> skip", the
 * backend's CUDA stream (so NCCL allreduces run in order with the model's kernels), and an
 * opt-in GEMM timer for the benchmarks (CUDA events around each cuBLAS call: no host
 * synchronisation inside a step; the sums are read afterwards).
 *
 * Numerics: cuBLAS runs in plain FP32 (CUBLAS_DEFAULT_MATH, no TF32) so results match the
 * CPU backend to ~1e-6 relative; EMBER_CUDA_TF32=1 in the environment, or
 * ps_kern_cuda_set_tf32, switches to TF32 tensor cores for speed. */
#ifndef PS_KERNELS_CUDA_H
#define PS_KERNELS_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "ps_kernels.h"
#include "ps_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 where there is no GPU or the driver is missing or too old
 * (cudaGetDeviceCount failing counts as "no GPU"). Never fails. */
int ps_cuda_device_count(void);
static inline bool ps_cuda_available(void) { return ps_cuda_device_count() > 0; }
/* "NVIDIA H200 (sm_90, 139 GiB)" into buf; PS_ERR_UNSUPPORTED without that device. */
ps_status ps_cuda_device_describe(int device, char *buf, size_t len);

/* The backend's stream as a cudaStream_t (void * here so C callers need no CUDA headers);
 * NULL if k is not a CUDA backend. */
void *ps_kern_cuda_stream(ps_kern *k);
int ps_kern_cuda_device(const ps_kern *k);

/* TF32 tensor-core GEMMs on or off (off by default). */
ps_status ps_kern_cuda_set_tf32(ps_kern *k, bool on);

/* GEMM timing: while on, each sgemm is bracketed by two CUDA events (up to 4096 calls between
 * reads). ps_kern_cuda_gemm_time waits for the stream, returns the summed GPU time of the
 * bracketed GEMMs in milliseconds and their count, and starts a new count. */
ps_status ps_kern_cuda_gemm_timing(ps_kern *k, bool on);
ps_status ps_kern_cuda_gemm_time(ps_kern *k, double *ms, long *calls);

#ifdef __cplusplus
}
#endif

#endif

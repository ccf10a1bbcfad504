/* ps_cuda_emu: just enough of CUDA to run kernels/cuda/ps_cuda_kernels.cu on CPU threads.
 *
 * Why: the CUDA tests need a GPU, and the machines that build Ember often have none. With
 * this header the very same kernel source is compiled by g++ and executed — every block in
 * turn, each block's threads as real threads that meet at a barrier for __syncthreads() — so
 * the kernels' index arithmetic, shared-memory staging, reductions and atomics are checked
 * against the CPU backend on every build (and under ASan/UBSan). It says nothing about
 * speed, warps, memory coalescing or the real memory model; the GPU tests cover those.
 *
 * Reached through emu/fake/, whose cuda_runtime.h, cuda_runtime_api.h and cublas_v2.h stand in
 * for CUDA's (the emulated targets put that folder first on the include path), so kernels/cuda
 * includes only the real header names and nothing from tests/. It defines the launch macros
 * PS_CU_LAUNCH, PS_CU_LAUNCH_SYNC and PS_CU_DYN_SMEM before ps_cuda_kernels.cu would. The
 * declarations part is C (so ps_cuda_kernels.h can be included from C tests); the emulation
 * is C++17. */
#ifndef PS_CUDA_EMU_H
#define PS_CUDA_EMU_H

#include <stddef.h>
#include <string.h>

/* ---- C: the runtime API subset used by kernels/cuda (implemented in fake_cudart.c, over
 * host memory: "device" allocations are host allocations the fake tracks, so copies are
 * range-checked against them; everything is synchronous, events are markers). */
#ifdef __cplusplus
extern "C" {
#endif
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorLaunchFailure = 719
} cudaError_t;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3
};
enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2
};
struct cudaPointerAttributes {
  enum cudaMemoryType type;
  int device;
  void *devicePointer, *hostPointer;
};
struct cudaDeviceProp {
  char name[256];
  int major, minor, multiProcessorCount;
  size_t totalGlobalMem;
};
#define cudaStreamNonBlocking 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00

extern cudaError_t ps_emu_last_error; /* set by a refused launch, read by cudaGetLastError */
extern const void *ps_emu_last_h2d_src; /* the host source of the last host-to-device copy */
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorName(cudaError_t e);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d);
cudaError_t cudaDriverGetVersion(int *v);
cudaError_t cudaRuntimeGetVersion(int *v);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemset(void *p, int v, size_t n);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k,
                            cudaStream_t s);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind k, cudaStream_t s);
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
#ifdef __cplusplus
}
#endif

#ifdef __cplusplus
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <functional>
#include <thread>
#include <vector>

struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
  unsigned x, y, z;
};
struct alignas(16) float4 {
  float x, y, z, w;
};

inline thread_local uint3 threadIdx, blockIdx;
inline thread_local dim3 blockDim, gridDim;
inline pthread_barrier_t *ps_emu_barrier;
inline std::vector<unsigned char> ps_emu_smem;

#define __global__
#define __device__
#define __forceinline__ inline
/* One block runs at a time, so function-static storage is the block's shared memory. */
#define __shared__ static
#define PS_CU_DYN_SMEM(type, name) type *name = (type *)ps_emu_smem.data()

inline void __syncthreads() {
  if (!ps_emu_barrier) { /* a kernel launched with PS_CU_LAUNCH must not use barriers */
    fprintf(stderr,
            "ps_cuda_emu: __syncthreads() in a kernel launched without PS_CU_LAUNCH_SYNC\n");
    abort();
  }
  pthread_barrier_wait(ps_emu_barrier);
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

inline float atomicAdd(float *p, float v) {
  float old, want;
  __atomic_load(p, &old, __ATOMIC_RELAXED);
  do {
    want = old + v;
  } while (!__atomic_compare_exchange(p, &old, &want, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
  return old;
}
inline int atomicOr(int *p, int v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicInc(unsigned *p, unsigned val) {
  unsigned old = __atomic_load_n(p, __ATOMIC_RELAXED), want;
  do {
    want = old >= val ? 0u : old + 1u;
  } while (!__atomic_compare_exchange(p, &old, &want, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
  return old;
}

/* Runs fn for every thread of every block, synchronously. */
inline void ps_emu_launch(dim3 grid, dim3 block, size_t smem, const std::function<void()> &fn,
                          bool threaded) {
  const unsigned nt = block.x * block.y * block.z;
  if (nt == 0 || nt > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 || smem > 49152) {
    ps_emu_last_error = cudaErrorLaunchFailure; /* what a GPU would refuse */
    return;
  }
  ps_emu_smem.assign(smem ? smem : 1, 0xA5); /* garbage, as uninitialised shared memory is */
  if (!threaded) { /* no barriers: the block's threads may run one after another */
    ps_emu_barrier = nullptr;
    blockDim = block;
    gridDim = grid;
    for (unsigned bz = 0; bz < grid.z; bz++)
      for (unsigned by = 0; by < grid.y; by++)
        for (unsigned bx = 0; bx < grid.x; bx++)
          for (unsigned t = 0; t < nt; t++) {
            blockIdx = uint3{bx, by, bz};
            threadIdx = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
            fn();
          }
    return;
  }
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, nullptr, nt);
  ps_emu_barrier = &bar;
  std::vector<std::thread> th;
  th.reserve(nt);
  for (unsigned t = 0; t < nt; t++)
    th.emplace_back([&, t] {
      threadIdx = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
      blockDim = block;
      gridDim = grid;
      for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
          for (unsigned bx = 0; bx < grid.x; bx++) {
            blockIdx = uint3{bx, by, bz};
            fn();
            pthread_barrier_wait(&bar); /* the block ends before the next one reuses smem */
          }
    });
  for (auto &x : th) x.join();
  pthread_barrier_destroy(&bar);
}

/* Kernels without __syncthreads run their threads one after another (fast); kernels with
 * barriers get one OS thread per GPU thread of a block. */
#define PS_CU_LAUNCH(k, grid, block, smem, stream, ...) \
  ((void)(stream), ps_emu_launch(                       \
                       dim3(grid), dim3(block), (smem), [&] { k(__VA_ARGS__); }, false))
#define PS_CU_LAUNCH_SYNC(k, grid, block, smem, stream, ...) \
  ((void)(stream), ps_emu_launch(                            \
                       dim3(grid), dim3(block), (smem), [&] { k(__VA_ARGS__); }, true))

#endif /* __cplusplus */
#endif

// The CUDA kernels of kernels/cuda/ps_cuda_kernels.cu compiled for the CPU through
// emu/fake/cuda_runtime.h, which brings ps_cuda_emu.h (see there), so that
// tests/cuda/test_cuda_emu.c can run them without a GPU.
#define PS_CU_EMULATE 1
#include "ps_cuda_kernels.cu"

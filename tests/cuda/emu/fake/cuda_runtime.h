/* Stand-in for CUDA's cuda_runtime.h (what kernels/cuda/ps_cuda_kernels.cu includes) in the emulated build (see ../ps_cuda_emu.h). */
#include "ps_cuda_emu.h"

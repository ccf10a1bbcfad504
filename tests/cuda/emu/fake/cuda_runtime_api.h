/* Stand-in for CUDA's cuda_runtime_api.h in the emulated build (see ../ps_cuda_emu.h). */
#include "ps_cuda_emu.h"

# kernels/kernels.cmake: the backend interface and the CPU backend (included by
# kernels/CMakeLists.txt, which adds cuda/ after this file).
#   ember_kernels_iface  header-only: ps_kernels.h (the vtable + inline wrappers)
#   ember_kernels_cpu    the CPU backend: OpenBLAS (OpenMP build) + OpenMP loops
#   ember_kernels        ps_kern_create(name): every backend that was built
# A CUDA backend is the target ember_kernels_cuda (kernels/cuda/CMakeLists.txt), which links
# ember_kernels_iface and defines ps_kern_cuda_create. Targets may be referenced before they
# are defined, so ember_kernels links it here.
add_library(ember_kernels_iface INTERFACE)
target_include_directories(ember_kernels_iface INTERFACE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(ember_kernels_iface INTERFACE ember_common)

ember_library(ember_kernels_cpu
  SOURCES cpu/ps_kern_cpu.c cpu/ps_kern_cpu_interact.c cpu/ps_kern_cpu_pool.c
          cpu/ps_kern_cpu_cross.c cpu/ps_kern_cpu_bf16.c
  LIBS ember_kernels_iface ember_blas ember_dnnl)
if(NOT EMBER_SANITIZE)
  # The hot loops are written to vectorize; -ffast-math is NOT used so results stay IEEE
  # (the reference tests compare with PyTorch at 1e-5).
  target_compile_options(ember_kernels_cpu PRIVATE $<$<CONFIG:Release>:-O3 -march=native>)
endif()

ember_library(ember_kernels SOURCES cpu/ps_kern_registry.c LIBS ember_kernels_iface ember_kernels_cpu)
if(EMBER_HAVE_CUDA AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/cuda/CMakeLists.txt)
  target_link_libraries(ember_kernels PUBLIC ember_kernels_cuda)
  target_compile_definitions(ember_kernels PRIVATE EMBER_KERN_HAVE_CUDA=1)
endif()

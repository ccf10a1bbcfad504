# Finds Ember's dependencies and defines helper functions used by every module.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq)
pkg_check_modules(PROTOBUFC REQUIRED IMPORTED_TARGET libprotobuf-c)
pkg_check_modules(JEMALLOC REQUIRED IMPORTED_TARGET jemalloc)
pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)
pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)
pkg_check_modules(ZLIB REQUIRED IMPORTED_TARGET zlib)
pkg_check_modules(MHD IMPORTED_TARGET libmicrohttpd)

# RocksDB ships no pkg-config file on Debian 12; find the C API header and library.
find_path(ROCKSDB_INCLUDE_DIR rocksdb/c.h REQUIRED)
find_library(ROCKSDB_LIBRARY rocksdb REQUIRED)
add_library(ember_rocksdb INTERFACE)
target_include_directories(ember_rocksdb INTERFACE ${ROCKSDB_INCLUDE_DIR})
target_link_libraries(ember_rocksdb INTERFACE ${ROCKSDB_LIBRARY})

# xxHash: Debian's libxxhash-dev has the header and a shared library.
find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
find_library(XXHASH_LIBRARY xxhash REQUIRED)
add_library(ember_xxhash INTERFACE)
target_include_directories(ember_xxhash INTERFACE ${XXHASH_INCLUDE_DIR})
target_link_libraries(ember_xxhash INTERFACE ${XXHASH_LIBRARY})

# OpenBLAS: prefer the OpenMP build (libopenblas-openmp-dev), whose threads cooperate with
# our own OpenMP loops instead of fighting them.
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-openmp openblas REQUIRED
          PATHS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/x86_64-linux-gnu)
find_library(OPENBLAS_LIBRARY NAMES openblas REQUIRED
             PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp NO_DEFAULT_PATH)
find_package(OpenMP REQUIRED COMPONENTS C CXX)
add_library(ember_blas INTERFACE)
target_include_directories(ember_blas INTERFACE ${OPENBLAS_INCLUDE_DIR})
target_link_libraries(ember_blas INTERFACE ${OPENBLAS_LIBRARY} OpenMP::OpenMP_C m)

# oneDNN (libdnnl-dev): the CPU backend's bf16 GEMM (AMX / AVX512_BF16 matmul); OpenBLAS
# 0.3.21 has no sbgemm. Its OpenMP runtime shares libgomp's pool with OpenBLAS and ours.
find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.h REQUIRED)
find_library(DNNL_LIBRARY dnnl REQUIRED)
add_library(ember_dnnl INTERFACE)
target_include_directories(ember_dnnl INTERFACE ${DNNL_INCLUDE_DIR})
target_link_libraries(ember_dnnl INTERFACE ${DNNL_LIBRARY})

# Gloo (CPU allreduce), C++ only: reached through worker/collectives_gloo.cc.
find_path(GLOO_INCLUDE_DIR gloo/allreduce.h)
find_library(GLOO_LIBRARY gloo)

# CUDA: AUTO enables it where nvcc is found.
set(EMBER_HAVE_CUDA OFF)
if(NOT EMBER_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
    set(EMBER_HAVE_CUDA ON)
  elseif(EMBER_CUDA STREQUAL "ON")
    message(FATAL_ERROR "EMBER_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "Ember: CUDA backend ${EMBER_HAVE_CUDA}")

# ember_add_subdirectories(): adds every subfolder of the current folder that has a
# CMakeLists.txt, in name order (tests/ and bench/: one subfolder per area, none listed by hand).
macro(ember_add_subdirectories)
  file(GLOB _ember_subdirs LIST_DIRECTORIES true RELATIVE ${CMAKE_CURRENT_SOURCE_DIR}
    ${CMAKE_CURRENT_SOURCE_DIR}/*)
  list(SORT _ember_subdirs)
  foreach(_ember_d ${_ember_subdirs})
    if(IS_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/${_ember_d} AND
       EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${_ember_d}/CMakeLists.txt)
      add_subdirectory(${_ember_d})
    endif()
  endforeach()
endmacro()

# ember_library(NAME SOURCES ... LIBS ...): a module library with our warning flags.
function(ember_library name)
  cmake_parse_arguments(A "" "" "SOURCES;LIBS" ${ARGN})
  add_library(${name} STATIC ${A_SOURCES})
  target_include_directories(${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:C,CXX>:${EMBER_WARN}>)
  target_link_libraries(${name} PUBLIC ${A_LIBS})
endfunction()

# ember_binary(NAME SOURCES ... LIBS ...): a thin main over module libraries.
function(ember_binary name)
  cmake_parse_arguments(A "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:C,CXX>:${EMBER_WARN}>)
  target_link_libraries(${name} PRIVATE ${A_LIBS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
endfunction()

# _ember_test_properties(NAME TIMEOUT s DEFAULT_TIMEOUT s ENVIRONMENT ... [LABELS ...]): what
# every Ember test gets, cmocka or script: exit code 77 means SKIPPED (no GPU, missing data
# file, ...), a timeout (DEFAULT_TIMEOUT where TIMEOUT is empty), the environment its runner
# reads, and its labels.
function(_ember_test_properties name)
  cmake_parse_arguments(A "" "TIMEOUT;DEFAULT_TIMEOUT" "ENVIRONMENT;LABELS" ${ARGN})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT ${A_DEFAULT_TIMEOUT})
  endif()
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT ${A_TIMEOUT}
    ENVIRONMENT "${A_ENVIRONMENT}")
  if(A_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${A_LABELS}")
  endif()
  list(FIND EMBER_TEST_COSTS ${name} _i) # tests/CMakeLists.txt: the long ones start first
  if(_i GREATER -1)
    math(EXPR _i "${_i} + 1")
    list(GET EMBER_TEST_COSTS ${_i} _cost)
    set_tests_properties(${name} PROPERTIES COST ${_cost})
  endif()
endfunction()

# ember_test(NAME SOURCES ... LIBS ... [LABELS ...] [TIMEOUT s]): a cmocka test under ctest.
# Exit code 77 means SKIPPED (no GPU, missing data file, ...).
function(ember_test name)
  cmake_parse_arguments(A "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:C,CXX>:${EMBER_WARN}>)
  target_link_libraries(${name} PRIVATE ${A_LIBS} PkgConfig::CMOCKA)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/common) # ps_test_main.h
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${name} COMMAND ${name})
  _ember_test_properties(${name} TIMEOUT "${A_TIMEOUT}" DEFAULT_TIMEOUT 120 LABELS ${A_LABELS}
    ENVIRONMENT "EMBER_BIN=${CMAKE_BINARY_DIR}/bin;EMBER_SRC=${CMAKE_SOURCE_DIR};CMOCKA_MESSAGE_OUTPUT=STDOUT")
endfunction()

# ember_script_test(NAME COMMAND ... [LABELS ...] [TIMEOUT s]): a test run by a script
# (Python references, multi-process integration tests). Exit 77 = SKIPPED.
function(ember_script_test name)
  cmake_parse_arguments(A "" "TIMEOUT" "COMMAND;LABELS" ${ARGN})
  add_test(NAME ${name} COMMAND ${A_COMMAND})
  _ember_test_properties(${name} TIMEOUT "${A_TIMEOUT}" DEFAULT_TIMEOUT 300 LABELS ${A_LABELS}
    ENVIRONMENT "EMBER_BIN=${CMAKE_BINARY_DIR}/bin;EMBER_TESTS=${CMAKE_BINARY_DIR}/tests;EMBER_SRC=${CMAKE_SOURCE_DIR};EMBER_SHARED=${CMAKE_SOURCE_DIR}/../shared")
endfunction()

# ember_script_tests([LABELS ...] [TIMEOUT s] [ASAN_PRELOAD] TESTS NAME SCRIPT [NAME SCRIPT ...]):
# an ember_script_test per NAME SCRIPT pair, for the tests of one folder that share their labels
# and timeout (a list, not a block of calls a test). SCRIPT is in this folder: *.sh runs under
# bash, anything else under /usr/bin/python3. ASAN_PRELOAD: the test drives the instrumented
# libember.so from the uninstrumented /usr/bin/python3, which under EMBER_SANITIZE must load the
# ASan runtime first (Python's own allocations are not ours to leak-check).
function(ember_script_tests)
  cmake_parse_arguments(A "ASAN_PRELOAD" "TIMEOUT" "LABELS;TESTS" ${ARGN})
  if(A_ASAN_PRELOAD AND EMBER_SANITIZE)
    execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
      OUTPUT_VARIABLE _asan OUTPUT_STRIP_TRAILING_WHITESPACE)
  endif()
  set(_rest ${A_TESTS})
  while(_rest)
    list(POP_FRONT _rest _name _script)
    set(_run /usr/bin/python3)
    if(_script MATCHES "[.]sh$")
      set(_run bash)
    endif()
    ember_script_test(${_name} COMMAND ${_run} ${CMAKE_CURRENT_SOURCE_DIR}/${_script}
      LABELS ${A_LABELS} TIMEOUT "${A_TIMEOUT}")
    if(A_ASAN_PRELOAD AND EMBER_SANITIZE)
      set_property(TEST ${_name} APPEND PROPERTY ENVIRONMENT
        "LD_PRELOAD=${_asan}" "ASAN_OPTIONS=detect_leaks=0" "EMBER_ASAN_PRELOAD=1")
    endif()
  endwhile()
endfunction()

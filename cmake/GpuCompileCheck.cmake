# The GPU code compiled where no GPU build is made: with a CPU LibTorch (CI,
# Debian's libtorch-dev) and a CUDA toolkit, every .cu file and every CUDA C++
# translation unit (the #ifdef'd kernels' callers, the cuDNN path, the cuda
# device plugin, the worker's CUDA parts, the GPU tests and benchmarks) is
# compiled as it is in a CUDA build, into object libraries that nothing links
# or runs. A mistake in GPU code then fails the build here, not first on a GPU
# machine. What cannot be compiled this way is listed in docs/development.md.
#
# Debian's LibTorch ships the c10/ATen CUDA headers but not the header CMake
# generates for c10's CUDA library (c10/cuda/impl/cuda_cmake_macros.h); the
# build writes it, as PyTorch's build does for a shared c10_cuda.
set(TRAINBENCH_GPU_COMPILE_CHECK "AUTO" CACHE STRING
    "Compile the GPU code with a CPU LibTorch (nothing linked or run): AUTO (where a CUDA toolkit is found), ON, OFF")
set_property(CACHE TRAINBENCH_GPU_COMPILE_CHECK PROPERTY STRINGS AUTO ON OFF)

if(TRAINBENCH_GPU_COMPILE_CHECK STREQUAL "OFF" OR NOT TRAINBENCH_TORCH_CUDA_VERSION STREQUAL "none" OR TRAINBENCH_WORKER_BUILD)
  return()  # a CUDA build compiles (and links) all of it anyway
endif()
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
include(CheckLanguage)
check_language(CUDA)
find_package(CUDAToolkit QUIET)
if(NOT CMAKE_CUDA_COMPILER OR NOT CUDAToolkit_FOUND)
  if(TRAINBENCH_GPU_COMPILE_CHECK STREQUAL "ON")
    message(FATAL_ERROR "TRAINBENCH_GPU_COMPILE_CHECK=ON but no CUDA toolkit (nvcc) was found")
  endif()
  message(STATUS "trainbench: no CUDA toolkit here: the GPU code is not compiled")
  return()
endif()
enable_language(CUDA)
find_path(TRAINBENCH_GPU_CHECK_CUDNN_INCLUDE cudnn_graph.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
if(NOT TRAINBENCH_GPU_CHECK_CUDNN_INCLUDE)
  message(FATAL_ERROR "trainbench: the GPU compile check needs cuDNN 9's headers (cudnn_graph.h) beside the "
                      "CUDA toolkit's; or configure with -DTRAINBENCH_GPU_COMPILE_CHECK=OFF")
endif()
set(_generated ${CMAKE_CURRENT_BINARY_DIR}/gpu-compile-check/include)
# (written through configure_file, which leaves an unchanged file alone: a
# new configure does not recompile every unit)
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/gpu-compile-check/cuda_cmake_macros.h.in
     "#pragma once\n// Written by trainbench's build (cmake/GpuCompileCheck.cmake), as PyTorch's build writes it.\n"
     "#define C10_CUDA_BUILD_SHARED_LIBS\n")
configure_file(${CMAKE_CURRENT_BINARY_DIR}/gpu-compile-check/cuda_cmake_macros.h.in
               ${_generated}/c10/cuda/impl/cuda_cmake_macros.h COPYONLY)

set(_src ${PROJECT_SOURCE_DIR})
# What the targets registered (trainbench_gpu_sources, cmake/GpuSources.cmake).
get_property(_kernels GLOBAL PROPERTY TRAINBENCH_GPU_KERNELS)
get_property(_units GLOBAL PROPERTY TRAINBENCH_GPU_UNITS)
# The definitions a CUDA build gives the units (each defined as 1); the scan
# below and the units' compilation read this one list.
set(_cuda_definitions TRAINBENCH_RESNET_KERNELS TRAINBENCH_CUDNN_CONV TRAINBENCH_SIMPLE_CNN_KERNELS
                      TRAINBENCH_WORKER_CUDA TRAINBENCH_GRAPH_FILL_KERNEL TRAINBENCH_MIXED_PRECISION_KERNELS
                      TRAINBENCH_DATASET_KERNEL)
list(JOIN _cuda_definitions "|" _cuda_guards)
# No GPU code escapes: every .cu file, and every C++ file with CUDA code (a
# CUDA build's definitions or CUDA headers), of the folders this build
# compiles must be registered beside its target.
set(_scanned host plugins)
if(TRAINBENCH_BUILD_TESTS)
  list(APPEND _scanned tests bench)
endif()
foreach(_dir ${_scanned})
  file(GLOB_RECURSE _found_cu ${_src}/${_dir}/*.cu)
  foreach(_file ${_found_cu})
    if(NOT _file IN_LIST _kernels)
      file(RELATIVE_PATH _rel ${_src} ${_file})
      message(FATAL_ERROR "trainbench: ${_rel} is GPU code no target registered: name it in trainbench_gpu_sources() "
                          "beside its target, so that the GPU compile check compiles it")
    endif()
  endforeach()
  file(GLOB_RECURSE _found_cc ${_src}/${_dir}/*.cc)
  if(NOT TRAINBENCH_BUILD_TESTS)  # the tests beside their code (host/worker/tests) register with their targets
    list(FILTER _found_cc EXCLUDE REGEX "/tests/")
  endif()
  foreach(_file ${_found_cc})
    file(STRINGS ${_file} _cuda_lines REGEX
         "^#[ ]*(if|ifdef|elif).*(${_cuda_guards}|TRAINBENCH_WITH_NCCL)|^#include <(c10/cuda|cuda_runtime|ATen/cuda|cudnn)")
    if(_cuda_lines AND NOT _file IN_LIST _units)
      file(RELATIVE_PATH _rel ${_src} ${_file})
      message(FATAL_ERROR "trainbench: ${_rel} has CUDA code but no target registered it: name it in "
                          "trainbench_gpu_sources(UNITS ...) beside its target, so that the GPU compile check compiles it")
    endif()
  endforeach()
endforeach()

# Every .cu file, as the CUDA build compiles them (sm_90, the H200's).
add_library(trainbench_gpu_check_kernels OBJECT ${_kernels})
set_target_properties(trainbench_gpu_check_kernels PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
                                                              CUDA_ARCHITECTURES 90 CUDA_VISIBILITY_PRESET hidden)
target_include_directories(trainbench_gpu_check_kernels PRIVATE ${_src}/sdk/include ${_src}/sdk/internal ${_src}/plugins/path_log
                                                                 ${_src}/host/worker)

# Every C++ translation unit with CUDA code, with the definitions a CUDA
# build gives it; the worker's data-parallel code with both of its backends
# where their headers are (NCCL's from the CUDA toolkit).
find_path(TRAINBENCH_GPU_CHECK_NCCL_INCLUDE nccl.h HINTS ${TRAINBENCH_NCCL_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
if(NOT TRAINBENCH_GPU_CHECK_NCCL_INCLUDE OR NOT TRAINBENCH_C10D_INCLUDE)
  if(TRAINBENCH_GPU_COMPILE_CHECK STREQUAL "ON")
    message(FATAL_ERROR "TRAINBENCH_GPU_COMPILE_CHECK=ON but NCCL's nccl.h or LibTorch's c10d headers were not found "
                        "(the data-parallel code's NCCL branch): install NCCL beside the CUDA toolkit")
  endif()
  message(STATUS "trainbench: no nccl.h or c10d headers: the GPU compile check leaves out the NCCL branch")
  list(REMOVE_ITEM _units ${_src}/host/worker/distributed.cc)
endif()
if(NOT TRAINBENCH_BUILD_TESTS)
  list(FILTER _units EXCLUDE REGEX "^${_src}/(tests|bench)/")
endif()
add_library(trainbench_gpu_check_units OBJECT ${_units})
target_compile_definitions(trainbench_gpu_check_units PRIVATE ${_cuda_definitions})
if(TRAINBENCH_GPU_CHECK_NCCL_INCLUDE AND TRAINBENCH_C10D_INCLUDE)
  target_compile_definitions(trainbench_gpu_check_units PRIVATE USE_C10D_NCCL=1 TRAINBENCH_WITH_NCCL=1)
  target_include_directories(trainbench_gpu_check_units PRIVATE ${TRAINBENCH_GPU_CHECK_NCCL_INCLUDE})
  if(TRAINBENCH_GLOO_INCLUDE)
    target_compile_definitions(trainbench_gpu_check_units PRIVATE USE_C10D_GLOO=1 TRAINBENCH_WITH_GLOO=1)
    target_include_directories(trainbench_gpu_check_units PRIVATE ${TRAINBENCH_GLOO_INCLUDE})
  endif()
endif()
target_include_directories(trainbench_gpu_check_units BEFORE PRIVATE ${_generated})
target_include_directories(trainbench_gpu_check_units PRIVATE
  ${_src}/plugins/path_log ${_src}/plugins/models/resnet ${_src}/plugins/models/resnet/cudnn
  ${_src}/plugins/models/simple_cnn ${_src}/host/worker
  ${TRAINBENCH_GPU_CHECK_CUDNN_INCLUDE})
target_link_libraries(trainbench_gpu_check_units PRIVATE trainbench::training trainbench::sdk CUDA::cudart
                      nlohmann_json::nlohmann_json)
if(TRAINBENCH_BUILD_TESTS)
  find_package(GTest REQUIRED)
  target_link_libraries(trainbench_gpu_check_units PRIVATE GTest::gtest trainbench_test_paths)
endif()
set_target_properties(trainbench_gpu_check_units PROPERTIES CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
# Nothing links these objects: no optimisation and no debug information
# (about half of each unit's time), the language and warnings as everywhere.
target_compile_options(trainbench_gpu_check_units PRIVATE -O0 -g0)
# LibTorch's and the CUDA headers most units include, parsed once for all of
# them (the units' flags differ from the rest of the build's: a header of
# their own; -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON goes without).
target_precompile_headers(trainbench_gpu_check_units PRIVATE <torch/torch.h> <c10/cuda/CUDAStream.h>
                          <c10/cuda/CUDAGuard.h> <ATen/cuda/CUDAGraph.h>)
if(TRAINBENCH_BUILD_TESTS)
  target_precompile_headers(trainbench_gpu_check_units PRIVATE <gtest/gtest.h>)
endif()
message(STATUS "trainbench: the GPU code is compiled (not linked or run) with nvcc ${CMAKE_CUDA_COMPILER_VERSION}: "
               "TRAINBENCH_GPU_COMPILE_CHECK")

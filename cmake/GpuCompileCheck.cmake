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
file(WRITE ${_generated}/c10/cuda/impl/cuda_cmake_macros.h
     "#pragma once\n// Written by trainbench's build (cmake/GpuCompileCheck.cmake), as PyTorch's build writes it.\n"
     "#define C10_CUDA_BUILD_SHARED_LIBS\n")

set(_src ${PROJECT_SOURCE_DIR})
# Every .cu file, as the CUDA build compiles them (sm_90, the H200's).
add_library(trainbench_gpu_check_kernels OBJECT
  ${_src}/host/worker/dataset_kernels.cu
  ${_src}/host/worker/graph_fill.cu
  ${_src}/host/worker/mixed_precision_kernels.cu
  ${_src}/plugins/models/simple_cnn/bias_relu_pool_kernels.cu
  ${_src}/plugins/models/resnet/batch_norm_act_kernels.cu
  ${_src}/plugins/models/resnet/classifier_kernels.cu
  ${_src}/plugins/models/resnet/max_pool_kernels.cu
  ${_src}/plugins/models/resnet/stem_kernels.cu
  ${_src}/plugins/models/resnet/whole_map_kernels.cu
  ${_src}/bench/graph_node_gaps.cu)
set_target_properties(trainbench_gpu_check_kernels PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
                                                              CUDA_ARCHITECTURES 90 CUDA_VISIBILITY_PRESET hidden)
target_include_directories(trainbench_gpu_check_kernels PRIVATE ${_src}/sdk/include ${_src}/plugins/path_log
                                                                 ${_src}/host/worker)

# Every C++ translation unit with CUDA code, with the definitions a CUDA
# build gives it.
set(_plugin_units
  ${_src}/plugins/models/resnet/cudnn/cudnn_conv.cc
  ${_src}/plugins/models/resnet/cudnn/cudnn_plans.cc
  ${_src}/plugins/models/resnet/cudnn/cudnn_tuner.cc
  ${_src}/plugins/models/resnet/side_stream.cc
  ${_src}/plugins/models/simple_cnn/bias_relu_pool.cc
  ${_src}/plugins/models/resnet/batch_norm_act.cc
  ${_src}/plugins/models/resnet/classifier.cc
  ${_src}/plugins/models/resnet/max_pool.cc
  ${_src}/plugins/models/resnet/resnet.cc
  ${_src}/plugins/models/resnet/stem.cc
  ${_src}/plugins/models/resnet/whole_map.cc
  ${_src}/plugins/devices/cuda/cuda_device.cc)
set(_worker_units
  ${_src}/host/worker/dataset.cc
  ${_src}/host/worker/kernel_trace.cc
  ${_src}/host/worker/mixed_precision.cc
  ${_src}/host/worker/optimizer.cc
  ${_src}/host/worker/step_timer.cc)
set(_test_units)
if(TRAINBENCH_BUILD_TESTS)
  foreach(_test bias_relu_pool batch_norm_act max_pool working_copies_cast whole_map_kernel classifier working_copies_sgd cudnn_conv
                graph_fill stem side_stream)
    list(APPEND _test_units ${_src}/tests/${_test}_test.cc)
  endforeach()
  list(APPEND _test_units ${_src}/bench/batch_norm_act_bench.cc ${_src}/bench/cudnn_fusion_bench.cc)
endif()
add_library(trainbench_gpu_check_units OBJECT ${_plugin_units} ${_worker_units} ${_test_units})
target_compile_definitions(trainbench_gpu_check_units PRIVATE
  TRAINBENCH_RESNET_KERNELS TRAINBENCH_CUDNN_CONV TRAINBENCH_SIMPLE_CNN_KERNELS TRAINBENCH_WORKER_CUDA=1
  TRAINBENCH_GRAPH_FILL_KERNEL=1 TRAINBENCH_MIXED_PRECISION_KERNELS=1 TRAINBENCH_DATASET_KERNEL=1)
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

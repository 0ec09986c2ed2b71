# The tests and fixtures that compile LibTorch code: the test plugins, the
# worker's and plugins' own tests, the GPU tests on CUDA builds. Left out of
# a host-only build (TRAINBENCH_WORKER_BUILD: the sanitizer build), whose
# tests use another build's.

# Plugins that must be rejected, each for its own reason.
function(trainbench_fixture name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEFINES;LIBRARIES" ${ARGN})
  add_library(${name} MODULE ${ARG_SOURCES})
  target_compile_definitions(${name} PRIVATE ${ARG_DEFINES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBRARIES})
  set_target_properties(${name} PROPERTIES PREFIX "" LIBRARY_OUTPUT_DIRECTORY ${FIXTURE_DIR})
endfunction()
set(_abi_libs trainbench::sdk_abi Boost::headers)
set(_torch_version_include ${TORCH_INCLUDE_DIRS})
trainbench_fixture(fixture_abi_major SOURCES fixtures/abi_variants.cc LIBRARIES ${_abi_libs}
                   DEFINES FIXTURE_ABI_MAJOR=2 FIXTURE_ABI_MINOR=0)
trainbench_fixture(fixture_abi_minor SOURCES fixtures/abi_variants.cc LIBRARIES ${_abi_libs}
                   DEFINES FIXTURE_ABI_MAJOR=1 FIXTURE_ABI_MINOR=99)
trainbench_fixture(fixture_fingerprint SOURCES fixtures/abi_variants.cc LIBRARIES ${_abi_libs}
                   DEFINES FIXTURE_ABI_MAJOR=1 FIXTURE_ABI_MINOR=0 FIXTURE_TORCH_VERSION="0.0.1")
trainbench_fixture(fixture_other_compiler SOURCES fixtures/abi_variants.cc LIBRARIES ${_abi_libs}
                   DEFINES FIXTURE_ABI_MAJOR=1 FIXTURE_ABI_MINOR=0 FIXTURE_COMPILER="other-compiler")
trainbench_fixture(fixture_cxx_abi SOURCES fixtures/abi_variants.cc LIBRARIES ${_abi_libs}
                   DEFINES FIXTURE_ABI_MAJOR=1 FIXTURE_ABI_MINOR=0 FIXTURE_CXX_ABI="libstdc++/cxx11=0")
trainbench_fixture(fixture_enum_without_choices SOURCES fixtures/abi_variants.cc LIBRARIES ${_abi_libs}
                   DEFINES FIXTURE_ABI_MAJOR=1 FIXTURE_ABI_MINOR=0 FIXTURE_SCHEMA=1)
trainbench_fixture(fixture_default_not_json SOURCES fixtures/abi_variants.cc LIBRARIES ${_abi_libs}
                   DEFINES FIXTURE_ABI_MAJOR=1 FIXTURE_ABI_MINOR=0 FIXTURE_SCHEMA=2)
trainbench_fixture(fixture_no_entry SOURCES fixtures/no_entry.cc)
trainbench_fixture(fixture_crash_on_load SOURCES fixtures/crash_on_load.cc)
# In a folder of its own: describing it takes the describe timeout.
trainbench_fixture(fixture_hang_on_load SOURCES fixtures/hang_on_load.cc)
set_target_properties(fixture_hang_on_load PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${FIXTURE_DIR}_hang)
foreach(t fixture_abi_major fixture_abi_minor fixture_fingerprint fixture_other_compiler fixture_cxx_abi
        fixture_enum_without_choices fixture_default_not_json)
  target_include_directories(${t} PRIVATE ${TORCH_INCLUDE_DIRS})
  target_compile_definitions(${t} PRIVATE TRAINBENCH_TORCH_CUDA_VERSION="${TRAINBENCH_TORCH_CUDA_VERSION}")
endforeach()
file(WRITE ${FIXTURE_DIR}/fixture_not_a_library.so "this is text, not an ELF shared object\n")

# NVML's stand-in (the driver's libnvidia-ml.so.1, for the GPU stand-in's
# energy), in a folder of its own: it is not a plugin.
add_library(fake_nvml SHARED fixtures/fake_nvml.cc)
set_target_properties(fake_nvml PROPERTIES OUTPUT_NAME nvidia-ml SOVERSION 1 VERSION 1
                      LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests/fake_nvml CXX_VISIBILITY_PRESET default)

# Real plugins the tests load, built as the project's own are.
function(trainbench_test_plugin target source)
  trainbench_add_plugin(${target} SOURCES ${source} OUTPUT_DIRECTORY ${TEST_PLUGIN_DIR})
  trainbench_torch_pch(${target})
endfunction()

# A real plugin that fails on demand, for fault tests.
trainbench_test_plugin(faulty_model fixtures/faulty_model.cc)
# The same, declared as SDK ABI 1.0 (compatibility with older plugins).
trainbench_test_plugin(old_abi_model fixtures/faulty_model.cc)
target_compile_definitions(old_abi_model PRIVATE FIXTURE_OLD_ABI)

# The same, built against the frozen real headers of SDK 1.1 (the ABI
# check's first baseline), 1.2 (devices describe themselves) and 1.4 (the
# last with the model's own SGD slots in use): every shipped minor's
# plugins load and train on this host.
foreach(_minor 1 2 4)
  trainbench_test_plugin(sdk1${_minor}_model fixtures/faulty_model.cc)
  target_include_directories(sdk1${_minor}_model BEFORE PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/sdk-1.${_minor}/include)
  target_compile_definitions(sdk1${_minor}_model PRIVATE FIXTURE_PLUGIN_NAME="sdk1${_minor}_model")
endforeach()
# And against SDK 1.3's frozen headers, overriding the two methods for a
# model's own SGD that 1.3 added and 1.5 retired (reserved slots since).
trainbench_test_plugin(sdk13_model fixtures/faulty_model.cc)
target_include_directories(sdk13_model BEFORE PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/sdk-1.3/include)
target_compile_definitions(sdk13_model PRIVATE FIXTURE_PLUGIN_NAME="sdk13_model" FIXTURE_SDK13)

# A GPU's stand-in (a CPU device with a device_index), for the Slurm test's --gres cells.
trainbench_test_plugin(gpu_stand_in fixtures/gpu_stand_in.cc)
# The same under a name the host has never heard of: devices describe themselves.
trainbench_test_plugin(acme_npu fixtures/gpu_stand_in.cc)
target_compile_definitions(acme_npu PRIVATE FIXTURE_DEVICE_NAME="acme_npu")

# Where LibTorch has no CUDA (no cuda plugin): the cuda plugin's schema alone,
# in a folder of its own, for the docs' table of its options
# (Docs.TablesAreWhatTrainbenchPrints).
if(NOT TARGET cuda)
  set(TRAINBENCH_CUDA_SCHEMA_DIR ${PROJECT_BINARY_DIR}/tests/cuda_schema)
  trainbench_add_plugin(cuda_schema SOURCES fixtures/cuda_schema_plugin.cc OUTPUT_DIRECTORY ${TRAINBENCH_CUDA_SCHEMA_DIR})
  target_include_directories(cuda_schema PRIVATE ${PROJECT_SOURCE_DIR}/plugins/devices/cuda)
endif()

# The GPU tests and benchmarks below (built where they can run: CUDA builds),
# for the GPU compile check elsewhere.
trainbench_gpu_sources(
  KERNELS ${PROJECT_SOURCE_DIR}/bench/graph_node_gaps.cu
  UNITS graph_fill_test.cc ${PROJECT_SOURCE_DIR}/bench/batch_norm_act_bench.cc
        ${PROJECT_SOURCE_DIR}/bench/cudnn_fusion_bench.cc)

# A test program of the ResNets' code from its sources: trainbench_resnet_impl
# brings the headers (plugins/models/resnet/ and its cudnn/).
function(trainbench_resnet_test name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE trainbench_resnet_impl GTest::gtest_main trainbench_test_paths)
  trainbench_torch_pch(${name})
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60)
endfunction()

# The worker's tests, beside its code (host/worker/tests).
add_subdirectory(${PROJECT_SOURCE_DIR}/host/worker/tests ${CMAKE_CURRENT_BINARY_DIR}/worker)

# The models through the SDK (plugins loaded in this process) and the SDK's
# batch norm helper.
add_executable(models_tests models_test.cc batch_norm_test.cc)
target_link_libraries(models_tests PRIVATE trainbench::training GTest::gtest_main trainbench_test_paths)
trainbench_torch_pch(models_tests)
add_dependencies(models_tests simple_cnn resnet18 resnet50 cpu)
gtest_discover_tests(models_tests DISCOVERY_TIMEOUT 60)
# The ResNets' benchmarks (CUDA builds): what a CUDA graph adds between two
# kernels per kind of node between them (bench/graph_node_gaps.cu: a memset
# node, a fill kernel, child graphs), the fused batch norm's micro-benchmark
# (bench/batch_norm_act_bench.cc).
if(TARGET trainbench_resnet_kernels)
  add_executable(graph_node_gaps ${PROJECT_SOURCE_DIR}/bench/graph_node_gaps.cu
                                 $<TARGET_OBJECTS:trainbench_graph_fill>)
  set_target_properties(graph_node_gaps PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)
  target_include_directories(graph_node_gaps PRIVATE ${PROJECT_SOURCE_DIR}/host/worker)
  target_link_libraries(graph_node_gaps PRIVATE CUDA::cudart)
  add_executable(batch_norm_act_bench ${PROJECT_SOURCE_DIR}/bench/batch_norm_act_bench.cc)
  target_link_libraries(batch_norm_act_bench PRIVATE trainbench_resnet_impl)
endif()
# CUDA builds with cuDNN's headers.
if(TARGET trainbench_resnet_kernels AND TRAINBENCH_CUDNN_INCLUDE_DIR AND TRAINBENCH_CUDNN_LIBRARY)
  # The worker's rewrite of a captured ResNet step's memsets (host/worker/graph_fill.h).
  trainbench_resnet_test(graph_fill_tests graph_fill_test.cc $<TARGET_OBJECTS:trainbench_graph_fill>)
  target_include_directories(graph_fill_tests PRIVATE ${PROJECT_SOURCE_DIR}/host/worker)
  # cuDNN's fused convolutions (statistics, scale-bias-ReLU prologue) against
  # the model's convolutions and batch norms (bench/cudnn_fusion_bench.cc).
  add_executable(cudnn_fusion_bench ${PROJECT_SOURCE_DIR}/bench/cudnn_fusion_bench.cc)
  target_include_directories(cudnn_fusion_bench PRIVATE ${PROJECT_SOURCE_DIR}/plugins/models/resnet/cudnn
                                                        ${TRAINBENCH_CUDNN_INCLUDE_DIR})
  target_link_libraries(cudnn_fusion_bench PRIVATE trainbench_resnet_impl)
endif()

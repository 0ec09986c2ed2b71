# trainbench_gpu_sources(KERNELS <.cu files> UNITS <C++ files>): the GPU code
# a CUDA build compiles, named where its target is declared (relative to that
# folder), so that the GPU compile check (cmake/GpuCompileCheck.cmake)
# compiles the very same files on a build without a CUDA LibTorch. UNITS are
# C++ translation units with CUDA code under the CUDA build's definitions.
function(trainbench_gpu_sources)
  cmake_parse_arguments(ARG "" "" "KERNELS;UNITS" ${ARGN})
  foreach(kind KERNELS UNITS)
    foreach(file ${ARG_${kind}})
      get_filename_component(path ${file} ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
      set_property(GLOBAL APPEND PROPERTY TRAINBENCH_GPU_${kind} ${path})
    endforeach()
  endforeach()
endfunction()

# <torch/torch.h> parsed once per build instead of once per translation
# unit: a precompiled header (GCC) that the LibTorch targets of this tree
# share. Parsing LibTorch's headers is most of such a unit's compile time.
#
# trainbench_torch_pch(<target>) makes <target>'s C++ units start from it.
# GCC takes one precompiled header for units whose -fPIC/-fPIE, language
# standard and macros agree; visibility and -O level may differ. Executables
# are compiled -fPIC for it (GCC's last -fPIC/-fPIE wins). -Winvalid-pch
# says in the build log when a unit cannot use it (it then parses the
# headers as text: slower, never wrong).
#
# Builds against a CPU LibTorch (Debian's, CI's) only: a CUDA LibTorch's
# build compiles its units as before. Off with other compilers, in
# host-only builds (no LibTorch code) and with
# -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON. Not for out-of-tree plugins:
# trainbench_add_plugin() leaves their headers alone.
set(TRAINBENCH_TORCH_PCH OFF)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND NOT CMAKE_DISABLE_PRECOMPILE_HEADERS AND NOT TRAINBENCH_WORKER_BUILD
   AND TRAINBENCH_TORCH_CUDA_VERSION STREQUAL "none")
  set(TRAINBENCH_TORCH_PCH ON)
  file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/torch_pch/torch_pch.cc
       CONTENT "// The unit that makes the shared <torch/torch.h> precompiled header.\n")
  add_library(trainbench_torch_pch OBJECT ${PROJECT_BINARY_DIR}/torch_pch/torch_pch.cc)
  target_link_libraries(trainbench_torch_pch PRIVATE trainbench::sdk)
  target_precompile_headers(trainbench_torch_pch PRIVATE <torch/torch.h>)
  set_target_properties(trainbench_torch_pch PROPERTIES CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
endif()
message(STATUS "trainbench: shared precompiled <torch/torch.h>: ${TRAINBENCH_TORCH_PCH}")

function(trainbench_torch_pch target)
  if(NOT TRAINBENCH_TORCH_PCH)
    return()
  endif()
  target_precompile_headers(${target} REUSE_FROM trainbench_torch_pch)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Winvalid-pch>)
  get_target_property(_type ${target} TYPE)
  if(_type STREQUAL "EXECUTABLE")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fPIC>)
  endif()
endfunction()

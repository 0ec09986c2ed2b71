# trainbench_add_plugin(<target> SOURCES <src>... [LIBRARIES <lib>...]
#                       [OUTPUT_DIRECTORY <dir>])
# Builds a plugin the way the host expects: a MODULE library named
# libtrainbench_<target>.so, hidden visibility, and only the entry symbol
# `trainbench_plugin_entry` exported (linker version script). Used by this
# source tree and, installed, by out-of-tree plugins (find_package(trainbench)).
function(trainbench_add_plugin target)
  cmake_parse_arguments(ARG "" "OUTPUT_DIRECTORY" "SOURCES;LIBRARIES" ${ARGN})
  add_library(${target} MODULE ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE trainbench::sdk ${ARG_LIBRARIES})
  set_target_properties(${target} PROPERTIES
    PREFIX "libtrainbench_"
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIRECTORY})
  endif()
  target_link_options(${target} PRIVATE -Wl,--exclude-libs,ALL
                      -Wl,--version-script=${TRAINBENCH_PLUGIN_EXPORTS_MAP})
  # Every symbol resolved at link time, except in sanitizer builds, whose
  # runtime lives in the executable that loads the plugin.
  if(NOT TRAINBENCH_SANITIZE AND NOT TRAINBENCH_FUZZ)
    target_link_options(${target} PRIVATE -Wl,--no-undefined)
  endif()
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${TRAINBENCH_PLUGIN_EXPORTS_MAP})
  # A plugin is code under measurement: when its project sets no build type
  # (CMake then compiles without optimisation), build it as Release would.
  if(NOT CMAKE_CONFIGURATION_TYPES AND NOT CMAKE_BUILD_TYPE)
    target_compile_options(${target} PRIVATE -O3)
    target_compile_definitions(${target} PRIVATE NDEBUG)
    message(STATUS "trainbench_add_plugin(${target}): no CMAKE_BUILD_TYPE set, building it optimised (-O3, as Release)")
  endif()
endfunction()

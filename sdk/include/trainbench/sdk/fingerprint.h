#pragma once
/// @file
/// The build fingerprint of the translation unit that includes this header,
/// as plain static strings. Plugins (through plugin.h) and the host's worker
/// both use it, so the two can be compared field by field.

#include <torch/version.h>

#include "trainbench/sdk/abi.h"

#if defined(__clang__)
#define TRAINBENCH_COMPILER_FAMILY "clang"
#elif defined(__GNUC__)
#define TRAINBENCH_COMPILER_FAMILY "gnu"
#elif defined(_MSC_VER)
#define TRAINBENCH_COMPILER_FAMILY "msvc"
#else
#define TRAINBENCH_COMPILER_FAMILY "unknown"
#endif

#define TRAINBENCH_STR2(x) #x
#define TRAINBENCH_STR(x) TRAINBENCH_STR2(x)

#if defined(_GLIBCXX_USE_CXX11_ABI)
#define TRAINBENCH_CXX_ABI "libstdc++/cxx11=" TRAINBENCH_STR(_GLIBCXX_USE_CXX11_ABI)
#elif defined(_LIBCPP_VERSION)
#define TRAINBENCH_CXX_ABI "libc++/" TRAINBENCH_STR(_LIBCPP_ABI_VERSION)
#else
#define TRAINBENCH_CXX_ABI "unknown"
#endif

/// CUDA version of the LibTorch being built against, set by the SDK's CMake
/// target from Torch's configuration ("none" for a CPU-only LibTorch).
#ifndef TRAINBENCH_TORCH_CUDA_VERSION
#define TRAINBENCH_TORCH_CUDA_VERSION "none"
#endif

/// Fingerprint initializer for a TbBuildFingerprint.
#define TRAINBENCH_BUILD_FINGERPRINT \
  TbBuildFingerprint { TRAINBENCH_COMPILER_FAMILY, TRAINBENCH_CXX_ABI, TORCH_VERSION, TRAINBENCH_TORCH_CUDA_VERSION }

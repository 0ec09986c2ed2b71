#pragma once
// LibTorch's element types and memory formats as the ResNets' CUDA kernels
// name them (kernel_types.h), for the .cc wrappers around those kernels.

#include <c10/core/MemoryFormat.h>
#include <c10/core/ScalarType.h>

#include "kernel_types.h"

namespace resnet::kernels {

/// Whether the kernels take `type`: float, bfloat16 or half.
inline bool Takes(c10::ScalarType type) { return type == c10::kFloat || type == c10::kBFloat16 || type == c10::kHalf; }

/// `type` (one the kernels take) as they name it.
inline DType DTypeOf(c10::ScalarType type) {
  return type == c10::kFloat ? DType::kFloat : type == c10::kBFloat16 ? DType::kBFloat16 : DType::kHalf;
}

/// The memory format of a layout: channels_last for NHWC.
inline c10::MemoryFormat Format(bool nhwc) {
  return nhwc ? c10::MemoryFormat::ChannelsLast : c10::MemoryFormat::Contiguous;
}

}  // namespace resnet::kernels

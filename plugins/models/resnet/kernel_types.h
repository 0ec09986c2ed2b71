#pragma once
// Element types and layouts of the ResNets' CUDA kernels (raw device
// pointers; no LibTorch, so the kernels build with nvcc alone).

namespace resnet::kernels {

enum class DType { kFloat, kBFloat16, kHalf };
enum class Layout { kNchw, kNhwc };

inline int ElementBytes(DType dtype) { return dtype == DType::kFloat ? 4 : 2; }

}  // namespace resnet::kernels

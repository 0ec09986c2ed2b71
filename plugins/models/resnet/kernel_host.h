#pragma once
// Host-side helpers the ResNets' kernel files share (built by nvcc with the
// kernels; CUDA's runtime API only, no LibTorch).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>

#include "kernel_types.h"

namespace resnet::kernels {

constexpr int kMaxDevices = 64;  // per-device state is kept for devices 0-63

inline int ElementBytes(DType dtype) { return dtype == DType::kFloat ? 4 : 2; }

/// The current device, where per-device state can be kept for it; -1 where
/// it cannot be read or is beyond kMaxDevices.
inline int CurrentDevice() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) return -1;
  return device;
}

/// The current device's multiprocessors, read once per device (1 where they
/// cannot be read).
inline int SmCount() {
  static std::array<int, kMaxDevices> counts{};
  const int device = CurrentDevice();
  if (device < 0) return 1;
  if (counts[device] == 0) {
    int n = 0;
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device);
    counts[device] = std::max(n, 1);
  }
  return counts[device];
}

}  // namespace resnet::kernels

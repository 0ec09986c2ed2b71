#pragma once
// Host-side helpers the ResNets' kernel files share (built by nvcc with the
// kernels; CUDA's runtime API only, no LibTorch).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>

#include "kernel_types.h"

namespace resnet::kernels {

constexpr int kMaxDevices = 64;  // per-device state is kept for devices 0-63

/// Whether `p` is a multiple of `bytes` (a power of two).
inline bool Aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

/// The current device, where per-device state can be kept for it; -1 where
/// it cannot be read or is beyond kMaxDevices.
inline int CurrentDevice() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) return -1;
  return device;
}

/// The current device's multiprocessors, read once per device (1 where they
/// cannot be read). Like every per-device record of these kernels' host
/// side: atomic, as any thread may ask first (each finds the same value).
inline int SmCount() {
  static std::array<std::atomic<int>, kMaxDevices> counts{};
  const int device = CurrentDevice();
  if (device < 0) return 1;
  int count = counts[device].load(std::memory_order_relaxed);
  if (count == 0) {
    int n = 0;
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device);
    count = std::max(n, 1);
    counts[device].store(count, std::memory_order_relaxed);
  }
  return count;
}

}  // namespace resnet::kernels

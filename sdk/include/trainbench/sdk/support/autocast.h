#pragma once
/// @file
/// LibTorch's automatic mixed precision (autocast) for one device type, over
/// its two APIs: per-device-type functions since LibTorch 2.4, CPU- and
/// GPU-specific ones before. For the host's autocast scope and for plugins
/// whose own operations follow autocast as LibTorch's do.

#include <ATen/autocast_mode.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define TRAINBENCH_SDK_AUTOCAST_PER_DEVICE_TYPE 1
#else
#define TRAINBENCH_SDK_AUTOCAST_PER_DEVICE_TYPE 0
#endif

namespace trainbench::sdk::autocast {

/// Whether autocast is on for `type` (CUDA or CPU) in this thread.
inline bool Enabled(c10::DeviceType type) {
#if TRAINBENCH_SDK_AUTOCAST_PER_DEVICE_TYPE
  return at::autocast::is_autocast_enabled(type);
#else
  return type == c10::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

/// The type autocast computes in on `type` (when Enabled(type)).
inline at::ScalarType Type(c10::DeviceType type) {
#if TRAINBENCH_SDK_AUTOCAST_PER_DEVICE_TYPE
  return at::autocast::get_autocast_dtype(type);
#else
  return type == c10::kCUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
#endif
}

/// Turns autocast on for `type`, computing in `dtype`.
inline void Enable(c10::DeviceType type, at::ScalarType dtype) {
#if TRAINBENCH_SDK_AUTOCAST_PER_DEVICE_TYPE
  at::autocast::set_autocast_dtype(type, dtype);
  at::autocast::set_autocast_enabled(type, true);
#else
  if (type == c10::kCUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(true);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(true);
  }
#endif
}

/// Turns autocast off for `type`.
inline void Disable(c10::DeviceType type) {
#if TRAINBENCH_SDK_AUTOCAST_PER_DEVICE_TYPE
  at::autocast::set_autocast_enabled(type, false);
#else
  if (type == c10::kCUDA)
    at::autocast::set_enabled(false);
  else
    at::autocast::set_cpu_enabled(false);
#endif
}

}  // namespace trainbench::sdk::autocast

#undef TRAINBENCH_SDK_AUTOCAST_PER_DEVICE_TYPE

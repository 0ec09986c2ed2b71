#pragma once
// RAII automatic mixed precision for one forward pass, over the two LibTorch
// APIs: per-device-type functions since 2.4, CPU/GPU-specific ones before.

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include "trainbench/sdk/device.h"

namespace trainbench::worker {

class AutocastScope {
 public:
  /// `cache`: reuse low-precision copies of weights within the scope; must be
  /// off while a CUDA graph is captured (as torch.cuda.graph requires).
  AutocastScope(c10::DeviceType type, sdk::Amp amp, bool cache = true) : type_(type), active_(amp != sdk::Amp::kNone) {
    if (!active_) return;
    cache_was_enabled_ = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(cache);
    const at::ScalarType dtype = amp == sdk::Amp::kBf16 ? at::kBFloat16 : at::kHalf;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_dtype(type_, dtype);
    at::autocast::set_autocast_enabled(type_, true);
#else
    if (type_ == c10::kCUDA) {
      at::autocast::set_autocast_gpu_dtype(dtype);
      at::autocast::set_enabled(true);
    } else {
      at::autocast::set_autocast_cpu_dtype(dtype);
      at::autocast::set_cpu_enabled(true);
    }
#endif
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!active_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(type_, false);
#else
    if (type_ == c10::kCUDA)
      at::autocast::set_enabled(false);
    else
      at::autocast::set_cpu_enabled(false);
#endif
    // Like Python's autocast exit: drop the cached low-precision weights.
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_cache_enabled(cache_was_enabled_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType type_;
  bool active_;
  bool cache_was_enabled_ = true;
};

}  // namespace trainbench::worker

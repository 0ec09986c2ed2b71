#pragma once
// RAII automatic mixed precision for one forward pass (LibTorch's two APIs:
// trainbench/sdk/support/autocast.h).

#include <ATen/autocast_mode.h>

#include "trainbench/sdk/device.h"
#include "trainbench/sdk/support/autocast.h"

namespace trainbench::worker {

class AutocastScope {
 public:
  /// `cache`: reuse low-precision copies of weights within the scope; must be
  /// off while a CUDA graph is captured (as torch.cuda.graph requires).
  AutocastScope(c10::DeviceType type, sdk::Amp amp, bool cache = true) : type_(type), active_(amp != sdk::Amp::kNone) {
    if (!active_) return;
    cache_was_enabled_ = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(cache);
    sdk::autocast::Enable(type_, amp == sdk::Amp::kBf16 ? at::kBFloat16 : at::kHalf);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!active_) return;
    sdk::autocast::Disable(type_);
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

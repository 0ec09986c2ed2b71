#pragma once
// On/off settings from the environment, for side-by-side measurements that
// turn one feature of the plugins off (TRAINBENCH_CUDNN_PREFETCH,
// TRAINBENCH_BN_PDL, TRAINBENCH_MAXPOOL_BLOCKS, ...) or on
// (TRAINBENCH_FUSED_SGD_FP32), or force a measured rule either way
// (TRAINBENCH_CONV_WHOLE_MAP, TRAINBENCH_GRAPH_FILL). Host code only; no CUDA
// or LibTorch here (the host worker includes it too).
#include <cstdlib>
#include <optional>
#include <string_view>

namespace trainbench::plugins {

/// The environment variable `name`: on unless it is "0" (unset: on). Read at
/// each call; a caller that reads it once keeps the value itself.
inline bool OnUnlessZero(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr || std::string_view(value) != "0";
}

/// The environment variable `name`: on only if it is "1" (unset: off), for
/// what stays off until measured. Read at each call, as OnUnlessZero.
inline bool OnIfOne(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::string_view(value) == "1";
}

/// A setting's value as a forced choice: "1" on, "0" off; anything else (or
/// null: unset) none, for the caller's own rule.
inline std::optional<bool> OneOrZero(const char* value) {
  if (value == nullptr) return std::nullopt;
  const std::string_view v(value);
  if (v == "1") return true;
  if (v == "0") return false;
  return std::nullopt;
}

}  // namespace trainbench::plugins

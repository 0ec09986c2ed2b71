#pragma once
// The dense peak TFLOP/s of a device at a precision, for model FLOPs
// utilisation (achieved_tflops over it). From vendors' datasheets; none for
// hardware not in the table, and none for CPUs, unless the experiment
// gives measurement.peak_tflops.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace trainbench {

struct PeakFlops {
  double tflops = 0;
  std::string source;  ///< "datasheet: NVIDIA H200 bf16 dense"
};

/// The peak for a cell's hardware description (its name; `amp` and
/// `tf32_convolutions` decide the precision), or none.
std::optional<PeakFlops> DatasheetPeak(const nlohmann::json& hardware);

}  // namespace trainbench

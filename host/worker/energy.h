#pragma once
// Energy counters read around training: NVIDIA's total-energy counter (NVML,
// loaded at run time) for a GPU, the package domains of Linux's powercap
// (RAPL) for a CPU. Where neither can be read, the reason, never a guess.
// No LibTorch here.

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace trainbench::worker {

/// A monotonic energy counter. Not thread-safe.
class EnergyMeter {
 public:
  virtual ~EnergyMeter() = default;
  /// "nvml" or "rapl".
  virtual std::string source() const = 0;
  /// Joules since an arbitrary origin (counter wrap-around handled), or none
  /// when this read failed.
  virtual std::optional<double> ReadJoules() = 0;
  /// Reads where the counter stepped back by less than a wrap would: each
  /// added nothing (never a whole range).
  virtual int64_t glitches() const { return 0; }
};

/// A meter, or why there is none.
struct EnergyChoice {
  std::unique_ptr<EnergyMeter> meter;
  std::string reason;  ///< when there is no meter
};

/// The meter for a device as its plugin describes it (DescribeJson): NVML by
/// the device's `uuid` when it has one NVML knows; powercap when its `type`
/// is "cpu".
EnergyChoice OpenEnergyMeter(const nlohmann::json& hardware);

/// The package domains under `root` (a powercap tree: intel-rapl:N with
/// energy_uj and max_energy_range_uj), summed; none with the reason when
/// there are none or they cannot be read. TRAINBENCH_POWERCAP_ROOT replaces
/// /sys/class/powercap in OpenEnergyMeter (tests use a fake tree).
EnergyChoice OpenRapl(const std::filesystem::path& root);

}  // namespace trainbench::worker

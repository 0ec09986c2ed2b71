#pragma once
// Reading GPU utilisation, power and temperature through NVML, loaded at run
// time (libnvidia-ml.so.1 comes with the NVIDIA driver), so the host needs no
// CUDA at build time and works where there is no GPU.

#include <memory>
#include <optional>

namespace trainbench {

struct GpuSample {
  double utilization_ratio = 0;  ///< 0-1, over NVML's last sample period
  std::optional<double> power_watts;
  std::optional<double> temperature_celsius;
  std::optional<double> memory_used_bytes;  ///< all processes on the GPU
};

/// Thread-safe after construction.
class GpuMonitor {
 public:
  /// nullptr when NVML (the driver) is not there.
  static std::unique_ptr<GpuMonitor> Open();
  virtual ~GpuMonitor() = default;
  /// The GPU at CUDA/NVML index `index`, or nothing when it cannot be read.
  virtual std::optional<GpuSample> Sample(int index) = 0;
};

}  // namespace trainbench

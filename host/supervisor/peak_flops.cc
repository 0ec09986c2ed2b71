#include "peak_flops.h"

#include <vector>

namespace trainbench {
namespace {

// Dense (no sparsity) peaks in TFLOP/s from the vendors' datasheets: FP32 on
// the CUDA cores, TF32 and BF16 (= FP16) on the tensor cores. Longer names
// first: "H200 NVL" before "H200".
struct PeakRow {
  const char* name;
  double fp32, tf32, bf16;
};
const std::vector<PeakRow> kTable = {
    {"H200 NVL", 60, 418, 835},  {"H200", 67, 494, 989}, {"H100 NVL", 60, 418, 835},
    {"H100 PCIe", 51, 378, 756}, {"H100", 67, 494, 989}, {"A100", 19.5, 156, 312},
    {"L40S", 91.6, 183, 362},    {"A10G", 31.2, 35, 70}, {"RTX 3050", 9.1, 0, 0},
};

}  // namespace

std::optional<PeakFlops> DatasheetPeak(const nlohmann::json& hardware) {
  if (!hardware.is_object() || !hardware.contains("name") || !hardware["name"].is_string()) return std::nullopt;
  const std::string name = hardware["name"].get<std::string>();
  const std::string amp = hardware.value("amp", std::string("none"));
  const bool tf32 = hardware.value("tf32_convolutions", false);
  for (const PeakRow& row : kTable) {
    if (name.find(row.name) == std::string::npos) continue;
    const std::string precision = amp == "bf16" || amp == "fp16" ? amp : tf32 ? "tf32" : "fp32";
    const double peak = precision == "fp32" ? row.fp32 : precision == "tf32" ? row.tf32 : row.bf16;
    if (peak <= 0) return std::nullopt;
    return PeakFlops{peak, std::string("datasheet: NVIDIA ") + row.name + " " + precision + " dense"};
  }
  return std::nullopt;
}

}  // namespace trainbench

// An example device plugin: the CPU, with the training loop's forward
// passes under bfloat16 autocast (what CPUs with AVX512-BF16 or AMX speed
// up). docs/writing-plugins.md walks through it.

#include <ATen/Parallel.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "trainbench/sdk/plugin.h"

namespace {

using trainbench::sdk::Amp;
using trainbench::sdk::DeviceSettings;
using trainbench::sdk::Status;

class Bf16Cpu : public trainbench::sdk::Device {
 public:
  Bf16Cpu(int64_t threads, bool autocast) : threads_(threads), autocast_(autocast) {}

  // The CPU is always there. A device that may be absent says why here, in
  // one line, and the host records its cells as skipped.
  bool Available(std::string*) noexcept override { return true; }

  // Process-wide settings, once, before the model is built.
  Status Setup() noexcept override {
    try {
      const auto cores = static_cast<int64_t>(std::thread::hardware_concurrency());
      at::set_num_threads(static_cast<int>(threads_ > 0 ? threads_ : std::max<int64_t>(cores, 1)));
      return Status::Ok();
    } catch (const std::exception& e) {
      return Status::Error(e.what());  // nothing crosses the boundary as an exception
    }
  }

  // Where tensors live and how the loop runs: here, bf16 autocast.
  DeviceSettings Settings() const noexcept override {
    DeviceSettings s;
    s.device = c10::Device(c10::kCPU);
    s.amp = autocast_ ? Amp::kBf16 : Amp::kNone;
    return s;
  }

  // The keys the host reads: "type" and "name"; an accelerator also gives
  // "index" and "uuid". Anything else is recorded as given.
  std::string DescribeJson() noexcept override {
    try {
      return nlohmann::json{{"type", "cpu"},
                            {"name", "CPU (bf16 autocast)"},
                            {"threads_used", at::get_num_threads()},
                            {"amp", trainbench::sdk::AmpName(Settings().amp)}}
          .dump();
    } catch (...) {
      return "{}";
    }
  }

  Status Synchronize() noexcept override { return Status::Ok(); }  // CPU kernels are synchronous
  int64_t MemoryInUseBytes() noexcept override { return -1; }      // -1: unknown
  int64_t PeakMemoryBytes() noexcept override { return -1; }
  void ResetPeakMemory() noexcept override {}

 private:
  int64_t threads_;
  bool autocast_;
};

const TbParamSpec kParams[] = {
    {"threads", TB_PARAM_INT, "0", "intra-op threads; 0 = all logical cores", nullptr, 1, 0, 4096},
    {"autocast", TB_PARAM_BOOL, "true", "run forward passes under bfloat16 autocast", nullptr, 0, 0, 0},
};

std::unique_ptr<trainbench::sdk::Device> Make(const trainbench::sdk::Options& options) {
  return std::make_unique<Bf16Cpu>(options.GetInt("threads"), options.GetBool("autocast"));
}

// A host device: one per machine, no index option, no graphs. A GPU-like
// device would use TRAINBENCH_DEVICE_PLUGIN_WITH_TRAITS instead.
}  // namespace

TRAINBENCH_DEVICE_PLUGIN("bf16_cpu", "1.0.0", "the CPU with bfloat16 autocast (an example device plugin)", kParams,
                         Make)

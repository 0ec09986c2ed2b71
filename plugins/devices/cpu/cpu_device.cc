// The CPU device: LibTorch's CPU kernels with a chosen number of threads.

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <malloc.h>
#include <unistd.h>

#include <climits>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "trainbench/sdk/plugin.h"

namespace {

using trainbench::sdk::DeviceSettings;
using trainbench::sdk::Status;

// Keeps memory freed between steps in the process for the next step's
// tensors: glibc's malloc otherwise returns the top of its heap to the kernel
// once 128 KiB are free there (M_TRIM_THRESHOLD) and serves blocks above its
// moving mmap threshold with mmap and munmap, so each step's large
// temporaries (a convolution's im2col buffers in NCHW) are faulted in, page
// by page, again. With the heap never trimmed and blocks up to 32 MiB (the
// largest threshold glibc accepts) from the heap, the memory is reused, as a
// preloaded jemalloc or TCMalloc reuses it (PyTorch's CPU performance
// guide). On 2 cores, SimpleCNN fp32 NCHW at batch 128 on one thread ran at
// 320-550 samples/s with glibc's defaults, depending on the process's
// allocation history, and 850-900 with them set. bench/glibc_malloc.sh
// gives processes without this option (plain PyTorch, older trees) the same
// settings. Returns whether glibc took both settings.
bool KeepFreedMemory() {
  constexpr int kMaxMmapThreshold = 32 << 20;
  const bool trim = mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
  const bool mmap = mallopt(M_MMAP_THRESHOLD, kMaxMmapThreshold) == 1;
  return trim && mmap;
}

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

// Reads a "Key:   N kB" line of /proc/self/status, in bytes.
int64_t ProcStatusBytes(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string prefix = std::string(key) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return std::stoll(line.substr(prefix.size())) * 1024;
  }
  return -1;
}

class CpuDevice : public trainbench::sdk::Device {
 public:
  CpuDevice(int64_t threads, bool channels_last, bool keep_freed_memory)
      : threads_(threads), channels_last_(channels_last), keep_freed_memory_(keep_freed_memory) {}

  bool Available(std::string*) noexcept override { return true; }

  Status Setup() noexcept override {
    try {
      const int64_t cores = static_cast<int64_t>(std::thread::hardware_concurrency());
      at::set_num_threads(static_cast<int>(threads_ > 0 ? threads_ : std::max<int64_t>(cores, 1)));
      kept_freed_memory_ = keep_freed_memory_ && KeepFreedMemory();
      return Status::Ok();
    } catch (const std::exception& e) {
      return Status::Error(e.what());
    }
  }

  DeviceSettings Settings() const noexcept override {
    DeviceSettings s;
    s.device = c10::Device(c10::kCPU);
    s.channels_last = channels_last_;
    return s;
  }

  std::string DescribeJson() noexcept override {
    try {
      nlohmann::json j;
      j["type"] = "cpu";
      j["name"] = CpuModelName();
      j["logical_cores"] = std::thread::hardware_concurrency();
      j["threads_used"] = at::get_num_threads();
      // The vector instructions LibTorch's CPU kernels run with (what
      // ATEN_CPU_CAPABILITY can lower): the line "CPU capability usage: AVX2"
      // of its build configuration.
      const std::string config = at::show_config();
      const std::string key = "CPU capability usage: ";
      if (const auto at = config.find(key); at != std::string::npos)
        j["cpu_capability"] = config.substr(at + key.size(), config.find('\n', at) - at - key.size());
      j["channels_last"] = channels_last_;
      j["keep_freed_memory"] = kept_freed_memory_;  // applied (Setup), not only asked
      return j.dump();
    } catch (...) {
      return "{}";
    }
  }

  Status Synchronize() noexcept override { return Status::Ok(); }

  int64_t MemoryInUseBytes() noexcept override {
    try {
      return ProcStatusBytes("VmRSS");
    } catch (...) {
      return -1;
    }
  }
  int64_t PeakMemoryBytes() noexcept override {
    try {
      return ProcStatusBytes("VmHWM");
    } catch (...) {
      return -1;
    }
  }
  void ResetPeakMemory() noexcept override {
    // Linux resets VmHWM to the current RSS when "5" is written here.
    std::ofstream out("/proc/self/clear_refs");
    out << "5";
  }

 private:
  int64_t threads_;
  bool channels_last_;
  bool keep_freed_memory_;
  bool kept_freed_memory_ = false;
};

const TbParamSpec kParams[] = {
    {"threads", TB_PARAM_INT, "0", "intra-op threads; 0 = all logical cores", nullptr, 1, 0, 4096},
    {"channels_last", TB_PARAM_BOOL, "false", "use the NHWC memory format", nullptr, 0, 0, 0},
    {"keep_freed_memory", TB_PARAM_BOOL, "true",
     "glibc's malloc keeps memory freed between steps for the next step's tensors (its heap never trimmed, blocks "
     "up to 32 MiB from the heap), as a preloaded jemalloc or TCMalloc does, instead of returning it to the kernel "
     "and faulting it in again every step (false: glibc's defaults, under which the same cell ran up to 2.7x slower "
     "depending on the process's allocation history)",
     nullptr, 0, 0, 0},
};

std::unique_ptr<trainbench::sdk::Device> Make(const trainbench::sdk::Options& options) {
  return std::make_unique<CpuDevice>(options.GetInt("threads"), options.GetBool("channels_last"),
                                     options.GetBool("keep_freed_memory"));
}

}  // namespace

TRAINBENCH_DEVICE_PLUGIN("cpu", "1.1.0", "CPU through LibTorch's CPU kernels", kParams, Make)

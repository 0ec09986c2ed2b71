#include "gpu_monitor.h"

#include <dlfcn.h>

namespace trainbench {
namespace {

// The few NVML entry points used, with NVML's C types (nvml.h, stable ABI).
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr int kNvmlTemperatureGpu = 0;

class NvmlMonitor : public GpuMonitor {
 public:
  explicit NvmlMonitor(void* lib) : lib_(lib) {
    init_ = Sym<nvmlReturn_t (*)()>("nvmlInit_v2");
    handle_ = Sym<nvmlReturn_t (*)(unsigned int, nvmlDevice_t*)>("nvmlDeviceGetHandleByIndex_v2");
    utilization_ = Sym<nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*)>("nvmlDeviceGetUtilizationRates");
    power_ = Sym<nvmlReturn_t (*)(nvmlDevice_t, unsigned int*)>("nvmlDeviceGetPowerUsage");
    temperature_ = Sym<nvmlReturn_t (*)(nvmlDevice_t, int, unsigned int*)>("nvmlDeviceGetTemperature");
    memory_ = Sym<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>("nvmlDeviceGetMemoryInfo");
  }
  ~NvmlMonitor() override {
    if (auto shutdown = Sym<nvmlReturn_t (*)()>("nvmlShutdown")) shutdown();
    dlclose(lib_);
  }
  bool Init() { return init_ && handle_ && utilization_ && init_() == kNvmlSuccess; }

  std::optional<GpuSample> Sample(int index) override {
    nvmlDevice_t device = nullptr;
    if (index < 0 || handle_(static_cast<unsigned int>(index), &device) != kNvmlSuccess) return std::nullopt;
    GpuSample s;
    nvmlUtilization_t u{};
    if (utilization_(device, &u) != kNvmlSuccess) return std::nullopt;
    s.utilization_ratio = u.gpu / 100.0;
    unsigned int value = 0;
    if (power_ && power_(device, &value) == kNvmlSuccess) s.power_watts = value / 1000.0;
    if (temperature_ && temperature_(device, kNvmlTemperatureGpu, &value) == kNvmlSuccess)
      s.temperature_celsius = value;
    nvmlMemory_t m{};
    if (memory_ && memory_(device, &m) == kNvmlSuccess) s.memory_used_bytes = static_cast<double>(m.used);
    return s;
  }

 private:
  template <class F>
  F Sym(const char* name) {
    return reinterpret_cast<F>(dlsym(lib_, name));
  }
  void* lib_;
  nvmlReturn_t (*init_)() = nullptr;
  nvmlReturn_t (*handle_)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*utilization_)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*power_)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*temperature_)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*memory_)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
};

}  // namespace

std::unique_ptr<GpuMonitor> GpuMonitor::Open() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return nullptr;
  auto monitor = std::make_unique<NvmlMonitor>(lib);
  if (!monitor->Init()) return nullptr;
  return monitor;
}

}  // namespace trainbench

#include "energy.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <vector>

namespace trainbench::worker {
namespace fs = std::filesystem;

namespace {

std::optional<unsigned long long> ReadNumber(const fs::path& file) {
  std::ifstream in(file);
  unsigned long long value = 0;
  if (!(in >> value)) return std::nullopt;
  return value;
}

// powercap's package domains: counters in microjoules that wrap at
// max_energy_range_uj.
class Rapl : public EnergyMeter {
 public:
  struct Domain {
    fs::path energy;
    unsigned long long range = 0;
    unsigned long long last = 0;
  };
  explicit Rapl(std::vector<Domain> domains) : domains_(std::move(domains)) {}
  std::string source() const override { return "rapl"; }
  int64_t glitches() const override { return glitches_; }
  // The energy since the last read. A counter below its last value went
  // round once only when it fell by more than half its range (reads are
  // seconds apart; a package takes minutes to wrap); a smaller step back is
  // a glitch of the counter, counted and adding nothing.
  unsigned long long Delta(const Domain& d, unsigned long long now) {
    if (now >= d.last) return now - d.last;
    if (d.range > d.last && d.last - now > d.range / 2) return d.range - d.last + now;
    ++glitches_;
    return 0;
  }
  std::optional<double> ReadJoules() override {
    for (Domain& d : domains_) {
      const auto now = ReadNumber(d.energy);
      if (!now) return std::nullopt;
      total_uj_ += Delta(d, *now);
      d.last = *now;
    }
    return static_cast<double>(total_uj_) / 1e6;
  }

 private:
  std::vector<Domain> domains_;
  unsigned long long total_uj_ = 0;
  int64_t glitches_ = 0;
};

// NVML's total energy since the driver loaded, in millijoules (Volta and
// newer), through the library the driver installs: dlopen, so that the
// worker needs no NVML to build or to run without a GPU.
class Nvml : public EnergyMeter {
 public:
  using InitFn = int (*)();
  using ByUuidFn = int (*)(const char*, void**);
  using EnergyFn = int (*)(void*, unsigned long long*);
  // NVML stays initialised and loaded for the worker's life: it ends soon.
  Nvml(void* device, EnergyFn energy) : device_(device), energy_(energy) {}
  std::string source() const override { return "nvml"; }
  std::optional<double> ReadJoules() override {
    unsigned long long mj = 0;
    if (energy_(device_, &mj) != 0) return std::nullopt;
    return static_cast<double>(mj) / 1e3;
  }

 private:
  void* device_;
  EnergyFn energy_;
};

EnergyChoice OpenNvml(const std::string& uuid) {
  // TRAINBENCH_NVML_LIBRARY: NVML at another path (an unusual driver
  // install; the tests' stand-in).
  const char* named = std::getenv("TRAINBENCH_NVML_LIBRARY");
  const std::string file = named != nullptr && *named != '\0' ? named : "libnvidia-ml.so.1";
  void* library = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return {nullptr, "NVML (" + file + ") is not loadable: no NVIDIA driver here"};
  auto init = reinterpret_cast<Nvml::InitFn>(::dlsym(library, "nvmlInit_v2"));
  auto by_uuid = reinterpret_cast<Nvml::ByUuidFn>(::dlsym(library, "nvmlDeviceGetHandleByUUID"));
  auto energy = reinterpret_cast<Nvml::EnergyFn>(::dlsym(library, "nvmlDeviceGetTotalEnergyConsumption"));
  if (init == nullptr || by_uuid == nullptr || energy == nullptr) {
    return {nullptr, "NVML lacks nvmlDeviceGetTotalEnergyConsumption (driver too old)"};
  }
  if (init() != 0) return {nullptr, "NVML did not initialise"};
  void* device = nullptr;
  if (by_uuid(uuid.c_str(), &device) != 0) return {nullptr, "NVML does not know the device " + uuid};
  unsigned long long probe = 0;
  if (energy(device, &probe) != 0) {
    return {nullptr, "NVML cannot read the total energy of " + uuid + " (before Volta, or not supported)"};
  }
  return {std::make_unique<Nvml>(device, energy), ""};
}

// A package domain: intel-rapl:N, not a sub-domain intel-rapl:N:M. Without
// std::regex: this process loads LibTorch, and PyTorch's wheels carry their
// own instantiations of it, built by another compiler (pytorch/pytorch#50779).
// (The FakePowercap tests' crash on the GPU machine, once blamed on it, was
// the tests' own std::filesystem::remove_all: tests/remove_tree.h.)
bool PackageDomain(const std::string& name) {
  const std::string prefix = "intel-rapl:";
  return name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
         std::all_of(name.begin() + static_cast<std::ptrdiff_t>(prefix.size()), name.end(),
                     [](unsigned char c) { return std::isdigit(c) != 0; });
}

}  // namespace

EnergyChoice OpenRapl(const fs::path& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return {nullptr, "no RAPL: " + root.string() +
                         " is absent (no powercap driver, or a virtual machine that "
                         "does not expose it)"};
  }
  std::vector<Rapl::Domain> domains;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (!PackageDomain(entry.path().filename().string())) continue;
    Rapl::Domain d;
    d.energy = entry.path() / "energy_uj";
    const auto range = ReadNumber(entry.path() / "max_energy_range_uj");
    const auto now = ReadNumber(d.energy);
    if (!now || !range) {
      return {nullptr, "RAPL: " + d.energy.string() +
                           " is not readable (root only since Linux 5.10: grant read access to measure CPU energy)"};
    }
    d.range = *range;
    d.last = *now;
    domains.push_back(d);
  }
  if (domains.empty()) return {nullptr, "no RAPL package domain under " + root.string()};
  return {std::make_unique<Rapl>(std::move(domains)), ""};
}

EnergyChoice OpenEnergyMeter(const nlohmann::json& hardware) {
  if (!hardware.is_object()) return {nullptr, "the device describes no hardware"};
  if (hardware.contains("uuid") && hardware["uuid"].is_string()) return OpenNvml(hardware["uuid"].get<std::string>());
  if (hardware.value("type", "") == "cpu") {
    const char* root = std::getenv("TRAINBENCH_POWERCAP_ROOT");
    return OpenRapl(root != nullptr && *root != '\0' ? fs::path(root) : fs::path("/sys/class/powercap"));
  }
  return {nullptr, "no energy counter known for a device of type '" + hardware.value("type", std::string("?")) + "'"};
}

}  // namespace trainbench::worker

#include "environment.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace trainbench {
namespace {

bool AnyText(const std::string&) { return true; }
bool AbsolutePath(const std::string& value) { return !value.empty() && value.front() == '/'; }
bool PositiveSeconds(const std::string& value) {
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  return !value.empty() && std::isdigit(static_cast<unsigned char>(value.front())) && *end == '\0' && v > 0 &&
         v <= 86400;
}

}  // namespace

const std::vector<EnvironmentVariable>& EnvironmentVariables() {
  static const std::vector<EnvironmentVariable> kTable = {
      {"TRAINBENCH_DATA", "a folder",
       "the CIFAR-10 folder where `dataset.path` is not given, and what `${TRAINBENCH_DATA}` in it stands for "
       "(default: the folder `trainbench data fetch cifar10` installs into)",
       false, AnyText},
      {"TRAINBENCH_PLUGIN_PATH", "folders separated by `:`",
       "searched for plugins after `--plugin-dir` and before the installation's folder", false, AnyText},
      {"TRAINBENCH_WORKER", "a file",
       "the trainbench-worker program to start (default: the one installed beside "
       "`trainbench`)",
       false, AnyText},
      {"TRAINBENCH_MACHINE_LOCK", "an absolute file path",
       "the machine-wide benchmark lock file (default `/run/lock/trainbench.lock`); relative paths are refused (they "
       "would lock per working folder)",
       false, AbsolutePath},
      {"TRAINBENCH_DESCRIBE_TIMEOUT", "seconds (up to 86400)",
       "how long describing the plugins may take before the worker is stopped (default 60)", false, PositiveSeconds},
      {"TRAINBENCH_NVML_LIBRARY", "a file",
       "the NVML library energy is read through (default libnvidia-ml.so.1; a "
       "test hook)",
       true, AnyText},
      {"TRAINBENCH_POWERCAP_ROOT", "a folder",
       "where the CPU's energy counters (RAPL) are read (default /sys/class/powercap; a test hook)", true, AnyText},
  };
  return kTable;
}

namespace {
// `v`'s value when set and not empty, after checking it.
std::optional<std::string> Checked(const EnvironmentVariable& v) {
  const char* value = std::getenv(v.name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  if (v.valid(value)) return std::string(value);
  std::string shown;  // printable, on one line
  for (const char c : std::string(value).substr(0, 60)) shown += c >= 0x20 && c != 0x7f ? c : '?';
  throw std::invalid_argument(std::string(v.name) + "='" + shown + "' is not understood: it takes " + v.values +
                              " (or unset it)");
}
}  // namespace

void CheckEnvironment() {
  for (const EnvironmentVariable& v : EnvironmentVariables()) Checked(v);
}

std::optional<std::string> EnvironmentSetting(const char* name) {
  for (const EnvironmentVariable& v : EnvironmentVariables())
    if (std::strcmp(v.name, name) == 0) return Checked(v);
  throw std::logic_error(std::string("EnvironmentSetting: ") + name + " is not in the environment table");
}

namespace {
// The process's environment, each entry as its name and value ("" when it
// has no '=').
std::vector<std::pair<std::string, std::string>> ProcessEnvironment() {
  std::vector<std::pair<std::string, std::string>> all;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr)
      all.emplace_back(*e, "");
    else
      all.emplace_back(std::string(*e, static_cast<size_t>(eq - *e)), eq + 1);
  }
  return all;
}
}  // namespace

std::vector<std::string> UnknownEnvironment() {
  std::vector<std::string> unknown;
  for (const auto& variable : ProcessEnvironment()) {
    const std::string& name = variable.first;
    if (name.rfind("TRAINBENCH_", 0) != 0) continue;
    const auto& table = EnvironmentVariables();
    if (std::none_of(table.begin(), table.end(), [&](const EnvironmentVariable& v) { return name == v.name; }))
      unknown.push_back(name);
  }
  std::sort(unknown.begin(), unknown.end());
  return unknown;
}

const std::vector<OutsideVariable>& OutsideVariables() {
  static const std::vector<OutsideVariable> kList = {
      {"ATEN_CPU_CAPABILITY", false, "the vector instructions LibTorch's CPU kernels use"},
      {"OMP_", true, "OpenMP's threads, their placement and waiting (LibTorch's CPU parallelism)"},
      {"GOMP_", true, "GNU OpenMP's thread placement and spinning"},
      {"KMP_", true, "Intel OpenMP's thread placement and waiting"},
      {"MKL_", true, "MKL's threads, instruction sets and reproducibility mode"},
      {"DNNL_", true, "oneDNN's instruction sets and kernels (LibTorch's CPU convolutions)"},
      {"ONEDNN_", true, "oneDNN's instruction sets and kernels, newer names"},
      {"OPENBLAS_", true, "OpenBLAS's threads and core type"},
      {"LD_PRELOAD", false, "libraries put in front of the process's own (an allocator such as jemalloc)"},
      {"MALLOC_CONF", false, "jemalloc's configuration"},
      {"MALLOC_ARENA_MAX", false, "glibc malloc's arenas"},
      {"MALLOC_TRIM_THRESHOLD_", false,
       "glibc malloc's heap trimming (freed memory faulted in again each step; the cpu device's keep_freed_memory sets "
       "it in the worker)"},
      {"MALLOC_MMAP_THRESHOLD_", false, "glibc malloc's size from which blocks are mmapped"},
      {"MALLOC_MMAP_MAX_", false, "glibc malloc's most mmapped blocks"},
      {"MALLOC_TOP_PAD_", false, "glibc malloc's padding of its heap"},
      {"GLIBC_TUNABLES", false, "glibc's tunables, its malloc's among them"},
      {"CUDA_LAUNCH_BLOCKING", false, "CUDA kernels launched synchronously"},
      {"CUDA_MODULE_LOADING", false, "CUDA's lazy or eager loading of kernels"},
      {"CUDA_DEVICE_MAX_CONNECTIONS", false, "CUDA's hardware work queues"},
      {"CUBLAS_", true, "cuBLAS's workspace and math modes"},
      {"CUBLASLT_", true, "cuBLASLt's heuristics"},
      {"CUDNN_", true, "cuDNN's logging and engine choices"},
      {"NVIDIA_TF32_OVERRIDE", false, "TF32 math on or off for every library"},
      {"NCCL_", true, "NCCL's algorithms, protocols and transports (data-parallel cells)"},
      {"TORCH_NCCL_", true, "LibTorch's NCCL process group"},
      {"PYTORCH_CUDA_ALLOC_CONF", false, "LibTorch's CUDA caching allocator"},
      {"PYTORCH_NO_CUDA_MEMORY_CACHING", false, "LibTorch's CUDA caching allocator off"},
      {"TORCH_CUDNN_V8_API_ENABLED", false, "LibTorch's cuDNN frontend"},
      {"TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT", false, "LibTorch's cache of cuDNN plans"},
      {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", false, "TF32 in LibTorch's matrix products"},
  };
  return kList;
}

nlohmann::json RecordedEnvironment() {
  nlohmann::json recorded = nlohmann::json::object();
  for (const EnvironmentVariable& v : EnvironmentVariables()) {
    const char* value = std::getenv(v.name);
    if (v.recorded && value != nullptr && *value != '\0') recorded[v.name] = value;
  }
  for (const auto& variable : ProcessEnvironment()) {
    const std::string& name = variable.first;
    const std::string& value = variable.second;
    if (value.empty()) continue;
    const auto& list = OutsideVariables();
    if (std::any_of(list.begin(), list.end(),
                    [&](const OutsideVariable& v) { return v.prefix ? name.rfind(v.name, 0) == 0 : name == v.name; }))
      recorded[name] = value;
  }
  return recorded;
}

std::string EnvironmentReference() {
  std::ostringstream out;
  out << "## Environment variables\n\n"
         "Everything else is in the experiment file or on the command line. A value a variable does not take is "
         "refused before a run starts (empty is unset); a `TRAINBENCH_*` variable not listed here does nothing "
         "(`run` names it in a warning). Those marked recorded can change a figure: when set, each cell's "
         "`config.environment` "
         "in results.json records them, `--resume` reruns a cell whose value differs, and `trainbench report` "
         "names the difference.\n\n"
         "| variable | takes | recorded | what it does |\n|---|---|---|---|\n";
  for (const EnvironmentVariable& v : EnvironmentVariables())
    out << "| `" << v.name << "` | " << v.values << " | " << (v.recorded ? "yes" : "no") << " | " << v.meaning
        << " |\n";
  out << "\nThe variables of LibTorch and the libraries under it that can change a figure are recorded the same "
         "way when set (each cell's `config.environment`, `--resume`'s key, `report`'s differing settings), as "
         "MLPerf's system description records them; trainbench does not check their values:\n\n"
         "| variable | what it changes |\n|---|---|\n";
  for (const OutsideVariable& v : OutsideVariables())
    out << "| `" << v.name << (v.prefix ? "*" : "") << "` | " << v.meaning << " |\n";
  out << "\nThe effective CPU settings are in each cell's `hardware` (`threads_used`, `cpu_capability`).\n";
  return out.str();
}

}  // namespace trainbench

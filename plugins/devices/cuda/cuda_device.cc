// The CUDA device: one NVIDIA GPU through LibTorch's CUDA and cuDNN backends.
// Built only when the LibTorch found at configure time has CUDA.

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#include <torch/cuda.h>
#include <torch/types.h>
#include <torch/version.h>
#if __has_include(<c10/core/AllocatorConfig.h>)
#include <c10/core/AllocatorConfig.h>
#define TRAINBENCH_ALLOCATOR_CONFIG 1
#endif

#include <atomic>
#include <cmath>
#include <cstdio>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "cuda_schema.h"
#include "trainbench/sdk/plugin.h"

namespace {

using trainbench::sdk::Amp;
using trainbench::sdk::DeviceSettings;
using trainbench::sdk::Status;

std::string CudaVersionText(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

// The size of the last allocation LibTorch's CUDA allocator refused in this
// process (its out-of-memory observer; LibTorch 2 and later), -1 for none.
std::atomic<int64_t> g_failed_request{-1};

// Applies expandable_segments to LibTorch's CUDA caching allocator (its
// setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments, which this option
// overrides): segments that grow in place instead of fixed blocks, so that
// memory freed between differently sized tensors is not stranded in them (on
// an H100, ResNet18 bf16 at 224 px, batch 256: an eager step's peak reserved
// 5.05 GiB for 4.12 GiB of tensors, 4.14 with it). Whether it was applied:
// LibTorch 2.9 and later set it at run time; an older one is left as
// PYTORCH_CUDA_ALLOC_CONF set it, said on stderr (the cell's log), and the
// device's description records what was applied.
bool SetExpandableSegments(bool on) {
#ifdef TRAINBENCH_ALLOCATOR_CONFIG
  namespace config = c10::CachingAllocator;
  // The settings in force again, with this one last (it wins).
  const std::string settings = config::getAllocatorSettings();
  config::setAllocatorSettings(settings + (settings.empty() ? "" : ",") +
                               "expandable_segments:" + (on ? "True" : "False"));
  return true;
#else
  std::fprintf(stderr,
               "cuda: expandable_segments %s not applied: LibTorch " TORCH_VERSION
               " cannot set it at run time (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True can)\n",
               on ? "true" : "false");
  return false;
#endif
}

std::string GiBText(double bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f", bytes / (1024.0 * 1024.0 * 1024.0));
  return text;
}

class CudaDevice : public trainbench::sdk::Device {
 public:
  CudaDevice(int64_t index, bool cudnn_benchmark, int64_t benchmark_limit, bool tf32, Amp amp, bool channels_last,
             bool cuda_graph, double memory_limit_gib, bool expandable_segments)
      : index_(static_cast<c10::DeviceIndex>(index)),
        memory_limit_gib_(memory_limit_gib),
        expandable_segments_(expandable_segments),
        cudnn_benchmark_(cudnn_benchmark),
        benchmark_limit_(benchmark_limit),
        tf32_(tf32),
        amp_(amp),
        channels_last_(channels_last),
        cuda_graph_(cuda_graph) {}

  bool Available(std::string* why_not) noexcept override {
    try {
      if (!torch::cuda::is_available()) {
        *why_not = "no CUDA GPU visible to LibTorch (driver missing or no device)";
        return false;
      }
      const auto count = static_cast<int64_t>(torch::cuda::device_count());
      if (index_ >= count) {
        *why_not =
            "device_index " + std::to_string(index_) + " but only " + std::to_string(count) + " CUDA GPU(s) visible";
        return false;
      }
      return true;
    } catch (const std::exception& e) {
      *why_not = std::string("CUDA initialisation failed: ") + e.what();
      return false;
    }
  }

  Status Setup() noexcept override {
    try {
      c10::cuda::set_device(index_);
      total_ = static_cast<int64_t>(at::cuda::getDeviceProperties(index_)->totalGlobalMem);
      expandable_applied_ = SetExpandableSegments(expandable_segments_);  // before the cell's first allocation
      if (memory_limit_gib_ > 0) {
        // Every allocation of LibTorch's caching allocator on this GPU counts
        // against it (cuDNN's workspaces and a captured step's pool too), as
        // torch.cuda.set_per_process_memory_fraction does; the CUDA context
        // and the libraries' handles are outside it.
        const double limit = memory_limit_gib_ * 1024.0 * 1024.0 * 1024.0;
        if (limit > static_cast<double>(total_)) {
          return Status::Error("memory_limit_gib " + GiBText(limit) + " is more than the " +
                               GiBText(static_cast<double>(total_)) + " GiB this GPU has: lower it (0: the whole GPU)");
        }
        limit_ = static_cast<int64_t>(std::floor(limit));
        // The allocator exists once CUDA is initialised for LibTorch: a first
        // tensor does that, as torch.cuda's lazy initialisation does before
        // it sets a fraction.
        (void)torch::empty({1}, torch::TensorOptions().device(torch::kCUDA, index_));
        c10::cuda::CUDACachingAllocator::setMemoryFraction(limit / static_cast<double>(total_), index_);
      }
#if TORCH_VERSION_MAJOR >= 2
      static std::once_flag observed;
      std::call_once(observed, [] {
        c10::cuda::CUDACachingAllocator::attachOutOfMemoryObserver(
            [](auto /*device*/, auto requested, auto /*limit*/, auto /*free*/) {
              g_failed_request.store(static_cast<int64_t>(requested));
            });
      });
#endif
      at::globalContext().setBenchmarkCuDNN(cudnn_benchmark_);
#if TORCH_VERSION_MAJOR >= 2
      // How many of cuDNN's candidate engines autotuning times per shape.
      at::globalContext().setBenchmarkLimitCuDNN(static_cast<int>(benchmark_limit_));
#endif
      // PyTorch's defaults: cuDNN may use TF32 for fp32 convolutions
      // (torch.backends.cudnn.allow_tf32 = True), matrix products stay fp32.
      at::globalContext().setAllowTF32CuBLAS(false);
      at::globalContext().setAllowTF32CuDNN(tf32_);
      return Status::Ok();
    } catch (const std::exception& e) {
      return Status::Error(e.what());
    }
  }

  DeviceSettings Settings() const noexcept override {
    DeviceSettings s;
    s.device = c10::Device(c10::kCUDA, index_);
    s.channels_last = channels_last_;
    s.amp = amp_;
    s.cuda_graph = cuda_graph_;
    return s;
  }

  std::string DescribeJson() noexcept override {
    try {
      nlohmann::json j;
      const cudaDeviceProp* p = at::cuda::getDeviceProperties(index_);
      int driver = 0, runtime = 0;
      cudaDriverGetVersion(&driver);
      cudaRuntimeGetVersion(&runtime);
      j["type"] = "cuda";
      j["index"] = index_;
      j["name"] = p->name;
      // nvidia-smi's form of the GPU's UUID: the identity metrics and results use.
      const auto* b = reinterpret_cast<const unsigned char*>(p->uuid.bytes);
      char uuid[64];
      std::snprintf(uuid, sizeof(uuid), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                    b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                    b[15]);
      j["uuid"] = uuid;
      j["memory_bytes"] = static_cast<int64_t>(p->totalGlobalMem);
      j["compute_capability"] = std::to_string(p->major) + "." + std::to_string(p->minor);
      j["multiprocessors"] = p->multiProcessorCount;
      if (limit_ > 0) j["memory_limit_bytes"] = limit_;
      j["driver_cuda_version"] = CudaVersionText(driver);
      j["cuda_runtime_version"] = CudaVersionText(runtime);
      const long cudnn = at::detail::getCUDAHooks().versionCuDNN();
      j["cudnn_version"] = cudnn > 0 ? std::to_string(cudnn) : "none";
      j["cudnn_benchmark"] = cudnn_benchmark_;
      j["cudnn_benchmark_limit"] = benchmark_limit_;
      j["tf32_convolutions"] = tf32_;
      j["amp"] = trainbench::sdk::AmpName(amp_);
      j["channels_last"] = channels_last_;
      j["cuda_graph"] = cuda_graph_;
      // The allocator's segments as this cell set them; null: left as
      // PYTORCH_CUDA_ALLOC_CONF has them (a LibTorch that cannot set them).
      j["expandable_segments"] = expandable_applied_ ? nlohmann::json(expandable_segments_) : nlohmann::json();
      return j.dump();
    } catch (const std::exception& e) {
      return nlohmann::json{{"type", "cuda"}, {"error", e.what()}}.dump();
    }
  }

  Status Synchronize() noexcept override {
    const cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) return Status::Error(std::string("CUDA error: ") + cudaGetErrorString(err));
    return Status::Ok();
  }

  int64_t MemoryInUseBytes() noexcept override {
    try {
      auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index_);
      return stats.reserved_bytes[0].current;
    } catch (...) {
      return -1;
    }
  }
  int64_t PeakMemoryBytes() noexcept override {
    try {
      auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index_);
      return stats.reserved_bytes[0].peak;
    } catch (...) {
      return -1;
    }
  }
  void ResetPeakMemory() noexcept override {
    try {
      c10::cuda::CUDACachingAllocator::resetPeakStats(index_);
      g_failed_request.store(-1);
    } catch (...) {
    }
  }

  trainbench::sdk::MemoryFigures Memory() noexcept override {
    trainbench::sdk::MemoryFigures m;
    try {
      const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index_);
      m.peak_reserved = stats.reserved_bytes[0].peak;
      m.peak_allocated = stats.allocated_bytes[0].peak;
    } catch (...) {
    }
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) == cudaSuccess)
      m.free = static_cast<int64_t>(free);
    else
      cudaGetLastError();  // not sticky: the next call starts clean
    m.total = total_;      // read in Setup()
    m.limit = limit_ > 0 ? limit_ : total_;
    m.failed_request = g_failed_request.load();
    return m;
  }

 private:
  c10::DeviceIndex index_;
  double memory_limit_gib_;
  bool expandable_segments_;
  bool expandable_applied_ = false;
  int64_t total_ = -1, limit_ = -1;
  bool cudnn_benchmark_;
  int64_t benchmark_limit_;
  bool tf32_;
  Amp amp_;
  bool channels_last_;
  bool cuda_graph_;
};

std::unique_ptr<trainbench::sdk::Device> Make(const trainbench::sdk::Options& options) {
  Amp amp;
  if (!trainbench::sdk::ParseAmp(options.GetString("amp"), &amp))
    throw std::invalid_argument("amp must be none, bf16 or fp16");
  if (options.GetBool("cuda_graph") && amp == Amp::kFp16) {
    throw std::invalid_argument(
        "cuda_graph cannot be combined with amp: fp16 (its loss scaling decides on the host "
        "every step); use amp: bf16");
  }
  return std::make_unique<CudaDevice>(options.GetInt("device_index"), options.GetBool("cudnn_benchmark"),
                                      options.GetInt("cudnn_benchmark_limit"), options.GetBool("tf32"), amp,
                                      options.GetBool("channels_last"), options.GetBool("cuda_graph"),
                                      options.GetFloat("memory_limit_gib"), options.GetBool("expandable_segments"));
}

}  // namespace

TRAINBENCH_DEVICE_PLUGIN_WITH_TRAITS(TRAINBENCH_CUDA_PLUGIN_NAME, TRAINBENCH_CUDA_PLUGIN_VERSION,
                                     TRAINBENCH_CUDA_PLUGIN_DESCRIPTION, trainbench::cuda_device::kParams, Make,
                                     trainbench::cuda_device::kTraits)

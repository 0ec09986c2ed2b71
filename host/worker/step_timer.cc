#include "step_timer.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <stdexcept>
#include <string>
#include <type_traits>

#ifdef TRAINBENCH_WORKER_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#if __has_include(<c10/core/AllocatorConfig.h>)
#include <c10/core/AllocatorConfig.h>
#include <c10/cuda/CUDAAllocatorConfig.h>
#define TRAINBENCH_ALLOCATOR_CONFIG 1
#endif
#endif
#ifdef TRAINBENCH_GRAPH_FILL_KERNEL
#include "graph_fill.h"  // a graph's memsets as kernels
#endif

namespace trainbench::worker {
namespace {

class HostClockTimer : public StepTimer {
 public:
  explicit HostClockTimer(sdk::Device& device) : device_(device) {}
  void Begin() override {
    (void)device_.Synchronize();
    last_ = Clock::now();
  }
  void Mark(bool timed) override {
    (void)device_.Synchronize();
    const auto now = Clock::now();
    if (timed) pending_.push_back(std::chrono::duration<double>(now - last_).count());
    last_ = now;
  }
  std::vector<double> Collect() override {
    std::vector<double> out;
    out.swap(pending_);
    return out;
  }

 private:
  using Clock = std::chrono::steady_clock;
  sdk::Device& device_;
  Clock::time_point last_;
  std::vector<double> pending_;
};

#ifdef TRAINBENCH_WORKER_CUDA
class CudaEventTimer : public StepTimer {
 public:
  void Begin() override {
    marks_.clear();
    timed_.clear();
    marks_.emplace_back(cudaEventDefault);
    marks_.back().record();
    timed_.push_back(false);
  }
  void Mark(bool timed) override {
    if (!spare_.empty()) {
      marks_.push_back(std::move(spare_.back()));
      spare_.pop_back();
    } else {
      marks_.emplace_back(cudaEventDefault);
    }
    marks_.back().record();
    timed_.push_back(timed);
  }
  std::vector<double> Collect() override {
    std::vector<double> out;
    if (marks_.size() < 2) return out;
    marks_.back().synchronize();
    for (size_t i = 1; i < marks_.size(); ++i) {
      if (timed_[i]) out.push_back(static_cast<double>(marks_[i - 1].elapsed_time(marks_[i])) / 1000.0);
    }
    timed_.erase(timed_.begin(), timed_.end() - 1);
    // Keep the last mark as the start of the next step; recycle the rest.
    while (marks_.size() > 1) {
      spare_.push_back(std::move(marks_.front()));
      marks_.pop_front();
    }
    return out;
  }

 private:
  std::deque<at::cuda::CUDAEvent> marks_;
  std::vector<bool> timed_;  // per mark: does the step ending there count
  std::vector<at::cuda::CUDAEvent> spare_;
};

// LibTorch versions differ: a graph kept after capture (for a dump) exists
// in newer ones only; older ones get a plain graph and no dump.
template <class G>
std::unique_ptr<G> MakeGraph(bool keep) {
  if constexpr (std::is_constructible_v<G, bool>) return std::make_unique<G>(keep);
  (void)keep;
  return std::make_unique<G>();
}
template <class G>
auto DebugDump(G& g, const std::string& path, int) -> decltype(g.debug_dump(path), void()) {
  g.debug_dump(path);
}
template <class G>
void DebugDump(G&, const std::string&, long) {}
template <class G>
auto Instantiate(G& g, int) -> decltype(g.instantiate(), void()) {
  g.instantiate();
}
template <class G>
void Instantiate(G&, long) {}
template <class G>
auto RawGraph(G& g, int) -> decltype(cudaGraph_t{g.raw_cuda_graph()}) {
  return g.raw_cuda_graph();
}
template <class G>
cudaGraph_t RawGraph(G&, long) {
  return nullptr;
}

// Whether the captured step's memset nodes become kernel nodes writing the
// same bytes (graph_fill.h) before the graph is instantiated: the device's
// graph_fill option always or never, otherwise where a step trains on
// at least 512 x 32 x 32 image pixels (batch x height x width; ResNet at
// 32 px: batch 512 and up; GraphFillWanted). Traces of the ResNets' captured
// steps on an H200: the GPU idled about 7.6 us around each memset node (cuDNN
// zeroing a workspace), against 0.85 us between two kernels. An ABA (two runs each, against the memsets left as they
// are): at batch 1024 ResNet18 bf16 +2.8%, fp32 +3.6%, ResNet50 bf16 +1.0%, fp32 +2.0%; at batch 128 ResNet18 bf16
// -0.8%, fp32 +2.5%, ResNet50 bf16 -2.3%, fp32 -1.3% (why the short steps lose is not known).
// Needs a LibTorch whose graphs can be kept after capture (raw_cuda_graph)
// and the fill kernel built.
bool FillMemsets(std::optional<bool> forced, int64_t pixels_per_step) {
#ifdef TRAINBENCH_GRAPH_FILL_KERNEL
  return GraphFillWanted(forced, pixels_per_step);
#else
  (void)forced, (void)pixels_per_step;
  return false;
#endif
}

#ifdef TRAINBENCH_ALLOCATOR_CONFIG
template <class Config>
auto CrossStreamReuse(int) -> decltype(bool{Config::graph_capture_record_stream_reuse()}) {
  return Config::graph_capture_record_stream_reuse();
}
template <class Config>
bool CrossStreamReuse(long) {
  return false;
}
#endif

// Whether memory used on two streams during a capture can be handed out
// again in that capture. A block freed while another stream has used it
// (record_stream: the ResNets' side streams, side_stream.h) is otherwise held
// until the capture ends, since the allocator cannot query events then.
// LibTorch 2.9 and later can prove from the captured graph's edges when such
// a block is safe to reuse (PYTORCH_CUDA_ALLOC_CONF's
// graph_capture_record_stream_reuse); the worker turns it on unless the
// allocator's settings name it. On an H100 it saved a little: peak reserved
// 21.30 -> 20.58 GiB for ResNet50 bf16 at 224 px, batch 256, 2.42 -> 2.32 at
// 32 px, batch 1024. Settled once, before the first capture; false with an
// older LibTorch.
bool CaptureReusesCrossStreamMemory() {
#ifdef TRAINBENCH_ALLOCATOR_CONFIG
  static const bool reuse = [] {
    namespace config = c10::CachingAllocator;
    using CudaConfig = c10::cuda::CUDACachingAllocator::CUDAAllocatorConfig;
    constexpr const char* kKey = "graph_capture_record_stream_reuse";
    if (config::AcceleratorAllocatorConfig::getKeys().count(kKey) == 0) return false;
    const std::string settings = config::getAllocatorSettings();
    if (settings.find(kKey) == std::string::npos)  // the user's settings again, and this one
      config::setAllocatorSettings(settings + (settings.empty() ? "" : ",") + kKey + ":True");
    return CrossStreamReuse<CudaConfig>(0);
  }();
  return reuse;
#else
  return false;
#endif
}

class CudaGraphedStep : public GraphedStep {
 public:
  CudaGraphedStep(std::function<void()> step, int64_t pixels_per_step, std::string dump, std::optional<bool> fill)
      : step_(std::move(step)), fill_(FillMemsets(fill, pixels_per_step)), dump_(std::move(dump)) {}

  int Run() override {
    int steps = 1;
    if (!graph_) {
      Capture();
      steps = kCaptureSteps;
    }
    graph_->replay();
    ++path_.replays;
    return steps;
  }

  int NextRunSteps() const override { return graph_ ? 1 : kCaptureSteps; }
  void Invalidate() override { graph_.reset(); }
  Path path() const override { return path_; }

 private:
  // As torch.cuda.graph does: warm up on a side stream, then capture there,
  // with the allocator's cached blocks given back to the driver first (the
  // warm-up's and the autotuning's: the captured step takes its memory from a
  // pool of its own, so cached blocks would only sit beside it). The warm-up
  // steps are real training steps.
  void Capture() {
    c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
    cudaDeviceSynchronize();
    {
      c10::cuda::CUDAStreamGuard guard(side);
      for (int i = 0; i < kCaptureSteps - 1; ++i) step_();
      side.synchronize();
      c10::cuda::CUDACachingAllocator::emptyCache();
      // With a dump prefix (trainbench run --graph-dump), the captured graph
      // as Graphviz (PREFIX-N.dot), to compare its kernels with another
      // program's.
      const bool dump = !dump_.empty();
      const bool fill = fill_;
      path_.cross_stream_reuse = CaptureReusesCrossStreamMemory();
      graph_ = MakeGraph<at::cuda::CUDAGraph>(/*keep_graph=*/dump || fill);
      graph_->capture_begin();
      step_();
      graph_->capture_end();
      ++path_.captures;
      path_.memsets_as_kernels = -1;
      if (fill) RewriteMemsets();
      if (dump) DebugDump(*graph_, dump_ + "-" + std::to_string(captures_++) + ".dot", 0);
      if (dump || fill) Instantiate(*graph_, 0);
    }
    cudaDeviceSynchronize();
  }

  // The kept graph's memsets as kernels; said once a capture on stderr (the
  // cell's log). A graph that cannot be had is left as captured; a rewrite
  // that fails part way leaves a graph that may not be run: the step fails.
  void RewriteMemsets() {
#ifdef TRAINBENCH_GRAPH_FILL_KERNEL
    const cudaGraph_t graph = RawGraph(*graph_, 0);
    if (graph == nullptr) {
      std::fprintf(stderr, "graph fill: this LibTorch does not keep a captured graph; memsets left as they are\n");
      return;
    }
    int replaced = 0;
    const cudaError_t e = trainbench::worker::graph_fill::MemsetsAsKernels(graph, &replaced);
    if (e != cudaSuccess)
      throw std::runtime_error(std::string("graph fill: the captured step's memsets could not be rewritten: ") +
                               cudaGetErrorString(e));
    std::fprintf(stderr, "graph fill: %d memset nodes of the captured step as kernels\n", replaced);
    path_.memsets_as_kernels = replaced;
#endif
  }

  std::function<void()> step_;
  bool fill_;
  std::string dump_;
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
  int captures_ = 0;  // dumped
  Path path_;
};
#endif

}  // namespace

bool GraphFillWanted(std::optional<bool> forced, int64_t pixels_per_step) {
  constexpr int64_t kFillFromPixels = 512 * 32 * 32;
  if (forced) return *forced;
  return pixels_per_step >= kFillFromPixels;
}

std::optional<bool> GraphFillOption(const nlohmann::json& device_options) {
  const auto it = device_options.find("graph_fill");
  if (it == device_options.end() || !it->is_string()) return std::nullopt;
  if (*it == "always") return true;
  if (*it == "never") return false;
  return std::nullopt;
}

bool WorkerHasCuda() {
#ifdef TRAINBENCH_WORKER_CUDA
  return true;
#else
  return false;
#endif
}

std::unique_ptr<StepTimer> MakeStepTimer(const sdk::DeviceSettings& settings, sdk::Device& device) {
#ifdef TRAINBENCH_WORKER_CUDA
  if (settings.device.is_cuda()) return std::make_unique<CudaEventTimer>();
#endif
  (void)settings;
  return std::make_unique<HostClockTimer>(device);
}

std::unique_ptr<GraphedStep> MakeGraphedStep(std::function<void()> step, int64_t pixels_per_step,
                                             const std::string& dump, std::optional<bool> fill) {
#ifdef TRAINBENCH_WORKER_CUDA
  return std::make_unique<CudaGraphedStep>(std::move(step), pixels_per_step, dump, fill);
#else
  (void)step, (void)pixels_per_step, (void)dump, (void)fill;
  throw std::runtime_error("cuda_graph needs a worker built with CUDA");
#endif
}

}  // namespace trainbench::worker

#include "cudnn_conv.h"

#ifdef TRAINBENCH_CUDNN_CONV
#include <ATen/Context.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <torch/autograd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cudnn_descriptors.h"
#include "cudnn_plans.h"
#include "cudnn_tuner.h"
#include "engine_cache.h"
#include "side_stream.h"
#include "trainbench/sdk/cache.h"
#include "trainbench/sdk/support/autocast.h"
#endif

namespace trainbench::plugins::cudnn_conv {

#ifndef TRAINBENCH_CUDNN_CONV

bool Built() noexcept { return false; }
bool Supports(const torch::Tensor&, const torch::Tensor&) noexcept { return false; }
at::ScalarType ComputeType(const torch::Tensor& x) { return x.scalar_type(); }
torch::Tensor Conv2d(const torch::Tensor&, const torch::Tensor&, std::array<int64_t, 2>, std::array<int64_t, 2>,
                     const Settings&) {
  TORCH_CHECK(false, "this build of trainbench has no cuDNN convolution path");
}
Counts GetCounts() { return {}; }
std::string CacheFile() { return {}; }
void ResetForTesting() {}

#else

namespace {

using namespace detail;  // NOLINT: this path's own pieces (cudnn_plans.h, cudnn_tuner.h)
using plugins::SideStream;
using plugins::SideStreamsApply;

void Warn(const std::string& message) { std::fprintf(stderr, "trainbench: warning: %s\n", message.c_str()); }

// The NVIDIA driver's version, from the kernel module ("" where unreadable).
std::string DriverVersion() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(in, line)) return "";
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159  Tue ...": the
  // first word with a dot and digits only.
  std::istringstream words(line);
  std::string word;
  while (words >> word) {
    if (word.find('.') != std::string::npos && word.find_first_not_of("0123456789.") == std::string::npos) return word;
  }
  return "";
}

std::unique_ptr<EngineCache> OpenCache(int device) {
  cudaDeviceProp props{};
  C10_CUDA_CHECK(cudaGetDeviceProperties(&props, device));
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  const std::map<std::string, std::string> machine = {
      {"gpu", props.name},
      {"compute_capability", std::to_string(props.major) + "." + std::to_string(props.minor)},
      {"multiprocessors", std::to_string(props.multiProcessorCount)},
      {"driver", DriverVersion()},
      {"cuda_driver_api", std::to_string(driver)},
      {"cuda_runtime", std::to_string(runtime)},
      {"cudnn", std::to_string(cudnnGetVersion())},
      // How a choice is written (engine index and knobs, the key's fields):
      // bump it when that changes, and older files are retired as stale.
      {"choice_format", "2"},
  };
  const std::filesystem::path directory = sdk::CacheDirectory();
  std::filesystem::path file;
  // Named by the multiprocessor count too: MIG slices of one GPU model with
  // different sizes on one host keep a file each, instead of finding one
  // another's stale in turn.
  if (!directory.empty())
    file = directory /
           (std::string(kEngineCacheFilePrefix) + FileNameSafe(props.name) + "-sm" + std::to_string(props.major) +
            std::to_string(props.minor) + "-" + std::to_string(props.multiProcessorCount) + "mp.json");
  else
    Warn("neither XDG_CACHE_HOME nor HOME is set: cuDNN's engine choices stay in this process");
  return std::make_unique<EngineCache>(file, machine, Warn);
}

// The prefetch: when a forward
// convolution is tuned, its two backward problems (the same tensors' shapes
// and layouts) are sure to follow; a helper thread gathers their candidates
// meanwhile, on its own cuDNN handle, so that their tuning does not wait for
// cuDNN's heuristic queries. On an H200 it took ResNet50's first
// run from 5.02 to 4.77 s of training time (what gathering candidates cost
// besides the timing: 0.97 -> 0.64 s) at the same rate and the same engines'
// time. Only the gradients autograd will ask for are gathered (none for an
// evaluation's forwards, none for the data gradient of an input that needs
// none). A job that nobody takes (a backward problem whose tensors were laid
// out otherwise than predicted) has run to its end long before a CUDA graph
// capture: the jobs take milliseconds and run as the first steps tune;
// cuDNN's heuristic queries are host-only, and the helper's handle is made
// with its first job.
// One helper thread, started on first use and never stopped (as the
// process's state: CUDA may be gone by the time threads end); it runs the
// jobs in order. At exit the process waits (a second at most) until the
// helper is idle: a job still inside cuDNN while the libraries' static state
// is torn down crashed a worker after its result (when the jobs were not yet
// limited to forwards whose gradients follow).
class Prefetcher {
 public:
  static Prefetcher& Get() {
    static Prefetcher* prefetcher = new Prefetcher;
    return *prefetcher;
  }
  std::shared_future<std::vector<Listed> > Add(std::function<std::vector<Listed>()> job) {
    auto task = std::make_shared<std::packaged_task<std::vector<Listed>()> >(std::move(job));
    std::shared_future<std::vector<Listed> > result = task->get_future().share();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back([task] { (*task)(); });
    }
    ready_.notify_one();
    return result;
  }

 private:
  Prefetcher() {
    std::thread([this] {
      for (;;) {
        std::function<void()> job;
        {
          std::unique_lock<std::mutex> lock(mutex_);
          ready_.wait(lock, [this] { return !jobs_.empty(); });
          job = std::move(jobs_.front());
          jobs_.pop_front();
          busy_ = true;
        }
        job();  // a packaged task: what it throws goes to its future
        {
          std::lock_guard<std::mutex> lock(mutex_);
          busy_ = false;
        }
        idle_.notify_all();
      }
    }).detach();
    // Registered after cuDNN's and LibTorch's static state was made, so it
    // runs before that is destroyed.
    std::atexit([] {
      Prefetcher& p = Get();
      std::unique_lock<std::mutex> lock(p.mutex_);
      p.jobs_.clear();  // their futures are never waited for after exit began
      p.idle_.wait_for(lock, std::chrono::seconds(1), [&p] { return !p.busy_; });
    });
  }
  std::mutex mutex_;
  std::condition_variable ready_, idle_;
  std::deque<std::function<void()> > jobs_;
  bool busy_ = false;
};

// The process's choices and plans.
struct State {
  std::mutex mutex;
  std::map<int, std::unique_ptr<EngineCache> > caches;             // per device
  std::map<std::string, EngineChoice> choices;                     // device + key: chosen in this process or read
  std::map<std::pair<cudnnHandle_t, std::string>, PlanPtr> plans;  // per handle (thread and device)
  Counts counts;
  // device + key of a backward problem: its candidates, being gathered ahead
  std::map<std::string, std::shared_future<std::vector<Listed> > > prefetched;
};
State& GetState() {
  static State* state = new State;  // used until exit, never destroyed
  return *state;
}

// The device's cache, opened on first use; `state.mutex` held.
EngineCache& CacheOf(State& state, int device) {
  auto& cache = state.caches[device];
  if (cache == nullptr) cache = OpenCache(device);
  return *cache;
}

bool Capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

std::string Name(const Problem& p) {
  std::ostringstream out;
  out << kOpNames[static_cast<int>(p.op)] << " of x [" << p.tensors[0].dims[0] << ',' << p.tensors[0].dims[1] << ','
      << p.tensors[0].dims[2] << ',' << p.tensors[0].dims[3] << "], w [" << p.tensors[1].dims[0] << ','
      << p.tensors[1].dims[1] << ',' << p.tensors[1].dims[2] << ',' << p.tensors[1].dims[3] << ']';
  return out.str();
}

// A forward's backward problems (the same tensors' shapes and layouts) that
// `backward` says will follow: their candidates gathered by the prefetcher
// meanwhile, unless chosen already. `state.mutex` held.
void GatherBackwardAhead(State& state, EngineCache& cache, const Problem& p, const at::Device& device,
                         const TuneRules& rules, std::array<bool, 2> backward) {
  for (const Op op : {Op::kBackwardData, Op::kBackwardFilter}) {
    if (!backward[op == Op::kBackwardData ? 0 : 1]) continue;
    Problem q = p;
    q.op = op;
    const std::string q_key = Key(q, rules.settings, /*benchmark=*/true, rules.limit, rules.tf32, rules.deterministic);
    const std::string q_process_key = std::to_string(device.index()) + " " + q_key;
    if (state.choices.count(q_process_key) != 0 || state.prefetched.count(q_process_key) != 0 ||
        cache.Find(q_key).has_value())
      continue;
    state.prefetched[q_process_key] = Prefetcher::Get().Add([q, device, rules] {
      return ListCandidates(q, device, rules.settings.runtime_compiled, rules.is_float, rules.tf32,
                            rules.deterministic);
    });
  }
}

// The candidates gathered ahead for `process_key`, if the prefetcher has
// them (a failure is a warning: they are gathered now). `state.mutex` held.
std::optional<std::vector<Listed> > TakeGathered(State& state, const std::string& process_key) {
  std::optional<std::vector<Listed> > listed;
  const auto it = state.prefetched.find(process_key);
  if (it == state.prefetched.end()) return listed;
  try {
    listed = it->second.get();
  } catch (const std::exception& e) {
    Warn(std::string("gathering cuDNN's candidates ahead failed (") + e.what() + "); gathering them now");
  }
  state.prefetched.erase(it);
  if (listed) ++state.counts.gathered_ahead;
  return listed;
}

// Runs one convolution on tensors already laid out in one memory format
// (ids 1, 2, 3 as in Problem), choosing its engine first if needed. For a
// forward, `backward` says which backward problems will follow (the data's,
// the filter's gradient): those the prefetch gathers candidates for.
void Convolve(Op op, const std::array<at::Tensor, 3>& tensors, const std::vector<int64_t>& geometry, bool channels_last,
              const Settings& settings, std::array<bool, 2> backward = {false, false}) {
  const at::Device device = tensors[0].device();
  const int index = device.index();
  c10::cuda::CUDAGuard guard(device);
  Problem p;
  p.op = op;
  p.type = DataType(tensors[0].scalar_type());
  for (int i = 0; i < 3; ++i) p.tensors[i] = Spec(tensors[i], channels_last);
  p.stride = {geometry[0], geometry[1]};
  p.padding = {geometry[2], geometry[3]};
  const std::array<void*, 3> pointers = {tensors[0].data_ptr(), tensors[1].data_ptr(), tensors[2].data_ptr()};

  auto& context = at::globalContext();
  const bool benchmark = context.benchmarkCuDNN() && !context.deterministicCuDNN();
  const int64_t limit = context.benchmarkLimitCuDNN();
  const bool tf32 = context.allowTF32CuDNN(), deterministic = context.deterministicCuDNN();
  const bool is_float = p.type == CUDNN_DATA_FLOAT;
  const std::string key = Key(p, settings, benchmark, limit, tf32, deterministic);
  const std::string process_key = std::to_string(index) + " " + key;

  cudnnHandle_t handle = Handle(index);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(index).stream();
  Check(cudnnSetStream(handle, stream), "set stream");

  State& state = GetState();
  std::unique_lock lock(state.mutex);
  const auto found = state.plans.find({handle, process_key});
  PlanPtr plan = found == state.plans.end() ? nullptr : found->second;
  if (plan == nullptr) {
    EngineCache& cache = CacheOf(state, index);
    const std::vector<DescriptorPtr> graph = Graph(p, handle);
    // A choice made in this process (another thread's handle), or the file's.
    std::optional<EngineChoice> choice;
    bool from_file = false;
    if (auto it = state.choices.find(process_key); it != state.choices.end()) {
      choice = it->second;
    } else if (benchmark) {
      choice = cache.Find(key);
      from_file = choice.has_value();
    }
    if (choice) {
      std::vector<DescriptorPtr> keep = graph;
      if (DescriptorPtr config = ConfigOf(*choice, *graph.back(), &keep)) plan = Finalize(keep, config, handle);
      if (plan == nullptr && from_file) {
        Warn("cuDNN engine cache " + cache.file().string() + ": engine " + std::to_string(choice->engine) +
             " no longer builds for " + Name(p) + "; timing the candidates again");
        cache.Forget(key);
      }
      if (plan != nullptr && from_file) ++state.counts.cached;
    }
    if (plan == nullptr) {
      EngineChoice chosen;
      if (benchmark && !Capturing(stream)) {
        const TuneRules rules{limit, settings, is_float, tf32, deterministic};
        if (p.op == Op::kForward) GatherBackwardAhead(state, cache, p, device, rules, backward);
        const std::optional<std::vector<Listed> > listed = TakeGathered(state, process_key);
        const TuneTarget target{graph, handle, pointers, device, stream};
        {
          Tuner tuner(target, rules);
          plan = tuner.Choose(listed ? &*listed : nullptr, &chosen);
          state.counts.timed += tuner.timed();
        }
        if (plan == nullptr && listed) {  // none of the list built here: cuDNN's own candidates, then
          Tuner tuner(target, rules);
          plan = tuner.Choose(nullptr, &chosen);
          state.counts.timed += tuner.timed();
        }
        if (plan != nullptr) {
          ++state.counts.tuned;
          cache.Store(key, chosen);
        }
      } else {
        plan = Heuristic(graph, handle, settings, is_float, tf32, deterministic, &chosen);
        if (plan != nullptr) ++state.counts.heuristic;
      }
      TORCH_CHECK(plan != nullptr, "cuDNN has no engine for the convolution ", Name(p),
                  settings.workspace_limit > 0
                      ? " within the model option cudnn_workspace_limit_mb (" +
                            std::to_string(settings.workspace_limit >> 20) + " MiB; raise it, or 0 for no limit)"
                      : std::string(),
                  " (set the model option cudnn_engine_cache: false to use LibTorch's convolution)");
      choice = chosen;
    }
    state.choices[process_key] = *choice;
    state.plans[{handle, process_key}] = plan;
  }
  lock.unlock();
  Execute(handle, *plan, pointers, device);
}

std::vector<int64_t> OutputSize(const at::Tensor& x, const at::Tensor& w, const std::vector<int64_t>& geometry) {
  std::vector<int64_t> size = {x.size(0), w.size(0), 0, 0};
  for (int i = 0; i < 2; ++i) {
    const int64_t extent = x.size(2 + i) + 2 * geometry[2 + i] - w.size(2 + i);
    TORCH_CHECK(extent >= 0 && geometry[i] > 0, "cuDNN convolution: the kernel does not fit the padded input");
    size[2 + i] = extent / geometry[i] + 1;
  }
  return size;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::MemoryFormat Format(bool channels_last) {
  return channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
}

// The engine choice's settings kept for the backward (late_join_group is
// kept on its own: the backward reads it apart).
void SaveSettings(AutogradContext* ctx, const Settings& settings) {
  ctx->saved_data["runtime_compiled"] = settings.runtime_compiled;
  ctx->saved_data["workspace_limit"] = settings.workspace_limit;
  ctx->saved_data["tune_log"] = settings.tune_log;
}

Settings SavedSettings(AutogradContext* ctx) {
  Settings settings;
  settings.runtime_compiled = ctx->saved_data["runtime_compiled"].toBool();
  settings.workspace_limit = ctx->saved_data["workspace_limit"].toInt();
  settings.tune_log = ctx->saved_data["tune_log"].toBool();
  return settings;
}

class ConvFunction : public torch::autograd::Function<ConvFunction> {
 public:
  // backward_data, backward_filter: whether autograd will ask for x's and
  // w's gradients (the prefetch's hint; grad mode is off in here).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            std::vector<int64_t> geometry, bool runtime_compiled, int64_t workspace_limit,
                            bool tune_log, int64_t late_join_group, bool backward_data, bool backward_filter) {
    Settings settings;
    settings.runtime_compiled = runtime_compiled;
    settings.workspace_limit = workspace_limit;
    settings.tune_log = tune_log;
    const bool channels_last = ChannelsLast(x, w);
    const at::MemoryFormat format = Format(channels_last);
    const at::Tensor xc = x.contiguous(format), wc = w.contiguous(format);
    at::Tensor y = at::empty(OutputSize(x, w, geometry), x.options().memory_format(format));
    if (y.numel() > 0)
      Convolve(Op::kForward, {xc, wc, y}, geometry, channels_last, settings, {backward_data, backward_filter});
    ctx->save_for_backward({xc, wc});
    ctx->saved_data["geometry"] = geometry;
    ctx->saved_data["channels_last"] = channels_last;
    SaveSettings(ctx, settings);
    ctx->saved_data["late_join_group"] = late_join_group;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    const std::vector<int64_t> geometry = ctx->saved_data["geometry"].toIntVector();
    const bool channels_last = ctx->saved_data["channels_last"].toBool();
    const Settings settings = SavedSettings(ctx);
    const at::MemoryFormat format = Format(channels_last);
    const at::Tensor dy = grads[0].contiguous(format);
    at::Tensor dx, dw;
    const bool both = ctx->needs_input_grad(0) && ctx->needs_input_grad(1) && x.numel() > 0;
    if (both && SideStreamsApply(x.device())) {
      // Everything allocated on this stream, which waits for the side stream
      // before anything here is freed (joined now), or whose memory goes back
      // to it only behind the side stream's work (left for a later join).
      dx = at::empty(x.sizes(), x.options().memory_format(format));
      dw = at::empty(w.sizes(), w.options().memory_format(format));
      SideStream side(x.device());
      side.Run([&] { Convolve(Op::kBackwardFilter, {x, dw, dy}, geometry, channels_last, settings); });
      Convolve(Op::kBackwardData, {dx, w, dy}, geometry, channels_last, settings);
      const int64_t group = ctx->saved_data["late_join_group"].toInt();
      const bool late = group >= 0 && SideStreamsApply(x.device());
      if (late)
        side.Leave({x, dy, dw}, group);
      else
        side.Join();
      State& state = GetState();
      const std::lock_guard lock(state.mutex);
      ++state.counts.side_stream_grads;
      if (late) ++state.counts.late_filter_grads;
      return {dx, dw, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    }
    if (ctx->needs_input_grad(0)) {
      dx = at::empty(x.sizes(), x.options().memory_format(format));
      if (dx.numel() > 0) Convolve(Op::kBackwardData, {dx, w, dy}, geometry, channels_last, settings);
    }
    if (ctx->needs_input_grad(1)) {
      dw = at::empty(w.sizes(), w.options().memory_format(format));
      Convolve(Op::kBackwardFilter, {x, dw, dy}, geometry, channels_last, settings);
    }
    return {dx, dw, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

bool AutocastOn() { return sdk::autocast::Enabled(c10::kCUDA); }
at::ScalarType AutocastType() { return sdk::autocast::Type(c10::kCUDA); }

bool FloatingType(at::ScalarType type) { return type == at::kFloat || type == at::kBFloat16 || type == at::kHalf; }

}  // namespace

bool Built() noexcept { return true; }

bool Supports(const torch::Tensor& x, const torch::Tensor& w) noexcept {
  if (!x.defined() || !w.defined() || !x.is_cuda() || !w.is_cuda() || x.device() != w.device()) return false;
  if (x.dim() != 4 || w.dim() != 4 || x.size(1) != w.size(1) || x.size(0) == 0) return false;
  if (!FloatingType(x.scalar_type()) || !FloatingType(w.scalar_type())) return false;
  return x.scalar_type() == w.scalar_type() || AutocastOn();
}

at::ScalarType ComputeType(const torch::Tensor& x) { return AutocastOn() ? AutocastType() : x.scalar_type(); }

torch::Tensor Conv2d(const torch::Tensor& x, const torch::Tensor& w, std::array<int64_t, 2> stride,
                     std::array<int64_t, 2> padding, const Settings& settings) {
  torch::Tensor input = x, weight = w;
  if (AutocastOn()) {
    // What autocast does for a convolution: both operands in its type.
    const at::ScalarType type = AutocastType();
    input = input.to(type);
    weight = weight.to(type);
  }
  TORCH_CHECK(input.scalar_type() == weight.scalar_type(), "cuDNN convolution: input ", input.scalar_type(),
              " and weight ", weight.scalar_type(), " differ");
  const bool grad = torch::GradMode::is_enabled();
  return ConvFunction::apply(input, weight, std::vector<int64_t>{stride[0], stride[1], padding[0], padding[1]},
                             settings.runtime_compiled, settings.workspace_limit, settings.tune_log,
                             settings.late_join_group, grad && input.requires_grad(), grad && weight.requires_grad());
}

Counts GetCounts() {
  State& state = GetState();
  std::lock_guard lock(state.mutex);
  return state.counts;
}

std::string CacheFile() {
  State& state = GetState();
  std::lock_guard lock(state.mutex);
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  return CacheOf(state, device).file().string();
}

void ResetForTesting() {
  State& state = GetState();
  std::lock_guard lock(state.mutex);
  state.caches.clear();
  state.choices.clear();
  state.plans.clear();
  state.prefetched.clear();
  state.counts = {};
}

#endif  // TRAINBENCH_CUDNN_CONV

}  // namespace trainbench::plugins::cudnn_conv

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

#include "cudnn_backend.h"
#include "engine_cache.h"
#include "env_switch.h"
#include "side_stream.h"
#include "stream_gate.h"
#include "trainbench/sdk/autocast.h"
#include "trainbench/sdk/cache.h"
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

using cudnn_backend::Check;
using cudnn_backend::Descriptor;
using cudnn_backend::DescriptorPtr;
using cudnn_backend::Make;
using plugins::SideStream;
using plugins::SideStreamsApply;

// TRAINBENCH_CUDNN_TUNE_LOG=1: one line on stderr per tuned operation (where
// the first run's warm-up goes).
bool TuneLog() {
  static const bool on = plugins::OnIfOne("TRAINBENCH_CUDNN_TUNE_LOG");
  return on;
}

// TRAINBENCH_CUDNN_GRAPH_COST=1: the autotuning counts with each candidate
// what running it inside a CUDA graph adds besides its own time (see
// GraphCost). Off: session 28's ABA on an H200 at batch 1024 gained 1.33%
// for ResNet18 bf16 but 0.22-0.44% for ResNet50 and nothing for ResNet18
// fp32, all below rewriting the memsets as kernels (the host worker's
// TRAINBENCH_GRAPH_FILL). Read once a process.
bool GraphCostOn() {
  static const bool on = plugins::OnIfOne("TRAINBENCH_CUDNN_GRAPH_COST");
  return on;
}

using Op = cudnn_backend::ConvolutionOp;
constexpr const char* kOpNames[] = {"fwd", "bwd-data", "bwd-filter"};

struct TensorSpec {
  std::array<int64_t, 4> dims{}, strides{};
  int64_t alignment = 16;
};

// One convolution: its three tensors in the order of their unique ids 1, 2,
// 3 (forward x, w, y; backward data dx, w, dy; backward filter x, dw, dy).
struct Problem {
  Op op = Op::kForward;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  std::array<TensorSpec, 3> tensors;
  std::array<int64_t, 2> stride{}, padding{};
};

// A finalized execution plan with everything it was built from.
struct Plan {
  std::vector<DescriptorPtr> keep;
  DescriptorPtr plan;
  int64_t workspace = 0;
};
using PlanPtr = std::shared_ptr<Plan>;

cudnnDataType_t DataType(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return CUDNN_DATA_FLOAT;
    case at::kBFloat16:
      return CUDNN_DATA_BFLOAT16;
    case at::kHalf:
      return CUDNN_DATA_HALF;
    default:
      TORCH_CHECK(false, "cuDNN convolution: unsupported type ", type);
  }
}

bool ChannelsLast(const at::Tensor& x, const at::Tensor& w) {
  return x.suggest_memory_format() == at::MemoryFormat::ChannelsLast ||
         w.suggest_memory_format() == at::MemoryFormat::ChannelsLast;
}

// The tensor as cuDNN sees it: dims N, C, H, W and the strides of its memory
// format (a tensor made contiguous in that format; size-1 dimensions get the
// format's own strides, as cuDNN expects), aligned as its pointer is.
TensorSpec Spec(const at::Tensor& t, bool channels_last) {
  TensorSpec spec;
  const int64_t n = t.size(0), c = t.size(1), h = t.size(2), w = t.size(3);
  spec.dims = {n, c, h, w};
  spec.strides =
      channels_last ? std::array<int64_t, 4>{h * w * c, 1, w * c, c} : std::array<int64_t, 4>{c * h * w, h * w, w, 1};
  const auto address = reinterpret_cast<std::uintptr_t>(t.data_ptr());
  while (spec.alignment > 1 && address % spec.alignment != 0) spec.alignment /= 2;
  return spec;
}

// What the choice of engine depends on besides the machine: the operation,
// its tensors and the settings that filter cuDNN's candidates.
std::string Key(const Problem& p, const Settings& settings, bool benchmark, int64_t limit, bool tf32,
                bool deterministic) {
  std::ostringstream key;
  key << kOpNames[static_cast<int>(p.op)] << " type " << static_cast<int>(p.type) << " stride " << p.stride[0] << ','
      << p.stride[1] << " pad " << p.padding[0] << ',' << p.padding[1];
  for (const TensorSpec& t : p.tensors) {
    key << " [";
    for (int i = 0; i < 4; ++i) key << (i ? "," : "") << t.dims[i];
    key << "]/[";
    for (int i = 0; i < 4; ++i) key << (i ? "," : "") << t.strides[i];
    key << "]a" << t.alignment;
  }
  if (p.type == CUDNN_DATA_FLOAT) key << " tf32 " << tf32;
  if (!settings.runtime_compiled) key << " precompiled";
  key << " deterministic " << deterministic;
  if (benchmark && GraphCostOn()) key << " graphcost";  // another rule of choice
  if (benchmark)
    key << " limit " << limit;
  else
    key << " heuristic";
  return key.str();
}

cudnnHandle_t Handle(int device) {
  // One handle per thread and device, as LibTorch keeps them; never
  // destroyed (CUDA may be gone by the time threads end).
  thread_local std::unordered_map<int, cudnnHandle_t> handles;
  cudnnHandle_t& handle = handles[device];
  if (handle == nullptr) Check(cudnnCreate(&handle), "create handle");
  return handle;
}

// The operation graph of one convolution.
std::vector<DescriptorPtr> Graph(const Problem& p, cudnnHandle_t handle) {
  std::vector<DescriptorPtr> keep;
  DescriptorPtr tensors[3];
  for (int i = 0; i < 3; ++i) {
    const TensorSpec& t = p.tensors[i];
    tensors[i] = cudnn_backend::Tensor(i + 1, p.type, t.dims, t.strides, t.alignment);
    keep.push_back(tensors[i]);
  }
  DescriptorPtr conv = cudnn_backend::Convolution(p.stride, p.padding);
  keep.push_back(conv);

  DescriptorPtr op =
      cudnn_backend::ConvolutionOperation(p.op, {tensors[0].get(), tensors[1].get(), tensors[2].get()}, *conv);
  keep.push_back(op);

  DescriptorPtr graph = Make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  cudnnBackendDescriptor_t raw_op = op->get();
  graph->Set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw_op)
      .Set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  Check(graph->Finalize(), "operation graph");
  keep.push_back(graph);  // last: Graph(...).back() is the graph
  return keep;
}

// A plan for an engine configuration, or none when cuDNN cannot build it.
PlanPtr Finalize(std::vector<DescriptorPtr> keep, const DescriptorPtr& config, cudnnHandle_t handle) {
  auto plan = std::make_shared<Plan>();
  plan->keep = std::move(keep);
  plan->keep.push_back(config);
  plan->plan = Make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  plan->plan->Set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
      .SetDescriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *config);
  if (plan->plan->Finalize() != CUDNN_STATUS_SUCCESS) return nullptr;
  int64_t count = 0;
  if (cudnnBackendGetAttribute(plan->plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &count,
                               &plan->workspace) != CUDNN_STATUS_SUCCESS)
    return nullptr;
  return plan;
}

// An engine configuration rebuilt from a stored choice, or none when this
// cuDNN no longer accepts it.
DescriptorPtr ConfigOf(const EngineChoice& choice, const Descriptor& graph, std::vector<DescriptorPtr>* keep) {
  DescriptorPtr engine = Make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  engine->SetDescriptor(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph)
      .Set(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &choice.engine);
  if (engine->Finalize() != CUDNN_STATUS_SUCCESS) return nullptr;
  keep->push_back(engine);
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const auto& [type, value] : choice.knobs) {
    if (type < 0 || type >= CUDNN_KNOB_TYPE_COUNTS) return nullptr;
    DescriptorPtr knob = Make(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    const auto knob_type = static_cast<cudnnBackendKnobType_t>(type);
    knob->Set(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &knob_type)
        .Set(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &value);
    if (knob->Finalize() != CUDNN_STATUS_SUCCESS) return nullptr;
    keep->push_back(knob);
    raw.push_back(knob->get());
  }
  DescriptorPtr config = Make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  config->SetDescriptor(CUDNN_ATTR_ENGINECFG_ENGINE, *engine);
  if (!raw.empty())
    config->Set(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw.size()),
                raw.data());
  if (config->Finalize() != CUDNN_STATUS_SUCCESS) return nullptr;
  return config;
}

struct Candidate {
  EngineChoice choice;
  DescriptorPtr config;
  bool runtime_compiled = false;  // cuDNN compiles its kernel when the plan is built (NVRTC)
};

// What an engine configuration from cuDNN's heuristics is (its engine and
// knobs), and whether it is a candidate: what LibTorch would let run (never
// engines that convert their inputs down, no tensor cores for float without
// TF32, nothing nondeterministic when determinism is asked; runtime-compiled
// engines only when `runtime_compiled`).
bool Describe(const Descriptor& config, bool runtime_compiled, bool is_float, bool tf32, bool deterministic,
              Candidate* candidate) {
  EngineChoice* choice = &candidate->choice;
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw_engine = engine.get();
  int64_t count = 0;
  if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count,
                               &raw_engine) != CUDNN_STATUS_SUCCESS)
    return false;
  if (cudnnBackendGetAttribute(raw_engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &count,
                               &choice->engine) != CUDNN_STATUS_SUCCESS)
    return false;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t note_count = 0;
  if (cudnnBackendGetAttribute(raw_engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &note_count, notes) != CUDNN_STATUS_SUCCESS)
    note_count = 0;
  cudnnBackendBehaviorNote_t behaviours[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  int64_t behaviour_count = 0;
  if (cudnnBackendGetAttribute(raw_engine, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &behaviour_count, behaviours) != CUDNN_STATUS_SUCCESS)
    behaviour_count = 0;
  candidate->runtime_compiled = std::find(behaviours, behaviours + behaviour_count,
                                          CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) != behaviours + behaviour_count;
  if (candidate->runtime_compiled && !runtime_compiled) return false;
  for (int64_t i = 0; i < note_count; ++i) {
    if (notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) return false;
    if (is_float && !tf32 && notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE) return false;
    if (deterministic && notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return false;
  }
  std::vector<std::unique_ptr<Descriptor> > knobs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
    knobs.push_back(std::make_unique<Descriptor>(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR));
    raw.push_back(knobs.back()->get());
  }
  int64_t knob_count = 0;
  if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               static_cast<int64_t>(raw.size()), &knob_count, raw.data()) != CUDNN_STATUS_SUCCESS)
    return false;
  choice->knobs.clear();
  for (int64_t i = 0; i < knob_count && i < static_cast<int64_t>(raw.size()); ++i) {
    cudnnBackendKnobType_t type;
    int64_t value = 0;
    if (cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &count, &type) !=
            CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &count, &value) !=
            CUDNN_STATUS_SUCCESS)
      return false;
    choice->knobs.emplace_back(static_cast<int64_t>(type), value);
  }
  return true;
}

// Where the host's time of gathering candidates goes: cuDNN's two heuristic
// queries and reading each configuration's engine and knobs (for the tuning
// log), and how many candidates only the fallback list had.
struct HeuristicsTimes {
  std::chrono::steady_clock::duration instant{}, fallback{}, describing{};
  size_t from_fallback = 0;
};

// Calls `visit` with cuDNN's candidates in its order of preference, as
// LibTorch gathers them: the instant heuristics, then the fallback list, each
// engine once; stops when `visit` returns false.
template <class Visit>
void ForEachCandidate(const Descriptor& graph, bool runtime_compiled, bool is_float, bool tf32, bool deterministic,
                      Visit&& visit, HeuristicsTimes* times = nullptr) {
  using Clock = std::chrono::steady_clock;
  std::vector<EngineChoice> seen;
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_INSTANT, CUDNN_HEUR_MODE_FALLBACK}) {
    const Clock::time_point query = Clock::now();
    const std::vector<DescriptorPtr> configs = cudnn_backend::EngineConfigs(graph, mode);
    if (configs.empty()) continue;
    const bool fallback = mode == CUDNN_HEUR_MODE_FALLBACK;
    if (times != nullptr) (fallback ? times->fallback : times->instant) += Clock::now() - query;
    for (size_t i = 0; i < configs.size(); ++i) {
      Candidate candidate{EngineChoice{}, configs[i]};
      const Clock::time_point describe = Clock::now();
      const bool described = Describe(*configs[i], runtime_compiled, is_float, tf32, deterministic, &candidate);
      if (times != nullptr) times->describing += Clock::now() - describe;
      if (!described) continue;
      if (std::find(seen.begin(), seen.end(), candidate.choice) != seen.end()) continue;
      seen.push_back(candidate.choice);
      if (times != nullptr && fallback) ++times->from_fallback;
      if (!visit(candidate)) return;
    }
  }
}

// A variant pack of the three tensors and a workspace: built once for the
// many runs of one problem's candidates.
DescriptorPtr Pack(const std::array<void*, 3>& pointers, void* workspace_ptr) {
  DescriptorPtr pack = Make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const int64_t uids[3] = {1, 2, 3};
  pack->Set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids)
      .Set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers.data())
      .Set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace_ptr);
  Check(pack->Finalize(), "variant pack");
  return pack;
}

// Runs a plan on the handle's stream with a pack of Pack().
void Execute(cudnnHandle_t handle, const Plan& plan, const Descriptor& pack) {
  Check(cudnnBackendExecute(handle, plan.plan->get(), pack.get()), "execute");
}

// Runs a plan on the handle's stream with `workspace_ptr` (at least
// plan.workspace bytes).
void Execute(cudnnHandle_t handle, const Plan& plan, const std::array<void*, 3>& pointers, void* workspace_ptr) {
  Execute(handle, plan, *Pack(pointers, workspace_ptr));
}

at::Tensor Workspace(int64_t bytes, const at::Device& device) {
  return at::empty({std::max<int64_t>(bytes, 1)}, at::TensorOptions().dtype(at::kByte).device(device));
}

void Execute(cudnnHandle_t handle, const Plan& plan, const std::array<void*, 3>& pointers, const at::Device& device) {
  const at::Tensor workspace = plan.workspace > 0 ? Workspace(plan.workspace, device) : at::Tensor();
  Execute(handle, plan, pointers, workspace.defined() ? workspace.data_ptr() : nullptr);
}

// A stream of this thread's own on `device`, made on first use (by
// GraphCost, while autotuning: never inside a capture).
cudaStream_t PrivateStream(int device) {
  thread_local std::unordered_map<int, cudaStream_t> streams;  // never destroyed, as the handles
  auto it = streams.find(device);
  if (it != streams.end()) return it->second;
  cudaStream_t stream = nullptr;
  C10_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return streams[device] = stream;
}

using GraphPtr = std::unique_ptr<CUgraph_st, decltype(&cudaGraphDestroy)>;

// One execution of the plan captured on `side` (nothing runs), the handle
// back on `stream` after it; null where the capture or the execution failed
// (their errors cleared: a failed capture's are not sticky).
GraphPtr CaptureExecution(cudnnHandle_t handle, const Plan& plan, const Descriptor& pack, cudaStream_t side,
                          cudaStream_t stream) {
  if (cudnnSetStream(handle, side) != CUDNN_STATUS_SUCCESS) return GraphPtr(nullptr, &cudaGraphDestroy);
  cudaGraph_t graph = nullptr;
  bool executed = false;
  if (cudaStreamBeginCapture(side, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
    try {
      Execute(handle, plan, pack);
      executed = true;
    } catch (const c10::Error&) {
    }
    if (cudaStreamEndCapture(side, &graph) != cudaSuccess) graph = nullptr;
  }
  (void)cudaGetLastError();
  Check(cudnnSetStream(handle, stream), "set stream");
  GraphPtr owned(graph, &cudaGraphDestroy);
  if (!executed) owned.reset();
  return owned;
}

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

// A candidate as ForEachCandidate gives it, without its configuration
// descriptor (which belongs to the operation graph it was queried on).
struct Listed {
  EngineChoice choice;
  bool runtime_compiled = false;
};

// cuDNN's candidates for a problem, in ForEachCandidate's order, queried on
// this thread's handle.
std::vector<Listed> ListCandidates(const Problem& p, const at::Device& device, bool runtime_compiled, bool is_float,
                                   bool tf32, bool deterministic) {
  c10::cuda::CUDAGuard guard(device);
  const std::vector<DescriptorPtr> graph = Graph(p, Handle(device.index()));
  std::vector<Listed> listed;
  ForEachCandidate(*graph.back(), runtime_compiled, is_float, tf32, deterministic, [&](Candidate& candidate) {
    listed.push_back({candidate.choice, candidate.runtime_compiled});
    return true;
  });
  return listed;
}

// The prefetch (on unless TRAINBENCH_CUDNN_PREFETCH=0): when a forward
// convolution is tuned, its two backward problems (the same tensors' shapes
// and layouts) are sure to follow; a helper thread gathers their candidates
// meanwhile, on its own cuDNN handle, so that their tuning does not wait for
// cuDNN's heuristic queries. On the H200 (session 14) it took ResNet50's first
// run from 5.02 to 4.77 s of training time (what gathering candidates cost
// besides the timing: 0.97 -> 0.64 s) at the same rate and the same engines'
// time. Only the gradients autograd will ask for are gathered (none for an
// evaluation's forwards, none for the data gradient of an input that needs
// none). A job that nobody takes (a backward problem whose tensors were laid
// out otherwise than predicted) has run to its end long before a CUDA graph
// capture: the jobs take milliseconds and run as the first steps tune;
// cuDNN's heuristic queries are host-only, and the helper's handle is made
// with its first job.
bool PrefetchOn() {
  return plugins::OnUnlessZero("TRAINBENCH_CUDNN_PREFETCH");  // read per forward tuning: a test turns it off
}

// One helper thread, started on first use and never stopped (as the
// process's state: CUDA may be gone by the time threads end); it runs the
// jobs in order. At exit the process waits (a second at most) until the
// helper is idle: a job still inside cuDNN while the libraries' static state
// is torn down crashed a worker after its result (session 14, before only
// forwards whose gradients follow queued jobs).
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

// What a plan adds to a CUDA graph's time besides its kernels' own: the
// graph nodes its execution makes, counted by capturing one execution on
// PrivateStream (nothing runs). Session 27's traces of the ResNets' captured
// steps on an H200 (bench/kernel_profile.py): where cuDNN's engine zeroes its
// workspace with a memset before its kernel, the GPU idled 4.4 us before the
// memset and 3.2 us after it (ResNet50 fp32 at batch 1024: 16.8 such memsets,
// 128 us a step; ResNet18 bf16: 5, 45 us, 2.7% of its step), against about
// 0.7 us between two kernels. Timed alone, on a stream, neither shows: a
// candidate's runs there are launched back to back. The cost in us: 7.5 per
// memset or other non-kernel node, 0.7 per kernel after the first; nullopt
// where the capture fails (the candidate then counts with its time alone).
std::optional<float> GraphCost(cudnnHandle_t handle, const Plan& plan, const Descriptor& pack, cudaStream_t stream) {
  constexpr float kMemsetUs = 7.5f, kKernelUs = 0.7f;
  const GraphPtr captured = CaptureExecution(handle, plan, pack, PrivateStream(c10::cuda::current_device()), stream);
  if (captured == nullptr) return std::nullopt;
  const cudaGraph_t graph = captured.get();
  size_t count = 0;
  std::vector<cudaGraphNode_t> nodes;
  if (cudaGraphGetNodes(graph, nullptr, &count) == cudaSuccess) {
    nodes.resize(count);
    if (cudaGraphGetNodes(graph, nodes.data(), &count) != cudaSuccess) nodes.clear();
  }
  float us = 0;
  int kernels = 0;
  for (const cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
    if (cudaGraphNodeGetType(node, &type) != cudaSuccess) continue;
    if (type == cudaGraphNodeTypeKernel)
      us += kernels++ > 0 ? kKernelUs : 0.f;
    else if (type != cudaGraphNodeTypeEmpty)
      us += kMemsetUs;
  }
  (void)cudaGetLastError();
  if (nodes.empty()) return std::nullopt;
  return us;
}

// Times the candidates on the real tensors and returns the fastest's plan;
// `choice` is set to it. The first `limit` candidates that build (all when
// 0), in cuDNN's order, as LibTorch takes them (LibTorch runs each about
// once, waiting for the GPU after each). The convolutions of a ResNet at
// batch 1024 take 5-30 us on an H200, launching one takes the host longer:
// a run timed while the GPU waits for the host times the host. So the runs
// that decide are queued behind a StreamGate, which holds the stream until
// they are all queued (the GPU's time alone). But a kernel's first launch
// loads its module, which waits for the device, so behind a shut gate for
// the gate; and an engine's kernels for a new shape are new kernels (gating
// the first round for engines that had run on other shapes let a gate time
// out in every run on the H200). Hence three rounds:
//  1. every candidate once, back to back, ungated, one wait at the end: it
//     loads the kernels, and its times (the loading, the host's launch
//     rate) only set aside the clearly slow: over kSlowMargin x the fastest;
//  2. the rest once more, behind gates;
//  3. the finalists (within kFinalMargin of round 2's fastest, at most
//     kFinalists of them) kFinalRuns times more, interleaved, behind gates.
// A candidate counts with the best of its gated runs (with
// TRAINBENCH_CUDNN_GRAPH_COST=1 plus its GraphCost, counted for those that
// round 2 times, after round 1 has loaded their kernels).
PlanPtr Tune(const std::vector<DescriptorPtr>& graph, cudnnHandle_t handle, const std::array<void*, 3>& pointers,
             const at::Device& device, cudaStream_t stream, int64_t limit, const Settings& settings, bool is_float,
             bool tf32, bool deterministic, const std::vector<Listed>* listed, EngineChoice* choice, int64_t* timed,
             int64_t* graph_counted) {
  constexpr float kSlowMargin = 4.0f, kFinalMargin = 1.15f;
  constexpr size_t kFinalists = 6, kFinalRuns = 3, kRunsPerGate = 32;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point began = Clock::now();
  struct Built {
    Candidate candidate;
    PlanPtr plan;
    float first = std::numeric_limits<float>::infinity();
    std::vector<float> gated{};  // ms of its runs in rounds 2 and 3
    float graph_ms = 0;          // GraphCost, with TRAINBENCH_CUDNN_GRAPH_COST=1
    bool failed = false;         // did not run here: no candidate
  };
  std::vector<Built> built;
  size_t tried = 0, runtime_compiled = 0;
  Clock::duration building{}, runtime_compiled_building{};
  HeuristicsTimes heuristics;
  // Builds a candidate's plan from `keep` (the graph, and what its
  // configuration was made of); false once `limit` candidates have built.
  auto consider = [&](Candidate& candidate, const std::vector<DescriptorPtr>& keep) {
    if (limit > 0 && static_cast<int64_t>(built.size()) >= limit) return false;
    ++tried;
    const Clock::time_point one = Clock::now();
    PlanPtr plan;
    try {
      plan = Finalize(keep, candidate.config, handle);
    } catch (const c10::Error&) {
      plan = nullptr;  // a descriptor cuDNN refused: not a candidate
    }
    const Clock::duration took = Clock::now() - one;
    building += took;
    if (candidate.runtime_compiled) {
      ++runtime_compiled;
      runtime_compiled_building += took;
    }
    if (plan != nullptr) built.push_back({candidate, std::move(plan)});
    return true;
  };
  if (listed != nullptr) {
    for (const Listed& l : *listed) {
      const Clock::time_point describe = Clock::now();
      std::vector<DescriptorPtr> keep = graph;
      Candidate candidate{l.choice, ConfigOf(l.choice, *graph.back(), &keep), l.runtime_compiled};
      heuristics.describing += Clock::now() - describe;
      if (candidate.config != nullptr && !consider(candidate, keep)) break;
    }
  } else {
    ForEachCandidate(
        *graph.back(), settings.runtime_compiled, is_float, tf32, deterministic,
        [&](Candidate& candidate) { return consider(candidate, graph); }, &heuristics);
  }
  const Clock::time_point run_start = Clock::now();

  // One workspace for every candidate (they run one after another on the
  // stream): the largest they need; a candidate whose workspace cannot be
  // had is left out, the largest first.
  at::Tensor workspace;
  while (!built.empty()) {
    const auto largest = std::max_element(built.begin(), built.end(), [](const Built& a, const Built& b) {
      return a.plan->workspace < b.plan->workspace;
    });
    try {
      workspace = Workspace(largest->plan->workspace, device);
      break;
    } catch (const c10::Error&) {
      built.erase(largest);
    }
  }
  const DescriptorPtr pack = Pack(pointers, workspace.defined() ? workspace.data_ptr() : nullptr);

  // Timed runs: each between two events, read once the stream is waited for.
  struct Queued {
    size_t candidate;
    cudaEvent_t start, end;
  };
  std::vector<cudaEvent_t> events, spare;
  std::vector<Queued> queued;
  auto event = [&] {
    if (spare.empty()) {
      cudaEvent_t e = nullptr;
      C10_CUDA_CHECK(cudaEventCreate(&e));
      events.push_back(e);
      return e;
    }
    const cudaEvent_t e = spare.back();
    spare.pop_back();
    return e;
  };
  auto run = [&](size_t i) {
    const Queued q{i, event(), event()};
    try {
      C10_CUDA_CHECK(cudaEventRecord(q.start, stream));
      Execute(handle, *built[i].plan, *pack);
      C10_CUDA_CHECK(cudaEventRecord(q.end, stream));
      queued.push_back(q);
    } catch (const c10::Error&) {
      built[i].failed = true;
      spare.insert(spare.end(), {q.start, q.end});
    }
  };
  // Waits for the stream and calls `take(candidate, ms)` for every run queued.
  auto collect = [&](auto&& take) {
    C10_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (const Queued& q : queued) {
      float ms = 0;
      C10_CUDA_CHECK(cudaEventElapsedTime(&ms, q.start, q.end));
      take(q.candidate, ms);
      spare.insert(spare.end(), {q.start, q.end});
    }
    queued.clear();
  };
  // Runs the candidates `order` names (in its order) behind gates of at most
  // kRunsPerGate runs each.
  bool gates_held = true;
  auto gated = [&](const std::vector<size_t>& order) {
    std::vector<std::unique_ptr<StreamGate> > gates;
    for (size_t k = 0; k < order.size(); k += kRunsPerGate) {
      gates.push_back(std::make_unique<StreamGate>(stream));
      for (size_t j = k; j < std::min(order.size(), k + kRunsPerGate); ++j)
        if (!built[order[j]].failed) run(order[j]);
      gates.back()->Open();
    }
    collect([&](size_t i, float ms) { built[i].gated.push_back(ms); });
    for (const auto& gate : gates) gates_held = gates_held && gate->HeldUntilOpened();
  };

  // Round 1.
  for (size_t i = 0; i < built.size(); ++i) run(i);
  float fastest_first = std::numeric_limits<float>::infinity();
  collect([&](size_t i, float ms) {
    built[i].first = ms;
    fastest_first = std::min(fastest_first, ms);
    ++*timed;
  });
  // Round 2.
  std::vector<size_t> again;
  for (size_t i = 0; i < built.size(); ++i)
    if (!built[i].failed && built[i].first <= kSlowMargin * fastest_first) again.push_back(i);
  const bool graph_cost = GraphCostOn();
  size_t with_nodes = 0;
  if (graph_cost) {
    for (size_t i : again) {
      if (const std::optional<float> us = GraphCost(handle, *built[i].plan, *pack, stream)) {
        built[i].graph_ms = *us / 1000.f;
        ++with_nodes;
      }
    }
    *graph_counted += static_cast<int64_t>(with_nodes);
  }
  gated(again);
  // Round 3: the finalists, fastest first, interleaved.
  auto fastest_gated = [&](size_t i) {
    return built[i].failed || built[i].gated.empty() ? std::numeric_limits<float>::infinity()
                                                     : built[i].gated.front() + built[i].graph_ms;
  };
  std::vector<size_t> order(built.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return fastest_gated(a) < fastest_gated(b); });
  std::vector<size_t> finalists;
  for (size_t i : order) {
    const float ms = fastest_gated(i);
    if (finalists.size() == kFinalists || std::isinf(ms) || !(ms <= kFinalMargin * fastest_gated(order.front()))) break;
    finalists.push_back(i);
  }
  std::vector<size_t> interleaved;
  for (size_t r = 0; r < kFinalRuns && finalists.size() > 1; ++r)
    interleaved.insert(interleaved.end(), finalists.begin(), finalists.end());
  gated(interleaved);

  // What a candidate counts with: the best of its gated runs (none: inf).
  auto best_of = [](const Built& b) {
    return b.failed || b.gated.empty() ? std::numeric_limits<float>::infinity()
                                       : *std::min_element(b.gated.begin(), b.gated.end());
  };
  PlanPtr best;
  float best_ms = std::numeric_limits<float>::infinity(), best_graph_ms = 0;
  for (const Built& b : built) {
    const float ms = best_of(b);
    if (ms + b.graph_ms < best_ms + best_graph_ms) {
      best_ms = ms;
      best_graph_ms = b.graph_ms;
      best = b.plan;
      *choice = b.candidate.choice;
      choice->milliseconds = best_ms;  // its own time, as measured
    }
  }
  for (const cudaEvent_t e : events) cudaEventDestroy(e);
  if (TuneLog()) {
    auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
    bool chosen_runtime_compiled = false;
    float best_precompiled = std::numeric_limits<float>::infinity();
    for (const Built& b : built) {
      if (b.plan == best) chosen_runtime_compiled = b.candidate.runtime_compiled;
      if (!b.candidate.runtime_compiled) best_precompiled = std::min(best_precompiled, best_of(b));
    }
    // One line per tuned operation; bench/tuning_log.py sums them up.
    std::fprintf(stderr,
                 "trainbench: cuDNN tuning: %zu candidates, %zu built (%.1f ms), timed in %.1f ms, %.1f ms in all; "
                 "engine %lld at %.4f ms%s; %zu runtime-compiled built in %.1f ms; best precompiled %.4f ms; "
                 "%zu timed again, %zu finalists%s; heuristics %.1f ms instant, %.1f ms fallback (%zu candidates "
                 "only there), describing %.1f ms%s%s\n",
                 tried, built.size(), ms(building), ms(Clock::now() - run_start), ms(Clock::now() - began),
                 static_cast<long long>(choice->engine), best_ms, chosen_runtime_compiled ? " (runtime-compiled)" : "",
                 runtime_compiled, ms(runtime_compiled_building), best_precompiled, again.size(), finalists.size(),
                 gates_held ? "" : "; a gate let go before it was opened", ms(heuristics.instant),
                 ms(heuristics.fallback), heuristics.from_fallback, ms(heuristics.describing),
                 listed != nullptr ? "; candidates gathered ahead" : "",
                 graph_cost ? ("; graph cost " + std::to_string(with_nodes) + " counted, the chosen's " +
                               std::to_string(best_graph_ms * 1000.f) + " us")
                                  .c_str()
                            : "");
  }
  return best;
}

// cuDNN's first heuristic candidate that it can build (the instant
// heuristics first, the fallback list after), described and built one at a
// time: no autotuning asked, so nothing more is needed.
PlanPtr Heuristic(const std::vector<DescriptorPtr>& graph, cudnnHandle_t handle, const Settings& settings,
                  bool is_float, bool tf32, bool deterministic, EngineChoice* choice) {
  PlanPtr plan;
  ForEachCandidate(*graph.back(), settings.runtime_compiled, is_float, tf32, deterministic, [&](Candidate& candidate) {
    plan = Finalize(graph, candidate.config, handle);
    if (plan != nullptr) *choice = candidate.choice;
    return plan == nullptr;  // go on until one builds
  });
  return plan;
}

std::string Name(const Problem& p) {
  std::ostringstream out;
  out << kOpNames[static_cast<int>(p.op)] << " of x [" << p.tensors[0].dims[0] << ',' << p.tensors[0].dims[1] << ','
      << p.tensors[0].dims[2] << ',' << p.tensors[0].dims[3] << "], w [" << p.tensors[1].dims[0] << ','
      << p.tensors[1].dims[1] << ',' << p.tensors[1].dims[2] << ',' << p.tensors[1].dims[3] << ']';
  return out.str();
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
        if (PrefetchOn() && p.op == Op::kForward) {
          // Its backward problems: the same tensors' shapes and layouts.
          for (const Op op : {Op::kBackwardData, Op::kBackwardFilter}) {
            if (!backward[op == Op::kBackwardData ? 0 : 1]) continue;
            Problem q = p;
            q.op = op;
            const std::string q_key = Key(q, settings, benchmark, limit, tf32, deterministic);
            const std::string q_process_key = std::to_string(index) + " " + q_key;
            if (state.choices.count(q_process_key) != 0 || state.prefetched.count(q_process_key) != 0 ||
                cache.Find(q_key).has_value())
              continue;
            state.prefetched[q_process_key] = Prefetcher::Get().Add(
                [q, device, runtime_compiled = settings.runtime_compiled, is_float, tf32, deterministic] {
                  return ListCandidates(q, device, runtime_compiled, is_float, tf32, deterministic);
                });
          }
        }
        std::optional<std::vector<Listed> > listed;
        if (auto it = state.prefetched.find(process_key); it != state.prefetched.end()) {
          try {
            listed = it->second.get();
          } catch (const std::exception& e) {
            Warn(std::string("gathering cuDNN's candidates ahead failed (") + e.what() + "); gathering them now");
          }
          state.prefetched.erase(it);
          if (listed) ++state.counts.gathered_ahead;
        }
        plan = Tune(graph, handle, pointers, device, stream, limit, settings, is_float, tf32, deterministic,
                    listed ? &*listed : nullptr, &chosen, &state.counts.timed, &state.counts.graph_counted);
        if (plan == nullptr && listed)  // none of the list built here: cuDNN's own candidates, then
          plan = Tune(graph, handle, pointers, device, stream, limit, settings, is_float, tf32, deterministic, nullptr,
                      &chosen, &state.counts.timed, &state.counts.graph_counted);
        if (plan != nullptr) {
          ++state.counts.tuned;
          cache.Store(key, chosen);
        }
      } else {
        plan = Heuristic(graph, handle, settings, is_float, tf32, deterministic, &chosen);
        if (plan != nullptr) ++state.counts.heuristic;
      }
      TORCH_CHECK(plan != nullptr, "cuDNN has no engine for the convolution ", Name(p),
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

class ConvFunction : public torch::autograd::Function<ConvFunction> {
 public:
  // backward_data, backward_filter: whether autograd will ask for x's and
  // w's gradients (the prefetch's hint; grad mode is off in here).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            std::vector<int64_t> geometry, bool runtime_compiled, int64_t late_join_group,
                            bool backward_data, bool backward_filter) {
    const Settings settings{runtime_compiled};
    const bool channels_last = ChannelsLast(x, w);
    const at::MemoryFormat format = Format(channels_last);
    const at::Tensor xc = x.contiguous(format), wc = w.contiguous(format);
    at::Tensor y = at::empty(OutputSize(x, w, geometry), x.options().memory_format(format));
    if (y.numel() > 0)
      Convolve(Op::kForward, {xc, wc, y}, geometry, channels_last, settings, {backward_data, backward_filter});
    ctx->save_for_backward({xc, wc});
    ctx->saved_data["geometry"] = geometry;
    ctx->saved_data["channels_last"] = channels_last;
    ctx->saved_data["runtime_compiled"] = runtime_compiled;
    ctx->saved_data["late_join_group"] = late_join_group;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    const std::vector<int64_t> geometry = ctx->saved_data["geometry"].toIntVector();
    const bool channels_last = ctx->saved_data["channels_last"].toBool();
    const Settings settings{ctx->saved_data["runtime_compiled"].toBool()};
    const at::MemoryFormat format = Format(channels_last);
    const at::Tensor dy = grads[0].contiguous(format);
    at::Tensor dx, dw;
    const bool both = ctx->needs_input_grad(0) && ctx->needs_input_grad(1) && x.numel() > 0;
    if (both && SideStreamsApply(x.device(), plugins::Fork::kGradients)) {
      // Everything allocated on this stream, which waits for the side stream
      // before anything here is freed (joined now), or whose memory goes back
      // to it only behind the side stream's work (left for a later join).
      dx = at::empty(x.sizes(), x.options().memory_format(format));
      dw = at::empty(w.sizes(), w.options().memory_format(format));
      SideStream side(x.device());
      side.Run([&] { Convolve(Op::kBackwardFilter, {x, dw, dy}, geometry, channels_last, settings); });
      Convolve(Op::kBackwardData, {dx, w, dy}, geometry, channels_last, settings);
      const int64_t group = ctx->saved_data["late_join_group"].toInt();
      const bool late = group >= 0 && SideStreamsApply(x.device(), plugins::Fork::kLateJoin);
      if (late)
        side.Leave({x, dy, dw}, group);
      else
        side.Join();
      State& state = GetState();
      const std::lock_guard lock(state.mutex);
      ++state.counts.side_stream_grads;
      if (late) ++state.counts.late_filter_grads;
      return {dx, dw, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    }
    if (ctx->needs_input_grad(0)) {
      dx = at::empty(x.sizes(), x.options().memory_format(format));
      if (dx.numel() > 0) Convolve(Op::kBackwardData, {dx, w, dy}, geometry, channels_last, settings);
    }
    if (ctx->needs_input_grad(1)) {
      dw = at::empty(w.sizes(), w.options().memory_format(format));
      Convolve(Op::kBackwardFilter, {x, dw, dy}, geometry, channels_last, settings);
    }
    return {dx, dw, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
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
                             settings.runtime_compiled, settings.late_join_group, grad && input.requires_grad(),
                             grad && weight.requires_grad());
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

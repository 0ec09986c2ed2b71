#pragma once
// The cuDNN backend pieces of one convolution, for cudnn_conv.cc and its
// tuner (cudnn_tuner.h): the problem as cuDNN sees it, its operation graph,
// engine configurations rebuilt from a stored choice, cuDNN's candidates in
// LibTorch's order, plans and running them. Built where the cuDNN path is
// (TRAINBENCH_CUDNN_CONV).
#include <cudnn.h>
#include <torch/types.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cudnn_conv.h"
#include "cudnn_descriptors.h"
#include "engine_cache.h"

namespace trainbench::plugins::cudnn_conv::detail {

using cudnn_backend::Check;
using cudnn_backend::Descriptor;
using cudnn_backend::DescriptorPtr;
using cudnn_backend::Make;

using Op = cudnn_backend::ConvolutionOp;

inline constexpr const char* kOpNames[] = {"fwd", "bwd-data", "bwd-filter"};

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

// Whether a plan's workspace is within settings.workspace_limit (0: any).
inline bool WithinWorkspaceLimit(const Plan& plan, const Settings& settings) {
  return settings.workspace_limit <= 0 || plan.workspace <= settings.workspace_limit;
}

cudnnDataType_t DataType(at::ScalarType type);

bool ChannelsLast(const at::Tensor& x, const at::Tensor& w);

// The tensor as cuDNN sees it: dims N, C, H, W and the strides of its memory
// format (a tensor made contiguous in that format; size-1 dimensions get the
// format's own strides, as cuDNN expects), aligned as its pointer is.
TensorSpec Spec(const at::Tensor& t, bool channels_last);

// What the choice of engine depends on besides the machine: the operation,
// its tensors and the settings that filter cuDNN's candidates.
std::string Key(const Problem& p, const Settings& settings, bool benchmark, int64_t limit, bool tf32,
                bool deterministic);

cudnnHandle_t Handle(int device);

// The operation graph of one convolution.
std::vector<DescriptorPtr> Graph(const Problem& p, cudnnHandle_t handle);

// A plan for an engine configuration, or none when cuDNN cannot build it.
PlanPtr Finalize(std::vector<DescriptorPtr> keep, const DescriptorPtr& config, cudnnHandle_t handle);

// An engine configuration rebuilt from a stored choice, or none when this
// cuDNN no longer accepts it.
DescriptorPtr ConfigOf(const EngineChoice& choice, const Descriptor& graph, std::vector<DescriptorPtr>* keep);

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
              Candidate* candidate);

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
DescriptorPtr Pack(const std::array<void*, 3>& pointers, void* workspace_ptr);

// Runs a plan on the handle's stream with a pack of Pack().
void Execute(cudnnHandle_t handle, const Plan& plan, const Descriptor& pack);

// Runs a plan on the handle's stream with `workspace_ptr` (at least
// plan.workspace bytes).
void Execute(cudnnHandle_t handle, const Plan& plan, const std::array<void*, 3>& pointers, void* workspace_ptr);

at::Tensor Workspace(int64_t bytes, const at::Device& device);

void Execute(cudnnHandle_t handle, const Plan& plan, const std::array<void*, 3>& pointers, const at::Device& device);

// A candidate as ForEachCandidate gives it, without its configuration
// descriptor (which belongs to the operation graph it was queried on).
struct Listed {
  EngineChoice choice;
  bool runtime_compiled = false;
};

// cuDNN's candidates for a problem, in ForEachCandidate's order, queried on
// this thread's handle.
std::vector<Listed> ListCandidates(const Problem& p, const at::Device& device, bool runtime_compiled, bool is_float,
                                   bool tf32, bool deterministic);

}  // namespace trainbench::plugins::cudnn_conv::detail

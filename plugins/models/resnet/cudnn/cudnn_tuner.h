#pragma once
// cuDNN's autotuning as trainbench runs it (cudnn_conv.cc): the candidates of
// one convolution timed on its real tensors, the fastest chosen. Built where
// the cuDNN path is (TRAINBENCH_CUDNN_CONV).
//
// The convolutions of a ResNet at batch 1024 take 5-30 us on an H200;
// launching one takes the host longer, so a run timed while the GPU waits for
// the host times the host. The runs that decide are therefore queued behind
// a StreamGate, which holds the stream until they are all queued (the GPU's
// time alone). But a kernel's first launch loads its module, which waits for
// the device, so behind a shut gate for the gate; and an engine's kernels for
// a new shape are new kernels (gating the first round for engines that had
// run on other shapes let a gate time out in every run on the H200). Hence
// three rounds:
//  1. every candidate once, back to back, ungated, one wait at the end: it
//     loads the kernels, and its times (the loading, the host's launch rate)
//     only set aside the clearly slow: over kSlowMargin x the fastest;
//  2. the rest once more, behind gates;
//  3. the finalists (within kFinalMargin of round 2's fastest, at most
//     kFinalists of them) kFinalRuns times more, interleaved, behind gates.
// A candidate counts with the best of its gated runs.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "cudnn_plans.h"

namespace trainbench::plugins::cudnn_conv::detail {

/// What one tuning runs on: the convolution's operation graph, this thread's
/// handle, the real tensors (ids 1, 2, 3), their device and the stream.
struct TuneTarget {
  const std::vector<DescriptorPtr>& graph;
  cudnnHandle_t handle;
  std::array<void*, 3> pointers;
  at::Device device;
  cudaStream_t stream;
};

/// Which candidates count: the first `limit` that build (0: all), filtered as
/// LibTorch filters them.
struct TuneRules {
  int64_t limit;
  Settings settings;
  bool is_float, tf32, deterministic;
};

class Tuner {
 public:
  Tuner(const TuneTarget& target, const TuneRules& rules) : target_(target), rules_(rules) {}
  ~Tuner();
  Tuner(const Tuner&) = delete;
  Tuner& operator=(const Tuner&) = delete;

  /// Times the candidates (`listed`, gathered ahead, or cuDNN's own where
  /// null) and returns the fastest's plan, with `choice` set to it; null
  /// where none built or ran. With settings.tune_log, one line on stderr.
  PlanPtr Choose(const std::vector<Listed>* listed, EngineChoice* choice);

  /// Candidates timed (round 1's runs).
  int64_t timed() const { return timed_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Built {
    Candidate candidate;
    PlanPtr plan;
    float first = std::numeric_limits<float>::infinity();
    std::vector<float> gated{};  // ms of its runs in rounds 2 and 3
    bool failed = false;         // did not run here: no candidate
  };
  struct Queued {
    size_t candidate;
    cudaEvent_t start, end;
  };

  void Build(const std::vector<Listed>* listed);
  bool Consider(Candidate& candidate, const std::vector<DescriptorPtr>& keep);
  void AllocateWorkspace();
  void FirstRound();
  void SecondRound();
  void FinalRound();
  PlanPtr Fastest(EngineChoice* choice);
  void Log(const PlanPtr& best, const EngineChoice& choice, bool listed) const;

  cudaEvent_t Event();
  void Queue(size_t i);
  template <class Take>
  void Collect(Take&& take);
  void Gated(const std::vector<size_t>& order);
  float FastestGated(size_t i) const;
  static float BestOf(const Built& b);

  const TuneTarget& target_;
  const TuneRules rules_;
  std::vector<Built> built_;
  at::Tensor workspace_;
  DescriptorPtr pack_;
  std::vector<cudaEvent_t> events_, spare_;
  std::vector<Queued> queued_;
  std::vector<size_t> again_, finalists_;
  bool gates_held_ = true;
  int64_t timed_ = 0;
  // For the tuning log.
  Clock::time_point began_ = Clock::now(), run_start_;
  size_t tried_ = 0, runtime_compiled_ = 0, over_limit_ = 0;
  Clock::duration building_{}, runtime_compiled_building_{};
  HeuristicsTimes heuristics_;
};

/// cuDNN's first heuristic candidate that it can build (the instant
/// heuristics first, the fallback list after), described and built one at a
/// time: no autotuning asked, so nothing more is needed.
PlanPtr Heuristic(const std::vector<DescriptorPtr>& graph, cudnnHandle_t handle, const Settings& settings,
                  bool is_float, bool tf32, bool deterministic, EngineChoice* choice);

}  // namespace trainbench::plugins::cudnn_conv::detail

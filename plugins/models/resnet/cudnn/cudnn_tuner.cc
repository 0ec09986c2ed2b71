#ifdef TRAINBENCH_CUDNN_CONV
#include "cudnn_tuner.h"

#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>

#include "stream_gate.h"

namespace trainbench::plugins::cudnn_conv::detail {
namespace {
constexpr float kSlowMargin = 4.0f, kFinalMargin = 1.15f;
constexpr size_t kFinalists = 6, kFinalRuns = 3, kRunsPerGate = 32;
}  // namespace

Tuner::~Tuner() {
  for (const cudaEvent_t e : events_) cudaEventDestroy(e);
}

PlanPtr Tuner::Choose(const std::vector<Listed>* listed, EngineChoice* choice) {
  Build(listed);
  run_start_ = Clock::now();
  AllocateWorkspace();
  FirstRound();
  SecondRound();
  FinalRound();
  PlanPtr best = Fastest(choice);
  if (rules_.settings.tune_log) Log(best, *choice, listed != nullptr);
  return best;
}

// The first rules_.limit candidates that build (all when 0), in cuDNN's
// order, as LibTorch takes them: from `listed` where they were gathered
// ahead, else asked of cuDNN now.
void Tuner::Build(const std::vector<Listed>* listed) {
  if (listed != nullptr) {
    for (const Listed& l : *listed) {
      const Clock::time_point describe = Clock::now();
      std::vector<DescriptorPtr> keep = target_.graph;
      Candidate candidate{l.choice, ConfigOf(l.choice, *target_.graph.back(), &keep), l.runtime_compiled};
      heuristics_.describing += Clock::now() - describe;
      if (candidate.config != nullptr && !Consider(candidate, keep)) break;
    }
    return;
  }
  ForEachCandidate(
      *target_.graph.back(), rules_.settings.runtime_compiled, rules_.is_float, rules_.tf32, rules_.deterministic,
      [&](Candidate& candidate) { return Consider(candidate, target_.graph); }, &heuristics_);
}

// Builds a candidate's plan from `keep` (the graph, and what its
// configuration was made of); false once `limit` candidates have built.
bool Tuner::Consider(Candidate& candidate, const std::vector<DescriptorPtr>& keep) {
  if (rules_.limit > 0 && static_cast<int64_t>(built_.size()) >= rules_.limit) return false;
  ++tried_;
  const Clock::time_point one = Clock::now();
  PlanPtr plan;
  try {
    plan = Finalize(keep, candidate.config, target_.handle);
  } catch (const c10::Error&) {
    plan = nullptr;  // a descriptor cuDNN refused: not a candidate
  }
  const Clock::duration took = Clock::now() - one;
  building_ += took;
  if (candidate.runtime_compiled) {
    ++runtime_compiled_;
    runtime_compiled_building_ += took;
  }
  if (plan != nullptr && !WithinWorkspaceLimit(*plan, rules_.settings)) {
    ++over_limit_;  // not a candidate under this workspace limit
    return true;
  }
  if (plan != nullptr) built_.push_back({candidate, std::move(plan)});
  return true;
}

// One workspace for every candidate (they run one after another on the
// stream): the largest they need; a candidate whose workspace cannot be had
// is left out, the largest first.
void Tuner::AllocateWorkspace() {
  while (!built_.empty()) {
    const auto largest = std::max_element(built_.begin(), built_.end(), [](const Built& a, const Built& b) {
      return a.plan->workspace < b.plan->workspace;
    });
    try {
      workspace_ = Workspace(largest->plan->workspace, target_.device);
      break;
    } catch (const c10::Error&) {
      built_.erase(largest);
    }
  }
  pack_ = Pack(target_.pointers, workspace_.defined() ? workspace_.data_ptr() : nullptr);
}

// Round 1: every candidate once, ungated.
void Tuner::FirstRound() {
  for (size_t i = 0; i < built_.size(); ++i) Queue(i);
  float fastest = std::numeric_limits<float>::infinity();
  Collect([&](size_t i, float ms) {
    built_[i].first = ms;
    fastest = std::min(fastest, ms);
    ++timed_;
  });
  for (size_t i = 0; i < built_.size(); ++i)
    if (!built_[i].failed && built_[i].first <= kSlowMargin * fastest) again_.push_back(i);
}

// Round 2: those not clearly slow, once more, behind gates.
void Tuner::SecondRound() { Gated(again_); }

// Round 3: the finalists, fastest first, interleaved.
void Tuner::FinalRound() {
  std::vector<size_t> order(built_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return FastestGated(a) < FastestGated(b); });
  for (const size_t i : order) {
    const float ms = FastestGated(i);
    if (finalists_.size() == kFinalists || std::isinf(ms) || !(ms <= kFinalMargin * FastestGated(order.front()))) break;
    finalists_.push_back(i);
  }
  std::vector<size_t> interleaved;
  for (size_t r = 0; r < kFinalRuns && finalists_.size() > 1; ++r)
    interleaved.insert(interleaved.end(), finalists_.begin(), finalists_.end());
  Gated(interleaved);
}

PlanPtr Tuner::Fastest(EngineChoice* choice) {
  PlanPtr best;
  float best_ms = std::numeric_limits<float>::infinity();
  for (const Built& b : built_) {
    const float ms = BestOf(b);
    if (ms < best_ms) {
      best_ms = ms;
      best = b.plan;
      *choice = b.candidate.choice;
      choice->milliseconds = best_ms;  // its own time, as measured
    }
  }
  return best;
}

// One line per tuned operation; bench/tuning_log.py sums them up.
void Tuner::Log(const PlanPtr& best, const EngineChoice& choice, bool listed) const {
  auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  bool chosen_runtime_compiled = false;
  float best_precompiled = std::numeric_limits<float>::infinity();
  // The best time among candidates needing at most 16 MiB, 64 MiB, ... of
  // workspace: what a lower limit would cost this operation.
  constexpr int64_t kMiB = int64_t{1} << 20;
  const int64_t limits[] = {16 * kMiB, 64 * kMiB, 256 * kMiB, 1024 * kMiB, 4096 * kMiB};
  float within[5];
  std::fill(std::begin(within), std::end(within), std::numeric_limits<float>::infinity());
  for (const Built& b : built_) {
    if (b.plan == best) chosen_runtime_compiled = b.candidate.runtime_compiled;
    if (!b.candidate.runtime_compiled) best_precompiled = std::min(best_precompiled, BestOf(b));
    for (size_t k = 0; k < 5; ++k)
      if (b.plan->workspace <= limits[k]) within[k] = std::min(within[k], BestOf(b));
  }
  std::fprintf(stderr,
               "trainbench: cuDNN tuning: %zu candidates, %zu built (%.1f ms), timed in %.1f ms, %.1f ms in all; "
               "engine %lld at %.4f ms%s; %zu runtime-compiled built in %.1f ms; best precompiled %.4f ms; "
               "%zu timed again, %zu finalists%s; heuristics %.1f ms instant, %.1f ms fallback (%zu candidates "
               "only there), describing %.1f ms%s\n",
               tried_, built_.size(), ms(building_), ms(Clock::now() - run_start_), ms(Clock::now() - began_),
               static_cast<long long>(choice.engine), best != nullptr ? choice.milliseconds : 0.f,
               chosen_runtime_compiled ? " (runtime-compiled)" : "", runtime_compiled_, ms(runtime_compiled_building_),
               best_precompiled, again_.size(), finalists_.size(),
               gates_held_ ? "" : "; a gate let go before it was opened", ms(heuristics_.instant),
               ms(heuristics_.fallback), heuristics_.from_fallback, ms(heuristics_.describing),
               listed ? "; candidates gathered ahead" : "");
  std::fprintf(stderr,
               "trainbench: cuDNN tuning workspace: chosen %lld B, tuned in %lld B, %zu over the limit of %lld B; "
               "best within 16 MiB %.4f ms, 64 MiB %.4f ms, 256 MiB %.4f ms, 1 GiB %.4f ms, 4 GiB %.4f ms\n",
               static_cast<long long>(best != nullptr ? best->workspace : 0),
               static_cast<long long>(workspace_.defined() ? workspace_.numel() : 0), over_limit_,
               static_cast<long long>(rules_.settings.workspace_limit), within[0], within[1], within[2], within[3],
               within[4]);
}

// Timed runs: each between two events, read once the stream is waited for.
cudaEvent_t Tuner::Event() {
  if (spare_.empty()) {
    cudaEvent_t e = nullptr;
    C10_CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
    return e;
  }
  const cudaEvent_t e = spare_.back();
  spare_.pop_back();
  return e;
}

void Tuner::Queue(size_t i) {
  const Queued q{i, Event(), Event()};
  try {
    C10_CUDA_CHECK(cudaEventRecord(q.start, target_.stream));
    Execute(target_.handle, *built_[i].plan, *pack_);
    C10_CUDA_CHECK(cudaEventRecord(q.end, target_.stream));
    queued_.push_back(q);
  } catch (const c10::Error&) {
    built_[i].failed = true;
    spare_.insert(spare_.end(), {q.start, q.end});
  }
}

// Waits for the stream and calls `take(candidate, ms)` for every run queued.
template <class Take>
void Tuner::Collect(Take&& take) {
  C10_CUDA_CHECK(cudaStreamSynchronize(target_.stream));
  for (const Queued& q : queued_) {
    float ms = 0;
    C10_CUDA_CHECK(cudaEventElapsedTime(&ms, q.start, q.end));
    take(q.candidate, ms);
    spare_.insert(spare_.end(), {q.start, q.end});
  }
  queued_.clear();
}

// Runs the candidates `order` names (in its order) behind gates of at most
// kRunsPerGate runs each.
void Tuner::Gated(const std::vector<size_t>& order) {
  std::vector<std::unique_ptr<StreamGate>> gates;
  for (size_t k = 0; k < order.size(); k += kRunsPerGate) {
    gates.push_back(std::make_unique<StreamGate>(target_.stream));
    for (size_t j = k; j < std::min(order.size(), k + kRunsPerGate); ++j)
      if (!built_[order[j]].failed) Queue(order[j]);
    gates.back()->Open();
  }
  Collect([&](size_t i, float ms) { built_[i].gated.push_back(ms); });
  for (const auto& gate : gates) gates_held_ = gates_held_ && gate->HeldUntilOpened();
}

float Tuner::FastestGated(size_t i) const {
  const Built& b = built_[i];
  return b.failed || b.gated.empty() ? std::numeric_limits<float>::infinity() : b.gated.front();
}

// What a candidate counts with: the best of its gated runs (none: inf).
float Tuner::BestOf(const Built& b) {
  return b.failed || b.gated.empty() ? std::numeric_limits<float>::infinity()
                                     : *std::min_element(b.gated.begin(), b.gated.end());
}

PlanPtr Heuristic(const std::vector<DescriptorPtr>& graph, cudnnHandle_t handle, const Settings& settings,
                  bool is_float, bool tf32, bool deterministic, EngineChoice* choice) {
  PlanPtr plan;
  ForEachCandidate(*graph.back(), settings.runtime_compiled, is_float, tf32, deterministic, [&](Candidate& candidate) {
    plan = Finalize(graph, candidate.config, handle);
    if (plan != nullptr && !WithinWorkspaceLimit(*plan, settings)) plan = nullptr;
    if (plan != nullptr) *choice = candidate.choice;
    return plan == nullptr;  // go on until one builds
  });
  return plan;
}

}  // namespace trainbench::plugins::cudnn_conv::detail
#endif  // TRAINBENCH_CUDNN_CONV

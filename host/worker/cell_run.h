#pragma once
// One cell's run inside the worker (RunCell, trainer.h), as one object whose
// parts live in three files: setting the cell up and reporting its result
// (trainer.cc), the step loop (step_loop.cc) and evaluation (evaluation.cc).
// Internal to the worker.

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dataset.h"
#include "distributed.h"
#include "epoch_energy.h"
#include "event_sink.h"
#include "kernel_trace.h"
#include "mixed_precision.h"
#include "optimizer.h"
#include "plugin_loader.h"
#include "step_timer.h"
#include "trainbench/protocol/cell_spec.h"

namespace trainbench::worker::cell {

using protocol::CellSpec;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A failure of the cell with a one-line reason.
class CellError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A signal asked the cell to stop.
class Interrupted : public CellError {
 public:
  using CellError::CellError;
};

// The training loss stopped being a number.
class NonFiniteLoss : public CellError {
 public:
  using CellError::CellError;
};

inline void Check(const sdk::Status& status, const std::string& what) {
  if (!status.ok()) throw CellError(what + ": " + status.message());
}

class CellRun {
 public:
  CellRun(const CellSpec& spec, EventSink& sink, Clock::time_point started)
      : s_(spec), sink_(sink), started_(started) {}

  // Once the device is up, a failure for want of its memory ends the cell in
  // one line (the allocator's own paragraph goes to the cell's log).
  int Run();

 private:
  int RunOnDevice();
  bool SetUpDevice(const LoadedPlugin& device_plugin);
  void SetUpModel(const LoadedPlugin& model_plugin);
  int64_t Started(const LoadedPlugin& model_plugin, const LoadedPlugin& device_plugin);
  protocol::Result Result(int64_t steps_per_epoch, const LoadedPlugin& model_plugin);
  void SetEpochTimes(protocol::Result& result, int64_t steps_per_epoch, double sps) const;
  void SetTarget(protocol::Result& result) const;

  // The device's memory figures (SDK 1.6), or what older plugins tell: the
  // peak of what the process held.
  sdk::MemoryFigures Memory();

  // The images the model takes and the classes it tells apart are the
  // dataset's (a plugin whose options do not follow the dataset says so here).
  void CheckModelFitsTheData() const;
  void LoadData();
  torch::Tensor Logits(const torch::Tensor& x);

  // One optimisation step; returns the (detached) loss. Gradients start
  // undefined, so backward writes them instead of zeroing and adding (two
  // kernels per parameter saved). In a captured step they are then
  // allocated from the graph's private pool and every replay rewrites them,
  // as with torch.cuda.graph after zero_grad(set_to_none=True).
  torch::Tensor Step(const torch::Tensor& x, const torch::Tensor& y, bool for_graph = false);

  // Offers the model working copies of its parameters (sdk::WorkingCopies,
  // plugins of SDK 1.5+), and the optimizer their updates inside the
  // backward where the cell has one rank and runs under bf16 autocast
  // (trainer.cc says why).
  void OfferWorkingCopies(const LoadedPlugin& plugin);

  // Data parallel: the mean of every rank's gradients, i.e. the gradient of
  // the combined batch's mean loss.
  void AverageGradients();

  // The energy of each epoch's training: read when it starts, before and
  // after evaluations inside it, and when its last step has finished. A
  // failed read drops the measurement (with the reason), never a guess.
  // Notes an evaluation for the accuracy curve and the time to target;
  // returns whether the cell should stop there (stop_at_target).
  bool RecordEvaluation(double accuracy, double trained_seconds, int64_t steps_per_epoch);
  double Evaluate();

  // Whether the cell's step or time budget is spent. Data parallel, every rank
  // must stop after the same step (their collectives pair up in order), but
  // each has its own clock: every kBudgetCheckSteps steps, rank 0's view of
  // the time budget is broadcast.
  bool BudgetSpent(Clock::time_point train_start);

  // A time budget ends a cell only once a step after the warm-up was timed:
  // a loaded or slow machine still measures something rather than nothing.
  bool TimeBudgetSpent(Clock::time_point train_start) const;

  // The epoch's labels and crops, in one pass at the start of the epoch (the
  // pass counts in the epoch's time, not in any step's). In place: a
  // captured graph reads these very tensors.
  void PrepareEpochBatches();

  // One step on the next batch of the epoch, gathered from the dataset.
  // Everything stays on the device (the batch cursor too), so the same code
  // runs eagerly or inside a CUDA graph.
  void TrainStep(bool for_graph);

  // Adds the durations of the steps timed since the last call; returns the
  // steady-state samples and seconds among them.
  std::pair<int64_t, double> CollectStepTimes(std::vector<double>* durations = nullptr);
  void Train(int64_t steps_per_epoch);
  void StartTraining(int64_t steps_per_epoch);
  bool RunEpoch(int64_t epoch, int64_t steps_per_epoch, Clock::time_point train_start, Clock::time_point& last_report);
  int64_t OneStep(int64_t steps_left);
  bool EvaluateBetweenSteps(Clock::time_point epoch_start, int64_t steps_per_epoch);
  void ReportProgress(int64_t epoch, int64_t epoch_steps, int64_t steps_per_epoch, Clock::duration elapsed);
  bool EndEpoch(int64_t epoch, int64_t epoch_steps, int64_t steps_per_epoch, Clock::time_point epoch_start);

  // A diagnostic's file name without its extension: NAME-cellN in the
  // run's diagnostics folder (a data-parallel rank after the first adds
  // -rankR).
  std::string DiagnosticPath(const protocol::Diagnostics& d, const std::string& name) const;

  const CellSpec& s_;
  EventSink& sink_;
  std::unique_ptr<MixedPrecision> copies_;  // offered to the model (OfferWorkingCopies); outlives it here
  std::shared_ptr<sdk::Device> device_;
  uint32_t device_abi_minor_ = 0;
  std::shared_ptr<sdk::Model> model_;
  sdk::DeviceSettings settings_;
  std::unique_ptr<DeviceDataset> train_, test_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<StepTimer> timer_;
  std::unique_ptr<KernelTrace> kernel_trace_;
  std::unique_ptr<GraphedStep> graphed_;
  std::unique_ptr<Collective> collective_;         // data parallel; null when alone
  std::unique_ptr<CollectiveSum> cross_rank_sum_;  // sync_batchnorm; null otherwise
  int world_ = 1, rank_ = 0;
  int64_t local_batch_ = 0;  // samples per step on this rank
  int64_t flops_ = 0;        // the model's training FLOPs a sample
  int64_t params_ = 0;
  torch::Tensor order_, batches_, cursor_, loss_sum_;
  DeviceDataset::Crops crops_;  // [steps, batch] each
  torch::Tensor epoch_labels_;  // [steps, batch]
  torch::Tensor batch_images_;  // the step's batch, [batch, 3, S, S] in the model's layout
  bool in_graph_step_ = false;
  torch::Tensor scale_, growth_tracker_, found_inf_;
  int64_t steps_done_ = 0;
  int64_t timed_steps_ = 0;  // steps after the warm-up, timed
  Clock::time_point started_;
  double setup_seconds_ = 0, warmup_seconds_ = 0, eval_seconds_ = 0;
  int64_t evaluations_ = 0;
  bool warmup_measured_ = false;
  double trained_seconds_ = 0;     // the finished epochs' training time (evaluation excluded)
  double epoch_eval_seconds_ = 0;  // evaluations inside the current epoch
  std::vector<std::vector<double>> accuracy_curve_;
  double best_accuracy_ = 0;
  std::optional<double> time_to_target_, epochs_to_target_;
  bool stopped_at_target_ = false;
  int64_t last_eval_step_ = -1;
  std::unique_ptr<EpochEnergy> energy_;
  int64_t steps_at_budget_check_ = 0;
  int64_t steady_samples_ = 0;
  double steady_seconds_ = 0;
  std::vector<double> step_seconds_, measured_epoch_seconds_, train_loss_, test_accuracy_;
};

}  // namespace trainbench::worker::cell

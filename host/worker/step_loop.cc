// The step loop of a cell: epochs, steps (eager or replayed from a captured
// graph), timing, progress reports and the budget.
#include <csignal>

#include "autocast_scope.h"
#include "cell_run.h"
#include "interrupt.h"

namespace trainbench::worker::cell {
namespace {

constexpr size_t kMaxReportedSteps = 4096;
// Data parallel with a time budget: how often the ranks agree whether it is spent.
constexpr int64_t kBudgetCheckSteps = 4;

// Learning rate for `epoch` (0-based) under the cell's schedule.
double LearningRate(const protocol::TrainingSettings& t, int64_t epoch) {
  const double lr = t.optimizer.lr;
  if (t.schedule.name == "step") {
    return lr * std::pow(t.schedule.gamma, static_cast<double>(epoch / std::max<int64_t>(t.schedule.step_size, 1)));
  }
  if (t.schedule.name == "cosine") {
    const double pi = std::acos(-1.0);
    return 0.5 * lr * (1.0 + std::cos(pi * static_cast<double>(epoch) / static_cast<double>(t.epochs)));
  }
  return lr;
}

}  // namespace

torch::Tensor CellRun::Logits(const torch::Tensor& x) {
  AutocastScope autocast(settings_.device.type(), settings_.amp, /*cache=*/!in_graph_step_);
  torch::Tensor logits;
  Check(model_->Forward(x, &logits), "model '" + s_.model.name + "' forward");
  return logits;
}

// One optimisation step; returns the (detached) loss. Gradients start
// undefined, so backward writes them instead of zeroing and adding (two
// kernels per parameter saved). In a captured step they are then
// allocated from the graph's private pool and every replay rewrites them,
// as with torch.cuda.graph after zero_grad(set_to_none=True).
torch::Tensor CellRun::Step(const torch::Tensor& x, const torch::Tensor& y, bool for_graph) {
  for (auto& p : model_->module().parameters()) p.mutable_grad() = torch::Tensor();
  in_graph_step_ = for_graph;
  torch::Tensor loss = torch::nn::functional::cross_entropy(Logits(x).to(torch::kFloat32), y);
  if (settings_.amp == sdk::Amp::kFp16) {
    // Dynamic loss scaling, as torch.cuda.amp.GradScaler does.
    if (!scale_.defined()) {
      scale_ = torch::full({1}, 65536.0, torch::TensorOptions().device(settings_.device));
      growth_tracker_ = torch::zeros({1}, torch::TensorOptions().dtype(torch::kInt32).device(settings_.device));
      found_inf_ = torch::zeros({1}, torch::TensorOptions().device(settings_.device));
    }
    (loss * scale_).backward();
    AverageGradients();
    std::vector<torch::Tensor> grads;
    for (auto& p : model_->module().parameters())
      if (p.grad().defined()) grads.push_back(p.grad());
    found_inf_.zero_();
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, scale_.reciprocal());
    if (found_inf_.item<float>() == 0.0f) optimizer_->Step();
    at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, 2.0, 0.5, 2000);
  } else {
    // Updates during the backward (captured steps on one GPU): none where
    // the gradients are still to be averaged over ranks.
    if (!collective_) optimizer_->BeginBackward();
    loss.backward();
    AverageGradients();
    optimizer_->Step();
  }
  return loss.detach();
}

// Data parallel: the mean of every rank's gradients, i.e. the gradient of
// the combined batch's mean loss.
void CellRun::AverageGradients() {
  if (!collective_) return;
  std::vector<torch::Tensor> grads;
  for (auto& p : model_->module().parameters())
    if (p.grad().defined()) grads.push_back(p.grad());
  collective_->AllReduceSum(grads, 1.0 / static_cast<double>(world_));
}

// Whether the cell's step or time budget is spent. Data parallel, every rank
// must stop after the same step (their collectives pair up in order), but
// each has its own clock: every kBudgetCheckSteps steps, rank 0's view of
// the time budget is broadcast.
bool CellRun::BudgetSpent(Clock::time_point train_start) {
  if (s_.measurement.max_steps && steps_done_ >= *s_.measurement.max_steps) return true;
  if (!s_.measurement.time_budget_seconds) return false;
  if (!collective_) return TimeBudgetSpent(train_start);
  if (steps_done_ - steps_at_budget_check_ < kBudgetCheckSteps) return false;
  steps_at_budget_check_ = steps_done_;
  torch::Tensor flag =
      torch::full({1}, TimeBudgetSpent(train_start) ? 1.0 : 0.0, torch::TensorOptions().device(settings_.device));
  collective_->Broadcast({flag});
  return flag.item<double>() > 0;
}

// A time budget ends a cell only once a step after the warm-up was timed:
// a loaded or slow machine still measures something rather than nothing.
bool CellRun::TimeBudgetSpent(Clock::time_point train_start) const {
  return timed_steps_ > 0 && Seconds(Clock::now() - train_start) >= *s_.measurement.time_budget_seconds;
}

// The epoch's labels and crops, in one pass at the start of the epoch (the
// pass counts in the epoch's time, not in any step's). In place: a
// captured graph reads these very tensors.
void CellRun::PrepareEpochBatches() {
  torch::NoGradGuard no_grad;
  const DeviceDataset::Crops crops = train_->DrawCrops(batches_.numel(), s_.training.augment);
  crops_.rows.view({-1}).copy_(crops.rows);
  crops_.columns.view({-1}).copy_(crops.columns);
  epoch_labels_.view({-1}).copy_(train_->Labels(batches_.reshape({-1})));
}

// One step on the next batch of the epoch, gathered from the dataset.
// Everything stays on the device (the batch cursor too), so the same code
// runs eagerly or inside a CUDA graph.
void CellRun::TrainStep(bool for_graph) {
  train_->Batch(batches_, crops_, cursor_, batch_images_);
  const torch::Tensor y = epoch_labels_.index_select(0, cursor_).view({-1});
  cursor_ += 1;
  loss_sum_ += Step(batch_images_, y, for_graph);
}

// Adds the durations of the steps timed since the last call; returns the
// steady-state samples and seconds among them.
std::pair<int64_t, double> CellRun::CollectStepTimes(std::vector<double>* durations) {
  int64_t samples = 0;
  double seconds = 0;
  std::vector<double> collected = timer_->Collect();
  if (durations != nullptr) *durations = collected;
  for (double d : collected) {
    step_seconds_.push_back(d);
    steady_seconds_ += d;
    steady_samples_ += s_.training.batch_size;
    seconds += d;
    samples += s_.training.batch_size;
  }
  return {samples, seconds};
}

void CellRun::Train(int64_t steps_per_epoch) {
  StartTraining(steps_per_epoch);
  const Clock::time_point train_start = Clock::now();
  setup_seconds_ = Seconds(train_start - started_);
  Clock::time_point last_report = train_start;
  bool stop = false;
  double current_lr = -1;
  for (int64_t epoch = 0; epoch < s_.training.epochs && !stop; ++epoch) {
    const double lr = LearningRate(s_.training, epoch);
    if (lr != current_lr) {
      optimizer_->SetLearningRate(lr);
      if (graphed_) graphed_->Invalidate();  // the lr is baked into the graph
      current_lr = lr;
    }
    stop = RunEpoch(epoch, steps_per_epoch, train_start, last_report);
  }
}

// The tensors the steps read and write (a captured graph reads these very
// ones), the step timer, a kernel trace and the graphed step.
void CellRun::StartTraining(int64_t steps_per_epoch) {
  model_->module().train();
  auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(settings_.device);
  order_ = torch::empty({train_->size()}, i64);
  // The epoch's batches: rows of the order (a view: it follows order_).
  // Data parallel: each rank takes its slice of every combined batch.
  batches_ = order_.narrow(0, 0, steps_per_epoch * s_.training.batch_size)
                 .view({steps_per_epoch, s_.training.batch_size})
                 .narrow(1, rank_ * local_batch_, local_batch_);
  cursor_ = torch::zeros({1}, i64);
  crops_ = {torch::empty({steps_per_epoch, local_batch_}, i64), torch::empty({steps_per_epoch, local_batch_}, i64)};
  batch_images_ = train_->NewBatch(local_batch_);
  epoch_labels_ = torch::empty({steps_per_epoch, local_batch_}, i64);
  loss_sum_ = torch::zeros({}, torch::TensorOptions().device(settings_.device));
  timer_ = MakeStepTimer(settings_, *device_);
  const protocol::Diagnostics diagnostics = s_.diagnostics.value_or(protocol::Diagnostics{});
  if (diagnostics.kernel_trace_steps > 0)
    kernel_trace_ = MakeKernelTrace(settings_.device, DiagnosticPath(diagnostics, "kernel-trace") + ".json",
                                    diagnostics.kernel_trace_steps);
  if (settings_.cuda_graph)
    graphed_ = MakeGraphedStep(
        [this] { TrainStep(/*for_graph=*/true); }, local_batch_ * train_->image_size() * train_->image_size(),
        diagnostics.graph_dump ? DiagnosticPath(diagnostics, "graph") : "", GraphFillOption(s_.device.options));
}

// One epoch's steps, evaluations and reports; whether the cell stops after
// it (a budget spent, the target reached).
bool CellRun::RunEpoch(int64_t epoch, int64_t steps_per_epoch, Clock::time_point train_start,
                       Clock::time_point& last_report) {
  // In place: a captured graph reads these very tensors.
  order_.copy_(train_->Permutation());
  if (collective_) collective_->Broadcast({order_});  // one order for all ranks
  cursor_.zero_();
  loss_sum_.zero_();
  int64_t epoch_steps = 0;
  Check(device_->Synchronize(), "device synchronize");
  const Clock::time_point epoch_start = Clock::now();
  energy_->StartEpoch();
  PrepareEpochBatches();
  timer_->Begin();
  bool stop = false;
  while (epoch_steps < steps_per_epoch) {
    if (!warmup_measured_ && steps_done_ >= s_.measurement.warmup_steps) {
      // The warm-up ends here: what the device still has queued is its.
      Check(device_->Synchronize(), "device synchronize");
      warmup_seconds_ = Seconds(Clock::now() - train_start);
      warmup_measured_ = true;
    }
    const int64_t ran = OneStep(steps_per_epoch - epoch_steps);
    epoch_steps += ran;
    stop = BudgetSpent(train_start);
    if (const auto every = s_.measurement.eval_every_steps;
        every && steps_done_ % *every < ran && epoch_steps < steps_per_epoch && !stop)
      stop |= EvaluateBetweenSteps(epoch_start, steps_per_epoch);
    if (const int sig = InterruptSignal(); sig != 0) {
      throw Interrupted(std::string("interrupted by ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") + " at epoch " +
                        std::to_string(epoch + 1) + " step " + std::to_string(epoch_steps));
    }
    const Clock::time_point now = Clock::now();
    if (Seconds(now - last_report) >= s_.measurement.progress_interval_seconds || stop) {
      ReportProgress(epoch, epoch_steps, steps_per_epoch, now - train_start);
      last_report = now;
    }
    if (stop) break;
  }
  return EndEpoch(epoch, epoch_steps, steps_per_epoch, epoch_start) || stop;
}

// One step: the captured graph's replay, or its capture (kCaptureSteps
// steps) where enough of the epoch is left, otherwise an eager step; returns
// the steps run. Warm-up steps and a capture are trained on but not timed.
// Once a graph is held, every step replays it: an eager step beside it would
// take a second step's worth of memory outside the graph's pool.
int64_t CellRun::OneStep(int64_t steps_left) {
  int64_t ran = 1;
  if (graphed_ && steps_left >= graphed_->NextRunSteps()) {
    ran = graphed_->Run();
  } else {
    TrainStep(/*for_graph=*/false);
  }
  const bool timed = ran == 1 && steps_done_ >= s_.measurement.warmup_steps;
  timer_->Mark(timed);
  if (timed && kernel_trace_) kernel_trace_->AfterTimedStep();
  timed_steps_ += timed ? 1 : 0;
  steps_done_ += ran;
  return ran;
}

// An evaluation between steps: its time is not the epoch's, and the step
// timer starts again after it (a kernel trace ends). Whether the cell stops
// there (stop_at_target).
bool CellRun::EvaluateBetweenSteps(Clock::time_point epoch_start, int64_t steps_per_epoch) {
  if (kernel_trace_) kernel_trace_->Interrupt();
  CollectStepTimes();
  energy_->Pause();
  const double trained = trained_seconds_ + Seconds(Clock::now() - epoch_start) - epoch_eval_seconds_;
  const Clock::time_point eval_start = Clock::now();
  const double accuracy = Evaluate();
  epoch_eval_seconds_ += Seconds(Clock::now() - eval_start);
  eval_seconds_ += Seconds(Clock::now() - eval_start);
  ++evaluations_;
  const bool stop = RecordEvaluation(accuracy, trained, steps_per_epoch);
  energy_->Resume();
  timer_->Begin();
  return stop;
}

// A "progress" event: the steps timed since the last, the epoch's mean
// loss so far (a loss that is no number ends the cell), memory.
void CellRun::ReportProgress(int64_t epoch, int64_t epoch_steps, int64_t steps_per_epoch, Clock::duration elapsed) {
  std::vector<double> durations;
  const auto [report_samples, report_seconds] = CollectStepTimes(&durations);
  // Step durations feed the host's histogram; past a few thousand a
  // second, an even sample of them is enough.
  if (durations.size() > kMaxReportedSteps) {
    std::vector<double> sampled;
    for (size_t i = 0; i < kMaxReportedSteps; ++i)
      sampled.push_back(durations[i * durations.size() / kMaxReportedSteps]);
    durations.swap(sampled);
  }
  const double mean_loss = loss_sum_.item<double>() / static_cast<double>(epoch_steps);
  if (!std::isfinite(mean_loss)) {
    throw NonFiniteLoss("training loss became " + std::to_string(mean_loss) + " at epoch " + std::to_string(epoch + 1) +
                        " step " + std::to_string(epoch_steps) + " (lower the learning rate?)");
  }
  protocol::Progress progress;
  progress.epoch = epoch + 1;
  progress.step = epoch_steps;
  progress.steps_per_epoch = steps_per_epoch;
  progress.steps_done = steps_done_;
  progress.samples_done = steps_done_ * s_.training.batch_size;
  progress.loss = mean_loss;
  progress.samples_per_second = report_seconds > 0 ? static_cast<double>(report_samples) / report_seconds : 0.0;
  progress.step_seconds = std::move(durations);
  progress.memory_bytes = device_->MemoryInUseBytes();
  const sdk::MemoryFigures memory = Memory();
  if (memory.peak_reserved >= 0) progress.peak_memory_bytes = memory.peak_reserved;
  if (memory.peak_allocated >= 0) progress.peak_allocated_bytes = memory.peak_allocated;
  progress.elapsed_seconds = Seconds(elapsed);
  sink_.Emit(progress);
}

// An epoch's end (evaluation, a new order, maybe a new graph) is no steady
// step: a kernel trace ends before it. The epoch's loss and accuracy, its
// time when whole, and the "epoch" event; whether the cell stops there.
bool CellRun::EndEpoch(int64_t epoch, int64_t epoch_steps, int64_t steps_per_epoch, Clock::time_point epoch_start) {
  if (kernel_trace_) kernel_trace_->Interrupt();
  CollectStepTimes();  // waits for the epoch's last step
  energy_->EndEpoch();
  const double epoch_seconds = Seconds(Clock::now() - epoch_start) - epoch_eval_seconds_;
  epoch_eval_seconds_ = 0;
  trained_seconds_ += epoch_seconds;
  if (collective_) {
    // The combined batch's loss: the mean over ranks.
    collective_->AllReduceSum({loss_sum_}, 1.0 / static_cast<double>(world_));
  }
  const double mean_loss = loss_sum_.item<double>() / static_cast<double>(epoch_steps);
  if (!std::isfinite(mean_loss)) throw NonFiniteLoss("training loss became nan in epoch " + std::to_string(epoch + 1));
  train_loss_.push_back(mean_loss);
  bool stop = false;
  double accuracy = accuracy_curve_.empty() ? 0.0 : accuracy_curve_.back()[2];
  if (last_eval_step_ != steps_done_) {  // not evaluated at this very step already
    const Clock::time_point eval_start = Clock::now();
    accuracy = Evaluate();  // reads its result: the device has finished
    eval_seconds_ += Seconds(Clock::now() - eval_start);
    ++evaluations_;
    stop = RecordEvaluation(accuracy, trained_seconds_, steps_per_epoch);
  }
  test_accuracy_.push_back(accuracy);
  const bool complete = epoch_steps == steps_per_epoch;
  if (complete) measured_epoch_seconds_.push_back(epoch_seconds);
  // Stopped at the target: the partial epoch is real time, not to project.
  if (!complete && stopped_at_target_) measured_epoch_seconds_.push_back(epoch_seconds);
  sink_.Emit(protocol::Epoch{epoch + 1, complete, epoch_seconds, epoch_steps, mean_loss, accuracy});
  return stop;
}

}  // namespace trainbench::worker::cell

#include "trainer.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "autocast_scope.h"
#include "dataset.h"
#include "distributed.h"
#include "epoch_energy.h"
#include "interrupt.h"
#include "kernel_trace.h"
#include "mixed_precision.h"
#include "optimizer.h"
#include "out_of_memory.h"
#include "path_taken.h"
#include "plugin_loader.h"
#include "step_timer.h"

namespace trainbench::worker {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr size_t kMaxReportedSteps = 4096;
// Data parallel with a time budget: how often the ranks agree whether it is spent.
constexpr int64_t kBudgetCheckSteps = 4;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

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

void Check(const sdk::Status& status, const std::string& what) {
  if (!status.ok()) throw CellError(what + ": " + status.message());
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

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

// Converts 4-D parameters to NHWC in place. Always restrided, as PyTorch's
// Module.to(memory_format=...) does: a 1x1 convolution's NCHW weight also
// passes as channels_last-contiguous (size-1 dimensions are not checked), so
// .contiguous(ChannelsLast) would keep its NCHW strides, unlike PyTorch's.
// (Suspected, wrongly, of the weight-gradient transposes in trainbench's
// ResNet18 graph: docs/results/raw/gpu-optimisation-notes.md, change 8.)
void ToChannelsLast(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) {
    if (p.dim() != 4) continue;
    torch::Tensor nhwc = torch::empty_like(p.data(), torch::MemoryFormat::ChannelsLast);
    nhwc.copy_(p.data());
    p.set_data(nhwc);
  }
}

class CellRun {
 public:
  CellRun(const CellSpec& spec, EventSink& sink, Clock::time_point started)
      : s_(spec), sink_(sink), started_(started) {}

  // Once the device is up, a failure for want of its memory ends the cell in
  // one line (the allocator's own paragraph goes to the cell's log).
  int Run() {
    try {
      return RunOnDevice();
    } catch (const std::exception& e) {
      if (device_ == nullptr || !IsOutOfMemory(e)) throw;
      std::fprintf(stderr, "error: %s\n", e.what());
      throw CellError(OutOfMemoryLine(Memory(), {s_.training.batch_size, s_.device.name}));
    }
  }

 private:
  int RunOnDevice() {
    LoadedPlugin model_plugin = LoadPlugin(s_.model.path);
    LoadedPlugin device_plugin = LoadPlugin(s_.device.path);
    device_ = CreateDevice(device_plugin, s_.device.options);
    device_abi_minor_ = device_plugin.descriptor->abi_minor;
    std::string why_not;
    if (!device_->Available(&why_not)) {
      sink_.Emit(protocol::Skipped{"device '" + s_.device.name + "' unavailable: " + why_not});
      return 0;
    }
    Check(device_->Setup(), "device setup");
    settings_ = device_->Settings();
    torch::manual_seed(s_.seed);
    if (s_.distributed && s_.distributed->world_size > 1) {
      if (s_.training.batch_size % s_.distributed->world_size != 0) {
        throw CellError("batch_size " + std::to_string(s_.training.batch_size) + " does not split evenly over " +
                        std::to_string(s_.distributed->world_size) + " ranks");
      }
      if (settings_.cuda_graph) {
        throw CellError("cuda_graph is not supported for data-parallel cells yet: set it false for several GPUs");
      }
      collective_ = ConnectCollective(*s_.distributed, settings_.device);
      world_ = collective_->world_size();
      rank_ = collective_->rank();
    }
    local_batch_ = s_.training.batch_size / world_;

    model_ = CreateModel(model_plugin, s_.model.options);
    CheckModelFitsTheData();
    int64_t flops = 0;
    Check(model_->TrainingFlopsPerSample(&flops), "model '" + s_.model.name + "'");
    const int64_t params = model_->ParameterCount();

    LoadData();
    torch::nn::Module& module = model_->module();
    module.to(settings_.device);
    if (settings_.channels_last) ToChannelsLast(module);
    if (collective_) {
      // Every rank starts from rank 0's weights, as DistributedDataParallel does.
      torch::NoGradGuard no_grad;
      collective_->Broadcast(module.parameters());
      collective_->Broadcast(module.buffers());
    }
    if (collective_ && s_.distributed->sync_batchnorm) {
      if (model_plugin.descriptor->abi_minor < 1) {
        throw CellError("sync_batchnorm: model plugin '" + s_.model.name + "' was built against SDK ABI 1." +
                        std::to_string(model_plugin.descriptor->abi_minor) +
                        ", which cannot synchronise batch normalisation; rebuild it against SDK 1.1 or newer");
      }
      cross_rank_sum_ = std::make_unique<CollectiveSum>(*collective_);
      Check(model_->SyncBatchNorm(cross_rank_sum_.get()), "sync_batchnorm: model '" + s_.model.name + "'");
    }
    optimizer_ = MakeOptimizer(s_.training.optimizer, OfferWorkingCopies(model_plugin));

    const int64_t steps_per_epoch = train_->size() / s_.training.batch_size;
    if (steps_per_epoch < 1) {
      throw CellError("batch_size " + std::to_string(s_.training.batch_size) + " is larger than the " +
                      std::to_string(train_->size()) + " training samples");
    }
    json hardware = json::parse(device_->DescribeJson(), nullptr, false);
    protocol::Started started;
    started.params = params;
    started.flops_per_sample = flops;
    started.hardware = hardware;
    started.steps_per_epoch = steps_per_epoch;
    started.train_size = train_->size();
    started.test_size = test_->size();
    started.ranks = world_;
    started.rank = rank_;
    started.plugins = {{{"name", s_.model.name}, {"version", model_plugin.descriptor->version}},
                       {{"name", s_.device.name}, {"version", device_plugin.descriptor->version}}};
    sink_.Emit(started);
    energy_ = std::make_unique<EpochEnergy>(OpenEnergyMeter(hardware));
    if (collective_ && energy_->measuring() && energy_->source() != "nvml" && rank_ != 0) {
      // A package counter (RAPL) covers every rank on the machine: rank 0
      // reads it for the cell. Each rank reads its own GPU (NVML); the host
      // adds them up.
      energy_->Drop("rank " + std::to_string(rank_) + ": the machine's package counter is read by rank 0");
    }
    device_->ResetPeakMemory();

    Train(steps_per_epoch);

    const double sps = steady_seconds_ > 0 ? static_cast<double>(steady_samples_) / steady_seconds_ : 0.0;
    if (sps <= 0) throw CellError("no steady-state steps were timed: raise max_steps (or epochs) above warmup_steps");
    std::vector<double> epoch_seconds = measured_epoch_seconds_;
    // A cell stopped at its target trained what it needed: nothing to project.
    const bool projected =
        !stopped_at_target_ && static_cast<int64_t>(measured_epoch_seconds_.size()) < s_.training.epochs;
    if (projected) {
      // Unfinished epochs take what steady-state throughput says they would.
      const double projected_epoch = static_cast<double>(steps_per_epoch * s_.training.batch_size) / sps;
      epoch_seconds.resize(static_cast<size_t>(s_.training.epochs), projected_epoch);
    }
    double total = 0;
    for (double e : epoch_seconds) total += e;
    protocol::Result result;
    result.params = params;
    result.flops_per_sample = flops;
    result.samples_per_second = sps;
    result.achieved_tflops = sps * static_cast<double>(flops) / 1e12;
    result.step_seconds_median = Quantile(step_seconds_, 0.5);
    result.step_seconds_p90 = Quantile(step_seconds_, 0.9);
    result.steps = steps_done_;
    result.steady_steps = static_cast<int64_t>(step_seconds_.size());
    result.epoch_seconds = epoch_seconds;
    result.measured_epochs = static_cast<int64_t>(measured_epoch_seconds_.size());
    result.train_seconds = total;
    result.setup_seconds = setup_seconds_;
    result.warmup_seconds = warmup_seconds_;
    result.eval_seconds = eval_seconds_;
    result.evaluations = evaluations_;
    result.accuracy_curve = accuracy_curve_;
    // Over the same epochs' training time (evaluation excluded).
    energy_->Fill(result, trained_seconds_, steps_done_ * s_.training.batch_size);
    if (const auto target = s_.measurement.target_accuracy) {
      result.time_to_target_seconds = time_to_target_;
      result.epochs_to_target = epochs_to_target_;
      if (!time_to_target_) {
        char why[160];
        std::snprintf(why, sizeof(why), "not reached: the best test accuracy was %.4f (target %.4f) in %lld step(s)",
                      best_accuracy_, *target, static_cast<long long>(steps_done_));
        result.target_reason = why;
      }
      result.stopped_at_target = stopped_at_target_;
    }
    result.train_loss = train_loss_;
    result.test_accuracy = test_accuracy_;
    result.projected = projected;
    const sdk::MemoryFigures memory = Memory();
    result.peak_memory_bytes = memory.peak_reserved;
    if (memory.peak_allocated >= 0) result.peak_allocated_bytes = memory.peak_allocated;
    result.ranks = world_;
    result.rank = rank_;
    result.backend = collective_ ? collective_->backend() : std::string();
    result.hardware = json::parse(device_->DescribeJson(), nullptr, false);
    if (collective_) result.sync_batchnorm = cross_rank_sum_ != nullptr;
    try {
      result.path_taken = PathTaken(*model_, model_plugin.descriptor->abi_minor, graphed_.get(), copies_.get());
    } catch (const PathRefused& e) {
      throw std::runtime_error("model plugin '" + s_.model.name + "': " + e.what() +
                               "; a path is a JSON object of names to numbers, strings, booleans or objects "
                               "(trainbench/sdk/model.h): the cell's record is not kept");
    }
    sink_.Emit(result);
    return 0;
  }

  // The device's memory figures (SDK 1.6), or what older plugins tell: the
  // peak of what the process held.
  sdk::MemoryFigures Memory() {
    sdk::MemoryFigures memory;
    if (device_abi_minor_ >= 6) memory = device_->Memory();
    if (memory.peak_reserved < 0) memory.peak_reserved = device_->PeakMemoryBytes();
    return memory;
  }

  // The images the model takes and the classes it tells apart are the
  // dataset's (a plugin whose options do not follow the dataset says so here).
  void CheckModelFitsTheData() const {
    const auto shape = model_->InputShape();
    const int64_t size = s_.dataset.ImageSize();
    if (shape[0] != 3 || shape[1] != size || shape[2] != size) {
      throw CellError("model '" + s_.model.name + "' takes " + std::to_string(shape[0]) + "x" +
                      std::to_string(shape[1]) + "x" + std::to_string(shape[2]) +
                      " inputs, but the dataset's images are 3x" + std::to_string(size) + "x" + std::to_string(size) +
                      " (dataset.image_size); use a model for that size");
    }
    if (model_->NumClasses() < s_.dataset.NumClasses()) {
      throw CellError("model '" + s_.model.name + "' tells " + std::to_string(model_->NumClasses()) +
                      " classes apart, but the dataset has " + std::to_string(s_.dataset.NumClasses()) +
                      " (dataset.num_classes); set the model's num_classes");
    }
  }

  void LoadData() {
    data::ImageSet train, test;
    if (s_.dataset.kind == "synthetic") {
      train = SyntheticImageSet(s_.dataset.train_size.value_or(50000), s_.seed, s_.dataset.ImageSize(),
                                s_.dataset.NumClasses());
      test = SyntheticImageSet(s_.dataset.test_size.value_or(10000), s_.seed + 1, s_.dataset.ImageSize(),
                               s_.dataset.NumClasses());
    } else {
      train = data::LoadSplit(s_.dataset.path, data::Split::kTrain, s_.dataset.train_size);
      test = data::LoadSplit(s_.dataset.path, data::Split::kTest, s_.dataset.test_size);
    }
    train_ = std::make_unique<DeviceDataset>(train, settings_.device, settings_.channels_last);
    test_ = std::make_unique<DeviceDataset>(test, settings_.device, settings_.channels_last);
  }

  torch::Tensor Logits(const torch::Tensor& x) {
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
  torch::Tensor Step(const torch::Tensor& x, const torch::Tensor& y, bool for_graph = false) {
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

  // Offers the model working copies of its parameters (sdk::WorkingCopies,
  // plugins of SDK 1.5+) and returns the parameters the optimizer updates:
  // all of them, but those the working copies update themselves. They do
  // (mixed-precision SGD inside the backward, mixed_precision.h) where the
  // optimizer is SGD with `overlap`, the cell has one rank (no gradients to
  // average first), the forward runs under bf16 autocast (fp16's loss
  // scaling unscales gradients first; without autocast there is no cast to
  // save) and every listed parameter is a dense fp32 tensor on the one CUDA
  // device; elsewhere they cast (one kernel per group each way) and leave
  // the update to the optimizer. What the model lists is checked: parameters
  // of its module, each once.
  std::vector<torch::Tensor> OfferWorkingCopies(const LoadedPlugin& plugin) {
    std::vector<torch::Tensor> params = model_->module().parameters();
    if (plugin.descriptor->abi_minor < 5) return params;
    copies_ = std::make_unique<MixedPrecision>();
    std::vector<std::vector<torch::Tensor>> groups;
    const std::string who = "model '" + s_.model.name + "'";
    Check(model_->UseWorkingCopies(copies_.get(), &groups), who);
    std::set<const void*> listed;
    for (const auto& group : groups) {
      for (const torch::Tensor& t : group) {
        const void* impl = t.defined() ? t.unsafeGetTensorImpl() : nullptr;
        const bool ours = std::any_of(params.begin(), params.end(),
                                      [&](const torch::Tensor& p) { return p.unsafeGetTensorImpl() == impl; });
        if (!ours || !listed.insert(impl).second) {
          throw CellError(who + " listed for working copies a tensor that is " +
                          (ours ? "listed twice" : "not one of its parameters") +
                          ": a fault of the plugin; rebuild it, or run another model");
        }
      }
    }
    const protocol::OptimizerSettings& o = s_.training.optimizer;
    std::optional<SgdArithmetic> sgd;
    if (o.name == "sgd" && o.overlap && !collective_ && settings_.amp == sdk::Amp::kBf16 &&
        MixedPrecision::UpdatesApply(groups))
      sgd = SgdArithmetic{o.lr, o.momentum, o.weight_decay, o.nesterov};
    copies_->Adopt(std::move(groups), sgd);
    if (!copies_->Updates()) return params;
    std::vector<torch::Tensor> left;
    for (const torch::Tensor& p : params)
      if (listed.count(p.unsafeGetTensorImpl()) == 0) left.push_back(p);
    return left;
  }

  // Data parallel: the mean of every rank's gradients, i.e. the gradient of
  // the combined batch's mean loss.
  void AverageGradients() {
    if (!collective_) return;
    std::vector<torch::Tensor> grads;
    for (auto& p : model_->module().parameters())
      if (p.grad().defined()) grads.push_back(p.grad());
    collective_->AllReduceSum(grads, 1.0 / static_cast<double>(world_));
  }

  // The energy of each epoch's training: read when it starts, before and
  // after evaluations inside it, and when its last step has finished. A
  // failed read drops the measurement (with the reason), never a guess.
  // Notes an evaluation for the accuracy curve and the time to target;
  // returns whether the cell should stop there (stop_at_target).
  bool RecordEvaluation(double accuracy, double trained_seconds, int64_t steps_per_epoch) {
    const double epochs = static_cast<double>(steps_done_) / static_cast<double>(steps_per_epoch);
    accuracy_curve_.push_back({trained_seconds, epochs, accuracy});
    last_eval_step_ = steps_done_;
    best_accuracy_ = std::max(best_accuracy_, accuracy);
    const auto target = s_.measurement.target_accuracy;
    if (!target || time_to_target_ || accuracy < *target) return false;
    time_to_target_ = trained_seconds;
    epochs_to_target_ = epochs;
    stopped_at_target_ = s_.measurement.stop_at_target;
    return stopped_at_target_;
  }

  double Evaluate() {
    torch::NoGradGuard no_grad;
    torch::nn::Module& module = model_->module();
    module.eval();
    auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(settings_.device);
    torch::Tensor correct = torch::zeros({1}, i64);
    // Data parallel: rank 0's running statistics everywhere, each rank a
    // slice of the test set, counts summed.
    if (collective_) collective_->Broadcast(module.buffers());
    const int64_t first = test_->size() * rank_ / world_, last = test_->size() * (rank_ + 1) / world_;
    for (int64_t start = first; start < last; start += s_.measurement.eval_batch_size) {
      const int64_t end = std::min(start + s_.measurement.eval_batch_size, last);
      torch::Tensor idx = torch::arange(start, end, i64);
      torch::Tensor pred = Logits(test_->Images(idx, false)).argmax(1);
      correct += (pred == test_->Labels(idx)).sum();
    }
    module.train();
    if (collective_) collective_->AllReduceSum({correct});
    return static_cast<double>(correct.item<int64_t>()) / static_cast<double>(test_->size());
  }

  // Whether the cell's step or time budget is spent. Data parallel, every rank
  // must stop after the same step (their collectives pair up in order), but
  // each has its own clock: every kBudgetCheckSteps steps, rank 0's view of
  // the time budget is broadcast.
  bool BudgetSpent(Clock::time_point train_start) {
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
  bool TimeBudgetSpent(Clock::time_point train_start) const {
    return timed_steps_ > 0 && Seconds(Clock::now() - train_start) >= *s_.measurement.time_budget_seconds;
  }

  // The epoch's labels and crops, in one pass at the start of the epoch (the
  // pass counts in the epoch's time, not in any step's). In place: a
  // captured graph reads these very tensors.
  void PrepareEpochBatches() {
    torch::NoGradGuard no_grad;
    const DeviceDataset::Crops crops = train_->DrawCrops(batches_.numel(), s_.training.augment);
    crops_.rows.view({-1}).copy_(crops.rows);
    crops_.columns.view({-1}).copy_(crops.columns);
    epoch_labels_.view({-1}).copy_(train_->Labels(batches_.reshape({-1})));
  }

  // One step on the next batch of the epoch, gathered from the dataset.
  // Everything stays on the device (the batch cursor too), so the same code
  // runs eagerly or inside a CUDA graph.
  void TrainStep(bool for_graph) {
    train_->Batch(batches_, crops_, cursor_, batch_images_);
    const torch::Tensor y = epoch_labels_.index_select(0, cursor_).view({-1});
    cursor_ += 1;
    loss_sum_ += Step(batch_images_, y, for_graph);
  }

  // Adds the durations of the steps timed since the last call; returns the
  // steady-state samples and seconds among them.
  std::pair<int64_t, double> CollectStepTimes(std::vector<double>* durations = nullptr) {
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

  void Train(int64_t steps_per_epoch) {
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
    const Clock::time_point train_start = Clock::now();
    setup_seconds_ = Seconds(train_start - started_);
    Clock::time_point last_report = train_start;
    bool stop = false;
    double current_lr = -1;
    for (int64_t epoch = 0; epoch < s_.training.epochs && !stop; ++epoch) {
      const double lr = LearningRate(s_.training, epoch);
      if (lr != current_lr) {
        optimizer_->SetLearningRate(lr);
        if (copies_) copies_->SetLearningRate(lr);
        if (graphed_) graphed_->Invalidate();  // the lr is baked into the graph
        current_lr = lr;
      }
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
      while (epoch_steps < steps_per_epoch) {
        if (!warmup_measured_ && steps_done_ >= s_.measurement.warmup_steps) {
          // The warm-up ends here: what the device still has queued is its.
          Check(device_->Synchronize(), "device synchronize");
          warmup_seconds_ = Seconds(Clock::now() - train_start);
          warmup_measured_ = true;
        }
        int64_t ran = 1;
        const bool can_capture = steps_per_epoch - epoch_steps >= GraphedStep::kCaptureSteps;
        if (graphed_ && can_capture) {
          ran = graphed_->Run();
        } else {
          TrainStep(/*for_graph=*/false);
        }
        // Warm-up steps and a graph's capture are trained on but not timed.
        const bool timed = ran == 1 && steps_done_ >= s_.measurement.warmup_steps;
        timer_->Mark(timed);
        if (timed && kernel_trace_) kernel_trace_->AfterTimedStep();
        timed_steps_ += timed ? 1 : 0;
        steps_done_ += ran;
        epoch_steps += ran;
        stop = BudgetSpent(train_start);
        if (const auto every = s_.measurement.eval_every_steps;
            every && steps_done_ % *every < ran && epoch_steps < steps_per_epoch && !stop) {
          // An evaluation between steps: its time is not the epoch's, and
          // the step timer starts again after it (a kernel trace ends).
          if (kernel_trace_) kernel_trace_->Interrupt();
          CollectStepTimes();
          energy_->Pause();
          const double trained = trained_seconds_ + Seconds(Clock::now() - epoch_start) - epoch_eval_seconds_;
          const Clock::time_point eval_start = Clock::now();
          const double accuracy = Evaluate();
          epoch_eval_seconds_ += Seconds(Clock::now() - eval_start);
          eval_seconds_ += Seconds(Clock::now() - eval_start);
          ++evaluations_;
          stop |= RecordEvaluation(accuracy, trained, steps_per_epoch);
          energy_->Resume();
          timer_->Begin();
        }
        if (const int sig = InterruptSignal(); sig != 0) {
          throw Interrupted(std::string("interrupted by ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") + " at epoch " +
                            std::to_string(epoch + 1) + " step " + std::to_string(epoch_steps));
        }
        const Clock::time_point t1 = Clock::now();
        if (Seconds(t1 - last_report) >= s_.measurement.progress_interval_seconds || stop) {
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
            throw NonFiniteLoss("training loss became " + std::to_string(mean_loss) + " at epoch " +
                                std::to_string(epoch + 1) + " step " + std::to_string(epoch_steps) +
                                " (lower the learning rate?)");
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
          progress.elapsed_seconds = Seconds(t1 - train_start);
          sink_.Emit(progress);
          last_report = t1;
        }
        if (stop) break;
      }
      // An epoch's end (evaluation, a new order, maybe a new graph) is no
      // steady step: a kernel trace ends before it.
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
      if (!std::isfinite(mean_loss))
        throw NonFiniteLoss("training loss became nan in epoch " + std::to_string(epoch + 1));
      train_loss_.push_back(mean_loss);
      double accuracy = accuracy_curve_.empty() ? 0.0 : accuracy_curve_.back()[2];
      if (last_eval_step_ != steps_done_) {  // not evaluated at this very step already
        const Clock::time_point eval_start = Clock::now();
        accuracy = Evaluate();  // reads its result: the device has finished
        eval_seconds_ += Seconds(Clock::now() - eval_start);
        ++evaluations_;
        stop |= RecordEvaluation(accuracy, trained_seconds_, steps_per_epoch);
      }
      test_accuracy_.push_back(accuracy);
      const bool complete = epoch_steps == steps_per_epoch;
      if (complete) measured_epoch_seconds_.push_back(epoch_seconds);
      // Stopped at the target: the partial epoch is real time, not to project.
      if (!complete && stopped_at_target_) measured_epoch_seconds_.push_back(epoch_seconds);
      sink_.Emit(protocol::Epoch{epoch + 1, complete, epoch_seconds, epoch_steps, mean_loss, accuracy});
    }
  }

  // A diagnostic's file name without its extension: NAME-cellN in the
  // run's diagnostics folder (a data-parallel rank after the first adds
  // -rankR).
  std::string DiagnosticPath(const protocol::Diagnostics& d, const std::string& name) const {
    std::string path = d.folder + "/" + name + "-cell" + std::to_string(s_.cell_index);
    if (rank_ > 0) path += "-rank" + std::to_string(rank_);
    return path;
  }

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

}  // namespace

int RunCell(const CellSpec& spec, EventSink& sink, std::chrono::steady_clock::time_point started) {
  try {
    CellRun run(spec, sink, started);
    return run.Run();
  } catch (const Interrupted& e) {
    sink.Emit(protocol::Interrupted{e.what()});
    return 0;
  } catch (const NonFiniteLoss& e) {
    sink.Emit(protocol::Error{e.what(), true});
    return 1;
  } catch (const std::exception& e) {
    // LibTorch's messages run over many lines (hints, C++ stack): the first
    // is the reason; all of it goes to the cell's log.
    const std::string message = e.what();
    std::fprintf(stderr, "error: %s\n", message.c_str());
    sink.Emit(protocol::Error{message.substr(0, message.find('\n')), false});
    return 1;
  }
}

}  // namespace trainbench::worker

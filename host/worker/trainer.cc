#include "trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include <torch/torch.h>

#include "autocast_scope.h"
#include "dataset.h"
#include "plugin_loader.h"

namespace trainbench::worker {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A failure of the cell with a one-line reason.
class CellError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
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

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const CellSpec& s,
                                                       std::vector<torch::Tensor> params) {
  if (s.optimizer == "adam") {
    return std::make_unique<torch::optim::Adam>(
        params, torch::optim::AdamOptions(s.lr).weight_decay(s.weight_decay));
  }
  return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(s.lr)
                                                         .momentum(s.momentum)
                                                         .weight_decay(s.weight_decay)
                                                         .nesterov(s.nesterov));
}

// Learning rate for `epoch` (0-based) under the cell's schedule.
double LearningRate(const CellSpec& s, int64_t epoch) {
  if (s.schedule == "step") {
    return s.lr * std::pow(s.gamma, static_cast<double>(epoch / std::max<int64_t>(s.step_size, 1)));
  }
  if (s.schedule == "cosine") {
    const double pi = std::acos(-1.0);
    return 0.5 * s.lr * (1.0 + std::cos(pi * static_cast<double>(epoch) / static_cast<double>(s.epochs)));
  }
  return s.lr;
}

void SetLearningRate(torch::optim::Optimizer& opt, double lr) {
  for (auto& group : opt.param_groups()) group.options().set_lr(lr);
}

// Converts 4-D parameters and buffers to NHWC in place.
void ToChannelsLast(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) {
    if (p.dim() == 4) p.set_data(p.data().contiguous(torch::MemoryFormat::ChannelsLast));
  }
}

class CellRun {
 public:
  CellRun(const CellSpec& spec, EventSink& sink) : s_(spec), sink_(sink) {}

  int Run() {
    LoadedPlugin model_plugin = LoadPlugin(s_.model.path);
    LoadedPlugin device_plugin = LoadPlugin(s_.device.path);
    device_ = CreateDevice(device_plugin, s_.device.options);
    std::string why_not;
    if (!device_->Available(&why_not)) {
      sink_.Emit({{"event", "skipped"}, {"reason", "device '" + s_.device.name + "' unavailable: " + why_not}});
      return 0;
    }
    Check(device_->Setup(), "device setup");
    settings_ = device_->Settings();
    torch::manual_seed(s_.seed);

    model_ = CreateModel(model_plugin, s_.model.options);
    int64_t flops = 0;
    Check(model_->TrainingFlopsPerSample(&flops), "model '" + s_.model.name + "'");
    const int64_t params = model_->ParameterCount();

    LoadData();
    torch::nn::Module& module = model_->module();
    module.to(settings_.device);
    if (settings_.channels_last) ToChannelsLast(module);
    optimizer_ = MakeOptimizer(s_, module.parameters());

    const int64_t steps_per_epoch = train_->size() / s_.batch_size;
    if (steps_per_epoch < 1) {
      throw CellError("batch_size " + std::to_string(s_.batch_size) + " is larger than the " +
                      std::to_string(train_->size()) + " training samples");
    }
    json hardware = json::parse(device_->DescribeJson(), nullptr, false);
    sink_.Emit({{"event", "started"},
                {"params", params},
                {"flops_per_sample", flops},
                {"hardware", hardware},
                {"steps_per_epoch", steps_per_epoch},
                {"train_size", train_->size()},
                {"test_size", test_->size()},
                {"plugins",
                 {{{"name", s_.model.name}, {"version", model_plugin.descriptor->version}},
                  {{"name", s_.device.name}, {"version", device_plugin.descriptor->version}}}}});
    device_->ResetPeakMemory();

    Train(steps_per_epoch);

    const double sps = steady_seconds_ > 0 ? static_cast<double>(steady_samples_) / steady_seconds_ : 0.0;
    if (sps <= 0) throw CellError("no steady-state steps were timed: raise max_steps/time_budget_seconds above warmup_steps");
    std::vector<double> epoch_seconds = measured_epoch_seconds_;
    const bool projected = static_cast<int64_t>(measured_epoch_seconds_.size()) < s_.epochs;
    if (projected) {
      // Unfinished epochs take what steady-state throughput says they would.
      const double projected_epoch = static_cast<double>(steps_per_epoch * s_.batch_size) / sps;
      epoch_seconds.resize(static_cast<size_t>(s_.epochs), projected_epoch);
    }
    double total = 0;
    for (double e : epoch_seconds) total += e;
    sink_.Emit({{"event", "result"},
                {"params", params},
                {"flops_per_sample", flops},
                {"samples_per_second", sps},
                {"achieved_tflops", sps * static_cast<double>(flops) / 1e12},
                {"step_seconds_median", Quantile(step_seconds_, 0.5)},
                {"step_seconds_p90", Quantile(step_seconds_, 0.9)},
                {"steps", steps_done_},
                {"steady_steps", static_cast<int64_t>(step_seconds_.size())},
                {"epoch_seconds", epoch_seconds},
                {"measured_epochs", measured_epoch_seconds_.size()},
                {"train_seconds", total},
                {"train_loss", train_loss_},
                {"test_accuracy", test_accuracy_},
                {"projected", projected},
                {"peak_memory_bytes", device_->PeakMemoryBytes()},
                {"hardware", json::parse(device_->DescribeJson(), nullptr, false)}});
    return 0;
  }

 private:
  void LoadData() {
    data::ImageSet train, test;
    if (s_.dataset_kind == "synthetic") {
      train = SyntheticImageSet(s_.train_size.value_or(50000), s_.seed);
      test = SyntheticImageSet(s_.test_size.value_or(10000), s_.seed + 1);
    } else {
      train = data::LoadSplit(s_.dataset_path, data::Split::kTrain, s_.train_size);
      test = data::LoadSplit(s_.dataset_path, data::Split::kTest, s_.test_size);
    }
    train_ = std::make_unique<DeviceDataset>(train, settings_.device, settings_.channels_last);
    test_ = std::make_unique<DeviceDataset>(test, settings_.device, settings_.channels_last);
  }

  torch::Tensor Logits(const torch::Tensor& x) {
    AutocastScope autocast(settings_.device.type(), settings_.amp);
    torch::Tensor logits;
    Check(model_->Forward(x, &logits), "model '" + s_.model.name + "' forward");
    return logits;
  }

  // One optimisation step; returns the (detached) loss.
  torch::Tensor Step(const torch::Tensor& x, const torch::Tensor& y) {
    for (auto& p : model_->module().parameters()) p.mutable_grad() = torch::Tensor();
    torch::Tensor loss = torch::nn::functional::cross_entropy(Logits(x).to(torch::kFloat32), y);
    if (settings_.amp == sdk::Amp::kFp16) {
      // Dynamic loss scaling, as torch.cuda.amp.GradScaler does.
      if (!scale_.defined()) {
        scale_ = torch::full({1}, 65536.0, torch::TensorOptions().device(settings_.device));
        growth_tracker_ = torch::zeros({1}, torch::TensorOptions().dtype(torch::kInt32).device(settings_.device));
        found_inf_ = torch::zeros({1}, torch::TensorOptions().device(settings_.device));
      }
      (loss * scale_).backward();
      std::vector<torch::Tensor> grads;
      for (auto& p : model_->module().parameters())
        if (p.grad().defined()) grads.push_back(p.grad());
      found_inf_.zero_();
      at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, scale_.reciprocal());
      if (found_inf_.item<float>() == 0.0f) optimizer_->step();
      at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, 2.0, 0.5, 2000);
    } else {
      loss.backward();
      optimizer_->step();
    }
    return loss.detach();
  }

  double Evaluate() {
    torch::NoGradGuard no_grad;
    torch::nn::Module& module = model_->module();
    module.eval();
    auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(settings_.device);
    torch::Tensor correct = torch::zeros({}, i64);
    for (int64_t start = 0; start < test_->size(); start += s_.eval_batch_size) {
      const int64_t end = std::min(start + s_.eval_batch_size, test_->size());
      torch::Tensor idx = torch::arange(start, end, i64);
      torch::Tensor pred = Logits(test_->Images(idx, false)).argmax(1);
      correct += (pred == test_->Labels(idx)).sum();
    }
    module.train();
    return static_cast<double>(correct.item<int64_t>()) / static_cast<double>(test_->size());
  }

  bool BudgetSpent(Clock::time_point train_start) const {
    if (s_.max_steps && steps_done_ >= *s_.max_steps) return true;
    if (s_.time_budget_seconds && Seconds(Clock::now() - train_start) >= *s_.time_budget_seconds)
      return true;
    return false;
  }

  void Train(int64_t steps_per_epoch) {
    model_->module().train();
    const Clock::time_point train_start = Clock::now();
    Clock::time_point last_report = train_start;
    int64_t report_samples = 0;
    double report_seconds = 0;
    torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().device(settings_.device));
    bool stop = false;
    for (int64_t epoch = 0; epoch < s_.epochs && !stop; ++epoch) {
      SetLearningRate(*optimizer_, LearningRate(s_, epoch));
      loss_sum.zero_();
      int64_t epoch_steps = 0;
      torch::Tensor order = train_->Permutation();
      Check(device_->Synchronize(), "device synchronize");
      const Clock::time_point epoch_start = Clock::now();
      for (int64_t step = 0; step < steps_per_epoch; ++step) {
        const Clock::time_point t0 = Clock::now();
        torch::Tensor idx = order.slice(0, step * s_.batch_size, (step + 1) * s_.batch_size);
        torch::Tensor loss = Step(train_->Images(idx, s_.augment), train_->Labels(idx));
        loss_sum += loss;
        Check(device_->Synchronize(), "device synchronize");
        const Clock::time_point t1 = Clock::now();
        ++steps_done_;
        ++epoch_steps;
        if (steps_done_ > s_.warmup_steps) {
          step_seconds_.push_back(Seconds(t1 - t0));
          steady_seconds_ += Seconds(t1 - t0);
          steady_samples_ += s_.batch_size;
          report_seconds += Seconds(t1 - t0);
          report_samples += s_.batch_size;
        }
        stop = BudgetSpent(train_start);
        if (Seconds(t1 - last_report) >= s_.progress_interval_seconds || stop) {
          const double mean_loss = loss_sum.item<double>() / static_cast<double>(epoch_steps);
          if (!std::isfinite(mean_loss)) {
            throw CellError("training loss became " + std::to_string(mean_loss) + " at epoch " +
                            std::to_string(epoch + 1) + " step " + std::to_string(step + 1) +
                            " (lower the learning rate?)");
          }
          sink_.Emit({{"event", "progress"},
                      {"epoch", epoch + 1},
                      {"step", step + 1},
                      {"steps_per_epoch", steps_per_epoch},
                      {"steps_done", steps_done_},
                      {"samples_done", steps_done_ * s_.batch_size},
                      {"loss", mean_loss},
                      {"samples_per_second", report_seconds > 0 ? report_samples / report_seconds : 0.0},
                      {"memory_bytes", device_->MemoryInUseBytes()},
                      {"elapsed_seconds", Seconds(t1 - train_start)}});
          last_report = t1;
          report_samples = 0;
          report_seconds = 0;
        }
        if (stop) break;
      }
      const double epoch_seconds = Seconds(Clock::now() - epoch_start);
      const double mean_loss = loss_sum.item<double>() / static_cast<double>(epoch_steps);
      if (!std::isfinite(mean_loss)) throw CellError("training loss became NaN in epoch " + std::to_string(epoch + 1));
      train_loss_.push_back(mean_loss);
      const double accuracy = Evaluate();
      test_accuracy_.push_back(accuracy);
      const bool complete = epoch_steps == steps_per_epoch;
      if (complete) measured_epoch_seconds_.push_back(epoch_seconds);
      sink_.Emit({{"event", "epoch"},
                  {"epoch", epoch + 1},
                  {"complete", complete},
                  {"seconds", epoch_seconds},
                  {"steps", epoch_steps},
                  {"train_loss", mean_loss},
                  {"test_accuracy", accuracy}});
    }
  }

  const CellSpec& s_;
  EventSink& sink_;
  std::shared_ptr<sdk::Device> device_;
  std::shared_ptr<sdk::Model> model_;
  sdk::DeviceSettings settings_;
  std::unique_ptr<DeviceDataset> train_, test_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  torch::Tensor scale_, growth_tracker_, found_inf_;
  int64_t steps_done_ = 0;
  int64_t steady_samples_ = 0;
  double steady_seconds_ = 0;
  std::vector<double> step_seconds_, measured_epoch_seconds_, train_loss_, test_accuracy_;
};

}  // namespace

int RunCell(const CellSpec& spec, EventSink& sink) {
  try {
    CellRun run(spec, sink);
    return run.Run();
  } catch (const std::exception& e) {
    sink.Emit({{"event", "error"}, {"reason", e.what()}});
    return 1;
  }
}

}  // namespace trainbench::worker

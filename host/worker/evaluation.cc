// A cell's evaluation on the test set, and what it records of each.
#include "cell_run.h"

namespace trainbench::worker::cell {

double CellRun::Evaluate() {
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

// The energy of each epoch's training: read when it starts, before and
// after evaluations inside it, and when its last step has finished. A
// failed read drops the measurement (with the reason), never a guess.
// Notes an evaluation for the accuracy curve and the time to target;
// returns whether the cell should stop there (stop_at_target).
bool CellRun::RecordEvaluation(double accuracy, double trained_seconds, int64_t steps_per_epoch) {
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

}  // namespace trainbench::worker::cell

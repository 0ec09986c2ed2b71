#include "eta.h"

#include <algorithm>
#include <map>
#include <string>

namespace trainbench {

std::optional<double> AttemptSecondsLeft(const protocol::Progress& p, int64_t epochs, std::optional<int64_t> max_steps,
                                         std::optional<double> time_budget_seconds) {
  if (p.steps_done <= 0 || p.elapsed_seconds <= 0 || p.steps_per_epoch <= 0) return std::nullopt;
  int64_t total = p.steps_per_epoch * std::max<int64_t>(epochs, 1);
  if (max_steps) total = std::min(total, *max_steps);
  const double per_step = p.elapsed_seconds / static_cast<double>(p.steps_done);
  double left = static_cast<double>(std::max<int64_t>(total - p.steps_done, 0)) * per_step;
  if (time_budget_seconds) left = std::min(left, std::max(0.0, *time_budget_seconds - p.elapsed_seconds));
  return left;
}

RunEta::RunEta(const Experiment& e) : repeats_(std::max<int64_t>(e.measurement.repeats, 1)) {
  for (const auto& planned : e.Cells()) {
    Cell c;
    c.device = planned.device.label;
    c.will_run = !planned.device.path.empty();
    c.epochs = e.training.epochs;
    const protocol::StepMeasurement m = e.MeasurementOn(planned.device);
    c.max_steps = m.max_steps;
    c.time_budget_seconds = m.time_budget_seconds;
    cells_.push_back(c);
  }
}

void RunEta::CellStarted(size_t index) {
  running_ = index;
  attempts_ = 0;
  started_ = std::chrono::steady_clock::now();
}

void RunEta::AttemptStarted() { ++attempts_; }

void RunEta::CellFinished(size_t index, const protocol::CellRecord& cell) {
  CellFinished(index, cell.status != "skipped" && !cell.resumed.value_or(false));
}

void RunEta::CellFinished(size_t index, bool ran) {
  CellFinished(index, ran, std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
}

void RunEta::CellFinished(size_t index, bool ran, double wall_seconds) {
  if (index >= cells_.size()) return;
  if (ran) cells_[index].wall_seconds = wall_seconds;
  cells_[index].will_run = false;  // done: nothing left of it
}

std::optional<RunEta::Estimate> RunEta::OnProgress(const protocol::Progress& p) const {
  if (running_ >= cells_.size()) return std::nullopt;
  const Cell& cell = cells_[running_];
  const std::optional<double> left = AttemptSecondsLeft(p, cell.epochs, cell.max_steps, cell.time_budget_seconds);
  if (!left) return std::nullopt;
  // The attempts after this one take as long as this one will in all.
  const double attempt = p.elapsed_seconds + *left;
  const int64_t after = std::max<int64_t>(repeats_ - std::max<int64_t>(attempts_, 1), 0);
  Estimate estimate{*left + static_cast<double>(after) * attempt, 0};

  // The wall time of the cells that ran, by device and in all, once: a
  // progress event comes every second or so and a run may have 4,096 cells.
  struct Mean {
    double sum = 0;
    int n = 0;
    void Add(double v) {
      sum += v;
      ++n;
    }
  };
  std::map<std::string, Mean> by_device;
  Mean all;
  for (const auto& done : cells_) {
    if (!done.wall_seconds) continue;
    by_device[done.device].Add(*done.wall_seconds);
    all.Add(*done.wall_seconds);
  }
  double run = estimate.cell_seconds;
  for (size_t i = running_ + 1; i < cells_.size(); ++i) {
    if (!cells_[i].will_run) continue;
    const auto same = by_device.find(cells_[i].device);
    run += same != by_device.end() ? same->second.sum / same->second.n
           : all.n > 0             ? all.sum / all.n
                                   : attempt * static_cast<double>(repeats_);
  }
  estimate.run_seconds = run;
  return estimate;
}

}  // namespace trainbench

#pragma once
// The run's progress in the log: a line per worker progress report (at most
// every 3 s) with the cell's and the run's remaining time, and a line per
// epoch. Structured fields for --log-format json (logging.h).

#include <chrono>

#include "eta.h"
#include "run_observer.h"

namespace trainbench {

class RunLog : public RunObserver {
 public:
  void OnRunStarted(const Experiment& experiment, size_t cells) override;
  void OnCellStarted(size_t index, const CellRecord& cell) override;
  void OnEvent(size_t index, const CellRecord& cell, const protocol::Event& event) override;
  void OnCellFinished(size_t index, const CellRecord& cell) override;

 private:
  RunEta eta_;
  size_t cells_ = 0;
  std::chrono::steady_clock::time_point last_line_{};
};

/// "42 s", "3 min 5 s", "2 h 10 min".
std::string DurationText(double seconds);

}  // namespace trainbench

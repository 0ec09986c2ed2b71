#pragma once
// How long a run has left: one estimate for the console's progress lines and
// the metrics' ETA gauges. An estimate, never recorded as a measurement.

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "experiment.h"
#include "trainbench/protocol/cell_record.h"
#include "trainbench/protocol/events.h"

namespace trainbench {

/// Seconds left in one worker's training after `progress`: its remaining
/// steps at the rate so far, to the end of `epochs` or of a step budget, and
/// no later than a time budget. Empty until a step has been timed.
std::optional<double> AttemptSecondsLeft(const protocol::Progress& progress, int64_t epochs,
                                         std::optional<int64_t> max_steps, std::optional<double> time_budget_seconds);

/// Follows a run cell by cell. Cells still to run are estimated at the mean
/// wall time of the cells that ran on the same device, else of any that ran,
/// else at the pace of the running cell; cells that will be skipped (their
/// device missing) cost nothing.
class RunEta {
 public:
  RunEta() = default;
  explicit RunEta(const Experiment& experiment);

  /// A cell starts (its first attempt).
  void CellStarted(size_t index);
  /// A worker of the running cell said `started`: one more attempt (repeat).
  void AttemptStarted();
  /// The cell ended, as its record says: its wall time counts for the cells
  /// to come unless it was skipped or kept from an earlier run.
  void CellFinished(size_t index, const protocol::CellRecord& cell);
  /// The cell ended; `ran`: a worker trained (not skipped, not kept from an
  /// earlier run), so its wall time says something about its device.
  void CellFinished(size_t index, bool ran);
  /// As above with the wall time given (tests).
  void CellFinished(size_t index, bool ran, double wall_seconds);

  struct Estimate {
    double cell_seconds;  ///< the running cell, its repeats included
    double run_seconds;   ///< and every cell after it
  };
  /// After a progress event of the running cell. Empty until its rate is known.
  std::optional<Estimate> OnProgress(const protocol::Progress& progress) const;

 private:
  struct Cell {
    std::string device;
    bool will_run = true;
    int64_t epochs = 1;
    std::optional<int64_t> max_steps;
    std::optional<double> time_budget_seconds;
    std::optional<double> wall_seconds;  ///< once it ran
  };
  std::vector<Cell> cells_;
  int64_t repeats_ = 1;
  size_t running_ = 0;
  int64_t attempts_ = 0;
  std::chrono::steady_clock::time_point started_{};
};

}  // namespace trainbench

#pragma once
// What a run tells those who watch it (the console's log, the metrics
// exporter, the embedding API's callbacks), in its own header: the runner
// calls it, the observers implement it.

#include <cstddef>

#include "experiment.h"
#include "results.h"
#include "trainbench/protocol/events.h"

namespace trainbench {

/// Receives a run's progress. Called from the runner's thread.
class RunObserver {
 public:
  virtual ~RunObserver() = default;
  virtual void OnRunStarted(const Experiment& /*experiment*/, size_t /*cells*/) {}
  /// `cell` holds model, device, index; later calls see it filled in.
  virtual void OnCellStarted(size_t /*index*/, const CellRecord& /*cell*/) {}
  /// Every event of the cell's worker (rank 0's for a data-parallel cell).
  virtual void OnEvent(size_t /*index*/, const CellRecord& /*cell*/, const protocol::Event& /*event*/) {}
  virtual void OnCellFinished(size_t /*index*/, const CellRecord& /*cell*/) {}
  virtual void OnRunFinished(const Results& /*results*/) {}
};

}  // namespace trainbench

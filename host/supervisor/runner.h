#pragma once
// Running an experiment: one worker process per cell (model x device), in
// order, with results written after each cell and events passed to observers
// (the console and the metrics exporter).

#include <atomic>
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiment.h"
#include "results.h"

namespace trainbench {

/// Receives a run's progress. Called from the runner's thread.
class RunObserver {
 public:
  virtual ~RunObserver() = default;
  virtual void OnRunStarted(const Experiment& /*experiment*/, size_t /*cells*/) {}
  /// `cell` holds model, device, index; later calls see it filled in.
  virtual void OnCellStarted(size_t /*index*/, const nlohmann::json& /*cell*/) {}
  /// Every worker event ("started", "progress", "epoch", ...).
  virtual void OnEvent(size_t /*index*/, const nlohmann::json& /*cell*/,
                       const nlohmann::json& /*event*/) {}
  virtual void OnCellFinished(size_t /*index*/, const nlohmann::json& /*cell*/) {}
  virtual void OnRunFinished(const Results& /*results*/) {}
};

/// Exit codes of `trainbench run` (documented in the README).
enum ExitCode : int {
  kExitOk = 0,
  kExitError = 1,        ///< could not run (output folder, worker missing)
  kExitConfig = 2,       ///< bad config, plugin or dataset
  kExitCellsFailed = 3,  ///< the run finished but some cells failed
  kExitInterrupted = 130,
};

/// Set by the signal handler: stop after the current cell's worker ends.
extern std::atomic<int> g_stop_signal;

/// Runs every cell of `experiment` (plugins resolved) writing into `out_dir`.
/// With `resume`, cells that finished (status ok) in an earlier run into the
/// same folder with the same resolved configuration are kept, not rerun.
/// Returns an ExitCode (128 + signal when interrupted).
int RunExperiment(const Experiment& experiment, const std::filesystem::path& out_dir,
                  const nlohmann::json& system, std::vector<RunObserver*> observers,
                  bool resume = false);

/// Installs SIGINT/SIGTERM handlers that record the signal and forward it to
/// the running worker.
void InstallSignalHandlers();

}  // namespace trainbench

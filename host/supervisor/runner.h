#pragma once
// Running an experiment: one worker process per cell (model x device), in
// order, with results written after each cell and events passed to observers
// (the console and the metrics exporter).

#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "experiment.h"
#include "results.h"
#include "run_observer.h"
#include "trainbench/exit_code.h"
#include "trainbench/protocol/events.h"
#include "trainbench/run_stop.h"

namespace trainbench {

struct RunOutcome {
  int exit_code = kExitOk;  ///< an ExitCode, or 128 + signal when interrupted
  nlohmann::json results;   ///< the results.json document
  std::string table;        ///< the closing table
};

/// Runs every cell of `experiment` (plugins resolved) writing into `out_dir`.
/// With `resume`, cells that finished (status ok) in an earlier run into the
/// same folder with the same resolved configuration are kept, not rerun.
/// A stop requested of `stop` before or during the run ends it: the running
/// cell stops at its next step, the cells after it are not run.
/// With `only` not empty, just those cells run (by index, model-major); the
/// others are recorded as skipped ("not selected"), as in a Slurm array task.
/// `diagnostics` (its folder aside): what each cell writes into
/// out_dir/diagnostics.
RunOutcome RunExperiment(const Experiment& experiment, const std::filesystem::path& out_dir,
                         const nlohmann::json& system, std::vector<RunObserver*> observers, RunStop& stop,
                         bool resume = false, const std::vector<size_t>& only = {},
                         std::optional<protocol::Diagnostics> diagnostics = std::nullopt);

/// The record of a planned cell before it runs: its model and device entries,
/// their options and plugin records, no status yet. The runner and Slurm's
/// gather both list cells this way.
CellRecord PlannedRecord(const PlannedCell& planned);

}  // namespace trainbench

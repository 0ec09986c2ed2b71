#pragma once
// trainbench/exit_code.h: the exit codes of `trainbench run` (part of the
// engine's API, trainbench/engine.h).

namespace trainbench {

/// Exit codes of `trainbench run`, also RunSummary::exit_code.
enum ExitCode : int {
  kExitOk = 0,
  kExitError = 1,        ///< could not run (output folder, worker missing)
  kExitConfig = 2,       ///< bad config, plugin or dataset
  kExitCellsFailed = 3,  ///< the run finished but some cells failed
  kExitInterrupted = 130,
};

}  // namespace trainbench

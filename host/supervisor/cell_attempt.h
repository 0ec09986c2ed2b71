#pragma once
// One attempt of a cell: its workers (one per rank) spawned and watched, and
// what they said and how they ended made into the cell's record.

#include <filesystem>
#include <string>
#include <vector>

#include "experiment.h"
#include "run_observer.h"
#include "trainbench/protocol/cell_record.h"
#include "trainbench/protocol/cell_spec.h"
#include "trainbench/run_stop.h"

namespace trainbench {

/// After a stop request, how long a worker has to stop at its next step
/// before it is killed.
inline constexpr double kStopGraceSeconds = 20;

/// Runs one attempt of the cell `spec` (on `device`, starting from the record
/// `base_cell`) in fresh workers, rank 0 logging to `log`; returns the cell's
/// outcome. Events go to `observers` as they come; a stop requested of
/// `stop` reaches the workers, which are killed kStopGraceSeconds later if
/// still running; no event for `stall_timeout` seconds ends the attempt.
CellRecord RunAttempt(const protocol::CellSpec& spec, const PluginUse& device, const CellRecord& base_cell,
                      const std::filesystem::path& log, size_t index, double stall_timeout,
                      std::vector<RunObserver*>& observers, RunStop& stop);

/// The signal a stop was requested with, as "SIGTERM" ("a signal" when it
/// has no name).
std::string StopSignalName(const RunStop& stop);

/// The GPUs of the Slurm job this process runs in (SLURM_JOB_GPUS, e.g.
/// "2,3"), when Slurm gave it some (--gres) and set CUDA_VISIBLE_DEVICES to
/// them; empty otherwise.
std::string SlurmJobGpus();

}  // namespace trainbench

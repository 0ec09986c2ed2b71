#pragma once
// One run of an experiment through the engine API (Engine::Run), as an
// object with explicit stages: the output folder and its lock, the metrics
// settings and exporter, the system's description, the machine's benchmark
// lock, the cells (runner.h), and the summary. Everything the run holds is
// its own (its stop, locks, exporter), so runs in one process stay apart.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "experiment.h"
#include "live_runs.h"
#include "run_lock.h"
#include "run_observer.h"
#include "runner.h"
#include "trainbench/engine.h"

namespace trainbench {

class FileSdTarget;
class MetricsExporter;

class RunSession {
 public:
  /// A run of `experiment` (plugins resolved), read from `config_file`.
  /// Registers the run's stop (options.stop, or one of its own) with the
  /// signal handlers for the session's lifetime.
  RunSession(Experiment experiment, std::string config_file, const RunOptions& options, const EventCallback& on_event);
  ~RunSession();
  RunSession(const RunSession&) = delete;
  RunSession& operator=(const RunSession&) = delete;

  /// Runs the stages in order. Throws EngineError (with its exit code) for
  /// anything found wrong before the first cell starts.
  RunSummary Run();

 private:
  class EventForwarder;

  void OpenOutputFolder();
  void ApplyMetricsOptions();
  void CheckSelectedCells() const;
  void StartMetrics();
  void DescribeSystem();
  void TakeMachineLock();
  RunSummary Finish(RunOutcome outcome);
  size_t CellCount() const { return experiment_.models.size() * experiment_.devices.size(); }

  Experiment experiment_;
  std::string config_file_;
  const RunOptions& options_;
  RunStop own_stop_;
  RunStop& stop_;
  std::optional<LiveRun> live_;
  std::unique_ptr<EventForwarder> forwarder_;
  std::vector<RunObserver*> observers_;
  RunLock folder_lock_, machine_lock_;
  std::unique_ptr<MetricsExporter> metrics_;
  std::unique_ptr<FileSdTarget> file_sd_;
  nlohmann::json system_;
};

}  // namespace trainbench

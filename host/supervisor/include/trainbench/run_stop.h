#pragma once
// trainbench/run_stop.h: a stop request for one run (part of the engine's
// API, trainbench/engine.h).

#include <atomic>

#include "trainbench/engine_export.h"

namespace trainbench {

/// Stops one run (API 1.5): pass it in RunOptions::stop, then Request() from
/// any thread or a signal handler. The running cell stops at its next step
/// (recorded as interrupted), results are written, the cells after it are
/// not run, and Run returns 128 + the signal. A request made before the run
/// starts stops it at once. Other runs go on.
class TRAINBENCH_ENGINE_API RunStop {
 public:
  /// Records `signal` (the last request wins) and forwards it to the run's
  /// workers (SIGTERM for SIGHUP). Async-signal-safe.
  void Request(int signal) noexcept;
  /// The signal a stop was requested with; 0: none.
  int signal() const noexcept { return signal_.load(); }
  /// The flag itself, for waits that poll one.
  const std::atomic<int>& requested() const noexcept { return signal_; }
  /// The process group of the run's workers while they run (0: none): the
  /// engine sets it, Request signals it, and a stop requested before the
  /// group existed reaches it when it is set. A metrics exporter reads it too.
  void SetWorkers(int group) noexcept;
  int workers() const noexcept { return workers_.load(); }

 private:
  std::atomic<int> signal_{0};
  std::atomic<int> workers_{0};
};

}  // namespace trainbench

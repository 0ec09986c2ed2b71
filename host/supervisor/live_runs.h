#pragma once
// The runs of this process, as the signal handlers reach them: each run has
// its own RunStop (trainbench/run_stop.h); a signal stops every live run, or,
// with none live, the next one to start (a Ctrl-C while the plugins are
// being described stops the run about to begin).

#include "trainbench/run_stop.h"

namespace trainbench {

/// How many runs may be live at once in one process.
inline constexpr int kMaxLiveRuns = 64;

/// Registers `stop` as a live run for this object's lifetime. A stop
/// requested while no run was live is passed on to it. Throws
/// std::runtime_error when kMaxLiveRuns runs are live already.
class LiveRun {
 public:
  explicit LiveRun(RunStop& stop);
  ~LiveRun();
  LiveRun(const LiveRun&) = delete;
  LiveRun& operator=(const LiveRun&) = delete;

 private:
  int slot_;
};

/// Requests a stop of every live run, or, with none, of the next to start.
/// Async-signal-safe.
void RequestStopAll(int signal) noexcept;

/// Installs SIGINT/SIGTERM handlers that call RequestStopAll, SIGHUP's too
/// unless it is ignored (as under nohup).
void InstallSignalHandlers();

}  // namespace trainbench

#pragma once
// Starting a trainbench-worker process and reading its events. The worker is
// started fresh with fork+exec from this process, which never initialises
// CUDA or loads LibTorch, so every worker gets a clean CUDA context. Events
// come on a channel of their own (trainbench/protocol/channel.h).

#include <atomic>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "trainbench/protocol/events.h"
#include "trainbench/run_stop.h"

namespace trainbench {

/// How a worker ended.
struct WorkerExit {
  bool signaled = false;
  int code = 0;            ///< exit code when not signaled
  int signal = 0;          ///< signal number when signaled
  bool timed_out = false;  ///< killed by us: no event for the idle timeout
  /// Killed by us: its channel broke the protocol (another version, a
  /// missing or unknown field, a torn frame); one line naming what.
  std::string protocol_error;
  /// Killed by us: it had not stopped `stop_grace_seconds` after a stop
  /// request (a plugin hung where the worker cannot see the request).
  bool killed_after_stop = false;
  /// "exit code 1" / "killed by signal SIGSEGV (Segmentation fault)".
  std::string Describe() const;
  /// Exited by itself with status 0.
  bool clean() const { return !signaled && code == 0 && !timed_out && protocol_error.empty(); }
};

/// The prefix this code is installed in (or the build tree, which has the
/// same layout): found from the file holding this code, so it is right for
/// the trainbench command and for programs that embed libtrainbench.so.
std::filesystem::path InstallRoot();

/// The trainbench-worker executable: TRAINBENCH_WORKER if set, else BINDIR
/// of InstallRoot().
std::filesystem::path WorkerPath();

/// Called for each event a worker sends (the worker's index, the event).
using WorkerEventHandler = std::function<void(size_t, const protocol::Event&)>;

/// One worker process to start.
struct WorkerLaunch {
  std::vector<std::string> args;
  std::string stdin_text;
  std::filesystem::path log;                             ///< its stdout and stderr; empty: discarded
  std::vector<std::pair<std::string, std::string>> env;  ///< added to ours
};

/// Starts `launches` together in one process group of their own (the ranks
/// of a data-parallel cell; a terminal's Ctrl-C reaches the host, which
/// forwards it), feeds each its stdin, and passes the events each sends on
/// its event channel (a pipe of its own, `--events-fd`) to `on_event`, the
/// first being checked as Hello of this protocol version. Returns when every
/// worker has exited (waitpid: a child a plugin started does not hold the
/// run), then kills what is left of the group. When no worker sends an event
/// for `idle_timeout_seconds` (> 0), all are killed and their exits say
/// timed_out; output on stdout/stderr does not count. When one has ended and
/// the others have not `straggler_seconds` later, they are killed (they wait
/// for it in a collective that cannot complete). With `stop`, the workers'
/// process group is its workers() while they run (its requests reach them),
/// and once a stop is requested, workers that have not exited
/// `stop_grace_seconds` later are killed. Throws
/// std::runtime_error when a worker cannot be started.
std::vector<WorkerExit> RunWorkers(const std::vector<WorkerLaunch>& launches, const WorkerEventHandler& on_event,
                                   double idle_timeout_seconds = 0, double straggler_seconds = 30,
                                   RunStop* stop = nullptr, double stop_grace_seconds = 30);

/// One worker: RunWorkers with one launch.
WorkerExit RunWorker(const WorkerLaunch& launch, const std::function<void(const protocol::Event&)>& on_event,
                     double idle_timeout_seconds = 0);

/// The last non-empty line of a log file (for a crash's reason), or "".
std::string LastLogLine(const std::filesystem::path& log);

}  // namespace trainbench

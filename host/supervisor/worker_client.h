#pragma once
// Starting a trainbench-worker process and reading its events. The worker is
// started fresh with fork+exec from this process, which never initialises
// CUDA or loads LibTorch, so every worker gets a clean CUDA context.

#include <atomic>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainbench {

/// Process group of the worker(s) running now (0 when none), for signal
/// forwarding; the group's id is its first worker's pid.
extern std::atomic<int> g_worker_pid;

/// How a worker ended.
struct WorkerExit {
  bool signaled = false;
  int code = 0;    ///< exit code when not signaled
  int signal = 0;  ///< signal number when signaled
  bool timed_out = false;  ///< killed by us: no output for the idle timeout
  /// "exit code 1" / "killed by signal SIGSEGV (Segmentation fault)".
  std::string Describe() const;
};

/// The prefix this code is installed in (or the build tree, which has the
/// same layout): found from the file holding this code, so it is right for
/// the trainbench command and for programs that embed libtrainbench.so.
std::filesystem::path InstallRoot();

/// The trainbench-worker executable: TRAINBENCH_WORKER if set, else BINDIR
/// of InstallRoot().
std::filesystem::path WorkerPath();

/// Runs the worker with `args` in its own process group (a terminal's Ctrl-C
/// reaches the host, which forwards it once), writes `stdin_text` to its
/// stdin, calls `on_event` for each JSON line it prints (other lines are
/// ignored) and writes its stderr to `stderr_log` (or discards it when
/// empty). Blocks until it exits. When `idle_timeout_seconds` > 0 and the
/// worker prints nothing for that long, it is killed (a hang) and the exit
/// says timed_out. Throws std::runtime_error when it cannot be started.
WorkerExit RunWorker(const std::vector<std::string>& args, const std::string& stdin_text,
                     const std::filesystem::path& stderr_log,
                     const std::function<void(const nlohmann::json&)>& on_event,
                     double idle_timeout_seconds = 0);

/// One worker process to start.
struct WorkerLaunch {
  std::vector<std::string> args;
  std::string stdin_text;
  std::filesystem::path stderr_log;  ///< empty: discarded
  std::vector<std::pair<std::string, std::string>> env;  ///< added to ours
};

/// Starts `launches` together in one process group of their own (the ranks
/// of a data-parallel cell), feeds each its stdin, calls `on_event(i, event)`
/// for worker i's JSON lines, and waits for all. When none prints anything
/// for `idle_timeout_seconds` (> 0), all are killed and their exits say
/// timed_out. When one has ended and the others have not
/// `straggler_seconds` later, they are killed (they wait for it in a
/// collective that cannot complete). Forwarded signals reach the group.
std::vector<WorkerExit> RunWorkers(const std::vector<WorkerLaunch>& launches,
                                   const std::function<void(size_t, const nlohmann::json&)>& on_event,
                                   double idle_timeout_seconds = 0, double straggler_seconds = 30);

/// The last non-empty line of a log file (for a crash's reason), or "".
std::string LastLogLine(const std::filesystem::path& log);

}  // namespace trainbench

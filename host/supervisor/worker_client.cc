#include "worker_client.h"

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <boost/process.hpp>
#include <sys/wait.h>
#include <unistd.h>

namespace trainbench {
namespace bp = boost::process;
namespace fs = std::filesystem;

std::atomic<int> g_worker_pid{0};

std::string WorkerExit::Describe() const {
  if (!signaled) return "exit code " + std::to_string(code);
  const char* abbrev = sigabbrev_np(signal);
  return std::string("killed by signal ") + (abbrev ? std::string("SIG") + abbrev : std::to_string(signal)) +
         " (" + strsignal(signal) + ")";
}

fs::path WorkerPath() {
  if (const char* env = std::getenv("TRAINBENCH_WORKER"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return (ec ? fs::path(".") : self.parent_path()) / "trainbench-worker";
}

WorkerExit RunWorker(const std::vector<std::string>& args, const std::string& stdin_text,
                     const fs::path& stderr_log,
                     const std::function<void(const nlohmann::json&)>& on_event) {
  const fs::path worker = WorkerPath();
  if (::access(worker.c_str(), X_OK) != 0) {
    throw std::runtime_error(worker.string() +
                             ": worker executable not found or not executable (set TRAINBENCH_WORKER)");
  }
  bp::opstream in;
  bp::ipstream out;
  std::error_code ec;
  bp::child child;
  if (stderr_log.empty()) {
    child = bp::child(worker.string(), bp::args(args), bp::std_in < in, bp::std_out > out,
                      bp::std_err > bp::null, ec);
  } else {
    child = bp::child(worker.string(), bp::args(args), bp::std_in < in, bp::std_out > out,
                      bp::std_err > stderr_log.string(), ec);
  }
  if (ec) throw std::runtime_error(worker.string() + ": cannot start: " + ec.message());
  g_worker_pid.store(child.id());
  in << stdin_text;
  in.flush();
  in.pipe().close();
  std::string line;
  while (std::getline(out, line)) {
    if (line.empty() || line[0] != '{') continue;
    nlohmann::json event = nlohmann::json::parse(line, nullptr, false);
    if (event.is_discarded() || !event.is_object()) continue;
    on_event(event);
  }
  child.wait(ec);
  g_worker_pid.store(0);
  WorkerExit exit;
  const int status = child.native_exit_code();
  if (WIFSIGNALED(status)) {
    exit.signaled = true;
    exit.signal = WTERMSIG(status);
  } else {
    exit.code = WIFEXITED(status) ? WEXITSTATUS(status) : status;
  }
  return exit;
}

std::string LastLogLine(const fs::path& log) {
  std::ifstream in(log);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  return last;
}

}  // namespace trainbench

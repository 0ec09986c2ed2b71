#include "worker_client.h"

#include <dlfcn.h>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <chrono>
#include <fstream>
#include <optional>
#include <stdexcept>

extern char** environ;

namespace trainbench {
namespace fs = std::filesystem;

std::atomic<int> g_worker_pid{0};

std::string WorkerExit::Describe() const {
  if (timed_out) return "killed after printing nothing for the idle timeout (hung?)";
  if (!signaled) return "exit code " + std::to_string(code);
  const char* abbrev = sigabbrev_np(signal);
  return std::string("killed by signal ") +
         (abbrev ? std::string("SIG") + abbrev : std::to_string(signal)) + " (" + strsignal(signal) + ")";
}

fs::path InstallRoot() {
  // The file this code is in: libtrainbench.so in LIBDIR, or an executable
  // in BINDIR that linked it statically (the tests).
  fs::path dir;
  Dl_info info{};
  std::error_code ec;
  if (::dladdr(reinterpret_cast<void*>(&InstallRoot), &info) != 0 && info.dli_fname != nullptr &&
      *info.dli_fname != '\0') {
    const fs::path file = fs::canonical(info.dli_fname, ec);
    if (!ec) dir = file.parent_path();
  }
  if (dir.empty()) dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  for (const fs::path& sub : {fs::path(TRAINBENCH_LIBDIR), fs::path(TRAINBENCH_BINDIR)}) {
    fs::path root = dir;
    bool matches = true;
    for (auto it = sub.end(); it != sub.begin();) {
      --it;
      if (root.filename() != *it) {
        matches = false;
        break;
      }
      root = root.parent_path();
    }
    if (matches) return root;
  }
  return dir.parent_path();
}

fs::path WorkerPath() {
  if (const char* env = std::getenv("TRAINBENCH_WORKER"); env != nullptr && *env != '\0') return env;
  return InstallRoot() / TRAINBENCH_BINDIR / "trainbench-worker";
}

namespace {

// Owns a file descriptor.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& other) noexcept : fd(other.fd) { other.fd = -1; }
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      Close();
      fd = other.fd;
      other.fd = -1;
    }
    return *this;
  }
  ~Fd() { Close(); }
  void Close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

void MakePipe(Fd& read_end, Fd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  read_end.fd = fds[0];
  write_end.fd = fds[1];
}

// One started worker: its pid and the read end of its stdout.
struct Started {
  pid_t pid = 0;
  Fd out;
  std::string buffer;
  bool open = true;
};

// Starts `launch` in process group `pgid` (0: a new group led by it).
Started Spawn(const fs::path& worker, const WorkerLaunch& launch, pid_t pgid) {
  Fd in_read, in_write, out_read, out_write;
  MakePipe(in_read, in_write);
  MakePipe(out_read, out_write);
  Fd err(::open(launch.stderr_log.empty() ? "/dev/null" : launch.stderr_log.c_str(),
                O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (err.fd < 0) throw std::runtime_error(launch.stderr_log.string() + ": cannot write: " + std::strerror(errno));

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_read.fd, 0);
  posix_spawn_file_actions_adddup2(&actions, out_write.fd, 1);
  posix_spawn_file_actions_adddup2(&actions, err.fd, 2);
  std::vector<std::string> argv_storage = {worker.string()};
  argv_storage.insert(argv_storage.end(), launch.args.begin(), launch.args.end());
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The environment, plus the launch's own variables (which win).
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& kv : launch.env) overridden |= kv.first == name;
    if (!overridden) env_storage.push_back(entry);
  }
  for (const auto& kv : launch.env) env_storage.push_back(kv.first + "=" + kv.second);
  std::vector<char*> envp;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, pgid);
  Started started;
  const int rc = posix_spawn(&started.pid, worker.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw std::runtime_error(worker.string() + ": cannot start: " + std::strerror(rc));
  in_read.Close();
  out_write.Close();
  err.Close();

  // The spec is small (a few KiB), far below a pipe's buffer: write it whole.
  signal(SIGPIPE, SIG_IGN);
  size_t written = 0;
  while (written < launch.stdin_text.size()) {
    const ssize_t n = ::write(in_write.fd, launch.stdin_text.data() + written, launch.stdin_text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the worker died early; its exit status tells why
    written += static_cast<size_t>(n);
  }
  started.out.fd = out_read.fd;
  out_read.fd = -1;
  return started;
}

WorkerExit ExitOf(int status, bool timed_out) {
  WorkerExit exit;
  exit.timed_out = timed_out;
  if (WIFSIGNALED(status)) {
    exit.signaled = true;
    exit.signal = WTERMSIG(status);
  } else {
    exit.code = WIFEXITED(status) ? WEXITSTATUS(status) : status;
  }
  return exit;
}

}  // namespace

std::vector<WorkerExit> RunWorkers(const std::vector<WorkerLaunch>& launches,
                                   const std::function<void(size_t, const nlohmann::json&)>& on_event,
                                   double idle_timeout_seconds, double straggler_seconds) {
  const fs::path worker = WorkerPath();
  if (::access(worker.c_str(), X_OK) != 0) {
    throw std::runtime_error(worker.string() +
                             ": worker executable not found or not executable (set TRAINBENCH_WORKER)");
  }
  std::vector<Started> workers;
  pid_t group = 0;
  try {
    for (const auto& launch : launches) {
      workers.push_back(Spawn(worker, launch, group));
      if (group == 0) {
        group = workers.front().pid;
        g_worker_pid.store(group);
      }
    }
  } catch (...) {
    if (group != 0) ::kill(-group, SIGKILL);
    for (auto& w : workers) ::waitpid(w.pid, nullptr, 0);
    g_worker_pid.store(0);
    throw;
  }

  std::vector<WorkerExit> exits(workers.size());
  bool timed_out = false;
  size_t open = workers.size();
  char chunk[65536];
  // When one rank has ended and others have not within straggler_seconds,
  // they are waiting for it in a collective: end them.
  std::optional<std::chrono::steady_clock::time_point> first_end;
  while (open > 0) {
    std::vector<pollfd> fds;
    std::vector<size_t> which;
    for (size_t i = 0; i < workers.size(); ++i) {
      if (workers[i].open) {
        fds.push_back({workers[i].out.fd, POLLIN, 0});
        which.push_back(i);
      }
    }
    int wait_ms = idle_timeout_seconds > 0 ? static_cast<int>(idle_timeout_seconds * 1000) : -1;
    if (first_end) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          *first_end + std::chrono::duration<double>(straggler_seconds) - std::chrono::steady_clock::now());
      const int left_ms = static_cast<int>(std::max<int64_t>(left.count(), 0));
      wait_ms = wait_ms < 0 ? left_ms : std::min(wait_ms, left_ms);
    }
    const int ready = ::poll(fds.data(), fds.size(), wait_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      // Silent for the idle timeout (a hang), or stragglers after a rank ended.
      timed_out = !first_end;
      ::kill(-group, SIGKILL);
      for (size_t i : which) {
        workers[i].open = false;
        workers[i].out.Close();
      }
      open = 0;
      break;
    }
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      Started& w = workers[which[k]];
      const ssize_t n = ::read(w.out.fd, chunk, sizeof(chunk));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        w.open = false;
        w.out.Close();
        --open;
        if (!first_end) first_end = std::chrono::steady_clock::now();
        continue;
      }
      w.buffer.append(chunk, static_cast<size_t>(n));
      size_t start = 0, newline;
      while ((newline = w.buffer.find('\n', start)) != std::string::npos) {
        const std::string line = w.buffer.substr(start, newline - start);
        start = newline + 1;
        if (line.empty() || line[0] != '{') continue;
        nlohmann::json event = nlohmann::json::parse(line, nullptr, false);
        if (!event.is_discarded() && event.is_object()) on_event(which[k], event);
      }
      w.buffer.erase(0, start);
    }
  }

  for (size_t i = 0; i < workers.size(); ++i) {
    int status = 0;
    while (::waitpid(workers[i].pid, &status, 0) < 0 && errno == EINTR) {
    }
    exits[i] = ExitOf(status, timed_out);
  }
  g_worker_pid.store(0);
  return exits;
}

WorkerExit RunWorker(const std::vector<std::string>& args, const std::string& stdin_text,
                     const fs::path& stderr_log,
                     const std::function<void(const nlohmann::json&)>& on_event,
                     double idle_timeout_seconds) {
  return RunWorkers({WorkerLaunch{args, stdin_text, stderr_log, {}}},
                    [&](size_t, const nlohmann::json& event) { on_event(event); }, idle_timeout_seconds)
      .front();
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

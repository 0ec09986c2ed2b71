#include "worker_client.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <stdexcept>

#include "environment.h"
#include "safe_file.h"
#include "trainbench/protocol/channel.h"
#include "trainbench/protocol/error.h"
#include "trainbench/protocol/version.h"

extern char** environ;

namespace trainbench {
namespace fs = std::filesystem;

namespace {
// The worker's event channel, as a file descriptor number in the worker.
constexpr int kWorkerEventsFd = 3;
}  // namespace

std::string WorkerExit::Describe() const {
  if (!protocol_error.empty()) return "killed: " + protocol_error;
  if (timed_out) return "killed after sending no event for the idle timeout (hung?)";
  if (killed_after_stop) return "killed: it had not stopped within the grace period after the stop request";
  if (!signaled) return "exit code " + std::to_string(code);
  const char* abbrev = sigabbrev_np(signal);
  return std::string("killed by signal ") + (abbrev ? std::string("SIG") + abbrev : std::to_string(signal)) + " (" +
         strsignal(signal) + ")";
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
  if (const auto env = EnvironmentSetting("TRAINBENCH_WORKER")) return *env;
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

// One started worker: its pid and the read end of its event channel.
struct Started {
  pid_t pid = 0;
  Fd events;
  protocol::FrameReader frames;
  bool hello = false;   // its first message, Hello, was read
  bool reaped = false;  // waitpid returned it
  int status = 0;
};

// This process's environment plus `added` (which wins), as NAME=VALUE.
std::vector<std::string> WorkerEnvironment(const std::vector<std::pair<std::string, std::string>>& added) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& kv : added) overridden |= kv.first == name;
    if (!overridden) env.push_back(entry);
  }
  for (const auto& kv : added) env.push_back(kv.first + "=" + kv.second);
  return env;
}

// argv/envp for posix_spawn: pointers into `strings`, then a null.
std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (auto& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// The spec is small (a few KiB), far below a pipe's buffer: written whole
// (a worker that died early stops it; its exit status tells why).
void WriteAll(const Fd& to, const std::string& text) {
  signal(SIGPIPE, SIG_IGN);
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(to.fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
}

// Starts `launch` in process group `pgid` (0: a new group led by it).
Started Spawn(const fs::path& worker, const WorkerLaunch& launch, pid_t pgid) {
  Fd in_read, in_write, events_read, events_write;
  MakePipe(in_read, in_write);
  MakePipe(events_read, events_write);
  // The log is created afresh, never through a link planted in the folder.
  Fd log(launch.log.empty() ? ::open("/dev/null", O_WRONLY | O_CLOEXEC) : CreateFileNoFollow(launch.log));
  if (log.fd < 0) throw std::runtime_error("/dev/null: cannot open: " + std::string(std::strerror(errno)));
  // Reading the channel never blocks: after the worker exits, what it wrote
  // is drained even when a child of its holds the write end.
  ::fcntl(events_read.fd, F_SETFL, ::fcntl(events_read.fd, F_GETFL) | O_NONBLOCK);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_read.fd, 0);
  posix_spawn_file_actions_adddup2(&actions, log.fd, 1);
  posix_spawn_file_actions_adddup2(&actions, log.fd, 2);
  posix_spawn_file_actions_adddup2(&actions, events_write.fd, kWorkerEventsFd);
  // Who the worker's supervisor is: it ends when we do.
  std::vector<std::string> argv_storage = {worker.string(), "--events-fd", std::to_string(kWorkerEventsFd),
                                           "--supervisor-pid", std::to_string(::getpid())};
  argv_storage.insert(argv_storage.end(), launch.args.begin(), launch.args.end());
  std::vector<std::string> env_storage = WorkerEnvironment(launch.env);
  const std::vector<char*> argv = Pointers(argv_storage), envp = Pointers(env_storage);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // We ignore SIGPIPE; the worker gets the default back.
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, pgid);
  Started started;
  const int rc = posix_spawn(&started.pid, worker.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw std::runtime_error(worker.string() + ": cannot start: " + std::strerror(rc));
  in_read.Close();
  events_write.Close();
  log.Close();

  WriteAll(in_write, launch.stdin_text);
  started.events = std::move(events_read);
  return started;
}

WorkerExit ExitOf(int status) {
  WorkerExit exit;
  if (WIFSIGNALED(status)) {
    exit.signaled = true;
    exit.signal = WTERMSIG(status);
  } else {
    exit.code = WIFEXITED(status) ? WEXITSTATUS(status) : status;
  }
  return exit;
}

using Clock = std::chrono::steady_clock;

// The workers of one cell (one per rank) in a process group of their own:
// their events read as they come, their ends reaped, and the group killed
// when they hang, outlive a stop or a rank that ended (RunWorkers).
class WorkerGroup {
 public:
  WorkerGroup(const WorkerEventHandler& on_event, RunStop* stop) : on_event_(on_event), stop_(stop) {}

  // Spawns every launch into one group; on a failure, none is left running.
  void Start(const fs::path& worker, const std::vector<WorkerLaunch>& launches) {
    try {
      for (const auto& launch : launches) {
        workers_.push_back(Spawn(worker, launch, group_));
        if (group_ == 0) {
          group_ = workers_.front().pid;
          if (stop_ != nullptr) stop_->SetWorkers(group_);  // a stop already requested reaches it
        }
      }
    } catch (...) {
      if (group_ != 0) ::kill(-group_, SIGKILL);
      for (auto& w : workers_) ::waitpid(w.pid, nullptr, 0);
      if (stop_ != nullptr) stop_->SetWorkers(0);
      throw;
    }
    const size_t n = workers_.size();
    timed_out_.assign(n, false);
    killed_after_stop_.assign(n, false);
    protocol_errors_.assign(n, "");
    running_ = n;
    last_event_ = Clock::now();
  }

  // Until every worker has ended: their events, their ends, the watchdog.
  void Wait(double idle_timeout_seconds, double straggler_seconds, double stop_grace_seconds) {
    while (running_ > 0) {
      if (!Poll()) break;
      Reap();
      if (running_ == 0 || killed_all_) continue;
      Watch(idle_timeout_seconds, straggler_seconds, stop_grace_seconds);
    }
  }

  // Whatever the workers left in their group (a plugin's children) ends too;
  // each worker's exit.
  std::vector<WorkerExit> Finish() {
    ::kill(-group_, SIGKILL);
    std::vector<WorkerExit> exits(workers_.size());
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (!workers_[i].reaped) {
        int status = 0;
        while (::waitpid(workers_[i].pid, &status, 0) < 0 && errno == EINTR) {
        }
        workers_[i].status = status;
      }
      exits[i] = ExitOf(workers_[i].status);
      exits[i].timed_out = timed_out_[i];
      exits[i].killed_after_stop = killed_after_stop_[i];
      exits[i].protocol_error = protocol_errors_[i];
    }
    if (stop_ != nullptr) stop_->SetWorkers(0);
    return exits;
  }

 private:
  // Waits a little for events and reads them; false when poll failed.
  // Exits are noticed by polling waitpid (Reap): a worker's end, not its
  // channel's EOF, is what counts.
  bool Poll() {
    std::vector<pollfd> fds;
    std::vector<size_t> which;
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (!workers_[i].reaped && workers_[i].events.fd >= 0) {
        fds.push_back({workers_[i].events.fd, POLLIN, 0});
        which.push_back(i);
      }
    }
    constexpr int kReapMs = 50;
    const int ready = ::poll(fds.data(), fds.size(), kReapMs);
    if (ready < 0 && errno != EINTR) return false;
    for (size_t k = 0; ready > 0 && k < fds.size(); ++k) {
      if (fds[k].revents != 0) ReadEvents(which[k]);
    }
    return true;
  }

  // Reads what worker i has sent. Any event counts as progress; output on
  // stdout/stderr does not.
  void ReadEvents(size_t i) {
    Started& w = workers_[i];
    while (w.events.fd >= 0) {
      const ssize_t n = ::read(w.events.fd, chunk_, sizeof(chunk_));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return;  // EAGAIN: nothing more now
      if (n == 0) {
        if (w.frames.pending() > 0 && protocol_errors_[i].empty())
          protocol_errors_[i] = "event channel: the worker closed it inside a message";
        w.events.Close();
        return;
      }
      w.frames.Feed(chunk_, static_cast<size_t>(n));
      try {
        while (auto message = w.frames.Next()) Dispatch(i, protocol::EventFromJson(*message));
      } catch (const protocol::ProtocolError& e) {
        // Nothing more from it can be trusted: end the cell.
        if (protocol_errors_[i].empty()) protocol_errors_[i] = e.what();
        ::kill(w.pid, SIGKILL);
        w.events.Close();
        return;
      }
    }
  }

  // The first message must be a hello of this host's protocol version.
  void Dispatch(size_t i, const protocol::Event& event) {
    Started& w = workers_[i];
    if (w.hello) {
      last_event_ = Clock::now();
      on_event_(i, event);
      return;
    }
    const auto* hello = std::get_if<protocol::Hello>(&event);
    if (hello == nullptr)
      throw protocol::ProtocolError("event channel: the first message was '" + protocol::EventName(event) +
                                    "', not 'hello'");
    if (hello->protocol != protocol::kProtocolVersion) {
      throw protocol::ProtocolError("the worker (" + hello->worker_version + ") speaks protocol version " +
                                    std::to_string(hello->protocol) + ", this host " +
                                    std::to_string(protocol::kProtocolVersion) +
                                    " (install trainbench and trainbench-worker together)");
    }
    w.hello = true;
    last_event_ = Clock::now();
  }

  void Reap() {
    for (size_t i = 0; i < workers_.size(); ++i) {
      Started& w = workers_[i];
      if (w.reaped) continue;
      int status = 0;
      if (::waitpid(w.pid, &status, WNOHANG) != w.pid) continue;
      w.reaped = true;
      w.status = status;
      ReadEvents(i);  // what it wrote before it ended
      if (protocol_errors_[i].empty() && w.frames.pending() > 0)
        protocol_errors_[i] = "event channel: the worker ended inside a message";
      if (protocol_errors_[i].empty() && !w.hello && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        protocol_errors_[i] =
            "the worker never said hello on its event channel (an older trainbench-worker, "
            "of protocol 1, on TRAINBENCH_WORKER?)";
      }
      w.events.Close();
      --running_;
      if (!first_end_) first_end_ = Clock::now();
    }
  }

  // Kills the group when it outlived a stop by the grace period (hung where
  // it cannot see the request), sent no event for the idle timeout (hung),
  // or a rank ended and the others did not within straggler_seconds (they
  // are waiting for it in a collective).
  void Watch(double idle_timeout_seconds, double straggler_seconds, double stop_grace_seconds) {
    const auto now = Clock::now();
    const auto past = [&](Clock::time_point since, double seconds) {
      return now - since >= std::chrono::duration<double>(seconds);
    };
    if (stop_ != nullptr && stop_->signal() != 0 && !stop_seen_) stop_seen_ = now;
    if (stop_seen_ && past(*stop_seen_, stop_grace_seconds)) {
      for (size_t i = 0; i < workers_.size(); ++i) killed_after_stop_[i] = !workers_[i].reaped;
    } else if (idle_timeout_seconds > 0 && past(last_event_, idle_timeout_seconds)) {
      for (size_t i = 0; i < workers_.size(); ++i) timed_out_[i] = !workers_[i].reaped;
    } else if (!(first_end_ && past(*first_end_, straggler_seconds))) {
      return;
    }
    ::kill(-group_, SIGKILL);
    killed_all_ = true;
  }

  const WorkerEventHandler& on_event_;
  RunStop* stop_;
  std::vector<Started> workers_;
  pid_t group_ = 0;
  std::vector<bool> timed_out_, killed_after_stop_;
  std::vector<std::string> protocol_errors_;
  size_t running_ = 0;
  bool killed_all_ = false;
  Clock::time_point last_event_;
  std::optional<Clock::time_point> stop_seen_, first_end_;
  char chunk_[65536];
};

}  // namespace

std::vector<WorkerExit> RunWorkers(const std::vector<WorkerLaunch>& launches, const WorkerEventHandler& on_event,
                                   double idle_timeout_seconds, double straggler_seconds, RunStop* stop,
                                   double stop_grace_seconds) {
  const fs::path worker = WorkerPath();
  if (::access(worker.c_str(), X_OK) != 0) {
    throw std::runtime_error(worker.string() +
                             ": worker executable not found or not executable (set TRAINBENCH_WORKER)");
  }
  WorkerGroup group(on_event, stop);
  group.Start(worker, launches);
  group.Wait(idle_timeout_seconds, straggler_seconds, stop_grace_seconds);
  return group.Finish();
}

WorkerExit RunWorker(const WorkerLaunch& launch, const std::function<void(const protocol::Event&)>& on_event,
                     double idle_timeout_seconds) {
  return RunWorkers(
             {launch}, [&](size_t, const protocol::Event& event) { on_event(event); }, idle_timeout_seconds)
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

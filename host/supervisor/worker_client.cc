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
#include <fstream>
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
  for (const fs::path sub : {fs::path(TRAINBENCH_LIBDIR), fs::path(TRAINBENCH_BINDIR)}) {
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

}  // namespace

WorkerExit RunWorker(const std::vector<std::string>& args, const std::string& stdin_text,
                     const fs::path& stderr_log,
                     const std::function<void(const nlohmann::json&)>& on_event,
                     double idle_timeout_seconds) {
  const fs::path worker = WorkerPath();
  if (::access(worker.c_str(), X_OK) != 0) {
    throw std::runtime_error(worker.string() +
                             ": worker executable not found or not executable (set TRAINBENCH_WORKER)");
  }
  Fd in_read, in_write, out_read, out_write;
  MakePipe(in_read, in_write);
  MakePipe(out_read, out_write);
  Fd err(::open(stderr_log.empty() ? "/dev/null" : stderr_log.c_str(),
                O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (err.fd < 0) throw std::runtime_error(stderr_log.string() + ": cannot write: " + std::strerror(errno));

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_read.fd, 0);
  posix_spawn_file_actions_adddup2(&actions, out_write.fd, 1);
  posix_spawn_file_actions_adddup2(&actions, err.fd, 2);
  std::vector<std::string> argv_storage = {worker.string()};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, worker.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw std::runtime_error(worker.string() + ": cannot start: " + std::strerror(rc));
  g_worker_pid.store(pid);
  in_read.Close();
  out_write.Close();
  err.Close();

  // The spec is small (a few KiB), far below a pipe's buffer: write it whole.
  signal(SIGPIPE, SIG_IGN);
  size_t written = 0;
  while (written < stdin_text.size()) {
    const ssize_t n = ::write(in_write.fd, stdin_text.data() + written, stdin_text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the worker died early; its exit status tells why
    written += static_cast<size_t>(n);
  }
  in_write.Close();

  std::string buffer;
  char chunk[65536];
  bool timed_out = false;
  for (;;) {
    if (idle_timeout_seconds > 0) {
      pollfd pfd{out_read.fd, POLLIN, 0};
      const int ready = ::poll(&pfd, 1, static_cast<int>(idle_timeout_seconds * 1000));
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        timed_out = true;
        ::kill(pid, SIGKILL);
        break;
      }
    }
    const ssize_t n = ::read(out_read.fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buffer.append(chunk, static_cast<size_t>(n));
    size_t start = 0, newline;
    while ((newline = buffer.find('\n', start)) != std::string::npos) {
      const std::string line = buffer.substr(start, newline - start);
      start = newline + 1;
      if (line.empty() || line[0] != '{') continue;
      nlohmann::json event = nlohmann::json::parse(line, nullptr, false);
      if (!event.is_discarded() && event.is_object()) on_event(event);
    }
    buffer.erase(0, start);
  }

  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_worker_pid.store(0);
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

std::string LastLogLine(const fs::path& log) {
  std::ifstream in(log);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  return last;
}

}  // namespace trainbench

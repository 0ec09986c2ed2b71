#include "run_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "environment.h"
#include "text_escape.h"

namespace trainbench {
namespace fs = std::filesystem;

namespace {

// The holder line a run wrote ("PID N (what)"): a shared lock file anyone
// can write, so only its first line, printable, and only while that PID
// lives (a killed run cannot clear its line).
std::string ReadHolder(int fd) {
  char buffer[512];
  const ssize_t n = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
  if (n <= 0) return "another process";
  std::string text(buffer, static_cast<size_t>(n));
  text = Printable(text.substr(0, text.find('\n')));
  if (text.size() > 200) text = text.substr(0, 200) + "...";
  long pid = 0;
  if (std::sscanf(text.c_str(), "PID %ld", &pid) == 1 && pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 &&
      errno == ESRCH)
    return "another process";
  return text.empty() ? "another process" : text;
}

// Opens the lock file, creating it if missing. An existing one is opened
// without O_CREAT: in a sticky world-writable folder such as /run/lock the
// kernel refuses O_CREAT on another user's file (fs.protected_regular).
// Read-write to note the holder; else read-only, since flock(2) needs no
// write access (another user's file, a read-only mount in a service's
// sandbox). A shared lock is made 0666 whatever the umask, so that every
// user's runs can take it.
int OpenLockFile(const fs::path& file, bool shared) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    int fd = ::open(file.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) return fd;
    if (errno == EACCES || errno == EROFS || errno == EPERM) {
      fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      if (fd >= 0) return fd;
    }
    if (errno != ENOENT) return -1;
    fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, shared ? 0666 : 0644);
    if (fd >= 0) {
      if (shared) (void)::fchmod(fd, 0666);
      return fd;
    }
    if (errno != EEXIST) return -1;  // else another run created it meanwhile: open that one
  }
  return -1;
}

}  // namespace

RunLock RunLock::Lock(const fs::path& file, const std::string& what, bool wait, bool shared,
                      void (*waiting)(const std::string&), const std::atomic<int>* stop) {
  const int fd = OpenLockFile(file, shared);
  if (fd < 0) throw std::runtime_error(file.string() + ": cannot open the lock file: " + std::strerror(errno));
  int rc = ::flock(fd, LOCK_EX | LOCK_NB);
  if (rc != 0 && errno == EWOULDBLOCK && wait) {
    if (waiting != nullptr) waiting(ReadHolder(fd));
    while ((rc = ::flock(fd, LOCK_EX)) != 0 && errno == EINTR && (stop == nullptr || stop->load() == 0)) {
    }
  }
  RunLock lock;
  if (rc != 0) {
    lock.holder_ = ReadHolder(fd);
    ::close(fd);
    return lock;
  }
  lock.fd_ = fd;
  lock.held_ = true;
  const std::string me = "PID " + std::to_string(::getpid()) + " (" + what + ")\n";
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, me.data(), me.size(), 0);
  return lock;
}

RunLock RunLock::TryTake(const fs::path& file, const std::string& what) {
  return Lock(file, what, false, /*shared=*/false, nullptr, nullptr);
}

RunLock RunLock::Take(const fs::path& file, const std::string& what, void (*waiting)(const std::string&),
                      const std::atomic<int>* stop) {
  return Lock(file, what, true, /*shared=*/true, waiting, stop);
}

RunLock::RunLock(RunLock&& other) noexcept : fd_(other.fd_), held_(other.held_), holder_(std::move(other.holder_)) {
  other.fd_ = -1;
  other.held_ = false;
}

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    held_ = other.held_;
    holder_ = std::move(other.holder_);
    other.fd_ = -1;
    other.held_ = false;
  }
  return *this;
}

RunLock::~RunLock() {
  if (fd_ >= 0) {
    // Say nobody holds it before the kernel lets the next one in.
    if (held_ && ::ftruncate(fd_, 0) != 0) {
    }
    ::close(fd_);
  }
}

fs::path MachineLockFile(const fs::path& run_lock) {
  if (const auto env = EnvironmentSetting("TRAINBENCH_MACHINE_LOCK")) return *env;
  // The file, once there (the package creates it at boot, 0666), is shared
  // even where the folder is read-only (the service's sandbox) or not ours.
  const fs::path file = run_lock / "trainbench.lock";
  std::error_code ec;
  if (fs::symlink_status(file, ec).type() != fs::file_type::not_found) return file;
  if (::access(run_lock.c_str(), W_OK) == 0) return file;
  return "/tmp/trainbench.lock";
}

}  // namespace trainbench

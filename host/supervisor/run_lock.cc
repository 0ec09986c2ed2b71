#include "run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace trainbench {
namespace fs = std::filesystem;

namespace {

std::string ReadHolder(int fd) {
  char buffer[512];
  const ssize_t n = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
  if (n <= 0) return "another process";
  std::string text(buffer, static_cast<size_t>(n));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text.empty() ? "another process" : text;
}

}  // namespace

RunLock RunLock::Lock(const fs::path& file, const std::string& what, bool wait, void (*waiting)(const std::string&),
                      const std::atomic<int>* stop) {
  // 0666 (less the umask) for the machine lock: every user's runs share it.
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
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
  return Lock(file, what, false, nullptr, nullptr);
}

RunLock RunLock::Take(const fs::path& file, const std::string& what, void (*waiting)(const std::string&),
                      const std::atomic<int>* stop) {
  return Lock(file, what, true, waiting, stop);
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

fs::path MachineLockFile() {
  if (const char* env = std::getenv("TRAINBENCH_MACHINE_LOCK"); env != nullptr && *env != '\0') return env;
  if (::access("/run/lock", W_OK) == 0) return "/run/lock/trainbench.lock";
  return "/tmp/trainbench.lock";
}

}  // namespace trainbench

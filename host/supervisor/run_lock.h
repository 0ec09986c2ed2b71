#pragma once
// Locks that keep runs apart: one per output folder (two runs writing one
// results.json lose each other's cells) and one per machine (two benchmarks
// at once skew each other's timings). flock(2): the kernel drops a lock when
// its holder dies, so a crashed run never leaves one behind.

#include <atomic>
#include <filesystem>
#include <string>

namespace trainbench {

/// Holds an exclusive flock on a file for its lifetime; the file records the
/// holder's PID for others' messages. Move-only.
class RunLock {
 public:
  /// Takes the lock on `file` without waiting. Returns a lock that is not
  /// held() when another process holds it; holder() then says who ("PID 123
  /// (trainbench run x.yaml)"). Throws std::runtime_error when the file
  /// cannot be opened.
  static RunLock TryTake(const std::filesystem::path& file, const std::string& what);

  /// Waits for the lock, calling `waiting(holder)` once if it has to. Gives
  /// up (returns a lock not held) when a signal arrives and `*stop` is set.
  /// For a lock every user shares: the file is created 0666 whatever the
  /// umask, and one that is not writable is locked read-only.
  static RunLock Take(const std::filesystem::path& file, const std::string& what,
                      void (*waiting)(const std::string& holder), const std::atomic<int>* stop);

  RunLock() = default;
  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock();

  bool held() const { return held_; }
  const std::string& holder() const { return holder_; }

 private:
  static RunLock Lock(const std::filesystem::path& file, const std::string& what, bool wait, bool shared,
                      void (*waiting)(const std::string&), const std::atomic<int>* stop);

  int fd_ = -1;
  bool held_ = false;
  std::string holder_;
};

/// The machine-wide benchmark lock's file: TRAINBENCH_MACHINE_LOCK if set,
/// else RUN_LOCK/trainbench.lock where it exists (the package's tmpfiles.d
/// entry creates it, so the sandboxed service and every user share it) or
/// RUN_LOCK is writable, else /tmp/trainbench.lock.
std::filesystem::path MachineLockFile(const std::filesystem::path& run_lock = "/run/lock");

}  // namespace trainbench

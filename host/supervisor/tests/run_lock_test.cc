// The machine's benchmark lock shared by every user and by the sandboxed
// service; files never created through planted links.
#include "run_lock.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>

#include "results.h"
#include "safe_file.h"

namespace trainbench {
namespace {
namespace fs = std::filesystem;

constexpr uid_t kNobody = 65534;

class RunLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("run_lock_" + std::to_string(::getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // As /run/lock on Debian: world-writable and sticky.
    ::chmod(dir_.c_str(), 01777);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `body` in a child process (as another user when `uid` is set);
  // its exit code, or -1 when it died.
  static int InChild(const std::function<int()>& body) {
    const pid_t pid = ::fork();
    if (pid == 0) _exit(body());
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  static bool BecomeNobody() { return ::setgid(kNobody) == 0 && ::setuid(kNobody) == 0; }

  fs::path dir_;
};

TEST_F(RunLockTest, TheMachineLockIsCreatedForEveryUserWhateverTheUmask) {
  const mode_t old = ::umask(077);
  { RunLock lock = RunLock::Take(dir_ / "trainbench.lock", "test", nullptr, nullptr); }
  ::umask(old);
  struct stat st {};
  ASSERT_EQ(::stat((dir_ / "trainbench.lock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u);
}

// The shared lock file is anyone's to write: what a waiting run shows of its
// holder is one printable line, and nothing of a holder that is gone.
TEST_F(RunLockTest, TheHolderLineIsSanitisedAndForgottenWhenItsRunIsGone) {
  const fs::path file = dir_ / "trainbench.lock";
  const auto holder_seen = [&](const std::string& planted) {
    std::ofstream(file, std::ios::trunc) << planted;
    const int fd = ::open(file.c_str(), O_RDWR);
    ::flock(fd, LOCK_EX);  // held by this descriptor: the try below fails and reads the line
    std::string seen;
    InChild([&] {
      RunLock lock = RunLock::TryTake(file, "probe");
      std::ofstream(dir_ / "seen") << lock.holder();
      return 0;
    });
    ::close(fd);
    std::ifstream in(dir_ / "seen");
    std::getline(in, seen);
    return seen;
  };
  const std::string me = "PID " + std::to_string(::getpid()) + " (someone's run)";
  EXPECT_EQ(holder_seen(me + "\x1b]0;owned\x07\nsecond line\n"), me + "?]0;owned?");
  // A PID that no process has (a run killed before it could clear its line).
  EXPECT_EQ(holder_seen("PID 2147483000 (a finished run)\n"), "another process");
  { RunLock lock = RunLock::TryTake(file, "clears its line"); }
  EXPECT_EQ(fs::file_size(file), 0u);
}

TEST_F(RunLockTest, AFolderLockStaysTheOwners) {
  { RunLock lock = RunLock::TryTake(dir_ / ".trainbench.lock", "test"); }
  struct stat st {};
  ASSERT_EQ(::stat((dir_ / ".trainbench.lock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0002, 0u);
}

TEST_F(RunLockTest, AnotherUserSharesTheLockAfterAndWhileOneRunHoldsIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as two users";
  const fs::path file = dir_ / "trainbench.lock";
  { RunLock first = RunLock::Take(file, "root's run", nullptr, nullptr); }
  // After root's run: another user takes it (its file is root's, in a sticky folder).
  EXPECT_EQ(InChild([&] {
              if (!BecomeNobody()) return 10;
              RunLock lock = RunLock::TryTake(file, "nobody's run");
              return lock.held() ? 0 : 1;
            }),
            0);
  // While root holds it, the other user sees it held, and by whom.
  RunLock held = RunLock::Take(file, "root's run", nullptr, nullptr);
  ASSERT_TRUE(held.held());
  EXPECT_EQ(InChild([&] {
              if (!BecomeNobody()) return 10;
              RunLock lock = RunLock::TryTake(file, "nobody's run");
              if (lock.held()) return 1;
              return lock.holder().find("root's run") != std::string::npos ? 0 : 2;
            }),
            0);
}

TEST_F(RunLockTest, TheServiceSandboxSharesTheLockThroughAReadOnlyMount) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to build the service's sandbox";
  const fs::path file = dir_ / "trainbench.lock";
  { RunLock made = RunLock::Take(file, "a user's run", nullptr, nullptr); }
  RunLock held = RunLock::Take(file, "a user's run", nullptr, nullptr);
  ASSERT_TRUE(held.held());
  // The unit's view: the folder read-only (ProtectSystem=strict), another
  // user, no capabilities. The lock must be the same one, not a private one.
  const int rc = InChild([&] {
    if (::unshare(CLONE_NEWNS) != 0) return 77;
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 77;
    if (::mount(dir_.c_str(), dir_.c_str(), nullptr, MS_BIND, nullptr) != 0) return 77;
    if (::mount(nullptr, dir_.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) return 77;
    if (!BecomeNobody()) return 10;
    if (::access(dir_.c_str(), W_OK) == 0) return 11;  // not the sandbox's view
    if (MachineLockFile(dir_) != file) return 3;
    RunLock lock = RunLock::TryTake(file, "the service");
    if (lock.held()) return 1;
    return lock.holder().find("a user's run") != std::string::npos ? 0 : 2;
  });
  if (rc == 77) GTEST_SKIP() << "no mount namespace here (a container without CAP_SYS_ADMIN)";
  EXPECT_EQ(rc, 0);
}

TEST_F(RunLockTest, TheMachineLockIsTheExistingFileEvenInAFolderNobodyMayWrite) {
  const fs::path ro = dir_ / "ro";
  fs::create_directories(ro);
  std::ofstream(ro / "trainbench.lock") << "";
  ::chmod(ro.c_str(), 0555);
  ::unsetenv("TRAINBENCH_MACHINE_LOCK");
  EXPECT_EQ(MachineLockFile(ro), ro / "trainbench.lock");
  EXPECT_EQ(MachineLockFile(dir_ / "absent"), fs::path("/tmp/trainbench.lock"));
  ::chmod(ro.c_str(), 0755);
}

TEST_F(RunLockTest, APlantedLinkIsRefusedNotFollowed) {
  const fs::path victim = dir_ / "victim";
  std::ofstream(victim) << "precious";
  fs::create_symlink(victim, dir_ / "results.json.tmp");
  try {
    WriteFileAtomically(dir_ / "results.json", "{}");
    FAIL() << "wrote through a planted link";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "results.json.tmp").string() + ": is a symbolic link"),
              std::string::npos)
        << e.what();
  }
  std::ifstream in(victim);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "precious");
  EXPECT_FALSE(fs::exists(dir_ / "results.json"));
}

TEST_F(RunLockTest, AHardLinkPlantedAsTheTemporaryFileIsCutNotTruncated) {
  const fs::path victim = dir_ / "victim";
  std::ofstream(victim) << "precious";
  fs::create_hard_link(victim, dir_ / "results.json.tmp");
  WriteFileAtomically(dir_ / "results.json", "{}\n");
  std::ifstream in(victim);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "precious");
  std::ifstream written(dir_ / "results.json");
  std::getline(written, text);
  EXPECT_EQ(text, "{}");
}

TEST_F(RunLockTest, ALinkedLogsFolderIsRefused) {
  fs::create_directories(dir_ / "elsewhere");
  fs::create_directory_symlink(dir_ / "elsewhere", dir_ / "logs");
  EXPECT_THROW(MakeRealDirectory(dir_ / "logs"), std::runtime_error);
  EXPECT_NO_THROW(MakeRealDirectory(dir_ / "fresh" / "logs"));
  EXPECT_TRUE(fs::is_directory(dir_ / "fresh" / "logs"));
}

TEST_F(RunLockTest, APrivateTemporaryFolderIsNewAndOnlyOurs) {
  ::setenv("TMPDIR", dir_.c_str(), 1);
  const fs::path a = MakePrivateTempDirectory("trainbench-report");
  const fs::path b = MakePrivateTempDirectory("trainbench-report");
  ::unsetenv("TMPDIR");
  EXPECT_NE(a, b);
  EXPECT_EQ(a.parent_path(), dir_);
  struct stat st {};
  ASSERT_EQ(::stat(a.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

}  // namespace
}  // namespace trainbench

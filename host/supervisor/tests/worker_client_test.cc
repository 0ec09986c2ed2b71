// The supervisor's side of the worker protocol against a stand-in worker
// (tests/fixtures/fake_worker.py): events arrive only from the channel, a
// worker's end is its exit, and whatever breaks the protocol ends it.
#include "worker_client.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>

#include "test_env.h"
#include "trainbench/protocol/version.h"

namespace trainbench {
namespace {
namespace fs = std::filesystem;

class WorkerClient : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("TRAINBENCH_WORKER", (fs::path(TRAINBENCH_SOURCE_DIR) / "tests/fixtures/fake_worker.py").c_str(), 1);
    ::unsetenv("FAKE_WORKER_PROTOCOL");
    ::unsetenv("FAKE_WORKER_EXIT");
  }
  void TearDown() override { ::unsetenv("TRAINBENCH_WORKER"); }

  WorkerExit Run(const std::string& mode, double idle_timeout = 0) {
    ::setenv("FAKE_WORKER_MODE", mode.c_str(), 1);
    events_.clear();
    return RunWorker(
        WorkerLaunch{{"run"}, "{}", log_, {}}, [&](const protocol::Event& e) { events_.push_back(e); }, idle_timeout);
  }

  fs::path log_ = fs::path(::testing::TempDir()) / ("worker_client_" + std::to_string(::getpid()) + ".log");
  std::vector<protocol::Event> events_;
};

TEST_F(WorkerClient, EventsComeFromTheChannelAndStdoutGoesToTheLog) {
  const WorkerExit exit = Run("ok");
  EXPECT_TRUE(exit.clean()) << exit.Describe();
  ASSERT_EQ(events_.size(), 1u);  // hello is the client's own business
  ASSERT_TRUE(std::holds_alternative<protocol::Skipped>(events_[0]));
  EXPECT_EQ(std::get<protocol::Skipped>(events_[0]).reason, "fake device unavailable");
  EXPECT_EQ(LastLogLine(log_), "chatter on stdout is not an event");
}

TEST_F(WorkerClient, OutputWithoutEventsDoesNotHoldOffTheStallTimeout) {
  const WorkerExit exit = Run("chatter", 1.0);
  EXPECT_TRUE(exit.timed_out);
  EXPECT_TRUE(exit.signaled);
  EXPECT_TRUE(events_.empty());
}

TEST_F(WorkerClient, AChildHoldingTheChannelDoesNotHoldTheRun) {
  const fs::path pidfile = fs::path(::testing::TempDir()) / ("fake_child_" + std::to_string(::getpid()));
  ::setenv("FAKE_WORKER_PIDFILE", pidfile.c_str(), 1);
  const auto start = std::chrono::steady_clock::now();
  const WorkerExit exit = Run("child_holds_channel");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(exit.clean()) << exit.Describe();
  EXPECT_LT(seconds, 60) << "waited for the child (it sleeps 120 s)";
  ASSERT_EQ(events_.size(), 1u);
  // The child was in the worker's process group, which ends with the worker.
  std::ifstream in(pidfile);
  pid_t child = 0;
  in >> child;
  ASSERT_GT(child, 0);
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
    std::string pid, comm, state;
    gone = !(stat >> pid >> comm >> state) || state == "Z";
    if (!gone) ::usleep(20000);
  }
  EXPECT_TRUE(gone) << "the worker's child " << child << " outlived it";
  fs::remove(pidfile);
}

TEST_F(WorkerClient, AWorkerOfAnotherProtocolIsRefusedNamingBothVersions) {
  ::setenv("FAKE_WORKER_PROTOCOL", "99", 1);
  const WorkerExit exit = Run("ok");
  EXPECT_FALSE(exit.clean());
  EXPECT_TRUE(events_.empty());
  EXPECT_NE(
      exit.protocol_error.find("speaks protocol version 99, this host " + std::to_string(protocol::kProtocolVersion)),
      std::string::npos)
      << exit.protocol_error;
}

TEST_F(WorkerClient, AnOldWorkerThatNeverSaysHelloIsNamed) {
  const WorkerExit exit = Run("old_protocol");
  EXPECT_FALSE(exit.clean());
  EXPECT_TRUE(events_.empty());
  EXPECT_NE(exit.protocol_error.find("never said hello"), std::string::npos) << exit.protocol_error;
}

TEST_F(WorkerClient, AnUnknownFieldEndsTheWorkerNamingIt) {
  const WorkerExit exit = Run("unknown_field");
  EXPECT_FALSE(exit.clean());
  EXPECT_TRUE(events_.empty());
  EXPECT_EQ(exit.protocol_error, "event 'skipped': unknown field 'samples_per_second'");
}

TEST_F(WorkerClient, ATornFrameIsAProtocolError) {
  const WorkerExit exit = Run("torn");
  EXPECT_FALSE(exit.clean());
  EXPECT_NE(exit.protocol_error.find("inside a message"), std::string::npos) << exit.protocol_error;
}

TEST_F(WorkerClient, ADeathAfterTheLastEventIsSeenInTheExit) {
  const WorkerExit exit = Run("result_then_crash");
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_FALSE(exit.clean());
  EXPECT_TRUE(exit.signaled);
  EXPECT_EQ(exit.signal, SIGSEGV);
}

}  // namespace
}  // namespace trainbench

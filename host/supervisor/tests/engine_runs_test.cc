// Runs through the engine library's API that train: several experiments at
// once in one process, each with its own stop.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <thread>

#include "test_env.h"
#include "trainbench/engine.h"

namespace trainbench {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

Engine TestEngine() {
  EngineOptions options;
  options.plugin_dirs = {testing::PluginDir()};
  return Engine(options);
}

// Waits until `done()` or `seconds` pass; whether it became true.
template <class F>
bool WaitFor(F done, double seconds) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// One of two runs at once: a SimpleCNN cell on the CPU long enough to be
// stopped, its progress counted, its summary kept.
struct Background {
  RunStop stop;
  std::atomic<int> progress{0};
  std::atomic<bool> done{false};
  RunSummary summary;
  std::thread thread;

  void Start(const Engine& engine, const ExperimentPlan& plan, const fs::path& out) {
    thread = std::thread([this, &engine, plan, out] {
      RunOptions options;
      options.out_dir = out;
      options.concurrent = true;  // the machine lock admits one run at a time
      options.stop = &stop;
      summary = engine.Run(plan, options, [this](const RunEvent& e) {
        if (e.type == RunEvent::Type::kWorker && e.data.value("event", "") == "progress") ++progress;
      });
      done = true;
    });
  }
};

// Two experiments run at once through one Engine, each stoppable on its own:
// stopping one ends it (its cell interrupted, 128 + the signal) while the
// other goes on training, until its own stop ends it with its own signal.
TEST(EngineRuns, TwoRunsAtOnceEachStopOnItsOwn) {
  const Engine engine = TestEngine();
  const auto plan = [&](const std::string& name) {
    return engine.Build(ExperimentBuilder(name)
                            .Synthetic(2000, 100)
                            .Model("simple_cnn", {{"hidden", 16}})
                            .Device("cpu", {{"threads", 1}})
                            .Epochs(100000)
                            .BatchSize(50)
                            .WarmupSteps(1)
                            .Set("/measurement/progress_interval_seconds", 0.1));
  };
  const fs::path dir = fs::path(::testing::TempDir()) / ("engine_runs_" + std::to_string(::getpid()));
  Background a, b;
  a.Start(engine, plan("run-a"), dir / "a");
  b.Start(engine, plan("run-b"), dir / "b");
  ASSERT_TRUE(WaitFor([&] { return a.progress > 0 && b.progress > 0; }, 120)) << "both runs train";

  b.stop.Request(SIGTERM);
  ASSERT_TRUE(WaitFor([&] { return b.done.load(); }, 60)) << "run b stops";
  b.thread.join();
  EXPECT_EQ(b.summary.exit_code, 128 + SIGTERM);
  ASSERT_EQ(b.summary.cells.size(), 1u);
  EXPECT_EQ(b.summary.cells[0].status, "interrupted");
  EXPECT_NE(b.summary.cells[0].reason.find("SIGTERM"), std::string::npos) << b.summary.cells[0].reason;

  // Run a trains on after b's stop.
  const int seen = a.progress;
  EXPECT_TRUE(WaitFor([&] { return a.progress > seen + 2; }, 60)) << "run a goes on";
  EXPECT_FALSE(a.done.load());
  EXPECT_EQ(a.stop.signal(), 0);

  a.stop.Request(SIGINT);
  ASSERT_TRUE(WaitFor([&] { return a.done.load(); }, 60)) << "run a stops";
  a.thread.join();
  EXPECT_EQ(a.summary.exit_code, 128 + SIGINT);
  ASSERT_EQ(a.summary.cells.size(), 1u);
  EXPECT_EQ(a.summary.cells[0].status, "interrupted");
  EXPECT_NE(a.summary.cells[0].reason.find("SIGINT"), std::string::npos) << a.summary.cells[0].reason;
  EXPECT_TRUE(fs::exists(dir / "a" / "results.json"));
  EXPECT_TRUE(fs::exists(dir / "b" / "results.json"));
  if (a.thread.joinable()) a.thread.join();
  if (b.thread.joinable()) b.thread.join();
  fs::remove_all(dir);
}

// A stop asked of no run in particular (Engine::RequestStop, what the signal
// handlers call) while none is running stops the next run at once.
TEST(EngineRuns, AStopBeforeAnyRunStopsTheNextOne) {
  const Engine engine = TestEngine();
  const ExperimentPlan plan = engine.Build(ExperimentBuilder("early")
                                               .Synthetic(500, 100)
                                               .BatchSize(50)
                                               .Model("simple_cnn", {{"hidden", 16}})
                                               .Device("cpu")
                                               .WarmupSteps(1));
  const fs::path dir = fs::path(::testing::TempDir()) / ("engine_early_" + std::to_string(::getpid()));
  Engine::RequestStop(SIGTERM);
  RunOptions options;
  options.out_dir = dir;
  options.concurrent = true;
  const RunSummary summary = engine.Run(plan, options);
  EXPECT_EQ(summary.exit_code, 128 + SIGTERM);
  ASSERT_EQ(summary.cells.size(), 1u);
  EXPECT_EQ(summary.cells[0].status, "interrupted");
  // Taken by that run: the next one runs.
  options.out_dir = dir / "next";
  const RunSummary next = engine.Run(plan, options);
  EXPECT_EQ(next.exit_code, 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trainbench

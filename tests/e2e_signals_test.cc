// End to end, signals: SIGTERM, SIGHUP and a signal to a worker alone; no worker outlives its host.
#include "e2e.h"

namespace trainbench {
namespace {

TEST_F(EndToEnd, SigtermKeepsFinishedCellsAndResumeRunsTheRest) {
  const std::string config = Config(R"(name: signals
models: [simple_cnn, resnet18, {plugin: simple_cnn, label: again}]
devices: [cpu]
training: {epochs: 50, batch_size: 50}
measurement: {warmup_steps: 1, time_budget_seconds: 8}
)");
  const std::string out = (dir_ / "out").string();
  const pid_t pid = StartRun(config);
  ASSERT_GE(pid, 0);
  // Wait until the first cell finished, then give the second a moment to start training.
  ASSERT_TRUE(WaitForFirstCell());
  usleep(3000000);  // into resnet18's 8-second budget
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 143);
  json r = Results();
  EXPECT_EQ(r["cells"][0]["status"], "ok");
  EXPECT_EQ(r["cells"][1]["status"], "interrupted") << r["cells"][1];
  EXPECT_NE(r["cells"][1].value("reason", "").find("SIGTERM"), std::string::npos) << r["cells"][1];
  EXPECT_EQ(r["cells"][2]["status"], "interrupted");
  const double first_sps = r["cells"][0]["samples_per_second"].get<double>();

  const Outcome resumed = Trainbench("run " + config + " --out " + out + " --resume" + Plugins());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  r = Results();
  EXPECT_EQ(r["cells"][0]["status"], "ok");
  EXPECT_EQ(r["cells"][0].value("resumed", false), true);
  EXPECT_EQ(r["cells"][0]["samples_per_second"].get<double>(), first_sps);  // kept, not rerun
  EXPECT_EQ(r["cells"][1]["status"], "ok");
  EXPECT_FALSE(r["cells"][1].contains("resumed"));
  EXPECT_EQ(r["cells"][2]["status"], "ok");
}

// The worker pids the host `pid` has started (its children), from /proc.
std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::vector<pid_t> children;
  for (const auto& task : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    std::ifstream in(task.path() / "children");
    pid_t child;
    while (in >> child) children.push_back(child);
  }
  return children;
}

// The first cell's worker of the run `pid` writing into DIR/out: once
// results.json lists the cells, the host's child. Empty if none came.
std::vector<pid_t> FirstWorkerOf(pid_t pid, const fs::path& out) {
  std::vector<pid_t> workers;
  for (int i = 0; i < 1200 && workers.empty(); ++i) {
    usleep(50000);
    if (fs::exists(out / "results.json")) workers = ChildrenOf(pid);
  }
  return workers;
}

bool Alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string id, comm, state;
  return static_cast<bool>(stat >> id >> comm >> state) && state != "Z";
}

TEST_F(EndToEnd, ASigtermToACellHungInAPluginEndsTheRunAfterTheGracePeriod) {
  const std::string config = Config(R"(name: hung
models: [simple_cnn, {plugin: faulty_model, label: hang, options: {fault: hang}}, resnet18]
devices: [cpu]
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 3}
)");
  const pid_t pid = StartRun(config);
  ASSERT_TRUE(WaitForFirstCell());
  // Until the hang cell's worker is in its endless forward pass (it says so
  // in its log): a stop before that would reach its next step.
  bool hanging = false;
  for (int i = 0; i < 1200 && !hanging; ++i) {
    usleep(50000);
    std::ifstream log(dir_ / "out" / "logs" / "cell-01-hang-cpu.log");
    std::stringstream text;
    text << log.rdbuf();
    hanging = text.str().find("fixture: hanging in forward") != std::string::npos;
  }
  ASSERT_TRUE(hanging);
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);  // before the fix: forever
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 143);
  const json r = Results();
  EXPECT_EQ(r["cells"][0]["status"], "ok");
  EXPECT_EQ(r["cells"][1]["status"], "interrupted") << r["cells"][1];
  EXPECT_NE(r["cells"][1].value("reason", "").find("had not stopped 20 s later"), std::string::npos) << r["cells"][1];
  EXPECT_EQ(r["cells"][2]["status"], "interrupted");
}

TEST_F(EndToEnd, AHangUpStopsTheRunAsSigtermDoesAndNoWorkerOutlivesItsHost) {
  const std::string config = Config(R"(name: hup
models: [simple_cnn, resnet18]
devices: [cpu]
training: {epochs: 50, batch_size: 50}
measurement: {warmup_steps: 1, time_budget_seconds: 6}
)");
  pid_t pid = StartRun(config);
  ASSERT_TRUE(WaitForFirstCell());
  usleep(1500000);
  kill(pid, SIGHUP);  // a closed terminal, a dropped ssh session
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by the hang-up: the running cell would stay pending";
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGHUP);
  json r = Results();
  EXPECT_EQ(r["cells"][0]["status"], "ok");
  EXPECT_EQ(r["cells"][1]["status"], "interrupted") << r["cells"][1];

  // A host killed outright (nothing it can handle): its worker ends too.
  fs::remove_all(dir_ / "out");
  pid = StartRun(config);
  const std::vector<pid_t> workers = FirstWorkerOf(pid, dir_ / "out");
  ASSERT_FALSE(workers.empty());
  usleep(500000);
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    usleep(50000);
    gone = !Alive(workers[0]);
  }
  EXPECT_TRUE(gone) << "worker " << workers[0] << " trains on, orphaned";
}

// A signal to a worker alone (an administrator's kill, the OOM killer's
// SIGTERM-first tools): the run goes on, but does not end as if all was well.
// The cell is interrupted whether the worker's handler caught the signal or
// the signal came first (a loaded machine still starting the worker).
TEST_F(EndToEnd, ASignalToAWorkerAloneMakesTheRunExitNonZero) {
  const std::string config = Config(R"(name: worker-signal
models: [simple_cnn, {plugin: simple_cnn, label: next}]
devices: [cpu]
training: {epochs: 50, batch_size: 50}
measurement: {warmup_steps: 1, time_budget_seconds: 6}
)");
  const pid_t pid = StartRun(config);
  ASSERT_GE(pid, 0);
  const std::vector<pid_t> workers = FirstWorkerOf(pid, dir_ / "out");
  ASSERT_FALSE(workers.empty());
  usleep(1500000);
  kill(workers[0], SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
  const json r = Results();
  EXPECT_EQ(r["cells"][0]["status"], "interrupted") << r["cells"][0];
  EXPECT_NE(r["cells"][0].value("reason", "").find("SIGTERM"), std::string::npos) << r["cells"][0];
  EXPECT_EQ(r["cells"][1]["status"], "ok") << r["cells"][1];
}

TEST_F(EndToEnd, SigtermWhileWaitingForTheMachineLockExits143) {
  std::string holder;
  const pid_t first = StartHolder(&holder);
  ASSERT_GT(first, 0);
  const fs::path quick = dir_ / "quick.yaml";
  std::ofstream(quick) << "name: quick\ndataset: {kind: cifar10, path: " << MiniData().string()
                       << "}\nmodels: [simple_cnn]\ndevices: [cpu]\n";
  const pid_t waiter = StartRun(quick.string(), "waiter", "waiter.log");
  EXPECT_TRUE(LogShows("waiter.log", "waiting for the machine's benchmark lock"));
  kill(waiter, SIGTERM);
  int status = 0;
  waitpid(waiter, &status, 0);
  kill(first, SIGKILL);
  int first_status = 0;
  waitpid(first, &first_status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 143);  // 128 + SIGTERM, as at every other stage
}

}  // namespace
}  // namespace trainbench

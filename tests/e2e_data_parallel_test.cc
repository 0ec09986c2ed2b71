// End to end, data parallel: ranks train like one process, stop together, fail alone; energy per GPU.
#include "e2e.h"

namespace trainbench {
namespace {

TEST_F(EndToEnd, TwoRanksTrainLikeOneProcessWithTheCombinedBatch) {
  if (!WorkerHasGloo()) GTEST_SKIP() << "trainbench-worker built without Gloo (libgloo-dev)";
  const std::string config = Config(R"(name: dp
seed: 3
models: [simple_cnn]
devices:
  - {plugin: cpu, label: one, options: {threads: 1}}
  - {plugin: cpu, label: two, processes: 2, options: {threads: 1}}
training: {epochs: 2, batch_size: 64, augment: false}
measurement: {warmup_steps: 2, baseline: one}
)",
                                    ", train_size: 1024, test_size: 250");
  const Outcome o = Trainbench("run " + config + " --out " + (dir_ / "out").string() + Plugins());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const json cells = Results()["cells"];
  const json& one = cells[0];
  const json& two = cells[1];
  ASSERT_EQ(two["status"], "ok") << two.dump(2);
  EXPECT_EQ(two["ranks"], 2);
  EXPECT_EQ(two["backend"], "gloo");
  ASSERT_EQ(two["rank_samples_per_second"].size(), 2u);
  EXPECT_GT(two["rank_samples_per_second"][1].get<double>(), 0);
  ASSERT_TRUE(two["scaling_efficiency"].is_number()) << two.dump(2);
  EXPECT_EQ(two["scaling_baseline"], "one");
  // Same seed, same order, gradients averaged over the two halves of each
  // batch: the same training as one process, up to summation order.
  for (int e = 0; e < 2; ++e) {
    EXPECT_NEAR(two["train_loss"][e].get<double>(), one["train_loss"][e].get<double>(), 2e-3) << e;
    EXPECT_NEAR(two["test_accuracy"][e].get<double>(), one["test_accuracy"][e].get<double>(), 0.02) << e;
  }
  EXPECT_LT(one["train_loss"][1].get<double>(), one["train_loss"][0].get<double>());
  EXPECT_TRUE(fs::exists(dir_ / "out" / "logs" / "cell-01-simple_cnn-two-rank1.log"));
  EXPECT_NE(o.output.find("data parallel: simple_cnn on two: 2 ranks (gloo backend)"), std::string::npos) << o.output;
}

// Each rank keeps its own clock: with a time budget they must still stop
// after the same step, or their collectives pair up wrongly (Gloo aborted the
// worker here before rank 0's decision was shared; NCCL would hang).
TEST_F(EndToEnd, TwoRanksWithATimeBudgetStopAfterTheSameStep) {
  if (!WorkerHasGloo()) GTEST_SKIP() << "trainbench-worker built without Gloo (libgloo-dev)";
  const std::string config = Config(R"(name: dp-budget
models: [simple_cnn]
devices:
  - {plugin: cpu, processes: 2, time_budget_seconds: 2}
training: {epochs: 20, batch_size: 20}
measurement: {warmup_steps: 2}
)");
  const Outcome o = Trainbench("run " + config + " --out " + (dir_ / "out").string() + Plugins());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const json cell = Results()["cells"][0];
  ASSERT_EQ(cell["status"], "ok") << cell.dump(2);
  EXPECT_EQ(cell["projected"], true);
  EXPECT_LT(cell["steps"].get<int64_t>(), 20 * 100);  // stopped by the budget
  ASSERT_EQ(cell["rank_samples_per_second"].size(), 2u);
  EXPECT_GT(cell["rank_samples_per_second"][1].get<double>(), 0);
}

// ResNet18 has batch normalisation: two ranks train like one process only
// when it normalises over the combined batch (sync_batchnorm). One batch per
// epoch, so each epoch's loss is one step's. Past a few steps, rounding
// differences grow (seen also between 1 and 2 CPU threads in one process),
// so three steps are compared.
TEST_F(EndToEnd, SyncBatchNormMakesTwoRanksTrainLikeOneProcess) {
  if (!WorkerHasGloo()) GTEST_SKIP() << "trainbench-worker built without Gloo (libgloo-dev)";
  const std::string config = Config(R"(name: dp-bn
seed: 3
models: [{plugin: resnet18, options: {stem: cifar}}]
devices:
  - {plugin: cpu, label: one, options: {threads: 1}}
  - {plugin: cpu, label: two-sync, processes: 2, sync_batchnorm: true, options: {threads: 1}}
  - {plugin: cpu, label: two-local, processes: 2, options: {threads: 1}}
training: {epochs: 3, batch_size: 32, augment: false, optimizer: {name: sgd, lr: 0.002, momentum: 0.0}}
measurement: {warmup_steps: 1, baseline: one}
)",
                                    ", train_size: 32, test_size: 64");
  const Outcome o = Trainbench("run " + config + " --out " + (dir_ / "out").string() + Plugins());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const json cells = Results()["cells"];
  const json &one = cells[0], &sync = cells[1], &local = cells[2];
  ASSERT_EQ(sync["status"], "ok") << sync.dump(2);
  EXPECT_EQ(sync["sync_batchnorm"], true);
  EXPECT_EQ(local["sync_batchnorm"], false);
  EXPECT_FALSE(one.contains("sync_batchnorm"));
  for (int e = 0; e < 3; ++e) {
    EXPECT_NEAR(sync["train_loss"][e].get<double>(), one["train_loss"][e].get<double>(), 1e-3) << e;
    // Running statistics of the combined batch: the same evaluation.
    EXPECT_NEAR(sync["test_accuracy"][e].get<double>(), one["test_accuracy"][e].get<double>(), 0.02) << e;
  }
  // Per-rank statistics normalise each half apart: already the first step differs.
  EXPECT_GT(std::abs(local["train_loss"][0].get<double>() - one["train_loss"][0].get<double>()), 0.01)
      << local["train_loss"].dump() << " vs " << one["train_loss"].dump();
}

// A GPU's energy comes from NVML by the UUID the device reports: the GPU
// stand-in with NVML's stand-in (250 W) gets energy_source nvml and its power.
TEST_F(EndToEnd, AGpusEnergyIsReadFromNvmlByItsUuid) {
  const std::string config = Config(R"(name: nvml
models: [simple_cnn]
devices: [{plugin: gpu_stand_in, label: gpu}]
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, baseline: gpu}
)");
  ::setenv("TRAINBENCH_NVML_LIBRARY", FakeNvml().c_str(), 1);
  const Outcome o = Trainbench("run " + config + " --out " + (dir_ / "out").string() + Plugins());
  ::unsetenv("TRAINBENCH_NVML_LIBRARY");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const json cell = Results()["cells"][0];
  ASSERT_EQ(cell.at("energy_source"), "nvml") << cell;
  EXPECT_GT(cell.at("average_power_watts").get<double>(), 200) << cell;
  EXPECT_LT(cell.at("average_power_watts").get<double>(), 300) << cell;
  EXPECT_NEAR(cell.at("joules_per_sample").get<double>(),
              cell.at("energy_joules").get<double>() / (cell.at("steps").get<double>() * 100), 1e-12);
  EXPECT_NE(o.output.find("energy: simple_cnn on gpu:"), std::string::npos) << o.output;
}

// A data-parallel cell's energy: its GPUs' counters added up (each rank reads
// its own through NVML), or the machine's package counter read once.
TEST_F(EndToEnd, ADataParallelCellsEnergyIsItsGpusSum) {
  if (!WorkerHasGloo()) GTEST_SKIP() << "trainbench-worker built without Gloo (libgloo-dev)";
  const fs::path root = dir_ / "powercap";
  fs::create_directories(root / "intel-rapl:0");
  std::ofstream(root / "intel-rapl:0" / "max_energy_range_uj") << "262143328850\n";
  std::ofstream(root / "intel-rapl:0" / "energy_uj") << "5000000\n";  // still: 0 W, but readable
  const std::string config = Config(R"(name: dp-energy
models: [simple_cnn]
devices:
  - {plugin: acme_npu, label: one}
  - {plugin: acme_npu, label: two, gpus: [0, 1]}
  - {plugin: cpu, label: cpu-2ranks, processes: 2, options: {threads: 1}}
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 6, baseline: one}
)");
  ::setenv("TRAINBENCH_NVML_LIBRARY", FakeNvml().c_str(), 1);
  ::setenv("TRAINBENCH_POWERCAP_ROOT", root.c_str(), 1);
  const Outcome o = Trainbench("run " + config + " --out " + (dir_ / "out").string() + Plugins());
  ::unsetenv("TRAINBENCH_NVML_LIBRARY");
  ::unsetenv("TRAINBENCH_POWERCAP_ROOT");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const json cells = Results()["cells"];
  const json& one = cells[0];
  const json& two = cells[1];
  ASSERT_EQ(one.at("energy_source"), "nvml") << one;
  ASSERT_EQ(two.at("energy_source"), "nvml") << two;
  EXPECT_NEAR(one.at("average_power_watts").get<double>(), 250, 50) << one;
  EXPECT_NEAR(two.at("average_power_watts").get<double>(), 500, 100) << two;  // two stand-in GPUs at 250 W
  EXPECT_NEAR(two.at("joules_per_sample").get<double>(),
              two.at("energy_joules").get<double>() / (two.at("steps").get<double>() * 100), 1e-9);
  const json& cpu = cells[2];
  EXPECT_EQ(cpu.at("energy_source"), "rapl") << cpu;  // rank 0 read the package for both
  EXPECT_EQ(cpu.at("energy_joules").get<double>(), 0.0) << cpu;
}

TEST_F(EndToEnd, ACrashInOneRankFailsItsCellAndTheNextRuns) {
  if (!WorkerHasGloo()) GTEST_SKIP() << "trainbench-worker built without Gloo (libgloo-dev)";
  const std::string config = Config(R"(name: dp-fault
models:
  - {plugin: faulty_model, label: rank1-segfault, options: {fault: segfault, on_rank: 1}}
  - {plugin: faulty_model, label: rank0-throws, options: {fault: throw_in_forward, on_rank: 0}}
  - simple_cnn
devices: [{plugin: cpu, processes: 2, options: {threads: 1}}]
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 3}
)");
  const Outcome o = Trainbench("run " + config + " --out " + (dir_ / "out").string() + Plugins());
  EXPECT_EQ(o.exit_code, 3) << o.output;
  const json cells = Results()["cells"];
  ASSERT_EQ(cells.size(), 3u);
  EXPECT_EQ(cells[0]["status"], "failed");
  EXPECT_NE(cells[0].value("reason", "").find("rank 1: worker killed by signal SIGSEGV"), std::string::npos)
      << cells[0].value("reason", "");
  EXPECT_EQ(cells[1]["status"], "failed");
  EXPECT_NE(cells[1].value("reason", "").find("forward failed on purpose"), std::string::npos)
      << cells[1].value("reason", "");
  EXPECT_EQ(cells[2]["status"], "ok") << cells[2].dump(2);
  EXPECT_EQ(cells[2]["ranks"], 2);
}

TEST_F(EndToEnd, DataParallelMistakesAreConfigErrors) {
  auto check = [&](const std::string& devices, const std::string& expected) {
    const std::string config =
        Config("name: dp-bad\nmodels: [simple_cnn]\ndevices: " + devices + "\ntraining: {batch_size: 100}\n");
    const Outcome o = Trainbench("validate " + config + Plugins());
    EXPECT_EQ(o.exit_code, 2) << devices << "\n" << o.output;
    EXPECT_NE(o.output.find(expected), std::string::npos) << devices << "\n" << o.output;
  };
  check("[{plugin: cpu, processes: 3}]", "does not split evenly over 3 ranks");
  check("[{plugin: cpu, gpus: 2}]", "does not say which option selects a GPU");
  check("[{plugin: cpu, gpus: 2, processes: 2}]", "give either gpus or processes, not both");
  check("[{plugin: cpu, processes: 0}]", "devices[0].processes");
  check("[{plugin: cpu, gpus: [0, 0]}]", "GPU 0 is listed twice");
  check("[{plugin: cpu, processes: 2, sync_batchnorm: maybe}]", "devices[0].sync_batchnorm");
}

}  // namespace
}  // namespace trainbench

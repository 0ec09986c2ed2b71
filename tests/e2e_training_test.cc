// End to end, training and what a cell records: the loss, the log lines, times, energy, budgets, time to an accuracy.
#include "e2e.h"

namespace trainbench {
namespace {

TEST_F(EndToEnd, TrainsSimpleCnnAndTheLossFalls) {
  const std::string config = Config(R"(name: e2e
seed: 7
models: [simple_cnn]
devices: [cpu, cuda]
training:
  epochs: 3
  batch_size: 50
  optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
measurement: {warmup_steps: 2, progress_interval_seconds: 0.5}
)");
  const Outcome o = Trainbench("run " + config + " --out " + (dir_ / "out").string() + Plugins());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const json r = Results();
  ASSERT_EQ(r["cells"].size(), 2u);
  const json& cpu = r["cells"][0];
  EXPECT_EQ(cpu["status"], "ok") << cpu.dump(2);
  EXPECT_EQ(cpu["model"], "simple_cnn");
  EXPECT_EQ(cpu["device"], "cpu");
  EXPECT_EQ(cpu["params"], 488586);
  EXPECT_EQ(cpu["projected"], false);
  EXPECT_TRUE(cpu["speedup"].is_null());  // the baseline
  ASSERT_EQ(cpu["train_loss"].size(), 3u);
  ASSERT_EQ(cpu["test_accuracy"].size(), 3u);
  ASSERT_EQ(cpu["epoch_seconds"].size(), 3u);
  EXPECT_LT(cpu["train_loss"][2].get<double>(), cpu["train_loss"][0].get<double>() - 0.05) << cpu["train_loss"];
  EXPECT_GT(cpu["test_accuracy"][2].get<double>(), 0.15);  // chance is 0.10
  EXPECT_GT(cpu["samples_per_second"].get<double>(), 0);
  EXPECT_GE(cpu["step_seconds_p90"].get<double>(), cpu["step_seconds_median"].get<double>());
  EXPECT_EQ(cpu["steps"], 3 * (2000 / 50));
  EXPECT_GT(cpu["hardware"]["threads_used"].get<int>(), 0);
  EXPECT_EQ(cpu["hardware"]["keep_freed_memory"], true) << cpu["hardware"];  // the cpu device's default, applied
  const json& cuda = r["cells"][1];
  if (cuda["status"] == "skipped") {
    EXPECT_FALSE(cuda["reason"].get<std::string>().empty());
  } else {
    EXPECT_EQ(cuda["status"], "ok") << cuda.dump(2);
    EXPECT_GT(cuda["speedup"].get<double>(), 0);
  }
  ASSERT_EQ(cpu["plugins"].size(), 2u);
  EXPECT_EQ(cpu["plugins"][0]["name"], "simple_cnn");
  EXPECT_EQ(cpu["plugins"][0]["sha256"].get<std::string>().size(), 64u);
  EXPECT_EQ(cpu["plugins"][1]["abi"], "1." + std::to_string(TRAINBENCH_SDK_ABI_MINOR));
  EXPECT_FALSE(r["system"]["cpu_model"].get<std::string>().empty());
  EXPECT_FALSE(r["system"]["torch_version"].get<std::string>().empty());
  EXPECT_TRUE(fs::exists(dir_ / "out" / "results.csv"));
  EXPECT_NE(o.output.find("samples/s"), std::string::npos);  // the closing table
}

// The cpu device's keep_freed_memory (glibc's malloc settings for the
// worker process) is an option like any other: declared, recorded as asked
// in the cell's config and as applied in its hardware.
TEST_F(EndToEnd, TheCpuDeviceRecordsWhetherItKeptFreedMemory) {
  const std::string config = Config(R"(name: malloc
models: [simple_cnn]
devices:
  - {plugin: cpu, label: kept, options: {threads: 1}}
  - {plugin: cpu, label: glibc, options: {threads: 1, keep_freed_memory: false}}
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 3, baseline: kept}
)");
  const Outcome o = Trainbench("run " + config + " --out " + (dir_ / "out").string() + Plugins());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const json cells = Results()["cells"];
  ASSERT_EQ(cells.size(), 2u);
  for (const json& cell : cells) {
    const bool kept = cell["device"] == "kept";
    EXPECT_EQ(cell["status"], "ok") << cell;
    EXPECT_EQ(cell["hardware"]["keep_freed_memory"], kept) << cell["hardware"];
    EXPECT_EQ(cell["config"]["device"]["options"]["keep_freed_memory"], kept) << cell["config"];
  }
}

// Headless: --log-format json makes every line of stderr one JSON object
// with the cell's fields and ETAs; errors too.
TEST_F(EndToEnd, JsonLogLinesCarryTheCellsFieldsAndTheirEtas) {
  const std::string config = Config(R"(name: jsonlog
models: [simple_cnn]
devices: [cpu, {plugin: cpu, label: again}, {plugin: cuda, label: gpu}]
training: {epochs: 2, batch_size: 50}
measurement: {warmup_steps: 2, progress_interval_seconds: 0.2}
)");
  const fs::path log = dir_ / "stderr.jsonl";
  const Outcome o = Shell((BinDir() / "trainbench").string() + " run " + config + " --out " + (dir_ / "out").string() +
                          Plugins() + " --log-format json 2> " + log.string());
  std::ifstream in(log);
  std::string line;
  std::vector<json> lines;
  while (std::getline(in, line)) {
    const json j = json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "not a JSON line: " << line;
    for (const char* key : {"time", "level", "event", "message"}) EXPECT_TRUE(j.contains(key)) << line;
    lines.push_back(j);
  }
  ASSERT_NE(o.exit_code, 2) << o.output;
  auto with = [&](const std::string& event) {
    std::vector<json> out;
    for (const auto& j : lines)
      if (j["event"] == event) out.push_back(j);
    return out;
  };
  ASSERT_EQ(with("run_started").size(), 1u);
  EXPECT_EQ(with("run_started")[0]["cells"], 3);
  const auto progress = with("progress");
  ASSERT_GE(progress.size(), 2u);  // the first report of each cell is always logged
  bool eta_seen = false;
  for (const auto& p : progress) {
    EXPECT_EQ(p["experiment"], "jsonlog");
    EXPECT_EQ(p["model"], "simple_cnn");
    for (const char* key : {"cell", "device", "epoch", "step", "loss"}) EXPECT_TRUE(p.contains(key)) << p;
    if (p.contains("eta_seconds")) {
      eta_seen = true;
      EXPECT_GE(p["eta_seconds"].get<double>(), 0) << p;
      EXPECT_GE(p["run_eta_seconds"].get<double>(), p["eta_seconds"].get<double>()) << p;
      // A rate once the warm-up is over (the ETA is known from the first step).
      const bool warm_up = p["message"].get<std::string>().find("(warm-up)") != std::string::npos;
      EXPECT_EQ(p.contains("samples_per_second"), !warm_up) << p;
      EXPECT_NE(p["message"].get<std::string>().find("run ETA"), std::string::npos) << p;
    }
  }
  EXPECT_TRUE(eta_seen);
  const auto finished = with("cell_finished");
  ASSERT_EQ(finished.size(), 3u);
  // Two epochs a cell that trained: the two CPU cells, and the GPU's where
  // this build has the cuda plugin and a GPU.
  size_t trained = 0;
  for (const auto& f : finished) trained += f["status"] == "ok" ? 1 : 0;
  EXPECT_EQ(with("epoch").size(), 2 * trained);
  EXPECT_EQ(finished[0]["status"], "ok");
  EXPECT_EQ(finished[0]["cell"], 0);
  EXPECT_GT(finished[0]["samples_per_second"].get<double>(), 0);
  // Skipped where this build has no cuda plugin (a warning), else trained.
  EXPECT_TRUE(finished[2]["status"] == "skipped" || finished[2]["status"] == "ok") << finished[2];
  EXPECT_EQ(finished[2]["device"], "gpu");

  // A config error is a JSON line with the exit code, nothing else on stderr.
  std::ofstream(dir_ / "bad.yaml") << "name: bad\nmodels: [simple_cnn]\n";
  // (Without the TRAINBENCH_* variables of the tests' own environment, which
  // trainbench would name in a warning line of its own.)
  const std::string unset = "env $(env | grep -o '^TRAINBENCH_[A-Z0-9_]*' | sed 's/^/-u /') ";
  const Outcome bad = Shell(unset + (BinDir() / "trainbench").string() + " validate " + (dir_ / "bad.yaml").string() +
                            " --log-format json 2>&1 >/dev/null");
  EXPECT_EQ(bad.exit_code, 2);
  const json error = json::parse(bad.output, nullptr, false);
  ASSERT_FALSE(error.is_discarded()) << bad.output;
  EXPECT_EQ(error["event"], "error");
  EXPECT_EQ(error["level"], "error");
  EXPECT_EQ(error["exit_code"], 2);
  EXPECT_NE(error["message"].get<std::string>().find("bad.yaml:1:1: missing key 'dataset'"), std::string::npos);
  // So is a command-line mistake, wherever the option stands.
  const Outcome flag = Shell((BinDir() / "trainbench").string() + " --log-format=json run " +
                             (dir_ / "bad.yaml").string() + " --no-such-flag 2>&1 >/dev/null");
  EXPECT_NE(flag.exit_code, 0);
  const json flag_error = json::parse(flag.output, nullptr, false);
  ASSERT_FALSE(flag_error.is_discarded()) << flag.output;
  EXPECT_EQ(flag_error["event"], "error");
  EXPECT_NE(flag_error["message"].get<std::string>().find("--no-such-flag"), std::string::npos) << flag.output;
}

// ImageNet-size work (issue 16): synthetic images of another size and class
// count reach the models that take them; a model that cannot is told so.
TEST_F(EndToEnd, SyntheticImagesOfAnotherSizeReachTheModelsThatTakeThem) {
  const fs::path file = dir_ / "sizes.yaml";
  std::ofstream(file) << R"(name: sizes
dataset: {kind: synthetic, train_size: 64, test_size: 32, image_size: 48, num_classes: 20}
models: [resnet18, simple_cnn]
devices: [cpu]
training: {epochs: 1, batch_size: 32}
measurement: {warmup_steps: 1}
)";
  const Outcome o = Trainbench("run " + file.string() + " --out " + (dir_ / "out").string() + Plugins());
  EXPECT_EQ(o.exit_code, 3) << o.output;  // simple_cnn's cell fails
  const json r = Results();
  const json& resnet = r["cells"][0];
  ASSERT_EQ(resnet["status"], "ok") << resnet.dump(2);
  EXPECT_EQ(resnet["model_options"]["image_size"], 48);
  EXPECT_EQ(resnet["model_options"]["num_classes"], 20);
  EXPECT_EQ(resnet["params"], 11181642 + 512 * 10 + 10);  // ResNet18 with 10 more outputs
  const json& cnn = r["cells"][1];
  EXPECT_EQ(cnn["status"], "failed");
  EXPECT_NE(cnn["reason"].get<std::string>().find(
                "model 'simple_cnn' takes 3x32x32 inputs, but the dataset's images are 3x48x48 (dataset.image_size)"),
            std::string::npos)
      << cnn["reason"];
  // The same keys on CIFAR-10 are a config error at their position.
  const std::string cifar = Config("name: x\nmodels: [resnet18]\ndevices: [cpu]\n", ", image_size: 64");
  const Outcome bad = Trainbench("validate " + cifar + Plugins());
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("dataset.image_size: applies to synthetic data only"), std::string::npos) << bad.output;
}

// What the field judges by: the time to train (and where it went), the
// spread of repeats carried into the speedup, and the utilisation of a known
// peak.
TEST_F(EndToEnd, TimesSpreadAndEfficiencyAreRecorded) {
  const std::string config = Config(R"(name: measures
models: [simple_cnn]
devices: [cpu, {plugin: cpu, label: one-thread, options: {threads: 1}}]
training: {epochs: 2, batch_size: 100}
measurement: {warmup_steps: 2, repeats: 3, peak_tflops: 0.5}
)",
                                    ", train_size: 500");
  const Outcome o = Trainbench("run " + config + " --out " + (dir_ / "out").string() + Plugins());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const json r = Results();
  for (const json& c : r["cells"]) {
    ASSERT_EQ(c["status"], "ok") << c;
    for (const char* key : {"setup_seconds", "warmup_seconds", "eval_seconds", "train_seconds", "wall_seconds"})
      EXPECT_GT(c[key].get<double>(), 0) << key;
    const double ttt = c["time_to_train_seconds"].get<double>();
    EXPECT_NEAR(ttt,
                c["setup_seconds"].get<double>() + c["train_seconds"].get<double>() + c["eval_seconds"].get<double>(),
                1e-9);
    EXPECT_LT(ttt, c["wall_seconds"].get<double>());  // the worker's start and exit are outside it
    ASSERT_EQ(c["samples_per_second_repeats"].size(), 3u);
    const json ci = c.at("samples_per_second_ci95");
    EXPECT_LE(ci[0].get<double>(), c["samples_per_second_min"].get<double>() + 1e-9) << c;
    EXPECT_GE(ci[1].get<double>(), c["samples_per_second_max"].get<double>() - 1e-9) << c;
    EXPECT_EQ(c["peak_tflops_source"], "measurement.peak_tflops");
    EXPECT_NEAR(c["mfu"].get<double>(), c["achieved_tflops"].get<double>() / 0.5, 1e-12);
  }
  const json& one = r["cells"][1];
  const double speedup = one.at("speedup").get<double>();
  ASSERT_TRUE(one.contains("speedup_ci95")) << one;
  EXPECT_GT(one.at("speedup_ci95")[0].get<double>(), 0);
  EXPECT_LT(one.at("speedup_ci95")[0].get<double>(), one.at("speedup_ci95")[1].get<double>());
  EXPECT_GT(speedup, 0);
  EXPECT_NEAR(one["speedup_time_to_train"].get<double>(),
              r["cells"][0]["time_to_train_seconds"].get<double>() / one["time_to_train_seconds"].get<double>(), 1e-12);
  EXPECT_NE(o.output.find("time to train"), std::string::npos) << o.output;
  const Outcome report = Trainbench("report " + (dir_ / "out" / "results.json").string());
  EXPECT_NE(report.output.find(" ± "), std::string::npos) << report.output;
}

// The race the study implies: the training time (evaluation excluded) until
// the test accuracy reaches a target, and the curve it rode.
TEST_F(EndToEnd, TimeToATargetAccuracyIsRecordedAndCanEndTheCell) {
  const std::string reached = Config(R"(name: tta
models: [simple_cnn]
devices: [cpu]
training: {epochs: 20, batch_size: 100, optimizer: {lr: 0.05}}
measurement: {warmup_steps: 2, target_accuracy: 0.15, eval_every_steps: 5, stop_at_target: true}
)");
  Outcome o = Trainbench("run " + reached + " --out " + (dir_ / "out").string() + Plugins());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  json cell = Results()["cells"][0];
  ASSERT_EQ(cell["status"], "ok") << cell;
  ASSERT_TRUE(cell["time_to_target_seconds"].is_number()) << cell;
  EXPECT_EQ(cell["stopped_at_target"], true);
  EXPECT_EQ(cell["projected"], false);  // it trained what it needed
  const json curve = cell["accuracy_curve"];
  ASSERT_GE(curve.size(), 1u);
  const json last = curve.back();
  EXPECT_GE(last[2].get<double>(), 0.15);
  EXPECT_DOUBLE_EQ(last[0].get<double>(), cell["time_to_target_seconds"].get<double>());
  EXPECT_DOUBLE_EQ(last[1].get<double>(), cell["epochs_to_target"].get<double>());
  for (size_t i = 0; i + 1 < curve.size(); ++i) {
    EXPECT_LT(curve[i][2].get<double>(), 0.15) << "an earlier evaluation reached the target";
    EXPECT_LT(curve[i][0].get<double>(), curve[i + 1][0].get<double>());  // training time only grows
  }
  EXPECT_LT(cell["epochs_to_target"].get<double>(), 20.0);
  EXPECT_NE(o.output.find("time to 15.0% test accuracy"), std::string::npos) << o.output;

  const std::string missed = Config(R"(name: tta-missed
models: [simple_cnn]
devices: [cpu]
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 4, target_accuracy: 0.99}
)");
  fs::remove_all(dir_ / "out");
  o = Trainbench("run " + missed + " --out " + (dir_ / "out").string() + Plugins());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  cell = Results()["cells"][0];
  EXPECT_FALSE(cell.contains("time_to_target_seconds")) << cell;
  EXPECT_NE(cell.value("target_reason", "").find("not reached: the best test accuracy was"), std::string::npos) << cell;
}

// Energy from a powercap tree (RAPL) that a writer thread advances at 20 W;
// where there is none, the record says so and why.
TEST_F(EndToEnd, EnergyIsReadFromTheCountersOrSaidUnmeasurable) {
  const fs::path root = dir_ / "powercap";
  fs::create_directories(root / "intel-rapl:0");
  std::ofstream(root / "intel-rapl:0" / "max_energy_range_uj") << "262143328850\n";
  std::ofstream(root / "intel-rapl:0" / "energy_uj") << "0\n";
  std::atomic<bool> done{false};
  std::thread writer([&] {
    unsigned long long uj = 0;
    while (!done) {
      uj += 1000000;  // 1 J every 50 ms: 20 W
      {
        std::ofstream out(root / "intel-rapl:0" / "energy_uj.tmp");
        out << uj << "\n";
      }
      fs::rename(root / "intel-rapl:0" / "energy_uj.tmp", root / "intel-rapl:0" / "energy_uj");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  const std::string config = Config(R"(name: energy
models: [simple_cnn]
devices: [cpu, {plugin: cpu, label: one-thread, options: {threads: 1}}]
training: {epochs: 1, batch_size: 100}
)");
  ASSERT_EQ(Trainbench("run " + config + " --out " + (dir_ / "out").string() + Plugins()).exit_code, 0);
  ::setenv("TRAINBENCH_POWERCAP_ROOT", root.c_str(), 1);
  const Outcome measured = Trainbench("run " + config + " --out " + (dir_ / "rapl").string() + Plugins());
  ::unsetenv("TRAINBENCH_POWERCAP_ROOT");
  done = true;
  writer.join();
  ASSERT_EQ(measured.exit_code, 0) << measured.output;
  std::ifstream in(dir_ / "rapl" / "results.json");
  const json cells = json::parse(in)["cells"];
  for (const json& c : cells) {
    ASSERT_EQ(c.at("energy_source"), "rapl") << c;
    EXPECT_GT(c.at("energy_joules").get<double>(), 0);
    EXPECT_GT(c.at("average_power_watts").get<double>(), 5);   // 20 W written; file writes and
    EXPECT_LT(c.at("average_power_watts").get<double>(), 80);  // reads are not instantaneous
    EXPECT_EQ(c.at("epoch_energy_joules").size(), 1u);
    EXPECT_NEAR(c.at("joules_per_sample").get<double>(),
                c.at("energy_joules").get<double>() / (c.at("steps").get<double>() * 100), 1e-12);
  }
  EXPECT_TRUE(cells[1].at("energy_ratio").is_number()) << cells[1];
  EXPECT_NE(measured.output.find("J/sample"), std::string::npos) << measured.output;
  // Without a powercap tree (this machine has none, nor the GPU machine):
  // null, with the reason.
  const json plain = Results()["cells"][0];
  if (!fs::exists("/sys/class/powercap")) {
    EXPECT_FALSE(plain.contains("energy_joules")) << plain;
    EXPECT_NE(plain.value("energy_reason", "").find("no RAPL"), std::string::npos) << plain;
  }
}

TEST_F(EndToEnd, BudgetedCellsAreProjected) {
  const std::string config = Config(R"(name: budget
models: [resnet18]
devices: [{plugin: cpu, max_steps: 4}]
training: {epochs: 10, batch_size: 32}
measurement: {warmup_steps: 1}
)");
  const Outcome o = Trainbench("run " + config + " --out " + (dir_ / "out").string() + Plugins());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const json cell = Results()["cells"][0];
  EXPECT_EQ(cell["status"], "ok") << cell.dump(2);
  EXPECT_EQ(cell["projected"], true);
  EXPECT_EQ(cell["steps"], 4);
  EXPECT_EQ(cell["steady_steps"], 3);
  ASSERT_EQ(cell["epoch_seconds"].size(), 10u);
  // A projected epoch is the epoch's samples at steady-state throughput.
  EXPECT_NEAR(cell["epoch_seconds"][9].get<double>(), (2000 / 32) * 32 / cell["samples_per_second"].get<double>(),
              1e-6);
  EXPECT_EQ(cell["test_accuracy"].size(), 1u);
}

// A budget spent before the warm-up ends (a slow or loaded machine) still
// times one step: the cell measures something rather than failing.
TEST_F(EndToEnd, ATimeBudgetSpentInTheWarmUpStillTimesOneStep) {
  const std::string config = Config(R"(name: tiny-budget
models: [simple_cnn]
devices:
  - {plugin: cpu, time_budget_seconds: 0.001}
training: {epochs: 2, batch_size: 20}
measurement: {warmup_steps: 3}
)");
  const Outcome o = Trainbench("run " + config + " --out " + (dir_ / "out").string() + Plugins());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const json cell = Results()["cells"][0];
  ASSERT_EQ(cell["status"], "ok") << cell.dump(2);
  EXPECT_EQ(cell["steps"], 4);  // 3 warm-up steps and the one timed
  EXPECT_EQ(cell["projected"], true);
  EXPECT_GT(cell["samples_per_second"].get<double>(), 0);
}

// {name: adamw} trains with AdamW's defaults and its record names only what
// AdamW uses.
TEST_F(EndToEnd, AnAdamWCellHasAdamWsDefaultsAndNoMomentumInItsRecord) {
  const std::string config = Config(R"(name: adamw
models: [simple_cnn]
devices: [cpu]
training: {epochs: 1, batch_size: 100, optimizer: {name: adamw}}
measurement: {warmup_steps: 1, max_steps: 3}
)");
  const Outcome o = Trainbench("run " + config + " --out " + (dir_ / "out").string() + Plugins());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const json optimizer = Results()["cells"][0]["config"]["training"]["optimizer"];
  EXPECT_EQ(optimizer["name"], "adamw");
  EXPECT_DOUBLE_EQ(optimizer["lr"].get<double>(), 1e-3);
  EXPECT_DOUBLE_EQ(optimizer["weight_decay"].get<double>(), 1e-2);
  for (const char* sgd_only : {"momentum", "nesterov", "overlap"})
    EXPECT_FALSE(optimizer.contains(sgd_only)) << sgd_only << ": " << optimizer.dump();
}

}  // namespace
}  // namespace trainbench

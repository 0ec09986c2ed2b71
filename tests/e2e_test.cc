// End to end: the `trainbench` command with its worker processes and real
// plugins, training on the CIFAR-10 mini set.
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

TEST_F(EndToEnd, FaultyCellsFailAndTheOthersRun) {
  const std::string config = Config(R"(name: faults
models:
  - {plugin: faulty_model, label: segfault, options: {fault: segfault}}
  - {plugin: faulty_model, label: nan, options: {fault: nan}}
  - {plugin: faulty_model, label: throws, options: {fault: throw_in_factory}}
  - {plugin: faulty_model, label: abort, options: {fault: abort}}
  - simple_cnn
devices: [cpu]
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 3}
)");
  const Outcome o = Trainbench("run " + config + " --out " + (dir_ / "out").string() + Plugins());
  EXPECT_EQ(o.exit_code, 3) << o.output;  // some cells failed
  const json cells = Results()["cells"];
  ASSERT_EQ(cells.size(), 5u);
  auto reason = [&](int i) { return cells[i].value("reason", ""); };
  EXPECT_EQ(cells[0]["status"], "failed");
  EXPECT_NE(reason(0).find("SIGSEGV"), std::string::npos) << reason(0);
  EXPECT_EQ(cells[1]["status"], "failed");
  EXPECT_NE(reason(1).find("nan"), std::string::npos) << reason(1);
  EXPECT_EQ(cells[2]["status"], "failed");
  EXPECT_NE(reason(2).find("factory failed on purpose"), std::string::npos) << reason(2);
  EXPECT_EQ(cells[3]["status"], "failed");
  EXPECT_NE(reason(3).find("SIGABRT"), std::string::npos) << reason(3);
  EXPECT_EQ(cells[4]["status"], "ok") << cells[4].dump(2);
  EXPECT_GT(cells[4]["samples_per_second"].get<double>(), 0);
}

TEST_F(EndToEnd, StopOnFailureEndsTheRunAtTheFirstFailedCell) {
  const std::string config = Config(R"(name: failfast
models:
  - simple_cnn
  - {plugin: faulty_model, label: broken, options: {fault: throw_in_forward}}
  - resnet18
devices: [cpu]
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 3, stop_on_failure: true}
)");
  const Outcome o = Trainbench("run " + config + " --out " + (dir_ / "out").string() + Plugins());
  EXPECT_EQ(o.exit_code, 3) << o.output;
  const json cells = Results()["cells"];
  EXPECT_EQ(cells[0]["status"], "ok");
  EXPECT_EQ(cells[1]["status"], "failed");
  EXPECT_EQ(cells[2]["status"], "skipped");
  EXPECT_NE(cells[2].value("reason", "").find("stop_on_failure"), std::string::npos) << cells[2];
}

TEST_F(EndToEnd, AHungCellIsKilledAndTheNextRuns) {
  const std::string config = Config(R"(name: hang
models:
  - {plugin: faulty_model, label: hang, options: {fault: hang}}
  - simple_cnn
devices: [cpu]
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 3, stall_timeout_seconds: 8}
)");
  const Outcome o = Trainbench("run " + config + " --out " + (dir_ / "out").string() + Plugins());
  EXPECT_EQ(o.exit_code, 3) << o.output;
  const json cells = Results()["cells"];
  EXPECT_EQ(cells[0]["status"], "failed");
  EXPECT_NE(cells[0].value("reason", "").find("sent no event for 8 s"), std::string::npos) << cells[0];
  EXPECT_EQ(cells[1]["status"], "ok") << cells[1];
}

// The worker's events have a channel of their own: what a plugin prints
// cannot pass for them, keep a hung cell alive, or hold the run.
TEST_F(EndToEnd, PluginOutputCannotForgeResultsHideAHangOrHoldTheRun) {
  const std::string config = Config(R"(name: adversarial
models:
  - {plugin: faulty_model, label: forger, options: {fault: forge_result}}
  - {plugin: faulty_model, label: chatter, options: {fault: chatter_hang}}
  - {plugin: faulty_model, label: forker, options: {fault: fork_child}}
devices: [cpu]
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 3, stall_timeout_seconds: 6}
)");
  const auto start = std::chrono::steady_clock::now();
  const Outcome o = Trainbench("run " + config + " --out " + (dir_ / "out").string() + Plugins());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(o.exit_code, 3) << o.output;
  const json cells = Results()["cells"];
  ASSERT_EQ(cells.size(), 3u);
  // A result printed on stdout (and one written to fd 3), then a crash: failed.
  EXPECT_EQ(cells[0]["status"], "failed") << cells[0];
  EXPECT_NE(cells[0].value("reason", "").find("SIGSEGV"), std::string::npos) << cells[0];
  EXPECT_FALSE(cells[0].contains("samples_per_second")) << cells[0];
  // Printing all the while is not progress: the stall timeout ends it.
  EXPECT_EQ(cells[1]["status"], "failed") << cells[1];
  EXPECT_NE(cells[1].value("reason", "").find("sent no event for 6 s"), std::string::npos) << cells[1];
  // A child holding the log open for ten minutes does not hold the cell.
  EXPECT_EQ(cells[2]["status"], "ok") << cells[2];
  EXPECT_LT(seconds, 300) << "the run waited for the plugin's child";
  std::ifstream log(dir_ / "out" / "logs" / "cell-02-forker-cpu.log");
  std::stringstream text;
  text << log.rdbuf();
  EXPECT_NE(text.str().find("keeps stdout open"), std::string::npos) << "plugin output belongs in the cell's log";
}

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
  EXPECT_EQ(r["cells"][1]["status"], "ok") << r["cells"][1];
}

TEST_F(EndToEnd, RunsAreKeptApartPerFolderAndPerMachine) {
  std::string holder;
  const pid_t first = StartHolder(&holder);
  ASSERT_GT(first, 0);
  // The same folder: refused at once, naming the run that holds it.
  const Outcome same = Trainbench("run " + holder + " --out " + (dir_ / "out").string() + Plugins());
  EXPECT_EQ(same.exit_code, 1) << same.output;
  EXPECT_NE(same.output.find("another run is writing into this folder: PID " + std::to_string(first)),
            std::string::npos)
      << same.output;
  const fs::path quick_file = dir_ / "quick.yaml";
  std::ofstream(quick_file) << "name: quick\ndataset: {kind: cifar10, path: " << MiniData().string()
                            << "}\nmodels: [simple_cnn]\ndevices: [cpu]\ntraining: {epochs: 1, batch_size: 100}\n"
                               "measurement: {warmup_steps: 1, max_steps: 3}\n";
  const std::string quick = quick_file.string();
  // --concurrent does not wait for the machine's lock.
  const Outcome beside = Trainbench("run " + quick + " --concurrent --out " + (dir_ / "beside").string() + Plugins());
  EXPECT_EQ(beside.exit_code, 0) << beside.output;
  EXPECT_EQ(beside.output.find("waiting for the machine's benchmark lock"), std::string::npos) << beside.output;
  // Another folder without it: waits for the machine's lock, and runs once
  // the holder is gone (killed outright: the kernel drops its locks).
  const pid_t other = StartRun(quick, "other", "other.log");
  EXPECT_TRUE(LogShows("other.log", "waiting for the machine's benchmark lock"));
  kill(first, SIGKILL);
  int status = 0;
  waitpid(first, &status, 0);
  waitpid(other, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::ifstream in(dir_ / "other" / "results.json");
  EXPECT_EQ(json::parse(in)["cells"][0]["status"], "ok");
}

TEST_F(EndToEnd, ACorruptResultsFileUnderResumeIsKeptAsideAndTheCellsRunAgain) {
  const std::string config = Config(R"(name: corrupt
models: [simple_cnn]
devices: [cpu]
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 3}
)");
  const std::string run = "run " + config + " --out " + (dir_ / "out").string() + Plugins();
  ASSERT_EQ(Trainbench(run).exit_code, 0);
  json edited = Results();
  edited["cells"][0].erase("epoch_seconds");  // an ok cell without its epoch times
  std::ofstream(dir_ / "out" / "results.json") << edited.dump(2);
  const Outcome resumed = Trainbench(run + " --resume");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("is unusable (cell simple_cnn on cpu: 'epoch_seconds' missing or not a list); kept as"),
            std::string::npos)
      << resumed.output;
  bool kept = false;
  for (const auto& f : fs::directory_iterator(dir_ / "out"))
    kept |= f.path().filename().string().rfind("results.json.corrupt-", 0) == 0;
  EXPECT_TRUE(kept);
  const json r = Results();
  EXPECT_EQ(r["cells"][0]["status"], "ok");
  EXPECT_FALSE(r["cells"][0].contains("resumed"));
  EXPECT_FALSE(r["cells"][0]["epoch_seconds"].empty());
}

TEST_F(EndToEnd, ADatasetPathThatLoopsIsAConfigError) {
  fs::create_directory_symlink(dir_ / "loop", dir_ / "loop");
  const fs::path file = dir_ / "loop.yaml";
  std::ofstream(file) << "name: loop\ndataset: {kind: cifar10, path: " << (dir_ / "loop").string()
                      << "}\nmodels: [simple_cnn]\ndevices: [cpu]\n";
  const Outcome o = Trainbench("validate " + file.string() + Plugins());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("dataset.path: "), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("Too many levels of symbolic links"), std::string::npos) << o.output;
  EXPECT_EQ(std::count(o.output.begin(), o.output.end(), '\n'), 1) << o.output;
}

// `trainbench cache`: the engine caches a machine keeps, listed from the
// cache folder of the environment, and cleared; a machine without one says
// what to do.
// Any plugin's per-machine caches, as the SDK declares them
// (trainbench/sdk/cache.h): the host knows no plugin's format.
TEST_F(EndToEnd, TheCacheCommandListsAndClearsThePluginCaches) {
  const fs::path folder = dir_ / "xdg" / "trainbench";
  fs::create_directories(folder);
  const std::string env = "XDG_CACHE_HOME=" + (dir_ / "xdg").string() + " ";
  const Outcome empty = Shell(env + (BinDir() / "trainbench").string() + " cache 2>&1");
  EXPECT_EQ(empty.exit_code, 0) << empty.output;
  EXPECT_EQ(empty.output, "no plugin caches in " + folder.string() + "\n");
  std::ofstream(folder / "cudnn-engines-NVIDIA_H200-sm90-132mp.json")
      << R"({"format": "trainbench-engine-cache", "version": 1, "machine": {"gpu": "NVIDIA H200", "cudnn": "91900"},
            "entries": {"fwd a": {"engine": 3, "knobs": [[1, 2]], "ms": 0.5}}})";
  std::ofstream(folder / "cudnn-engines-Other-sm80-108mp.json") << "\x01\x02 not json";
  std::ofstream(folder / "acme-npu-kernels.json") << R"({"machine": {"npu": "X1"}, "entries": {"a": 1, "b": 2}})";
  std::ofstream(folder / "notes.txt") << "not a cache";
  const Outcome listed = Shell(env + (BinDir() / "trainbench").string() + " cache 2>&1");
  EXPECT_EQ(listed.exit_code, 0) << listed.output;
  EXPECT_NE(listed.output.find("cudnn-engines-NVIDIA_H200-sm90-132mp.json: 1 entry, "), std::string::npos)
      << listed.output;
  EXPECT_NE(listed.output.find("KiB (trainbench-engine-cache); cudnn 91900, gpu NVIDIA H200"), std::string::npos)
      << listed.output;
  EXPECT_NE(listed.output.find("acme-npu-kernels.json: 2 entries"), std::string::npos) << listed.output;
  EXPECT_NE(listed.output.find("cudnn 91900, gpu NVIDIA H200"), std::string::npos) << listed.output;
  EXPECT_NE(listed.output.find("cudnn-engines-Other-sm80-108mp.json: unusable: it is not valid JSON"),
            std::string::npos)
      << listed.output;
  EXPECT_EQ(listed.output.find("notes.txt"), std::string::npos) << listed.output;
  const Outcome cleared = Trainbench("cache --clear --dir " + folder.string());
  EXPECT_EQ(cleared.exit_code, 0) << cleared.output;
  // Only what reads as a plugin cache goes: a .json file that does not (a
  // project's package.json, a damaged file) is named and left alone.
  EXPECT_NE(cleared.output.find("removed 2 plugin cache file(s) from " + folder.string()), std::string::npos)
      << cleared.output;
  EXPECT_NE(cleared.output.find("left alone: cudnn-engines-Other-sm80-108mp.json (not valid JSON"), std::string::npos)
      << cleared.output;
  EXPECT_FALSE(fs::exists(folder / "cudnn-engines-NVIDIA_H200-sm90-132mp.json"));
  EXPECT_FALSE(fs::exists(folder / "acme-npu-kernels.json"));
  EXPECT_TRUE(fs::exists(folder / "cudnn-engines-Other-sm80-108mp.json"));
  EXPECT_TRUE(fs::exists(folder / "notes.txt"));
  const Outcome nowhere = Shell("env -u HOME -u XDG_CACHE_HOME " + (BinDir() / "trainbench").string() + " cache 2>&1");
  EXPECT_EQ(nowhere.exit_code, 2) << nowhere.output;
  EXPECT_NE(nowhere.output.find("error: no cache folder: neither XDG_CACHE_HOME nor HOME"), std::string::npos)
      << nowhere.output;
  EXPECT_EQ(std::count(nowhere.output.begin(), nowhere.output.end(), '\n'), 1) << nowhere.output;
}

TEST_F(EndToEnd, PluginsOthersCanModifyAreRefused) {
  const fs::path dir = dir_ / "shared_plugins";
  fs::create_directories(dir);
  fs::copy_file(PluginFile("simple_cnn"), dir / "libtrainbench_simple_cnn.so");
  fs::permissions(dir, fs::perms::all);  // 0777
  const Outcome refused = Trainbench("plugins --plugin-dir " + dir.string());
  ASSERT_EQ(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("refused: its folder " + dir.string() + " is writable by others (mode 0777)"),
            std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("--allow-insecure-plugins"), std::string::npos);
  const Outcome allowed = Trainbench("plugins --allow-insecure-plugins --plugin-dir " + dir.string());
  EXPECT_NE(allowed.output.find(dir.string() + "/libtrainbench_simple_cnn.so  (ABI"), std::string::npos)
      << allowed.output;
  fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
  fs::permissions(dir / "libtrainbench_simple_cnn.so",
                  fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_write);  // 0620
  const Outcome file_refused = Trainbench("plugins --plugin-dir " + dir.string());
  EXPECT_NE(file_refused.output.find("the file is writable by its group (mode 0620)"), std::string::npos)
      << file_refused.output;
}

TEST_F(EndToEnd, APluginThatHangsWhileLoadingIsReported) {
  setenv("TRAINBENCH_DESCRIBE_TIMEOUT", "2", 1);
  const Outcome timed = Trainbench("plugins --plugin-dir " + FixtureDir().string() + "_hang" + Plugins());
  unsetenv("TRAINBENCH_DESCRIBE_TIMEOUT");
  ASSERT_EQ(timed.exit_code, 0) << timed.output;
  EXPECT_NE(timed.output.find("fixture_hang_on_load.so: the worker hung while loading or describing it"),
            std::string::npos)
      << timed.output;
  EXPECT_NE(timed.output.find("simple_cnn"), std::string::npos) << timed.output;  // the rest still listed
}

TEST_F(EndToEnd, ReportComparesRunsAndDrawsTheFigure) {
  // The study's first H200 run, kept as it was (docs/results/h200.md has the latest).
  const std::string a = (SourceDir() / "docs/results/raw/h200-paper-10k-run1.results.json").string();
  const std::string b = (SourceDir() / "docs/results/raw/h200-paper-synthetic50k-run1.results.json").string();
  const std::string png = (dir_ / "figure.png").string();
  // The plot needs gnuplot (scripts/setup.sh installs it; CI has it).
  const bool have_gnuplot = std::system("command -v gnuplot >/dev/null 2>&1") == 0;
  const Outcome md = Trainbench("report " + a + " " + b + (have_gnuplot ? " --plot " + png : ""));
  ASSERT_EQ(md.exit_code, 0) << md.output;
  EXPECT_NE(
      md.output.find(
          "| paper@vm (NVIDIA H200) | resnet50 | 23.53M | cuda | 8606.0 | 1.19 s | - | 40.9% | 13.47x | - | - | - | - "
          "| ok |"),
      std::string::npos)
      << md.output;
  EXPECT_NE(md.output.find("paper-synthetic50k@vm"), std::string::npos);
  // Energy where it was measured (NVML on the H200), the ratio where both sides have it.
  const std::string measured = (SourceDir() / "docs/results/raw/h200-measures-energy.results.json").string();
  const Outcome energy = Trainbench("report " + measured);
  EXPECT_NE(energy.output.find("| 0.002951 | 2.42x | ok |"), std::string::npos) << energy.output;
  if (have_gnuplot) {
    std::ifstream image(png, std::ios::binary);
    char magic[4] = {};
    image.read(magic, 4);
    EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  } else {
    std::printf("gnuplot not installed here: the PNG is not checked\n");
  }
  const Outcome csv = Trainbench("report --format csv " + a);
  EXPECT_EQ(csv.output.rfind("run,model,params,device,samples_per_second,epoch_seconds_median,projected,test_accuracy,"
                             "speedup,status,time_to_train_seconds,speedup_time_to_train,mfu,joules_per_sample,"
                             "energy_ratio,peak_memory_bytes,peak_allocated_bytes\n",
                             0),
            0u)
      << csv.output;
  // Without gnuplot: the table still prints, then a one-line error that says what to install.
  const std::string command = "PATH=/nonexistent " + (BinDir() / "trainbench").string() + " report " + a + " --plot " +
                              (dir_ / "x.svg").string() + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  const int status = pclose(pipe);
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;
  EXPECT_NE(out.find("gnuplot not found: install it (Debian/Ubuntu: apt-get install gnuplot-nox)"), std::string::npos)
      << out;
  EXPECT_NE(out.find("| resnet18 |"), std::string::npos) << out;
}

TEST_F(EndToEnd, AConfigNamingARejectedPluginSaysWhyAtItsPosition) {
  const std::string config = Config("name: v\nmodels:\n  - simple_cnn\n  - fixture_fingerprint\ndevices: [cpu]\n");
  const Outcome o = Trainbench("validate " + config + " --plugin-dir " + FixtureDir().string() + Plugins());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find(":5:5: models[1]: model plugin 'fixture_fingerprint' was found but rejected: "),
            std::string::npos)
      << o.output;
  EXPECT_NE(o.output.find("LibTorch differs: the plugin has 0.0.1"), std::string::npos) << o.output;
  EXPECT_EQ(std::count(o.output.begin(), o.output.end(), '\n'), 1) << o.output;
}

TEST_F(EndToEnd, ValidateReportsOneLineWithPosition) {
  const std::string config = Config("name: v\nmodels: [resnet81]\ndevices: [cpu]\n");
  const Outcome o = Trainbench("validate " + config + Plugins());
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.output.find("models[0]: no model plugin 'resnet81'; did you mean 'resnet18'?"), std::string::npos)
      << o.output;
  EXPECT_EQ(std::count(o.output.begin(), o.output.end(), '\n'), 1) << o.output;

  const std::string bad_option =
      Config("name: v\nmodels: [{plugin: resnet18, options: {stme: cifar}}]\ndevices: [cpu]\n");
  const Outcome o2 = Trainbench("validate " + bad_option + Plugins());
  EXPECT_EQ(o2.exit_code, 2);
  EXPECT_NE(
      o2.output.find(":3:39: models[0].options.stme: plugin 'resnet18' has no option 'stme'; did you mean 'stem'?"),
      std::string::npos)
      << o2.output;

  setenv("TRAINBENCH_DATA", MiniData().c_str(), 1);
  for (const char* shipped : {"quickstart.yaml", "paper.yaml"}) {
    const Outcome o3 = Trainbench("validate " + (SourceDir() / "configs" / shipped).string() + Plugins());
    EXPECT_EQ(o3.exit_code, 0) << o3.output;
  }
}

TEST_F(EndToEnd, UnwritableOutputIsFoundBeforeTraining) {
  const std::string config = Config("name: w\nmodels: [simple_cnn]\ndevices: [cpu]\n");
  const Outcome o = Trainbench("run " + config + " --out /proc/no-such-dir" + Plugins());
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.output.find("/proc/no-such-dir: output folder cannot be created"), std::string::npos) << o.output;
}

TEST_F(EndToEnd, PluginsListsRejectionsAndSurvivesACrashingPlugin) {
  const Outcome o = Trainbench("plugins --plugin-dir " + FixtureDir().string() + Plugins());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  for (const char* expected :
       {"simple_cnn", "resnet18", "resnet50", "faulty_model", "[available]", "fixture_abi_major.so: plugin SDK ABI 2.0",
        "fixture_abi_minor.so: plugin SDK ABI 1.99", "fixture_no_entry.so: no 'trainbench_plugin_entry'",
        "fixture_not_a_library.so: not a loadable shared library",
        "fixture_crash_on_load.so: the worker died while loading or describing it (killed by signal SIGABRT"}) {
    EXPECT_NE(o.output.find(expected), std::string::npos) << expected << "\n" << o.output;
  }
}

// The plugin table for documentation comes from the option schemas
// (`--format markdown`): a heading and a table per plugin, a plugin's words
// kept inside their cell; `--format json` gives the same records to tools;
// another format is refused.
TEST_F(EndToEnd, PluginsAsMarkdownAndJsonComeFromTheSchemas) {
  const Outcome md = Trainbench("plugins --format markdown --plugin-dir " + FixtureDir().string() + Plugins());
  ASSERT_EQ(md.exit_code, 0) << md.output;
  for (const char* expected : {"### `resnet18` (model plugin", "| option | type | default | values | what it does |",
                               "| `whole_map_conv` | enum | `\"auto\"` | `auto`, `always`, `never` |",
                               "| `threads` | int |", "### Rejected", "fixture_abi_major.so: plugin SDK ABI 2.0"}) {
    EXPECT_NE(md.output.find(expected), std::string::npos) << expected << "\n" << md.output;
  }
  std::stringstream lines(md.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    size_t columns = 0;  // unescaped bars
    for (size_t i = 0; i < line.size(); ++i) columns += line[i] == '|' && (i == 0 || line[i - 1] != '\\');
    EXPECT_EQ(columns, 6u) << line;
  }
  const Outcome js = Trainbench("plugins --format json" + Plugins());
  ASSERT_EQ(js.exit_code, 0) << js.output;
  const json doc = json::parse(js.output);
  bool resnet = false;
  for (const auto& p : doc["plugins"])
    if (p.value("name", "") == "resnet50") resnet = p["options"].is_array() && p["loaded"] == true;
  EXPECT_TRUE(resnet) << js.output;
  const Outcome html = Trainbench("plugins --format html" + Plugins());
  EXPECT_NE(html.exit_code, 0);
  EXPECT_NE(html.output.find("html"), std::string::npos) << html.output;
}

// Data parallelism on the CPU (Gloo): the same code path as several GPUs
// with NCCL, which docs/results/raw/h200-data-parallel.md measures.
// A disk that fills up mid-run: after the first cell the run may write no
// file larger than 3,000 bytes (RLIMIT_FSIZE, set from outside as a quota
// would be), so the next results.json write fails in the kernel. (A link
// to /dev/full planted as results.json.tmp is refused, not followed.)
TEST_F(EndToEnd, AFullDiskMidRunIsReportedAndTheLastResultsStay) {
  const std::string config = Config(R"(name: diskfull
models: [simple_cnn, {plugin: simple_cnn, label: again}]
devices: [cpu]
training: {epochs: 1, batch_size: 50}
measurement: {warmup_steps: 1, max_steps: 30}
)");
  const fs::path out = dir_ / "out";
  const pid_t pid = StartRun(config);
  ASSERT_GE(pid, 0);
  ASSERT_TRUE(WaitForFirstCell());
  const struct rlimit full { 3000, 3000 };
  ASSERT_EQ(::prlimit(pid, RLIMIT_FSIZE, &full, nullptr), 0) << std::strerror(errno);
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream log_in(dir_ / "log");
  std::stringstream log;
  log << log_in.rdbuf();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1) << log.str();
  EXPECT_NE(log.str().find("results.json.tmp: write failed: File too large (the previous results.json is kept)"),
            std::string::npos)
      << log.str();
  fs::remove(out / "results.json.tmp");
  const json r = Results();  // the last good file, whole
  EXPECT_EQ(r["cells"][0]["status"], "ok");
  EXPECT_GT(r["cells"][0]["samples_per_second"].get<double>(), 0);
}

bool WorkerHasGloo() {
  const Outcome o = Worker("info");
  return o.output.find("\"gloo\"") != std::string::npos;
}

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

// A model plugin built against SDK ABI 1.0 predates Model::SyncBatchNorm():
// it still loads and trains, also data parallel, and a sync_batchnorm cell
// of it fails with what to do (the host never calls the missing method).
// The supervisor names no device: a GPU-like plugin it has never heard of
// (the stand-in, built as "acme_npu") gets ranks by its index option and is
// the run's system.gpu, from its own description (SDK ABI 1.2).
TEST_F(EndToEnd, ADeviceTheHostHasNeverHeardOfDescribesItself) {
  if (!WorkerHasGloo()) GTEST_SKIP() << "trainbench-worker built without Gloo (libgloo-dev)";
  const std::string config = Config(R"(name: npu
models: [simple_cnn]
devices:
  - {plugin: acme_npu, label: one}
  - {plugin: acme_npu, label: two, gpus: [1, 0]}
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 4, baseline: one}
)");
  const Outcome o = Trainbench("run " + config + " --out " + (dir_ / "out").string() + Plugins());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const json r = Results();
  ASSERT_EQ(r["cells"].size(), 2u);
  EXPECT_EQ(r["cells"][1]["status"], "ok") << r["cells"][1];
  EXPECT_EQ(r["cells"][1]["ranks"], 2);
  EXPECT_EQ(r["cells"][1]["rank_samples_per_second"].size(), 2u);
  EXPECT_EQ(r["cells"][1]["hardware"]["index"], 1);  // rank 0 took the first listed index
  ASSERT_TRUE(r["system"].contains("gpu")) << r["system"];
  EXPECT_EQ(r["system"]["gpu"]["uuid"], "GPU-stand-in-0");
  const Outcome plugins = Trainbench("plugins" + Plugins());
  EXPECT_NE(plugins.output.find("acme_npu"), std::string::npos) << plugins.output;
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

// Its cells' metrics carry the GPU it reported (hardware.index), as the
// cuda plugin's do: a scrape of the finished run, while it lingers.
TEST_F(EndToEnd, ADeviceTheHostHasNeverHeardOfGetsGpuLabelledMetrics) {
  const std::string config = Config(R"(name: npu-metrics
models: [simple_cnn]
devices: [{plugin: acme_npu, label: npu, options: {device_index: 1}}]
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 3, baseline: npu}
)");
  int port = 0;
  {
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    ::close(s);
  }
  const std::string log = (dir_ / "run.log").string();
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string command =
        (BinDir() / "trainbench").string() + " run " + config + " --out " + (dir_ / "out").string() + Plugins() +
        " --metrics-addr 127.0.0.1:" + std::to_string(port) + " --metrics-linger 60 > " + log + " 2>&1";
    execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  std::string text;
  bool exited = false;
  for (int i = 0; i < 1200 && !exited; ++i) {
    usleep(50000);
    exited = waitpid(pid, nullptr, WNOHANG) == pid;
    std::ifstream in(log);
    std::stringstream buffer;
    buffer << in.rdbuf();
    text = buffer.str();
    if (text.find("serving final metrics") != std::string::npos ||
        text.find("built without metrics") != std::string::npos)
      break;
  }
  if (text.find("built without metrics") != std::string::npos) {
    if (!exited) waitpid(pid, nullptr, 0);
    GTEST_SKIP() << "this trainbench was built without metrics (TRAINBENCH_WITH_PROMETHEUS=OFF)";
  }
  ASSERT_FALSE(exited) << text;
  const Outcome scrape = Shell("curl -s --max-time 10 http://127.0.0.1:" + std::to_string(port) + "/metrics");
  kill(pid, SIGTERM);  // ends the linger
  waitpid(pid, nullptr, 0);
  ASSERT_NE(scrape.output.find("trainbench_cell_samples_per_second{"), std::string::npos) << scrape.output << text;
  EXPECT_NE(scrape.output.find("device_type=\"acme_npu\""), std::string::npos);
  bool labelled = false;
  std::stringstream lines(scrape.output);
  for (std::string line; std::getline(lines, line);) {
    labelled |=
        line.rfind("trainbench_cell_samples_per_second{", 0) == 0 && line.find("gpu=\"1\"") != std::string::npos;
  }
  EXPECT_TRUE(labelled) << scrape.output;
}

TEST_F(EndToEnd, APluginBuiltAgainstThePreviousSdkHeadersTrains) {
  const std::string config = Config(R"(name: sdk11
models: [sdk11_model]
devices: [cpu]
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 3}
)");
  const Outcome o = Trainbench("run " + config + " --out " + (dir_ / "out").string() + Plugins());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const json cell = Results()["cells"][0];
  EXPECT_EQ(cell["status"], "ok") << cell;
  EXPECT_EQ(cell["plugins"][0]["abi"], "1.1");  // tests/fixtures/sdk-1.1: the real headers of SDK 1.1
}

// Built against SDK 1.3's frozen headers and overriding the two methods 1.3
// added for a model's own SGD (reserved slots since 1.5): it loads and
// trains, the host updating every parameter.
TEST_F(EndToEnd, APluginBuiltAgainstSdk13HeadersOverridingItsRetiredSlotsTrains) {
  const std::string config = Config(R"(name: sdk13
models: [{plugin: sdk13_model, options: {fault: sgd_taken}}]
devices: [cpu]
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 3}
)");
  const Outcome o = Trainbench("run " + config + " --out " + (dir_ / "out").string() + Plugins());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const json cell = Results()["cells"][0];
  EXPECT_EQ(cell["status"], "ok") << cell;
  EXPECT_EQ(cell["plugins"][0]["abi"], "1.3");
}

TEST_F(EndToEnd, OlderPluginsRunButCannotSyncBatchNorm) {
  if (!WorkerHasGloo()) GTEST_SKIP() << "trainbench-worker built without Gloo (libgloo-dev)";
  const std::string config = Config(R"(name: old-abi
models: [old_abi_model]
devices:
  - {plugin: cpu, label: alone, options: {threads: 1}}
  - {plugin: cpu, label: two, processes: 2, options: {threads: 1}}
  - {plugin: cpu, label: two-sync, processes: 2, sync_batchnorm: true, options: {threads: 1}}
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 3, baseline: alone}
)");
  const Outcome o = Trainbench("run " + config + " --out " + (dir_ / "out").string() + Plugins());
  EXPECT_EQ(o.exit_code, 3) << o.output;  // a cell failed
  const json cells = Results()["cells"];
  ASSERT_EQ(cells.size(), 3u);
  EXPECT_EQ(cells[0]["status"], "ok") << cells[0].dump(2);
  EXPECT_EQ(cells[0]["plugins"][0]["abi"], "1.0");
  EXPECT_EQ(cells[1]["status"], "ok") << cells[1].dump(2);
  EXPECT_EQ(cells[2]["status"], "failed");
  EXPECT_NE(cells[2]
                .value("reason", "")
                .find("sync_batchnorm: model plugin 'old_abi_model' was built against SDK ABI "
                      "1.0, which cannot synchronise batch normalisation; rebuild it"),
            std::string::npos)
      << cells[2].value("reason", "");
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

// A lab server's output folders: a finished cell is never lost to a rerun.
TEST_F(EndToEnd, AFolderWithResultsIsResumedOrRefusedAndChangedCellsAreKeptAside) {
  const std::string quick = R"(name: keep
models: [simple_cnn]
devices: [cpu]
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 3}
)";
  const std::string out = (dir_ / "out").string();
  ASSERT_EQ(Trainbench("run " + Config(quick) + " --out " + out + Plugins()).exit_code, 0);
  const json first = Results();
  ASSERT_EQ(first["cells"][0]["status"], "ok");
  // Without --resume: refused, the file as it was.
  const Outcome again = Trainbench("run " + Config(quick) + " --out " + out + Plugins());
  EXPECT_EQ(again.exit_code, 1) << again.output;
  EXPECT_NE(again.output.find(out + " holds the results of an earlier run (results.json); pass --resume"),
            std::string::npos)
      << again.output;
  EXPECT_EQ(Results(), first);
  // --resume with the cell's config changed: the finished cell goes to a
  // side file, named, before results.json is rewritten.
  std::string changed = quick;
  changed.replace(changed.find("batch_size: 100"), 15, "batch_size: 50");
  const Outcome resumed = Trainbench("run " + Config(changed) + " --out " + out + " --resume" + Plugins());
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("1 finished cell(s) of the earlier run no longer match this config (simple_cnn on "
                                "cpu: training.batch_size differ); kept in " +
                                out + "/results.dropped-"),
            std::string::npos)
      << resumed.output;
  fs::path side;
  for (const auto& entry : fs::directory_iterator(dir_ / "out"))
    if (entry.path().filename().string().rfind("results.dropped-", 0) == 0) side = entry.path();
  ASSERT_FALSE(side.empty());
  std::ifstream in(side);
  const json kept = json::parse(in);
  EXPECT_EQ(kept["format"], "trainbench-results/1");
  EXPECT_EQ(kept["cells"][0]["samples_per_second"], first["cells"][0]["samples_per_second"]);
  EXPECT_EQ(kept["experiment"], first["experiment"]);
  // `report` reads the side file as any results file.
  EXPECT_EQ(Trainbench("report " + side.string()).exit_code, 0);
}

// Settings from the environment are part of what a cell measured: recorded,
// part of --resume's key, and named by `report` where two runs differ.
TEST_F(EndToEnd, EnvironmentSettingsAreRecordedResumedOnAndReported) {
  const std::string config = Config(R"(name: env
models: [simple_cnn]
devices: [cpu]
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 3}
)");
  const std::string out = (dir_ / "out").string();
  const Outcome first = Shell("TRAINBENCH_POWERCAP_ROOT=/nonexistent " + (BinDir() / "trainbench").string() + " run " +
                              config + " --out " + out + Plugins() + " 2>&1");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const json before = Results();
  EXPECT_EQ(before["cells"][0]["config"]["environment"], json({{"TRAINBENCH_POWERCAP_ROOT", "/nonexistent"}}));
  EXPECT_FALSE(before["cells"][0]["config"]["environment"].contains("TRAINBENCH_MACHINE_LOCK"));  // the host's own
  // Resumed without it: not the same work, so run again, the old cell kept aside.
  const Outcome resumed = Trainbench("run " + config + " --out " + out + " --resume" + Plugins());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("(simple_cnn on cpu: environment.TRAINBENCH_POWERCAP_ROOT differ)"), std::string::npos)
      << resumed.output;
  EXPECT_FALSE(Results()["cells"][0].contains("resumed"));
  fs::path side;
  for (const auto& entry : fs::directory_iterator(dir_ / "out"))
    if (entry.path().filename().string().rfind("results.dropped-", 0) == 0) side = entry.path();
  ASSERT_FALSE(side.empty());
  const Outcome report = Trainbench("report " + side.string() + " " + out + "/results.json");
  EXPECT_EQ(report.exit_code, 0) << report.output;
  EXPECT_NE(report.output.find(
                "- simple_cnn on cpu, #1 and #2: environment.TRAINBENCH_POWERCAP_ROOT (\"/nonexistent\" / unset)"),
            std::string::npos)
      << report.output;
}

// The environment's table is the whole story: a value a variable does not
// take is refused before anything runs, naming the variable and what it
// takes; a TRAINBENCH_* variable trainbench does not read (a leftover switch)
// is named in a warning; diagnostics asked on the command line are recorded
// in each cell's configuration (the folder aside) and leave their files.
TEST_F(EndToEnd, TheEnvironmentIsCheckedAndDiagnosticsRecorded) {
  const std::string config = Config(R"(name: env-check
models: [simple_cnn]
devices: [cpu]
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 3}
)");
  const std::string bin = (BinDir() / "trainbench").string();
  for (const std::string& command : {" validate " + config, " run " + config + " --out " + (dir_ / "never").string()}) {
    const Outcome bad = Shell("TRAINBENCH_DESCRIBE_TIMEOUT=yes " + bin + command + Plugins() + " 2>&1");
    EXPECT_EQ(bad.exit_code, 2) << bad.output;
    EXPECT_NE(bad.output.find("TRAINBENCH_DESCRIBE_TIMEOUT='yes' is not understood: it takes seconds (up to 86400)"),
              std::string::npos)
        << bad.output;
  }
  EXPECT_FALSE(fs::exists(dir_ / "never" / "results.json"));
  const std::string out = (dir_ / "out").string();
  const Outcome run = Shell("TRAINBENCH_BN_PDL=0 " + bin + " run " + config + " --out " + out +
                            " --kernel-trace --kernel-trace-steps 2" + Plugins() + " 2>&1");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const size_t warned = run.output.find("set but not read by trainbench, so they change nothing: ");
  ASSERT_NE(warned, std::string::npos) << run.output;
  EXPECT_NE(run.output.find("TRAINBENCH_BN_PDL", warned), std::string::npos) << run.output;
  const json cell = Results()["cells"][0];
  EXPECT_EQ(cell["config"]["diagnostics"], json({{"kernel_trace_steps", 2}, {"graph_dump", false}})) << cell.dump();
  EXPECT_FALSE(cell["config"].contains("environment")) << "an unknown variable is not a setting";
  EXPECT_TRUE(fs::is_directory(dir_ / "out" / "diagnostics"));
}

TEST_F(EndToEnd, AResumedRunOfOtherCellsKeepsTheFinishedOnes) {
  const std::string config = Config(R"(name: select
models: [simple_cnn, {plugin: simple_cnn, label: again}]
devices: [cpu]
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 3}
)");
  const std::string run = "run " + config + " --out " + (dir_ / "out").string() + Plugins();
  ASSERT_EQ(Trainbench(run + " --cells 0").exit_code, 0);
  const double sps = Results()["cells"][0]["samples_per_second"].get<double>();
  // Cell 1 alone, resumed: cell 0 stays as it finished, not "not selected".
  const Outcome second = Trainbench(run + " --resume --cells 1");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const json r = Results();
  EXPECT_EQ(r["cells"][0]["status"], "ok") << r["cells"][0];
  EXPECT_EQ(r["cells"][0]["samples_per_second"].get<double>(), sps);
  EXPECT_EQ(r["cells"][1]["status"], "ok") << r["cells"][1];
}

// --resume keeps a finished cell only where it is the same cell: labels,
// place and config. Four alike cells are four cells; a renamed one runs again
// and the old one is kept aside, named.
TEST_F(EndToEnd, ResumeMatchesCellsByIdentityNotByConfigAlone) {
  const std::string body = R"(name: identity
models: [{plugin: simple_cnn, label: a}, {plugin: simple_cnn, label: b}, {plugin: simple_cnn, label: c},
         {plugin: simple_cnn, label: d}]
devices: [cpu]
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 3}
)";
  std::string config = Config(body);
  const std::string out = " --out " + (dir_ / "out").string() + Plugins();
  ASSERT_EQ(Trainbench("run " + config + out + " --cells 0,2").exit_code, 0);
  const double c_rate = Results()["cells"][2]["samples_per_second"].get<double>();
  const Outcome resumed = Trainbench("run " + config + out + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  json r = Results();
  std::vector<std::string> labels;
  for (const auto& cell : r["cells"]) labels.push_back(cell["model"]);
  EXPECT_EQ(labels, (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_TRUE(r["cells"][0].value("resumed", false));
  EXPECT_FALSE(r["cells"][1].value("resumed", false)) << "b took another cell's measurement";
  EXPECT_TRUE(r["cells"][2].value("resumed", false));
  EXPECT_EQ(r["cells"][2]["samples_per_second"].get<double>(), c_rate);
  EXPECT_FALSE(r["cells"][3].value("resumed", false));
  for (const auto& cell : r["cells"]) EXPECT_EQ(cell["status"], "ok") << cell;

  // b renamed e: e runs, b's result is kept aside and named.
  config = Config(std::string(body).replace(body.find("label: b"), 8, "label: e"));
  const Outcome renamed = Trainbench("run " + config + out + " --resume");
  ASSERT_EQ(renamed.exit_code, 0) << renamed.output;
  r = Results();
  EXPECT_EQ(r["cells"][1]["model"], "e");
  EXPECT_FALSE(r["cells"][1].value("resumed", false));
  EXPECT_TRUE(r["cells"][3].value("resumed", false));
  EXPECT_NE(renamed.output.find("b on cpu: no longer in the experiment"), std::string::npos) << renamed.output;
  bool kept_aside = false;
  for (const auto& entry : fs::directory_iterator(dir_ / "out")) {
    if (entry.path().filename().string().rfind("results.dropped-", 0) != 0) continue;
    std::ifstream in(entry.path());
    const json dropped = json::parse(in);
    kept_aside = dropped["cells"].size() == 1 && dropped["cells"][0]["model"] == "b";
  }
  EXPECT_TRUE(kept_aside);
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

// A results file larger than any run writes is refused before it is parsed
// (2.8 GB once took `report` past 8 GB of memory).
TEST_F(EndToEnd, ReportRefusesAResultsFileLargerThanItsLimit) {
  const fs::path huge = dir_ / "huge.results.json";
  std::ofstream(huge) << "{";
  fs::resize_file(huge, std::uintmax_t{300} << 20);  // sparse: no disk used
  const Outcome o = Trainbench("report " + huge.string());
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find(huge.string() + ": 300 MiB, larger than any results.json trainbench writes (the limit is "
                                          "256 MiB): not read"),
            std::string::npos)
      << o.output;
}

TEST_F(EndToEnd, LinksPlantedInTheOutputFolderAreRefusedNotFollowed) {
  const std::string config = Config(R"(name: planted
models: [simple_cnn]
devices: [cpu]
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 3}
)");
  const fs::path victim = dir_ / "victim";
  std::ofstream(victim) << "precious\n";
  auto intact = [&] {
    std::ifstream in(victim);
    std::string line;
    std::getline(in, line);
    return line == "precious" && fs::file_size(victim) == 9;
  };
  for (const std::string planted : {"results.json.tmp", "results.csv.tmp", "logs/cell-00-simple_cnn-cpu.log"}) {
    const fs::path out = dir_ / ("out-" + std::to_string(std::hash<std::string>()(planted)));
    fs::create_directories(out / "logs");
    fs::create_symlink(victim, out / planted);
    const Outcome o = Trainbench("run " + config + " --out " + out.string() + Plugins());
    EXPECT_NE(o.exit_code, 0) << planted << ": " << o.output;
    EXPECT_NE(o.output.find((out / planted).string() + ": is a symbolic link; trainbench never writes through one"),
              std::string::npos)
        << o.output;
    EXPECT_TRUE(intact()) << planted << " was followed";
  }
  // A logs folder that is a link elsewhere.
  const fs::path out = dir_ / "out-logs";
  fs::create_directories(out);
  fs::create_directories(dir_ / "elsewhere");
  fs::create_directory_symlink(dir_ / "elsewhere", out / "logs");
  const Outcome o = Trainbench("run " + config + " --out " + out.string() + Plugins());
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find((out / "logs").string() + ": is a symbolic link"), std::string::npos) << o.output;
  EXPECT_TRUE(fs::is_empty(dir_ / "elsewhere"));
}

TEST_F(EndToEnd, NamesInAResultsFileNeverReachAShellThroughThePlot) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot not installed";
  std::ifstream in(SourceDir() / "docs/results/raw/h200-paper-10k-run1.results.json");
  json doc = json::parse(in);
  const fs::path pwned = dir_ / "pwned";
  const std::string escape = "\n!touch " + pwned.string() + "\n";
  doc["experiment"]["name"] = "x" + escape;
  doc["experiment"]["measurement"]["baseline"] = "cpu" + escape;
  for (auto& cell : doc["cells"]) {
    cell["model"] = cell["model"].get<std::string>() + escape;
    cell["device"] = cell["device"].get<std::string>() + "'" + escape;
  }
  const fs::path file = dir_ / "hostile.results.json";
  std::ofstream(file) << doc.dump();
  const Outcome o = Trainbench("report " + file.string() + " --plot " + (dir_ / "figure.svg").string());
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_FALSE(fs::exists(pwned)) << "a name in a results file ran a shell command";
  EXPECT_TRUE(fs::exists(dir_ / "figure.svg"));
}

// A link planted where the plot goes (a shared results folder): replaced by
// the plot, its target never written.
TEST_F(EndToEnd, ThePlotNeverWritesThroughALink) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot not installed";
  const fs::path victim = dir_ / "victim.txt";
  std::ofstream(victim) << "keep me";
  fs::create_symlink(victim, dir_ / "figure.svg");
  const fs::path file = SourceDir() / "docs/results/raw/h200-paper-10k-run1.results.json";
  const Outcome o = Trainbench("report " + file.string() + " --plot " + (dir_ / "figure.svg").string());
  EXPECT_EQ(o.exit_code, 0) << o.output;
  std::ifstream in(victim);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "keep me");
  EXPECT_FALSE(fs::is_symlink(dir_ / "figure.svg"));
  EXPECT_GT(fs::file_size(dir_ / "figure.svg"), 1000u);
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_EQ(entry.path().filename().string().find("figure.svg.tmp"), std::string::npos) << entry.path();
}

TEST_F(EndToEnd, APasswordFileWithoutAUserIsRefusedOnTheCommandLine) {
  const std::string config = Config("name: auth\nmodels: [simple_cnn]\ndevices: [cpu]\n");
  std::ofstream(dir_ / "password") << "secret\n";
  const Outcome o = Trainbench("run " + config + " --out " + (dir_ / "out").string() + " --metrics-addr 127.0.0.1:0" +
                               " --metrics-password-file " + (dir_ / "password").string() + Plugins());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("--metrics-password-file " + (dir_ / "password").string() + " needs --metrics-user too"),
            std::string::npos)
      << o.output;
  EXPECT_FALSE(fs::exists(dir_ / "out" / "results.json"));
}

TEST_F(EndToEnd, ControlCharactersInNamesAreRefusedAtValidate) {
  const std::string name = Config("name: \"two\\nlines\"\nmodels: [simple_cnn]\ndevices: [cpu]\n");
  const Outcome o = Trainbench("validate " + name + Plugins());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("name: 'two\\x0alines' holds control characters"), std::string::npos) << o.output;
  const std::string plugin = Config("name: p\nmodels: [\"simple_cnn\\e[2J\"]\ndevices: [cpu]\n");
  const Outcome p = Trainbench("validate " + plugin + Plugins());
  EXPECT_EQ(p.exit_code, 2) << p.output;
  EXPECT_NE(p.output.find("models[0]: 'simple_cnn\\x1b[2J' holds control characters"), std::string::npos) << p.output;
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

// The weaker spots a hostile review found, each a one-line message or a
// warning that says what is wrong.
TEST_F(EndToEnd, WeakSpotsSayWhatIsWrongInOneLine) {
  const std::string quick = Config(R"(name: weak
models: [simple_cnn]
devices: [cpu]
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 3}
)");
  // A folder given as the config.
  const Outcome folder = Trainbench("validate " + dir_.string() + Plugins());
  EXPECT_EQ(folder.exit_code, 2) << folder.output;
  EXPECT_NE(folder.output.find(dir_.string() + ": not a regular file"), std::string::npos) << folder.output;
  // A results file with a field of the wrong type: no JSON library's words.
  const fs::path odd = dir_ / "odd.json";
  std::ofstream(odd) << R"({"format": "trainbench-results/1", "experiment": {"name": "x"}, "system": "a string",
                          "cells": [{"model": 3}]})";
  const Outcome report = Trainbench("report " + odd.string());
  EXPECT_EQ(report.exit_code, 1) << report.output;
  EXPECT_NE(report.output.find(odd.string() + ": "), std::string::npos) << report.output;
  EXPECT_EQ(report.output.find("[json.exception"), std::string::npos) << report.output;
  EXPECT_EQ(std::count(report.output.begin(), report.output.end(), '\n'), 1) << report.output;
  // A TLS certificate that is not there.
  const Outcome missing = Trainbench("run " + quick + " --out " + (dir_ / "m").string() + Plugins() +
                                     " --metrics-addr 127.0.0.1:0 --metrics-tls-cert " + (dir_ / "none.pem").string() +
                                     " --metrics-tls-key " + (dir_ / "none.key").string());
  if (missing.output.find("built without metrics") != std::string::npos)
    GTEST_SKIP() << "the rest needs /metrics: this trainbench was built without (TRAINBENCH_WITH_PROMETHEUS=OFF)";
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find((dir_ / "none.pem").string() + ": cannot read (No such file or directory)"),
            std::string::npos)
      << missing.output;
  // Every interface without authentication, behind an expired certificate:
  // it runs, and says so.
  const std::string key = (dir_ / "key.pem").string(), cert = (dir_ / "cert.pem").string();
  ASSERT_EQ(Shell("openssl req -new -newkey rsa:2048 -nodes -keyout " + key + " -out " + (dir_ / "r.csr").string() +
                  " -subj /CN=localhost >/dev/null 2>&1 && openssl x509 -req -in " + (dir_ / "r.csr").string() +
                  " -signkey " + key + " -days -1 -out " + cert + " >/dev/null 2>&1")
                .exit_code,
            0);
  const Outcome open = Trainbench("run " + quick + " --concurrent --out " + (dir_ / "open").string() + Plugins() +
                                  " --metrics-addr 0.0.0.0:0 --metrics-tls-cert " + cert + " --metrics-tls-key " + key);
  EXPECT_EQ(open.exit_code, 0) << open.output;
  EXPECT_NE(open.output.find(cert + ": the TLS certificate has expired"), std::string::npos) << open.output;
  EXPECT_NE(open.output.find("without authentication: anyone who can reach this machine can read them"),
            std::string::npos)
      << open.output;
}

}  // namespace
}  // namespace trainbench

// End to end, resume and locks: finished cells kept, changed ones kept aside, runs kept apart per folder and machine.
#include "e2e.h"

namespace trainbench {
namespace {

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

}  // namespace
}  // namespace trainbench

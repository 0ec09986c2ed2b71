// End to end, hostile input: configs, links, names and passwords that must be refused in one line.
#include "e2e.h"

namespace trainbench {
namespace {

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

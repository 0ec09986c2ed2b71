#include "config_loader.h"

#include <gtest/gtest.h>

#include <chrono>

namespace trainbench {
namespace {

const char* kGood = R"(name: t
seed: 3
dataset: {kind: synthetic, train_size: 256, test_size: 64}
models: [simple_cnn, {plugin: resnet18, options: {stem: cifar}}]
devices:
  - plugin: cpu
    time_budget_seconds: 5
training:
  epochs: 2
  batch_size: 32
  optimizer: {name: sgd, lr: 0.1}
  schedule: {name: step, step_size: 1, gamma: 0.5}
measurement: {warmup_steps: 1, max_steps: 10}
)";

// The message of the ConfigError that parsing `text` raises, or "".
std::string ErrorOf(const std::string& text) {
  try {
    ParseExperiment(text, "exp.yaml", "/tmp");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const auto pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return text.replace(pos, from.size(), to);
}

TEST(ConfigLoader, ParsesAGoodFile) {
  Experiment e = ParseExperiment(kGood, "exp.yaml", "/tmp");
  EXPECT_EQ(e.name, "t");
  EXPECT_EQ(e.seed, 3u);
  ASSERT_EQ(e.models.size(), 2u);
  EXPECT_EQ(e.models[1].plugin, "resnet18");
  EXPECT_EQ(e.models[1].options_node["stem"].as<std::string>(), "cifar");
  EXPECT_EQ(e.devices[0].time_budget_seconds.value(), 5.0);
  EXPECT_EQ(e.training.epochs, 2);
  EXPECT_EQ(e.training.schedule.name, "step");
  EXPECT_EQ(e.measurement.max_steps.value(), 10);
  EXPECT_EQ(e.measurement.baseline, "cpu");
  EXPECT_EQ(e.dataset.train_size.value(), 256);
}

TEST(ConfigLoader, ReadsAdamwsSettings) {
  const Experiment e =
      ParseExperiment(Replace(kGood, "{name: sgd, lr: 0.1}",
                              "{name: adamw, lr: 0.001, betas: [0.8, 0.99], eps: 1e-6, weight_decay: 0.05}"),
                      "exp.yaml", "/tmp");
  EXPECT_EQ(e.training.optimizer.name, "adamw");
  EXPECT_EQ(e.training.optimizer.betas[0], 0.8);
  EXPECT_EQ(e.training.optimizer.betas[1], 0.99);
  EXPECT_EQ(e.training.optimizer.eps, 1e-6);
  EXPECT_EQ(e.training.optimizer.weight_decay, 0.05);
}

TEST(ConfigLoader, UnknownKeyGivesPositionAndSuggestion) {
  const std::string error = ErrorOf(Replace(kGood, "  epochs: 2", "  epohcs: 2"));
  EXPECT_EQ(error.rfind("exp.yaml:9:3: training.epohcs: unknown key; did you mean 'epochs'?", 0), 0u) << error;
}

TEST(ConfigLoader, ATabInTheIndentationIsNamed) {
  const std::string error = ErrorOf(Replace(kGood, "  epochs: 2", "\tepochs: 2"));
  EXPECT_NE(error.find("exp.yaml:"), std::string::npos) << error;
  EXPECT_NE(error.find("(line 9 is indented with a tab: YAML indents with spaces only)"), std::string::npos) << error;
}

TEST(ConfigLoader, WrongTypeNamesTheKey) {
  const std::string error = ErrorOf(Replace(kGood, "batch_size: 32", "batch_size: lots"));
  EXPECT_NE(error.find("exp.yaml:10:15: training.batch_size: expected an integer"), std::string::npos) << error;
}

TEST(ConfigLoader, OutOfRangeValue) {
  const std::string error = ErrorOf(Replace(kGood, "epochs: 2", "epochs: 0"));
  EXPECT_NE(error.find("training.epochs: 0 is out of range [1, 100000]"), std::string::npos) << error;
}

TEST(ConfigLoader, BadChoiceSuggestsTheClosest) {
  const std::string error = ErrorOf(Replace(kGood, "name: sgd", "name: sdg"));
  EXPECT_NE(error.find("training.optimizer.name: 'sdg' is not one of sgd, adam, adamw; did you mean 'sgd'?"),
            std::string::npos)
      << error;
}

TEST(ConfigLoader, SyntaxErrorHasLineAndColumn) {
  const std::string error = ErrorOf("name: t\nmodels: [a, b\n");
  EXPECT_EQ(error.rfind("exp.yaml:3:1: YAML syntax error", 0), 0u) << error;
}

TEST(ConfigLoader, ContradictionsAreErrors) {
  EXPECT_NE(ErrorOf(Replace(kGood, "max_steps: 10", "max_steps: 1")).find("must be larger than warmup_steps"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Replace(kGood, "{name: sgd, lr: 0.1}", "{name: sgd, lr: 0.1, momentum: 0, nesterov: true}"))
                .find("nesterov: needs momentum > 0"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Replace(kGood, "{name: sgd, lr: 0.1}", "{name: adam, lr: 0.1, overlap: false}"))
                .find("training.optimizer.overlap: applies to sgd only"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Replace(kGood, "{name: sgd, lr: 0.1}", "{name: adamw, lr: 0.1, momentum: 0.8}"))
                .find("training.optimizer.momentum: applies to sgd only; remove it for adamw"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Replace(kGood, "{name: sgd, lr: 0.1}", "{name: sgd, lr: 0.1, betas: [0.9, 0.99]}"))
                .find("training.optimizer.betas: applies to adam and adamw only"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Replace(kGood, "{name: sgd, lr: 0.1}", "{name: adamw, lr: 0.1, betas: [0.9]}"))
                .find("training.optimizer.betas: takes a list of two numbers"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Replace(kGood, "{name: sgd, lr: 0.1}", "{name: adamw, lr: 0.1, betas: [0.9, 1.5]}"))
                .find("training.optimizer.betas[1]"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Replace(kGood, "{name: sgd, lr: 0.1}", "{name: sgd, lr: 0.1, overlap: sometimes}"))
                .find("training.optimizer.overlap"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Replace(kGood, "measurement: {", "measurement: {baseline: cdu, "))
                .find("measurement.baseline: 'cdu' is not one of the devices; did you mean 'cpu'?"),
            std::string::npos);
}

// Left out, the baseline is the cpu device, or the first device where none
// is labelled cpu (a GPU-only experiment needs no baseline line); named, it
// must be one of the devices.
TEST(ConfigLoader, TheBaselineLeftOutIsTheCpuOrTheFirstDevice) {
  const std::string two = Replace(kGood, "  - plugin: cpu\n    time_budget_seconds: 5\n",
                                  "  - {plugin: cpu, label: fast}\n  - {plugin: cpu, label: cpu}\n");
  EXPECT_EQ(ParseExperiment(two, "exp.yaml", "/tmp").measurement.baseline, "cpu");
  const std::string gpu_only = Replace(kGood, "  - plugin: cpu\n    time_budget_seconds: 5\n",
                                       "  - {plugin: cpu, label: bf16}\n  - {plugin: cpu, label: fp32}\n");
  EXPECT_EQ(ParseExperiment(gpu_only, "exp.yaml", "/tmp").measurement.baseline, "bf16");
  EXPECT_EQ(ParseExperiment(Replace(gpu_only, "measurement: {", "measurement: {baseline: fp32, "), "exp.yaml", "/tmp")
                .measurement.baseline,
            "fp32");
  EXPECT_NE(ErrorOf(Replace(gpu_only, "measurement: {", "measurement: {baseline: cpu, "))
                .find("measurement.baseline: 'cpu' is not one of the devices"),
            std::string::npos);
}

TEST(ConfigLoader, MetricsTlsAndDataParallelKeys) {
  const std::string tls = std::string(kGood) + "metrics: {tls: {cert_file: c.pem, key_file: /etc/k.pem}}\n";
  const Experiment e = ParseExperiment(tls, "exp.yaml", "/cfg");
  EXPECT_EQ(e.metrics.tls.cert_file, "/cfg/c.pem");  // relative to the config's folder
  EXPECT_EQ(e.metrics.tls.key_file, "/etc/k.pem");
  EXPECT_NE(ErrorOf(std::string(kGood) + "metrics: {tls: {cert_file: c.pem}}\n").find("metrics.tls: needs both"),
            std::string::npos);
  const Experiment dp =
      ParseExperiment(Replace(kGood, "  - plugin: cpu\n", "  - plugin: cpu\n    processes: 2\n"), "exp.yaml", "/tmp");
  EXPECT_EQ(dp.devices[0].ranks, 2);
  EXPECT_TRUE(dp.devices[0].device_indices.empty());
  const Experiment gpus =
      ParseExperiment(Replace(kGood, "  - plugin: cpu\n", "  - plugin: cpu\n    gpus: [2, 3]\n"), "exp.yaml", "/tmp");
  EXPECT_EQ(gpus.devices[0].ranks, 2);
  EXPECT_EQ(gpus.devices[0].device_indices, (std::vector<int64_t>{2, 3}));
}

TEST(ConfigLoader, DuplicateLabelsAreErrors) {
  const std::string error = ErrorOf(Replace(kGood, "models: [simple_cnn,", "models: [simple_cnn, simple_cnn,"));
  EXPECT_NE(error.find("label 'simple_cnn' is used twice"), std::string::npos) << error;
}

TEST(ConfigLoader, MissingRequiredSections) {
  EXPECT_NE(ErrorOf("name: t\ndataset: {kind: synthetic}\ndevices: [cpu]\n").find("models: missing"),
            std::string::npos);
  EXPECT_NE(ErrorOf("models: [a]\n").find("missing key 'name'"), std::string::npos);
  EXPECT_NE(ErrorOf("- just\n- a list\n").find("expected a mapping at the top level"), std::string::npos);
}

// Without dataset.path or TRAINBENCH_DATA, CIFAR-10 is where `trainbench
// data fetch cifar10` installs it; without a data folder at all, the
// message says what to set.
TEST(ConfigLoader, Cifar10WithoutAPathIsInTheDefaultDataFolder) {
  const std::string config = Replace(kGood, "kind: synthetic", "kind: cifar10");
  const std::string with_variable = Replace(kGood, "kind: synthetic", "kind: cifar10, path: \"${TRAINBENCH_DATA}\"");
  unsetenv("TRAINBENCH_DATA");
  const char* home = std::getenv("HOME");
  const std::string saved_home = home != nullptr ? home : "";
  setenv("XDG_DATA_HOME", "/srv/xdg", 1);
  EXPECT_EQ(ParseExperiment(config, "exp.yaml", "/srv/exp").dataset.path, "/srv/xdg/trainbench/cifar-10-batches-bin");
  EXPECT_EQ(ParseExperiment(with_variable, "exp.yaml", "/srv/exp").dataset.path,
            "/srv/xdg/trainbench/cifar-10-batches-bin");
  unsetenv("XDG_DATA_HOME");
  setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(ParseExperiment(config, "exp.yaml", "/srv/exp").dataset.path,
            "/home/someone/.local/share/trainbench/cifar-10-batches-bin");
  setenv("TRAINBENCH_DATA", "/data/c10", 1);
  EXPECT_EQ(ParseExperiment(config, "exp.yaml", "/srv/exp").dataset.path, "/data/c10");
  unsetenv("TRAINBENCH_DATA");
  unsetenv("HOME");
  const std::string error = ErrorOf(config);
  EXPECT_NE(error.find("dataset.path: no CIFAR-10 folder: set dataset.path or TRAINBENCH_DATA"), std::string::npos)
      << error;
  if (!saved_home.empty()) setenv("HOME", saved_home.c_str(), 1);
}

// {name: adamw} trains with AdamW's defaults, not SGD's; what is given wins.
TEST(ConfigLoader, EachOptimizerHasItsOwnDefaults) {
  const auto optimizer = [](const std::string& yaml) {
    return ParseExperiment(Replace(kGood, "optimizer: {name: sgd, lr: 0.1}", "optimizer: " + yaml), "exp.yaml", "/")
        .training.optimizer;
  };
  const auto adamw = optimizer("{name: adamw}");
  EXPECT_DOUBLE_EQ(adamw.lr, 1e-3);
  EXPECT_DOUBLE_EQ(adamw.weight_decay, 1e-2);
  const auto adam = optimizer("{name: adam}");
  EXPECT_DOUBLE_EQ(adam.lr, 1e-3);
  EXPECT_DOUBLE_EQ(adam.weight_decay, 0.0);
  const auto sgd = optimizer("{name: sgd}");
  EXPECT_DOUBLE_EQ(sgd.lr, 0.01);
  EXPECT_DOUBLE_EQ(sgd.weight_decay, 5e-4);
  const auto given = optimizer("{name: adamw, lr: 0.05, weight_decay: 0.1}");
  EXPECT_DOUBLE_EQ(given.lr, 0.05);
  EXPECT_DOUBLE_EQ(given.weight_decay, 0.1);
}

TEST(ConfigLoader, RelativeDataPathIsAgainstTheConfigFolder) {
  Experiment e =
      ParseExperiment(Replace(kGood, "kind: synthetic", "kind: cifar10, path: data/c10"), "exp.yaml", "/srv/exp");
  EXPECT_EQ(e.dataset.path, "/srv/exp/data/c10");
}

TEST(ConfigLoader, DidYouMeanOnlySuggestsCloseWords) {
  EXPECT_EQ(DidYouMean("resnt18", {"resnet18", "resnet50", "simple_cnn"}), "resnet18");
  EXPECT_EQ(DidYouMean("vgg", {"resnet18", "resnet50", "simple_cnn"}), "");
}

// Found by the fuzzer (tests/fuzz): keys that are lists, and control
// characters echoed from the input, used to escape as other exceptions or
// break the one-line message.
TEST(ConfigLoader, OddKeysAndControlCharactersStayOneLineErrors) {
  const std::string key_error = ErrorOf("name: x\n? [a, b]\n: 1\n");
  EXPECT_NE(key_error.find("a key must be a plain name"), std::string::npos) << key_error;
  // yaml-cpp echoes the unknown escape character itself, here \x01.
  const std::string escape_error = ErrorOf("name: \"\\\x01\"\n");
  EXPECT_EQ(escape_error.find('\x01'), std::string::npos) << escape_error;
  EXPECT_NE(escape_error.find("unknown escape character: \\x01"), std::string::npos) << escape_error;
  EXPECT_EQ(escape_error.rfind("exp.yaml:1:", 0), 0u) << escape_error;
}

// A "billion laughs" alias bomb: yaml-cpp shares aliased nodes, and the
// loader only walks the keys it knows, so this must end quickly in an error.
TEST(ConfigLoader, AliasBombEndsQuicklyInAnError) {
  // models: [&a0 [x, ...], &a1 [*a0 x10], ..., &a11 [*a10 x10]]: 10^12 leaves
  // if expanded.
  std::string text =
      "name: bomb\ndataset: {kind: synthetic}\ndevices: [cpu]\nmodels: [&a0 [x, x, x, x, x, x, x, x, x, x]";
  for (int i = 1; i < 12; ++i) {
    text += ", &a" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) text += (j ? ", *a" : "*a") + std::to_string(i - 1);
    text += "]";
  }
  text += "]\n";
  const auto start = std::chrono::steady_clock::now();
  const std::string error = ErrorOf(text);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(error.find("models[0]: expected a mapping of keys to values"), std::string::npos) << error;
  EXPECT_LT(seconds, 5.0);
}

TEST(ConfigLoader, RefusesHugeFiles) {
  const std::string path = ::testing::TempDir() + "/huge.yaml";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::string line(1000, '#');
    for (int i = 0; i < 2000; ++i) std::fprintf(f, "%s\n", line.c_str());
    std::fclose(f);
  }
  try {
    LoadExperiment(path);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("limit for a config file"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainbench

namespace trainbench {
namespace {

TEST(ConfigLoader, RefusesBytesThatAreNotUtf8WithTheirPosition) {
  const std::string text = Replace(kGood, "name: t", "name: t\xff");
  EXPECT_EQ(ErrorOf(text), "exp.yaml:1:8: byte 0xff is not UTF-8; save the file as UTF-8");
  // An overlong encoding of '/' and a lone surrogate are not UTF-8 either.
  EXPECT_NE(ErrorOf(Replace(kGood, "seed: 3", "seed: 3 #\xc0\xaf")).find("2:10: byte 0xc0"), std::string::npos);
  EXPECT_NE(ErrorOf(Replace(kGood, "seed: 3", "seed: 3 #\xed\xa0\x80")).find("byte 0xed"), std::string::npos);
  EXPECT_EQ(ErrorOf(Replace(kGood, "name: t", "name: t\xc3\xa9t\xc3\xa9")), "");  // été is fine
}

TEST(ConfigLoader, RefusesADuplicateKeyNamingBothPlaces) {
  EXPECT_EQ(ErrorOf(Replace(kGood, "  epochs: 2\n", "  epochs: 2\n  epochs: 200\n")),
            "exp.yaml:10:3: training.epochs: key given twice (first at line 9, column 3); keep one");
  EXPECT_NE(ErrorOf(Replace(kGood, "seed: 3\n", "seed: 3\nseed: 4\n")).find("seed: key given twice"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Replace(kGood, "{name: sgd, lr: 0.1}", "{name: sgd, lr: 0.1, lr: 9}"))
                .find("training.optimizer.lr: key given twice"),
            std::string::npos);
}

TEST(ConfigLoader, RefusesLabelsThatCannotNameAFile) {
  EXPECT_EQ(ErrorOf(Replace(kGood, "models: [simple_cnn,", "models: [{plugin: simple_cnn, label: a/b},")),
            "exp.yaml:4:38: models[0].label: 'a/b' cannot name a file: no '/', control characters, '.' or '..' "
            "(give a plain 'label')");
  EXPECT_NE(ErrorOf(Replace(kGood, "models: [simple_cnn,", "models: [{plugin: simple_cnn, label: ..},")).find("'..'"),
            std::string::npos);
  const std::string long_label(231, 'x');
  EXPECT_NE(ErrorOf(Replace(kGood, "models: [simple_cnn,", "models: [{plugin: simple_cnn, label: " + long_label + "},"))
                .find("231 bytes; the limit is 100"),
            std::string::npos);
}

TEST(ConfigLoader, RefusesMoreCellsThanTheLimit) {
  std::string models = "models: [";
  for (int i = 0; i < 100; ++i)
    models += (i ? ", " : "") + std::string("{plugin: simple_cnn, label: m") + std::to_string(i) + "}";
  std::string devices = "devices: [";
  for (int i = 0; i < 41; ++i)
    devices += (i ? ", " : "") + std::string("{plugin: cpu, label: d") + std::to_string(i) + "}";
  const std::string text = "name: big\ndataset: {kind: synthetic}\n" + models + "]\n" + devices + "]\n";
  EXPECT_NE(ErrorOf(text).find("100 models x 41 devices make 4100 cells; the limit is 4096"), std::string::npos)
      << ErrorOf(text);
}

}  // namespace
}  // namespace trainbench

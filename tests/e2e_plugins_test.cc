// End to end, plugins: the listing, the caches, refused and hanging plugins, plugins built against older SDKs, a device
// the host has never heard of.
#include "e2e.h"

namespace trainbench {
namespace {

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

  // Named plugins only (docs/usage.md's tables): nothing else, no rejected
  // files; a name no loaded plugin has is refused in one line.
  const Outcome two = Trainbench("plugins --format markdown resnet50 cpu" + Plugins());
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("### `resnet50`"), std::string::npos) << two.output;
  EXPECT_NE(two.output.find("### `cpu`"), std::string::npos) << two.output;
  EXPECT_EQ(two.output.find("### `resnet18`"), std::string::npos) << two.output;
  EXPECT_EQ(two.output.find("Rejected"), std::string::npos) << two.output;
  const Outcome unknown = Trainbench("plugins resnet51" + Plugins());
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("no plugin named 'resnet51'"), std::string::npos) << unknown.output;
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

// Built against the frozen headers of SDK 1.1, 1.2 and 1.4
// (tests/fixtures/sdk-1.N: the real headers of each): each loads and trains,
// and its record says the ABI it was built against (1.3: below).
TEST_F(EndToEnd, PluginsBuiltAgainstEachEarlierSdksHeadersTrain) {
  const std::string config = Config(R"(name: sdk-minors
models: [sdk11_model, sdk12_model, sdk14_model]
devices: [cpu]
training: {epochs: 1, batch_size: 100}
measurement: {warmup_steps: 1, max_steps: 3}
)");
  const Outcome o = Trainbench("run " + config + " --out " + (dir_ / "out").string() + Plugins());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const json cells = Results()["cells"];
  ASSERT_EQ(cells.size(), 3u) << cells;
  const char* abis[] = {"1.1", "1.2", "1.4"};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(cells[i]["status"], "ok") << cells[i];
    EXPECT_EQ(cells[i]["plugins"][0]["abi"], abis[i]) << cells[i];
  }
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

}  // namespace
}  // namespace trainbench

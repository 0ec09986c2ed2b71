// On a GPU: the GPU bench's points (bench/gpu_memory.sh) on a card the size
// of the study's (an RTX 3050 class, 8 GiB), emulated with the cuda device's
// memory_limit_gib. Skipped where this build has no cuda plugin or no GPU.
#include "e2e.h"

namespace trainbench {
namespace {

// Each cell trains within the limit, or fails alone with the one line that
// says what it needed and what to lower; no worker crashes, and the run goes
// on to the next cell.
TEST_F(EndToEnd, EveryGpuBenchPointUnderAn8GiBLimitTrainsOrFailsInOneLine) {
  if (!fs::exists(PluginFile("cuda"))) GTEST_SKIP() << "this build has no cuda plugin";
  constexpr double kLimitGiB = 8;
  struct Point {
    int batch, size, classes;
    std::vector<std::string> devices;
  };
  const std::vector<Point> points = {
      {128, 32, 10, {"fp32", "fp32-cl-graph", "bf16-cl-graph"}},
      {1024, 32, 10, {"fp32", "fp32-cl-graph", "bf16-cl-graph"}},
      {256, 224, 1000, {"bf16-cl-graph"}},
  };
  const std::map<std::string, std::string> options = {
      {"fp32", "amp: none"},
      {"fp32-cl-graph", "amp: none, channels_last: true, cuda_graph: true"},
      {"bf16-cl-graph", "amp: bf16, channels_last: true, cuda_graph: true"},
  };
  int trained = 0, refused = 0;
  for (const Point& p : points) {
    const std::string name = "card8-b" + std::to_string(p.batch) + "-" + std::to_string(p.size);
    std::ostringstream config;
    config << "name: " << name << "\nseed: 0\n"
           << "dataset: {kind: synthetic, train_size: " << 4 * p.batch << ", test_size: " << p.batch
           << ", image_size: " << p.size << ", num_classes: " << p.classes << "}\n"
           << "models: [resnet18, resnet50]\ndevices:\n";
    for (const std::string& d : p.devices)
      config << "  - {plugin: cuda, label: " << d << ", options: {" << options.at(d)
             << ", memory_limit_gib: " << kLimitGiB << "}}\n";
    config << "training: {epochs: 1, batch_size: " << p.batch << ", augment: false}\n"
           << "measurement: {warmup_steps: 1, eval_batch_size: " << p.batch << ", baseline: " << p.devices.front()
           << "}\n";
    const fs::path file = dir_ / (name + ".yaml");
    std::ofstream(file) << config.str();
    const fs::path out = dir_ / name;
    const Outcome o = Trainbench("run " + file.string() + " --out " + out.string() + Plugins());
    std::ifstream in(out / "results.json");
    const json r = json::parse(in, nullptr, false);
    ASSERT_FALSE(r.is_discarded()) << o.output;
    ASSERT_EQ(r["cells"].size(), 2 * p.devices.size()) << o.output;
    for (const json& cell : r["cells"]) {
      if (cell["status"] == "skipped") GTEST_SKIP() << "no GPU here: " << cell["reason"];
      const std::string where = name + " " + cell["model"].get<std::string>() + " " + cell["device"].get<std::string>();
      if (cell["status"] == "ok") {
        ++trained;
        EXPECT_LE(cell["peak_memory_bytes"].get<double>(), kLimitGiB * (1 << 30)) << where;
        EXPECT_GT(cell["peak_allocated_bytes"].get<double>(), 0) << where;
        continue;
      }
      ++refused;
      ASSERT_EQ(cell["status"], "failed") << where << ": " << cell.dump();
      const std::string reason = cell["reason"];
      EXPECT_EQ(reason.rfind("out of device memory: ", 0), 0u) << where << ": " << reason;
      EXPECT_NE(reason.find("its limit is 8.00 GiB"), std::string::npos) << where << ": " << reason;
      EXPECT_EQ(reason.find('\n'), std::string::npos) << where << ": " << reason;
    }
    // 3: the run finished with a failed cell; never a crash of the host.
    EXPECT_TRUE(o.exit_code == 0 || o.exit_code == 3) << name << " exit " << o.exit_code << "\n" << o.output;
  }
  std::printf("under %.0f GiB: %d cells trained, %d refused in one line\n", kLimitGiB, trained, refused);
  EXPECT_GT(trained, 0);
}

}  // namespace
}  // namespace trainbench

#pragma once
// Paths the tests get from CTest's environment (see tests/CMakeLists.txt).
#include <cstdlib>
#include <filesystem>
#include <string>

namespace trainbench::testing {

// Compiled-in paths (tests/CMakeLists.txt); TRAINBENCH_TEST_DATA may also
// come from the environment.
inline std::string Env(const char* name) {
  const std::string key = name;
  if (key == "TRAINBENCH_TEST_DATA") {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return v;
    return TRAINBENCH_TEST_DATA;
  }
  if (key == "TRAINBENCH_BIN_DIR") return TRAINBENCH_BIN_DIR;
  if (key == "TRAINBENCH_PLUGIN_DIR") return TRAINBENCH_PLUGIN_DIR;
  if (key == "TRAINBENCH_FIXTURE_DIR") return TRAINBENCH_FIXTURE_DIR;
  if (key == "TRAINBENCH_FAKE_NVML") return TRAINBENCH_FAKE_NVML;
  if (key == "TRAINBENCH_TEST_PLUGIN_DIR") return TRAINBENCH_TEST_PLUGIN_DIR;
  if (key == "TRAINBENCH_SOURCE_DIR") return TRAINBENCH_SOURCE_DIR;
  return "";
}
/// The CIFAR-10 mini set (2,000 train / 500 test records).
inline std::filesystem::path MiniData() { return std::filesystem::path(Env("TRAINBENCH_TEST_DATA")) / "cifar-10-mini"; }
inline std::filesystem::path PluginDir() { return Env("TRAINBENCH_PLUGIN_DIR"); }
inline std::filesystem::path FixtureDir() { return Env("TRAINBENCH_FIXTURE_DIR"); }
inline std::filesystem::path TestPluginDir() { return Env("TRAINBENCH_TEST_PLUGIN_DIR"); }
/// NVML's stand-in (tests/fixtures/fake_nvml.cc): 250 W for "GPU-stand-in-N".
inline std::filesystem::path FakeNvml() { return Env("TRAINBENCH_FAKE_NVML"); }
inline std::filesystem::path BinDir() { return Env("TRAINBENCH_BIN_DIR"); }
inline std::filesystem::path SourceDir() { return Env("TRAINBENCH_SOURCE_DIR"); }
inline std::filesystem::path PluginFile(const std::string& name) {
  return PluginDir() / ("libtrainbench_" + name + ".so");
}

}  // namespace trainbench::testing

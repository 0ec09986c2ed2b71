// `trainbench cache` on the plugins' per-machine caches as the SDK declares
// them (trainbench/sdk/cache.h): listed and cleared knowing no plugin.
#include "plugin_caches.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "trainbench/sdk/cache.h"

namespace trainbench {
namespace {
namespace fs = std::filesystem;

class PluginCaches : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("plugin_caches_" + std::to_string(::getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(PluginCaches, EachCacheFileIsListedWithItsMachineOrItsProblem) {
  std::ofstream(dir_ / "cudnn-engines-NVIDIA_H200-sm90-132mp.json")
      << R"({"format": "trainbench-engine-cache", "version": 1, "machine": {"gpu": "NVIDIA H200", "cudnn": "91900"},
            "entries": {"fwd a": {"engine": 3}, "fwd b": {"engine": 7}}})";
  std::ofstream(dir_ / "cudnn-engines-Old_GPU-sm80-108mp.json") << "{not json";
  std::ofstream(dir_ / "acme-npu.json") << R"({"machine": {"npu": "X1", "cores": 8}, "entries": {}})";
  std::ofstream(dir_ / "half.json") << R"({"machine": {}})";
  std::ofstream(dir_ / "acme-npu.json.lock") << "";
  std::ofstream(dir_ / "notes.txt") << "not a cache";
  fs::create_directories(dir_ / "a-folder.json");
  const std::vector<PluginCacheFile> files = ListPluginCaches(dir_);
  ASSERT_EQ(files.size(), 5u);
  EXPECT_EQ(files[0].file.filename(), "a-folder.json");
  EXPECT_EQ(files[0].problem, "is not a regular file");
  EXPECT_EQ(files[1].file.filename(), "acme-npu.json");
  EXPECT_TRUE(files[1].problem.empty()) << files[1].problem;
  EXPECT_EQ(files[1].entries, 0u);
  EXPECT_EQ(files[1].machine.at("cores"), "8");  // a value that is not a string, as JSON
  EXPECT_EQ(files[2].file.filename(), "cudnn-engines-NVIDIA_H200-sm90-132mp.json");
  EXPECT_EQ(files[2].entries, 2u);
  EXPECT_EQ(files[2].format, "trainbench-engine-cache");
  EXPECT_EQ(files[2].machine.at("gpu"), "NVIDIA H200");
  EXPECT_GT(files[2].bytes, 0u);
  EXPECT_EQ(files[3].problem, "is not valid JSON");
  EXPECT_EQ(files[4].file.filename(), "half.json");
  EXPECT_EQ(files[4].problem, "lacks the 'machine' and 'entries' objects of a plugin cache");
  EXPECT_TRUE(ListPluginCaches(dir_ / "absent").empty());
}

TEST_F(PluginCaches, ClearingRemovesCacheFilesLocksAndLeftoversOnly) {
  const char* cache = R"({"machine": {"gpu": "A"}, "entries": {}})";
  for (const char* name : {"cudnn-engines-A-sm90-132mp.json", "acme-npu.json"}) std::ofstream(dir_ / name) << cache;
  for (const char* name : {"cudnn-engines-A-sm90-132mp.json.lock", "cudnn-engines-A-sm90-132mp.json.tmp.4242"})
    std::ofstream(dir_ / name) << "x";
  // Not caches: other files, JSON that is not a plugin cache (a project's
  // package.json) and its look-alike companions, a temporary file's
  // look-alike, a bare extension, a link (its target stays), a folder.
  std::ofstream(dir_ / "package.json") << R"({"name": "mine", "dependencies": {}})";
  const std::vector<std::string> kept = {"notes.txt",    "cudnn-engines-A-sm90-132mp.json.tmp.evil",
                                         ".json",        "acme.json.lock.old",
                                         "package.json", "package.json.lock",
                                         "broken.json",  "broken.json.tmp.12"};
  for (const auto& name : kept)
    if (name != "package.json") std::ofstream(dir_ / name) << "x";
  fs::create_directories(dir_ / "elsewhere");
  std::ofstream(dir_ / "elsewhere" / "target.json") << "keep me";
  fs::create_symlink(dir_ / "elsewhere" / "target.json", dir_ / "linked.json");
  fs::create_directories(dir_ / "folder.json");
  std::vector<std::string> errors;
  EXPECT_EQ(ClearPluginCaches(dir_, &errors), 2u);
  EXPECT_TRUE(errors.empty()) << errors.front();
  EXPECT_FALSE(fs::exists(dir_ / "cudnn-engines-A-sm90-132mp.json"));
  EXPECT_FALSE(fs::exists(dir_ / "cudnn-engines-A-sm90-132mp.json.lock"));
  EXPECT_FALSE(fs::exists(dir_ / "cudnn-engines-A-sm90-132mp.json.tmp.4242"));
  EXPECT_FALSE(fs::exists(dir_ / "acme-npu.json"));
  for (const auto& name : kept) EXPECT_TRUE(fs::exists(dir_ / name)) << name;
  EXPECT_TRUE(fs::is_symlink(dir_ / "linked.json"));
  EXPECT_TRUE(fs::exists(dir_ / "elsewhere" / "target.json"));
  EXPECT_TRUE(fs::is_directory(dir_ / "folder.json"));
  EXPECT_EQ(ClearPluginCaches(dir_ / "absent", &errors), 0u);
  EXPECT_TRUE(errors.empty());
}

// A run's folder pointed at by mistake: its results are not caches, whatever
// the other .json files in it are.
TEST_F(PluginCaches, AFolderWithResultsIsRefusedAndKeptWhole) {
  std::ofstream(dir_ / "results.json") << R"({"machine": {}, "entries": {}})";
  std::ofstream(dir_ / "cudnn-engines-A-sm90-132mp.json") << R"({"machine": {"gpu": "A"}, "entries": {}})";
  std::vector<std::string> errors;
  try {
    ClearPluginCaches(dir_, &errors);
    FAIL() << "a folder holding results.json was cleared";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("holds results.json: a run's folder"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(dir_ / "results.json"));
  EXPECT_TRUE(fs::exists(dir_ / "cudnn-engines-A-sm90-132mp.json"));
}

TEST(PluginCacheDirectory, FollowsXdgThenHome) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string saved_xdg = xdg ? xdg : "", saved_home = home ? home : "";
  ::setenv("XDG_CACHE_HOME", "/var/cache/me", 1);
  ::setenv("HOME", "/home/me", 1);
  EXPECT_EQ(sdk::CacheDirectory(), fs::path("/var/cache/me/trainbench"));
  ::setenv("XDG_CACHE_HOME", "relative/path", 1);  // the XDG specification: ignore it
  EXPECT_EQ(sdk::CacheDirectory(), fs::path("/home/me/.cache/trainbench"));
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(sdk::CacheDirectory(), fs::path("/home/me/.cache/trainbench"));
  ::unsetenv("HOME");
  EXPECT_TRUE(sdk::CacheDirectory().empty());
  if (xdg) ::setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
  if (home) ::setenv("HOME", saved_home.c_str(), 1);
}

}  // namespace
}  // namespace trainbench

// The per-machine file of cuDNN engine choices (plugins/models/resnet/cudnn/engine_cache.h):
// what a repeat run reads, and what a missing, stale, corrupt or unwritable
// file does. Plain files: runs on any machine.
#include "engine_cache.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace trainbench::plugins {
namespace {

namespace fs = std::filesystem;

const std::map<std::string, std::string> kMachine = {{"gpu", "NVIDIA H200"}, {"driver", "580.159"}, {"cudnn", "91900"}};

class EngineCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("trainbench-engine-cache-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    file_ = dir_ / "sub" / "cudnn-engines.json";
  }
  void TearDown() override { fs::remove_all(dir_); }

  EngineCache Open(const std::map<std::string, std::string>& machine = kMachine) {
    return EngineCache(file_, machine, [this](const std::string& message) { warnings_.push_back(message); });
  }
  void Write(const std::string& text) {
    fs::create_directories(file_.parent_path());
    std::ofstream(file_, std::ios::binary) << text;
  }
  nlohmann::json ReadJson() const {
    std::ifstream in(file_);
    return nlohmann::json::parse(in);
  }

  fs::path dir_, file_;
  std::vector<std::string> warnings_;
};

EngineChoice Choice(int64_t engine, std::vector<std::pair<int64_t, int64_t>> knobs = {}) {
  EngineChoice choice;
  choice.engine = engine;
  choice.knobs = std::move(knobs);
  choice.milliseconds = 0.25;
  return choice;
}

TEST_F(EngineCacheTest, AMissingFileIsEmptyAndSilentAndAStoreCreatesIt) {
  {
    EngineCache cache = Open();
    EXPECT_EQ(cache.size(), 0u);
    EXPECT_FALSE(cache.Find("fwd a").has_value());
    cache.Store("fwd a", Choice(12, {{1, 0}, {24, 7}}));
    cache.Store("bwd-data b", Choice(3));
  }
  EXPECT_TRUE(warnings_.empty());
  ASSERT_TRUE(fs::exists(file_));
  EngineCache again = Open();  // a repeat run
  EXPECT_TRUE(warnings_.empty());
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(*again.Find("fwd a"), Choice(12, {{1, 0}, {24, 7}}));
  EXPECT_DOUBLE_EQ(again.Find("fwd a")->milliseconds, 0.25);
  EXPECT_EQ(*again.Find("bwd-data b"), Choice(3));
  EXPECT_EQ(ReadJson()["machine"]["gpu"], "NVIDIA H200");
}

TEST_F(EngineCacheTest, ACorruptFileIsRebuiltWithAWarning) {
  const std::string good_entry = R"({"engine": 1, "knobs": [[1, 2]]})";
  const std::string header =
      R"({"format": "trainbench-engine-cache", "version": 1, "machine": {"cudnn": "91900", "driver": "580.159", "gpu": "NVIDIA H200"}, )";
  const std::vector<std::pair<std::string, std::string>> corrupt = {
      {"binary", std::string("\x00\xff\xfe garbage", 11)},
      {"truncated", header + R"("entries": {"k": )" + good_entry.substr(0, 10)},
      {"not an object", "[1, 2, 3]"},
      {"another format", R"({"format": "something-else", "version": 1, "machine": {}, "entries": {}})"},
      {"a newer version", R"({"format": "trainbench-engine-cache", "version": 2, "machine": {}, "entries": {}})"},
      {"no entries", header.substr(0, header.size() - 2) + "}"},
      {"engine a string", header + R"("entries": {"k": {"engine": "12"}}})"},
      {"negative engine", header + R"("entries": {"k": {"engine": -1}}})"},
      {"knob of three", header + R"("entries": {"k": {"engine": 1, "knobs": [[1, 2, 3]]}}})"},
      {"knob type out of range", header + R"("entries": {"k": {"engine": 1, "knobs": [[99999, 2]]}}})"},
      {"time not a number", header + R"("entries": {"k": {"engine": 1, "ms": "fast"}}})"},
      {"machine value a number",
       R"({"format": "trainbench-engine-cache", "version": 1, "machine": {"gpu": 1}, "entries": {}})"},
  };
  for (const auto& [what, text] : corrupt) {
    warnings_.clear();
    Write(text);
    EngineCache cache = Open();
    ASSERT_EQ(warnings_.size(), 1u) << what;
    EXPECT_NE(warnings_[0].find(file_.string()), std::string::npos) << warnings_[0];
    EXPECT_NE(warnings_[0].find("rebuilding"), std::string::npos) << warnings_[0];
    EXPECT_EQ(cache.size(), 0u) << what;
    EXPECT_FALSE(cache.Find("k").has_value()) << what;
    cache.Store("fresh", Choice(5));
    EngineCache again = Open();
    EXPECT_EQ(warnings_.size(), 1u) << what << ": the rebuilt file is read without complaint";
    EXPECT_EQ(again.size(), 1u) << what;
    EXPECT_EQ(*again.Find("fresh"), Choice(5)) << what;
  }
}

TEST_F(EngineCacheTest, AnotherMachinesFileIsStaleAndRebuilt) {
  Open().Store("fwd a", Choice(12));
  auto upgraded = kMachine;
  upgraded["driver"] = "590.10";
  EngineCache cache = Open(upgraded);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("stale (driver was '580.159', is now '590.10')"), std::string::npos) << warnings_[0];
  EXPECT_FALSE(cache.Find("fwd a").has_value());
  cache.Store("fwd b", Choice(4));
  EXPECT_EQ(ReadJson()["machine"]["driver"], "590.10");
  EXPECT_FALSE(ReadJson()["entries"].contains("fwd a"));

  // A description with an extra field is another machine's too.
  warnings_.clear();
  auto fewer = upgraded;
  fewer.erase("cudnn");
  EngineCache other = Open(fewer);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("stale"), std::string::npos) << warnings_[0];
}

TEST_F(EngineCacheTest, AFileTooLargeOrNotAFileIsRebuilt) {
  Write(std::string((16u << 20) + 1, ' '));
  EngineCache large = Open();
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("larger"), std::string::npos) << warnings_[0];
  large.Store("k", Choice(1));
  EXPECT_LT(fs::file_size(file_), 1000u);

  warnings_.clear();
  fs::remove(file_);
  fs::create_directories(file_);  // a directory where the file should be
  EngineCache directory = Open();
  ASSERT_GE(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("not a regular file"), std::string::npos) << warnings_[0];
  directory.Store("k", Choice(2));  // cannot replace a directory: memory only
  EXPECT_EQ(*directory.Find("k"), Choice(2));
}

TEST_F(EngineCacheTest, AnUnwritableCacheWarnsOnceAndWorksInMemory) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "sub") << "a file where the cache's folder should be";
  EngineCache cache = Open();
  cache.Store("a", Choice(1));
  cache.Store("b", Choice(2));
  cache.Forget("a");
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("cannot write"), std::string::npos) << warnings_[0];
  EXPECT_FALSE(cache.Find("a").has_value());
  EXPECT_EQ(*cache.Find("b"), Choice(2));
}

TEST_F(EngineCacheTest, AForgottenChoiceLeavesTheFile) {
  EngineCache first = Open();
  first.Store("a", Choice(1));
  first.Store("b", Choice(2));
  first.Forget("a");
  EngineCache again = Open();
  EXPECT_FALSE(again.Find("a").has_value());
  EXPECT_EQ(*again.Find("b"), Choice(2));
}

// Two runs at once (two workers, two jobs on one node): each keeps what the
// other stored, and the file is whole at every moment.
TEST_F(EngineCacheTest, ProcessesStoringAtOnceLoseNothing) {
  constexpr int kProcesses = 6, kEach = 25;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      EngineCache cache(file_, kMachine, nullptr);
      for (int i = 0; i < kEach; ++i)
        cache.Store("p" + std::to_string(p) + " k" + std::to_string(i), Choice(p * 100 + i));
      std::_Exit(0);
    }
    children.push_back(pid);
  }
  // Meanwhile, every read sees a whole file (or none yet).
  for (int i = 0; i < 200; ++i) {
    EngineCache reader = Open();
    ASSERT_TRUE(warnings_.empty()) << warnings_[0];
  }
  for (const pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EngineCache all = Open();
  EXPECT_TRUE(warnings_.empty());
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kProcesses * kEach));
  EXPECT_EQ(*all.Find("p3 k7"), Choice(307));
}

TEST(EngineCacheDirectory, GpuNamesBecomeSafeFileNames) {
  EXPECT_EQ(FileNameSafe("NVIDIA H200"), "NVIDIA_H200");
  EXPECT_EQ(FileNameSafe("../../etc/passwd"), ".._.._etc_passwd");
  EXPECT_EQ(FileNameSafe(""), "_");
}

}  // namespace
}  // namespace trainbench::plugins

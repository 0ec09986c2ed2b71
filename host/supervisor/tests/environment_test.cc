// The environment's table (host/supervisor/environment.h): the values each
// variable takes, what is recorded, and that the table is complete: every
// TRAINBENCH_* variable read anywhere in host/, plugins/ and sdk/ is in it,
// and there are at most ten.
#include "environment.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>

#include "test_env.h"

namespace trainbench {
namespace {

namespace fs = std::filesystem;

struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  const char* name_;
};

TEST(Environment, ValuesNotTakenAreRefusedNamingTheVariableAndItsValues) {
  EXPECT_NO_THROW(CheckEnvironment());
  for (const char* bad : {"yes", "5abc", " 1", "1\n", "nan"}) {
    const ScopedEnv env("TRAINBENCH_DESCRIBE_TIMEOUT", bad);
    try {
      CheckEnvironment();
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind("TRAINBENCH_DESCRIBE_TIMEOUT='", 0), 0u) << message;
      EXPECT_NE(message.find("seconds (up to 86400)"), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
  for (const char* good : {"1", "0.5", ""}) {
    const ScopedEnv env("TRAINBENCH_DESCRIBE_TIMEOUT", good);
    EXPECT_NO_THROW(CheckEnvironment()) << good;
  }
  for (const char* bad : {"0", "-1", "ten", "1e9"}) {
    const ScopedEnv env("TRAINBENCH_DESCRIBE_TIMEOUT", bad);
    EXPECT_THROW(CheckEnvironment(), std::invalid_argument) << bad;
  }
  const ScopedEnv env("TRAINBENCH_DESCRIBE_TIMEOUT", "2.5");
  EXPECT_NO_THROW(CheckEnvironment());
  {
    // A relative lock path would lock per working folder: two benchmarks at once.
    const ScopedEnv relative("TRAINBENCH_MACHINE_LOCK", "trainbench.lock");
    EXPECT_THROW(CheckEnvironment(), std::invalid_argument);
  }
  const ScopedEnv absolute("TRAINBENCH_MACHINE_LOCK", "/run/lock/mine.lock");
  EXPECT_NO_THROW(CheckEnvironment());
}

// A reader never acts on a value the run would refuse: "5abc" is not 5 s.
TEST(Environment, ASettingIsCheckedWhenItIsRead) {
  EXPECT_EQ(EnvironmentSetting("TRAINBENCH_DESCRIBE_TIMEOUT"), std::nullopt);
  {
    const ScopedEnv env("TRAINBENCH_DESCRIBE_TIMEOUT", "2.5");
    EXPECT_EQ(EnvironmentSetting("TRAINBENCH_DESCRIBE_TIMEOUT"), std::optional<std::string>("2.5"));
  }
  {
    const ScopedEnv env("TRAINBENCH_DESCRIBE_TIMEOUT", "");
    EXPECT_EQ(EnvironmentSetting("TRAINBENCH_DESCRIBE_TIMEOUT"), std::nullopt);  // empty is unset
  }
  for (const char* bad : {"5abc", "0", "-1", "1e9"}) {
    const ScopedEnv env("TRAINBENCH_DESCRIBE_TIMEOUT", bad);
    try {
      EnvironmentSetting("TRAINBENCH_DESCRIBE_TIMEOUT");
      ADD_FAILURE() << "read '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), std::string("TRAINBENCH_DESCRIBE_TIMEOUT='") + bad +
                                           "' is not understood: it takes seconds (up to 86400) (or unset it)");
    }
  }
  EXPECT_THROW(EnvironmentSetting("TRAINBENCH_NOT_IN_THE_TABLE"), std::logic_error);
}

TEST(Environment, OnlyTheVariablesThatCanChangeAFigureAreRecorded) {
  // From none (the machine's shell may set some, OPENBLAS_CORETYPE for one).
  const nlohmann::json recorded = RecordedEnvironment();
  for (const auto& [name, value] : recorded.items()) ::unsetenv(name.c_str());
  const ScopedEnv rapl("TRAINBENCH_POWERCAP_ROOT", "/tmp/rapl");
  const ScopedEnv lock("TRAINBENCH_MACHINE_LOCK", "/tmp/x.lock");
  const ScopedEnv empty("TRAINBENCH_NVML_LIBRARY", "");
  EXPECT_EQ(RecordedEnvironment(), nlohmann::json({{"TRAINBENCH_POWERCAP_ROOT", "/tmp/rapl"}}));
}

// The settings of LibTorch and the libraries under it move figures too
// (DNNL_MAX_CPU_ISA=SSE41 cut a CPU cell's rate by 56%): each declared one is
// recorded when set; others are not settings.
TEST(Environment, EveryDeclaredOutsideVariableIsRecordedWhenSet) {
  for (const OutsideVariable& v : OutsideVariables()) {
    const std::string name = std::string(v.name) + (v.prefix ? "SOME_KNOB" : "");
    const ScopedEnv env(name.c_str(), "7");
    const nlohmann::json recorded = RecordedEnvironment();
    EXPECT_EQ(recorded.value(name, ""), "7") << name << ": " << recorded.dump();
  }
  const ScopedEnv isa("DNNL_MAX_CPU_ISA", "SSE41");
  const ScopedEnv capability("ATEN_CPU_CAPABILITY", "default");
  const ScopedEnv home("TORCH_HOME", "/tmp/torch");
  const ScopedEnv lookalike("MY_OMP_THREADS", "3");
  const ScopedEnv empty("OMP_NUM_THREADS", "");
  const nlohmann::json recorded = RecordedEnvironment();
  EXPECT_EQ(recorded.value("DNNL_MAX_CPU_ISA", ""), "SSE41");
  EXPECT_EQ(recorded.value("ATEN_CPU_CAPABILITY", ""), "default");
  for (const char* not_a_setting : {"TORCH_HOME", "MY_OMP_THREADS", "OMP_NUM_THREADS"})
    EXPECT_FALSE(recorded.contains(not_a_setting)) << not_a_setting;
}

TEST(Environment, UnknownVariablesAreNamed) {
  const ScopedEnv old("TRAINBENCH_BN_PDL", "0");
  const ScopedEnv retired("TRAINBENCH_GRAPH_FILL", "1");  // now the cuda device's graph_fill option
  const ScopedEnv known("TRAINBENCH_POWERCAP_ROOT", "/tmp/rapl");
  const std::vector<std::string> unknown = UnknownEnvironment();
  EXPECT_NE(std::find(unknown.begin(), unknown.end(), "TRAINBENCH_BN_PDL"), unknown.end());
  EXPECT_NE(std::find(unknown.begin(), unknown.end(), "TRAINBENCH_GRAPH_FILL"), unknown.end());
  EXPECT_EQ(std::find(unknown.begin(), unknown.end(), "TRAINBENCH_POWERCAP_ROOT"), unknown.end());
}

TEST(Environment, TheTableListsEveryVariableTheSourcesReadAndNoMoreThanSeven) {
  std::set<std::string> table;
  for (const EnvironmentVariable& v : EnvironmentVariables()) table.insert(v.name);
  EXPECT_LE(table.size(), 7u);
  const std::regex read(R"re((?:getenv|EnvironmentSetting)\("(TRAINBENCH_[A-Z0-9_]+)"\))re");
  std::set<std::string> found;
  for (const char* dir : {"host", "plugins", "sdk"}) {
    for (const auto& entry : fs::recursive_directory_iterator(testing::SourceDir() / dir)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".cc" && ext != ".h" && ext != ".cu" && ext != ".cuh")) continue;
      const std::string parent = entry.path().parent_path().filename().string();
      if (parent == "tests") continue;  // the tests beside the code (this one among them) read what they test
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      const std::string s = text.str();
      for (std::sregex_iterator m(s.begin(), s.end(), read), end; m != end; ++m) {
        found.insert((*m)[1]);
        EXPECT_EQ(table.count((*m)[1]), 1u) << (*m)[1] << " read in " << entry.path() << " but not in the table";
      }
    }
  }
  EXPECT_EQ(found, table) << "every variable in the table is read somewhere, and the scan finds them all";
}

TEST(Environment, TheReferenceListsEveryVariable) {
  const std::string reference = EnvironmentReference();
  for (const EnvironmentVariable& v : EnvironmentVariables())
    EXPECT_NE(reference.find(std::string("| `") + v.name + "` |"), std::string::npos) << v.name;
}

}  // namespace
}  // namespace trainbench

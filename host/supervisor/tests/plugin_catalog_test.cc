// The plugin catalog (host/supervisor/plugin_catalog.h) on its own: what
// discovery loads, rejects with its reason, shadows, and refuses as unsafe
// before any of its code runs.
#include "plugin_catalog.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "test_env.h"

namespace trainbench {
namespace {

namespace fs = std::filesystem;

// A fresh folder only its owner can write.
fs::path Folder(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("catalog-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                           fs::perms::others_exec);
  return dir;
}

TEST(PluginCatalog, TheBuildsPluginsLoadWithTheirKinds) {
  const PluginCatalog catalog = PluginCatalog::Discover({testing::PluginDir()});
  for (const char* name : {"simple_cnn", "resnet18", "resnet50"}) {
    const PluginInfo* p = catalog.Find(name);
    ASSERT_NE(p, nullptr) << name;
    EXPECT_TRUE(p->loaded);
    EXPECT_EQ(p->kind(), "model");
    EXPECT_EQ(p->sha256.size(), 64u);
  }
  ASSERT_NE(catalog.Find("cpu"), nullptr);
  EXPECT_EQ(catalog.Find("cpu")->kind(), "device");
  EXPECT_EQ(catalog.Find("no_such_plugin"), nullptr);
  const std::vector<std::string> models = catalog.Names("model");
  EXPECT_NE(std::find(models.begin(), models.end(), "resnet18"), models.end());
  EXPECT_EQ(std::find(models.begin(), models.end(), "cpu"), models.end());
}

TEST(PluginCatalog, TheFirstOfTwoPluginsOfOneNameWinsAndTheOtherIsShadowed) {
  const fs::path dir = Folder("shadow");
  fs::copy_file(testing::PluginFile("cpu"), dir / "libtrainbench_cpu.so");
  const PluginCatalog catalog = PluginCatalog::Discover({dir, testing::PluginDir()});
  const PluginInfo* cpu = catalog.Find("cpu");
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(fs::path(cpu->path).parent_path(), dir);
  int shadowed = 0;
  for (const PluginInfo& p : catalog.plugins())
    if (p.path == testing::PluginFile("cpu").string()) {
      EXPECT_FALSE(p.loaded);
      EXPECT_NE(p.reason.find("shadowed by " + (dir / "libtrainbench_cpu.so").string()), std::string::npos) << p.reason;
      ++shadowed;
    }
  EXPECT_EQ(shadowed, 1);
  fs::remove_all(dir);
}

TEST(PluginCatalog, AFileWithoutTheEntryPointIsRejectedWithItsReason) {
  const fs::path dir = Folder("reject");
  fs::copy_file(testing::FixtureDir() / "fixture_no_entry.so", dir / "no_entry.so");
  const PluginCatalog catalog = PluginCatalog::Discover({dir});
  ASSERT_EQ(catalog.plugins().size(), 1u);
  const PluginInfo& p = catalog.plugins().front();
  EXPECT_FALSE(p.loaded);
  EXPECT_EQ(p.reason.rfind((dir / "no_entry.so").string() + ":", 0), 0u) << p.reason;
  EXPECT_NE(catalog.FindRejected("no_entry"), nullptr);
  EXPECT_TRUE(catalog.Names("model").empty());
  fs::remove_all(dir);
}

TEST(PluginCatalog, AFolderOthersCanWriteIsRefusedUnlessAllowed) {
  const fs::path dir = Folder("unsafe");
  fs::copy_file(testing::PluginFile("cpu"), dir / "libtrainbench_cpu.so");
  fs::permissions(dir, fs::perms::all);
  const PluginCatalog refused = PluginCatalog::Discover({dir});
  EXPECT_EQ(refused.Find("cpu"), nullptr);
  ASSERT_EQ(refused.plugins().size(), 1u);
  EXPECT_NE(refused.plugins().front().reason.find("refused: its folder " + dir.string()), std::string::npos)
      << refused.plugins().front().reason;
  EXPECT_NE(refused.plugins().front().reason.find("--allow-insecure-plugins"), std::string::npos);
  const PluginCatalog allowed = PluginCatalog::Discover({dir}, /*allow_insecure=*/true);
  EXPECT_NE(allowed.Find("cpu"), nullptr);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trainbench

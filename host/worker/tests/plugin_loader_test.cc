#include "plugin_loader.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include "test_env.h"

namespace trainbench::worker {
namespace {

using trainbench::testing::FixtureDir;
using trainbench::testing::PluginFile;
using trainbench::testing::TestPluginDir;

std::string LoadError(const std::filesystem::path& path) {
  try {
    LoadPlugin(path);
  } catch (const PluginError& e) {
    return e.what();
  }
  return "";
}

TEST(PluginLoader, LoadsTheBuiltPlugins) {
  for (const char* name : {"simple_cnn", "resnet18", "resnet50", "cpu"}) {
    LoadedPlugin plugin = LoadPlugin(PluginFile(name));
    ASSERT_NE(plugin.descriptor, nullptr);
    EXPECT_EQ(std::string(plugin.descriptor->name), name);
    EXPECT_EQ(plugin.descriptor->abi_major, TRAINBENCH_SDK_ABI_MAJOR);
    const nlohmann::json d = DescriptorJson(*plugin.descriptor);
    EXPECT_FALSE(d["description"].get<std::string>().empty());
    EXPECT_EQ(d["kind"], std::string(name) == "cpu" ? "device" : "model");
  }
}

TEST(PluginLoader, RejectsAFileThatIsNotASharedLibrary) {
  const std::string error = LoadError(FixtureDir() / "fixture_not_a_library.so");
  EXPECT_NE(error.find("fixture_not_a_library.so"), std::string::npos) << error;
  EXPECT_NE(error.find("not a loadable shared library"), std::string::npos) << error;
}

TEST(PluginLoader, RejectsALibraryWithoutTheEntrySymbol) {
  const std::string error = LoadError(FixtureDir() / "fixture_no_entry.so");
  EXPECT_NE(error.find("no 'trainbench_plugin_entry' symbol"), std::string::npos) << error;
}

TEST(PluginLoader, RejectsAnotherAbiMajorNamingBothVersions) {
  const std::string error = LoadError(FixtureDir() / "fixture_abi_major.so");
  EXPECT_NE(error.find("fixture_abi_major.so"), std::string::npos) << error;
  EXPECT_NE(error.find("ABI 2.0"), std::string::npos) << error;
  EXPECT_NE(error.find("host's 1."), std::string::npos) << error;
}

TEST(PluginLoader, RejectsANewerAbiMinor) {
  const std::string error = LoadError(FixtureDir() / "fixture_abi_minor.so");
  EXPECT_NE(error.find("ABI 1.99 is newer than the host's 1."), std::string::npos) << error;
}

TEST(PluginLoader, RejectsAnotherLibTorchFingerprint) {
  const std::string error = LoadError(FixtureDir() / "fixture_fingerprint.so");
  EXPECT_NE(error.find("torch-0.0.1"), std::string::npos) << error;
  EXPECT_NE(error.find(std::string("torch-") + HostFingerprint().torch_version), std::string::npos) << error;
  EXPECT_NE(
      error.find(std::string("LibTorch differs: the plugin has 0.0.1, the host ") + HostFingerprint().torch_version),
      std::string::npos)
      << error;
  EXPECT_EQ(error.find("C++ library ABI differs"), std::string::npos) << error;
}

TEST(PluginLoader, AnotherCompilerWithTheSameLibrariesLoads) {
  // A clang++-built plugin against the same LibTorch and libstdc++ is
  // binary compatible: only the compiler field differs.
  LoadedPlugin plugin = LoadPlugin(FixtureDir() / "fixture_other_compiler.so");
  EXPECT_STREQ(plugin.descriptor->fingerprint.compiler, "other-compiler");
}

TEST(PluginLoader, RejectsAnotherCxxAbiNamingTheFieldAndTheFix) {
  const std::string error = LoadError(FixtureDir() / "fixture_cxx_abi.so");
  EXPECT_NE(error.find("the C++ library ABI differs: the plugin has libstdc++/cxx11=0"), std::string::npos) << error;
  EXPECT_NE(error.find("_GLIBCXX_USE_CXX11_ABI"), std::string::npos) << error;
  EXPECT_EQ(error.find("LibTorch differs"), std::string::npos) << error;
}

TEST(PluginLoader, RejectsOptionSchemasTheHostCannotUse) {
  const std::string no_choices = LoadError(FixtureDir() / "fixture_enum_without_choices.so");
  EXPECT_NE(no_choices.find("plugin 'fixture_abi' declares enum option 'mode' without choices; fix its TbParamSpec"),
            std::string::npos)
      << no_choices;
  const std::string not_json = LoadError(FixtureDir() / "fixture_default_not_json.so");
  EXPECT_NE(not_json.find("declares option 'width' with a default that is not JSON text"), std::string::npos)
      << not_json;
}

TEST(PluginLoader, TurnsAThrowingFactoryIntoAnError) {
  LoadedPlugin plugin = LoadPlugin(TestPluginDir() / "libtrainbench_faulty_model.so");
  try {
    CreateModel(plugin, {{"fault", "throw_in_factory"}});
    FAIL() << "expected PluginError";
  } catch (const PluginError& e) {
    EXPECT_NE(std::string(e.what()).find("factory failed on purpose"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("faulty_model"), std::string::npos) << e.what();
  }
}

TEST(PluginLoader, RefusesTheWrongKind) {
  LoadedPlugin plugin = LoadPlugin(PluginFile("simple_cnn"));
  EXPECT_THROW(CreateDevice(plugin, nlohmann::json::object()), PluginError);
}

TEST(PluginLoader, ForwardErrorsComeBackAsStatus) {
  LoadedPlugin plugin = LoadPlugin(TestPluginDir() / "libtrainbench_faulty_model.so");
  auto model = CreateModel(plugin, {{"fault", "throw_in_forward"}});
  torch::Tensor logits;
  const sdk::Status status = model->Forward(torch::zeros({2, 3, 32, 32}), &logits);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("forward failed on purpose"), std::string::npos);
}

TEST(PluginLoader, LibraryStaysLoadedWhileItsObjectsLive) {
  const std::string path = PluginFile("simple_cnn").string();
  std::shared_ptr<sdk::Model> model;
  {
    LoadedPlugin plugin = LoadPlugin(path);
    model = CreateModel(plugin, {{"num_classes", 10}, {"hidden", 192}, {"fused_epilogue", true}});
  }  // the LoadedPlugin is gone; the model must still hold the library
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(handle, nullptr) << "library was unloaded while its model lived";
  dlclose(handle);
  torch::Tensor logits;
  ASSERT_TRUE(model->Forward(torch::zeros({1, 3, 32, 32}), &logits).ok());
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{1, 10}));
}

}  // namespace
}  // namespace trainbench::worker

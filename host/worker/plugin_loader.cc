#include "plugin_loader.h"

#include <boost/dll/shared_library_load_mode.hpp>

#include "trainbench/sdk/fingerprint.h"

namespace trainbench::worker {
namespace {

std::string VersionText(uint32_t major, uint32_t minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

std::string FingerprintText(const TbBuildFingerprint& f) {
  auto s = [](const char* p) { return std::string(p ? p : "?"); };
  return s(f.compiler) + "/" + s(f.cxx_abi) + "/torch-" + s(f.torch_version) + "/cuda-" +
         s(f.cuda_version);
}

bool SameText(const char* a, const char* b) {
  return a != nullptr && b != nullptr && std::string(a) == b;
}

// Creates an object of the plugin's kind and ties the library's lifetime to it.
template <class Interface>
std::shared_ptr<Interface> Create(const LoadedPlugin& plugin, TbPluginKind kind,
                                  const nlohmann::json& options) {
  const TbPluginDescriptor& d = *plugin.descriptor;
  if (d.kind != kind) {
    throw PluginError(plugin.path.string() + ": plugin '" + d.name + "' is a " +
                      (d.kind == TB_PLUGIN_MODEL ? "model" : "device") + " plugin, not a " +
                      (kind == TB_PLUGIN_MODEL ? "model" : "device"));
  }
  void* raw = nullptr;
  const char* error = nullptr;
  const std::string text = options.dump();
  if (d.create(text.c_str(), &raw, &error) != 0 || raw == nullptr) {
    throw PluginError("plugin '" + std::string(d.name) + "' (" + plugin.path.string() +
                      ") failed to create its object: " + (error ? error : "no reason given"));
  }
  // The deleter owns a reference to the library: the code of ~Interface
  // lives in it (Boost.DLL tutorial 8).
  auto library = plugin.library;
  return std::shared_ptr<Interface>(static_cast<Interface*>(raw),
                                    [library](Interface* p) { delete p; });
}

}  // namespace

const TbBuildFingerprint& HostFingerprint() {
  static const TbBuildFingerprint kFingerprint = TRAINBENCH_BUILD_FINGERPRINT;
  return kFingerprint;
}

LoadedPlugin LoadPlugin(const std::filesystem::path& path) {
  LoadedPlugin plugin;
  plugin.path = path;
  try {
    // RTLD_LOCAL: plugins' symbols stay private to each plugin; RTLD_NOW:
    // a missing symbol is found here, not in the middle of a run.
    plugin.library = std::make_shared<boost::dll::shared_library>(
        boost::dll::fs::path(path.string()),
        boost::dll::load_mode::rtld_local | boost::dll::load_mode::rtld_now);
  } catch (const std::exception& e) {
    throw PluginError(path.string() + ": not a loadable shared library: " + e.what());
  }
  if (!plugin.library->has(TRAINBENCH_PLUGIN_ENTRY_NAME)) {
    throw PluginError(path.string() + ": no '" TRAINBENCH_PLUGIN_ENTRY_NAME
                                      "' symbol: not a trainbench plugin");
  }
  const auto entry = plugin.library->get_alias<const TbPluginDescriptor*()>(
      TRAINBENCH_PLUGIN_ENTRY_NAME);
  const TbPluginDescriptor* d = entry();
  if (d == nullptr) throw PluginError(path.string() + ": entry returned no descriptor");
  const std::string host_abi = VersionText(TRAINBENCH_SDK_ABI_MAJOR, TRAINBENCH_SDK_ABI_MINOR);
  const std::string plugin_abi = VersionText(d->abi_major, d->abi_minor);
  if (d->abi_major != TRAINBENCH_SDK_ABI_MAJOR) {
    throw PluginError(path.string() + ": plugin SDK ABI " + plugin_abi +
                      " has a different major version than the host's " + host_abi +
                      "; rebuild the plugin against this trainbench SDK");
  }
  if (d->abi_minor > TRAINBENCH_SDK_ABI_MINOR) {
    throw PluginError(path.string() + ": plugin SDK ABI " + plugin_abi +
                      " is newer than the host's " + host_abi + "; upgrade trainbench");
  }
  const TbBuildFingerprint& mine = HostFingerprint();
  const TbBuildFingerprint& theirs = d->fingerprint;
  if (!SameText(mine.compiler, theirs.compiler) || !SameText(mine.cxx_abi, theirs.cxx_abi) ||
      !SameText(mine.torch_version, theirs.torch_version) ||
      !SameText(mine.cuda_version, theirs.cuda_version)) {
    throw PluginError(path.string() + ": plugin built for " + FingerprintText(theirs) +
                      " but the host runs " + FingerprintText(mine) +
                      "; rebuild the plugin against the same LibTorch");
  }
  if (d->name == nullptr || d->create == nullptr) {
    throw PluginError(path.string() + ": descriptor lacks a name or a factory");
  }
  plugin.descriptor = d;
  return plugin;
}

nlohmann::json DescriptorJson(const TbPluginDescriptor& d) {
  auto s = [](const char* p) { return std::string(p ? p : ""); };
  nlohmann::json params = nlohmann::json::array();
  for (size_t i = 0; i < d.num_params; ++i) {
    const TbParamSpec& p = d.params[i];
    static const char* kTypes[] = {"?", "bool", "int", "float", "string", "enum"};
    nlohmann::json j{{"name", s(p.name)},
                     {"type", kTypes[p.type >= 1 && p.type <= 5 ? p.type : 0]},
                     {"default", nlohmann::json::parse(s(p.default_value), nullptr, false)},
                     {"doc", s(p.doc)}};
    if (p.choices != nullptr) {
      nlohmann::json choices = nlohmann::json::array();
      std::string all = p.choices, item;
      for (size_t start = 0;;) {
        const size_t comma = all.find(',', start);
        choices.push_back(all.substr(start, comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      j["choices"] = choices;
    }
    if (p.has_range) {
      j["min"] = p.min;
      j["max"] = p.max;
    }
    params.push_back(j);
  }
  return {{"name", s(d.name)},
          {"kind", d.kind == TB_PLUGIN_MODEL ? "model" : "device"},
          {"version", s(d.version)},
          {"description", s(d.description)},
          {"abi", VersionText(d.abi_major, d.abi_minor)},
          {"fingerprint", FingerprintText(d.fingerprint)},
          {"params", params}};
}

std::shared_ptr<sdk::Model> CreateModel(const LoadedPlugin& plugin, const nlohmann::json& options) {
  return Create<sdk::Model>(plugin, TB_PLUGIN_MODEL, options);
}

std::shared_ptr<sdk::Device> CreateDevice(const LoadedPlugin& plugin,
                                          const nlohmann::json& options) {
  return Create<sdk::Device>(plugin, TB_PLUGIN_DEVICE, options);
}

}  // namespace trainbench::worker

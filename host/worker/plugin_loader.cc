#include "plugin_loader.h"

#include <algorithm>
#include <boost/dll/shared_library_load_mode.hpp>
#include <cctype>
#include <set>

#include "trainbench/sdk/fingerprint.h"

namespace trainbench::worker {
namespace {

std::string VersionText(uint32_t major, uint32_t minor) { return std::to_string(major) + "." + std::to_string(minor); }

bool SameText(const char* a, const char* b) { return a != nullptr && b != nullptr && std::string(a) == b; }

// Creates an object of the plugin's kind and ties the library's lifetime to it.
template <class Interface>
std::shared_ptr<Interface> Create(const LoadedPlugin& plugin, TbPluginKind kind, const nlohmann::json& options) {
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
  return std::shared_ptr<Interface>(static_cast<Interface*>(raw), [library](Interface* p) { delete p; });
}

// The device traits of a descriptor that has the slot (ABI 1.2+), or null.
const TbDeviceTraits* DeviceTraits(const TbPluginDescriptor& d) {
  return d.kind == TB_PLUGIN_DEVICE && d.abi_minor >= 2 ? d.device_traits : nullptr;
}

// What is wrong with a descriptor's option schema, or "". The host builds
// validation and defaults from it, so it must hold what abi.h promises.
std::string SchemaProblem(const TbPluginDescriptor& d) {
  constexpr size_t kMaxParams = 256;
  if (d.num_params > kMaxParams) return "declares " + std::to_string(d.num_params) + " options (at most 256)";
  if (d.num_params > 0 && d.params == nullptr) return "declares options but gives no TbParamSpec array";
  std::set<std::string> names;
  for (size_t i = 0; i < d.num_params; ++i) {
    const TbParamSpec& p = d.params[i];
    const std::string where = "option #" + std::to_string(i + 1);
    if (p.name == nullptr || *p.name == '\0') return "has an " + where + " without a name";
    const std::string name = p.name;
    const std::string option = "option '" + name + "'";
    const bool identifier =
        std::all_of(name.begin(), name.end(),
                    [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }) &&
        !std::isdigit(static_cast<unsigned char>(name[0]));
    if (!identifier) return "has an " + where + " whose name is not a plain identifier";
    if (!names.insert(name).second) return "declares " + option + " twice";
    if (p.type < TB_PARAM_BOOL || p.type > TB_PARAM_ENUM) {
      return "declares " + option + " of unknown type " + std::to_string(static_cast<int>(p.type));
    }
    if (p.default_value == nullptr) return "declares " + option + " without a default";
    const nlohmann::json def = nlohmann::json::parse(p.default_value, nullptr, false);
    if (def.is_discarded()) return "declares " + option + " with a default that is not JSON text";
    const bool fits = (p.type == TB_PARAM_BOOL && def.is_boolean()) ||
                      (p.type == TB_PARAM_INT && def.is_number_integer()) ||
                      (p.type == TB_PARAM_FLOAT && def.is_number()) ||
                      ((p.type == TB_PARAM_STRING || p.type == TB_PARAM_ENUM) && def.is_string());
    if (!fits) return "declares " + option + " with a default of the wrong type (" + p.default_value + ")";
    if (p.type == TB_PARAM_ENUM) {
      if (p.choices == nullptr || *p.choices == '\0') return "declares enum " + option + " without choices";
      const std::string all = std::string(",") + p.choices + ",";
      if (all.find("," + def.get<std::string>() + ",") == std::string::npos) {
        return "declares enum " + option + " whose default is not one of its choices";
      }
    }
    if (p.has_range) {
      if (!(p.min <= p.max)) return "declares " + option + " with an empty range";
      if (def.is_number() && (def.get<double>() < p.min || def.get<double>() > p.max)) {
        return "declares " + option + " whose default is outside its range";
      }
    }
  }
  if (const TbDeviceTraits* t = DeviceTraits(d)) {
    // The options the traits name must exist with the type the host uses.
    auto check = [&](const char* option, TbParamType type, const char* what) -> std::string {
      if (option == nullptr) return "";
      for (size_t i = 0; i < d.num_params; ++i) {
        if (std::string(d.params[i].name) == option && d.params[i].type == type) return "";
      }
      return std::string("names '") + option + "' as its " + what + " option in TbDeviceTraits but declares no " +
             (type == TB_PARAM_INT ? "INT" : "BOOL") + " option of that name";
    };
    if (std::string bad = check(t->index_option, TB_PARAM_INT, "index"); !bad.empty()) return bad;
    if (std::string bad = check(t->graph_option, TB_PARAM_BOOL, "graph"); !bad.empty()) return bad;
  }
  return "";
}

}  // namespace

std::string FingerprintMismatch(const TbBuildFingerprint& host, const TbBuildFingerprint& plugin) {
  // What decides whether C++ objects can cross: the C++ library and its
  // ABI, LibTorch's version and its CUDA. The compiler family does not (g++
  // and clang++ share the Itanium ABI and libstdc++ on Linux): it is shown,
  // never compared.
  auto text = [](const char* p) { return std::string(p ? p : "?"); };
  std::string why;
  auto add = [&](const std::string& field, const char* mine, const char* theirs, const std::string& fix) {
    if (SameText(mine, theirs)) return;
    why += std::string(why.empty() ? "" : "; ") + field + " differs: the plugin has " + text(theirs) + ", the host " +
           text(mine) + " (" + fix + ")";
  };
  add("the C++ library ABI", host.cxx_abi, plugin.cxx_abi,
      "build the plugin with the host's C++ library and -D_GLIBCXX_USE_CXX11_ABI setting, which "
      "find_package(trainbench) and LibTorch's CMake package set");
  add("LibTorch", host.torch_version, plugin.torch_version,
      "rebuild the plugin against LibTorch " + text(host.torch_version) + ", the host's");
  add("LibTorch's CUDA", host.cuda_version, plugin.cuda_version,
      "rebuild the plugin against the host's LibTorch, CUDA " + text(host.cuda_version));
  if (why.empty()) return "";
  return "plugin built for " + FingerprintText(plugin) + " but the host runs " + FingerprintText(host) + ": " + why;
}

std::string FingerprintText(const TbBuildFingerprint& f) {
  auto s = [](const char* p) { return std::string(p ? p : "?"); };
  return s(f.compiler) + "/" + s(f.cxx_abi) + "/torch-" + s(f.torch_version) + "/cuda-" + s(f.cuda_version);
}

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
        boost::dll::fs::path(path.string()), boost::dll::load_mode::rtld_local | boost::dll::load_mode::rtld_now);
  } catch (const std::exception& e) {
    throw PluginError(path.string() + ": not a loadable shared library: " + e.what());
  }
  if (!plugin.library->has(TRAINBENCH_PLUGIN_ENTRY_NAME)) {
    throw PluginError(path.string() + ": no '" TRAINBENCH_PLUGIN_ENTRY_NAME "' symbol: not a trainbench plugin");
  }
  const auto entry = plugin.library->get_alias<const TbPluginDescriptor*()>(TRAINBENCH_PLUGIN_ENTRY_NAME);
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
    throw PluginError(path.string() + ": plugin SDK ABI " + plugin_abi + " is newer than the host's " + host_abi +
                      "; upgrade trainbench");
  }
  const std::string mismatch = FingerprintMismatch(HostFingerprint(), d->fingerprint);
  if (!mismatch.empty()) throw PluginError(path.string() + ": " + mismatch);
  if (d->name == nullptr || d->create == nullptr) {
    throw PluginError(path.string() + ": descriptor lacks a name or a factory");
  }
  if (const std::string bad = SchemaProblem(*d); !bad.empty()) {
    throw PluginError(path.string() + ": plugin '" + d->name + "' " + bad + "; fix its TbParamSpec array");
  }
  plugin.descriptor = d;
  return plugin;
}

nlohmann::json DefaultOptions(const nlohmann::json& descriptor) {
  nlohmann::json options = nlohmann::json::object();
  for (const auto& p : descriptor.at("params")) options[p.at("name").get<std::string>()] = p.at("default");
  return options;
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
  nlohmann::json j = {{"name", s(d.name)},
                      {"kind", d.kind == TB_PLUGIN_MODEL ? "model" : "device"},
                      {"version", s(d.version)},
                      {"description", s(d.description)},
                      {"abi", VersionText(d.abi_major, d.abi_minor)},
                      {"fingerprint", FingerprintText(d.fingerprint)},
                      {"params", params}};
  if (d.kind == TB_PLUGIN_DEVICE) {
    // What the host schedules by (docs/writing-plugins.md); plugins older
    // than ABI 1.2 have no traits: host devices.
    const TbDeviceTraits* t = DeviceTraits(d);
    auto name_or_null = [](const char* p) { return p ? nlohmann::json(p) : nlohmann::json(nullptr); };
    j["device"] = {{"accelerator", t != nullptr && t->accelerator != 0},
                   {"index_option", t ? name_or_null(t->index_option) : nlohmann::json(nullptr)},
                   {"graph_option", t ? name_or_null(t->graph_option) : nlohmann::json(nullptr)}};
  }
  return j;
}

std::shared_ptr<sdk::Model> CreateModel(const LoadedPlugin& plugin, const nlohmann::json& options) {
  return Create<sdk::Model>(plugin, TB_PLUGIN_MODEL, options);
}

std::shared_ptr<sdk::Device> CreateDevice(const LoadedPlugin& plugin, const nlohmann::json& options) {
  return Create<sdk::Device>(plugin, TB_PLUGIN_DEVICE, options);
}

}  // namespace trainbench::worker

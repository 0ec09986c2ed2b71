#pragma once
// Loading plugin shared libraries (Boost.DLL) inside a worker process, with
// the ABI and fingerprint checks, and creating their objects so that each
// object keeps its library loaded.

#include <boost/dll/shared_library.hpp>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "trainbench/sdk/abi.h"
#include "trainbench/sdk/device.h"
#include "trainbench/sdk/model.h"

namespace trainbench::worker {

/// A plugin that failed to load or was refused; what() is one line naming the
/// file and the reason.
class PluginError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A loaded, accepted plugin. Copies share the library.
struct LoadedPlugin {
  std::filesystem::path path;
  std::shared_ptr<boost::dll::shared_library> library;
  const TbPluginDescriptor* descriptor = nullptr;
};

/// This process's build fingerprint (what every plugin must match).
const TbBuildFingerprint& HostFingerprint();

/// "gnu/libstdc++/cxx11=1/torch-1.13.1/cuda-none".
std::string FingerprintText(const TbBuildFingerprint& f);

/// Why a plugin built with `plugin` cannot run in a host built with `host`
/// (each differing field with both values and the fix), or "" when it can.
/// The compiler family is not compared.
std::string FingerprintMismatch(const TbBuildFingerprint& host, const TbBuildFingerprint& plugin);

/// Loads `path` and checks it: a shared library exporting the entry symbol,
/// ABI major equal and minor not newer than ours, fingerprint equal to ours.
/// Throws PluginError otherwise.
LoadedPlugin LoadPlugin(const std::filesystem::path& path);

/// The descriptor as JSON (name, kind, version, ABI, fingerprint, params).
nlohmann::json DescriptorJson(const TbPluginDescriptor& d);

/// Every option a plugin declares, at its default, from DescriptorJson's
/// "params".
nlohmann::json DefaultOptions(const nlohmann::json& descriptor);

/// Creates the plugin's model/device from a JSON options object. The returned
/// object holds the library: it stays loaded while the object lives. Throws
/// PluginError when the plugin's factory fails or the kind is wrong.
std::shared_ptr<sdk::Model> CreateModel(const LoadedPlugin& plugin, const nlohmann::json& options);
std::shared_ptr<sdk::Device> CreateDevice(const LoadedPlugin& plugin, const nlohmann::json& options);

}  // namespace trainbench::worker

#pragma once
// Finding plugin files and learning what they are. Plugins are loaded only in
// worker processes (they bring LibTorch); a plugin that crashes or hangs
// while being described takes down one worker, not the host.

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace trainbench {

/// What is known of one plugin file.
struct PluginInfo {
  std::string path;
  std::string sha256;             ///< of the file, hex
  bool loaded = false;            ///< accepted by the loader
  std::string reason;             ///< why rejected (or shadowed)
  nlohmann::json descriptor;      ///< name, kind, version, abi, fingerprint, params
  std::optional<bool> available;  ///< device plugins: usable on this machine
  std::string unavailable_reason;

  std::string name() const { return descriptor.value("name", ""); }
  std::string kind() const { return descriptor.value("kind", ""); }
  /// Device plugins' own description (SDK ABI 1.2; older ones: host devices).
  bool accelerator() const { return Trait("accelerator").is_boolean() && Trait("accelerator").get<bool>(); }
  /// The option selecting which accelerator, or "" when it has none.
  std::string index_option() const {
    return Trait("index_option").is_string() ? Trait("index_option").get<std::string>() : "";
  }
  /// The option that captures the step in a graph, or "".
  std::string graph_option() const {
    return Trait("graph_option").is_string() ? Trait("graph_option").get<std::string>() : "";
  }

 private:
  nlohmann::json Trait(const char* key) const {
    return descriptor.is_object() && descriptor.contains("device") && descriptor["device"].is_object()
               ? descriptor["device"].value(key, nlohmann::json())
               : nlohmann::json();
  }
};

/// Device plugins that a build may lack on purpose, and why ("" for others).
std::string KnownOptionalPluginReason(const std::string& name);

/// The names of plugins this build left out on purpose (KnownOptionalPluginReason says why).
std::vector<std::string> UnbuiltPlugins();

/// The folders searched, in order: `extra` (--plugin-dir), then
/// TRAINBENCH_PLUGIN_PATH (colon-separated), then the install's (or build
/// tree's) lib/trainbench/plugins beside the executable.
std::vector<std::filesystem::path> PluginSearchPath(const std::vector<std::string>& extra);

/// All plugins found, described by worker processes.
class PluginCatalog {
 public:
  /// Scans `dirs` for *.so files and describes them in worker processes. A
  /// plugin whose name was already found earlier in the search path is
  /// listed as shadowed (not loaded). A file or folder that users other than
  /// its owner (or root) can modify, or owned by someone else, is refused, as
  /// ssh refuses such keys, unless `allow_insecure`. A worker that prints
  /// nothing for TRAINBENCH_DESCRIBE_TIMEOUT seconds (default 60) while
  /// describing is killed and the plugin it was on is reported as hanging.
  static PluginCatalog Discover(const std::vector<std::filesystem::path>& dirs, bool allow_insecure = false);

  const std::vector<PluginInfo>& plugins() const { return plugins_; }
  const std::vector<std::filesystem::path>& search_path() const { return dirs_; }

  /// The loaded plugin called `name`, or nullptr.
  const PluginInfo* Find(const std::string& name) const;
  /// A plugin file that was found but not loaded and that is called `name`
  /// (by its descriptor, or by its file: NAME.so, libNAME.so,
  /// libtrainbench_NAME.so), or nullptr.
  const PluginInfo* FindRejected(const std::string& name) const;
  /// Names of loaded plugins of `kind` ("model"/"device").
  std::vector<std::string> Names(const std::string& kind) const;

 private:
  std::vector<std::filesystem::path> dirs_;
  std::vector<PluginInfo> plugins_;
};

}  // namespace trainbench

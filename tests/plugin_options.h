#pragma once
// A plugin's options as the host passes them to its factory: every option the
// plugin declares, at its default, then the test's own values on top. Tests
// that name only what they are about keep working when a plugin gains an
// option.
#include <nlohmann/json.hpp>

#include "plugin_loader.h"

namespace trainbench::testing {

inline nlohmann::json WithDefaults(const worker::LoadedPlugin& plugin, const nlohmann::json& options) {
  nlohmann::json all = worker::DefaultOptions(worker::DescriptorJson(*plugin.descriptor));
  all.update(options);
  return all;
}

}  // namespace trainbench::testing

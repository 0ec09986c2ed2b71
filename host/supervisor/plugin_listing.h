#pragma once
// `trainbench plugins`: the plugins an Engine found, as text for a terminal,
// as Markdown (a table of each plugin's options, generated from their
// schemas, for documentation) or as JSON (for tools).

#include <string>
#include <vector>

#include "trainbench/engine.h"

namespace trainbench {

// Every function below lists, given `names`, only the loaded plugins of
// those names (in the order found) and nothing else (no rejected files, no
// notes); a name no loaded plugin has is an EngineError (kExitConfig).

/// The search path, each plugin loaded (kind, name, version, description,
/// availability, file, ABI, fingerprint, options) or rejected with why, and
/// the notes of plugins this build leaves out.
std::string PluginsText(const Engine& engine, const std::vector<std::string>& names = {});

/// Each loaded plugin as a heading and a table of its options (name, type,
/// default, the values it takes, what it does), in the order found; a
/// plugin's words are escaped for a table cell. Rejected files are listed
/// after them.
std::string PluginsMarkdown(const Engine& engine, const std::vector<std::string>& names = {});

/// {"search_path": [...], "plugins": [PluginRecord as an object, ...],
/// "notes": [...]}, one line.
std::string PluginsJson(const Engine& engine, const std::vector<std::string>& names = {});

}  // namespace trainbench

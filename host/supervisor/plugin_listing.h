#pragma once
// `trainbench plugins`: the plugins an Engine found, as text for a terminal,
// as Markdown (a table of each plugin's options, generated from their
// schemas, for documentation) or as JSON (for tools).

#include <string>

#include "trainbench/engine.h"

namespace trainbench {

/// The search path, each plugin loaded (kind, name, version, description,
/// availability, file, ABI, fingerprint, options) or rejected with why, and
/// the notes of plugins this build leaves out.
std::string PluginsText(const Engine& engine);

/// Each loaded plugin as a heading and a table of its options (name, type,
/// default, the values it takes, what it does), in the order found; a
/// plugin's words are escaped for a table cell. Rejected files are listed
/// after them.
std::string PluginsMarkdown(const Engine& engine);

/// {"search_path": [...], "plugins": [PluginRecord as an object, ...],
/// "notes": [...]}, one line.
std::string PluginsJson(const Engine& engine);

}  // namespace trainbench

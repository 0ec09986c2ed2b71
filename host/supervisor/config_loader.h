#pragma once
// Reading and strictly validating an experiment YAML file. Every error is one
// line: "FILE:LINE:COLUMN: KEY.PATH: what is wrong and what to do".

#include <stdexcept>
#include <string>

#include "config_error.h"
#include "experiment.h"

namespace trainbench {

class PluginCatalog;

/// Largest config file accepted; real experiments are a few KiB.
inline constexpr std::uintmax_t kMaxConfigBytes = 1 << 20;
/// At most this many cells (models x devices) in one experiment: every cell
/// is a worker process and a results row, and a run of more is a mistake.
inline constexpr size_t kMaxCells = 4096;

/// Parses and validates `file` (structure, types, ranges, unknown keys with a
/// did-you-mean). Relative dataset paths are resolved against the file's
/// folder; an empty dataset path takes TRAINBENCH_DATA. Throws ConfigError.
Experiment LoadExperiment(const std::string& file);

/// Same, from YAML text (for tests); `file` names it in messages.
Experiment ParseExperiment(const std::string& text, const std::string& file, const std::string& base_dir);

/// Finds each model and device plugin in `catalog`, checks its options
/// against the plugin's schema (filling in defaults), checks the kinds, the
/// baseline and the dataset files. A device plugin that is known but not
/// built here (cuda without a CUDA LibTorch) is not an error: its cells are
/// skipped with the reason. Throws ConfigError.
void ResolvePlugins(Experiment& experiment, const PluginCatalog& catalog);

}  // namespace trainbench

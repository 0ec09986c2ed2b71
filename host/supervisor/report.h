#pragma once
// `trainbench report`: one or several results.json files (two machines side
// by side, say) as a Markdown or CSV comparison, and the study's figure
// (speedup against model size, plus throughput per device) drawn by gnuplot.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trainbench/protocol/cell_record.h"

namespace trainbench {

/// A results.json with a label for its run ("paper@h200-box").
struct LoadedResults {
  std::string label;
  nlohmann::json doc;
  std::vector<protocol::CellRecord> cells;  ///< doc's cells, typed
};

/// Reads each file; throws std::runtime_error naming a file that is missing
/// or not a trainbench results file.
std::vector<LoadedResults> LoadResults(const std::vector<std::string>& files);

/// One row per cell of every run: run, model, params, device, samples/s,
/// median epoch seconds (projected marked), final test accuracy, speedup.
std::string ReportMarkdown(const std::vector<LoadedResults>& runs);
/// For several runs, a Markdown list of the settings (dotted keys with both
/// values) that differ between the first run's cells and the cells of the
/// same model and device label in each other run; "" when none do.
std::string SettingsThatDiffer(const std::vector<LoadedResults>& runs);
std::string ReportCsv(const std::vector<LoadedResults>& runs);

/// Draws speedup against parameters (log scale) and samples/s per device to
/// `output` (.png or .svg) with gnuplot. Throws std::runtime_error when
/// gnuplot is missing (saying how to install it) or fails.
void PlotReport(const std::vector<LoadedResults>& runs, const std::string& output);

}  // namespace trainbench

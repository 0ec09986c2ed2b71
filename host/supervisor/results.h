#pragma once
// results.json / results.csv: what a run leaves behind. Rewritten atomically
// (write to a temporary file, then rename) after every cell, so an
// interruption leaves the last good file.

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace trainbench {

/// Writes `content` to `path` through a temporary file and a rename. Throws
/// std::runtime_error naming the file on failure (disk full, no permission).
void WriteFileAtomically(const std::filesystem::path& path, const std::string& content);

/// The JSON document in `path`, or null when it is missing or not JSON.
nlohmann::json ReadJsonFile(const std::filesystem::path& path);

/// A results.json cell's median epoch time (its `epoch_seconds`), or 0 when
/// it has none. The median, because the first epoch includes warm-up such
/// as cuDNN's autotuning.
double MedianEpochSeconds(const nlohmann::json& cell);

/// What makes a results.json cell unusable, or "" when it is sound: an ok
/// cell needs its model, device, configuration and measurements with the
/// right types. Records read from disk (--resume) pass through it.
std::string CellRecordProblem(const nlohmann::json& cell);

/// The same for a whole results.json document (null: not JSON).
std::string ResultsDocumentProblem(const nlohmann::json& doc);

/// The results document of one run. Not thread-safe.
class Results {
 public:
  Results(std::filesystem::path out_dir, nlohmann::json experiment, nlohmann::json system, std::string baseline);

  /// The cells, in run order (model-major). Callers fill them as cells run.
  nlohmann::json& cells() { return doc_["cells"]; }
  nlohmann::json& system() { return doc_["system"]; }
  const nlohmann::json& doc() const { return doc_; }

  /// Sets each ok cell's `speedup`: the baseline device's steady-state
  /// samples/s for the same model divided into this cell's, i.e. the baseline's
  /// time for the same work over this cell's. null for the baseline itself and
  /// when the baseline has no result.
  void ComputeSpeedups();

  /// The option that picks an accelerator, per device label, ignored when
  /// data-parallel cells are compared with one-rank cells (default:
  /// "device_index", as records of older runs have it).
  void SetIndexOptions(std::map<std::string, std::string> by_device) { index_options_ = std::move(by_device); }

  /// Writes results.json and results.csv into the output folder.
  void Write();

  /// The closing table: model, params, device, samples/s, epoch time,
  /// test accuracy, speedup, status.
  std::string Table() const;

 private:
  std::filesystem::path out_dir_;
  std::string baseline_;
  std::map<std::string, std::string> index_options_;
  nlohmann::json doc_;
};

}  // namespace trainbench

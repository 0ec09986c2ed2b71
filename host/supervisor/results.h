#pragma once
// results.json / results.csv: what a run leaves behind. Rewritten atomically
// (write to a temporary file, then rename) after every cell, so an
// interruption leaves the last good file. Cells are typed records
// (trainbench/protocol/cell_record.h).

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trainbench/protocol/cell_record.h"

namespace trainbench {

using protocol::CellRecord;

/// Writes `content` to `path` through a temporary file and a rename. Throws
/// std::runtime_error naming the file on failure (disk full, no permission).
void WriteFileAtomically(const std::filesystem::path& path, const std::string& content);

/// The largest results file trainbench reads (`report`, `--resume`): a
/// run's results are a few MB; a larger file is refused rather than parsed
/// into many times its size of memory.
inline constexpr std::uintmax_t kMaxResultsFileBytes = std::uintmax_t{256} << 20;

/// The JSON document in `path`, or null when it is missing, larger than
/// kMaxResultsFileBytes or not JSON.
nlohmann::json ReadJsonFile(const std::filesystem::path& path);

/// The cells of a results.json document (this version's or older), or why
/// they cannot be used: not a trainbench-results/1 document, a field of the
/// wrong type, an ok cell without its configuration or measurements.
struct ReadCells {
  std::vector<CellRecord> cells;
  std::string problem;  ///< "" when the document is sound
};
ReadCells CellsOf(const nlohmann::json& doc);

/// The settings whose values differ between two cells' configurations (their
/// `config`), as dotted keys ("training.batch_size",
/// "environment.TRAINBENCH_POWERCAP_ROOT"), in order; objects are compared member by
/// member, a member set on one side only differs. Thread-safe.
std::vector<std::string> DifferingSettings(const nlohmann::json& a, const nlohmann::json& b);

/// `bytes` as "7.52 GiB", as the table and `report` show memory.
std::string GiBText(int64_t bytes);

/// The value at a dotted key of DifferingSettings, as JSON text, or "unset".
std::string SettingValue(const nlohmann::json& config, const std::string& dotted);

/// The results document of one run. Not thread-safe.
class Results {
 public:
  Results(std::filesystem::path out_dir, nlohmann::json experiment, nlohmann::json system, std::string baseline);

  /// The cells, in run order (model-major). Callers fill them as cells run.
  std::vector<CellRecord>& cells() { return cells_; }
  const std::vector<CellRecord>& cells() const { return cells_; }
  nlohmann::json& system() { return system_; }
  /// The results.json document.
  nlohmann::json doc() const;

  /// Sets each ok cell's `speedup`: the baseline device's steady-state
  /// samples/s for the same model divided into this cell's, i.e. the baseline's
  /// time for the same work over this cell's. Unset for the baseline itself and
  /// when the baseline has no result. Data-parallel cells also get their
  /// scaling efficiency against a one-rank cell of the same setup.
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
  nlohmann::json experiment_, system_;
  std::vector<CellRecord> cells_;
};

}  // namespace trainbench

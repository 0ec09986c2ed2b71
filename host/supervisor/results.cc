#include "results.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "safe_file.h"
#include "statistics.h"
#include "text_escape.h"
#include "trainbench/protocol/error.h"

namespace trainbench {
namespace fs = std::filesystem;
using nlohmann::json;

void WriteFileAtomically(const fs::path& path, const std::string& content) {
  const fs::path tmp = path.string() + ".tmp";
  // Created afresh, never through a link planted in the folder.
  const int fd = CreateFileNoFollow(tmp);
  size_t written = 0;
  int error = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = n < 0 ? errno : EIO;
      break;
    }
    written += static_cast<size_t>(n);
  }
  // fsync so that a power cut after the rename cannot leave an empty file.
  if (error == 0 && ::fsync(fd) != 0 && errno != EINVAL) error = errno;
  ::close(fd);
  if (error != 0) {
    ::unlink(tmp.c_str());
    throw std::runtime_error(tmp.string() + ": write failed: " + std::strerror(error) + " (the previous " +
                             path.filename().string() + " is kept)");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw std::runtime_error(path.string() + ": cannot replace: " + ec.message());
}

json ReadJsonFile(const fs::path& path) {
  std::error_code ec;
  if (fs::file_size(path, ec) > kMaxResultsFileBytes && !ec) return json();
  std::ifstream in(path);
  if (!in) return json();
  json doc = json::parse(in, nullptr, false);
  return doc.is_discarded() ? json() : doc;
}

ReadCells CellsOf(const json& doc) {
  ReadCells read;
  if (!doc.is_object()) {
    read.problem = "not a JSON object";
    return read;
  }
  if (doc.value("format", "") != "trainbench-results/1") {
    read.problem = "not a trainbench-results/1 document";
    return read;
  }
  if (!doc.contains("cells") || !doc["cells"].is_array()) {
    read.problem = "no list of cells";
    return read;
  }
  try {
    for (const auto& c : doc["cells"]) read.cells.push_back(protocol::CellRecordFromJson(c));
  } catch (const protocol::ProtocolError& e) {
    read.problem = e.what();
    read.cells.clear();
    return read;
  }
  for (const auto& c : read.cells) {
    if (std::string problem = protocol::CellRecordProblem(c); !problem.empty()) {
      read.problem = problem;
      read.cells.clear();
      break;
    }
  }
  return read;
}

namespace {
void Differ(const json& a, const json& b, const std::string& prefix, std::vector<std::string>* out) {
  if (a.is_object() && b.is_object()) {
    std::set<std::string> keys;
    for (const auto& [k, v] : a.items()) keys.insert(k);
    for (const auto& [k, v] : b.items()) keys.insert(k);
    for (const auto& k : keys) {
      const std::string key = prefix.empty() ? k : prefix + "." + k;
      // A mapping set on one side only: its members, each unset on the other.
      static const json kEmpty = json::object();
      if (!a.contains(k) && b[k].is_object())
        Differ(kEmpty, b[k], key, out);
      else if (!b.contains(k) && a[k].is_object())
        Differ(a[k], kEmpty, key, out);
      else if (!a.contains(k) || !b.contains(k))
        out->push_back(key);
      else
        Differ(a[k], b[k], key, out);
    }
  } else if (a != b) {
    out->push_back(prefix.empty() ? "(the whole configuration)" : prefix);
  }
}
}  // namespace

std::vector<std::string> DifferingSettings(const json& a, const json& b) {
  std::vector<std::string> out;
  Differ(a, b, "", &out);
  return out;
}

std::string SettingValue(const json& config, const std::string& dotted) {
  const json* at = &config;
  size_t start = 0;
  while (start <= dotted.size()) {
    const size_t dot = dotted.find('.', start);
    const std::string key = dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!at->is_object() || !at->contains(key)) return "unset";
    at = &(*at)[key];
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return at->dump();
}

Results::Results(fs::path out_dir, json experiment, json system, std::string baseline)
    : out_dir_(std::move(out_dir)),
      baseline_(std::move(baseline)),
      experiment_(std::move(experiment)),
      system_(std::move(system)) {}

json Results::doc() const {
  json cells = json::array();
  for (const auto& c : cells_) cells.push_back(protocol::ToJson(c));
  return {{"format", "trainbench-results/1"}, {"experiment", experiment_}, {"system", system_}, {"cells", cells}};
}

void Results::ComputeSpeedups() {
  for (auto& cell : cells_) {
    cell.speedup.reset();
    cell.speedup_time_to_train.reset();
    cell.speedup_ci95.reset();
    cell.energy_ratio.reset();
    if (!cell.ok() || cell.device == baseline_ || !cell.samples_per_second) continue;
    for (const auto& base : cells_) {
      if (base.model != cell.model || base.device != baseline_ || !base.ok() || !base.samples_per_second ||
          !(*base.samples_per_second > 0)) {
        continue;
      }
      cell.speedup = *cell.samples_per_second / *base.samples_per_second;
      // Beside the speedup: how many times less energy a sample took.
      if (base.joules_per_sample && cell.joules_per_sample && *cell.joules_per_sample > 0)
        cell.energy_ratio = *base.joules_per_sample / *cell.joules_per_sample;
      // The study's measure: the baseline's whole training over this cell's.
      if (base.time_to_train_seconds && cell.time_to_train_seconds && *cell.time_to_train_seconds > 0)
        cell.speedup_time_to_train = *base.time_to_train_seconds / *cell.time_to_train_seconds;
      // The repeats of either side carried into the ratio's interval.
      auto repeats = [](const CellRecord& c) {
        return c.samples_per_second_repeats && c.samples_per_second_repeats->size() > 1
                   ? *c.samples_per_second_repeats
                   : std::vector<double>{*c.samples_per_second};
      };
      const std::vector<double> mine = repeats(cell), theirs = repeats(base);
      if (mine.size() > 1 || theirs.size() > 1) {
        const auto [low, high] = RatioInterval(mine, theirs);
        cell.speedup_ci95 = std::vector<double>{low, high};
      }
    }
  }
  // Data-parallel cells: throughput over N times that of one rank of the
  // same model on the same device plugin with the same options.
  auto same_options = [this](const std::string& device, json a, json b) {
    // Which accelerator a rank used is not a difference in setup.
    const auto it = index_options_.find(device);
    const std::string index = it != index_options_.end() ? it->second : "device_index";
    a.erase(index);
    b.erase(index);
    return a == b;
  };
  for (auto& cell : cells_) {
    const int64_t ranks = cell.ranks.value_or(1);
    if (ranks <= 1 || !cell.ok()) continue;
    cell.scaling_efficiency.reset();
    for (const auto& one : cells_) {
      if (one.ranks.value_or(1) == 1 && one.ok() && one.model == cell.model &&
          one.device_plugin == cell.device_plugin &&
          same_options(cell.device, one.device_options, cell.device_options)) {
        const double single = one.samples_per_second.value_or(0.0);
        if (single > 0) {
          cell.scaling_efficiency = cell.samples_per_second.value_or(0.0) / (static_cast<double>(ranks) * single);
          cell.scaling_baseline = one.device;
        }
        break;
      }
    }
  }
}

namespace {
std::string CsvField(const json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return CsvText(v.get<std::string>());
  if (v.is_array()) {
    std::string joined;
    for (const auto& x : v) joined += (joined.empty() ? "" : ";") + x.dump();
    return joined;
  }
  return v.dump();
}
}  // namespace

void Results::Write() {
  WriteFileAtomically(out_dir_ / "results.json", doc().dump(2) + "\n");
  const auto& columns = protocol::CsvColumns();
  std::ostringstream csv;
  for (size_t i = 0; i < columns.size(); ++i) csv << (i ? "," : "") << columns[i];
  csv << "\n";
  for (const auto& cell : cells_) {
    const json j = protocol::ToJson(cell);
    for (size_t i = 0; i < columns.size(); ++i)
      csv << (i ? "," : "") << (j.contains(columns[i]) ? CsvField(j[columns[i]]) : "");
    csv << "\n";
  }
  WriteFileAtomically(out_dir_ / "results.csv", csv.str());
}

std::string GiBText(int64_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
}

namespace {

// One cell's row of the closing table.
std::string TableRow(const CellRecord& c, const std::string& baseline) {
  const bool ok = c.ok();
  const std::string params = c.params ? fmt::format("{:.2f}M", static_cast<double>(*c.params) / 1e6) : "-";
  std::string sps = ok && c.samples_per_second ? fmt::format("{:.1f}", *c.samples_per_second) : "-";
  if (ok && c.samples_per_second_ci95 && c.samples_per_second_ci95->size() == 2) {
    sps += fmt::format(" ±{:.1f}", ((*c.samples_per_second_ci95)[1] - (*c.samples_per_second_ci95)[0]) / 2);
  }
  std::string epoch = "-";
  if (ok && c.epoch_seconds && !c.epoch_seconds->empty()) {
    epoch = fmt::format("{:.2f} s{}", c.median_epoch_seconds(), c.projected.value_or(false) ? "*" : "");
  }
  const std::string train = ok && c.time_to_train_seconds ? fmt::format("{:.1f} s{}", *c.time_to_train_seconds,
                                                                        c.projected.value_or(false) ? "*" : "")
                                                          : "-";
  const auto accuracy = c.final_accuracy();
  const std::string acc = ok && accuracy ? fmt::format("{:.1f}%", 100.0 * *accuracy) : "-";
  std::string speedup = c.speedup ? fmt::format("{:.2f}x", *c.speedup) : (ok ? "baseline" : "-");
  if (ok && c.device != baseline && !c.speedup) speedup = "n/a";
  const std::string speedup_time = c.speedup_time_to_train ? fmt::format("{:.2f}x", *c.speedup_time_to_train) : "-";
  std::string status = c.status;
  if (!ok && c.reason) status += ": " + *c.reason;
  // What the cell's process held at most (a GPU allocator's cache included).
  const std::string memory = c.peak_memory_bytes && *c.peak_memory_bytes > 0 ? GiBText(*c.peak_memory_bytes) : "-";
  return fmt::format("{:<12} {:>8} {:<10} {:>18} {:>10} {:>13} {:>8} {:>8} {:>8} {:>9}  {}\n", Printable(c.model),
                     params, Printable(c.device), sps, epoch, train, acc, speedup, speedup_time, memory,
                     Printable(status));
}

// The lines under the table: data parallelism, time to the target, energy.
std::string TableNotes(const std::vector<CellRecord>& cells, const std::string& baseline) {
  std::ostringstream out;
  for (const auto& c : cells) {
    const int64_t ranks = c.ranks.value_or(1);
    if (ranks <= 1 || !c.ok()) continue;
    out << fmt::format("data parallel: {} on {}: {} ranks ({} backend), {:.1f} samples/s per rank{}\n",
                       Printable(c.model), Printable(c.device), ranks, Printable(c.backend.value_or("?")),
                       c.samples_per_second.value_or(0.0) / static_cast<double>(ranks),
                       c.scaling_efficiency
                           ? fmt::format(", scaling efficiency {:.0f}% against {}", 100.0 * *c.scaling_efficiency,
                                         c.scaling_baseline.value_or(""))
                           : std::string(", no one-rank cell to compare with"));
  }
  for (const auto& c : cells) {
    if (!c.ok() || !c.target_accuracy) continue;
    out << fmt::format(
        "time to {:.1f}% test accuracy: {} on {}: {}\n", 100 * *c.target_accuracy, c.model, c.device,
        c.time_to_target_seconds
            ? fmt::format("{:.1f} s of training, {:.2f} epochs{}", *c.time_to_target_seconds,
                          c.epochs_to_target.value_or(0), c.stopped_at_target.value_or(false) ? " (stopped there)" : "")
            : c.target_reason.value_or("not reached"));
  }
  for (const auto& c : cells) {
    if (!c.ok() || (!c.energy_joules && !c.energy_reason)) continue;
    if (!c.energy_joules) {
      out << fmt::format("energy: {} on {}: not measured: {}\n", c.model, c.device, *c.energy_reason);
      continue;
    }
    out << fmt::format(
        "energy: {} on {}: {:.1f} J, {:.4g} J/sample, {:.1f} W ({}){}\n", c.model, c.device, *c.energy_joules,
        c.joules_per_sample.value_or(0), c.average_power_watts.value_or(0), c.energy_source.value_or("?"),
        c.energy_ratio ? fmt::format(", {:.2f}x less energy per sample than {}", *c.energy_ratio, baseline) : "");
    if (c.energy_counter_glitches) {
      out << fmt::format("  ({} backward step(s) of the counter ignored as glitches, not counted as wraps)\n",
                         *c.energy_counter_glitches);
    }
  }
  return out.str();
}

}  // namespace

std::string Results::Table() const {
  std::ostringstream out;
  // Two speedups, named apart: of the steady-state rate, and of the time to
  // train the whole cell (setup, warm-up and evaluation included: the study's).
  out << fmt::format("{:<12} {:>8} {:<10} {:>18} {:>10} {:>13} {:>8} {:>8} {:>8} {:>9}  {}\n", "model", "params",
                     "device", "samples/s", "epoch time", "time to train", "test acc", "speedup", "(time)", "peak mem",
                     "status");
  bool any_projected = false;
  for (const auto& c : cells_) {
    any_projected |= c.projected.value_or(false);
    out << TableRow(c, baseline_);
  }
  out << TableNotes(cells_, baseline_);
  if (any_projected) out << "* projected from steady-state throughput (time budget reached before the epoch ended)\n";
  out << "speedup: steady-state samples/s over the " << baseline_ << " cell's; (time): the " << baseline_
      << " cell's time to train over this one's; peak mem: the most the cell's process held (a GPU's allocator "
         "cache included)\n";
  return out.str();
}

}  // namespace trainbench

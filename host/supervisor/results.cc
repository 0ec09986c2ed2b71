#include "results.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace trainbench {
namespace fs = std::filesystem;
using nlohmann::json;

void WriteFileAtomically(const fs::path& path, const std::string& content) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(tmp.string() + ": cannot write (check permissions and free space)");
    errno = 0;
    out << content;
    out.flush();
    if (!out) {
      throw std::runtime_error(tmp.string() +
                               ": write failed: " + (errno != 0 ? std::strerror(errno) : "unknown error") +
                               " (the previous " + path.filename().string() + " is kept)");
    }
  }
  // fsync so that a power cut after the rename cannot leave an empty file.
  if (FILE* f = std::fopen(tmp.c_str(), "rb")) {
    ::fsync(fileno(f));
    std::fclose(f);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw std::runtime_error(path.string() + ": cannot replace: " + ec.message());
}

json ReadJsonFile(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return json();
  json doc = json::parse(in, nullptr, false);
  return doc.is_discarded() ? json() : doc;
}

double MedianEpochSeconds(const json& cell) {
  std::vector<double> e;
  for (const auto& v : cell.value("epoch_seconds", json::array()))
    if (v.is_number()) e.push_back(v.get<double>());
  if (e.empty()) return 0;
  std::sort(e.begin(), e.end());
  return e[e.size() / 2];
}

std::string CellRecordProblem(const json& cell) {
  if (!cell.is_object()) return "a cell that is not an object";
  for (const char* key : {"model", "device", "status"}) {
    if (!cell.contains(key) || !cell[key].is_string()) return std::string("a cell without a string '") + key + "'";
  }
  if (cell["status"] != "ok") return "";
  const std::string who = "cell " + cell["model"].get<std::string>() + " on " + cell["device"].get<std::string>();
  if (!cell.contains("config") || !cell["config"].is_object()) return who + ": no 'config'";
  if (!cell.contains("samples_per_second") || !cell["samples_per_second"].is_number() ||
      !(cell["samples_per_second"].get<double>() > 0)) {
    return who + ": 'samples_per_second' missing or not a positive number";
  }
  for (const char* key : {"epoch_seconds", "test_accuracy", "train_loss"}) {
    if (!cell.contains(key) || !cell[key].is_array()) return who + ": '" + key + "' missing or not a list";
    for (const auto& v : cell[key]) {
      if (!v.is_number()) return who + ": '" + key + "' holds something other than numbers";
    }
  }
  if (cell["epoch_seconds"].empty()) return who + ": 'epoch_seconds' is empty";
  for (const char* key : {"params", "flops_per_sample", "speedup", "ranks"}) {
    if (cell.contains(key) && !cell[key].is_null() && !cell[key].is_number()) {
      return who + ": '" + key + "' is not a number";
    }
  }
  if (cell.contains("projected") && !cell["projected"].is_boolean()) return who + ": 'projected' is not true/false";
  return "";
}

std::string ResultsDocumentProblem(const json& doc) {
  if (!doc.is_object()) return "not a JSON object";
  if (doc.value("format", "") != "trainbench-results/1") return "not a trainbench-results/1 document";
  if (!doc.contains("cells") || !doc["cells"].is_array()) return "no list of cells";
  for (const auto& cell : doc["cells"]) {
    if (std::string problem = CellRecordProblem(cell); !problem.empty()) return problem;
  }
  return "";
}

Results::Results(fs::path out_dir, json experiment, json system, std::string baseline)
    : out_dir_(std::move(out_dir)), baseline_(std::move(baseline)) {
  doc_ = {{"format", "trainbench-results/1"},
          {"experiment", std::move(experiment)},
          {"system", std::move(system)},
          {"cells", json::array()}};
}

void Results::ComputeSpeedups() {
  for (auto& cell : cells()) {
    cell["speedup"] = nullptr;
    if (cell.value("status", "") != "ok" || cell.value("device", "") == baseline_) continue;
    for (const auto& base : cells()) {
      if (base.value("model", "") == cell.value("model", "") && base.value("device", "") == baseline_ &&
          base.value("status", "") == "ok") {
        const double b = base.value("samples_per_second", 0.0);
        if (b > 0) cell["speedup"] = cell.value("samples_per_second", 0.0) / b;
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
  for (auto& cell : cells()) {
    const int64_t ranks = cell.value("ranks", int64_t{1});
    if (ranks <= 1 || cell.value("status", "") != "ok") continue;
    cell["scaling_efficiency"] = nullptr;
    for (const auto& one : cells()) {
      if (one.value("ranks", int64_t{1}) == 1 && one.value("status", "") == "ok" &&
          one.value("model", "") == cell.value("model", "") &&
          one.value("device_plugin", "") == cell.value("device_plugin", "") &&
          same_options(cell.value("device", ""), one.value("device_options", json::object()),
                       cell.value("device_options", json::object()))) {
        const double single = one.value("samples_per_second", 0.0);
        if (single > 0) {
          cell["scaling_efficiency"] = cell.value("samples_per_second", 0.0) / (static_cast<double>(ranks) * single);
          cell["scaling_baseline"] = one.value("device", "");
        }
        break;
      }
    }
  }
}

namespace {
std::string CsvField(const json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string quoted = "\"";
    for (char c : s) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    return quoted + "\"";
  }
  if (v.is_array()) {
    std::string joined;
    for (const auto& x : v) joined += (joined.empty() ? "" : ";") + x.dump();
    return joined;
  }
  return v.dump();
}
}  // namespace

void Results::Write() {
  WriteFileAtomically(out_dir_ / "results.json", doc_.dump(2) + "\n");
  static const char* kColumns[] = {"model",
                                   "device",
                                   "status",
                                   "reason",
                                   "params",
                                   "flops_per_sample",
                                   "samples_per_second",
                                   "step_seconds_median",
                                   "step_seconds_p90",
                                   "epoch_seconds",
                                   "train_seconds",
                                   "train_loss",
                                   "test_accuracy",
                                   "projected",
                                   "speedup",
                                   "peak_memory_bytes",
                                   "ranks",
                                   "rank_samples_per_second",
                                   "scaling_efficiency"};
  std::ostringstream csv;
  for (size_t i = 0; i < std::size(kColumns); ++i) csv << (i ? "," : "") << kColumns[i];
  csv << "\n";
  for (const auto& cell : doc_["cells"]) {
    for (size_t i = 0; i < std::size(kColumns); ++i) {
      csv << (i ? "," : "") << (cell.contains(kColumns[i]) ? CsvField(cell[kColumns[i]]) : "");
    }
    csv << "\n";
  }
  WriteFileAtomically(out_dir_ / "results.csv", csv.str());
}

std::string Results::Table() const {
  std::ostringstream out;
  out << fmt::format("{:<12} {:>11} {:<10} {:>11} {:>12} {:>9} {:>8}  {}\n", "model", "params", "device", "samples/s",
                     "epoch time", "test acc", "speedup", "status");
  for (const auto& c : doc_.at("cells")) {
    const bool ok = c.value("status", "") == "ok";
    std::string params =
        c.contains("params") && c["params"].is_number() ? fmt::format("{:.2f}M", c["params"].get<double>() / 1e6) : "-";
    std::string sps = ok ? fmt::format("{:.1f}", c.value("samples_per_second", 0.0)) : "-";
    std::string epoch = "-";
    if (ok && c.contains("epoch_seconds") && !c["epoch_seconds"].empty()) {
      epoch = fmt::format("{:.2f} s{}", MedianEpochSeconds(c), c.value("projected", false) ? "*" : "");
    }
    const json accuracy = c.value("test_accuracy", json::array());
    std::string acc = ok && accuracy.is_array() && !accuracy.empty() && accuracy.back().is_number()
                          ? fmt::format("{:.1f}%", 100.0 * accuracy.back().get<double>())
                          : "-";
    const json speedup_value = c.value("speedup", json());
    std::string speedup =
        speedup_value.is_number() ? fmt::format("{:.2f}x", speedup_value.get<double>()) : (ok ? "baseline" : "-");
    if (ok && c.value("device", "") != baseline_ && !speedup_value.is_number()) speedup = "n/a";
    std::string status = c.value("status", "?");
    if (!ok && c.contains("reason") && c["reason"].is_string()) status += ": " + c["reason"].get<std::string>();
    out << fmt::format("{:<12} {:>11} {:<10} {:>11} {:>12} {:>9} {:>8}  {}\n", c.value("model", ""), params,
                       c.value("device", ""), sps, epoch, acc, speedup, status);
  }
  bool any_projected = false;
  for (const auto& c : doc_.at("cells")) any_projected |= c.value("projected", false);
  for (const auto& c : doc_.at("cells")) {
    if (c.value("ranks", int64_t{1}) <= 1 || c.value("status", "") != "ok") continue;
    const json& eff = c.contains("scaling_efficiency") ? c["scaling_efficiency"] : json();
    out << fmt::format("data parallel: {} on {}: {} ranks ({} backend), {:.1f} samples/s per rank{}\n",
                       c.value("model", ""), c.value("device", ""), c.value("ranks", int64_t{1}),
                       c.value("backend", "?"),
                       c.value("samples_per_second", 0.0) / static_cast<double>(c.value("ranks", int64_t{1})),
                       eff.is_number() ? fmt::format(", scaling efficiency {:.0f}% against {}",
                                                     100.0 * eff.get<double>(), c.value("scaling_baseline", ""))
                                       : std::string(", no one-rank cell to compare with"));
  }
  if (any_projected) out << "* projected from steady-state throughput (time budget reached before the epoch ended)\n";
  return out.str();
}

}  // namespace trainbench

#include "results.h"

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <unistd.h>

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
      throw std::runtime_error(tmp.string() + ": write failed: " +
                               (errno != 0 ? std::strerror(errno) : "unknown error") +
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
  std::vector<double> e = cell.value("epoch_seconds", std::vector<double>{});
  if (e.empty()) return 0;
  std::sort(e.begin(), e.end());
  return e[e.size() / 2];
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
      if (base.value("model", "") == cell.value("model", "") &&
          base.value("device", "") == baseline_ && base.value("status", "") == "ok") {
        const double b = base.value("samples_per_second", 0.0);
        if (b > 0) cell["speedup"] = cell.value("samples_per_second", 0.0) / b;
      }
    }
  }
  // Data-parallel cells: throughput over N times that of one rank of the
  // same model on the same device plugin with the same options.
  auto same_options = [](json a, json b) {
    a.erase("device_index");
    b.erase("device_index");
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
          same_options(one.value("device_options", json::object()), cell.value("device_options", json::object()))) {
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
  static const char* kColumns[] = {"model", "device", "status", "reason", "params",
                                   "flops_per_sample", "samples_per_second",
                                   "step_seconds_median", "step_seconds_p90", "epoch_seconds",
                                   "train_seconds", "train_loss", "test_accuracy", "projected",
                                   "speedup", "peak_memory_bytes", "ranks",
                                   "rank_samples_per_second", "scaling_efficiency"};
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
  out << fmt::format("{:<12} {:>11} {:<10} {:>11} {:>12} {:>9} {:>8}  {}\n", "model", "params",
                     "device", "samples/s", "epoch time", "test acc", "speedup", "status");
  for (const auto& c : doc_.at("cells")) {
    const bool ok = c.value("status", "") == "ok";
    std::string params = c.contains("params") ? fmt::format("{:.2f}M", c["params"].get<double>() / 1e6) : "-";
    std::string sps = ok ? fmt::format("{:.1f}", c.value("samples_per_second", 0.0)) : "-";
    std::string epoch = "-";
    if (ok && !c["epoch_seconds"].empty()) {
      epoch = fmt::format("{:.2f} s{}", MedianEpochSeconds(c), c.value("projected", false) ? "*" : "");
    }
    std::string acc = ok && !c["test_accuracy"].empty()
                          ? fmt::format("{:.1f}%", 100.0 * c["test_accuracy"].back().get<double>())
                          : "-";
    std::string speedup = c.contains("speedup") && !c["speedup"].is_null()
                              ? fmt::format("{:.2f}x", c["speedup"].get<double>())
                              : (ok ? "baseline" : "-");
    if (ok && c.value("device", "") != baseline_ && c["speedup"].is_null()) speedup = "n/a";
    std::string status = c.value("status", "?");
    if (!ok && c.contains("reason")) status += ": " + c["reason"].get<std::string>();
    out << fmt::format("{:<12} {:>11} {:<10} {:>11} {:>12} {:>9} {:>8}  {}\n", c.value("model", ""),
                       params, c.value("device", ""), sps, epoch, acc, speedup, status);
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
                       eff.is_number() ? fmt::format(", scaling efficiency {:.0f}% against {}", 100.0 * eff.get<double>(),
                                                     c.value("scaling_baseline", ""))
                                       : std::string(", no one-rank cell to compare with"));
  }
  if (any_projected) out << "* projected from steady-state throughput (time budget reached before the epoch ended)\n";
  return out.str();
}

}  // namespace trainbench

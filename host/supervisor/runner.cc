#include "runner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <set>

#include "cell_attempt.h"
#include "environment.h"
#include "logging.h"
#include "peak_flops.h"
#include "run_log.h"
#include "safe_file.h"
#include "statistics.h"
#include "text_escape.h"
#include "trainbench/protocol/version.h"

namespace trainbench {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

protocol::CellSpec BuildCellSpec(const Experiment& e, const PluginUse& model, const PluginUse& device, size_t index,
                                 const std::optional<protocol::Diagnostics>& diagnostics) {
  protocol::CellSpec spec;
  spec.protocol = protocol::kProtocolVersion;
  spec.experiment = e.name;
  spec.cell_index = static_cast<int64_t>(index);
  spec.seed = e.seed;
  spec.model = {model.plugin, model.path, model.options};
  spec.device = {device.plugin, device.path, device.options};
  spec.dataset = e.dataset;
  spec.training = e.training;
  spec.measurement = e.MeasurementOn(device);
  spec.diagnostics = diagnostics;
  return spec;
}

// The repeats of a cell, every one ok: the one of median throughput is
// kept, with every repeat's rate.
CellRecord CombineRepeats(std::vector<CellRecord> attempts) {
  std::vector<double> rates, times;
  for (const auto& a : attempts) {
    rates.push_back(a.samples_per_second.value_or(0.0));
    times.push_back(a.time_to_train_seconds.value_or(0.0));
  }
  std::sort(attempts.begin(), attempts.end(), [](const CellRecord& a, const CellRecord& b) {
    return a.samples_per_second.value_or(0.0) < b.samples_per_second.value_or(0.0);
  });
  CellRecord chosen = attempts[attempts.size() / 2];
  const Spread spread = SpreadOf(rates);
  chosen.samples_per_second_repeats = rates;
  chosen.time_to_train_seconds_repeats = times;
  chosen.samples_per_second_min = spread.min;
  chosen.samples_per_second_max = spread.max;
  // A rate is positive: a very noisy interval is cut at 0.
  chosen.samples_per_second_ci95 = std::vector<double>{std::max(0.0, spread.ci_low), spread.ci_high};
  return chosen;
}

// Now as 20261205-170102, for names of files kept aside.
std::string Stamp() {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  return stamp;
}

// Writes an earlier run's finished cells that this run no longer plans
// (their config changed) to results.dropped-STAMP.json beside results.json,
// a results document `report` reads, and names them in a warning.
void KeepDroppedCells(const fs::path& out_dir, const json& earlier_doc, const std::vector<CellRecord>& dropped,
                      const std::vector<CellRecord>& planned) {
  json cells = json::array();
  std::string names;
  for (const auto& c : dropped) {
    cells.push_back(protocol::ToJson(c));
    names += (names.empty() ? "" : ", ") + c.model + " on " + c.device;
    // What changed, where this run plans a cell of the same labels.
    const auto same = std::find_if(planned.begin(), planned.end(),
                                   [&](const CellRecord& p) { return p.model == c.model && p.device == c.device; });
    if (same == planned.end()) {
      names += ": no longer in the experiment (renamed or removed)";
      continue;
    }
    std::string keys;
    for (const auto& key : DifferingSettings(c.config, same->config)) keys += (keys.empty() ? "" : ", ") + key;
    if (!keys.empty())
      names += ": " + keys + " differ";
    else if (c.index != same->index)
      names += c.index ? fmt::format(": moved from cell {} to {}", *c.index, same->index.value_or(-1))
                       : ": recorded without its place in the experiment (an earlier version)";
  }
  json doc = {{"format", "trainbench-results/1"},
              {"experiment", earlier_doc.value("experiment", json::object())},
              {"system", earlier_doc.value("system", json::object())},
              {"cells", cells}};
  fs::path file = out_dir / ("results.dropped-" + Stamp() + ".json");
  for (int n = 2; fs::exists(file); ++n) file = out_dir / fmt::format("results.dropped-{}-{}.json", Stamp(), n);
  WriteFileAtomically(file, doc.dump(2) + "\n");
  spdlog::warn(
      "--resume: {} finished cell(s) of the earlier run no longer match this config ({}); kept in {}, and run "
      "again where the config still lists them",
      dropped.size(), names, file.string());
}

// Model FLOPs utilisation: the achieved rate over the hardware's peak (the
// experiment's, or the datasheet's), times the ranks that shared the work.
void SetEfficiency(CellRecord& cell, const MeasurementSpec& m) {
  std::optional<PeakFlops> peak;
  if (m.peak_tflops)
    peak = PeakFlops{*m.peak_tflops, "measurement.peak_tflops"};
  else
    peak = DatasheetPeak(cell.hardware);
  if (!peak || !cell.achieved_tflops) return;
  cell.peak_tflops = peak->tflops * static_cast<double>(cell.ranks.value_or(1));
  cell.peak_tflops_source = peak->source;
  cell.mfu = *cell.achieved_tflops / *cell.peak_tflops;
}

}  // namespace

// The resolved configuration of a cell: what makes two cells the same work
// (for --resume). Plugin files may move between builds; names and options
// may not.
json CellConfig(const protocol::CellSpec& spec, const PluginUse& device) {
  json config = protocol::ToJson(spec);
  // Only when some are set, so that records of runs without any still match.
  if (json environment = RecordedEnvironment(); !environment.empty()) config["environment"] = environment;
  if (spec.diagnostics) config["diagnostics"].erase("folder");  // where, not what
  config.erase("protocol");
  config.erase("cell_index");
  // Adam and AdamW have no momentum: a record names only what the cell used.
  if (json& optimizer = config["training"]["optimizer"]; optimizer.value("name", "sgd") != "sgd") {
    for (const char* sgd_only : {"momentum", "nesterov", "overlap"}) optimizer.erase(sgd_only);
  }
  config["model"].erase("path");
  config["device"].erase("path");
  config["device"]["ranks"] = device.ranks;
  config["device"]["gpus"] = device.device_indices;
  if (device.ranks > 1) config["device"]["sync_batchnorm"] = device.sync_batchnorm;
  return config;
}

namespace {

// One run of an experiment's cells, in order, each written to results.json
// as it finishes (RunExperiment).
class ExperimentRun {
 public:
  ExperimentRun(const Experiment& e, const fs::path& out_dir, const json& system, std::vector<RunObserver*> observers,
                RunStop& stop, const std::vector<size_t>& only, std::optional<protocol::Diagnostics> diagnostics)
      : e_(e),
        out_dir_(out_dir),
        observers_(std::move(observers)),
        stop_(stop),
        only_(only),
        diagnostics_(std::move(diagnostics)),
        results_(out_dir, e.ToJson(), system, e.measurement.baseline),
        plan_(e.Cells()) {
    // The run's progress lines come first among the observers.
    observers_.insert(observers_.begin(), &run_log_);
  }

  RunOutcome Run(bool resume) {
    std::vector<CellRecord> earlier = resume ? EarlierCells() : std::vector<CellRecord>{};
    Prepare();
    for (auto* o : observers_) o->OnRunStarted(e_, plan_.size());
    ListCells(std::move(earlier));
    for (const auto& planned : plan_) {
      const LogScope cell_scope(
          json{{"cell", planned.index}, {"model", planned.model.label}, {"device", planned.device.label}});
      RunCell(planned);
    }
    results_.ComputeSpeedups();
    results_.Write();
    for (auto* o : observers_) o->OnRunFinished(results_);
    RunOutcome outcome;
    outcome.results = results_.doc();
    outcome.table = results_.Table();
    const int sig = stop_.signal();
    outcome.exit_code = sig != 0 ? 128 + sig : any_failed_ ? kExitCellsFailed : kExitOk;
    return outcome;
  }

 private:
  // Finished cells of an earlier run into the same folder (--resume); an
  // unusable file is kept aside, never overwritten.
  std::vector<CellRecord> EarlierCells() {
    std::vector<CellRecord> earlier;
    const fs::path file = out_dir_ / "results.json";
    std::error_code ec;
    if (fs::exists(file, ec)) {
      earlier_doc_ = ReadJsonFile(file);
      const ReadCells previous = CellsOf(earlier_doc_);
      if (const std::string& problem = previous.problem; !problem.empty()) {
        const fs::path aside = file.string() + ".corrupt-" + Stamp();
        fs::rename(file, aside, ec);
        spdlog::warn("--resume: {} is unusable ({}); kept as {}{}, and every cell runs again", file.string(), problem,
                     aside.string(), ec ? " (could not rename it: " + ec.message() + ")" : "");
        if (ec)
          throw std::runtime_error(file.string() + ": unusable for --resume (" + problem +
                                   ") and cannot be moved aside: " + ec.message());
      } else {
        for (const auto& c : previous.cells)
          if (c.ok()) earlier.push_back(c);
      }
    }
    spdlog::info("--resume: {} finished cell(s) in {}", earlier.size(), file.string());
    return earlier;
  }

  // The folders, and each cell's specification and the configuration it is
  // recorded (and matched on --resume) with, once: what a cell is asked to
  // do and what its record says it did cannot drift apart.
  void Prepare() {
    std::map<std::string, std::string> index_options;
    for (const auto& d : e_.devices)
      if (!d.index_option.empty()) index_options[d.label] = d.index_option;
    results_.SetIndexOptions(index_options);
    MakeRealDirectory(out_dir_ / "logs");
    if (diagnostics_) {
      diagnostics_->folder = fs::absolute(out_dir_ / "diagnostics").string();
      MakeRealDirectory(diagnostics_->folder);
    }
    for (const auto& planned : plan_) {
      specs_.push_back(BuildCellSpec(e_, planned.model, planned.device, planned.index, diagnostics_));
      configs_.push_back(CellConfig(specs_.back(), planned.device));
    }
    kept_.assign(plan_.size(), false);
  }

  // Every cell is listed from the start: an earlier run's finished one as
  // it was (so the first write loses none of them), the others pending, so
  // a partial file shows what is still to come. Finished cells no planned
  // cell matches any more (the config changed) go to a side file before the
  // first write, never lost.
  void ListCells(std::vector<CellRecord> earlier) {
    for (const auto& planned : plan_) {
      CellRecord cell = PlannedRecord(planned);
      cell.index = static_cast<int64_t>(planned.index);
      cell.config = configs_[planned.index];
      // The same cell: its labels, its place in the experiment and its
      // resolved config, not only the config (four alike cells are four cells).
      auto done = std::find_if(earlier.begin(), earlier.end(), [&](const CellRecord& c) {
        return c.model == cell.model && c.device == cell.device && c.index == cell.index && c.config == cell.config;
      });
      if (done != earlier.end()) {
        CellRecord resumed = *done;
        resumed.index = cell.index;
        resumed.resumed = true;
        cell = resumed;
        kept_[planned.index] = true;
        earlier.erase(done);
      }
      results_.cells().push_back(std::move(cell));
    }
    if (!earlier.empty()) KeepDroppedCells(out_dir_, earlier_doc_, earlier, results_.cells());
    results_.ComputeSpeedups();
    results_.Write();
  }

  // One cell: kept from the earlier run, not run (a stop, an earlier
  // failure, --cells, no device plugin) or run; written either way.
  void RunCell(const PlannedCell& planned) {
    const size_t index = planned.index, total = plan_.size();
    const std::string& model = planned.model.label;
    const std::string& device = planned.device.label;
    CellRecord& cell = results_.cells()[index];
    if (kept_[index]) {
      LogWith(spdlog::level::info, {{"event", "cell_finished"}, {"status", cell.status}, {"resumed", true}},
              "[{}/{}] {} on {}: finished in the earlier run, kept", index + 1, total, model, device);
      for (auto* o : observers_) o->OnCellFinished(index, cell);
      return;
    }
    if (stop_.signal() != 0 || stopped_by_failure_) {
      cell.status = stopped_by_failure_ ? "skipped" : "interrupted";
      cell.reason = stopped_by_failure_ ? "not run: an earlier cell failed and measurement.stop_on_failure is set"
                                        : "run interrupted before this cell started";
      return;
    }
    cell.index = static_cast<int64_t>(index);
    if (!only_.empty() && std::find(only_.begin(), only_.end(), index) == only_.end()) {
      cell.status = "skipped";
      cell.reason = "not selected in this run (--cells)";
      return;
    }
    for (auto* o : observers_) o->OnCellStarted(index, cell);
    if (planned.device.path.empty()) {
      cell.status = "skipped";
      cell.reason = planned.device.missing_reason;
      LogWith(spdlog::level::warn, {{"event", "cell_finished"}, {"status", "skipped"}}, "[{}/{}] {} on {}: skipped: {}",
              index + 1, total, model, device, planned.device.missing_reason);
    } else {
      LogWith(spdlog::level::info, {{"event", "cell_started"}}, "[{}/{}] {} on {}: starting", index + 1, total, model,
              device);
      cell = Attempts(planned, cell);
      cell.index = static_cast<int64_t>(index);
      cell.config = configs_[index];
      Finished(planned, cell);
    }
    // GPU details of the run come from the first cell that ran on one.
    if (planned.device.accelerator && cell.hardware.is_object() && !results_.system().contains("gpu"))
      results_.system()["gpu"] = cell.hardware;
    results_.ComputeSpeedups();
    results_.Write();
    for (auto* o : observers_) o->OnCellFinished(index, cell);
  }

  // The cell's attempts (measurement.repeats, until one is not ok), as one
  // record: the median repeat's with every repeat's rate, or the last.
  CellRecord Attempts(const PlannedCell& planned, const CellRecord& cell) {
    const size_t index = planned.index;
    const PluginUse& device = planned.device;
    CellRecord record = cell;
    if (const std::string job_gpus = SlurmJobGpus(); !job_gpus.empty() && !device.device_indices.empty()) {
      record.slurm = {{"job_gpus", job_gpus}};
      spdlog::info("[{}/{}] {} on {}: the Slurm job's GPUs {}, in that order for its {} rank(s)", index + 1,
                   plan_.size(), planned.model.label, device.label, job_gpus, device.ranks);
    }
    const MeasurementSpec& m = e_.measurement;
    std::vector<CellRecord> attempts;
    for (int64_t r = 0; r < m.repeats && stop_.signal() == 0; ++r) {
      const fs::path log = out_dir_ / "logs" /
                           fmt::format("cell-{:02}-{}-{}{}.log", index, planned.model.label, device.label,
                                       m.repeats > 1 ? fmt::format("-r{}", r) : "");
      attempts.push_back(
          RunAttempt(specs_[index], device, record, log, index, m.stall_timeout_seconds, observers_, stop_));
      if (!attempts.back().ok()) break;
    }
    if (attempts.empty()) {
      // A stop arrived before the first attempt started.
      record.status = "interrupted";
      record.reason = "run interrupted before this cell started (" + StopSignalName(stop_) + ")";
      return record;
    }
    if (attempts.back().ok() && attempts.size() > 1) return CombineRepeats(std::move(attempts));
    return attempts.back();
  }

  // What a cell that ran came to: its figures, or why not, in the log; a
  // failure counts for the exit code (and ends the run with stop_on_failure).
  void Finished(const PlannedCell& planned, CellRecord& cell) {
    const size_t index = planned.index, total = plan_.size();
    const std::string& model = planned.model.label;
    const std::string& device = planned.device.label;
    const std::string reason = Printable(cell.reason.value_or(""));  // a plugin's words, for a terminal
    if (cell.ok()) {
      SetEfficiency(cell, e_.measurement);
      cell.target_accuracy = e_.measurement.target_accuracy;
      LogWith(spdlog::level::info,
              {{"event", "cell_finished"},
               {"status", "ok"},
               {"samples_per_second", cell.samples_per_second.value_or(0.0)},
               {"time_to_train_seconds", cell.time_to_train_seconds.value_or(0.0)}},
              "[{}/{}] {} on {}: {:.1f} samples/s, {:.1f} s to train{}", index + 1, total, model, device,
              cell.samples_per_second.value_or(0.0), cell.time_to_train_seconds.value_or(0.0),
              cell.projected.value_or(false) ? " (projected)" : "");
      WarnIfNoisy(planned, cell);
    } else if (cell.status == "skipped") {
      LogWith(spdlog::level::warn, {{"event", "cell_finished"}, {"status", "skipped"}}, "[{}/{}] {} on {}: skipped: {}",
              index + 1, total, model, device, reason);
    } else {
      // A cell interrupted while the run was not (a signal to its worker
      // alone) did not finish either: the run says so in its exit code.
      any_failed_ |= cell.status == "failed" || (cell.status == "interrupted" && stop_.signal() == 0);
      stopped_by_failure_ |= cell.status == "failed" && e_.measurement.stop_on_failure;
      LogWith(spdlog::level::err, {{"event", "cell_finished"}, {"status", cell.status}}, "[{}/{}] {} on {}: {}: {}",
              index + 1, total, model, device, cell.status, reason);
    }
  }

  void WarnIfNoisy(const PlannedCell& planned, const CellRecord& cell) const {
    if (!cell.samples_per_second_ci95) return;
    const auto& ci = *cell.samples_per_second_ci95;
    const double median = cell.samples_per_second.value_or(0.0);
    if (median <= 0 || (ci[1] - ci[0]) / 2 <= 0.05 * median) return;
    LogWith(spdlog::level::warn, {{"event", "noisy_machine"}, {"samples_per_second_ci95", ci}},
            "[{}/{}] {} on {}: noisy machine: the 95% interval of {} repeats, {:.1f}-{:.1f} samples/s, "
            "is wider than 5% of the median either side",
            planned.index + 1, plan_.size(), planned.model.label, planned.device.label,
            cell.samples_per_second_repeats->size(), ci[0], ci[1]);
  }

  const Experiment& e_;
  const fs::path out_dir_;
  RunLog run_log_;
  std::vector<RunObserver*> observers_;
  RunStop& stop_;
  const std::vector<size_t>& only_;
  std::optional<protocol::Diagnostics> diagnostics_;
  Results results_;
  const std::vector<PlannedCell> plan_;
  json earlier_doc_;
  std::vector<protocol::CellSpec> specs_;
  std::vector<json> configs_;
  std::vector<bool> kept_;
  bool any_failed_ = false;
  bool stopped_by_failure_ = false;
};

}  // namespace

RunOutcome RunExperiment(const Experiment& e, const fs::path& out_dir, const json& system,
                         std::vector<RunObserver*> observers, RunStop& stop, bool resume,
                         const std::vector<size_t>& only, std::optional<protocol::Diagnostics> diagnostics) {
  // Every line logged during the run names it (--log-format json).
  const LogScope run_scope(json{{"experiment", e.name}});
  return ExperimentRun(e, out_dir, system, std::move(observers), stop, only, std::move(diagnostics)).Run(resume);
}

CellRecord PlannedRecord(const PlannedCell& planned) {
  CellRecord cell;
  cell.model = planned.model.label;
  cell.model_plugin = planned.model.plugin;
  cell.device = planned.device.label;
  cell.device_plugin = planned.device.plugin;
  cell.model_options = planned.model.options;
  cell.device_options = planned.device.options;
  if (!planned.model.record.is_null()) cell.plugins.push_back(planned.model.record);
  if (!planned.device.record.is_null()) cell.plugins.push_back(planned.device.record);
  return cell;
}

}  // namespace trainbench

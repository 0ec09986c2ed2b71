#include "runner.h"

#include <algorithm>
#include <csignal>
#include <cstdlib>

#include <spdlog/spdlog.h>

#include "net.h"
#include "worker_client.h"

namespace trainbench {
namespace fs = std::filesystem;
using nlohmann::json;

std::atomic<int> g_stop_signal{0};

namespace {

extern "C" void OnSignal(int sig) { RequestStop(sig); }

json CellSpecJson(const Experiment& e, const PluginUse& model, const PluginUse& device, size_t index) {
  auto opt = [](const auto& o) { return o ? json(*o) : json(nullptr); };
  const auto max_steps = device.max_steps ? device.max_steps : e.measurement.max_steps;
  const auto budget = device.time_budget_seconds ? device.time_budget_seconds : e.measurement.time_budget_seconds;
  const json resolved = e.ToJson();  // dataset and training exactly as recorded in results.json
  json spec = {{"experiment", e.name},
          {"cell_index", index},
          {"seed", e.seed},
          {"model", {{"name", model.plugin}, {"path", model.path}, {"options", model.options}}},
          {"device", {{"name", device.plugin}, {"path", device.path}, {"options", device.options},
                      {"ranks", device.ranks}, {"gpus", device.device_indices}}},
          {"dataset", resolved["dataset"]},
          {"training", resolved["training"]},
          {"measurement",
           {{"warmup_steps", e.measurement.warmup_steps},
            {"max_steps", opt(max_steps)},
            {"time_budget_seconds", opt(budget)},
            {"progress_interval_seconds", e.measurement.progress_interval_seconds},
            {"eval_batch_size", e.measurement.eval_batch_size}}}};
  if (device.ranks > 1) spec["device"]["sync_batchnorm"] = device.sync_batchnorm;
  return spec;
}

// The GPUs of the Slurm job this process runs in (SLURM_JOB_GPUS, e.g.
// "2,3"), when Slurm gave it some (--gres) and set CUDA_VISIBLE_DEVICES to
// them; empty otherwise.
std::string SlurmJobGpus() {
  const char* job = std::getenv("SLURM_JOB_ID");
  const char* gpus = std::getenv("SLURM_JOB_GPUS");
  return job != nullptr && gpus != nullptr && std::getenv("CUDA_VISIBLE_DEVICES") != nullptr ? gpus : "";
}

// The worker launches of one attempt: one, or one per rank of a
// data-parallel cell (rank 0 writes `log`, rank r LOG-rankR.log).
std::vector<WorkerLaunch> Launches(const json& spec, const fs::path& log) {
  const int64_t ranks = std::max<int64_t>(spec["device"].value("ranks", int64_t{1}), 1);
  const json& gpus = spec["device"]["gpus"];  // rank r's device_index, when listed
  // In a Slurm job with GPUs, CUDA sees only the job's, renumbered from 0:
  // rank r takes the job's r-th GPU, whatever indices the config lists
  // (those name GPUs of a machine, and Slurm chose which ones this job has).
  const bool slurm_gpus = !SlurmJobGpus().empty();
  const int port = ranks > 1 ? FreeTcpPort() : 0;
  std::vector<WorkerLaunch> launches;
  for (int64_t r = 0; r < ranks; ++r) {
    WorkerLaunch launch{{"run"}, "", log, {}};
    json rank_spec = spec;
    if (gpus.is_array() && static_cast<int64_t>(gpus.size()) == ranks)
      rank_spec["device"]["options"]["device_index"] = slurm_gpus ? json(r) : gpus[r];
    if (ranks > 1) {
      rank_spec["distributed"] = {{"rank", r}, {"world_size", ranks}, {"store_host", "127.0.0.1"}, {"store_port", port},
                                  {"sync_batchnorm", spec["device"].value("sync_batchnorm", false)}};
      if (r > 0)
        launch.stderr_log.replace_filename(log.stem().string() + "-rank" + std::to_string(r) + log.extension().string());
      // NVLink multicast (NVLS) stays off: see docs/architecture.md.
      launch.env = {{"NCCL_NVLS_ENABLE", "0"},
                    {"TRAINBENCH_RANK", std::to_string(r)},
                    {"TRAINBENCH_WORLD_SIZE", std::to_string(ranks)}};
    }
    launch.stdin_text = rank_spec.dump();
    launches.push_back(std::move(launch));
  }
  return launches;
}

// Runs one attempt of a cell in fresh workers (one per rank); returns the
// cell's outcome. Rank 0 speaks for the cell; the other ranks' results give
// the per-rank figures and their failures the reason.
json RunAttempt(const json& spec, const json& base_cell, const fs::path& log, size_t index,
                size_t total, double stall_timeout, std::vector<RunObserver*>& observers) {
  json cell = base_cell;
  bool finished = false;
  auto last_line = std::chrono::steady_clock::now() - std::chrono::hours(1);
  const std::vector<WorkerLaunch> launches = Launches(spec, log);
  const size_t ranks = launches.size();
  std::vector<json> rank_results(ranks), rank_errors(ranks);
  std::vector<WorkerExit> exits = RunWorkers(launches, [&](size_t rank, const json& event) {
    const std::string type = event.value("event", "");
    if (rank > 0) {
      if (type == "result") rank_results[rank] = event;
      if (type == "error") rank_errors[rank] = event;
      return;
    }
    if (type == "started") {
      for (const char* key : {"params", "flops_per_sample", "hardware", "train_size", "test_size", "steps_per_epoch"})
        if (event.contains(key)) cell[key] = event[key];
    } else if (type == "progress") {
      const auto now = std::chrono::steady_clock::now();
      if (now - last_line >= std::chrono::seconds(3)) {
        last_line = now;
        spdlog::info("[{}/{}] {} on {}: epoch {} step {}/{} loss {:.4f} {}", index + 1,
                     total, cell["model"].get<std::string>(), cell["device"].get<std::string>(),
                     event.value("epoch", 0), event.value("step", 0), event.value("steps_per_epoch", 0),
                     event.value("loss", 0.0),
                     event.value("samples_per_second", 0.0) > 0
                         ? fmt::format("{:.1f} samples/s", event.value("samples_per_second", 0.0))
                         : std::string("(warm-up)"));
      }
    } else if (type == "epoch") {
      spdlog::info("[{}/{}] {} on {}: epoch {} done in {:.1f} s{}, loss {:.4f}, test accuracy {:.2f}%",
                   index + 1, total, cell["model"].get<std::string>(), cell["device"].get<std::string>(),
                   event.value("epoch", 0), event.value("seconds", 0.0),
                   event.value("complete", true) ? "" : " (partial: budget reached)",
                   event.value("train_loss", 0.0), 100.0 * event.value("test_accuracy", 0.0));
    } else if (type == "result") {
      rank_results[0] = event;
      for (auto it = event.begin(); it != event.end(); ++it)
        if (it.key() != "event") cell[it.key()] = it.value();
      cell["status"] = "ok";
      finished = true;
    } else if (type == "skipped" || type == "error" || type == "interrupted") {
      cell["status"] = type == "skipped" ? "skipped" : type == "error" ? "failed" : "interrupted";
      cell["reason"] = event.value("reason", "");
      if (event.value("loss_nan", false)) cell["loss_nan"] = true;
      finished = true;
    }
    for (auto* o : observers) o->OnEvent(index, cell, event);
  }, stall_timeout);
  const WorkerExit& exit = exits.front();
  if (!finished && exit.timed_out) {
    cell["status"] = "failed";
    cell["reason"] = fmt::format("the worker printed nothing for {:.0f} s (measurement.stall_timeout_seconds) "
                                 "and was killed: hung?", stall_timeout);
  } else if (!finished) {
    if (g_stop_signal.load() != 0) {
      cell["status"] = "interrupted";
      cell["reason"] = "interrupted by " + std::string(sigabbrev_np(g_stop_signal.load()) ? "SIG" : "signal ") +
                       (sigabbrev_np(g_stop_signal.load()) ? sigabbrev_np(g_stop_signal.load()) : "");
    } else {
      cell["status"] = "failed";
      std::string last = LastLogLine(log);
      cell["reason"] = "worker " + exit.Describe() + (last.empty() ? "" : "; last log line: " + last);
    }
  }
  if (ranks > 1) {
    // Another rank's failure explains the cell's (rank 0 often only sees
    // its peer vanish); an interrupted run stays interrupted.
    std::string others;
    for (size_t r = 1; r < ranks; ++r) {
      std::string why;
      if (!rank_errors[r].is_null()) why = rank_errors[r].value("reason", "");
      else if (exits[r].signaled && exits[r].signal != SIGKILL) why = "worker " + exits[r].Describe();
      else if (!exits[r].signaled && exits[r].code != 0) why = "worker " + exits[r].Describe();
      if (!why.empty()) others += fmt::format("; rank {}: {}", r, why);
    }
    if (!others.empty() && cell.value("status", "") != "interrupted") {
      cell["status"] = "failed";
      cell["reason"] = cell.value("reason", std::string("rank 0 finished")) + others;
    }
    if (cell.value("status", "") == "ok") {
      json per_rank = json::array();
      for (size_t r = 0; r < ranks; ++r) {
        // Each rank times the combined batch's steps; its own share is 1/N.
        const double sps = rank_results[r].is_null() ? 0.0 : rank_results[r].value("samples_per_second", 0.0);
        per_rank.push_back(sps / static_cast<double>(ranks));
      }
      cell["rank_samples_per_second"] = per_rank;
    }
  }
  return cell;
}

}  // namespace

// The resolved configuration of a cell: what makes two cells the same work
// (for --resume). Plugin files may move between builds; names and options
// may not.
json CellConfig(const json& spec) {
  json config = spec;
  config.erase("cell_index");
  config["model"].erase("path");
  config["device"].erase("path");
  return config;
}

void RequestStop(int sig) noexcept {
  g_stop_signal.store(sig);
  // The worker runs in its own process group, so a terminal's Ctrl-C and a
  // service manager's SIGTERM reach only us: pass it on, once per request.
  const int group = g_worker_pid.load();
  if (group > 0) ::kill(-group, sig);
}

void ClearStopRequest() noexcept { g_stop_signal.store(0); }

RunOutcome RunExperiment(const Experiment& e, const fs::path& out_dir, const json& system,
                         std::vector<RunObserver*> observers, bool resume, const std::vector<size_t>& only) {
  // Finished cells of an earlier run into the same folder, by configuration.
  std::vector<json> earlier;
  if (resume) {
    const json previous = ReadJsonFile(out_dir / "results.json");
    if (previous.is_object() && previous.contains("cells")) {
      for (const auto& c : previous["cells"])
        if (c.value("status", "") == "ok" && c.contains("config")) earlier.push_back(c);
    }
    spdlog::info("--resume: {} finished cell(s) in {}", earlier.size(), (out_dir / "results.json").string());
  }
  Results results(out_dir, e.ToJson(), system, e.measurement.baseline);
  fs::create_directories(out_dir / "logs");
  const size_t total = e.models.size() * e.devices.size();
  for (auto* o : observers) o->OnRunStarted(e, total);

  // Every cell is listed from the start as pending, so a partial file shows
  // what is still to come.
  for (const auto& model : e.models) {
    for (const auto& device : e.devices) {
      json plugins = json::array();
      if (!model.record.is_null()) plugins.push_back(model.record);
      if (!device.record.is_null()) plugins.push_back(device.record);
      results.cells().push_back({{"model", model.label},
                                 {"model_plugin", model.plugin},
                                 {"device", device.label},
                                 {"device_plugin", device.plugin},
                                 {"model_options", model.options},
                                 {"device_options", device.options},
                                 {"plugins", plugins},
                                 {"status", "pending"}});
    }
  }
  results.Write();

  bool any_failed = false;
  bool stopped_by_failure = false;
  size_t index = 0;
  for (const auto& model : e.models) {
    for (const auto& device : e.devices) {
      json& cell = results.cells()[index];
      if (g_stop_signal.load() != 0 || stopped_by_failure) {
        cell["status"] = stopped_by_failure ? "skipped" : "interrupted";
        cell["reason"] = stopped_by_failure ? "not run: an earlier cell failed and measurement.stop_on_failure is set"
                                            : "run interrupted before this cell started";
        ++index;
        continue;
      }
      cell["index"] = index;
      const json spec = CellSpecJson(e, model, device, index);
      cell["config"] = CellConfig(spec);
      if (!only.empty() && std::find(only.begin(), only.end(), index) == only.end()) {
        cell["status"] = "skipped";
        cell["reason"] = "not selected in this run (--cells)";
        ++index;
        continue;
      }
      auto done = std::find_if(earlier.begin(), earlier.end(),
                               [&](const json& c) { return c["config"] == cell["config"]; });
      if (done != earlier.end()) {
        json kept = *done;
        kept["index"] = index;
        kept["resumed"] = true;
        cell = kept;
        earlier.erase(done);
        spdlog::info("[{}/{}] {} on {}: finished in the earlier run, kept", index + 1, total, model.label,
                     device.label);
        results.ComputeSpeedups();
        results.Write();
        for (auto* o : observers) o->OnCellFinished(index, cell);
        ++index;
        continue;
      }
      for (auto* o : observers) o->OnCellStarted(index, cell);
      if (device.path.empty()) {
        cell["status"] = "skipped";
        cell["reason"] = device.missing_reason;
        spdlog::warn("[{}/{}] {} on {}: skipped: {}", index + 1, total, model.label, device.label,
                     device.missing_reason);
      } else {
        spdlog::info("[{}/{}] {} on {}: starting", index + 1, total, model.label, device.label);
        if (const std::string job_gpus = SlurmJobGpus(); !job_gpus.empty() && !device.device_indices.empty()) {
          cell["slurm"] = {{"job_gpus", job_gpus}};
          spdlog::info("[{}/{}] {} on {}: the Slurm job's GPUs {}, in that order for its {} rank(s)", index + 1,
                       total, model.label, device.label, job_gpus, device.ranks);
        }
        std::vector<json> attempts;
        for (int64_t r = 0; r < e.measurement.repeats && g_stop_signal.load() == 0; ++r) {
          const fs::path log = out_dir / "logs" /
                               fmt::format("cell-{:02}-{}-{}{}.log", index, model.label, device.label,
                                           e.measurement.repeats > 1 ? fmt::format("-r{}", r) : "");
          attempts.push_back(RunAttempt(spec, cell, log, index, total, e.measurement.stall_timeout_seconds, observers));
          if (attempts.back().value("status", "") != "ok") break;
        }
        if (attempts.back().value("status", "") == "ok" && attempts.size() > 1) {
          // Keep the repeat of median throughput; record all of them.
          json sps = json::array();
          for (const auto& a : attempts) sps.push_back(a["samples_per_second"]);
          std::sort(attempts.begin(), attempts.end(), [](const json& a, const json& b) {
            return a["samples_per_second"].get<double>() < b["samples_per_second"].get<double>();
          });
          json chosen = attempts[attempts.size() / 2];
          chosen["samples_per_second_repeats"] = sps;
          cell = chosen;
        } else {
          cell = attempts.back();
        }
        cell["index"] = index;
        cell["config"] = CellConfig(spec);
        const std::string status = cell.value("status", "");
        if (status == "ok") {
          spdlog::info("[{}/{}] {} on {}: {:.1f} samples/s{}", index + 1, total, model.label, device.label,
                       cell.value("samples_per_second", 0.0), cell.value("projected", false) ? " (projected)" : "");
        } else if (status == "skipped") {
          spdlog::warn("[{}/{}] {} on {}: skipped: {}", index + 1, total, model.label, device.label,
                       cell.value("reason", ""));
        } else {
          any_failed |= status == "failed";
          stopped_by_failure |= status == "failed" && e.measurement.stop_on_failure;
          spdlog::error("[{}/{}] {} on {}: {}: {}", index + 1, total, model.label, device.label, status,
                        cell.value("reason", ""));
        }
      }
      // GPU details of the run come from the first cell that saw one.
      if (cell.contains("hardware") && cell["hardware"].value("type", "") == "cuda" &&
          !results.system().contains("gpu")) {
        results.system()["gpu"] = cell["hardware"];
      }
      results.ComputeSpeedups();
      results.Write();
      for (auto* o : observers) o->OnCellFinished(index, cell);
      ++index;
    }
  }
  results.ComputeSpeedups();
  results.Write();
  for (auto* o : observers) o->OnRunFinished(results);
  RunOutcome outcome;
  outcome.results = results.doc();
  outcome.table = results.Table();
  const int sig = g_stop_signal.load();
  outcome.exit_code = sig != 0 ? 128 + sig : any_failed ? kExitCellsFailed : kExitOk;
  return outcome;
}

void InstallSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

}  // namespace trainbench

#include "cell_attempt.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <functional>

#include "net.h"
#include "trainbench/protocol/events.h"
#include "worker_client.h"

namespace trainbench {
namespace fs = std::filesystem;

// The signal a stop was requested with, as "SIGTERM" ("a signal" when it
// has no name).
std::string StopSignalName(const RunStop& stop) {
  const char* abbrev = sigabbrev_np(stop.signal());
  return abbrev ? "SIG" + std::string(abbrev) : "a signal";
}

// The GPUs of the Slurm job this process runs in (SLURM_JOB_GPUS, e.g.
// "2,3"), when Slurm gave it some (--gres) and set CUDA_VISIBLE_DEVICES to
// them; empty otherwise.
std::string SlurmJobGpus() {
  const char* job = std::getenv("SLURM_JOB_ID");
  const char* gpus = std::getenv("SLURM_JOB_GPUS");
  return job != nullptr && gpus != nullptr && std::getenv("CUDA_VISIBLE_DEVICES") != nullptr ? gpus : "";
}

namespace {

// The worker launches of one attempt: one, or one per rank of a
// data-parallel cell (rank 0 writes `log`, rank r LOG-rankR.log).
std::vector<WorkerLaunch> Launches(const protocol::CellSpec& spec, const PluginUse& device, const fs::path& log) {
  const int64_t ranks = std::max<int64_t>(device.ranks, 1);
  const std::vector<int64_t>& gpus = device.device_indices;  // rank r's device_index, when listed
  // In a Slurm job with GPUs, CUDA sees only the job's, renumbered from 0:
  // rank r takes the job's r-th GPU, whatever indices the config lists
  // (those name GPUs of a machine, and Slurm chose which ones this job has).
  const bool slurm_gpus = !SlurmJobGpus().empty();
  const int port = ranks > 1 ? FreeTcpPort() : 0;
  std::vector<WorkerLaunch> launches;
  for (int64_t r = 0; r < ranks; ++r) {
    WorkerLaunch launch{{"run"}, "", log, {}};
    protocol::CellSpec rank_spec = spec;
    if (static_cast<int64_t>(gpus.size()) == ranks)
      rank_spec.device.options[device.index_option] = slurm_gpus ? r : gpus[static_cast<size_t>(r)];
    if (ranks > 1) {
      protocol::DistributedSpec d;
      d.rank = static_cast<int>(r);
      d.world_size = static_cast<int>(ranks);
      d.store_host = "127.0.0.1";
      d.store_port = port;
      d.sync_batchnorm = device.sync_batchnorm;
      rank_spec.distributed = d;
      if (r > 0)
        launch.log.replace_filename(log.stem().string() + "-rank" + std::to_string(r) + log.extension().string());
      // NVLink multicast (NVLS) stays off: see docs/architecture.md.
      launch.env = {{"NCCL_NVLS_ENABLE", "0"},
                    {"TRAINBENCH_RANK", std::to_string(r)},
                    {"TRAINBENCH_WORLD_SIZE", std::to_string(ranks)}};
    }
    launch.stdin_text = protocol::ToJson(rank_spec).dump();
    launches.push_back(std::move(launch));
  }
  return launches;
}

// A data-parallel cell's energy: each rank read its own GPU (NVML), so the
// cell's is their sum; every rank must have read one, or none is claimed. A
// package counter (RAPL) is rank 0's alone, for the whole machine: kept.
void SumRankEnergy(const std::vector<std::optional<protocol::Result>>& ranks, CellRecord& cell) {
  if (cell.energy_source.value_or("") != "nvml") return;
  double joules = 0, per_sample = 0, watts = 0;
  std::vector<double> epochs(cell.epoch_energy_joules.value_or(std::vector<double>{}).size(), 0.0);
  for (size_t r = 0; r < ranks.size(); ++r) {
    const auto& result = ranks[r];
    if (!result || !result->energy_joules || !result->joules_per_sample) {
      cell.energy_joules.reset();
      cell.joules_per_sample.reset();
      cell.average_power_watts.reset();
      cell.epoch_energy_joules.reset();
      cell.energy_source.reset();
      cell.energy_reason = fmt::format("rank {} read no energy ({}), so the ranks' sum is not known", r,
                                       result ? result->energy_reason.value_or("?") : "no result");
      return;
    }
    joules += *result->energy_joules;
    per_sample += *result->joules_per_sample;  // each over the combined batch's samples
    watts += result->average_power_watts.value_or(0.0);
    for (size_t e = 0; e < epochs.size() && e < result->epoch_energy_joules.size(); ++e)
      epochs[e] += result->epoch_energy_joules[e];
  }
  cell.energy_joules = joules;
  cell.joules_per_sample = per_sample;
  cell.average_power_watts = watts;
  cell.epoch_energy_joules = epochs;
}

// What a cell's workers said in one attempt: rank 0's events make the
// cell's record (and go to the observers), the other ranks' results and
// errors are kept for the per-rank figures and the reason of a failure.
class AttemptEvents {
 public:
  AttemptEvents(const CellRecord& base, size_t ranks, size_t index, std::vector<RunObserver*>& observers)
      : cell(base), rank_results(ranks), rank_errors(ranks), index_(index), observers_(observers) {}

  void operator()(size_t rank, const protocol::Event& event) {
    if (rank > 0) {
      if (auto* r = std::get_if<protocol::Result>(&event)) rank_results[rank] = *r;
      if (auto* e = std::get_if<protocol::Error>(&event)) rank_errors[rank] = *e;
      return;
    }
    if (finished) return;  // nothing counts after the final event
    if (auto* started = std::get_if<protocol::Started>(&event)) {
      cell.Apply(*started);
    } else if (auto* r = std::get_if<protocol::Result>(&event)) {
      rank_results[0] = *r;
      cell.Apply(*r);
      finished = result = true;
    } else if (auto* sk = std::get_if<protocol::Skipped>(&event)) {
      Final("skipped", sk->reason);
    } else if (auto* er = std::get_if<protocol::Error>(&event)) {
      Final("failed", er->reason);
      if (er->loss_nan) cell.loss_nan = true;
    } else if (auto* in = std::get_if<protocol::Interrupted>(&event)) {
      Final("interrupted", in->reason);
    }
    for (auto* o : observers_) o->OnEvent(index_, cell, event);
  }

  CellRecord cell;
  bool finished = false;  // a final event came (result, skipped, error, interrupted)
  bool result = false;    // ... and it was a result
  std::vector<std::optional<protocol::Result>> rank_results;
  std::vector<std::optional<protocol::Error>> rank_errors;

 private:
  void Final(const char* status, const std::string& reason) {
    cell.status = status;
    cell.reason = reason;
    finished = true;
  }
  size_t index_;
  std::vector<RunObserver*>& observers_;
};

// The cell's status from how rank 0's worker ended and what it said: a
// result counts only from a worker that then exits cleanly (one that
// crashes after it may have reported anything).
namespace {
// Ended by a signal that asks a process to stop (as against a fault or SIGKILL).
bool StoppedFromOutside(const WorkerExit& exit) {
  return exit.signaled && (exit.signal == SIGTERM || exit.signal == SIGINT || exit.signal == SIGHUP);
}
}  // namespace

void SetStatusFromExit(AttemptEvents& a, const WorkerExit& exit, const RunStop& stop, double stall_timeout,
                       const fs::path& log) {
  CellRecord& cell = a.cell;
  if (a.result && exit.clean()) {
    cell.status = "ok";
  } else if (exit.killed_after_stop) {
    cell.status = "interrupted";
    cell.reason = fmt::format(
        "interrupted by {}; the worker had not stopped {:.0f} s later (hung in a plugin?) "
        "and was killed",
        StopSignalName(stop), kStopGraceSeconds);
  } else if (!exit.protocol_error.empty()) {
    cell.status = "failed";
    cell.reason = "worker " + exit.Describe();
  } else if (exit.timed_out) {
    cell.status = "failed";
    cell.reason = fmt::format(
        "the worker sent no event for {:.0f} s (measurement.stall_timeout_seconds) "
        "and was killed: hung?",
        stall_timeout);
  } else if (a.result || !a.finished) {
    if (stop.signal() != 0 && !a.result) {
      cell.status = "interrupted";
      cell.reason = "interrupted by " + StopSignalName(stop);
    } else if (!a.result && StoppedFromOutside(exit)) {
      // A stop sent to the worker alone (an administrator's kill) that came
      // before its handler was in place: what the handler would have said.
      cell.status = "interrupted";
      cell.reason = "the worker was " + exit.Describe() + " from outside the run, before it could stop cleanly";
    } else {
      cell.status = "failed";
      const std::string last = LastLogLine(log);
      cell.reason = std::string(a.result ? "the worker reported a result, then " : "worker ") + exit.Describe() +
                    (last.empty() ? "" : "; last log line: " + last);
    }
  }
  // Measurements of a cell that did not finish cleanly are not kept.
  if (!cell.ok()) cell.DropMeasurements();
}

// A data-parallel cell: another rank's failure explains the cell's (rank 0
// often only sees its peer vanish; an interrupted run stays interrupted);
// an ok cell gets each rank's rate and the ranks' energy.
void MergeRanks(AttemptEvents& a, const std::vector<WorkerExit>& exits) {
  CellRecord& cell = a.cell;
  const size_t ranks = exits.size();
  std::string others;
  for (size_t r = 1; r < ranks; ++r) {
    std::string why;
    if (a.rank_errors[r])
      why = a.rank_errors[r]->reason;
    else if (!exits[r].protocol_error.empty() || (exits[r].signaled && exits[r].signal != SIGKILL) ||
             (!exits[r].signaled && exits[r].code != 0))
      why = "worker " + exits[r].Describe();
    if (!why.empty()) others += fmt::format("; rank {}: {}", r, why);
  }
  if (!others.empty() && cell.status != "interrupted") {
    cell.status = "failed";
    cell.reason = cell.reason.value_or("rank 0 finished") + others;
    cell.DropMeasurements();
  }
  if (!cell.ok()) return;
  std::vector<double> per_rank;
  for (size_t r = 0; r < ranks; ++r) {
    // Each rank times the combined batch's steps; its own share is 1/N.
    const double sps = a.rank_results[r] ? a.rank_results[r]->samples_per_second : 0.0;
    per_rank.push_back(sps / static_cast<double>(ranks));
  }
  cell.rank_samples_per_second = per_rank;
  SumRankEnergy(a.rank_results, cell);
}

}  // namespace

// Runs one attempt of a cell in fresh workers (one per rank); returns the
// cell's outcome. Rank 0 speaks for the cell; the other ranks' results give
// the per-rank figures and their failures the reason.
CellRecord RunAttempt(const protocol::CellSpec& spec, const PluginUse& device, const CellRecord& base_cell,
                      const fs::path& log, size_t index, double stall_timeout, std::vector<RunObserver*>& observers,
                      RunStop& stop) {
  const std::vector<WorkerLaunch> launches = Launches(spec, device, log);
  AttemptEvents attempt(base_cell, launches.size(), index, observers);
  const auto spawned = std::chrono::steady_clock::now();
  const std::vector<WorkerExit> exits =
      RunWorkers(launches, std::ref(attempt), stall_timeout, /*straggler_seconds=*/30, &stop, kStopGraceSeconds);
  attempt.cell.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - spawned).count();
  SetStatusFromExit(attempt, exits.front(), stop, stall_timeout, log);
  if (launches.size() > 1) MergeRanks(attempt, exits);
  return attempt.cell;
}

}  // namespace trainbench

// Slurm: an experiment as job arrays (one cell per array task), and the
// tasks' results gathered into one results.json. Uses Slurm's own commands
// (sbatch, squeue, scontrol); see docs/slurm.md.

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>
#include <thread>

#include "live_runs.h"
#include "plan_impl.h"
#include "results.h"
#include "runner.h"
#include "trainbench/engine.h"
#include "worker_client.h"

namespace trainbench {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs a command (argv, no shell interpretation of its words); returns its
// exit code and stdout.
std::pair<int, std::string> Capture(const std::vector<std::string>& argv) {
  std::string command;
  for (const auto& a : argv) command += (command.empty() ? "" : " ") + Quote(a);
  command += " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, ""};
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// The jobs submitted for this output folder, oldest first:
// [{job_id, cells: [...], gpus, script}].
json ReadJobs(const fs::path& out_dir) {
  json jobs = ReadJsonFile(out_dir / "slurm" / "jobs.json");
  return jobs.is_array() ? jobs : json::array();
}

// The results.json of the task that ran `cell`, or null.
json TaskResults(const fs::path& out_dir, size_t cell) {
  return ReadJsonFile(out_dir / "tasks" / fmt::format("cell-{}", cell) / "results.json");
}

// The cell's own entry in its task's results (`doc`), or none (no file, or
// one that is not a sound results.json).
std::optional<CellRecord> TaskCell(const json& doc, size_t cell) {
  ReadCells read = CellsOf(doc);
  if (!read.problem.empty() || read.cells.size() <= cell) return std::nullopt;
  return read.cells[cell];
}

// State of array tasks in the queue: "JOB_TASK" -> {state, reason}.
std::map<std::string, std::pair<std::string, std::string>> QueuedTasks(const json& jobs) {
  std::map<std::string, std::pair<std::string, std::string>> out;
  if (jobs.empty()) return out;
  std::string ids;
  for (const auto& j : jobs) ids += (ids.empty() ? "" : ",") + j.value("job_id", "");
  const auto [code, text] = Capture({"squeue", "-h", "-r", "-j", ids, "-o", "%i|%T|%r"});
  if (code != 0) return out;  // jobs no longer known to the controller
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto a = line.find('|'), b = line.rfind('|');
    if (a == std::string::npos || a == b) continue;
    out[line.substr(0, a)] = {line.substr(a + 1, b - a - 1), Trim(line.substr(b + 1))};
  }
  return out;
}

// What the controller still knows of a finished task: "CANCELLED (Reason=None, ExitCode=0:15)".
std::string SlurmState(const std::string& job_id, size_t cell) {
  const auto result = Capture({"scontrol", "-o", "show", "job", job_id + "_" + std::to_string(cell)});
  if (result.first != 0) return "";
  const std::string& text = result.second;
  auto field = [&](const std::string& key) {
    const auto at = text.find(" " + key + "=");
    if (at == std::string::npos) return std::string();
    const auto start = at + key.size() + 2;
    return text.substr(start, text.find(' ', start) - start);
  };
  const std::string state = field("JobState");
  if (state.empty()) return "";
  return state + " (Reason=" + field("Reason") + ", ExitCode=" + field("ExitCode") + ")";
}

// The latest job that ran `cell`, or null.
json JobOf(const json& jobs, size_t cell) {
  for (auto it = jobs.rbegin(); it != jobs.rend(); ++it) {
    for (const auto& c : (*it)["cells"])
      if (c.get<size_t>() == cell) return *it;
  }
  return json();
}

// The job script of one array: one task per cell, each running
// `trainbench run --cells N --resume` into its own folder.
std::string JobScript(const Engine& engine, const Experiment& e, const fs::path& config, const fs::path& out,
                      const SlurmOptions& options, int64_t gpus, const std::string& array) {
  const fs::path trainbench = InstallRoot() / TRAINBENCH_BINDIR / "trainbench";
  std::ostringstream script;
  script << "#!/bin/bash\n"
         << "# trainbench: cells " << array << " of " << config.string() << ", one per array task.\n"
         << "#SBATCH --job-name=" << Quote("trainbench-" + e.name) << "\n"
         << "#SBATCH --array=" << array << "\n"
         << "#SBATCH --output=" << Quote((out / "slurm" / "task-%a.out").string()) << "\n"
         << "#SBATCH --ntasks=1\n";
  if (gpus > 0) script << "#SBATCH --gres=gpu:" << gpus << "\n";
  if (!options.partition.empty()) script << "#SBATCH --partition=" << options.partition << "\n";
  if (!options.time_limit.empty()) script << "#SBATCH --time=" << options.time_limit << "\n";
  script << "export NCCL_NVLS_ENABLE=0\n"
         << "exec " << Quote(trainbench.string()) << " run " << Quote(config.string())
         << " --cells \"$SLURM_ARRAY_TASK_ID\" --out " << Quote((out / "tasks").string())
         << "/cell-\"$SLURM_ARRAY_TASK_ID\""
         // A resubmitted task runs in its earlier folder: resumed, never
         // written over.
         << " --resume";
  for (const auto& d : engine.plugin_dirs()) script << " --plugin-dir " << Quote(fs::absolute(d).string());
  if (engine.allow_insecure_plugins()) script << " --allow-insecure-plugins";
  if (!options.metrics_file_sd.empty()) {
    script << " --metrics-addr 0.0.0.0:0 --metrics-file-sd " << Quote(fs::absolute(options.metrics_file_sd).string());
  }
  if (!options.metrics_push_url.empty()) script << " --metrics-push " << Quote(options.metrics_push_url);
  script << "\n";
  return script.str();
}

// sbatch on `script_file`; the job's id (--parsable prints "JOBID" or
// "JOBID;CLUSTER", after any warnings). A refusal is one line.
std::string Sbatch(const fs::path& script_file, const SlurmOptions& options) {
  std::vector<std::string> argv = {"sbatch", "--parsable"};
  if (options.hold) argv.push_back("--hold");
  argv.insert(argv.end(), options.sbatch_args.begin(), options.sbatch_args.end());
  argv.push_back(script_file.string());
  const auto [code, text] = Capture(argv);
  if (code != 0) {
    std::string said = Trim(text).substr(0, 500);
    for (auto& c : said)
      if (c == '\n') c = ' ';  // one line
    throw EngineError("sbatch " + script_file.string() + " failed (exit " + std::to_string(code) + "): " + said +
                          (code == 127 ? " (is Slurm installed?)" : ""),
                      kExitError);
  }
  std::string last = Trim(text);
  last = last.substr(last.rfind('\n') == std::string::npos ? 0 : last.rfind('\n') + 1);
  return last.substr(0, last.find(';'));
}

}  // namespace

SlurmSubmission SlurmSubmit(const Engine& engine, const ExperimentPlan& plan, const fs::path& yaml_file,
                            const SlurmOptions& options) {
  const Experiment& e = plan.impl().experiment;
  if (options.out_dir.empty()) throw EngineError("SlurmOptions::out_dir is empty: say where results go", kExitConfig);
  const fs::path out = fs::absolute(options.out_dir);
  std::error_code ec;
  fs::create_directories(out / "slurm", ec);
  fs::create_directories(out / "tasks", ec);
  if (ec || ::access((out / "slurm").c_str(), W_OK) != 0) {
    throw EngineError(out.string() + ": output folder cannot be created or written", kExitError);
  }
  json jobs = ReadJobs(out);
  const auto queued = QueuedTasks(jobs);

  // Cells to submit, grouped by what they ask of a node: GPUs or none.
  SlurmSubmission submission;
  std::map<int64_t, std::vector<size_t>> by_gpus;
  const std::vector<PlannedCell> cells = e.Cells();
  for (size_t i = 0; i < cells.size(); ++i) {
    const std::optional<CellRecord> done = TaskCell(TaskResults(out, i), i);
    if (done && done->ok()) continue;
    const json job = JobOf(jobs, i);
    if (job.is_object() && queued.count(job.value("job_id", "") + "_" + std::to_string(i))) {
      submission.waiting.push_back(i);
      continue;
    }
    const PluginUse& device = cells[i].device;
    const int64_t gpus = device.device_indices.empty() ? 0 : device.ranks;
    by_gpus[gpus].push_back(i);
  }

  const fs::path config = fs::absolute(yaml_file);
  for (const auto& [gpus, group] : by_gpus) {
    std::string array;
    for (size_t c : group) array += (array.empty() ? "" : ",") + std::to_string(c);
    const fs::path script_file = out / "slurm" / fmt::format("job-{}-{}gpu.sh", jobs.size(), gpus);
    WriteFileAtomically(script_file, JobScript(engine, e, config, out, options, gpus, array));
    const std::string job_id = Sbatch(script_file, options);
    jobs.push_back({{"job_id", job_id},
                    {"cells", group},
                    {"gpus", gpus},
                    {"script", script_file.string()},
                    {"config", config.string()}});
    WriteFileAtomically(out / "slurm" / "jobs.json", jobs.dump(2) + "\n");
    spdlog::info("submitted job {}: cells {}{}", job_id, array, gpus > 0 ? fmt::format(" ({} GPU(s) each)", gpus) : "");
    submission.job_ids.push_back(job_id);
    submission.cells.insert(submission.cells.end(), group.begin(), group.end());
  }
  return submission;
}

void SlurmWait(const fs::path& out_dir, double poll_seconds) {
  const json jobs = ReadJobs(fs::absolute(out_dir));
  RunStop stop;  // a signal ends the wait
  const LiveRun live(stop);
  while (!QueuedTasks(jobs).empty() && stop.signal() == 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(poll_seconds));
  }
}

namespace {

// A cell whose task left no finished record: not submitted, queued or
// running in Slurm, or ended without a result (with what slurmctld says).
CellRecord Unfinished(const PlannedCell& planned, const std::optional<CellRecord>& found, const std::string& job_id,
                      size_t i, const std::map<std::string, std::pair<std::string, std::string>>& queued,
                      const fs::path& out) {
  const std::string previous_reason = found ? found->reason.value_or("") : "";
  const std::string task = job_id + "_" + std::to_string(i);
  CellRecord cell = PlannedRecord(planned);
  if (job_id.empty()) {
    cell.status = "pending";
    cell.reason = "not submitted yet (trainbench slurm submit)";
  } else if (auto q = queued.find(task); q != queued.end()) {
    cell.status = q->second.first == "RUNNING" ? "running" : "pending";
    cell.reason = "Slurm " + task + ": " + q->second.first + " (" + q->second.second + ")";
  } else {
    const std::string state = SlurmState(job_id, i);
    cell.status = "failed";
    cell.reason = "Slurm task " + task + " ended without a result: " +
                  (state.empty() ? "no longer known to slurmctld (cancelled before it started, or purged "
                                   "after MinJobAge)"
                                 : state) +
                  (previous_reason.empty() ? "" : "; " + previous_reason) + "; see " +
                  (out / "slurm" / fmt::format("task-{}.out", i)).string();
  }
  return cell;
}

}  // namespace

SlurmGathered SlurmGather(const ExperimentPlan& plan, const fs::path& out_dir) {
  const Experiment& e = plan.impl().experiment;
  const fs::path out = fs::absolute(out_dir);
  const json jobs = ReadJobs(out);
  const auto queued = QueuedTasks(jobs);
  const std::vector<PlannedCell> cells = e.Cells();

  // Each task's results, read once; the system block is the first task's.
  std::vector<json> docs;
  json system;
  for (size_t i = 0; i < cells.size(); ++i) {
    docs.push_back(TaskResults(out, i));
    if (system.is_null() && docs.back().is_object() && docs.back().contains("system")) system = docs.back()["system"];
  }
  Results results(out, e.ToJson(), system.is_null() ? json::object() : system, e.measurement.baseline);
  SlurmGathered gathered;
  for (size_t i = 0; i < cells.size(); ++i) {
    std::optional<CellRecord> found = TaskCell(docs[i], i);
    const json job = JobOf(jobs, i);
    const std::string job_id = job.is_object() ? job.value("job_id", "") : "";
    const std::string task = job_id + "_" + std::to_string(i);
    const std::string status = found ? found->status : "";
    CellRecord cell = found.value_or(CellRecord{});
    if (!found || status == "pending" || status == "interrupted" || status.empty()) {
      cell = Unfinished(cells[i], found, job_id, i, queued, out);
      if (!job_id.empty() && queued.count(task) != 0) ++gathered.queued;
    }
    if (!job_id.empty()) {
      // Beside what the task recorded of its job (the GPUs it was given).
      json slurm = cell.slurm.is_object() ? cell.slurm : json::object();
      slurm["job_id"] = job_id;
      slurm["array_task_id"] = i;
      cell.slurm = slurm;
    }
    cell.index = static_cast<int64_t>(i);
    if (cell.ok()) ++gathered.done;
    if (cell.status == "failed") ++gathered.failed;
    results.cells().push_back(cell);
  }
  results.ComputeSpeedups();
  results.Write();
  gathered.summary.results = results.doc();
  gathered.summary.table = results.Table();
  gathered.summary.results_json = out / "results.json";
  gathered.summary.exit_code = gathered.failed > 0 ? kExitCellsFailed : kExitOk;
  for (const auto& cell : results.cells()) gathered.summary.cells.push_back(ToCellResult(cell));
  return gathered;
}

}  // namespace trainbench

#pragma once
// trainbench/engine.h: the trainbench engine as a library.
//
// The `trainbench` command is one user of this API; any program can be
// another (examples/embed_engine). The engine never loads LibTorch into the
// calling process: it describes plugins and trains each cell in a
// `trainbench-worker` process it starts, and reports back through events.
//
//   trainbench::Engine engine;                      // finds the installed plugins
//   auto plan = engine.Load("configs/quickstart.yaml");
//   // or: engine.Build(trainbench::ExperimentBuilder("mine").Model("simple_cnn").Device("cpu"))
//   auto summary = engine.Run(plan, {.out_dir = "results/mine"},
//                             [](const trainbench::RunEvent& e) { ... });
//   for (const auto& cell : summary.cells) ... cell.samples_per_second ...
//
// Errors are exceptions of type trainbench::EngineError whose what() is one
// line naming the file, key or plugin and what to do. Results are written to
// RunOptions::out_dir after every cell (results.json, results.csv, logs/).
// Logging goes through spdlog's default logger (set its level or sink to
// quiet or redirect it). Thread safety: one Engine may run several
// experiments at once from several threads (each Run its own out_dir, with
// RunOptions::concurrent, since the machine lock admits one at a time); a
// RunStop stops one run, Engine::RequestStop every run; both may be called
// from any thread or a signal handler.
//
// API version: kEngineApiVersion below; additions bump the minor, changes
// that break callers bump the major (see docs/embedding.md).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainbench/engine_export.h"
#include "trainbench/exit_code.h"
#include "trainbench/run_stop.h"

namespace trainbench {

inline constexpr int kEngineApiVersionMajor = 1;
inline constexpr int kEngineApiVersionMinor = 5;

/// The version of the engine library ("0.1.0") and the git commit it was built from.
TRAINBENCH_ENGINE_API std::string EngineVersion();
TRAINBENCH_ENGINE_API std::string EngineGitCommit();
/// The build fingerprint plugins must match, as the installation's worker
/// reports it ("gnu/libstdc++/cxx11=1/torch-1.13.1/cuda-none"; the compiler
/// is shown, not compared), or "unknown (why)". Starts a worker. (API 1.1)
TRAINBENCH_ENGINE_API std::string WorkerFingerprint();
/// The engine's log, on stderr: "text" (timestamped lines, colours on a
/// terminal) or "json" (one JSON object per line: time, level, event,
/// message, and where they apply experiment, cell, model, device, epoch,
/// step, loss, samples_per_second, eta_seconds, run_eta_seconds, status).
/// Throws std::invalid_argument for another format. (API 1.2)
TRAINBENCH_ENGINE_API void SetUpLogging(const std::string& format);
/// Logs one line at error level (event "error"), as SetUpLogging set the
/// log up: how a program embedding the engine reports an EngineError in the
/// log's own format. (API 1.2)
TRAINBENCH_ENGINE_API void LogError(const std::string& message, int exit_code);
/// The experiment configuration reference (Markdown), generated from the
/// settings' declarations: docs/config-reference.md. (API 1.1)
TRAINBENCH_ENGINE_API std::string ConfigReference();

/// Everything the engine refuses. what() is one line; exit_code() is what
/// `trainbench` exits with for it (kExitConfig for bad input, kExitError
/// for an environment problem such as an unwritable folder).
class TRAINBENCH_ENGINE_API EngineError : public std::runtime_error {
 public:
  EngineError(const std::string& message, int exit_code) : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const noexcept { return exit_code_; }

 private:
  int exit_code_;
};

/// A plugin file found on the search path: loaded, or rejected with why.
struct PluginRecord {
  std::string path;
  std::string sha256;
  bool loaded = false;
  std::string reason;                                              ///< why rejected or shadowed (when !loaded)
  std::string name, kind, version, abi, fingerprint, description;  ///< when loaded
  nlohmann::json params;          ///< the option schema: [{name, type, default, doc, ...}]
  std::optional<bool> available;  ///< device plugins: usable on this machine
  std::string unavailable_reason;
  /// Device plugins: {accelerator, index_option, graph_option}, as the plugin
  /// describes itself (SDK ABI 1.2; older ones are host devices). (API 1.1)
  nlohmann::json device;
};

struct EngineOptions {
  /// Searched first, then TRAINBENCH_PLUGIN_PATH, then the installation's
  /// own plugin folder (found from where this library lives).
  std::vector<std::filesystem::path> plugin_dirs;
  /// Load plugins that users other than their owner can modify (refused by default).
  bool allow_insecure_plugins = false;
};

/// Builds an experiment in code. The result goes through exactly the checks
/// a YAML file does; the keys are those of the YAML format (docs/architecture.md
/// and configs/quickstart.yaml), so Set() reaches everything.
class TRAINBENCH_ENGINE_API ExperimentBuilder {
 public:
  explicit ExperimentBuilder(std::string name);
  ExperimentBuilder& Seed(unsigned long long seed);
  /// CIFAR-10 binary files in `folder`; sizes limit the images used.
  ExperimentBuilder& Cifar10(const std::filesystem::path& folder, std::optional<long long> train_size = {},
                             std::optional<long long> test_size = {});
  /// Random CIFAR-shaped images (throughput only).
  ExperimentBuilder& Synthetic(long long train_size, long long test_size);
  ExperimentBuilder& Model(const std::string& plugin, const nlohmann::json& options = nlohmann::json::object(),
                           const std::string& label = "");
  ExperimentBuilder& Device(const std::string& plugin, const nlohmann::json& options = nlohmann::json::object(),
                            const std::string& label = "");
  ExperimentBuilder& Epochs(long long epochs);
  ExperimentBuilder& BatchSize(long long batch_size);
  ExperimentBuilder& WarmupSteps(long long steps);
  ExperimentBuilder& MaxSteps(long long steps);
  ExperimentBuilder& TimeBudgetSeconds(double seconds);
  /// Any key, as a JSON pointer into the YAML structure: Set("/training/optimizer/lr", 0.05).
  ExperimentBuilder& Set(const std::string& json_pointer, const nlohmann::json& value);
  /// The experiment document as built so far (the YAML format, as JSON).
  const nlohmann::json& document() const { return doc_; }

 private:
  nlohmann::json doc_;
};

/// A validated experiment with its plugins resolved: ready to run.
class TRAINBENCH_ENGINE_API ExperimentPlan {
 public:
  std::string name() const;
  std::string file() const;  ///< the YAML file, or "<code: NAME>"
  /// Cells in run order, as "model on device" labels.
  std::vector<std::string> cells() const;
  /// Notes such as "cells on 'cuda' will be skipped: ..." (missing optional plugins).
  std::vector<std::string> notes() const;
  /// The resolved experiment, as recorded in results.json.
  nlohmann::json ToJson() const;

  struct Impl;
  explicit ExperimentPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  const Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<const Impl> impl_;
};

struct RunOptions {
  std::filesystem::path out_dir;  ///< required: results.json, results.csv, logs/
  /// Keep cells that finished with the same configuration in an earlier run
  /// into out_dir; run the rest.
  bool resume = false;
  /// Serve Prometheus metrics on HOST:PORT (PORT alone: loopback); empty:
  /// the experiment's metrics.address, or off.
  std::string metrics_address;
  std::string metrics_push_url;  ///< push final metrics to this Pushgateway
  std::optional<double> metrics_linger_seconds;
  std::string metrics_username;       ///< basic authentication for /metrics
  std::string metrics_password_file;  ///< its password: first line of this file
  std::string metrics_tls_cert_file;  ///< serve /metrics over HTTPS with this PEM certificate (chain)
  std::string metrics_tls_key_file;   ///< and this PEM private key
  /// While serving metrics, write a Prometheus file_sd target file for this
  /// run into this folder (removed at the end); with port 0 in the address,
  /// a free port is chosen. How Slurm tasks are found (docs/slurm.md).
  std::filesystem::path metrics_file_sd;
  /// Run only these cells (indices in run order, model-major); the others
  /// are recorded as skipped. Empty: all.
  std::vector<std::size_t> cells;
  /// Run beside other trainbench runs on this machine. By default a run
  /// waits for the machine-wide benchmark lock (two benchmarks at once skew
  /// each other's timings), except inside a Slurm job, where Slurm decides
  /// what shares a node. (API 1.1)
  bool concurrent = false;
  /// Diagnostics (API 1.3): each cell records this many timed steps through
  /// LibTorch's profiler into out_dir/diagnostics/kernel-trace-cellN.json (0:
  /// none; the traced steps run slower), and writes its captured step
  /// (cuda_graph) as Graphviz, graph-cellN-K.dot. Recorded in each cell's
  /// configuration.
  int64_t kernel_trace_steps = 0;
  bool graph_dump = false;
  /// Stops this run alone (API 1.5); null: only Engine::RequestStop and the
  /// signal handlers stop it. Must outlive the Run call.
  RunStop* stop = nullptr;
};

/// One thing that happened during a run.
struct RunEvent {
  enum class Type {
    kRunStarted,    ///< data: {experiment, cells}
    kCellStarted,   ///< cell: model, device, index
    kWorker,        ///< data: a worker event; data["event"] is "started", "progress",
                    ///< "epoch", "result", "error", "skipped" or "interrupted"
    kCellFinished,  ///< cell: the finished cell as in results.json
    kRunFinished,   ///< data: the whole results.json document
  };
  Type type;
  std::size_t cell_index = 0;
  nlohmann::json cell;  ///< the cell as recorded so far
  nlohmann::json data;
};
using EventCallback = std::function<void(const RunEvent&)>;

/// One cell's outcome (the main fields; `record` holds all of results.json's).
struct CellResult {
  std::string model, device;
  std::string status;  ///< ok, failed, skipped, interrupted
  std::string reason;  ///< why, when not ok
  double samples_per_second = 0;
  double median_epoch_seconds = 0;
  std::optional<double> test_accuracy;  ///< last epoch's, 0-1
  std::optional<double> speedup;        ///< against the baseline device
  bool projected = false;               ///< epoch times projected from a budget
  long long params = 0;
  nlohmann::json record;
};

struct RunSummary {
  int exit_code = kExitOk;  ///< as `trainbench run` would exit
  std::filesystem::path results_json;
  std::vector<CellResult> cells;
  std::string table;       ///< the closing table `trainbench run` prints
  nlohmann::json results;  ///< the whole results.json document
};

class TRAINBENCH_ENGINE_API Engine {
 public:
  /// Finds plugins and describes each in a worker process (a plugin that
  /// crashes or hangs while loading is listed as rejected, not fatal).
  explicit Engine(EngineOptions options = {});
  ~Engine();
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;

  const std::vector<PluginRecord>& plugins() const;
  const std::vector<std::filesystem::path>& search_path() const;
  /// Why a known optional plugin ("cuda") is absent, or "" when it is here.
  std::string MissingPluginNote(const std::string& name) const;
  /// The notes of every plugin this build leaves out on purpose that is not
  /// found either (API 1.1).
  std::vector<std::string> MissingPluginNotes() const;

  /// Reads and validates a YAML experiment; throws EngineError (kExitConfig).
  ExperimentPlan Load(const std::filesystem::path& yaml_file) const;
  /// The same from text; `name` stands for the file in messages.
  ExperimentPlan Parse(const std::string& yaml_text, const std::string& name = "<text>",
                       const std::filesystem::path& base_dir = ".") const;
  ExperimentPlan Build(const ExperimentBuilder& builder) const;

  /// Runs every cell, each in a fresh worker, writing results after each
  /// one. Blocks. Throws EngineError before training for an unusable
  /// out_dir or metrics address; afterwards failures are cells' statuses.
  RunSummary Run(const ExperimentPlan& plan, const RunOptions& options, const EventCallback& on_event = {}) const;

  /// Asks every run of this process to stop, as RunStop::Request does for
  /// one; with none running, the next run to start stops at once. Safe from
  /// a signal handler or any thread. `signal` is reported in the reason and
  /// exit code (128 + signal).
  static void RequestStop(int signal) noexcept;
  /// Installs SIGINT/SIGTERM/SIGHUP handlers that call RequestStop (what the CLI does).
  static void InstallSignalHandlers();

  /// The folders given in EngineOptions::plugin_dirs (for tasks started elsewhere).
  const std::vector<std::filesystem::path>& plugin_dirs() const;
  bool allow_insecure_plugins() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Slurm: an experiment as job arrays, one cell per array task, and the
/// tasks' results gathered into one results.json (docs/slurm.md).
struct SlurmOptions {
  std::filesystem::path out_dir;         ///< tasks write out_dir/tasks/cell-N/; gathered results in out_dir
  std::string partition;                 ///< sbatch --partition; empty: the cluster's default
  std::string time_limit;                ///< sbatch --time ("02:00:00"); empty: the partition's
  std::vector<std::string> sbatch_args;  ///< more sbatch options, as they are
  bool hold = false;                     ///< submit held (start with scontrol release)
  /// Each task serves /metrics on a free port and writes a file_sd target there.
  std::filesystem::path metrics_file_sd;
  std::string metrics_push_url;  ///< each task pushes its final metrics here
};

struct SlurmSubmission {
  std::vector<std::string> job_ids;  ///< one array job per resource shape (CPU, N GPUs)
  std::vector<std::size_t> cells;    ///< cells submitted: those without a finished result
  std::vector<std::size_t> waiting;  ///< cells left alone: still queued or running
};

struct SlurmGathered {
  std::size_t done = 0, failed = 0, queued = 0;  ///< ok; failed or cancelled; pending or running
  RunSummary summary;                            ///< results.json in out_dir, speedups across tasks
};

/// Writes one sbatch script per resource shape under out_dir/slurm/ and
/// submits them (sbatch --parsable), skipping cells that already finished
/// (ok) or are queued. The tasks run `trainbench run yaml_file --cells N`
/// with this engine's plugin folders. Throws EngineError when sbatch fails.
TRAINBENCH_ENGINE_API SlurmSubmission SlurmSubmit(const Engine& engine, const ExperimentPlan& plan,
                                                  const std::filesystem::path& yaml_file, const SlurmOptions& options);
/// Gathers the tasks' results into out_dir/results.json; a cell whose task
/// ended without a result (failed, cancelled, timed out) is failed with
/// Slurm's state and reason; queued ones are listed as pending/running.
TRAINBENCH_ENGINE_API SlurmGathered SlurmGather(const ExperimentPlan& plan, const std::filesystem::path& out_dir);
/// Waits until none of the experiment's jobs in out_dir is queued or running.
TRAINBENCH_ENGINE_API void SlurmWait(const std::filesystem::path& out_dir, double poll_seconds = 2.0);

/// Reports over results.json files, as `trainbench report` prints them.
enum class ReportFormat { kMarkdown, kCsv };
TRAINBENCH_ENGINE_API std::string Report(const std::vector<std::filesystem::path>& results_files,
                                         ReportFormat format = ReportFormat::kMarkdown);
/// Draws speedup against model size and throughput per cell to a .png or
/// .svg with gnuplot; throws EngineError naming the package when it is missing.
TRAINBENCH_ENGINE_API void PlotReport(const std::vector<std::filesystem::path>& results_files,
                                      const std::filesystem::path& output);

/// What `trainbench data fetch` is asked (API 1.4).
struct DatasetFetch {
  std::filesystem::path dir;   ///< the data folder; empty: DefaultDataFolder()
  std::string url;             ///< empty: the dataset's official address
  std::filesystem::path from;  ///< an archive or a folder on disk instead of a download
  bool force = false;          ///< install again over a folder that verifies
};

/// Where a dataset is and whether it verifies (API 1.4).
struct DatasetStatus {
  std::string dataset;           ///< "cifar10"
  std::filesystem::path folder;  ///< where configs find it
  std::string state;             ///< "verified", "missing", "unverified" or "damaged"
  std::string release;           ///< the pinned release it matches, when verified
  std::string detail;            ///< one line for people
};

/// Called while a fetch works: the stage ("download", "unpack", "copy"),
/// bytes done and the total (0 when unknown). Called on the fetching thread.
using DatasetProgress = std::function<void(const std::string& stage, std::uint64_t done, std::uint64_t total)>;

/// The folder datasets are fetched into and found in by default:
/// $XDG_DATA_HOME/trainbench, else ~/.local/share/trainbench; empty when
/// neither XDG_DATA_HOME nor HOME is an absolute path. (API 1.4)
TRAINBENCH_ENGINE_API std::filesystem::path DefaultDataFolder();
/// Downloads (or takes from request.from), verifies against the pinned
/// checksums and installs a dataset ("cifar10") atomically. Without a
/// progress callback, progress is logged (event "data_progress"). Throws
/// EngineError with one line naming the file that failed; nothing is left
/// where configs look. Blocks; one fetch per data folder at a time. (API 1.4)
TRAINBENCH_ENGINE_API DatasetStatus FetchDataset(const std::string& dataset, const DatasetFetch& request,
                                                 const DatasetProgress& progress = {});
/// The datasets in `dir` (empty: DefaultDataFolder()) and in TRAINBENCH_DATA
/// when set, each checked file by file. (API 1.4)
TRAINBENCH_ENGINE_API std::vector<DatasetStatus> ListDatasets(const std::filesystem::path& dir);

}  // namespace trainbench

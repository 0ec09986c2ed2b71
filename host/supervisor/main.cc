// trainbench: the command-line front end of the engine library
// (include/trainbench/engine.h). Reads experiments, lists plugins, runs
// cells (each in a fresh trainbench-worker process), writes results, serves
// live metrics and compares runs. It never loads LibTorch itself.

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "cifar10_release.h"
#include "plugin_caches.h"
#include "plugin_listing.h"
#include "trainbench/engine.h"
#include "trainbench/sdk/cache.h"

namespace fs = std::filesystem;
using namespace trainbench;
using trainbench::data::kCifar10Url;

namespace {

std::string DefaultOutDir(const std::string& name) {
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  return "results/" + name + "-" + stamp;
}

// An error that ends the command: one line on stderr, "error: ..." or, with
// --log-format json, a JSON line (event "error", its exit code); the exit code.
int Fail(const std::string& log_format, const std::string& message, int exit_code) {
  if (log_format == "json")
    LogError(message, exit_code);
  else
    std::fprintf(stderr, "error: %s\n", message.c_str());
  return exit_code;
}

// `trainbench cache`: the per-machine autotuning caches the CUDA plugins keep
// (cuDNN's engine choices), listed, or removed with --clear.
int CacheCommand(fs::path dir, bool clear, const std::string& log_format) {
  if (dir.empty()) dir = sdk::CacheDirectory();
  if (dir.empty()) {
    return Fail(log_format,
                "no cache folder: neither XDG_CACHE_HOME nor HOME is an absolute path; name the folder with --dir",
                kExitConfig);
  }
  if (clear) {
    std::vector<std::string> errors;
    const std::size_t removed = ClearPluginCaches(dir, &errors);
    std::printf("removed %zu plugin cache file(s) from %s: the next run on this machine times every choice again\n",
                removed, dir.c_str());
    for (const auto& f : ListPluginCaches(dir)) {
      const std::string why = f.problem.rfind("is ", 0) == 0 ? f.problem.substr(3) : f.problem;
      std::printf("  left alone: %s (%s: not a plugin cache, or one no run can use; remove it yourself if it is)\n",
                  f.file.filename().c_str(), why.c_str());
    }
    for (const std::string& error : errors) spdlog::error("not removed: {}", error);
    return errors.empty() ? kExitOk : kExitError;
  }
  const std::vector<PluginCacheFile> files = ListPluginCaches(dir);
  if (files.empty()) {
    std::printf("no plugin caches in %s\n", dir.c_str());
    return kExitOk;
  }
  std::printf(
      "plugin caches in %s (per-machine choices such as autotuned cuDNN engines; `trainbench cache --clear` "
      "removes them):\n",
      dir.c_str());
  for (const auto& f : files) {
    const std::string name = f.file.filename().string();
    if (!f.problem.empty()) {
      std::printf("  %s: unusable: it %s (the plugin rebuilds it)\n", name.c_str(), f.problem.c_str());
      continue;
    }
    std::string machine;
    for (const auto& [key, value] : f.machine) machine += (machine.empty() ? "" : ", ") + key + " " + value;
    std::printf("  %s: %zu entr%s, %.1f KiB%s; %s\n", name.c_str(), f.entries, f.entries == 1 ? "y" : "ies",
                static_cast<double>(f.bytes) / 1024.0, f.format.empty() ? "" : (" (" + f.format + ")").c_str(),
                machine.c_str());
  }
  return kExitOk;
}

// `trainbench data fetch`: progress on a terminal as one line redrawn,
// else as log lines (JSON with --log-format json).
int DataFetchCommand(const std::string& dataset, const fs::path& dir, DatasetFetch request,
                     const std::string& log_format) {
  request.dir = dir;
  DatasetProgress progress;
  if (log_format == "text" && isatty(STDERR_FILENO)) {
    progress = [](const std::string& stage, std::uint64_t done, std::uint64_t total) {
      if (total > 0)
        std::fprintf(stderr, "\r%-8s %5.1f%%  %7.1f of %.1f MiB ", stage.c_str(), 100.0 * done / total,
                     done / 1048576.0, total / 1048576.0);
      else
        std::fprintf(stderr, "\r%-8s %7.1f MiB ", stage.c_str(), done / 1048576.0);
    };
  }
  const DatasetStatus status = FetchDataset(dataset, request, progress);
  if (progress) std::fprintf(stderr, "\n");
  std::printf("%s: %s\n  %s\n", dataset.c_str(), status.folder.c_str(), status.detail.c_str());
  if (status.folder.parent_path() != DefaultDataFolder() && std::getenv("TRAINBENCH_DATA") == nullptr)
    std::printf("  configs find it with dataset.path: %s, or TRAINBENCH_DATA=%s\n", status.folder.c_str(),
                status.folder.c_str());
  return status.state == "verified" ? kExitOk : kExitError;
}

// `trainbench data list`: each dataset's folder and whether it verifies.
int DataListCommand(const fs::path& dir) {
  const std::vector<DatasetStatus> all = ListDatasets(dir);
  if (all.empty()) {
    std::printf("no data folder: neither XDG_DATA_HOME nor HOME is an absolute path; name one with --dir\n");
    return kExitConfig;
  }
  bool ok = true;
  for (const auto& d : all) {
    std::printf("%-8s %-10s %s\n         %s\n", d.dataset.c_str(), d.state.c_str(), d.folder.c_str(), d.detail.c_str());
    if (d.state == "missing") std::printf("         fetch it with: trainbench data fetch %s\n", d.dataset.c_str());
    if (d.state == "damaged")
      std::printf("         fetch it again with: trainbench data fetch %s --force\n", d.dataset.c_str());
    ok = ok && d.state == "verified";
  }
  return ok ? kExitOk : kExitError;
}

// "--log-format json" or "--log-format=json" among the arguments.
bool WantsJsonLog(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--log-format=json" || (arg == "--log-format" && i + 1 < argc && std::string(argv[i + 1]) == "json"))
      return true;
  }
  return false;
}

// What every command reads: the log format and where plugins come from.
struct Globals {
  std::string log_format = "text";
  EngineOptions engine;
};

void AddPluginDirOptions(CLI::App* cmd, EngineOptions& engine) {
  cmd->add_option("--plugin-dir", engine.plugin_dirs, "folder to search for plugins first (repeatable)");
  cmd->add_flag("--allow-insecure-plugins", engine.allow_insecure_plugins,
                "load plugins from files or folders that others can modify (refused by default)");
}

// Each command: its options, filled by the parse, and what it does. A
// command's Add declares it on the app; main runs the one that was parsed.

struct RunCommand {
  std::string config;
  RunOptions options;
  double metrics_linger = -1;
  bool kernel_trace = false;
  int64_t kernel_trace_steps = 10;

  CLI::App* Add(CLI::App& app, Globals& g) {
    auto* run = app.add_subcommand("run", "run an experiment");
    run->add_option("config", config, "experiment YAML file")->required();
    run->add_option("--out", options.out_dir, "output folder for results.json, results.csv and logs");
    run->add_flag("--resume", options.resume,
                  "keep the cells that finished in an earlier run into --out; run the rest");
    run->add_flag("--concurrent", options.concurrent,
                  "run beside other trainbench runs on this machine (by default a run waits for the machine's "
                  "benchmark lock, as two benchmarks at once skew each other's timings)");
    AddPluginDirOptions(run, g.engine);
    AddMetricsOptions(run);
    run->add_option("--cells", options.cells, "run only these cells (indices in run order, comma-separated)")
        ->delimiter(',');
    run->add_flag("--kernel-trace", kernel_trace,
                  "diagnostic: record timed steps of each cell through LibTorch's profiler into "
                  "OUT/diagnostics/kernel-trace-cellN.json (the traced steps run slower; recorded in the cell's "
                  "config)");
    run->add_option("--kernel-trace-steps", kernel_trace_steps, "steps --kernel-trace records (default 10)")
        ->check(CLI::Range(int64_t{1}, int64_t{100000}));
    run->add_flag("--graph-dump", options.graph_dump,
                  "diagnostic: write each cell's captured step (training.cuda_graph) as Graphviz into "
                  "OUT/diagnostics/graph-cellN-K.dot");
    return run;
  }

  void AddMetricsOptions(CLI::App* run) {
    run->add_option("--metrics-addr", options.metrics_address,
                    "serve Prometheus metrics on HOST:PORT (PORT alone: loopback); overrides metrics.address");
    run->add_option("--metrics-linger", metrics_linger,
                    "keep serving metrics this many seconds after the run; overrides metrics.linger_seconds");
    run->add_option("--metrics-push", options.metrics_push_url,
                    "push final metrics to this Pushgateway (http://HOST:PORT)");
    run->add_option("--metrics-user", options.metrics_username,
                    "require HTTP basic authentication with this user for /metrics");
    run->add_option("--metrics-password-file", options.metrics_password_file,
                    "file whose first line is the basic-authentication password");
    run->add_option("--metrics-tls-cert", options.metrics_tls_cert_file,
                    "serve /metrics over HTTPS with this PEM certificate (chain)");
    run->add_option("--metrics-tls-key", options.metrics_tls_key_file, "the certificate's PEM private key");
    run->add_option("--metrics-file-sd", options.metrics_file_sd,
                    "while serving metrics, write a Prometheus file_sd target file into this folder");
  }

  int Run(const Globals& g) {
    if (metrics_linger >= 0) options.metrics_linger_seconds = metrics_linger;
    if (kernel_trace) options.kernel_trace_steps = kernel_trace_steps;
    const Engine engine(g.engine);
    const ExperimentPlan plan = engine.Load(config);
    if (options.out_dir.empty()) {
      if (options.resume)
        return Fail(g.log_format, "--resume needs --out (the folder of the run to resume)", kExitConfig);
      options.out_dir = DefaultOutDir(plan.name());
    }
    Engine::InstallSignalHandlers();
    const RunSummary summary = engine.Run(plan, options);
    std::printf("\n%sresults: %s\n", summary.table.c_str(), summary.results_json.c_str());
    return summary.exit_code;
  }
};

struct SlurmCommand {
  std::string config;
  SlurmOptions options;
  bool wait = false;
  CLI::App* submit = nullptr;

  CLI::App* Add(CLI::App& app, Globals& g) {
    auto* slurm = app.add_subcommand("slurm", "run an experiment as Slurm job arrays, one cell per task");
    slurm->require_subcommand(1);
    submit = slurm->add_subcommand("submit", "submit the cells that have no finished result yet");
    auto* gather = slurm->add_subcommand("gather", "gather the tasks' results into OUT/results.json");
    for (auto* cmd : {submit, gather}) {
      cmd->add_option("config", config, "experiment YAML file")->required();
      cmd->add_option("--out", options.out_dir, "output folder shared by the tasks (on a shared file system)")
          ->required();
      cmd->add_flag("--wait", wait, "wait until the experiment's tasks have left the queue, then gather");
      AddPluginDirOptions(cmd, g.engine);
    }
    submit->add_option("--partition", options.partition, "Slurm partition");
    submit->add_option("--time", options.time_limit, "time limit per task (sbatch --time)");
    submit->add_option("--sbatch-arg", options.sbatch_args, "further sbatch option (repeatable)");
    submit->add_flag("--hold", options.hold, "submit held (release with scontrol release JOBID)");
    submit->add_option("--metrics-file-sd", options.metrics_file_sd,
                       "each task serves /metrics on a free port and writes a file_sd target into this folder");
    submit->add_option("--metrics-push", options.metrics_push_url,
                       "each task pushes its final metrics to this Pushgateway");
    return slurm;
  }

  int Run(const Globals& g) const {
    const Engine engine(g.engine);
    const ExperimentPlan plan = engine.Load(config);
    Engine::InstallSignalHandlers();
    if (submit->parsed()) {
      const SlurmSubmission s = SlurmSubmit(engine, plan, config, options);
      std::printf("submitted %zu cell(s) in %zu job(s)%s%s\n", s.cells.size(), s.job_ids.size(),
                  s.waiting.empty() ? "" : fmt::format("; {} still queued", s.waiting.size()).c_str(),
                  s.cells.empty() && s.waiting.empty() ? " (all cells had finished)" : "");
      if (!wait) return kExitOk;
    }
    if (wait) SlurmWait(options.out_dir);
    const SlurmGathered gathered = SlurmGather(plan, options.out_dir);
    std::printf("\n%sgathered: %zu ok, %zu failed, %zu queued; results: %s\n", gathered.summary.table.c_str(),
                gathered.done, gathered.failed, gathered.queued, gathered.summary.results_json.c_str());
    return gathered.summary.exit_code;
  }
};

struct ValidateCommand {
  std::string config;

  CLI::App* Add(CLI::App& app, Globals& g) {
    auto* validate = app.add_subcommand("validate", "check an experiment file without running it");
    validate->add_option("config", config, "experiment YAML file")->required();
    AddPluginDirOptions(validate, g.engine);
    return validate;
  }

  int Run(const Globals& g) const {
    const Engine engine(g.engine);
    const ExperimentPlan plan = engine.Load(config);
    const size_t cells = plan.cells().size();
    const nlohmann::json e = plan.ToJson();
    std::printf("%s: ok: %zu model(s) x %zu device(s) = %zu cell(s)\n", config.c_str(), e["models"].size(),
                e["devices"].size(), cells);
    for (const auto& note : plan.notes()) std::printf("  note: %s\n", note.c_str());
    return kExitOk;
  }
};

struct PluginsCommand {
  std::string format = "text";
  std::vector<std::string> names;

  CLI::App* Add(CLI::App& app, Globals& g) {
    auto* plugins = app.add_subcommand("plugins", "list plugins found, loaded or rejected with the reason");
    AddPluginDirOptions(plugins, g.engine);
    plugins
        ->add_option("--format", format,
                     "text (default), markdown (each plugin's options as a table, for documentation) or json")
        ->check(CLI::IsMember({"text", "markdown", "json"}));
    plugins->add_option("names", names, "only the plugins of these names (for documentation: docs/usage.md's tables)");
    return plugins;
  }

  int Run(const Globals& g) const {
    const Engine engine(g.engine);
    const std::string out = format == "markdown" ? PluginsMarkdown(engine, names)
                            : format == "json"   ? PluginsJson(engine, names) + "\n"
                                                 : PluginsText(engine, names);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return kExitOk;
  }
};

struct ConfigReferenceCommand {
  CLI::App* Add(CLI::App& app, Globals&) {
    return app.add_subcommand(
        "config-reference",
        "print every experiment setting with its type, default, range and documentation (Markdown)");
  }

  int Run(const Globals&) const {
    std::fputs(ConfigReference().c_str(), stdout);
    return kExitOk;
  }
};

struct ReportCommand {
  std::vector<fs::path> files;
  std::string format = "markdown";
  fs::path plot;

  CLI::App* Add(CLI::App& app, Globals&) {
    auto* report =
        app.add_subcommand("report", "compare results.json files (Markdown or CSV) and draw the study's figure");
    report->add_option("results", files, "results.json files (several: side by side)")->required();
    report->add_option("--format", format, "markdown or csv")->check(CLI::IsMember({"markdown", "csv"}));
    report->add_option("--plot", plot, "draw speedup vs model size and throughput to this .png or .svg (gnuplot)");
    return report;
  }

  int Run(const Globals&) const {
    std::fputs(Report(files, format == "csv" ? ReportFormat::kCsv : ReportFormat::kMarkdown).c_str(), stdout);
    if (!plot.empty()) {
      PlotReport(files, plot);
      spdlog::info("plot: {}", plot.string());
    }
    return kExitOk;
  }
};

struct CacheCommandArgs {
  fs::path dir;
  bool clear = false;

  CLI::App* Add(CLI::App& app, Globals&) {
    auto* cache = app.add_subcommand(
        "cache", "list the per-machine autotuning caches (cuDNN's engine choices for the ResNets), or clear them");
    cache->add_option("--dir", dir, "the cache folder (default: $XDG_CACHE_HOME/trainbench, else ~/.cache/trainbench)");
    cache->add_flag("--clear", clear, "remove them: the next run on this machine times every engine again");
    return cache;
  }

  int Run(const Globals& g) const { return CacheCommand(dir, clear, g.log_format); }
};

struct DataCommand {
  DatasetFetch request;
  std::string dataset;
  fs::path dir;
  CLI::App* fetch = nullptr;

  CLI::App* Add(CLI::App& app, Globals&) {
    auto* data = app.add_subcommand("data", "fetch datasets and check them (CIFAR-10)");
    data->require_subcommand(1);
    fetch = data->add_subcommand(
        "fetch", "download a dataset, verify it against its pinned checksums and install it where configs find it");
    fetch->add_option("dataset", dataset, "the dataset: cifar10")->required()->check(CLI::IsMember({"cifar10"}));
    for (auto* cmd : {fetch, data->add_subcommand("list", "say where each dataset is and whether it verifies")}) {
      cmd->add_option("--dir", dir,
                      "the data folder (default: $XDG_DATA_HOME/trainbench, else ~/.local/share/trainbench)");
    }
    fetch->add_option("--url", request.url, std::string("download from here (default: ") + kCifar10Url + ")");
    fetch->add_option(
        "--from", request.from,
        "install from cifar-10-binary.tar.gz or a folder of its files already on disk (offline machines)");
    fetch->add_flag("--force", request.force, "install again even where a verified copy is");
    return data;
  }

  int Run(const Globals& g) const {
    return fetch->parsed() ? DataFetchCommand(dataset, dir, request, g.log_format) : DataListCommand(dir);
  }
};

// A command-line mistake in JSON mode is a JSON line too. The option may not
// have been read yet when parsing stopped: look for it in argv.
int ParseError(const CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  if (e.get_exit_code() == 0 || !WantsJsonLog(argc, argv)) return app.exit(e);
  SetUpLogging("json");
  LogError(e.what(), e.get_exit_code());
  return e.get_exit_code();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"trainbench: how fast does deep-learning training run on this hardware, and why"};
  app.set_version_flag("--version", [] {
    return fmt::format("trainbench {} (git {})\nplugin fingerprint: {}", EngineVersion(), EngineGitCommit(),
                       WorkerFingerprint());
  });
  app.require_subcommand(1);
  app.fallthrough();  // global options may follow the subcommand
  Globals g;
  app.add_option("--log-format", g.log_format, "text (default) or json: one JSON object per log line")
      ->check(CLI::IsMember({"text", "json"}));
  RunCommand run;
  SlurmCommand slurm;
  ValidateCommand validate;
  ConfigReferenceCommand config_reference;
  PluginsCommand plugins;
  ReportCommand report;
  CacheCommandArgs cache;
  DataCommand data;
  const std::vector<std::pair<CLI::App*, std::function<int()>>> commands = {
      {run.Add(app, g), [&] { return run.Run(g); }},
      {slurm.Add(app, g), [&] { return slurm.Run(g); }},
      {validate.Add(app, g), [&] { return validate.Run(g); }},
      {config_reference.Add(app, g), [&] { return config_reference.Run(g); }},
      {plugins.Add(app, g), [&] { return plugins.Run(g); }},
      {report.Add(app, g), [&] { return report.Run(g); }},
      {cache.Add(app, g), [&] { return cache.Run(g); }},
      {data.Add(app, g), [&] { return data.Run(g); }},
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return ParseError(app, e, argc, argv);
  }
  SetUpLogging(g.log_format);  // CLI11 admitted only text or json
  try {
    for (const auto& [cmd, command] : commands)
      if (cmd->parsed()) return command();
    return kExitError;  // (require_subcommand(1) admits no other way)
  } catch (const EngineError& e) {
    return Fail(g.log_format, e.what(), e.exit_code());
  } catch (const std::exception& e) {
    return Fail(g.log_format, e.what(), kExitError);
  }
}

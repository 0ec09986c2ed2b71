// trainbench: the supervising host. Reads experiments, finds plugins, runs
// each cell in a fresh trainbench-worker process, writes results and serves
// live metrics. It never loads LibTorch itself.

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>

#include <CLI/CLI.hpp>
#include <unistd.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config_loader.h"
#include "logging.h"
#ifdef TRAINBENCH_WITH_PROMETHEUS
#include "metrics.h"
#endif
#include "plugin_catalog.h"
#include "report.h"
#include "runner.h"
#include "system_info.h"
#include "worker_client.h"

namespace fs = std::filesystem;
using namespace trainbench;

namespace {

void PrintPlugins(const PluginCatalog& catalog) {
  std::printf("search path:\n");
  for (const auto& d : catalog.search_path()) std::printf("  %s%s\n", d.c_str(), fs::is_directory(d) ? "" : "  (missing)");
  std::printf("\n");
  for (const auto& p : catalog.plugins()) {
    if (p.loaded) {
      const auto& d = p.descriptor;
      std::string availability;
      if (p.available.has_value()) {
        availability = *p.available ? "  [available]" : "  [unavailable: " + p.unavailable_reason + "]";
      }
      std::printf("%-7s %-12s %-8s %s%s\n        %s  (ABI %s, %s)\n", d.value("kind", "").c_str(),
                  d.value("name", "").c_str(), d.value("version", "").c_str(),
                  d.value("description", "").c_str(), availability.c_str(), p.path.c_str(),
                  d.value("abi", "").c_str(), d.value("fingerprint", "").c_str());
      for (const auto& param : d["params"]) {
        std::string extra;
        if (param.contains("choices")) extra = " {" + fmt::format("{}", fmt::join(param["choices"].get<std::vector<std::string>>(), ",")) + "}";
        if (param.contains("min")) extra += fmt::format(" [{}, {}]", param["min"].get<double>(), param["max"].get<double>());
        std::printf("          %-16s %-6s default %-10s %s%s\n", param.value("name", "").c_str(),
                    param.value("type", "").c_str(), param["default"].dump().c_str(),
                    param.value("doc", "").c_str(), extra.c_str());
      }
    } else {
      std::printf("REJECTED %s\n", p.reason.empty() ? p.path.c_str() : p.reason.c_str());
    }
  }
  for (const char* optional : {"cuda"}) {
    if (catalog.Find(optional) == nullptr) std::printf("\nnote: %s\n", KnownOptionalPluginReason(optional).c_str());
  }
}

std::string DefaultOutDir(const std::string& name) {
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  return "results/" + name + "-" + stamp;
}

// Loads, resolves and validates; on a user error prints one line and exits.
Experiment LoadAndResolve(const std::string& config, const PluginCatalog& catalog) {
  Experiment e = LoadExperiment(config);
  ResolvePlugins(e, catalog);
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"trainbench: how fast does deep-learning training run on this hardware, and why"};
  app.set_version_flag("--version", fmt::format("trainbench {} (git {})", TrainbenchVersion(), TrainbenchGitCommit()));
  app.require_subcommand(1);
  app.fallthrough();  // global options may follow the subcommand
  std::string log_format = "text";
  app.add_option("--log-format", log_format, "text (default) or json: one JSON object per log line")
      ->check(CLI::IsMember({"text", "json"}));

  std::vector<std::string> plugin_dirs;
  std::string config, out_dir;
  bool allow_insecure = false;
  auto add_plugin_dir = [&](CLI::App* cmd) {
    cmd->add_option("--plugin-dir", plugin_dirs, "folder to search for plugins first (repeatable)");
    cmd->add_flag("--allow-insecure-plugins", allow_insecure,
                  "load plugins from files or folders that others can modify (refused by default)");
  };
  auto* run = app.add_subcommand("run", "run an experiment");
  run->add_option("config", config, "experiment YAML file")->required();
  run->add_option("--out", out_dir, "output folder for results.json, results.csv and logs");
  bool resume = false;
  run->add_flag("--resume", resume, "keep the cells that finished in an earlier run into --out; run the rest");
  add_plugin_dir(run);
  std::string metrics_addr, metrics_push;
  double metrics_linger = -1;
  run->add_option("--metrics-addr", metrics_addr,
                  "serve Prometheus metrics on HOST:PORT (PORT alone: loopback); overrides metrics.address");
  run->add_option("--metrics-linger", metrics_linger,
                  "keep serving metrics this many seconds after the run; overrides metrics.linger_seconds");
  run->add_option("--metrics-push", metrics_push, "push final metrics to this Pushgateway (http://HOST:PORT)");
  std::string metrics_user, metrics_password_file;
  run->add_option("--metrics-user", metrics_user, "require HTTP basic authentication with this user for /metrics");
  run->add_option("--metrics-password-file", metrics_password_file,
                  "file whose first line is the basic-authentication password");
  auto* validate = app.add_subcommand("validate", "check an experiment file without running it");
  validate->add_option("config", config, "experiment YAML file")->required();
  add_plugin_dir(validate);
  auto* plugins = app.add_subcommand("plugins", "list plugins found, loaded or rejected with the reason");
  add_plugin_dir(plugins);
  std::vector<std::string> report_files;
  std::string report_format = "markdown", report_plot;
  auto* report = app.add_subcommand("report", "compare results.json files (Markdown or CSV) and draw the study's figure");
  report->add_option("results", report_files, "results.json files (several: side by side)")->required();
  report->add_option("--format", report_format, "markdown or csv")->check(CLI::IsMember({"markdown", "csv"}));
  report->add_option("--plot", report_plot, "draw speedup vs model size and throughput to this .png or .svg (gnuplot)");
  CLI11_PARSE(app, argc, argv);

  SetUpLogging(log_format);
  if (report->parsed()) {
    try {
      const auto runs = LoadResults(report_files);
      std::fputs((report_format == "csv" ? ReportCsv(runs) : ReportMarkdown(runs)).c_str(), stdout);
      if (!report_plot.empty()) {
        PlotReport(runs, report_plot);
        spdlog::info("plot: {}", report_plot);
      }
      return kExitOk;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return kExitError;
    }
  }
  try {
    const PluginCatalog catalog = PluginCatalog::Discover(PluginSearchPath(plugin_dirs), allow_insecure);
    if (plugins->parsed()) {
      PrintPlugins(catalog);
      return kExitOk;
    }
    Experiment experiment;
    try {
      experiment = LoadAndResolve(config, catalog);
    } catch (const ConfigError& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return kExitConfig;
    }
    if (validate->parsed()) {
      std::printf("%s: ok: %zu model(s) x %zu device(s) = %zu cell(s)\n", config.c_str(),
                  experiment.models.size(), experiment.devices.size(),
                  experiment.models.size() * experiment.devices.size());
      for (const auto& d : experiment.devices) {
        if (d.path.empty()) std::printf("  note: cells on '%s' will be skipped: %s\n", d.label.c_str(), d.missing_reason.c_str());
      }
      return kExitOk;
    }
    if (out_dir.empty()) {
      if (resume) {
        std::fprintf(stderr, "error: --resume needs --out (the folder of the run to resume)\n");
        return kExitConfig;
      }
      out_dir = DefaultOutDir(experiment.name);
    }
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec || ::access(out_dir.c_str(), W_OK) != 0) {
      std::fprintf(stderr, "error: %s: output folder cannot be created or written%s%s\n", out_dir.c_str(),
                   ec ? ": " : "", ec ? ec.message().c_str() : "");
      return kExitError;
    }
    // Metrics: bind before any training, so a taken port fails fast.
    if (!metrics_addr.empty()) experiment.metrics.address = metrics_addr;
    if (metrics_linger >= 0) experiment.metrics.linger_seconds = metrics_linger;
    if (!metrics_user.empty()) experiment.metrics.username = metrics_user;
    if (!metrics_password_file.empty()) experiment.metrics.password_file = metrics_password_file;
    if (!experiment.metrics.username.empty() && experiment.metrics.password_file.empty()) {
      std::fprintf(stderr, "error: --metrics-user needs --metrics-password-file (passwords are never given on the command line)\n");
      return kExitConfig;
    }
    std::vector<RunObserver*> observers;
#ifdef TRAINBENCH_WITH_PROMETHEUS
    std::unique_ptr<MetricsExporter> metrics;
    if (!experiment.metrics.address.empty() || !metrics_push.empty()) {
      MetricsOptions options{experiment.metrics.address,
                             experiment.metrics.linger_seconds, metrics_push, experiment.metrics.username,
                             experiment.metrics.password_file};
      try {
        metrics = std::make_unique<MetricsExporter>(options);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return kExitConfig;
      }
      observers.push_back(metrics.get());
      if (!metrics->address().empty()) {
        spdlog::info("metrics on http://{}/metrics{}", metrics->address(),
                     experiment.metrics.username.empty() ? "" : " (basic authentication)");
      }
    }
#else
    if (!experiment.metrics.address.empty() || !metrics_push.empty()) {
      std::fprintf(stderr, "error: this trainbench was built without metrics (TRAINBENCH_WITH_PROMETHEUS=OFF)\n");
      return kExitConfig;
    }
#endif
    nlohmann::json system = CollectSystemInfo();
    RunWorker({"info"}, "", "", [&](const nlohmann::json& event) {
      system["torch_version"] = event.value("torch_version", "");
      system["torch_cuda_version"] = event.value("cuda_version", "");
    });
    InstallSignalHandlers();
    spdlog::info("experiment '{}': {} cell(s), results in {}", experiment.name,
                 experiment.models.size() * experiment.devices.size(), out_dir);
    const int code = RunExperiment(experiment, out_dir, system, observers, resume);
#ifdef TRAINBENCH_WITH_PROMETHEUS
    if (metrics) metrics->Finish();
#endif
    return code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitError;
  }
}

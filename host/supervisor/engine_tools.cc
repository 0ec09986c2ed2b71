// The engine API's free functions: versions, the worker's fingerprint, the
// configuration reference, reports of results files.

#include "logging.h"
#include "report.h"
#include "settings_yaml.h"
#include "system_info.h"
#include "trainbench/engine.h"
#include "worker_client.h"

namespace trainbench {
namespace fs = std::filesystem;

std::string EngineVersion() { return TrainbenchVersion(); }
std::string EngineGitCommit() { return TrainbenchGitCommit(); }

void SetUpLogging(const std::string& format) { ConfigureLog(format); }

void LogError(const std::string& message, int exit_code) {
  LogWith(spdlog::level::err, {{"event", "error"}, {"exit_code", exit_code}}, "{}", message);
}

std::string ConfigReference() { return GenerateConfigReference(); }

std::string WorkerFingerprint() {
  std::string text;
  try {
    const WorkerExit exit = RunWorker(
        WorkerLaunch{{"info"}, "", "", {}},
        [&](const protocol::Event& event) {
          if (const auto* info = std::get_if<protocol::Info>(&event)) {
            text =
                info->compiler + "/" + info->cxx_abi + "/torch-" + info->torch_version + "/cuda-" + info->cuda_version;
          }
        },
        60);
    if (text.empty()) return "unknown (trainbench-worker info: " + exit.Describe() + ")";
  } catch (const std::exception& e) {
    return std::string("unknown (") + e.what() + ")";
  }
  return text;
}

// ---------------------------------------------------------------------------
// Reports

namespace {
std::vector<LoadedResults> LoadAll(const std::vector<fs::path>& files) {
  std::vector<std::string> names;
  for (const auto& f : files) names.push_back(f.string());
  try {
    return LoadResults(names);
  } catch (const std::exception& e) {
    throw EngineError(e.what(), kExitError);
  }
}
}  // namespace

std::string Report(const std::vector<fs::path>& files, ReportFormat format) {
  const auto runs = LoadAll(files);
  return format == ReportFormat::kCsv ? ReportCsv(runs) : ReportMarkdown(runs);
}

void PlotReport(const std::vector<fs::path>& files, const fs::path& output) {
  const auto runs = LoadAll(files);
  try {
    PlotReport(runs, output.string());
  } catch (const std::exception& e) {
    throw EngineError(e.what(), kExitError);
  }
}

}  // namespace trainbench

// The engine API's datasets: `trainbench data fetch` and `trainbench data list`.

#include <chrono>
#include <cstdlib>

#include "cifar10_release.h"
#include "cifar10_store.h"
#include "data_home.h"
#include "download.h"
#include "environment.h"
#include "logging.h"
#include "trainbench/engine.h"

namespace trainbench {
namespace fs = std::filesystem;

namespace {

const char* StateName(data::FolderCheck::State state) {
  switch (state) {
    case data::FolderCheck::State::kVerified:
      return "verified";
    case data::FolderCheck::State::kUnverified:
      return "unverified";
    case data::FolderCheck::State::kDamaged:
      return "damaged";
    case data::FolderCheck::State::kMissing:
      break;
  }
  return "missing";
}

DatasetStatus Status(const data::FolderCheck& check) {
  return {"cifar10", check.folder, StateName(check.state), check.release, check.detail};
}

// Progress as log lines (event "data_progress"): at most one per stage every
// 10% or 5 seconds, and the stage's end.
DatasetProgress LoggedProgress() {
  struct State {
    std::string stage;
    int tenth = -1;
    std::chrono::steady_clock::time_point last;
  };
  auto state = std::make_shared<State>();
  return [state](const std::string& stage, std::uint64_t done, std::uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    const int tenth = total > 0 ? static_cast<int>(done * 10 / total) : -1;
    if (stage == state->stage && tenth == state->tenth && now - state->last < std::chrono::seconds(5)) return;
    state->stage = stage;
    state->tenth = tenth;
    state->last = now;
    LogWith(spdlog::level::info,
            {{"event", "data_progress"}, {"stage", stage}, {"bytes", done}, {"total_bytes", total}},
            "{}: {:.1f} of {} MiB", stage, static_cast<double>(done) / (1 << 20),
            total > 0 ? fmt::format("{:.1f}", static_cast<double>(total) / (1 << 20)) : std::string("?"));
  };
}

void RequireCifar10(const std::string& dataset) {
  if (dataset != "cifar10")
    throw EngineError("data: unknown dataset '" + dataset + "': trainbench fetches cifar10", kExitConfig);
}

}  // namespace

fs::path DefaultDataFolder() { return data::DefaultDataHome(); }

DatasetStatus FetchDataset(const std::string& dataset, const DatasetFetch& request, const DatasetProgress& progress) {
  RequireCifar10(dataset);
  data::FetchRequest r;
  r.data_home = request.dir.empty() ? data::DefaultDataHome() : request.dir;
  r.url = request.url.empty() ? data::kCifar10Url : request.url;
  r.from = request.from;
  r.force = request.force;
  try {
    return Status(data::FetchCifar10(r, progress ? progress : LoggedProgress()));
  } catch (const data::DownloadError& e) {
    throw EngineError(std::string(e.what()) +
                          "; on a machine without network, download cifar-10-binary.tar.gz elsewhere and install it "
                          "with --from FILE",
                      kExitError);
  } catch (const data::DataError& e) {
    throw EngineError(e.what(), kExitConfig);
  } catch (const fs::filesystem_error& e) {
    throw EngineError(e.what(), kExitError);
  }
}

std::vector<DatasetStatus> ListDatasets(const fs::path& dir) {
  const fs::path home = dir.empty() ? data::DefaultDataHome() : dir;
  std::vector<DatasetStatus> out;
  if (!home.empty()) out.push_back(Status(data::CheckCifar10Folder(home / data::kCifar10Folder)));
  if (const auto env = EnvironmentSetting("TRAINBENCH_DATA"); dir.empty() && env) {
    const fs::path folder = *env;
    if (out.empty() || folder != out.front().folder) out.push_back(Status(data::CheckCifar10Folder(folder)));
  }
  return out;
}

}  // namespace trainbench

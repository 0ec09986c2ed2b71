#include "file_sd_target.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "results.h"

namespace trainbench {
namespace fs = std::filesystem;
using nlohmann::json;

FileSdTarget::FileSdTarget(const fs::path& dir, const std::string& address, const std::string& experiment) {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string target = address;
  // A wildcard address is reached by the host's name.
  if (target.rfind("0.0.0.0:", 0) == 0) target = std::string(host) + target.substr(7);
  const char* job = std::getenv("SLURM_ARRAY_JOB_ID");
  const char* task = std::getenv("SLURM_ARRAY_TASK_ID");
  json labels = {{"experiment", experiment}, {"host", host}};
  if (job) labels["slurm_job_id"] = job;
  if (task) labels["slurm_array_task_id"] = task;
  path_ = dir / ("trainbench-" + std::string(host) + "-" + std::to_string(::getpid()) + ".json");
  std::error_code ec;
  fs::create_directories(dir, ec);
  WriteFileAtomically(path_, json::array({{{"targets", {target}}, {"labels", labels}}}).dump(2) + "\n");
  spdlog::info("metrics target written to {}", path_.string());
}

FileSdTarget::~FileSdTarget() {
  std::error_code ec;
  fs::remove(path_, ec);
}

}  // namespace trainbench

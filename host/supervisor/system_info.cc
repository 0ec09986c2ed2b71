#include "system_info.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

namespace trainbench {
namespace {

// The value after ':' (or '=') of the first line of `file` starting with `key`.
std::string FieldOf(const char* file, const std::string& key, char sep) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    const auto pos = line.find(sep);
    if (pos == std::string::npos) continue;
    std::string value = line.substr(pos + 1);
    value.erase(0, value.find_first_not_of(" \t\""));
    while (!value.empty() && (value.back() == '"' || value.back() == ' ')) value.pop_back();
    return value;
  }
  return "";
}

}  // namespace

const char* TrainbenchVersion() { return TRAINBENCH_VERSION; }
const char* TrainbenchGitCommit() { return TRAINBENCH_GIT_COMMIT; }

nlohmann::json CollectSystemInfo() {
  nlohmann::json j;
  j["cpu_model"] = FieldOf("/proc/cpuinfo", "model name", ':');
  j["logical_cores"] = std::thread::hardware_concurrency();
  const std::string mem_kb = FieldOf("/proc/meminfo", "MemTotal", ':');
  j["memory_bytes"] = mem_kb.empty() ? 0 : std::stoll(mem_kb) * 1024;
  j["os"] = FieldOf("/etc/os-release", "PRETTY_NAME", '=');
  struct utsname u {};
  if (uname(&u) == 0) {
    j["kernel"] = std::string(u.sysname) + " " + u.release;
    j["machine"] = u.machine;
  }
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) == 0) j["hostname"] = host;
  j["trainbench_version"] = TrainbenchVersion();
  j["git_commit"] = TrainbenchGitCommit();
  return j;
}

}  // namespace trainbench

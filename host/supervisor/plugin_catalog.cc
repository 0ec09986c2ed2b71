#include "plugin_catalog.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>

#include "environment.h"
#include "sha256.h"
#include "worker_client.h"

namespace trainbench {
namespace fs = std::filesystem;

// The build says which of the project's plugins it left out, and why
// (host/supervisor/CMakeLists.txt): the supervisor knows no device by name.
std::vector<std::string> UnbuiltPlugins() {
#ifdef TRAINBENCH_UNBUILT_PLUGIN
  return {TRAINBENCH_UNBUILT_PLUGIN};
#else
  return {};
#endif
}

std::string KnownOptionalPluginReason(const std::string& name) {
#ifdef TRAINBENCH_UNBUILT_PLUGIN
  if (name == TRAINBENCH_UNBUILT_PLUGIN) return TRAINBENCH_UNBUILT_PLUGIN_REASON;
#endif
  (void)name;
  return "";
}

std::vector<fs::path> PluginSearchPath(const std::vector<std::string>& extra) {
  std::vector<fs::path> dirs(extra.begin(), extra.end());
  if (const auto env = EnvironmentSetting("TRAINBENCH_PLUGIN_PATH")) {
    std::stringstream in(*env);
    std::string item;
    while (std::getline(in, item, ':')) {
      if (!item.empty()) dirs.emplace_back(item);
    }
  }
  // The build tree has the install's layout, so this works in both.
  dirs.push_back((InstallRoot() / TRAINBENCH_PLUGIN_SUBDIR).lexically_normal());
  return dirs;
}

namespace {

// Why `path` may not be trusted to hold code, or "" when it may: writable by
// group or others, or owned by someone other than us or root.
std::string UnsafeBecause(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  if (st.st_uid != ::getuid() && st.st_uid != 0) {
    return "owned by uid " + std::to_string(st.st_uid) + ", neither you nor root";
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return std::string("writable by ") + ((st.st_mode & S_IWOTH) ? "others" : "its group") + " (mode " + mode + ")";
  }
  return "";
}

double DescribeTimeout() {
  const std::optional<std::string> seconds = EnvironmentSetting("TRAINBENCH_DESCRIBE_TIMEOUT");
  return seconds ? std::stod(*seconds) : 60.0;
}

// The .so files of the search path's folders, in order (sorted within a
// folder); those an unsafe file or folder makes refused go to `refused`
// before any of their code runs.
std::vector<std::string> CandidateFiles(const std::vector<fs::path>& dirs, bool allow_insecure,
                                        std::vector<PluginInfo>& refused) {
  std::vector<std::string> files;
  for (const auto& dir : dirs) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    const std::string unsafe_dir = allow_insecure ? "" : UnsafeBecause(dir);
    std::vector<std::string> here;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (!entry.is_regular_file() || entry.path().extension() != ".so") continue;
      const std::string file = entry.path().string();
      const std::string unsafe_file = allow_insecure ? "" : UnsafeBecause(file);
      if (unsafe_dir.empty() && unsafe_file.empty()) {
        here.push_back(file);
        continue;
      }
      PluginInfo info;
      info.path = file;
      info.reason =
          file + ": refused: " +
          (unsafe_file.empty() ? "its folder " + dir.string() + " is " + unsafe_dir : "the file is " + unsafe_file) +
          "; fix with chmod go-w (or chown), or pass --allow-insecure-plugins";
      refused.push_back(info);
    }
    std::sort(here.begin(), here.end());
    files.insert(files.end(), here.begin(), here.end());
  }
  return files;
}

// Each file described by a worker, in as few workers as possible: when one
// dies or hangs, the file it was on is the culprit, and the rest get a
// fresh worker.
std::map<std::string, PluginInfo> Describe(const std::vector<std::string>& files) {
  std::map<std::string, PluginInfo> described;
  size_t next = 0;
  while (next < files.size()) {
    std::vector<std::string> args = {"describe"};
    args.insert(args.end(), files.begin() + static_cast<long>(next), files.end());
    size_t got = 0;
    WorkerExit exit = RunWorker(
        WorkerLaunch{args, "", "", {}},
        [&](const protocol::Event& event) {
          const auto* plugin = std::get_if<protocol::PluginDescribed>(&event);
          if (plugin == nullptr) return;
          PluginInfo info;
          info.path = plugin->path;
          info.loaded = plugin->loaded;
          info.reason = plugin->reason;
          if (plugin->loaded) info.descriptor = plugin->descriptor;
          info.available = plugin->available;
          info.unavailable_reason = plugin->unavailable_reason;
          described[info.path] = info;
          ++got;
        },
        DescribeTimeout());
    next += got;
    if (next >= files.size()) break;
    if (!exit.signaled && exit.code == 0) break;  // the worker stopped early without dying: nothing more to learn
    PluginInfo info;
    info.path = files[next];
    info.reason = files[next] + ": the worker " + (exit.timed_out ? "hung" : "died") +
                  " while loading or describing it (" + exit.Describe() + ")";
    described[info.path] = info;
    ++next;
  }
  return described;
}

}  // namespace

PluginCatalog PluginCatalog::Discover(const std::vector<fs::path>& dirs, bool allow_insecure) {
  PluginCatalog catalog;
  catalog.dirs_ = dirs;
  const std::vector<std::string> files = CandidateFiles(dirs, allow_insecure, catalog.plugins_);
  std::map<std::string, PluginInfo> described = Describe(files);
  // A name is the first file's that has it.
  std::map<std::string, std::string> first_by_name;
  for (const auto& file : files) {
    PluginInfo info = described.count(file) ? described[file] : PluginInfo{};
    if (info.path.empty()) {
      info.path = file;
      info.reason = file + ": not described";
    }
    info.sha256 = data::Sha256OfFile(file);
    if (info.loaded) {
      auto [it, inserted] = first_by_name.emplace(info.name(), file);
      if (!inserted) {
        info.loaded = false;
        info.reason = file + ": shadowed by " + it->second + ", found earlier in the search path";
      }
    }
    catalog.plugins_.push_back(info);
  }
  return catalog;
}

const PluginInfo* PluginCatalog::Find(const std::string& name) const {
  for (const auto& p : plugins_) {
    if (p.loaded && p.name() == name) return &p;
  }
  return nullptr;
}

const PluginInfo* PluginCatalog::FindRejected(const std::string& name) const {
  for (const auto& p : plugins_) {
    if (p.loaded) continue;
    const std::string stem = fs::path(p.path).stem().string();
    if ((p.descriptor.is_object() && p.name() == name) || stem == name || stem == "lib" + name ||
        stem == "libtrainbench_" + name) {
      return &p;
    }
  }
  return nullptr;
}

std::vector<std::string> PluginCatalog::Names(const std::string& kind) const {
  std::vector<std::string> names;
  for (const auto& p : plugins_) {
    if (p.loaded && p.kind() == kind) names.push_back(p.name());
  }
  return names;
}

}  // namespace trainbench

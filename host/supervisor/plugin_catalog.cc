#include "plugin_catalog.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>

#include "worker_client.h"

namespace trainbench {
namespace fs = std::filesystem;

std::string KnownOptionalPluginReason(const std::string& name) {
  if (name == "cuda") {
    return "the cuda plugin is not built here: this trainbench was built against a LibTorch "
           "without CUDA (build against a CUDA LibTorch to get it)";
  }
  return "";
}

std::vector<fs::path> PluginSearchPath(const std::vector<std::string>& extra) {
  std::vector<fs::path> dirs(extra.begin(), extra.end());
  if (const char* env = std::getenv("TRAINBENCH_PLUGIN_PATH"); env != nullptr) {
    std::stringstream in(env);
    std::string item;
    while (std::getline(in, item, ':')) {
      if (!item.empty()) dirs.emplace_back(item);
    }
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back((exe.parent_path() / ".." / "lib" / "trainbench" / "plugins").lexically_normal());
  return dirs;
}

PluginCatalog PluginCatalog::Discover(const std::vector<fs::path>& dirs) {
  PluginCatalog catalog;
  catalog.dirs_ = dirs;
  std::vector<std::string> files;
  for (const auto& dir : dirs) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<std::string> here;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.is_regular_file() && entry.path().extension() == ".so") here.push_back(entry.path().string());
    }
    std::sort(here.begin(), here.end());
    files.insert(files.end(), here.begin(), here.end());
  }

  // Describe in as few workers as possible; when one dies, the file it was on
  // is the culprit, and the rest get a fresh worker.
  std::map<std::string, PluginInfo> described;
  size_t next = 0;
  while (next < files.size()) {
    std::vector<std::string> args = {"describe"};
    args.insert(args.end(), files.begin() + static_cast<long>(next), files.end());
    size_t got = 0;
    WorkerExit exit = RunWorker(args, "", "", [&](const nlohmann::json& event) {
      if (event.value("event", "") != "plugin") return;
      PluginInfo info;
      info.path = event.value("path", "");
      info.loaded = event.value("status", "") == "loaded";
      info.reason = event.value("reason", "");
      if (event.contains("descriptor")) info.descriptor = event["descriptor"];
      if (event.contains("available")) info.available = event["available"].get<bool>();
      info.unavailable_reason = event.value("unavailable_reason", "");
      described[info.path] = info;
      ++got;
    });
    next += got;
    if (next < files.size() && (exit.signaled || exit.code != 0)) {
      PluginInfo info;
      info.path = files[next];
      info.reason = files[next] + ": the worker died while loading or describing it (" + exit.Describe() + ")";
      described[info.path] = info;
      ++next;
    } else if (next < files.size()) {
      break;  // the worker stopped early without dying: nothing more to learn
    }
  }

  std::map<std::string, std::string> first_by_name;
  for (const auto& file : files) {
    PluginInfo info = described.count(file) ? described[file] : PluginInfo{file, false, "not described", {}, {}, ""};
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

std::vector<std::string> PluginCatalog::Names(const std::string& kind) const {
  std::vector<std::string> names;
  for (const auto& p : plugins_) {
    if (p.loaded && p.kind() == kind) names.push_back(p.name());
  }
  return names;
}

}  // namespace trainbench

#include "plugin_listing.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

namespace trainbench {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A plugin's text as one table cell: printable, on one line, no column break.
std::string Cell(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n' || c == '\r' || c == '\t')
      out += ' ';
    else if (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f)
      out += c;
    else
      out += '?';
  }
  return out;
}

// The values an option takes: its choices, or its range.
std::string Values(const json& param) {
  if (param.contains("choices") && param["choices"].is_array()) {
    std::vector<std::string> choices;
    for (const auto& c : param["choices"])
      if (c.is_string()) choices.push_back("`" + Cell(c.get<std::string>()) + "`");
    return fmt::format("{}", fmt::join(choices, ", "));
  }
  if (param.contains("min") && param.contains("max") && param["min"].is_number() && param["max"].is_number())
    return fmt::format("{} to {}", param["min"].get<double>(), param["max"].get<double>());
  return "";
}

std::string Text(const json& j, const char* key) { return j.contains(key) && j[key].is_string() ? j[key] : ""; }

// The plugins listed: all found, or the loaded ones of `names`.
std::vector<PluginRecord> Listed(const Engine& engine, const std::vector<std::string>& names) {
  if (names.empty()) return engine.plugins();
  const std::vector<PluginRecord>& all = engine.plugins();
  for (const std::string& name : names) {
    if (std::none_of(all.begin(), all.end(), [&](const PluginRecord& p) { return p.loaded && p.name == name; }))
      throw EngineError("plugins: no plugin named '" + Cell(name) +
                            "' was loaded from the search path (`trainbench plugins` lists what was found)",
                        kExitConfig);
  }
  std::vector<PluginRecord> listed;
  for (const auto& p : all)
    if (p.loaded && std::find(names.begin(), names.end(), p.name) != names.end()) listed.push_back(p);
  return listed;
}

}  // namespace

std::string PluginsText(const Engine& engine, const std::vector<std::string>& names) {
  std::string out = "search path:\n";
  for (const auto& d : engine.search_path())
    out += fmt::format("  {}{}\n", d.string(), fs::is_directory(d) ? "" : "  (missing)");
  out += "\n";
  for (const auto& p : Listed(engine, names)) {
    if (!p.loaded) {
      out += fmt::format("REJECTED {}\n", p.reason.empty() ? p.path : p.reason);
      continue;
    }
    std::string availability;
    if (p.available.has_value())
      availability = *p.available ? "  [available]" : "  [unavailable: " + p.unavailable_reason + "]";
    out += fmt::format("{:<7} {:<12} {:<8} {}{}\n        {}  (ABI {}, {})\n", p.kind, p.name, p.version, p.description,
                       availability, p.path, p.abi, p.fingerprint);
    if (p.device.is_object() && p.device.value("accelerator", false)) {
      const auto option = [&](const char* key) {
        const std::string value = Text(p.device, key);
        return value.empty() ? std::string("none") : value;
      };
      out += fmt::format("        accelerator: one per rank, selected by option {}; graph option {}\n",
                         option("index_option"), option("graph_option"));
    }
    for (const auto& param : p.params) {
      std::string extra;
      if (param.contains("choices"))
        extra = " {" + fmt::format("{}", fmt::join(param["choices"].get<std::vector<std::string>>(), ",")) + "}";
      if (param.contains("min"))
        extra += fmt::format(" [{}, {}]", param["min"].get<double>(), param["max"].get<double>());
      out += fmt::format("          {:<16} {:<6} default {:<10} {}{}\n", Text(param, "name"), Text(param, "type"),
                         param.contains("default") ? param["default"].dump() : "", Text(param, "doc"), extra);
    }
  }
  if (names.empty())
    for (const std::string& note : engine.MissingPluginNotes()) out += "\nnote: " + note + "\n";
  return out;
}

std::string PluginsMarkdown(const Engine& engine, const std::vector<std::string>& names) {
  std::string out;
  std::vector<std::string> rejected;
  for (const auto& p : Listed(engine, names)) {
    if (!p.loaded) {
      rejected.push_back(Cell(p.reason.empty() ? p.path : p.reason));
      continue;
    }
    out += fmt::format("### `{}` ({} plugin, version {}, SDK ABI {})\n\n{}\n\n", Cell(p.name), Cell(p.kind),
                       Cell(p.version), Cell(p.abi), Cell(p.description));
    if (p.params.empty()) {
      out += "No options.\n\n";
      continue;
    }
    out += "| option | type | default | values | what it does |\n|---|---|---|---|---|\n";
    for (const auto& param : p.params) {
      out += fmt::format("| `{}` | {} | `{}` | {} | {} |\n", Cell(Text(param, "name")), Cell(Text(param, "type")),
                         Cell(param.contains("default") ? param["default"].dump() : ""), Values(param),
                         Cell(Text(param, "doc")));
    }
    out += "\n";
  }
  if (!rejected.empty()) {
    out += "### Rejected\n\n";
    for (const auto& r : rejected) out += "- " + r + "\n";
    out += "\n";
  }
  if (names.empty())
    for (const std::string& note : engine.MissingPluginNotes()) out += "Note: " + Cell(note) + "\n\n";
  return out;
}

std::string PluginsJson(const Engine& engine, const std::vector<std::string>& names) {
  json doc{{"search_path", json::array()},
           {"plugins", json::array()},
           {"notes", names.empty() ? engine.MissingPluginNotes() : std::vector<std::string>{}}};
  for (const auto& d : engine.search_path()) doc["search_path"].push_back(d.string());
  for (const auto& p : Listed(engine, names)) {
    json j{{"path", p.path}, {"sha256", p.sha256}, {"loaded", p.loaded}};
    if (!p.loaded) {
      j["reason"] = p.reason;
    } else {
      j.update({{"name", p.name},
                {"kind", p.kind},
                {"version", p.version},
                {"abi", p.abi},
                {"fingerprint", p.fingerprint},
                {"description", p.description},
                {"options", p.params}});
      if (p.available.has_value()) j["available"] = *p.available;
      if (!p.unavailable_reason.empty()) j["unavailable_reason"] = p.unavailable_reason;
      if (!p.device.is_null()) j["device"] = p.device;
    }
    doc["plugins"].push_back(std::move(j));
  }
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace trainbench

#pragma once
// The engine's log lines with structured fields. SetUpLogging (engine.h)
// picks the format; with --log-format json every line is one JSON object
// whose keys are the fields of the scopes around it and of the line itself,
// beside time, level and message. Text lines show only the message.
//
//   const LogScope cell({{"cell", 3}, {"model", "resnet18"}});
//   LogWith(spdlog::level::info, {{"event", "progress"}, {"epoch", 2}}, "epoch {} ...", 2);

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace trainbench {

/// SetUpLogging (engine.h): "text" or "json"; throws std::invalid_argument
/// for another format.
void ConfigureLog(const std::string& format);

/// Adds `fields` to every line logged on this thread while it lives (scopes
/// nest; an inner one's keys win).
class LogScope {
 public:
  explicit LogScope(nlohmann::json fields);
  ~LogScope();
  LogScope(const LogScope&) = delete;
  LogScope& operator=(const LogScope&) = delete;

 private:
  nlohmann::json fields_;
};

/// The fields of the scopes open on this thread, merged.
nlohmann::json CurrentLogFields();

/// One line with its own fields (an `event` name among them).
template <typename... Args>
void LogWith(spdlog::level::level_enum level, nlohmann::json fields, fmt::format_string<Args...> format,
             Args&&... args) {
  const LogScope scope(std::move(fields));
  spdlog::log(level, format, std::forward<Args>(args)...);
}

}  // namespace trainbench

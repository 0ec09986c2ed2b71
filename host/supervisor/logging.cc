#include "logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <unistd.h>

#include <memory>
#include <stdexcept>
#include <vector>

namespace trainbench {
using nlohmann::json;

namespace {

thread_local std::vector<const json*> t_scopes;

std::string Dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

// %* : the line's fields and message, the inside of a JSON object:
// "event":...,"experiment":...,"message":"...". Lines without an event name
// are "error" at error level and above, else "log".
class JsonFieldsFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    json fields = CurrentLogFields();
    if (!fields.contains("event")) fields["event"] = msg.level >= spdlog::level::err ? "error" : "log";
    std::string out = "\"event\":" + Dump(fields["event"]);
    for (const auto& [key, value] : fields.items()) {
      if (key == "event" || key == "time" || key == "level" || key == "message") continue;
      out += "," + Dump(key) + ":" + Dump(value);
    }
    out += ",\"message\":" + Dump(std::string(msg.payload.data(), msg.payload.size()));
    dest.append(out.data(), out.data() + out.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JsonFieldsFlag>(); }
};

}  // namespace

LogScope::LogScope(json fields) : fields_(std::move(fields)) { t_scopes.push_back(&fields_); }

LogScope::~LogScope() {
  // Scopes end in reverse order on their own thread.
  if (!t_scopes.empty() && t_scopes.back() == &fields_) t_scopes.pop_back();
}

json CurrentLogFields() {
  json merged = json::object();
  for (const json* scope : t_scopes)
    if (scope->is_object()) merged.update(*scope);
  return merged;
}

void ConfigureLog(const std::string& format) {
  if (format != "json" && format != "text")
    throw std::invalid_argument("--log-format must be text or json, not '" + format + "'");
  // stderr: stdout carries the results table; the sink colours only a terminal.
  auto logger = spdlog::get("trainbench");
  if (!logger) logger = spdlog::stderr_color_mt("trainbench");
  spdlog::set_default_logger(logger);
  if (format == "json") {
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<JsonFieldsFlag>('*').set_pattern(R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l",%*})");
    spdlog::set_formatter(std::move(formatter));
  } else {
    spdlog::set_pattern(isatty(fileno(stderr)) ? "%H:%M:%S %^%l%$ %v" : "%Y-%m-%dT%H:%M:%S.%e%z %l %v");
  }
}

}  // namespace trainbench

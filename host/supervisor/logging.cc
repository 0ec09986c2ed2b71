#include "logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace trainbench {
namespace {

// %* : the message as a JSON string literal (quotes and escapes included).
class JsonMessageFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const std::string quoted = nlohmann::json(std::string(msg.payload.data(), msg.payload.size()))
                                   .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    dest.append(quoted.data(), quoted.data() + quoted.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JsonMessageFlag>(); }
};

}  // namespace

void SetUpLogging(const std::string& format) {
  // stderr: stdout carries the results table; the sink colours only a terminal.
  auto logger = spdlog::stderr_color_mt("trainbench");
  spdlog::set_default_logger(logger);
  if (format == "json") {
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<JsonMessageFlag>('*').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","message":%*})");
    spdlog::set_formatter(std::move(formatter));
  } else if (format == "text") {
    spdlog::set_pattern(isatty(fileno(stderr)) ? "%H:%M:%S %^%l%$ %v" : "%Y-%m-%dT%H:%M:%S.%e%z %l %v");
  } else {
    throw std::invalid_argument("--log-format must be text or json, not '" + format + "'");
  }
}

}  // namespace trainbench

// libFuzzer target: the experiment YAML loader. Any input must end in an
// Experiment or a ConfigError (a one-line message with a position); any other
// exception, a crash, a hang or a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "config_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    trainbench::ParseExperiment(text, "fuzz.yaml", "/tmp");
  } catch (const trainbench::ConfigError& e) {
    const std::string message = e.what();
    if (message.rfind("fuzz.yaml", 0) != 0 || message.find('\n') != std::string::npos) __builtin_trap();
  }
  return 0;
}

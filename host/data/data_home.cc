#include "data_home.h"

#include <cstdlib>

namespace trainbench::data {
namespace fs = std::filesystem;

namespace {
// The variable's value when it is an absolute path (the XDG rule: a
// relative one is ignored), else empty.
fs::path AbsoluteEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return {};
  fs::path path(value);
  return path.is_absolute() ? path : fs::path();
}
}  // namespace

fs::path DefaultDataHome() {
  if (fs::path xdg = AbsoluteEnv("XDG_DATA_HOME"); !xdg.empty()) return xdg / "trainbench";
  if (fs::path home = AbsoluteEnv("HOME"); !home.empty()) return home / ".local" / "share" / "trainbench";
  return {};
}

fs::path DefaultCifar10Dir() {
  fs::path home = DefaultDataHome();
  return home.empty() ? home : home / kCifar10Folder;
}

}  // namespace trainbench::data

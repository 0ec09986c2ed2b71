#pragma once
/// @file
/// Per-machine caches: what a plugin may keep between runs on one machine
/// (choices that depend on the GPU and its libraries, never on the run, such
/// as autotuned convolution engines), where, and in what shape, so that the
/// host's `trainbench cache` lists and clears any plugin's caches without
/// knowing the plugin. Header-only: nothing here crosses the plugin boundary.
///
/// The contract:
/// - A cache file is CacheDirectory()/NAME.json, NAME chosen by the plugin
///   (start it with the plugin's own prefix; only letters, digits, '.', '-'
///   and '_'). It holds one JSON object with at least "machine" (an object of
///   strings: everything its entries depend on besides their key) and
///   "entries" (an object: one member per cached choice).
/// - While writing, a plugin may keep NAME.json.lock and NAME.json.tmp.DIGITS
///   beside it; it replaces NAME.json by a rename, so a reader never sees half
///   a file.
/// - A missing, unreadable or stale file is rebuilt by the plugin (with a
///   warning); `trainbench cache --clear` removes these files, and nothing
///   else, at any time between runs.

#include <cstdlib>
#include <filesystem>

namespace trainbench::sdk {

/// Where per-machine caches live: $XDG_CACHE_HOME/trainbench, else
/// $HOME/.cache/trainbench (the XDG default); empty when neither is set or
/// either is a relative path (which the XDG specification says to ignore).
/// Reads the environment: call it before starting threads that change it.
inline std::filesystem::path CacheDirectory() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && *xdg != '\0' && std::filesystem::path(xdg).is_absolute())
    return std::filesystem::path(xdg) / "trainbench";
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home != '\0' && std::filesystem::path(home).is_absolute())
    return std::filesystem::path(home) / ".cache" / "trainbench";
  return {};
}

/// How a cache file's name ends.
inline constexpr const char* kCacheFileExtension = ".json";

}  // namespace trainbench::sdk

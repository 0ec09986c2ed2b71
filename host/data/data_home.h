#pragma once
// Where trainbench keeps data a user fetched (`trainbench data fetch`) and
// where a config finds it when it names no folder: the XDG base-directory
// rule, as Hugging Face datasets and pip use it.

#include <filesystem>

namespace trainbench::data {

/// The folder CIFAR-10's binary files live in inside a data folder: the
/// official archive's own layout.
inline constexpr const char* kCifar10Folder = "cifar-10-batches-bin";

/// $XDG_DATA_HOME/trainbench when XDG_DATA_HOME is an absolute path, else
/// $HOME/.local/share/trainbench; empty when neither variable is an absolute
/// path. The packaged service sets XDG_DATA_HOME=/var/lib, so its data lives
/// in /var/lib/trainbench. Reads the environment on each call.
std::filesystem::path DefaultDataHome();

/// DefaultDataHome() / kCifar10Folder, or empty when there is no data home.
std::filesystem::path DefaultCifar10Dir();

}  // namespace trainbench::data

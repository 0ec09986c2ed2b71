#pragma once
// What machine a run happened on, for results.json.

#include <nlohmann/json.hpp>

namespace trainbench {

/// CPU model, logical cores, memory, OS, kernel, hostname, trainbench version
/// and git commit. GPU and LibTorch details come from the workers.
nlohmann::json CollectSystemInfo();

/// trainbench's version and the git commit it was built from.
const char* TrainbenchVersion();
const char* TrainbenchGitCommit();

}  // namespace trainbench

#pragma once
// What a plugin's rules chose, for its Model::PathTaken (SDK 1.4): every
// decision point counts its choice by rule, as the host runs it. A captured
// step runs no host code when it is replayed, so there its capture counts
// (with the warm-up steps before it), not each step. Plain C++ (the CUDA
// kernel files count their launch forms too); thread-safe.
#include <cstdint>
#include <string>

namespace trainbench::plugins {

/// Counts `choice` for `rule` (both string literals: the log keeps the
/// pointers).
void CountPath(const char* rule, const char* choice) noexcept;

/// Every rule's choices and their counts, as a JSON object
/// ({"rule": {"choice": count}}).
std::string PathJson();

/// Forgets every count (tests).
void ResetPathLog() noexcept;

}  // namespace trainbench::plugins

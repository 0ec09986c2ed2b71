#pragma once
// The TRAINBENCH_* environment variables trainbench reads, in one table: the
// only settings outside the experiment file and the command line. Each is
// user-facing or a documented test hook; those that can change a figure are
// recorded in every cell's configuration (and so in --resume's key). The
// table generates docs/config-reference.md's section and checks the values
// before a run starts.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace trainbench {

struct EnvironmentVariable {
  const char* name;
  const char* values;   ///< what it takes, as the docs and the error say it
  const char* meaning;  ///< what it does
  bool recorded;        ///< may change a figure: recorded in each cell's configuration
  bool (*valid)(const std::string& value);
};

/// Every variable trainbench, its worker or its plugins read.
const std::vector<EnvironmentVariable>& EnvironmentVariables();

/// Throws std::invalid_argument (one line: the variable and the values it
/// takes) for a variable of the table set to a value it does not take.
void CheckEnvironment();

/// The one way trainbench reads a variable of the table: its value when set
/// and not empty, checked first against what it takes (std::invalid_argument,
/// CheckEnvironment's line, when it takes no such value), so that a reader
/// never acts on a value the run would refuse. `name` must be in the table
/// (std::logic_error otherwise).
std::optional<std::string> EnvironmentSetting(const char* name);

/// TRAINBENCH_* variables that are set but not in the table (a leftover
/// setting that does nothing), by name.
std::vector<std::string> UnknownEnvironment();

/// A variable of LibTorch or a library under it (OpenMP, MKL, oneDNN, CUDA,
/// cuBLAS, cuDNN, NCCL, the allocator) that can change a figure: recorded
/// when set, never checked.
struct OutsideVariable {
  const char* name;  ///< the name, or with `prefix` every name it begins
  bool prefix;
  const char* meaning;
};

/// The declared list of outside variables recorded beside the table's.
const std::vector<OutsideVariable>& OutsideVariables();

/// The recorded variables that are set, name -> value (empty: none): the
/// table's marked recorded, and the outside ones.
nlohmann::json RecordedEnvironment();

/// docs/config-reference.md's section on the environment.
std::string EnvironmentReference();

}  // namespace trainbench

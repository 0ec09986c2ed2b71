#pragma once
// What a cell's rules chose for the steps it ran, for its record
// (results.json's `path_taken`): the model's own (SDK 1.4's
// Model::PathTaken) and the worker's (the captured graphs, their memsets
// rewritten as kernels, the model's working copies).

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "mixed_precision.h"
#include "step_timer.h"
#include "trainbench/sdk/model.h"

namespace trainbench::worker {

/// A model's path out of the SDK's bounds; what() says how, for the cell's
/// one-line failure.
class PathRefused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// {"model": the model's answer} (asked only of plugins of ABI minor 4 or
/// later; a refusal is "model_error" instead, never a choice), and
/// {"worker": ...}: the captures where the step was captured (`graphed` not
/// null), and "working_copies" where the model reads parameters through
/// them (`copies` not null, with groups): how many parameters and groups,
/// and whether they were updated in the backward (mixed-precision SGD) or
/// cast. Throws PathRefused for an answer that is not a JSON object of at
/// most 64 KiB in the SDK's shape (names to numbers, strings, booleans or
/// objects of those; at most 8 objects deep and 4,096 values): nothing a
/// plugin returns can make the record huge or too deep for other tools.
nlohmann::json PathTaken(sdk::Model& model, int abi_minor, const GraphedStep* graphed, const MixedPrecision* copies);

}  // namespace trainbench::worker

#pragma once
// Internal pieces shared by the engine API's implementation files.

#include <nlohmann/json.hpp>

#include "experiment.h"
#include "trainbench/engine.h"
#include "trainbench/protocol/cell_record.h"

namespace trainbench {

struct ExperimentPlan::Impl {
  Experiment experiment;
};

/// A results.json cell as the API's CellResult.
CellResult ToCellResult(const protocol::CellRecord& cell);

}  // namespace trainbench

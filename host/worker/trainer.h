#pragma once
// The training loop of one cell: one model on one device, timed.

#include <chrono>

#include "event_sink.h"
#include "trainbench/protocol/cell_spec.h"

namespace trainbench::worker {

using protocol::CellSpec;

/// Runs the cell and reports through `sink`: "started", "progress" (at least
/// every progress_interval_seconds), "epoch" after each epoch, then exactly
/// one of "result", "skipped" (device unavailable) or "error". Returns the
/// process exit code: 0 for result/skipped, 1 for error. Exceptions inside
/// are reported as "error"; a crash is noticed by the host.
/// `started`: when the worker started (the start of setup_seconds).
int RunCell(const CellSpec& spec, EventSink& sink,
            std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now());

}  // namespace trainbench::worker
